//! Limits of the serving loop (`serve`, `region_server`, `queue`), in one place.
//!
//! They bound the work one host can make the DPU app's single serving thread do
//! before it turns to the next region, beats its heartbeats and looks at the clock,
//! whatever that host writes into its region.
#![forbid(unsafe_code)]

use prescient_shim::config::{BATCH_MAX, HEARTBEAT_PERIOD_US};

/// Most descriptors one region is served per turn of the round robin over regions
/// (split over its queue pairs, round robin too). A region that floods NOPs on every
/// queue pair costs the others at most this much per round.
pub const REGION_TURN_DESCRIPTORS: u32 = 2 * BATCH_MAX;

/// The serving loop reads the clock (for heartbeats and host checks) at least once
/// per this many descriptors served, and once per round when a round serves none.
pub const CLOCK_CHECK_DESCRIPTORS: u32 = 256;

/// The serving loop reads the clock at least once per this many rounds, busy or idle
/// (a power of two). An idle round looks at every queue pair once.
pub const CLOCK_CHECK_ROUNDS: u32 = 64;

/// How often the DPU app looks at each host's liveness and generation, in ms.
pub const HOST_CHECK_PERIOD_MS: u64 = 10;

/// Fewest milliseconds between two take-overs of one region by a new host
/// generation: a take-over walks every buffer of the region, so a host that bumps
/// its generation in a loop is taken over at this pace, not at its own.
pub const TAKE_OVER_INTERVAL_MS: u64 = 100;

const _: () = assert!(REGION_TURN_DESCRIPTORS >= BATCH_MAX, "a turn serves at least one full batch");
const _: () = assert!(CLOCK_CHECK_DESCRIPTORS >= REGION_TURN_DESCRIPTORS);
const _: () = assert!(CLOCK_CHECK_ROUNDS.is_power_of_two() && (CLOCK_CHECK_ROUNDS as u64) < HEARTBEAT_PERIOD_US);
const _: () = assert!(HOST_CHECK_PERIOD_MS * 1000 >= HEARTBEAT_PERIOD_US);
const _: () = assert!(TAKE_OVER_INTERVAL_MS >= HOST_CHECK_PERIOD_MS);
