//! The shim's one error type.

use std::path::PathBuf;

/// Everything that can fail in the shim, with what a user needs to act on it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShimError {
    /// A region size is outside its limit.
    #[error("region {field} = {value} is out of range: must be {limit}")]
    BadConfig {
        /// The field.
        field: &'static str,
        /// The value given.
        value: u64,
        /// What is allowed.
        limit: String,
    },
    /// Opening, sizing or mapping the region file failed.
    #[error("cannot {action} region file {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The region exists already.
    #[error("region file {0} already exists: attach to it, or remove it if no process uses it")]
    Exists(PathBuf),
    /// `mlock` failed.
    #[error("cannot pin the {bytes}-byte region in memory ({source}); raise the memlock limit (`ulimit -l unlimited`, or LimitMEMLOCK= in a systemd unit) or create the region with pinning off")]
    Pin {
        /// Region size.
        bytes: u64,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not a Prescient region.
    #[error("not a Prescient region (magic {found:#018x}): check the --region path")]
    BadMagic {
        /// What was found.
        found: u64,
    },
    /// The region has another layout version.
    #[error("region layout version {found}, but this build speaks version {expected}: run the host shim and prescient-dpu from the same release")]
    LayoutVersion {
        /// In the file.
        found: u32,
        /// Of this build.
        expected: u32,
    },
    /// The region uses features this build does not know.
    #[error("region uses unknown feature bits {bits:#x}: upgrade this side")]
    UnknownFeatures {
        /// The unknown bits.
        bits: u64,
    },
    /// Offsets in the header disagree with its sizes.
    #[error("region header offsets disagree with its sizes: the file is corrupt or was written by a hostile process")]
    HeaderMismatch,
    /// The file is shorter than its header says.
    #[error("region is {bytes} bytes, needs {need}: the file is truncated")]
    Truncated {
        /// Size found.
        bytes: u64,
        /// Size needed.
        need: u64,
    },
    /// Another live process serves or owns this part of the region.
    #[error("{what} is already held by live process {pid}")]
    Busy {
        /// What is held.
        what: String,
        /// The holder.
        pid: u32,
    },
    /// The queue pair index is out of range or already taken in this process.
    #[error("queue pair {qp} is not available (the region has {count}; each may be taken once)")]
    NoQueuePair {
        /// Requested.
        qp: u32,
        /// Count in the region.
        count: u32,
    },
    /// No free buffer in the arena.
    #[error("all {count} arena buffers are in use: wait for completions, or create the region with more buffers")]
    ArenaExhausted {
        /// Host buffers in the arena.
        count: u32,
    },
    /// Key empty or too long.
    #[error("key of {len} bytes: keys must be 1..={max} bytes")]
    BadKey {
        /// Length given.
        len: usize,
        /// Maximum.
        max: usize,
    },
    /// Value longer than a buffer holds.
    #[error("value of {len} bytes does not fit a buffer's {max}-byte value area")]
    BadValue {
        /// Length given.
        len: usize,
        /// Maximum.
        max: usize,
    },
    /// A write was given a read SLA.
    #[error("a {op} carries no read SLA: readers choose their own (ReadSla on a GET or read_guard); drop .sla(...) from the request")]
    SlaOnWrite {
        /// The operation.
        op: &'static str,
    },
    /// The buffer handle does not name a buffer this host holds.
    #[error("buffer {index} is {state}, not held by this host: {hint}")]
    BufferState {
        /// Buffer index.
        index: u32,
        /// Its state.
        state: &'static str,
        /// What to do.
        hint: &'static str,
    },
    /// The submission ring has no free slot. Requests complete out of order, but a slot
    /// comes back only once every older request has completed too: the DPU app keeps
    /// the slots of requests it took and did not complete readable for a successor.
    #[error(
        "queue pair {qp}'s submission ring ({depth} slots) is full with {in_flight} requests in flight (the other \
         slots hold requests that completed after an older one still in flight): reap completions, then submit again"
    )]
    RingFull {
        /// Queue pair.
        qp: u32,
        /// Slots in its rings.
        depth: u32,
        /// Requests submitted and not completed.
        in_flight: u32,
    },
    /// The DPU app fenced this queue pair off after bad input from this host.
    #[error("queue pair {qp} was fenced off by the DPU app: {reason} (detail {detail}); this host broke the ring protocol, restart it")]
    Fenced {
        /// Queue pair.
        qp: u32,
        /// Why.
        reason: &'static str,
        /// The offending value.
        detail: u64,
    },
    /// No DPU app has bumped its heartbeat within the timeout.
    #[error("DPU app not responding: no heartbeat for {silent_ms} ms (timeout {timeout_ms} ms); start or restart `prescient-dpu serve` on this region")]
    DpuNotResponding {
        /// Time since the last change seen.
        silent_ms: u64,
        /// The timeout.
        timeout_ms: u64,
    },
    /// The DPU app beats but did not acknowledge this host's attach within the timeout.
    #[error(
        "the DPU app serving region {path} did not acknowledge this host (generation {generation}; the region says \
         generation {served} is served) within {timeout_ms} ms although its heartbeat moves: the region's generation \
         words were overwritten, or prescient-dpu is stuck; attach again (that claims a new generation), and if \
         this repeats restart `prescient-dpu serve` on this region"
    )]
    AttachNotAcknowledged {
        /// The region file.
        path: PathBuf,
        /// The host generation this attach claimed.
        generation: u32,
        /// The served generation the region held at the end.
        served: u32,
        /// The timeout.
        timeout_ms: u64,
    },
    /// A blocking wait ended without a completion.
    #[error("no completion within {0:?}")]
    Timeout(std::time::Duration),
    /// The DPU app wrote a completion that breaks the protocol.
    #[error("DPU app broke the completion ring protocol: {0}")]
    BadCompletion(String),
}
