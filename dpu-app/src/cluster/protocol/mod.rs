//! The protocol: one single-threaded state machine per node ([`node::Node`], driven by
//! `poll(now)`) and the roles it dispatches to.

mod ack;
mod connect;
pub mod get;
mod holder;
mod host_directory;
mod host_memory;
mod jobs;
pub mod lease;
pub mod links;
mod membership;
pub mod node;
mod noisy;
pub mod peer;
pub mod pool;
pub mod repair;
mod replicate;
pub mod slotjob;
pub mod slots;
pub mod stats;
mod time;
pub mod wr;
pub mod write;
