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
