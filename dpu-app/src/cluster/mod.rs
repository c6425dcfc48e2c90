//! The cluster: DPU apps that replicate every write of their hosts, erasure-coded and
//! encrypted, across each other's file-backed fragment logs, and keep every host's
//! cache directory honest while they do (DESIGN.md, "A write, end to end").
//!
//! Layers, bottom up, one folder each:
//! - [`mod@format`]: formats and files: [`format::entry`] (log entry header),
//!   [`format::log`] (a writer's log on a holder), [`format::record`] /
//!   [`format::store`] (the fragment store peers READ for GETs), [`format::outcome`]
//!   (a writer's durable record of what it decided), [`format::control`] (the
//!   heartbeat block), [`format::hello`] (connection setup messages),
//!   [`format::crc_combine`] (entry checksums from the CRCs of their parts),
//!   [`format::fates`] (what became of the sequencer stamps a node took) and
//!   [`format::feed`] (a node's change feed);
//! - configuration and time, here: [`config`] (the cluster file), [`placement`]
//!   (storage nodes, cache-only members, and each key's holders), [`hlc`]
//!   (versions), [`sequence`] (sequencer stamps), [`order`] (their ordered apply),
//!   [`holders_rule`] (a stamp's fate from its holders' ledgers); every limit is in
//!   [`crate::limits`];
//! - [`protocol`]: one single-threaded state machine per node
//!   ([`protocol::node::Node`], driven by `poll(now)`) and its roles;
//! - [`run`]: [`run::rendezvous`] (hello delivery in one process or over TCP),
//!   [`run::inprocess`] (a whole cluster in one process), [`run::one_node`] (a
//!   one-node cluster per region) and [`run::process`] (the `prescient-dpu serve`
//!   loop, with [`run::idle`], how it sleeps and is woken).
//!
//! The protocol in one paragraph. A write is stamped with a hybrid-logical-clock
//! version, sealed and striped in place; fragment i goes to holder i of the key, and,
//! in the same round trip, every host's directory slot for the key is CASed to
//! `Pending` (versions only move forward, so a late mark never hides a newer write).
//! When `quorum` holders have persisted their fragment the writer decides Committed
//! (durably, in its outcome table) and tells the holders; once `m + 1` of them have
//! persisted the decision and every mark is settled, the host gets its completion and
//! the marks turn `Invalid`. A directory that cannot be reached is excluded only once
//! its lease has surely lapsed (see `control.rs`); a dead writer's marks are cleared
//! by whoever notices. Any k fragments of a committed write rebuild it.

pub mod config;
pub mod format;
pub mod hlc;
pub mod holders_rule;
pub mod order;
pub mod placement;
pub mod protocol;
pub mod run;
pub mod sequence;

pub use protocol::node::{files_bytes, Node, NodeSetup, Now};
