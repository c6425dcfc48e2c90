//! Every limit and fixed size of the cluster's files (fragment logs, the fragment store,
//! the outcome table) in one place, with the relations between them checked at compile
//! time. Geometries are checked against these when a file is opened; nothing grows past
//! them afterwards.
#![forbid(unsafe_code)]

use crate::fabric::config::{MESSAGE_BYTES_MAX, REGION_BYTES_MAX};
use crate::stripe::HEADER_LEN as FRAGMENT_HEADER_BYTES;

/// Bytes of the header page at the start of every cluster file. The body starts after it,
/// so a body mapped on its own starts on a page boundary.
pub const HEADER_PAGE_BYTES: usize = 4096;
/// Slots, records and outcome entries are multiples of this, so each starts on its own
/// cache line and every aligned 8-byte word in them can be stored atomically.
pub const LINE_BYTES: usize = 64;
/// Most nodes in a cluster: node ids index `u32` bit masks of holders.
pub const NODES_MAX: usize = 32;

/// Bytes of a fragment log entry header.
pub const ENTRY_HEADER_BYTES: usize = 64;
/// Most slots one fragment log may have.
pub const LOG_SLOTS_MAX: u32 = 1 << 16;
/// Largest payload of one log entry: header and payload of a slot travel in one RDMA
/// message.
pub const LOG_PAYLOAD_BYTES_MAX: u32 = (MESSAGE_BYTES_MAX - ENTRY_HEADER_BYTES) as u32;
/// Largest fragment log file (header page and slots).
pub const LOG_FILE_BYTES_MAX: u64 = 1 << 36;
/// Bytes of one outcome record in an Outcomes entry.
pub const OUTCOME_RECORD_BYTES: usize = 32;
/// Most outcome records one Outcomes entry carries.
pub const OUTCOMES_PER_ENTRY_MAX: usize = 128;

/// Bytes of a store record before its fragment payload: 64 bytes of record header and the
/// 40-byte fragment header.
pub const RECORD_HEADER_BYTES: usize = 64 + FRAGMENT_HEADER_BYTES;
/// Most sets one fragment store may have.
pub const STORE_SETS_MAX: u32 = 1 << 24;
/// Bytes of a store set's head, before its first record: the count of the set's keys'
/// records that lie in their spill sets.
pub const SET_HEAD_BYTES: usize = 64;
/// Most ways (records) per set.
pub const STORE_WAYS_MAX: u32 = 16;
/// Largest fragment payload one store record holds: a fragment reaches the store through
/// one log slot, so it fits one after its fragment header.
pub const STORE_PAYLOAD_BYTES_MAX: u32 = LOG_PAYLOAD_BYTES_MAX - FRAGMENT_HEADER_BYTES as u32;
/// Largest set (its head and all its ways): peers fetch a set with one RDMA READ, so a store with many
/// ways holds smaller fragments.
pub const STORE_SET_BYTES_MAX: usize = MESSAGE_BYTES_MAX;
/// Largest fragment store file (header page and sets).
pub const STORE_FILE_BYTES_MAX: u64 = 1 << 40;
/// Most records one key may have in its home and spill sets: the newest committed
/// version and writes in flight after it. One more needs a superseded one of the key to
/// go first.
pub const VERSIONS_PER_KEY_MAX: usize = 6;
/// A key's record goes to its home set while fewer than this many of its ways are in
/// use; past that, to whichever of its home and spill sets has fewer in use. Measured
/// (a fill of 2^16 sets x 16 ways, uniform hashes): the first refusal comes at 82 % of
/// all records in use with 12 % of them spilled, against 49 % when spilling only from a
/// full home set and 30 % without spill sets.
pub const HOME_WAYS_FIRST: usize = STORE_WAYS_MAX as usize * 3 / 4;
/// Locks that serialise changes to the store, each covering the sets equal to its index
/// modulo this (a power of two).
pub const STORE_LOCKS: usize = 64;

