//! `prescient-dpu`: the offload engine.
//!
//! Runs on the Arm cores of a BlueField DPU, or as an ordinary process in
//! CPU-emulation mode. It maps each host's shared region, polls every queue pair,
//! validates every descriptor against the region's shape and its own in-flight
//! table, and passes each request through a [`pipeline::Pipeline`] of stages.
//!
//! Module map: [`serve`] (the loop) -> [`region_server`] (one host: attach, recovery,
//! host death) -> [`queue`] (one queue pair: take, complete) and [`door`] (every
//! check a descriptor passes) ->
//! [`pipeline`] (stages, e.g. [`sequence`]). [`mod@bench`] measures the ring and the
//! cluster against references; [`load`] drives an in-process cluster from its hosts;
//! [`demo`] runs it for the README's main command.
//! [`cluster`] holds what the nodes of a replicated cluster share (the configuration
//! file, version stamps); [`histogram`] keeps latencies per stage in fixed memory.
#![deny(unsafe_code)]

pub mod bench;
pub mod cluster;
pub mod delay;
pub mod demo;
pub mod door;
pub mod error;
pub mod fabric;
pub mod fill;
pub mod histogram;
pub mod inflight;
pub mod limits;
pub mod load;
pub mod log_limit;
pub mod metrics;
pub mod pipeline;
pub mod predict;
pub mod queue;
pub mod region_server;
pub mod seal;
pub mod sequence;
pub mod serve;
pub mod signal;
pub mod sim;
pub mod soak;
pub mod stripe;
