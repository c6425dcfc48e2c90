//! The cluster: what every node of a replicated deployment must agree on, and how a
//! node stamps its writes.
//!
//! [`config`] reads and checks the cluster configuration file (`prescient-dpu serve
//! --config cluster.toml --node N`) and hashes what all nodes must share; [`hlc`] issues
//! write versions from a hybrid logical clock that never moves backwards, not even
//! across a restart.

pub mod config;
pub mod hlc;
