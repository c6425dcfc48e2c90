//! Work requests and their completions.

use super::region::{LocalBuf, RemoteAddr};

/// A one-sided or two-sided operation to post on a send queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// RDMA WRITE of the local buffer to `remote`; with `imm`, a WRITE_WITH_IMM that also
    /// consumes a receive at the peer and hands it the immediate.
    Write {
        /// Destination in the peer.
        remote: RemoteAddr,
        /// Immediate data (WRITE_WITH_IMM) or none (plain WRITE).
        imm: Option<u32>,
    },
    /// RDMA READ of `remote` into the local buffer (which needs `LOCAL_WRITE`).
    Read {
        /// Source in the peer.
        remote: RemoteAddr,
    },
    /// Atomic compare-and-swap of the aligned word at `remote`; the old value lands in the
    /// 8-byte local buffer (little-endian).
    CompareSwap {
        /// The word in the peer.
        remote: RemoteAddr,
        /// Expected value.
        compare: u64,
        /// New value, stored when the word equals `compare`.
        swap: u64,
    },
    /// Atomic fetch-and-add on the aligned word at `remote`; old value into the local buffer.
    FetchAdd {
        /// The word in the peer.
        remote: RemoteAddr,
        /// Addend.
        add: u64,
    },
    /// SEND of the local buffer into the peer's next posted receive. (No SEND with
    /// immediate: WRITE_WITH_IMM covers notification, and verbs wrappers do not report
    /// whether a received SEND carried one.)
    Send,
}

impl Op {
    /// The completion opcode this operation reports.
    pub fn opcode(&self) -> WcOpcode {
        match self {
            Op::Write { .. } => WcOpcode::Write,
            Op::Read { .. } => WcOpcode::Read,
            Op::CompareSwap { .. } => WcOpcode::CompareSwap,
            Op::FetchAdd { .. } => WcOpcode::FetchAdd,
            Op::Send => WcOpcode::Send,
        }
    }
}

/// A work request: an operation, its local buffer (owned by the queue pair while posted)
/// and the caller's `wr_id`, which comes back in the completion.
#[derive(Debug)]
pub struct WorkRequest {
    /// Caller's identifier.
    pub wr_id: u64,
    /// The operation.
    pub op: Op,
    /// Source (WRITE, SEND) or destination (READ, atomics) buffer.
    pub buf: LocalBuf,
}

/// A refused post: the error and the request (a [`WorkRequest`], or the [`LocalBuf`] of a
/// receive), so the buffer goes back to the caller.
#[derive(Debug)]
pub struct PostError<T = WorkRequest> {
    /// Why it was refused.
    pub error: super::FabricError,
    /// The request, unchanged.
    pub request: T,
}

impl<T> std::fmt::Display for PostError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "post refused: {}", self.error)
    }
}

impl<T: std::fmt::Debug> std::error::Error for PostError<T> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// Status of a completion (the `ibv_wc_status` values the fabric can produce).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WcStatus {
    /// Done.
    Success,
    /// A local buffer was too small for what arrived (a receive shorter than the SEND).
    LocalLength,
    /// A local buffer lacked the access the operation needs (READ into a read-only region).
    LocalProtection,
    /// The queue pair went to the error state before this request ran.
    Flushed,
    /// The peer found the request invalid (a misaligned atomic).
    RemoteInvalidRequest,
    /// The peer refused access: bad rkey, out of bounds, or missing access rights.
    RemoteAccess,
    /// The peer failed the operation for another reason.
    RemoteOperation,
    /// No response after every transport retry: the link is broken or the peer is gone.
    RetryExceeded,
    /// The peer had no receive posted after every receiver-not-ready retry.
    RnrRetryExceeded,
    /// Another hardware status (verbs backend), with its raw value.
    Other(u32),
}

/// What a completion completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcOpcode {
    /// A SEND.
    Send,
    /// An RDMA WRITE (with or without immediate).
    Write,
    /// An RDMA READ.
    Read,
    /// A compare-and-swap.
    CompareSwap,
    /// A fetch-and-add.
    FetchAdd,
    /// A receive consumed by a SEND.
    Recv,
    /// A receive consumed by a WRITE_WITH_IMM.
    RecvWithImm,
}

/// What the fabric measured of one request and its response: the sender's congestion
/// signal, as a NIC's hardware timestamps and a switch's ECN bit would give it.
///
/// All zero where nothing was measured (the ideal emulated model, emu over TCP, verbs:
/// this build reads no hardware timestamps), which a delay-based control reads as an
/// empty fabric.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathSignal {
    /// Fabric round trip: both ways' propagation, serialisation, queueing and pauses,
    /// without the time the request waited on its own send queue.
    pub rtt_ns: u64,
    /// The part of `rtt_ns` spent waiting in switch queues and paused.
    pub queue_ns: u64,
    /// A switch marked the request (its queue was above the marking threshold).
    pub ecn: bool,
    /// Switch hops on the path.
    pub hops: u8,
    /// The part of `rtt_ns` that is the request's and its response's serialisation at
    /// the line rate of the path's bottleneck port (0 where the fabric does not model
    /// one): time the path takes for these bytes even when empty.
    pub serialise_ns: u64,
    /// Line rate of that port, bytes per second (0: not modelled, or not known).
    pub line_bytes_per_s: u64,
}

/// A completion: what the NIC reports for a finished (or failed, or flushed) request.
#[derive(Debug)]
pub struct Completion {
    /// The caller's identifier from the work request.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// What completed (known even for flushed requests: the in-flight table remembers it).
    pub opcode: WcOpcode,
    /// Bytes transferred (receives: bytes that arrived).
    pub byte_len: u32,
    /// Immediate data of a SEND or WRITE_WITH_IMM, on the receiving side.
    pub imm: Option<u32>,
    /// The queue pair number the completion belongs to.
    pub qp_num: u32,
    /// The buffer the request carried, handed back.
    pub buf: Option<LocalBuf>,
    /// What the fabric measured on the way (a successful send's; otherwise zero).
    pub path: PathSignal,
}

impl Completion {
    /// True for a successful completion.
    pub fn is_ok(&self) -> bool {
        self.status == WcStatus::Success
    }
}
