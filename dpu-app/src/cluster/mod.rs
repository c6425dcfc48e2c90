//! The cluster: what every node of a replicated deployment must agree on, and how a
//! node stamps its writes.
//!
//! [`config`] reads and checks the cluster configuration file (`prescient-dpu serve
//! --config cluster.toml --node N`) and hashes what all nodes must share.

pub mod config;
