//! The fabric: one interface with RDMA reliable-connection semantics, and its backends.
//!
//! - [`Fabric`]: a NIC context with its protection domain: registers [`Memory`] with
//!   [`Access`] rights (giving lkey and rkey), creates completion queues and queue pairs.
//! - [`QueuePair`]: a reliable connection whose bring-up RESET -> INIT -> RTR -> RTS is a
//!   typestate; an RTS queue pair posts WRITE, WRITE_WITH_IMM, READ, CAS, FETCH_ADD and
//!   SEND ([`Op`]), and receives. Posted buffers belong to an in-flight table until their
//!   [`Completion`] hands them back.
//! - [`CompletionQueue`]: busy polling and blocking waits with a timeout.
//!
//! Backends: [`emu`], a software NIC with hardware semantics (in-process or over TCP, with
//! a seeded latency/loss/partition model), and `verbs` (feature `verbs`), libibverbs through
//! `sideway`. [`conformance`] is the one suite both must pass.
//!
//! Memory may be anonymous, a shared file mapping (fragment logs) or a region mapped by
//! someone else (the host's shared region): see [`Memory`].

pub mod conformance;
pub mod emu;
mod error;
mod inflight;
mod memory;
mod qp;
mod qp_state;
mod region;
pub mod swift;
#[cfg(feature = "verbs")]
pub mod verbs;
mod work;

use std::sync::Arc;
use std::time::Duration;

pub use error::{FabricError, Result};
pub use inflight::{Entry as InFlightEntry, InFlight};
pub use memory::Memory;
pub use qp::{Endpoint, Init, QpOptions, QueuePair, RawQp, Reset, Rtr, Rts};
pub use qp_state::{QpEvent, QpState, StateCell};
pub use region::{Access, LocalBuf, MemoryRegion, Registration, RemoteAddr, RemoteRegion};
pub use work::{Completion, Op, PathSignal, PostError, WcOpcode, WcStatus, WorkRequest};

/// A NIC context and protection domain: the root of every fabric resource.
pub trait Fabric: Send + Sync + 'static {
    /// Completion queue type.
    type Cq: CompletionQueue + Clone;
    /// Backend queue pair type.
    type Qp: RawQp;

    /// Backend name, for reports.
    fn name(&self) -> &'static str;

    /// Registers `memory` with `access` rights; the region is deregistered when the last
    /// `Arc` to it goes.
    fn register(&self, memory: Arc<Memory>, access: Access) -> Result<Arc<MemoryRegion>>;

    /// A completion queue holding up to `depth` completions.
    fn create_cq(&self, depth: usize) -> Result<Self::Cq>;

    /// A reliable-connection queue pair in RESET whose completions go to `send_cq` and
    /// `recv_cq` (which may be the same queue).
    fn create_qp(
        &self,
        send_cq: &Self::Cq,
        recv_cq: &Self::Cq,
        options: QpOptions,
    ) -> Result<QueuePair<Self::Qp, Reset>>;
}

/// A completion queue.
pub trait CompletionQueue: Send + Sync {
    /// Moves up to `max` ready completions into `out` without blocking; returns how many.
    /// `out` should have the capacity reserved, so polling does not allocate.
    fn poll(&self, out: &mut Vec<Completion>, max: usize) -> Result<usize>;

    /// Like [`CompletionQueue::poll`] but waits, spinning briefly and then blocking, until
    /// at least one completion is ready or `timeout` passes (then returns 0).
    fn wait(&self, out: &mut Vec<Completion>, max: usize, timeout: Duration) -> Result<usize>;
}
