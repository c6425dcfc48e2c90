//! The cluster: how DPU nodes find each other and set up one RC queue pair per pair.
//!
//! This branch holds only the rendezvous: [`hello`] (the checked 256-byte message that
//! carries a node's queue pair endpoint and regions) and [`rendezvous`] (the mailboxes
//! that carry Hellos, in process and over TCP).

pub mod hello;
pub mod rendezvous;
