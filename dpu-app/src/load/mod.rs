//! Load for an in-process cluster: the write stream each node's host replays
//! ([`keys`]), the readers' caches ([`cache`]), the invalidation measurement
//! ([`watch`]), the driver that steps the cluster and its hosts from one thread on
//! the real clock ([`driver`]), starting a cluster for it ([`setup`]) and summing what
//! the nodes counted ([`tally`]). `prescient-dpu bench cluster` and `prescient-dpu demo`
//! are both built on it.
//!
//! Everything here is host-side code of the emulated deployment: it talks to the
//! cluster only through each node's shared region (queue pairs, arena buffers,
//! directory words) and reads the nodes' statistics read-only. Every table it keeps
//! while running is sized when a run starts; nothing grows with the run's length.

pub mod cache;
pub mod cpu;
pub mod driver;
pub mod keys;
pub mod setup;
pub mod tally;
pub mod watch;

use std::path::PathBuf;

/// Why a load run could not start or went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// A file or folder the run needs could not be made or read.
    #[error("cannot {what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The cluster configuration the run built was refused (a bug in the run's
    /// settings, or an option out of range).
    #[error("the run's cluster configuration: {0}")]
    Config(#[from] crate::cluster::config::ConfigError),
    /// The in-process cluster did not start.
    #[error("the in-process cluster did not start: {0}")]
    Cluster(#[from] crate::cluster::NodeError),
    /// A host call failed (queue pair, arena, ring).
    #[error("node {node}'s host: {source}")]
    Host {
        /// The node.
        node: u8,
        /// The shim's error.
        source: prescient_shim::ShimError,
    },
    /// The nodes did not all connect in time.
    #[error("the cluster's nodes did not all connect within {seconds} s (network model: {network}); the machine may be overloaded, or the timings do not fit the latency")]
    NotConnected {
        /// Seconds waited.
        seconds: u64,
        /// The network model's name.
        network: &'static str,
    },
    /// The nodes never granted their hosts a directory lease, so readers could not use
    /// the cache directory.
    #[error("node {node} never granted its host a directory lease within {seconds} s; lease_us may be too short for the network model's latency")]
    NoLease {
        /// The node.
        node: u8,
        /// Seconds waited.
        seconds: u64,
    },
    /// The trace file is unreadable (a missing one is not an error: the run falls back
    /// to a synthetic stream).
    #[error("trace {path}: {source}")]
    Trace {
        /// The trace.
        path: PathBuf,
        /// Why.
        source: prescient_models::ModelError,
    },
    /// An option is out of range.
    #[error("{option} = {value}: {allowed}")]
    Option {
        /// The option.
        option: &'static str,
        /// The value given.
        value: String,
        /// What is allowed.
        allowed: String,
    },
    /// Sealing or striping refused its input in the codec measurement.
    #[error("codec measurement: {0}")]
    Codec(String),
}
