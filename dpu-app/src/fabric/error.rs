//! The fabric's one error type. Operating errors (a lost peer, a bad address from a peer,
//! a missing device) are values of [`FabricError`]; a failed completion is not an error
//! here but a [`crate::fabric::WcStatus`] in its completion, as on hardware.

use std::io;

/// What failed in the fabric, with the input that made it fail and what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FabricError {
    /// A memory buffer could not be created or mapped.
    #[error("mapping {len} bytes of memory failed: {source}; check the size, the file and the memlock limit")]
    Map {
        /// Requested length.
        len: usize,
        /// Cause.
        source: io::Error,
    },
    /// Writing a file mapping back to its file failed (`msync`).
    #[error("flushing bytes {offset}+{len} of a file mapping failed: {source}; check the disk and the file system")]
    Flush {
        /// Start of the span, bytes from the region start.
        offset: u64,
        /// Length of the span.
        len: u64,
        /// Cause.
        source: io::Error,
    },
    /// A range does not lie inside its memory region.
    #[error("range {offset}+{len} lies outside a region of {region_len} bytes; pass a range inside the region")]
    OutOfRange {
        /// Start of the range, bytes from the region start.
        offset: u64,
        /// Length of the range.
        len: u64,
        /// Length of the region.
        region_len: u64,
    },
    /// An atomic operand is not an aligned 8-byte word.
    #[error("atomic at offset {offset} with length {len} is not one 8-byte aligned word; align the word to 8 bytes")]
    Misaligned {
        /// Offset of the word.
        offset: u64,
        /// Length that was given.
        len: u64,
    },
    /// Registration was refused because of its access flags.
    #[error("registration with access {access:#x} refused: {why}")]
    BadAccess {
        /// Requested access bits.
        access: u32,
        /// Which rule was broken.
        why: &'static str,
    },
    /// A limit from `crate::limits` was reached.
    #[error("{what} limit of {limit} reached; release some or raise the limit in dpu-app/src/limits/fabric.rs")]
    Limit {
        /// What ran out.
        what: &'static str,
        /// The limit.
        limit: usize,
    },
    /// A network model's regions, latency matrix or ports are wrong.
    #[error("network model: {0}")]
    Topology(String),
    /// A message is larger than the fabric carries.
    #[error("message of {len} bytes exceeds the {max}-byte limit; split it")]
    TooLong {
        /// Message length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The queue pair is in a state that does not allow the operation.
    #[error("queue pair {qpn} is in state {state:?}, which does not allow {op}; reset and reconnect it")]
    QpState {
        /// Queue pair number.
        qpn: u32,
        /// Its state.
        state: crate::fabric::QpState,
        /// The refused operation.
        op: &'static str,
    },
    /// A send or receive queue is full.
    #[error("{queue} queue of queue pair {qpn} is full ({depth} entries); poll completions first")]
    QueueFull {
        /// "send" or "receive".
        queue: &'static str,
        /// Queue pair number.
        qpn: u32,
        /// Its depth.
        depth: usize,
    },
    /// A work request is malformed (wrong buffer length for an atomic, and so on).
    #[error("invalid work request: {0}")]
    InvalidRequest(&'static str),
    /// The remote end of a connection could not be found or reached during set-up.
    #[error("connecting to {peer} failed: {why}; check that the peer node runs and the endpoint is current")]
    Connect {
        /// The peer, as text.
        peer: String,
        /// Cause.
        why: String,
    },
    /// A socket of the TCP emulation failed.
    #[error("emulated fabric socket {what} failed: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Cause.
        source: io::Error,
    },
    /// A peer sent bytes that are not a valid frame.
    #[error("malformed frame from peer: {0}; the peer runs another version or is broken")]
    Malformed(&'static str),
    /// The RDMA device is missing or unusable (verbs backend).
    #[error("RDMA device: {0}")]
    Device(String),
    /// A verbs call failed (verbs backend).
    #[error("verbs call {call} failed: {why}")]
    Verbs {
        /// The failing call.
        call: &'static str,
        /// Cause.
        why: String,
    },
}

/// Result of fabric calls.
pub type Result<T, E = FabricError> = std::result::Result<T, E>;
