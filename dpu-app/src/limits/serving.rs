//! Limits of serving a host region (`region_server`, `queue`), in one place.
//!
//! They bound the work one host can make the DPU app's single serving thread do
//! before it turns to the next region and to its timers, whatever that host writes
//! into its region.
#![forbid(unsafe_code)]

use std::time::Duration;

use prescient_shim::config::{BATCH_MAX, HEARTBEAT_PERIOD_US};

/// Most descriptors one region's take yields per poll of its node (split over its
/// queue pairs, round robin too). A region that floods NOPs on every queue pair costs
/// the others at most this much per round of the serving loop.
pub const REGION_TURN_DESCRIPTORS: u32 = 2 * BATCH_MAX;

/// How often the DPU app looks at each host's liveness and generation, in ms.
pub const HOST_CHECK_PERIOD_MS: u64 = 10;

/// Fewest milliseconds between two take-overs of one region by a new host
/// generation: a take-over walks every buffer of the region, so a host that bumps
/// its generation in a loop is taken over at this pace, not at its own.
pub const TAKE_OVER_INTERVAL_MS: u64 = 100;

/// How often the serving loop publishes its figures for `serve --metrics`, in ms: a
/// scrape sees figures at most this old. Publishing copies every node's histograms
/// (about 90 KiB a node), a few microseconds a period.
pub const METRICS_PUBLISH_PERIOD_MS: u64 = 200;

/// Largest HTTP request head the metrics listener reads; a larger one is refused 431.
pub const METRICS_REQUEST_BYTES_MAX: usize = 8192;

/// Read and write timeout of one metrics connection, in ms: a client that stalls holds
/// the metrics thread (never the serving loop) at most this long.
pub const METRICS_IO_TIMEOUT_MS: u64 = 1000;

/// Longest nap of a serving loop's idle protocol (`cluster/run/idle.rs`) when the loop
/// serves several regions: the futex wait hears only the first region's doorbell, so
/// the others' hosts wait at most this long.
pub const NAP_SEVERAL_REGIONS: Duration = Duration::from_millis(1);
/// Longest nap of a serving loop whose nodes have peers: fragments, acknowledgements
/// and heartbeats from other nodes arrive through the fabric, which rings no doorbell,
/// so they wait at most this long on top of their round trip.
pub const NAP_WITH_PEERS: Duration = Duration::from_micros(200);
/// How long a serving loop spins after its last busy round before it sleeps. Counted in
/// time, not rounds: a node with peers has timer work every heartbeat (1 ms by default),
/// and a count of idle rounds (2,000 at about a microsecond each) never ran out between
/// two heartbeats, so such a loop never slept and a cluster of N processes took N cores
/// even idle.
pub const SPIN_AFTER_WORK: Duration = Duration::from_micros(50);

const _: () = assert!(REGION_TURN_DESCRIPTORS >= BATCH_MAX, "a turn serves at least one full batch");
const _: () = assert!(HOST_CHECK_PERIOD_MS * 1000 >= HEARTBEAT_PERIOD_US);
const _: () = assert!(TAKE_OVER_INTERVAL_MS >= HOST_CHECK_PERIOD_MS);
// A scrape every second or so sees a fresh snapshot each time.
const _: () = assert!(METRICS_PUBLISH_PERIOD_MS < 1000);
