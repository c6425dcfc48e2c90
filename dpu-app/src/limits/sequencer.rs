//! The sequencer (`ordering = "sequencer"`): how its versions are cut, how many stamps
//! a writer fetches at once, and how often a claim is retried.
#![forbid(unsafe_code)]

use super::{NODES_MAX, SLOT_VERSION_BITS};

/// Bits of a sequencer version that count stamps within one epoch (the low bits; the
/// epoch is above them, so every stamp of a later epoch is above every stamp of an
/// earlier one). 2^32 stamps are 71 minutes at a million stamps a second, after which
/// the sequencer claims the next epoch; the 24 epoch bits left (16.7 million claims)
/// also pay for the epochs the sequencer rolls to settle holes in the order (one per
/// fetch answer a fault lost: a simulated cluster under constant crashes and cuts rolls
/// about 60 a second, three days of that).
pub const SEQUENCE_BITS: u32 = 32;
/// Bits of the epoch in a sequencer version (above the sequence).
pub const EPOCH_BITS: u32 = SLOT_VERSION_BITS - SEQUENCE_BITS;
/// The last epoch: a cluster that claimed this many times needs its leader words reset.
pub const EPOCH_MAX: u32 = (1 << EPOCH_BITS) - 1;
/// Most stamps a writer takes with one FETCH_ADD (`cluster.stamp_block`).
pub const STAMP_BLOCK_MAX: u32 = 1024;
/// Claim rounds (CAS on every node's leader word) one claim makes before it gives up
/// and waits for the next silence check (a word that keeps changing under it means
/// another claimant is active).
pub const CLAIM_ROUNDS_MAX: u32 = 8;
/// A claimant that has had no link to the named sequencer since it learned the word (it
/// just restarted and has not connected yet, or the sequencer was gone before) waits
/// this many `dead_after` more before it counts the sequencer silent.
pub const UNREACHED_DEAD_AFTERS: u64 = 3;

/// Heartbeats a fetched block of stamps may be used for (`protocol/sequencer.rs`): a
/// write stamped from an older block could order before writes that completed on other
/// nodes since it was fetched. A block past it is dropped and the next write fetches
/// anew, so shorter costs more FETCH_ADD round trips to the sequencer and longer lets a
/// stamp lag further behind the writes it orders after.
pub const STAMP_BLOCK_TTL_HEARTBEATS: u64 = 4;

/// Stamps of the current epoch an ordered applier holds fates for, from its cursor up
/// (`cluster::order`): a fate further ahead is refused until the cursor moves.
pub const ORDER_WINDOW: u64 = 4096;
/// Ranges of fates of later epochs an ordered applier holds until its cursor reaches
/// their epoch (a write is one range, a block's unused stamps another).
pub const ORDER_AHEAD_MAX: usize = 256;
/// Closes of later epochs an ordered applier holds until its cursor reaches them.
pub const ORDER_CLOSES_MAX: usize = 8;
/// A hole in the order open this long is warned about, naming the nodes it waits
/// for, and again each time its age doubles (`protocol/stall.rs`).
pub const ORDER_STALL_WARN_MS: u64 = 1_000;
/// Times at which an ordered applier noticed holes (a stamp above them resolved); more
/// are merged, which makes holes look older, never younger.
pub const ORDER_NOTICED_MAX: usize = 64;

const _: () = assert!(ORDER_WINDOW >= 2 * STAMP_BLOCK_MAX as u64, "a block's unused stamps fit the window");
const _: () = assert!(ORDER_WINDOW.is_power_of_two() && ORDER_AHEAD_MAX >= 1 && ORDER_CLOSES_MAX >= 1);
/// Questions one round over the Pending stamps of fenced writers asks of the holders'
/// ledgers (`protocol/apply.rs`) before it starts again from the lowest: without a
/// bound, stamps that keep arriving above the round's last starve the ones below it
/// (seed 100018 at 50,000 steps: an order stood at its own writer's stamp for good
/// while the round kept moving up through that writer's newer Pending writes).
pub const LEDGER_ROUND_QUESTIONS: u32 = 16;
/// A rolled-back write (sequencer mode) answers its host `NotDurable` once its stamp
/// is recorded Aborted, when its rollback reached enough holders (`rollbacks.rs`); if
/// that has not happened this many `write_timeout`s past the write's deadline, it
/// answers `Unavailable` (outcome unknown) instead and the rollback goes on.
pub const ROLLBACK_ANSWER_TIMEOUTS: u64 = 1;
/// Rolled-back writes a node tracks at once while their rollback reaches enough holders
/// (`protocol/rollbacks.rs`); one more stays Pending in the fate ring until a restart.
pub const ROLLBACKS_MAX: usize = 1024;

/// Rounds over every peer that find none ahead of this node before an ordered applier's
/// catch-up gives up on copying and marks what was lost missing (`protocol/apply.rs`,
/// `skip_past_loss`): fewer gives up on a peer that is about to come back, more holds
/// the order behind a loss longer.
pub const CATCH_UP_ROUNDS: u8 = 8;
/// Reads in a row that find a torn entry where a catch-up's copy stands before that
/// peer is given up (`protocol/apply.rs`): an entry is torn only while it is being
/// written, which a read or two ride out, so eight in a row mean it stays torn.
pub const CATCH_UP_TORN_READS: u8 = 8;
/// Re-read periods (heartbeats) after which a READ of a peer's fate ring that is not
/// back is given up (`protocol/apply.rs`): a READ answers within a round trip, so one
/// this late lost its link (reset under it) and will not complete.
pub const READ_GIVEN_UP_REREADS: u64 = 8;
/// Blocks of stamps an ordered applier holds for the roll decision
/// (`protocol/apply.rs`): two in hand per node, and as many again.
pub const BLOCKS_HELD: usize = 4 * NODES_MAX;

const _: () = assert!(ORDER_NOTICED_MAX >= 2);
const _: () = assert!(SEQUENCE_BITS < SLOT_VERSION_BITS && EPOCH_BITS >= 8);
const _: () = assert!((STAMP_BLOCK_MAX as u64) < 1 << SEQUENCE_BITS);
