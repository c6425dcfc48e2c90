//! Every limit of the shared region, and of the change-feed log file a host follows, in
//! one place.
//!
//! A region's actual sizes are chosen at creation within these bounds and written
//! into its header; both sides check the header against these bounds before trusting
//! any of it. The same holds for a feed log's geometry (`prescient-dpu` writes it,
//! [`crate::feed::FeedReader`] checks it; the DPU app's limits refer to these).

/// Bytes of one cache line pair: indices the peer writes live alone on one of these,
/// because aarch64 and x86 both prefetch pairs of 64-byte lines.
pub const LINE_BYTES: usize = 128;
/// Bytes of the region header.
pub const HEADER_BYTES: usize = 4096;
/// Bytes of one submission descriptor.
pub const DESCRIPTOR_BYTES: usize = 64;
/// Bytes of one completion entry.
pub const COMPLETION_BYTES: usize = 32;

/// Most queue pairs (KV-store threads) one region may have.
pub const QUEUE_PAIRS_MAX: u32 = 256;
/// Fewest entries of a ring.
pub const RING_ENTRIES_MIN: u32 = 2;
/// Most entries of a ring (a power of two).
pub const RING_ENTRIES_MAX: u32 = 1 << 16;
/// Most arena buffers (host and DPU together).
pub const ARENA_BUFFERS_MAX: u32 = 1 << 20;
/// Smallest arena buffer.
pub const BUFFER_BYTES_MIN: u32 = 1024;
/// Largest arena buffer.
pub const BUFFER_BYTES_MAX: u32 = 64 << 20;
/// Most cache-directory slots.
pub const DIRECTORY_SLOTS_MAX: u32 = 1 << 24;
/// Largest region the shim will create or attach.
pub const REGION_BYTES_MAX: u64 = 64 << 30;

/// Bytes at the start of every arena buffer reserved for the key.
pub const KEY_BYTES_MAX: usize = 256;
/// Bytes after the key reserved for a header a DPU stage writes in place (the sealed
/// frame header), so that sealing never copies the value.
pub const HEADROOM_BYTES: usize = 64;
/// Offset of the value inside an arena buffer.
pub const VALUE_OFFSET: usize = KEY_BYTES_MAX + HEADROOM_BYTES;
/// Bytes at the end of every arena buffer reserved for a trailer a DPU stage writes
/// in place (the authentication tag).
pub const TAILROOM_BYTES: usize = 64;

/// Bytes of the header page at the start of every cluster file
/// ([`crate::file_header`]); `prescient-dpu`'s limits take theirs from this.
pub const FILE_HEADER_PAGE_BYTES: usize = 4096;
/// Bytes of the header page at the start of a change-feed log file: the cluster files'
/// common header page.
pub const FEED_HEADER_BYTES: usize = FILE_HEADER_PAGE_BYTES;
/// Bytes of one change-feed log entry.
pub const FEED_ENTRY_BYTES: usize = 32;
/// Fewest entries of a change-feed log (a power of two): how far back a host that
/// follows the feed may fall before its cursor is too old.
pub const FEED_ENTRIES_MIN: u32 = 8;
/// Most entries of a change-feed log (a power of two).
pub const FEED_ENTRIES_MAX: u32 = 1 << 24;
/// Slots a feed reader with no usable hint reads to find a whole entry to search
/// from: a live writer tears at most one slot at a time, and a crash leaves at most one
/// more.
pub const FEED_ANCHOR_PROBES: u64 = 3;

/// Completions a DPU app posts to one completion ring before publishing them.
pub const BATCH_MAX: u32 = 64;
/// Most requests one completion entry completes (see [`crate::completion`]): a batch
/// of NOPs is one entry. Bounds the host's check of an entry and a restarted DPU
/// app's walk over its predecessor's entries.
pub const COMPLETION_RUN_MAX: u32 = 64;

/// Spins a waiter makes before it sleeps on the futex.
pub const SPIN_ROUNDS: u32 = 2_000;
/// Longest single futex sleep, so that waiters recheck the peer's heartbeat.
pub const FUTEX_SLEEP_US_MAX: u64 = 10_000;
/// How often each side bumps its heartbeat.
pub const HEARTBEAT_PERIOD_US: u64 = 5_000;
/// Default time without a DPU heartbeat after which host calls fail.
pub const DPU_TIMEOUT_MS_DEFAULT: u64 = 500;
/// Spins a `Fresh` reader makes on a `Pending` directory slot before it sleeps
/// between rechecks.
pub const READ_SPIN_ROUNDS: u32 = 1_000;
/// One sleep of a `Fresh` reader between rechecks of a `Pending` slot.
pub const READ_SLEEP_US: u64 = 20;
/// Longest a `Fresh` reader waits for a `Pending` slot to resolve, whatever it asks
/// for: a write resolves in microseconds, and one that has not after a second has a
/// dead writer, which the DPU app clears.
pub const READ_WAIT_US_MAX: u64 = 1_000_000;

/// Default time without a host heartbeat after which the DPU app reclaims the host's
/// buffers.
pub const HOST_TIMEOUT_MS_DEFAULT: u64 = 1_000;

const _: () = assert!(HEADER_BYTES % LINE_BYTES == 0);
const _: () = assert!(RING_ENTRIES_MAX.is_power_of_two() && RING_ENTRIES_MIN.is_power_of_two());
const _: () = assert!(BATCH_MAX <= RING_ENTRIES_MAX);
const _: () = assert!(COMPLETION_RUN_MAX >= 1 && COMPLETION_RUN_MAX <= u16::MAX as u32, "a run's count is a u16");
const _: () = assert!(VALUE_OFFSET % 64 == 0, "values start 64-byte aligned");
const _: () =
    assert!((VALUE_OFFSET + TAILROOM_BYTES) < BUFFER_BYTES_MIN as usize, "the smallest buffer still holds a value");
const _: () = assert!(BUFFER_BYTES_MIN % 64 == 0);
const _: () = assert!(HEARTBEAT_PERIOD_US * 10 <= DPU_TIMEOUT_MS_DEFAULT * 1000);
const _: () = assert!(FUTEX_SLEEP_US_MAX <= HEARTBEAT_PERIOD_US * 2);
const _: () = assert!(READ_SLEEP_US * 10 <= READ_WAIT_US_MAX);
const _: () = assert!(FEED_ENTRIES_MIN.is_power_of_two() && FEED_ENTRIES_MAX.is_power_of_two());
const _: () = assert!(FEED_ANCHOR_PROBES < FEED_ENTRIES_MIN as u64, "the probed slots are distinct");
const _: () = assert!(FEED_ENTRY_BYTES % 8 == 0, "a feed entry is whole 8-byte words, read one word at a time");
const _: () = assert!(FEED_HEADER_BYTES % FEED_ENTRY_BYTES == 0, "entries start aligned to their size");
const _: () = assert!(FEED_HEADER_BYTES as u64 + FEED_ENTRIES_MAX as u64 * FEED_ENTRY_BYTES as u64 <= REGION_BYTES_MAX);
