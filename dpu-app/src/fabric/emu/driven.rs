//! What the emulated NIC's timers do with a queue pair: look whether it has requests
//! waiting for their delivery time or on a timer, and perform those that have come due.
//!
//! In process there is no NIC thread: polls and waits on a completion queue drive the
//! queue pairs attached to it (`cq`), and [`Network::progress`](super::Network::progress)
//! every queue pair of every node. Both do it through this trait, which the queue pair
//! (`qp`) implements: a queue pair reports to its completion queues and belongs to its
//! node, so it sits above both, and they must not import it back.

use std::any::Any;

/// A queue pair the NIC's timers drive.
pub(crate) trait Driven: Any + Send + Sync {
    /// True while requests wait on this queue pair for their delivery time or a timer.
    fn is_pending(&self) -> bool;

    /// Drives the head of the send queue; true while requests still wait on a timer.
    fn progress(&self) -> bool;
}
