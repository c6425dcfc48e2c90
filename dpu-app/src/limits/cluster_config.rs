//! Ranges of the cluster file's settings (checked by `cluster::config`), and the bit
//! fields node ids and versions must fit.
#![forbid(unsafe_code)]

use super::{FRAGMENTS_MAX, LOG_SLOTS_MAX, LOG_SLOTS_MIN, OUTCOME_ENTRIES_MAX, OUTCOME_ENTRIES_MIN};

/// Bits of the writer field of a cache-directory slot word (bits 61..56; the format is
/// host-shim's `directory.rs`). Every node id must fit it.
pub const SLOT_WRITER_BITS: u32 = 6;
/// Bits of the version field of a slot word (bits 55..0): a write's version.
pub const SLOT_VERSION_BITS: u32 = 56;
/// Bits of the node field of a version stamp (`version << 8 | node`).
pub const STAMP_NODE_BITS: u32 = 8;
/// Fewest nodes of a cluster. One node replicates to nobody: it is the degenerate
/// cluster `prescient-dpu serve` runs for each region without `--config`
/// (`ClusterConfig::single_node`: RS(1, 0), quorum 1), durable in its own files only.
pub const NODES_MIN: usize = 1;
/// Most nodes of a cluster: node ids are the directory slot word's 6-bit writer field
/// and index `u32` bit masks of holders.
pub const NODES_MAX: usize = 32;
/// Longest cluster name, in bytes.
pub const NAME_BYTES_MAX: usize = 64;
/// Upper limit of `value_bytes_max`: 64 MiB.
pub const VALUE_BYTES_LIMIT: usize = 64 << 20;
/// Lower limit of `store_bytes`: 16 KiB.
pub const STORE_BYTES_MIN: usize = 1 << 14;
/// Upper limit of `store_bytes`: 1 TiB, the largest store file.
pub const STORE_BYTES_LIMIT: usize = super::STORE_FILE_BYTES_MAX as usize;
/// Shortest heartbeat period.
pub const HEARTBEAT_US_MIN: u64 = 100;
/// Heartbeat periods a lease must last at least.
pub const LEASE_HEARTBEATS_MIN: u64 = 4;
/// Longest of any timing: one hour, so deadlines never overflow and a value given in the
/// wrong unit is caught.
pub const TIMING_US_MAX: u64 = 3_600_000_000;

// Node ids are the slot word's writer field and the stamp's node field.
const _: () = assert!(NODES_MAX <= 1 << SLOT_WRITER_BITS);
const _: () = assert!(NODES_MAX <= 1 << STAMP_NODE_BITS);
const _: () = assert!(2 + SLOT_WRITER_BITS + SLOT_VERSION_BITS == 64, "state, writer, version: one u64");
const _: () = assert!(SLOT_VERSION_BITS + STAMP_NODE_BITS == 64, "a stamp is one u64");
const _: () = assert!(NODES_MIN >= 1 && NODES_MIN <= NODES_MAX);
// The smallest replicated code, k = m = 1, is a stripe of two fragments on two nodes.
const _: () = assert!(FRAGMENTS_MAX >= 2);
const _: () = assert!(VALUE_BYTES_LIMIT <= super::FRAME_LEN_MAX / 2);
const _: () = assert!(VALUE_BYTES_LIMIT <= u32::MAX as usize);
const _: () = assert!(LOG_SLOTS_MIN.is_power_of_two() && LOG_SLOTS_MAX.is_power_of_two());
const _: () = assert!(OUTCOME_ENTRIES_MIN.is_power_of_two() && OUTCOME_ENTRIES_MAX.is_power_of_two());
const _: () = assert!(STORE_BYTES_MIN < STORE_BYTES_LIMIT);
// A one-node cluster's outcome table holds many times the writes it has in flight.
const _: () = assert!(4 * OUTCOME_ENTRIES_MIN >= 16 * super::WRITES_MAX);
const _: () = assert!(HEARTBEAT_US_MIN * LEASE_HEARTBEATS_MIN < TIMING_US_MAX);

// Cross-checked against the host shim's cache-directory word (`prescient_shim::directory`).
const _: () = assert!(NODES_MAX <= prescient_shim::directory::WRITER_MAX as usize + 1);
const _: () = assert!(prescient_shim::directory::WRITER_MAX as u64 == (1 << SLOT_WRITER_BITS) - 1);
const _: () = assert!(prescient_shim::directory::VERSION_MAX == (1 << SLOT_VERSION_BITS) - 1);
/// Largest version a write can carry: the shim's directory word holds 56 bits of it.
pub const VERSION_MAX: u64 = prescient_shim::directory::VERSION_MAX;