/// Bytes of one outcome table entry.
pub const OUTCOME_ENTRY_BYTES: usize = 64;
/// Entries of an outcome table unless configured otherwise.
pub const OUTCOME_ENTRIES_DEFAULT: u32 = 1 << 16;
/// Most entries one outcome table may have (a power of two).
pub const OUTCOME_ENTRIES_MAX: u32 = 1 << 22;

const _: () = assert!(HEADER_PAGE_BYTES % LINE_BYTES == 0 && HEADER_PAGE_BYTES.is_power_of_two());
const _: () = assert!(LINE_BYTES % 8 == 0, "aligned 8-byte words never straddle a line");
const _: () = assert!(NODES_MAX <= 32, "holder sets are u32 bit masks");
const _: () = assert!(NODES_MAX <= 256, "node ids are one byte, and the low byte of a stamp");
const _: () = assert!(ENTRY_HEADER_BYTES == LINE_BYTES);
const _: () = assert!(ENTRY_HEADER_BYTES + LOG_PAYLOAD_BYTES_MAX as usize <= MESSAGE_BYTES_MAX);
const _: () = assert!(
    (ENTRY_HEADER_BYTES + LOG_PAYLOAD_BYTES_MAX as usize) % LINE_BYTES == 0,
    "the largest payload fills its slot exactly"
);
const _: () = assert!(OUTCOMES_PER_ENTRY_MAX * OUTCOME_RECORD_BYTES <= LOG_PAYLOAD_BYTES_MAX as usize);
const _: () = assert!(LOG_FILE_BYTES_MAX <= REGION_BYTES_MAX && STORE_FILE_BYTES_MAX <= REGION_BYTES_MAX);
const _: () = assert!(RECORD_HEADER_BYTES == 104);
const _: () = assert!(STORE_SETS_MAX.is_power_of_two() && STORE_WAYS_MAX as usize >= VERSIONS_PER_KEY_MAX);
const _: () = assert!(STORE_SET_BYTES_MAX <= MESSAGE_BYTES_MAX, "one RDMA READ fetches a whole set");
const _: () = assert!(
    RECORD_HEADER_BYTES + STORE_PAYLOAD_BYTES_MAX as usize <= STORE_SET_BYTES_MAX,
    "a set of one way holds the largest fragment"
);
const _: () = assert!(STORE_LOCKS.is_power_of_two() && STORE_LOCKS <= STORE_SETS_MAX as usize);
const _: () = assert!(HOME_WAYS_FIRST <= STORE_WAYS_MAX as usize && SET_HEAD_BYTES % 8 == 0);
const _: () = assert!(OUTCOME_ENTRY_BYTES == LINE_BYTES);
const _: () = assert!(OUTCOME_ENTRIES_DEFAULT.is_power_of_two() && OUTCOME_ENTRIES_MAX.is_power_of_two());
const _: () = assert!(OUTCOME_ENTRIES_DEFAULT <= OUTCOME_ENTRIES_MAX);
const _: () =
    assert!(HEADER_PAGE_BYTES as u64 + OUTCOME_ENTRIES_MAX as u64 * OUTCOME_ENTRY_BYTES as u64 <= REGION_BYTES_MAX);
// Aligned words of the files are stored with native-endian atomics; the formats say
// little-endian.
const _: () = assert!(cfg!(target_endian = "little"));

// ---- The node (protocol state, all sized at start) ------------------------------

/// Writes one node keeps in flight (each also holds a DPU buffer of its host's region
/// for parity and headers, so a region needs at least this many DPU buffers).
pub const WRITES_MAX: u32 = 64;
/// GETs one node keeps in flight.
pub const GETS_MAX: u32 = 16;
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
const _: () = assert!(STORE_WAYS <= STORE_WAYS_MAX);
const _: () = assert!(WRITES_MAX as u64 * 32 <= (1 << 24), "write slot and fragment fit a work-request index");
