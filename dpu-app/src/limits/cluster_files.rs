//! Every limit and fixed size of the cluster's files (fragment logs, the fragment store,
//! the outcome table) in one place, with the relations between them checked at compile
//! time. Geometries are checked against these when a file is opened; nothing grows past
//! them afterwards.
#![forbid(unsafe_code)]

use super::{MESSAGE_BYTES_MAX, NODES_MAX, REGION_BYTES_MAX};
use crate::stripe::HEADER_LEN as FRAGMENT_HEADER_BYTES;

/// Bytes of the header page at the start of every cluster file. The body starts after it,
/// so a body mapped on its own starts on a page boundary. The shim defines it with the
/// common header (`prescient_shim::file_header`), which its feed reader checks too.
pub const HEADER_PAGE_BYTES: usize = prescient_shim::config::FILE_HEADER_PAGE_BYTES;
/// Slots, records and outcome entries are multiples of this, so each starts on its own
/// cache line and every aligned 8-byte word in them can be stored atomically.
pub const LINE_BYTES: usize = 64;

/// Bytes of a fragment log entry header.
pub const ENTRY_HEADER_BYTES: usize = 64;
/// Bytes of an entry header plus a fragment header: what a fragment's
/// WRITE_WITH_IMM carries (its bytes go in a WRITE before it).
pub const FRAGMENT_HEAD_BYTES: usize = ENTRY_HEADER_BYTES + FRAGMENT_HEADER_BYTES;
/// Fewest slots of a fragment log.
pub const LOG_SLOTS_MIN: u32 = 8;
/// Most slots of a fragment log.
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
/// Records a store keeps per key it is sized for (`store_bytes_for_keys`): one key's
/// newest value and room around it, so the store stays at half load, well below where
/// it refuses writes (the fill command measures that at about 80 %).
pub const STORE_RECORDS_PER_KEY: u64 = 2;
/// Locks that serialise changes to the store, each covering the sets equal to its index
/// modulo this (a power of two).
pub const STORE_LOCKS: usize = 64;

/// Bytes of one outcome table entry.
pub const OUTCOME_ENTRY_BYTES: usize = 64;
/// Entries of an outcome table unless configured otherwise.
pub const OUTCOME_ENTRIES_DEFAULT: u32 = 1 << 16;
/// Fewest entries of an outcome table.
pub const OUTCOME_ENTRIES_MIN: u32 = 1 << 10;
/// Most entries of an outcome table (a power of two).
pub const OUTCOME_ENTRIES_MAX: u32 = 1 << 20;

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
// The change-feed log (`format/feed.rs`) is read by hosts through the shim, which
// defines its format and limits once (`prescient_shim::config`, `prescient_shim::feed`):
// bytes of one entry, and the fewest and most entries of a log (powers of two; how far
// back a host that follows the feed may fall before its cursor is too old).
pub use prescient_shim::config::{FEED_ENTRIES_MAX, FEED_ENTRIES_MIN, FEED_ENTRY_BYTES};

const _: () = assert!(LINE_BYTES % FEED_ENTRY_BYTES == 0, "feed entries do not straddle lines");
const _: () = assert!(FEED_ENTRIES_MIN.is_power_of_two() && FEED_ENTRIES_MAX.is_power_of_two());
const _: () = assert!(
    prescient_shim::config::FEED_HEADER_BYTES == HEADER_PAGE_BYTES,
    "a feed log's header page is the cluster files' common one"
);
const _: () = assert!(HEADER_PAGE_BYTES as u64 + FEED_ENTRIES_MAX as u64 * FEED_ENTRY_BYTES as u64 <= REGION_BYTES_MAX);
const _: () = assert!(OUTCOME_ENTRY_BYTES == LINE_BYTES);
const _: () = assert!(OUTCOME_ENTRIES_DEFAULT.is_power_of_two() && OUTCOME_ENTRIES_MAX.is_power_of_two());
const _: () = assert!(OUTCOME_ENTRIES_DEFAULT <= OUTCOME_ENTRIES_MAX);
const _: () =
    assert!(HEADER_PAGE_BYTES as u64 + OUTCOME_ENTRIES_MAX as u64 * OUTCOME_ENTRY_BYTES as u64 <= REGION_BYTES_MAX);
// Aligned words of the files are stored with native-endian atomics; the formats say
// little-endian.
const _: () = assert!(cfg!(target_endian = "little"));

/// Bytes of one fate ring entry (`format/fates.rs`).
pub const FATE_ENTRY_BYTES: usize = 32;
/// Bytes of one stamp-ledger entry (`format/ledger.rs`).
pub const LEDGER_ENTRY_BYTES: usize = 32;
/// Fewest and most entries of a node's fate ring (a power of two): how far behind a
/// peer's applier may fall before the fates it needs are overwritten.
pub const FATE_ENTRIES_MIN: u32 = 8;
/// See [`FATE_ENTRIES_MIN`].
pub const FATE_ENTRIES_MAX: u32 = 1 << 24;
/// Entries of a fate ring unless the cluster file says `fate_entries` (2 MiB).
pub const FATE_ENTRIES_DEFAULT: u32 = 1 << 16;

const _: () = assert!(LINE_BYTES % FATE_ENTRY_BYTES == 0, "fate entries do not straddle lines");
const _: () = assert!(LINE_BYTES % LEDGER_ENTRY_BYTES == 0, "ledger entries do not straddle lines");
const _: () = assert!(FATE_ENTRIES_MAX <= 1 << 24, "a fate ring's write entry keeps its write number mod 2^24");
const _: () = assert!(FATE_ENTRIES_MIN.is_power_of_two() && FATE_ENTRIES_MAX.is_power_of_two());
const _: () = assert!(FATE_ENTRIES_DEFAULT.is_power_of_two() && FATE_ENTRIES_DEFAULT >= FATE_ENTRIES_MIN);
const _: () = assert!(HEADER_PAGE_BYTES as u64 + FATE_ENTRIES_MAX as u64 * FATE_ENTRY_BYTES as u64 <= REGION_BYTES_MAX);
/// Entries of a node's change-feed log (2 MiB): how far a host following it may fall
/// behind before its cursor is too old.
pub const FEED_ENTRIES_DEFAULT: u32 = 1 << 16;
/// Fate ring entries one READ brings (a peer's ring is pulled a chunk at a time).
pub const FATE_READ_ENTRIES: u32 = 64;
/// Stamp-ledger entries an applier READs at once when it scans a gone writer's part of
/// a holder's ledger (`protocol/ledgers.rs`): 32 KiB, so that a part of 65,536 entries
/// takes 64 READs. Each peer's READ target in the applier's pool is this large.
pub const LEDGER_SCAN_ENTRIES: u32 = 1024;
/// Sequencer `dead_after`s the order may stay stuck at a stamp no ring records before
/// the sequencer claims the next epoch to settle it.
pub const HOLE_ROLL_DEAD_AFTERS: u64 = 2;
