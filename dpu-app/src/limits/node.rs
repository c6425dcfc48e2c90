//! The node's protocol state: every table a cluster node keeps in flight, all sized at
//! start, and the rounds, retries and timers of its roles.
#![forbid(unsafe_code)]

use super::{OUTCOMES_PER_ENTRY_MAX, OUTCOME_RECORD_BYTES, STORE_WAYS_MAX, VERSIONS_PER_KEY_MAX};

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
/// Commit points a node keeps for measurement (`NodeStats::commit_log`, a ring: the
/// newest overwrite the oldest), 16 bytes each: 1 MiB a node, allocated at start. The
/// load driver looks for a completed write's commit point among the newest
/// `COMMIT_SCAN_MAX` (8192, checked there), so the ring holds eight such windows.
pub const COMMIT_LOG_ENTRIES: usize = 1 << 16;
/// log2 of the entries of a node's recent-jobs index (`protocol/jobs.rs`): the latest
/// directory job started on each (host, slot), hashed, so that a job behind it on the
/// same queue pair expects the word it places. 4096 entries are as many as the jobs a
/// cluster of 16 nodes has in flight ((`WRITES_MAX` + `LEASES_MAX`) x 2 per node); two
/// jobs that share an entry only lose that guess, and a wrong guess costs one CAS round.
pub const RECENT_JOBS_BITS: u32 = 12;
/// Most entries of the shadow directory a node keeps of each peer (`protocol/peer.rs`:
/// the last word seen in each of its slots, the guess a CAS starts from), 12 bytes each:
/// 3 MiB a peer. A directory of up to this many slots is covered whole; a larger one
/// shares entries, and a guess that misses costs a CAS round trip (measured at 1.4 to
/// 1.8 rounds per job with 16K entries over a 64K-slot directory and a trace of 187K
/// keys).
pub const SHADOW_ENTRIES_MAX: usize = 1 << 18;
/// Entries of a peer's shadow directory before the peer has said how many slots it has
/// (then it is sized to them, within this and [`SHADOW_ENTRIES_MAX`]): 12 KiB a peer.
pub const SHADOW_ENTRIES_MIN: usize = 1 << 10;
/// CAS rounds a directory job makes on one slot before it gives up
/// (`protocol/slotjob.rs`; a sweep of the host's own directory tries each slot as many
/// times): the slot changed under every one of them, so others' CASes keep landing (the
/// slot is contended, or its host hostile). The job ends `Contended` with the newest word
/// seen and its owner decides what next; each round is a round trip, so this bounds
/// what a hot slot costs one job.
pub const JOB_ROUNDS_MAX: u8 = 8;
/// Gather rounds a GET makes before it reports `Unavailable` (`protocol/get.rs`): a round
/// READs the key's sets from every reachable peer, and one that can neither prove nor
/// rebuild the newest version gathers again (peers may come back, a write resolve). Each
/// round is a round trip to every peer while the GET holds one of the [`GETS_MAX`]
/// slots; a `Fresh` GET gathers on for as long as its SLA waits, past this bound.
pub const GET_ROUNDS_MAX: u32 = 4;
/// Versions of one key a GET weighs at once (`protocol/get.rs`, `choose`: a fixed array
/// on the stack); a version found once all are taken is not weighed. At least
/// [`VERSIONS_PER_KEY_MAX`] (checked below), so every version one node's sets can hold
/// of the key fits, with room for versions that only some peers still hold.
pub const GET_CANDIDATES_MAX: usize = 8;
/// Longest a lease mark stays without its PUT, whatever the predictor's window, on a
/// network whose round trips are short (see
/// [`lease_mark_max_ns`](crate::cluster::protocol::lease::lease_mark_max_ns)). While a
/// mark stands every host takes its key for being written, so a mark whose PUT never
/// comes costs reads until it is rolled back: longer keeps marks for late PUTs, shorter
/// frees a wrongly predicted key sooner.
pub const LEASE_MARK_MAX_NS: u64 = 20_000_000;
/// Round trips to the farthest directory a lease mark may stay without its PUT, where
/// that is longer than [`LEASE_MARK_MAX_NS`]: a mark across regions takes a far round
/// trip to be placed, and a lease that ended before it was placed saved nothing.
pub const LEASE_MARK_FAR_ROUND_TRIPS: u64 = 4;
/// The longest an offer waits for its answer, or an answer for Ready, before it is
/// sent again (`protocol/membership.rs`): a hello lost with the rendezvous's connection
/// (a full inbox, a cut network) costs a link this much on top of the cut. A cluster
/// that declares a peer dead sooner than 80 ms retries at a quarter of that bound
/// instead, and never faster than its heartbeat (`Membership::offer_retry_ns`): a fixed
/// 20 ms under the simulator's 1.5 ms `dead_after` made every partition's links come
/// back late.
pub const OFFER_RETRY_NS: u64 = 20_000_000;

const _: () = assert!(NOTICE_RECORDS_MAX <= OUTCOMES_PER_ENTRY_MAX);
const _: () = assert!(REQUESTS_STARTED_PER_ROUND >= 1 && REQUESTS_STARTED_PER_ROUND <= WRITES_MAX);
const _: () = assert!(STORE_WAYS <= STORE_WAYS_MAX);
const _: () = assert!(GET_CANDIDATES_MAX >= VERSIONS_PER_KEY_MAX, "every version one node holds of a key is weighed");
const _: () = assert!(SHADOW_ENTRIES_MIN <= SHADOW_ENTRIES_MAX && JOB_ROUNDS_MAX >= 1 && GET_ROUNDS_MAX >= 1);
const _: () = assert!(WRITES_MAX as u64 * 32 <= (1 << 24), "write slot and fragment fit a work-request index");
