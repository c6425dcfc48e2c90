//! The cluster (being assembled from its parts): configuration, versions, rendezvous.

pub mod config;
pub mod hello;
pub mod hlc;
pub mod rendezvous;
