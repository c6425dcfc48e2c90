//! `prescient-dpu`: the offload engine.
//!
//! Runs on the Arm cores of a BlueField DPU, or as an ordinary process in
//! CPU-emulation mode. It maps each host's shared region, polls every queue pair,
//! validates every descriptor against the region's shape and its own in-flight
//! table, and serves each request as a node of a cluster: a write is sealed, striped
//! and replicated to the key's holders while every host's cache directory is kept
//! honest; a GET rebuilds the newest committed value from any k fragments. Without a
//! cluster file each region is served by a cluster of one node.
//!
//! Module map, top down: [`cluster`] (the nodes: [`cluster::run::process`] is the
//! `serve` loop, [`cluster::protocol::node::Node`] one node's state machine) ->
//! [`region_server`] (one host: attach, recovery, host death) -> [`queue`] (one queue
//! pair: take, complete) and [`door`] (every check a descriptor passes, with
//! [`inflight`], the buffers held). Beside them: [`seal`] and [`stripe`] (the codecs),
//! [`fabric`] (RDMA: verbs and the emulated NIC), [`limits`] (every limit, once),
//! [`metrics`], [`histogram`] (latencies per stage in fixed memory), [`exposition`]
//! and [`metrics_http`] (`serve --metrics`: the Prometheus page and its listener), [`log_limit`],
//! [`signal`] and [`error`]. Commands: [`sim`] (the deterministic simulator), [`demo`]
//! (the README's main command), [`load`] (an in-process cluster driven from its
//! hosts), [`mod@bench`] (the ring and the cluster against references), [`soak`] (a
//! kill -9 soak of a cluster of processes) and [`fill`] (a node's store filled).
#![deny(unsafe_code)]

pub mod bench;
pub mod cluster;
pub mod demo;
pub mod door;
pub mod error;
pub use error::Error;
pub mod exposition;
pub mod fabric;
pub mod fill;
pub mod histogram;
pub mod inflight;
pub mod limits;
pub mod load;
pub mod log_limit;
pub mod metrics;
pub mod metrics_http;
pub mod queue;
pub mod region_server;
pub mod seal;
pub mod signal;
pub mod sim;
pub mod soak;
pub mod stripe;
