//! The protocol: one single-threaded state machine per node ([`node::Node`], driven by
//! `poll(now)`) and the roles it dispatches to.
//!
//! Three layers, each importing only the ones below it (`ci/import_cycles.py` checks
//! that no file of `cluster/` imports itself back):
//! - [`node`] on top: `Node` owns every role and the node's shared equipment; its
//!   children `node/{read,hold,write,repair,jobs,leases,membership,sequencer,apply}.rs` are the
//!   dispatch, one per role: each builds its role's context from split borrows of the
//!   node's fields, calls the role, and passes the effects it returns on to the roles
//!   they are for (the only place one role's doing reaches another's).
//! - The roles, each a struct that owns its state and sees the node only through a
//!   narrow context: the reader (`get.rs`, [`get::Reader`]), the holder of other
//!   writers' fragments (`holder.rs`), the writer (`replicate.rs`, one write's state
//!   machine in [`mod@write`]), the repairer ([`repair`]), predictor leases ([`lease`]),
//!   directory jobs (`jobs.rs`, one job's rounds in [`slotjob`]), membership with
//!   connection setup (`membership.rs`, `connect.rs`, the fences of silent writers in
//!   `fence.rs`), and in sequencer mode the
//!   sequencer ([`sequencer`]) and the ordered apply ([`apply`]). No role file imports
//!   another role's file or `node.rs`.
//! - The shared lower modules the roles and the node both use: [`slots`] (generation
//!   slot tables, typed handles), [`links`] (the peers; the one way work requests
//!   leave), [`stall`] (what holds the order back), [`pacer`] (a peer's congestion window and the requests it holds), [`peer`] (one peer's state, a resync cursor's rewind), [`wr`] (work-request
//!   ids), [`pool`] (staging pools, the node's `Pools`), [`stats`], `noisy.rs` (the
//!   rate-limited conditions), `ack.rs` (the acknowledgement immediate), `time.rs`
//!   (`Now`), `host_memory.rs` and `host_directory.rs` (the host's region and
//!   directory), [`mailbox`] (what the node needs of the rendezvous, whose mailboxes
//!   `run/` implements: the protocol imports nothing of `run/`).

mod ack;
pub mod apply;
mod connect;
mod fence;
pub mod get;
mod holder;
mod host_directory;
mod host_memory;
mod jobs;
pub mod lease;
pub mod ledgers;
pub mod links;
pub mod mailbox;
mod membership;
pub mod node;
mod noisy;
pub mod pacer;
pub mod peer;
pub mod pool;
pub mod repair;
mod replicate;
pub mod rollbacks;
pub mod sequencer;
pub mod slotjob;
pub mod slots;
pub mod stall;
pub mod stats;
mod time;
pub mod wr;
pub mod write;
