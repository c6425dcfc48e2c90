//! The cluster: DPU apps that replicate every write of their hosts, erasure-coded and
//! encrypted, across each other's file-backed fragment logs, and keep every host's
//! cache directory honest while they do (DESIGN.md, "A write, end to end").
//!
//! Layers, bottom up:
//! - formats and files: [`entry`] (log entry header), [`log`] (a writer's log on a
//!   holder), [`record`] / [`store`] (the fragment store peers READ for GETs),
//!   [`outcome`] (a writer's durable record of what it decided), [`control`] (the
//!   heartbeat block), [`hello`] (connection setup messages), [`crc_combine`] (entry
//!   checksums from the CRCs of their parts);
//! - configuration and time: [`config`] (the cluster file), [`hlc`] (versions);
//! - the protocol, as one single-threaded state machine per node ([`node::Node`],
//!   driven by `poll(now)`): [`slotjob`] (directory CAS jobs), [`peer`], [`mod@write`],
//!   and the roles in `replicate.rs`, `holder.rs`, `get.rs`, `lease.rs`,
//!   `membership.rs`, `connect.rs`;
//! - running it: [`rendezvous`] (hello delivery in one process or over TCP),
//!   [`inprocess`] (a whole cluster in one process, stepped or threaded, on a real or a
//!   manual clock) and [`process`] (`prescient-dpu serve --config`).
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
pub mod control;
pub mod crc_combine;
pub mod entry;
pub mod file;
pub mod get;
pub mod hello;
pub mod hlc;
mod host_memory;
pub mod inprocess;
pub mod lease;
pub mod limits;
pub mod log;
pub mod node;
pub mod outcome;
pub mod peer;
pub mod pool;
pub(crate) mod preallocate;
pub mod process;
pub mod record;
pub mod rendezvous;
pub mod repair;
pub mod slotjob;
pub mod stats;
pub mod store;
pub mod wr;
pub mod write;

mod connect;
mod holder;
mod membership;
mod replicate;

use std::path::PathBuf;

pub use node::{files_bytes, Node, NodeSetup, Now};

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// The cluster configuration is wrong.
    #[error(transparent)]
    Config(config::ConfigError),
    /// A file or folder of the node could not be used.
    #[error("cannot {what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The host region could not be served.
    #[error(transparent)]
    Dpu(crate::error::DpuError),
    /// The host region does not fit the cluster.
    #[error("region {path} does not fit this cluster: {why}")]
    Region {
        /// The region.
        path: PathBuf,
        /// What is wrong and what to do.
        why: String,
    },
    /// The fabric refused a resource.
    #[error("fabric: {0}")]
    Fabric(crate::fabric::FabricError),
    /// Keys or the key epoch.
    #[error(transparent)]
    Seal(crate::seal::SealError),
    /// The erasure code.
    #[error(transparent)]
    Stripe(crate::stripe::StripeError),
    /// A fragment log.
    #[error(transparent)]
    Log(log::LogError),
    /// The fragment store.
    #[error(transparent)]
    Store(store::StoreError),
    /// The outcome table.
    #[error(transparent)]
    Outcome(outcome::OutcomeError),
    /// The version floor.
    #[error(transparent)]
    Hlc(hlc::HlcError),
    /// The predictor model.
    #[error("predictor model {path}: {source}")]
    Model {
        /// The file.
        path: PathBuf,
        /// Why.
        source: prescient_models::ModelError,
    },
    /// Connection setup.
    #[error(transparent)]
    Rendezvous(rendezvous::RendezvousError),
}
