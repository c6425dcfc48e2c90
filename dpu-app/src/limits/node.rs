//! The node's protocol state: every table a cluster node keeps in flight, all sized at
//! start.
#![forbid(unsafe_code)]

use super::{OUTCOMES_PER_ENTRY_MAX, OUTCOME_RECORD_BYTES, STORE_WAYS_MAX};

/// Largest index a work-request id carries in each of its two 24-bit fields (a slot and
/// a generation of a role's slot table, a pool slot, a connection count).
pub const WR_INDEX_MAX: u32 = (1 << 24) - 1;
/// Writes one node keeps in flight (each also holds a DPU buffer of its host's region
/// for parity and headers, so a region needs at least this many DPU buffers).
pub const WRITES_MAX: u32 = 64;
/// GETs one node keeps in flight.
pub const GETS_MAX: u32 = 16;
/// Writes and GETs a node starts in one poll round. A ring full of PUTs (a restarted
/// node finds hundreds waiting) otherwise posts every free write slot's fragments,
/// decisions and directory CASes in one round, ahead of the heartbeats that keep its
/// links: on Soft-RoCE under TCG a burst of 64 made its peers look dead and failed the
/// writes NotDurable. NOPs need no slot and are not counted.
pub const REQUESTS_STARTED_PER_ROUND: u32 = 16;
/// Predictor leases with marks out at once.
pub const LEASES_MAX: usize = 64;
/// Outcome notices in flight to each peer.
pub const NOTICES_MAX: u32 = 4;
/// Outcome records one notice carries.
pub const NOTICE_RECORDS_MAX: usize = 64;
/// Payload bytes of a full notice.
pub const NOTICE_PAYLOAD_BYTES: usize = NOTICE_RECORDS_MAX * OUTCOME_RECORD_BYTES;
/// Completions taken from a completion queue per poll.
pub const POLL_BATCH: usize = 128;
/// Poll rounds per call while completions keep coming.
pub const POLL_ROUNDS_MAX: u32 = 4;
/// Repairs (fragments rebuilt for a holder that missed them) in flight at once.
pub const REPAIRS_MAX: u32 = 4;
/// Outcome-table entries a resync examines per heartbeat and peer.
pub const RESYNC_CHUNK: u64 = 4096;
/// Ways of each store set (a GET READs a whole set from every peer).
pub const STORE_WAYS: u32 = 16;

const _: () = assert!(NOTICE_RECORDS_MAX <= OUTCOMES_PER_ENTRY_MAX);
const _: () = assert!(REQUESTS_STARTED_PER_ROUND >= 1 && REQUESTS_STARTED_PER_ROUND <= WRITES_MAX);
const _: () = assert!(STORE_WAYS <= STORE_WAYS_MAX);
const _: () = assert!(WRITES_MAX as u64 * 32 <= (1 << 24), "write slot and fragment fit a work-request index");
