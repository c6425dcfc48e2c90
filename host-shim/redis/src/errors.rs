//! Redis error replies for what can go wrong, each with its own code so a client can
//! tell them apart (`-NOTDURABLE`, `-UNAVAILABLE`, ...), and what to do about it.

use prescient_shim::{ShimError, Status};

/// The error reply for a request the DPU app completed with `status` (not `Ok`).
/// `detail` is the completion's detail word; `what` names the request ("write",
/// "read", "delete").
pub fn of_status(status: Status, detail: u32, what: &str) -> String {
    match status {
        Status::NotDurable => format!(
            "NOTDURABLE prescient: the {what} reached {detail} holders, fewer than its quorum, and was rolled back: \
             nothing of it is visible; retry"
        ),
        Status::Unavailable => format!(
            "UNAVAILABLE prescient: too few storage nodes are reachable to {what} the key now; retry when the \
             cluster heals"
        ),
        Status::Overloaded => format!(
            "OVERLOADED prescient: a queue, log or store of the DPU app is full; retry the {what}, or see the DPU \
             app's summary for which"
        ),
        Status::DpuRestarted => format!(
            "DPURESTARTED prescient: the DPU app restarted while it held this {what}; its outcome is unknown: read \
             the key to see"
        ),
        Status::StageFailed => {
            format!("ERR prescient: the write path failed this {what} (versioning, sealing or striping); see the DPU app's log")
        }
        Status::BadValueLength => format!(
            "ERR prescient: the DPU app refused the value's length for this {what}: larger than the cluster's \
             value_bytes_max"
        ),
        other => format!("ERR prescient: the DPU app refused this {what}: {}", other.describe()),
    }
}

/// The error reply for a request the shim could not submit.
pub fn of_shim(e: &ShimError) -> String {
    match e {
        ShimError::DpuNotResponding { .. } | ShimError::AttachNotAcknowledged { .. } => {
            format!("UNAVAILABLE prescient: {e}")
        }
        ShimError::RingFull { .. } | ShimError::ArenaExhausted { .. } => {
            format!("OVERLOADED prescient: {e} (or load the module with larger ring_entries= / host_buffers=)")
        }
        _ => format!("ERR prescient: {e}"),
    }
}

/// Every request's entry is taken: as many commands wait as the ring holds.
pub fn requests_full(waiting: usize) -> String {
    format!(
        "OVERLOADED prescient: {waiting} commands are waiting on the DPU app, as many as the ring holds; retry, or \
         load the module with a larger ring_entries="
    )
}

/// The DPU app stopped answering while the client waited.
pub fn dpu_lost(silent: &ShimError) -> String {
    format!("UNAVAILABLE prescient: {silent}; this command's outcome is unknown until it restarts: read the key to see")
}

/// The client's wait for its completion timed out.
pub fn reply_timeout(ms: u128) -> String {
    format!(
        "TIMEOUT prescient: no completion within {ms} ms (reply_timeout_ms=); the command may still take effect: \
         read the key to see"
    )
}

/// SET with options.
pub const SET_OPTIONS: &str = "ERR prescient: SET with options (NX, XX, EX, PX, KEEPTTL, GET) is not replicated; \
                               use SET key value";
/// A write command the module does not replicate.
pub fn not_replicated(command: &[u8]) -> String {
    if command.eq_ignore_ascii_case(b"swapdb") {
        return "ERR prescient: SWAPDB would swap this node's copies under the cluster's keys; only database 0 is \
                replicated"
            .into();
    }
    format!(
        "ERR prescient: {} is not replicated through Prescient (SET, GET, DEL and UNLINK are); use SET with the new \
         value",
        String::from_utf8_lossy(command).to_uppercase()
    )
}
/// A replicated command in a database other than 0.
pub const OTHER_DB: &str = "ERR prescient: only database 0 is replicated (the cluster has one keyspace); SELECT 0";
/// A command that would block inside MULTI/EXEC or a script.
pub const CANNOT_BLOCK: &str = "ERR prescient: replicated SET, DEL and GET cannot run inside MULTI/EXEC or a script \
                                (they wait for the cluster); send them on their own";
