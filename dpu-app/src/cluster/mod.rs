//! The cluster (being assembled from its parts): configuration, versions, rendezvous,
//! and the on-file formats of fragment logs, stores and outcome tables.

pub mod config;
pub mod entry;
pub mod file;
pub mod hello;
pub mod hlc;
pub mod limits;
pub mod log;
pub mod outcome;
pub mod record;
pub mod rendezvous;
pub mod store;
