//! The ordered apply (`ordering = "sequencer"`, issue 16 part 4): every node pulls the
//! fate rings of all nodes (`format/fates.rs`) with one-sided READs and releases the
//! cluster's writes in stamp order ([`OrderedApply`]) into its change feed
//! (`format/feed.rs`), which hosts follow.
//!
//! How each stamp's fate is learned: the node that took it records it in its ring, and
//! this applier reads every ring in position order, a chunk per READ, from the first
//! entry that is not final yet (a Pending write is read again until it decides). A
//! committed write is released as a write, an aborted one or an unused rest as a no-op.
//! What no ring records is settled by the epoch's end: once every node's ring shows an
//! entry of a later epoch, that node takes no stamp of the epoch again, and everything
//! it took is in its ring before that entry; so the epoch's stamps are exactly those
//! the rings record, its close is past the highest, and every stamp no ring records
//! (a fetch whose answer was lost, a block a crash left before it was recorded) was
//! never used: a no-op. A hole in the live epoch that no ring records is settled the
//! same way: the sequencer claims the next epoch (`Sequencer::roll`), once, while every
//! node's ring can be read (a node that is down holds its block until its restart
//! records the rest; a new epoch would settle nothing).
//!
//! Nothing here decides alone: a stamp is a no-op only when no ring can record it any
//! more, so every node releases the same order, each prefix in turn, whatever order it
//! reads the rings in. What it cannot know it waits for: a ring it cannot READ (that
//! node is down: the order stalls until it is back, since the cluster has no membership
//! change), a Pending write (its writer decides within its timeout, or at its restart;
//! a rollback once enough holders persisted it, `rollbacks.rs`).
//!
//! Catching up: an applier that finds entries it needed overwritten (it was down, or
//! stalled, while a writer went a whole ring further) can no longer learn those stamps'
//! fates from the rings, so it copies them from a peer's change feed instead, which is
//! registered for READ and advertised in the Hello. It READs the peer's ring header for
//! the peer's cursor (every committed write below it is in the peer's feed) and the peer
//! feed's `dropped` word (it must hold every write after this node's feed), finds the
//! first of the peer's entries above this feed's last version (probing from this feed's
//! next position, where it is when the feeds line up), copies from there up to that
//! cursor, and starts its order again there, reading every ring afresh. A start is taken
//! only when the peer's entry just before it is held and at or below this feed's last
//! version; that, and each entry's position and checksum, is what makes a copy safe.
//! When no peer's feed still holds what is missing (every one wrapped past it), or no
//! peer's order is ahead (every order stalled past what the rings keep), the feed marks
//! those versions missing
//! ([`FeedLog::skip_to`]): a host following it from before is told its cursor is too old,
//! never handed a feed with a gap.

use std::collections::HashMap;

use super::ledgers::{Ledgers, Question, Ruled, Step};
use super::links::Links;
use super::pool::Pool;
use super::stall::{Stall, StallWarnings};
use super::time::Now;
use super::wr::{Kind, WrId};
use crate::cluster::format::fates::{
    FateEntry, FateKind, FateRing, CURSOR_AT, DROPPED_AT, ENTRIES_AT, ENTRY_LEN, NEXT_AT,
};
use crate::cluster::format::feed::{FeedEntry, FeedError, FeedLog, ENTRY_LEN as FEED_ENTRY_LEN};
use crate::cluster::format::ledger::Ledger;
use crate::cluster::holders_rule::Verdict;
use crate::cluster::order::{Applied, Fate, OrderError, OrderStats, OrderedApply};
use crate::cluster::sequence::{epoch_of, first_of, sequence_of};
use crate::fabric::{Op, RawQp};
use crate::limits::{BLOCKS_HELD, CATCH_UP_ROUNDS, CATCH_UP_TORN_READS, READ_GIVEN_UP_REREADS};
use crate::limits::{
    FATE_READ_ENTRIES, HEADER_PAGE_BYTES, LEDGER_ENTRY_BYTES, LEDGER_ROUND_QUESTIONS, LEDGER_SCAN_ENTRIES,
    ORDER_CLOSES_MAX, ORDER_WINDOW, WR_INDEX_MAX,
};

/// What the applier may use of its node for one call.
pub struct ApplyCx<'a, Q: RawQp> {
    pub(super) links: &'a mut Links<Q>,
    /// READ targets: one chunk per node.
    pub(super) pool: &'a Pool,
    /// This node's own ring, read in place.
    pub(super) own: &'a FateRing,
    /// This node's stamp ledger, read in place (its fences, its entries).
    pub(super) ledger: Option<&'a Ledger>,
}

/// Where the applier is with one node's ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reading {
    /// Nothing in flight.
    Idle,
    /// The ring's header words are being READ (where to start; its entries).
    Header(u64),
    /// A chunk of entries (how many) from this position is being READ.
    Chunk(u64, u64),
    /// Catching up: the peer's cursor word in its ring header is being READ.
    Cursor,
    /// Catching up: the peer's change feed's `dropped` word (the newest version it
    /// overwrote or marked missing).
    FeedMark,
    /// Catching up: the entry of the peer's change feed at this position (locating).
    Probe(u64),
    /// Catching up: entries (how many) of the peer's change feed from this position.
    Feed(u64, u64),
    /// The peer's stamp ledger (`ledgers.rs`): a step of the question under way, or
    /// (`false`) its fence slots alone.
    Ledger(Step, bool),
}

/// Catching up from a peer's change feed (see the module doc).
#[derive(Clone, Copy, Debug)]
struct CatchUp {
    /// The peer copied from.
    peer: u8,
    /// Its cursor (0 until read): every committed write below it is in its feed.
    upto: u64,
    /// Its feed was seen to hold every write after what this feed covers (its
    /// `dropped` is not above it).
    holds: bool,
    /// Locating where the copy starts in the peer's feed, the first position that is
    /// above this feed's last version (or not written yet): the highest position seen
    /// before it (`true`: held, at or below that version; `false`: overwritten), the
    /// lowest seen at or after it, and the galloping step.
    below: Option<(u64, bool)>,
    above: Option<u64>,
    step: u64,
    /// The next position of the peer's feed to copy (0: still locating).
    at: u64,
    /// Peers that could not serve the copy (their feed wrapped past it), in a row.
    refused: usize,
    /// Reads in a row that met a torn entry (being written).
    torn: u8,
    /// Not before this time: a round over every peer found none ahead.
    wait_until_ns: u64,
    /// Rounds over every peer in a row that found none ahead, and the highest stamp
    /// any ring read meanwhile has overwritten (see [`Applier::skip_past_loss`]).
    rounds: u8,
    past: u64,
    /// The copy is done: the order starts again at `upto`.
    done: bool,
    /// Started for a gone writer's ring, not a lost one: with no peer ahead it is
    /// given up, nothing is marked missing.
    for_gone: bool,
}

impl CatchUp {
    fn new(peer: u8) -> Self {
        Self {
            peer,
            upto: 0,
            holds: false,
            below: None,
            above: None,
            step: 1,
            at: 0,
            refused: 0,
            torn: 0,
            wait_until_ns: 0,
            rounds: 0,
            past: 0,
            done: false,
            for_gone: false,
        }
    }
}

/// One node's ring as this applier reads it.
///
/// A READ starts at `next` (where what is still open is read again), except right
/// after one that left `next` stuck: then it starts at `ahead`, so the ring is read on
/// past a write still Pending, or a fate further ahead than the order holds yet. Only
/// so is the marker of a later epoch ever found while the cursor waits for the epoch's
/// end: a hole no ring records is settled by that end, and the entries between it and
/// the marker may be more than the order's window holds (a 600 s soak stopped every
/// order for good that way). Entries read ahead are read again from `next` in turn.
#[derive(Clone, Copy, Debug)]
struct Source {
    /// The first position not yet taken as final; 0 until the header was read.
    next: u64,
    /// The position after the last entry read from the ring (any READ), if beyond
    /// `next`: the entries between were read once but not all taken as final.
    ahead: u64,
    /// The next READ starts at `ahead`: the last READ came back whole and left entries
    /// past `next` open (or was itself read ahead and came back whole).
    ahead_turn: bool,
    /// The lowest stamp of an entry read but not held yet (further ahead than the
    /// order's window), at or after `next` (`u64::MAX`: none): the order settles no
    /// unrecorded stamp at or above it, which that entry may record. Only a bound: once
    /// the cursor passed it (that entry was read again and held), the ring is read
    /// again from `next` up to `sweep_to` (the `ahead` of then) to learn the next one,
    /// and until then no unrecorded stamp is settled.
    deferred: u64,
    /// See `deferred`; 0: never read again so.
    sweep_to: u64,
    /// The newest epoch its ring showed.
    epoch: u32,
    reading: Reading,
    generation: u32,
    /// When the READ in flight was posted.
    posted_ns: u64,
    /// When it was last read, and whether to read again at once (the last READ came
    /// back full of new final entries: more are likely waiting).
    read_ns: u64,
    moved: bool,
    /// Entries this applier needed were overwritten before it read them.
    lost: bool,
    /// It has taken an entry of the ring since it (re)started reading it.
    started: bool,
    /// The next READ of this peer is the ledgers' if they want one.
    ledger_turn: bool,
}

/// What the applier counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ApplyStats {
    /// READs of peers' rings.
    pub reads: u64,
    /// READs that never completed (their link was reset), posted again.
    pub reads_given_up: u64,
    /// Ring entries taken in.
    pub entries: u64,
    /// Stamps settled as no-ops because no ring records them (their epoch ended).
    pub unrecorded: u64,
    /// Rings that lost entries this applier needed (it caught up from a peer's feed).
    pub lost: u64,
    /// Catch-ups from a peer's change feed completed.
    pub catch_ups: u64,
    /// Peers a catch-up could not copy from (their feed wrapped past what was missing,
    /// or did not hold it), tried in turn.
    pub refusals: u64,
    /// Feed entries copied from peers by catch-ups.
    pub copied: u64,
    /// Catch-ups that found no peer's feed still holding what was missing: the feed
    /// marked those versions missing (hosts following from before restart from a
    /// snapshot).
    pub feed_gaps: u64,
    /// Fates the order refused as contradicting what it knew (a bug; logged).
    pub conflicts: u64,
    /// Feed appends that failed.
    pub feed_errors: u64,
    /// Questions asked of the holders' ledgers (`ledgers.rs`).
    pub ledger_questions: u64,
    /// Stamps decided by the holders' rule from the ledgers.
    pub ruled: u64,
    /// Scans of a gone writer's part of the ledgers that fence it.
    pub scans: u64,
    /// Catch-ups from a peer's feed started past a gone writer's ring (see
    /// `ask_ledgers`).
    pub gone_catch_ups: u64,
}

/// Which turn a question to the holders' ledgers takes in its round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Turn {
    /// The stamp the order stands at, due again: outside the round.
    Cursor,
    /// The round's next stamp above its last.
    Next,
    /// The first of a new round (or a scan, which restarts it).
    Starts,
}

/// A round of questions to the holders' ledgers over the Pending stamps of fenced
/// writers, by stamp (see `Applier::ask_ledgers`).
#[derive(Clone, Copy, Debug, Default)]
struct Round {
    /// The stamp last asked in the round.
    last: u64,
    /// When the round's first question went.
    at: u64,
    /// Questions the round asked: at [`LEDGER_ROUND_QUESTIONS`] the next starts from
    /// the lowest stamp.
    questions: u32,
    /// When the stamp the order stands at was last asked (it goes first once a
    /// give-up period, whatever the round).
    cursor_ns: u64,
}

/// The node's ordered apply.
pub struct Applier {
    me: u8,
    order: OrderedApply,
    feed: FeedLog,
    sources: Vec<Source>,
    /// Stamps some ring shows Pending, and that ring's node and entry, and when it was
    /// first seen so.
    pending: HashMap<u64, (u8, FateEntry, u64)>,
    /// Blocks the rings record that reach past the cursor, and their nodes: their
    /// writers account for every stamp in them (used, or unused when dropped), so no
    /// roll is needed there.
    blocks: Vec<(std::ops::Range<u64>, u8)>,
    /// The end (exclusive) of the highest stamp recorded of each epoch seen.
    ends: Vec<(u32, u64)>,
    /// The epoch every ring has moved past, and its end: its unrecorded stamps are no-ops.
    complete: Option<(u32, u64)>,
    /// The cursor and since when it has not moved.
    stuck: (u64, u64),
    /// The cursor a roll was last asked at (once per stuck stamp).
    rolled_at: u64,
    reread_ns: u64,
    /// Catching up from a peer's feed, if it fell a whole ring behind a writer.
    catch: Option<CatchUp>,
    /// Warnings about a hole that stays open.
    warnings: StallWarnings,
    /// The holders' ledgers, for stamps the rings do not decide in time (`ledgers.rs`),
    /// and where a READ of one is copied out of the pool.
    ledgers: Ledgers,
    ledger_buf: Box<[u8]>,
    /// The order has stood this long before the ledgers are asked.
    rule_after_ns: u64,
    /// When the fences were last read.
    fences_read_ns: u64,
    /// The epoch every ring but gone writers' was first seen past, and when.
    past_at: Option<(u32, u64)>,
    /// When a catch-up past a gone writer's ring last started or gave up.
    gone_catch_ns: u64,
    /// The rings the complete epoch was taken past without (their writers gone).
    complete_gone: u32,
    /// The round of questions over fenced writers' Pending stamps under way.
    round: Round,
    /// The stamp at the cursor last found in a gone writer's block its ring does not
    /// record, and when the order first stood at it.
    gone_block_at: Option<(u64, u64)>,
    /// Stamps the ledgers decided, and decided fates of writers this node fences: for
    /// the node (its store, and its own ring's stamps).
    decided: Vec<Ruled>,
    /// Counters.
    pub stats: ApplyStats,
}

impl std::fmt::Debug for Applier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Applier").field("cursor", &self.order.cursor()).field("stats", &self.stats).finish()
    }
}

impl Applier {
    /// The applier of node `me` of `n`, resuming at the cursor `own` keeps, with its
    /// feed `feed`; rings are read again every `reread_ns` while nothing moves, and the
    /// holders' ledgers `ledgers` are asked once the order stood `rule_after_ns`.
    pub fn new(
        me: u8,
        n: usize,
        own: &FateRing,
        feed: FeedLog,
        reread_ns: u64,
        ledgers: Ledgers,
        now: Now,
    ) -> Result<Self, OrderError> {
        let cursor = match own.cursor() {
            0 => first_of(1),
            c => c,
        };
        let rule_after_ns = ledgers.rule_after_ns();
        Ok(Self {
            me,
            order: OrderedApply::new(cursor)?,
            feed,
            sources: vec![FRESH; n],
            pending: HashMap::with_capacity(ORDER_WINDOW as usize),
            blocks: Vec::with_capacity(BLOCKS_HELD),
            ends: Vec::with_capacity(2 * ORDER_CLOSES_MAX),
            complete: None,
            stuck: (cursor, now.mono_ns),
            rolled_at: 0,
            reread_ns,
            catch: None,
            warnings: StallWarnings::default(),
            ledgers,
            ledger_buf: vec![0u8; LEDGER_SCAN_ENTRIES as usize * LEDGER_ENTRY_BYTES].into_boxed_slice(),
            rule_after_ns,
            fences_read_ns: 0,
            past_at: None,
            gone_catch_ns: 0,
            complete_gone: 0,
            round: Round::default(),
            gone_block_at: None,
            decided: Vec::new(),
            stats: ApplyStats::default(),
        })
    }

    /// The next stamp to release: every stamp below it was released (while catching
    /// up, copied into the feed: the order's own cursor moves there once the copy is
    /// done).
    pub fn cursor(&self) -> u64 {
        match self.catch {
            Some(_) => self.order.cursor().max(self.feed.last_version() + 1),
            None => self.order.cursor(),
        }
    }

    /// What the order released.
    pub fn order_stats(&self) -> OrderStats {
        self.order.stats
    }

    /// The change feed.
    pub fn feed(&self) -> &FeedLog {
        &self.feed
    }

    /// How long the cursor has stood still at `now`.
    pub fn stuck_ns(&self, now: Now) -> u64 {
        now.mono_ns.saturating_sub(self.stuck.1)
    }

    /// Whether the sequencer should claim the next epoch to settle the stamp at the
    /// cursor: it is of the live epoch `leading`, no ring records it, it has been stuck
    /// past `after_ns`, every ring was read since, and no roll was asked for it yet.
    pub fn wants_roll(&mut self, leading: u32, after_ns: u64, now: Now) -> bool {
        let c = self.order.cursor();
        // A gone writer's block or ring holds nothing up once its epoch is past: the
        // ledgers decide its stamps (`ledgers.rs`).
        let gone = |j: u8| self.ledgers.gone(j);
        // A stamp of a block its writer recorded is the writer's to account for (used,
        // or its rest dropped); one still unaccounted for twice as long is rolled over
        // all the same (a rest the writer could not record: its ring was full).
        let in_block = self.blocks.iter().any(|&(ref b, j)| b.contains(&c) && !gone(j));
        let ready = epoch_of(c) == leading
            && !self.pending.contains_key(&c)
            && (!in_block || self.stuck_ns(now) >= 2 * after_ns)
            && self.rolled_at != c
            && self.stuck_ns(now) >= after_ns
            && (self.sources.iter().enumerate())
                .all(|(j, s)| (s.next != 0 && !s.lost && s.read_ns > self.stuck.1) || gone(j as u8));
        if ready {
            self.rolled_at = c;
        }
        ready
    }

    /// One round: reads its own ring, posts READs of the peers' rings that are due,
    /// settles what the epochs' ends allow and releases into the feed.
    pub fn poll<Q: RawQp>(&mut self, cx: &mut ApplyCx<'_, Q>, now: Now) -> bool {
        if self.catch.is_some() {
            return self.catch_up(cx, now);
        }
        self.ledgers.watch_own_fences(cx.ledger, now.mono_ns);
        let mut busy = self.read_own(cx.own, now);
        for j in 0..self.sources.len() as u8 {
            if j != self.me {
                busy |= self.post_read(cx, j, now);
            }
        }
        busy |= self.ask_ledgers(cx.ledger, cx.own, now);
        busy |= self.settle_epochs(now);
        busy |= self.release(cx.own, now);
        // The whole stall (who holds the stamp, which rings went unread) only when a
        // warning about it is due.
        let hole = self.order.oldest_hole(now.mono_ns);
        if hole.is_some_and(|(version, open_ns)| self.warnings.due(version, open_ns, now.mono_ns)) {
            let stall = self.stall(now.mono_ns);
            self.warnings.check(self.me, stall, now.mono_ns);
        }
        busy
    }

    /// The hole at the cursor, if one holds the order back (none while catching up:
    /// the copy moves the cursor): how long it has been open, the node whose ring
    /// records its stamp, and the rings not read for `READ_GIVEN_UP_REREADS` times
    /// `reread_ns` (each is read about every `reread_ns`), at `now_ns` (monotonic).
    pub fn stall(&self, now_ns: u64) -> Option<Stall> {
        if self.catch.is_some() {
            return None;
        }
        let (version, open_ns) = self.order.oldest_hole(now_ns)?;
        let held_by = self
            .pending
            .get(&version)
            .map(|&(j, _, _)| j)
            .or_else(|| self.blocks.iter().find(|(b, _)| b.contains(&version)).map(|&(_, j)| j));
        let silent_ns = READ_GIVEN_UP_REREADS * self.reread_ns;
        let unread = (self.sources.iter().enumerate())
            .filter(|&(j, s)| j != self.me as usize && now_ns.saturating_sub(s.read_ns) >= silent_ns)
            .fold(0u64, |bits, (j, _)| bits | 1 << j);
        Some(Stall { version, open_ns, held_by, unread })
    }

    /// Where this applier stands with each ring and epoch (for a failure's message):
    /// per ring its newest epoch, next position, whether it lost entries, whether its
    /// writer is gone; the epoch known complete.
    pub fn debug_state(&self) -> String {
        let rings: Vec<String> = (self.sources.iter().enumerate())
            .map(|(j, s)| {
                format!("{j}: epoch {} next {} lost {} gone {}", s.epoch, s.next, s.lost, self.ledgers.gone(j as u8))
            })
            .collect();
        let c = self.order.cursor();
        let at = self.pending.get(&c).map(|&(j, e, _)| (j, e.write_seq, self.ledgers.gone_verdict(j, c)));
        let blocks: Vec<_> = self.blocks.iter().filter(|(b, _)| b.contains(&c)).collect();
        format!(
            "rings [{}], complete {:?}, catching up {}, pending at the cursor {at:?}, blocks {blocks:?}, {}",
            rings.join("; "),
            self.complete,
            self.catch.is_some(),
            self.ledgers.debug_state()
        )
    }

    /// Warnings logged about holes that stayed open (see `protocol/stall.rs`).
    pub fn stall_warnings(&self) -> u64 {
        self.warnings.warned
    }

    fn read_own(&mut self, own: &FateRing, now: Now) -> bool {
        let me = self.me as usize;
        if self.sources[me].next == 0 {
            let entries = u64::from(own.entries());
            if own.dropped() > self.order.cursor() {
                self.lose(self.me, own.dropped());
                return false;
            }
            self.sources[me].next = own.next().saturating_sub(entries).max(1);
        }
        let (from, to) = (self.chunk_start(self.me), own.next());
        // As for a peer's ring: at once only while a chunk's worth waits unread.
        let s = self.sources[me];
        let unread = s.ahead.max(from);
        if !s.moved && to < unread + u64::from(FATE_READ_ENTRIES) && now.mono_ns < s.read_ns + self.reread_ns {
            return false;
        }
        let k = (to.saturating_sub(from)).min(u64::from(FATE_READ_ENTRIES)) as usize;
        let mut chunk = [0u8; FATE_READ_ENTRIES as usize * ENTRY_LEN];
        let k = own.copy_from(from, &mut chunk[..k * ENTRY_LEN]);
        // Own entries below the published next are whole (this thread wrote them).
        self.take_chunk(self.me, from, &chunk[..k * ENTRY_LEN], now)
    }

    /// Posts the READ of node `j`'s ring that is due, if any.
    fn post_read<Q: RawQp>(&mut self, cx: &mut ApplyCx<'_, Q>, j: u8, now: Now) -> bool {
        let s = self.sources[j as usize];
        if s.reading != Reading::Idle {
            self.give_up_stale(j, now);
            return false;
        }
        let Some(peer) = cx.links.peer(j).filter(|p| p.is_up()).and_then(|p| p.remote) else {
            return false;
        };
        // The ledgers' READs (only while the order stands) take turns with the ring's,
        // so that neither starves the other.
        let ring_due = !s.lost && (s.moved || now.mono_ns >= s.read_ns + self.reread_ns);
        if !ring_due || self.sources[j as usize].ledger_turn {
            self.sources[j as usize].ledger_turn = false;
            if let Some((step, for_ask, at, len)) = self.ledgers.next_read(j, peer.ledger) {
                self.post(cx, j, Reading::Ledger(step, for_ask), peer.ledger.at(at), len, now);
                return true;
            }
        }
        if !ring_due {
            return false;
        }
        self.sources[j as usize].ledger_turn = true;
        let remote = peer.fates;
        if remote.len <= ENTRIES_AT as u64 {
            return false;
        }
        let entries = (remote.len - ENTRIES_AT as u64) / ENTRY_LEN as u64;
        let (reading, at, len) = if s.next == 0 {
            (Reading::Header(entries), CURSOR_AT as u64, HEADER_WORDS_LEN)
        } else {
            let from = self.chunk_start(j);
            let slot = from % entries;
            let k = u64::from(FATE_READ_ENTRIES).min(entries - slot);
            (Reading::Chunk(from, k), ENTRIES_AT as u64 + slot * ENTRY_LEN as u64, k as usize * ENTRY_LEN)
        };
        self.post(cx, j, reading, remote.at(at), len, now);
        true
    }

    /// Where the next READ of node `j`'s ring starts (see [`Source`]): at `ahead` while
    /// READs there come back whole after one from `next` that left entries open, else
    /// at `next`.
    fn chunk_start(&self, j: u8) -> u64 {
        let s = &self.sources[j as usize];
        if s.ahead > s.next && s.ahead_turn {
            s.ahead
        } else {
            s.next
        }
    }

    /// The bound below which an unrecorded stamp may be settled as a no-op: the lowest
    /// stamp some ring's entry may record that the order could not hold yet
    /// (`u64::MAX`: none; 0 while a ring is read again from `next`, see [`Source`]).
    /// Not only a query: a ring whose bound the cursor passed starts being read again
    /// from `next` here, to learn its next bound.
    fn settle_bound(&mut self, now: Now) -> u64 {
        let cursor = self.order.cursor();
        let mut lowest = u64::MAX;
        for (j, s) in self.sources.iter_mut().enumerate() {
            if s.deferred <= cursor {
                (s.sweep_to, s.ahead, s.deferred) = (s.ahead.max(s.sweep_to), s.next, u64::MAX);
            }
            // A gone writer's ring may never be read again: its ledgers stand for it.
            // Not while its ring still answers: what it read ahead is read again.
            let silent = now.mono_ns >= s.read_ns.saturating_add(self.rule_after_ns);
            if !(self.ledgers.gone(j as u8) && silent) {
                lowest = lowest.min(if s.ahead < s.sweep_to { 0 } else { s.deferred });
            }
        }
        lowest
    }

    /// While the order stands past `rule_after_ns`: reads the fences (this node's in
    /// place, the peers' once a re-read period), asks the ledgers about the stamp at
    /// the cursor when its writer is fenced somewhere (its Pending write, or every
    /// write of a writer fenced out), and takes what they decided. True if anything
    /// was released into the order.
    fn ask_ledgers(&mut self, own: Option<&Ledger>, ring: &FateRing, now: Now) -> bool {
        let give_up_ns = READ_GIVEN_UP_REREADS * self.reread_ns;
        self.ledgers.finish(now.mono_ns, give_up_ns);
        self.stats.scans = self.ledgers.scans_done;
        let mut moved = false;
        let ruled: Vec<Ruled> = self.ledgers.take_ruled().collect();
        for r in ruled {
            moved |= self.rule(r, now);
        }
        let c = self.order.cursor();
        if self.stuck_ns(now) < self.rule_after_ns || self.catch.is_some() {
            return moved;
        }
        if now.mono_ns >= self.fences_read_ns + self.reread_ns {
            self.fences_read_ns = now.mono_ns;
            self.ledgers.refresh(own, now.mono_ns);
        }
        // A stamp no ring this node read records, while a gone writer's ring stopped
        // answering before this node read it all: peers that read further may have
        // released past it. Their feeds hold the order; copy it (`catch_up`). The
        // live epoch ends only by a roll, which the sequencer asks for only when its
        // own order stands.
        let unrecorded = !self.pending.contains_key(&c) && !self.blocks.iter().any(|(b, _)| b.contains(&c));
        let silent_gone = (0..self.sources.len())
            .any(|j| self.ledgers.gone(j as u8) && now.mono_ns >= self.sources[j].read_ns + self.rule_after_ns);
        let long =
            self.stuck_ns(now) >= 4 * self.rule_after_ns && now.mono_ns >= self.gone_catch_ns + 4 * self.rule_after_ns;
        if unrecorded && silent_gone && long && self.sources.len() > 1 {
            self.gone_catch_ns = now.mono_ns;
            self.stats.gone_catch_ups += 1;
            let peer = ((usize::from(self.me) + 1) % self.sources.len()) as u8;
            self.catch = Some(CatchUp { for_gone: true, ..CatchUp::new(peer) });
            return moved;
        }
        // The stamp at the cursor, of a gone writer: its scan decides it, once its fences
        // were seen whole after the stamp was (it may have been taken after the writer
        // came back). Either a Pending write of its ring, seen when read, or a stamp of
        // its block that its ring, as far as this node read it before the writer stopped
        // answering, does not record (a stamp no ledger names is a no-op), seen when the
        // order first stood at it: peers that read the ring further may be past it, and
        // nothing else would move this order, since the live epoch ends only by a roll.
        let gone_stamp = match self.pending.get(&c) {
            Some(&(w, e, seen_ns)) => Some((w, seen_ns, Some((e.key_hash, e.tombstone)))),
            None => {
                let w = self.blocks.iter().find(|(b, j)| b.contains(&c) && self.ledgers.gone(*j)).map(|&(_, w)| w);
                w.map(|w| {
                    if self.gone_block_at.is_none_or(|(v, _)| v != c) {
                        self.gone_block_at = Some((c, now.mono_ns));
                    }
                    (w, self.gone_block_at.map_or(now.mono_ns, |(_, since)| since), None)
                })
            }
        };
        if let Some((w, since, recorded_key)) = gone_stamp {
            let ruling = self.ledgers.gone_since(w, since).then(|| self.ledgers.gone_ruling(w, c)).flatten();
            if let Some((verdict, key, held)) = ruling.filter(|r| r.0 != Verdict::Undecided) {
                let r = Ruled { version: c, w, key: key.or(recorded_key), write: verdict == Verdict::Write, held };
                return self.rule(r, now) || moved;
            }
        }
        if self.ledgers.asking() {
            return moved;
        }
        // A scan of a writer fenced out first: once taken, it decides every stamp of
        // that writer without another question. Then the Pending writes of fenced
        // writers in turn, by stamp (the one at the cursor, those behind it whose rings
        // cannot take another stamp until they decide: a full ring cannot mark the next
        // epoch, so the cursor's epoch would never end), and this node's own Pending
        // writes the order went past (marked missing; its ring cannot wrap past them).
        // A round over them all waits a give-up period before the next.
        let me = self.me;
        let Round { last, at, questions, cursor_ns } = self.round;
        let entry = |v: u64, w: u8, e: &FateEntry| Question::Entry {
            w,
            write_seq: e.write_seq,
            stamp: v << 8 | u64::from(w),
            key_hash: e.key_hash,
            tombstone: e.tombstone,
        };
        let others = (self.pending.iter())
            .filter(|&(&v, &(w, _, _))| v >= c && self.ledgers.fenced_anywhere(w) && !self.ledgers.gone(w))
            .map(|(&v, &(w, e, _))| (v, entry(v, w, &e)));
        let own_ring = (self.ledgers.fenced_anywhere(me).then(|| ring.pending_entries()).into_iter().flatten())
            .filter(|e| e.version < c)
            .map(|e| (e.version, entry(e.version, me, &e)));
        let mut next = None;
        let mut first = None;
        let mut at_cursor = None;
        for (v, q) in others.chain(own_ring) {
            if v == c {
                at_cursor = Some((v, q));
            }
            if v > last && next.is_none_or(|(n, _)| v < n) {
                next = Some((v, q));
            }
            if first.is_none_or(|(f, _)| v < f) {
                first = Some((v, q));
            }
        }
        // A round is bounded: stamps that keep arriving above its last would starve
        // the ones below. The stamp the order stands at goes first, once a give-up
        // period.
        let round_full = questions >= LEDGER_ROUND_QUESTIONS;
        if round_full {
            next = None;
        }
        let round_over = next.is_none() && !round_full && now.mono_ns < at + give_up_ns;
        let cursor_due = at_cursor.filter(|_| now.mono_ns >= cursor_ns.saturating_add(give_up_ns));
        let scan = (0..self.sources.len() as u8).find(|&j| j != me && self.ledgers.wants_scan(j));
        let question = match (scan, cursor_due, next, round_over) {
            (Some(w), ..) => Some((c, Question::Scan { w }, Turn::Starts)),
            (None, Some((v, q)), ..) => Some((v, q, Turn::Cursor)),
            (None, None, Some((v, q)), _) => Some((v, q, Turn::Next)),
            (None, None, None, false) => first.map(|(v, q)| (v, q, Turn::Starts)),
            (None, None, None, true) => None,
        };
        if let Some((v, q, turn)) = question {
            if v == c && matches!(q, Question::Entry { .. }) {
                self.round.cursor_ns = now.mono_ns;
            }
            match turn {
                // The cursor's own turn neither starts nor moves the round.
                Turn::Cursor => {}
                Turn::Next => self.round = Round { last: v, questions: questions + 1, ..self.round },
                // A new round starts its give-up period when its first question goes.
                Turn::Starts => self.round = Round { last: v, at: now.mono_ns, questions: 1, ..self.round },
            }
            self.stats.ledger_questions += 1;
            self.ledgers.ask(q, own, now.mono_ns);
        }
        moved
    }

    /// Resolves what the ledgers decided of a stamp, and keeps it for the node.
    fn rule(&mut self, r: Ruled, now: Now) -> bool {
        let fate = match (r.write, r.key) {
            (true, Some((key_hash, tombstone))) => Fate::Write { key_hash, tombstone },
            (true, None) => return false,
            (false, _) => Fate::NoOp,
        };
        if r.version < self.order.cursor() {
            // Released already (or marked missing): only its writer's ring takes it.
            if r.w == self.me {
                self.stats.ruled += 1;
                self.decided.push(r);
            }
            return false;
        }
        match self.order.resolve(r.version, fate, now.mono_ns) {
            Ok(()) => {
                self.stats.ruled += 1;
                self.pending.remove(&r.version);
                self.decided.push(r);
                true
            }
            Err(OrderError::Ahead { .. }) => {
                // Too far ahead for the order to hold yet; the decision stands all the
                // same (the ledgers it came from are frozen): this node's own ring takes
                // it now, and the order learns it from there.
                if r.w == self.me {
                    self.stats.ruled += 1;
                    self.decided.push(r);
                }
                false
            }
            Err(err) => {
                self.stats.conflicts += 1;
                if self.stats.conflicts.is_power_of_two() {
                    tracing::error!(node = self.me, writer = r.w, error = %err, times = self.stats.conflicts, "the holders' ledgers contradict the order");
                }
                false
            }
        }
    }

    /// The fate of unrecorded stamp `c` of an epoch every ring but gone writers' moved
    /// past: what a gone writer's ledgers say of it, a no-op if none names it; `None`
    /// while one cannot tell yet.
    fn gone_fate(&mut self, c: u64) -> Option<Fate> {
        // A writer the epoch's end was taken without (gone then) that came back: its
        // stamps are its ring's again, read anew; wait until it is past the epoch.
        let epoch = epoch_of(c);
        let back = (0..self.sources.len()).any(|j| {
            let s = &self.sources[j];
            self.complete_gone & (1 << j) != 0 && !self.ledgers.gone(j as u8) && (s.epoch <= epoch || s.lost)
        });
        if back {
            return None;
        }
        for w in 0..self.sources.len() as u8 {
            match self.ledgers.gone_ruling(w, c) {
                None | Some((Verdict::NoOp, _, _)) => {}
                Some((Verdict::Undecided, _, _)) | Some((Verdict::Write, None, _)) => return None,
                Some((Verdict::Write, Some((key_hash, tombstone)), held)) => {
                    self.stats.ruled += 1;
                    self.decided.push(Ruled { version: c, w, key: Some((key_hash, tombstone)), write: true, held });
                    return Some(Fate::Write { key_hash, tombstone });
                }
            }
        }
        Some(Fate::NoOp)
    }

    /// Stamps the ledgers decided, and decided fates of writers this node fences, since
    /// the last call (see `node/apply.rs`).
    pub fn take_decided(&mut self) -> impl Iterator<Item = Ruled> + '_ {
        self.decided.drain(..)
    }

    /// Posts a READ of `len` bytes at `remote` of node `j` into its pool buffer, as
    /// `reading`; a completion of any READ posted before it is ignored.
    fn post<Q: RawQp>(
        &mut self,
        cx: &mut ApplyCx<'_, Q>,
        j: u8,
        reading: Reading,
        remote: crate::fabric::RemoteAddr,
        len: usize,
        now: Now,
    ) {
        let src = &mut self.sources[j as usize];
        let generation = (src.generation + 1) & WR_INDEX_MAX;
        (src.reading, src.generation, src.posted_ns) = (reading, generation, now.mono_ns);
        self.stats.reads += 1;
        let op = Op::Read { remote };
        cx.links.post(j, WrId::new(Kind::FateRead, j, generation, 0), op, cx.pool.buf(u32::from(j), len));
    }

    /// Gives up the READ of node `j` in flight if it is overdue. A link reset drops what
    /// was in flight on it without a completion: the READ is given up (a late
    /// completion carries an old generation) and posted again once the link is back.
    fn give_up_stale(&mut self, j: u8, now: Now) {
        let s = &mut self.sources[j as usize];
        if s.reading != Reading::Idle && now.mono_ns >= s.posted_ns + READ_GIVEN_UP_REREADS * self.reread_ns {
            if let Reading::Ledger(step, for_ask) = s.reading {
                self.ledgers.on_read(j, step, for_ask, None, now.mono_ns);
            }
            s.reading = Reading::Idle;
            self.stats.reads_given_up += 1;
        }
    }

    /// A READ of node `j`'s ring (or, catching up, its feed) came back (`ok`: its bytes
    /// are in the pool); `own` is this node's ring, whose cursor a finished catch-up
    /// moves.
    pub fn on_read(&mut self, pool: &Pool, own: &FateRing, j: u8, generation: u32, ok: bool, now: Now) {
        let Some(s) = self.sources.get(j as usize).copied() else { return };
        if s.generation != generation || s.reading == Reading::Idle {
            return;
        }
        self.sources[j as usize].reading = Reading::Idle;
        if let Reading::Ledger(step, for_ask) = s.reading {
            let len = match step {
                Step::Slots | Step::After => crate::cluster::format::ledger::FENCES_LEN,
                Step::Entries { k, .. } => k as usize * crate::cluster::format::ledger::ENTRY_LEN,
            }
            .min(self.ledger_buf.len());
            if ok {
                pool.read(u32::from(j), &mut self.ledger_buf[..len]);
            }
            self.ledgers.on_read(j, step, for_ask, ok.then_some(&self.ledger_buf[..len]), now.mono_ns);
            return;
        }
        if !ok {
            return;
        }
        match s.reading {
            Reading::Idle | Reading::Ledger(..) => {}
            Reading::Header(entries) => {
                let (_, next, dropped) = header_words(pool, j);
                if dropped > self.order.cursor() {
                    self.lose(j, dropped);
                    return;
                }
                // The oldest position the ring may still hold; a READ finds the rest.
                self.sources[j as usize].next = next.saturating_sub(entries).max(1);
                self.sources[j as usize].moved = true;
            }
            Reading::Chunk(from, k) => {
                let mut chunk = [0u8; FATE_READ_ENTRIES as usize * ENTRY_LEN];
                let len = (k as usize * ENTRY_LEN).min(chunk.len());
                pool.read(u32::from(j), &mut chunk[..len]);
                self.take_chunk(j, from, &chunk[..len], now);
            }
            Reading::Cursor => {
                let (cursor, _, dropped) = header_words(pool, j);
                self.heard_cursor(j, cursor, dropped, own, now);
            }
            Reading::FeedMark => {
                let mut word = [0u8; 8];
                pool.read(u32::from(j), &mut word);
                let covered = self.covered();
                if let Some(c) = self.catch.as_mut().filter(|c| c.peer == j && c.upto != 0 && !c.holds) {
                    if u64::from_le_bytes(word) <= covered {
                        c.holds = true;
                    } else {
                        self.refuse(j, "its feed no longer holds (or never held) every write after this node's", now);
                    }
                }
            }
            Reading::Probe(at) => {
                let mut entry = [0u8; FEED_ENTRY_LEN];
                pool.read(u32::from(j), &mut entry);
                self.probed(j, at, &entry, now);
            }
            Reading::Feed(from, k) => {
                let mut chunk = [0u8; FEED_CHUNK_ENTRIES * FEED_ENTRY_LEN];
                let len = (k as usize * FEED_ENTRY_LEN).min(chunk.len());
                pool.read(u32::from(j), &mut chunk[..len]);
                self.copy_feed(j, from, &chunk[..len], now);
            }
        }
        // A finished catch-up moves the order at once, with the feed it filled.
        if let Some(c) = self.catch.filter(|c| c.done) {
            self.restart_at(c.upto, own, now);
        }
    }

    /// Takes in the entries of node `j`'s ring from position `from` (its `next`, or
    /// `ahead`: see [`Source`]), as far as they are written; true if anything was
    /// learned.
    fn take_chunk(&mut self, j: u8, from: u64, chunk: &[u8], now: Now) -> bool {
        let s = &mut self.sources[j as usize];
        s.read_ns = now.mono_ns;
        let reading_ahead = from > s.next;
        let mut open: Option<u64> = None;
        let mut deferred = u64::MAX;
        let mut last = None;
        for (i, bytes) in chunk.chunks_exact(ENTRY_LEN).enumerate() {
            let position = from + i as u64;
            let Some(e) = FateEntry::parse(bytes) else { break };
            if e.position < position {
                // Not written yet (the slot still holds the position a ring before).
                break;
            }
            if e.position > position {
                // Overwritten before this applier read it. Right after a start from
                // the header, the writer moved on meanwhile: read the header again (it
                // says whether what went was below the cursor); otherwise the order
                // can no longer be sure.
                if i == 0 && !self.sources[j as usize].started && !reading_ahead {
                    self.sources[j as usize].next = 0;
                    self.sources[j as usize].moved = true;
                    return false;
                }
                self.lose(j, e.version);
                return false;
            }
            match self.take_entry(j, &e, now) {
                Took::Final => {}
                Took::Open => {
                    open.get_or_insert(position);
                }
                Took::Later => {
                    // Read on: what follows may be held, or mark a later epoch.
                    open.get_or_insert(position);
                    deferred = deferred.min(e.stamps().start);
                }
            }
            last = Some(position);
            self.sources[j as usize].started = true;
        }
        let s = &mut self.sources[j as usize];
        let Some(last) = last else {
            (s.moved, s.ahead_turn) = (false, false);
            return false;
        };
        if reading_ahead {
            s.deferred = s.deferred.min(deferred);
            if from != s.ahead {
                // Posted before the ring was to be read again from `next` (its bound was
                // passed): what it read is taken, but `ahead` stays where the new
                // reading is, and the sweep now reaches past this chunk, so every entry
                // up to its end is read again before an unrecorded stamp is settled.
                // Without that, the sweep's first chunk forgot the stamps this one
                // deferred, and a write recorded here was settled as a no-op.
                s.sweep_to = s.sweep_to.max(last + 1);
                (s.moved, s.ahead_turn) = (true, false);
                return true;
            }
        } else {
            // Read again from `next` up to everything read before: exactly what waits.
            s.deferred = if last + 1 >= s.ahead { deferred } else { s.deferred.min(deferred) };
            s.next = open.unwrap_or(last + 1);
        }
        s.ahead = s.ahead.max(last + 1);
        // A ring keeps being READ at once while READs come back whole (every entry of
        // the chunk written); otherwise once per `reread_ns` (each READ of the
        // emulated fabric costs CPU, and a write's fate reaches every feed within
        // that anyway).
        s.moved = last + 1 == from + (chunk.len() / ENTRY_LEN) as u64;
        s.ahead_turn = s.moved && s.ahead > s.next && (reading_ahead || open.is_some());
        true
    }

    fn lose(&mut self, j: u8, stamp: u64) {
        let s = &mut self.sources[j as usize];
        if s.lost {
            return;
        }
        s.lost = true;
        self.stats.lost += 1;
        if self.sources.len() < 2 {
            tracing::error!(node = self.me, stamp, cursor = self.order.cursor(), "this node's fate ring overwrote entries its order had not read, and a one-node cluster has no peer to catch up from: its order and change feed stop here; a larger `fate_entries` in the cluster file's [cluster] avoids this");
            return;
        }
        // Said the 1st, 2nd, 4th, ... time: under constant faults it repeats.
        if self.stats.lost.is_power_of_two() {
            tracing::warn!(
                node = self.me,
                ring = j,
                stamp,
                cursor = self.order.cursor(),
                times = self.stats.lost,
                "node {j}'s fate ring overwrote entries this node had not read: it catches up from a peer's change feed (a larger `fate_entries` in the cluster file's [cluster] lets a node stay down longer without that)"
            );
        }
        if self.catch.is_none() {
            self.catch = Some(CatchUp::new(((usize::from(self.me) + 1) % self.sources.len()) as u8));
        }
    }

    /// The version every committed write up to which this feed holds, or has marked
    /// missing.
    fn covered(&self) -> u64 {
        self.feed.last_version().max(self.feed.dropped())
    }

    /// One step of catching up from a peer's feed: posts the READ that is due, or
    /// starts the order again once the copy is done.
    fn catch_up<Q: RawQp>(&mut self, cx: &mut ApplyCx<'_, Q>, now: Now) -> bool {
        let Some(c) = self.catch else { return false };
        if c.done {
            self.restart_at(c.upto, cx.own, now);
            return true;
        }
        let j = c.peer;
        let s = self.sources[j as usize];
        if s.reading != Reading::Idle {
            self.give_up_stale(j, now);
            return false;
        }
        if now.mono_ns < c.wait_until_ns {
            return false;
        }
        let remote = cx.links.peer(j).filter(|p| p.is_up()).and_then(|p| p.remote);
        let feed_entries = |r: crate::fabric::RemoteRegion| {
            r.len.checked_sub(HEADER_PAGE_BYTES as u64).map_or(0, |b| b / FEED_ENTRY_LEN as u64)
        };
        let Some(r) = remote.filter(|r| r.fates.len > ENTRIES_AT as u64 && feed_entries(r.feed).is_power_of_two())
        else {
            self.next_peer(now);
            return false;
        };
        let entries = feed_entries(r.feed);
        let slot_at = |position: u64| HEADER_PAGE_BYTES as u64 + (position % entries) * FEED_ENTRY_LEN as u64;
        let (reading, region, at, len) = if c.upto == 0 {
            (Reading::Cursor, r.fates, CURSOR_AT as u64, HEADER_WORDS_LEN)
        } else if !c.holds {
            (Reading::FeedMark, r.feed, crate::cluster::format::feed::DROPPED_AT as u64, 8)
        } else if c.at == 0 {
            let x = self.next_probe();
            (Reading::Probe(x), r.feed, slot_at(x), FEED_ENTRY_LEN)
        } else {
            let k = (FEED_CHUNK_ENTRIES as u64).min(entries - c.at % entries);
            (Reading::Feed(c.at, k), r.feed, slot_at(c.at), k as usize * FEED_ENTRY_LEN)
        };
        self.post(cx, j, reading, region.at(at), len, now);
        true
    }

    /// Catching up: the next peer to try; a round over all of them waits a re-read
    /// period before the next.
    fn next_peer(&mut self, now: Now) {
        let n = self.sources.len();
        let Some(c) = self.catch.as_mut() else { return };
        let mut peer = (usize::from(c.peer) + 1) % n;
        if peer == usize::from(self.me) {
            peer = (peer + 1) % n;
        }
        let round = peer <= usize::from(c.peer);
        let wait_until_ns = if round { now.mono_ns + self.reread_ns } else { 0 };
        let rounds = if round { c.rounds.saturating_add(1) } else { c.rounds };
        *c = CatchUp {
            refused: c.refused,
            wait_until_ns,
            rounds,
            past: c.past,
            for_gone: c.for_gone,
            ..CatchUp::new(peer as u8)
        };
    }

    /// Catching up: peer `j`'s ring header came back: its cursor, and the highest stamp
    /// its ring has overwritten.
    fn heard_cursor(&mut self, j: u8, upto: u64, dropped: u64, own: &FateRing, now: Now) {
        let cursor = self.order.cursor();
        let Some(c) = self.catch.as_mut().filter(|c| c.peer == j && c.upto == 0) else { return };
        c.past = c.past.max(dropped);
        if upto > cursor {
            (c.upto, c.rounds) = (upto, 0);
            return;
        }
        // Not ahead of this node: try another.
        self.next_peer(now);
        if let Some(c) = self.catch.filter(|c| c.rounds >= CATCH_UP_ROUNDS) {
            if c.for_gone {
                // Nobody knows more of the gone writer's ring: the order waits (its
                // epoch ends, or a peer gets ahead).
                self.catch = None;
                self.gone_catch_ns = now.mono_ns;
            } else {
                self.skip_past_loss(own);
            }
        }
    }

    /// Catching up, when no peer that answers is ahead of this node for
    /// [`CATCH_UP_ROUNDS`] rounds: every node's order stalled (a node down holding a
    /// block of stamps stalls it until its restart records the block's rest) while the
    /// writers' rings went a whole ring further, so the fates of the stamps they
    /// overwrote are gone everywhere. Rather than stop for good, the feed marks every
    /// version below the highest stamp overwritten missing, and the order goes on
    /// from there: a host following the feed is told its cursor is too old, never
    /// handed a feed with a gap. (Another node may pick a different point; each
    /// feed's writes stay those of the one order.)
    fn skip_past_loss(&mut self, own: &FateRing) {
        let Some(c) = self.catch else { return };
        let upto = c.past.max(own.dropped()).max(self.order.cursor());
        if self.mark_missing(upto) {
            tracing::warn!(
                node = self.me,
                cursor = self.order.cursor(),
                upto,
                times = self.stats.feed_gaps,
                "no node's order is ahead of this one's, and fate rings overwrote fates it needed: the order stalled (a node down holding stamps) longer than the writers take to fill a ring. The feed marks the versions up to {upto:#x} missing (a host following it gets `CursorTooOld` and restarts from a snapshot) and goes on; a larger `fate_entries` in the cluster file's [cluster] rides out longer stalls"
            );
        }
    }

    /// Locating: the position to probe next. It gallops from this feed's next position
    /// (where an aligned peer's copy starts: feeds hold the same writes from position
    /// 1) until the start is bracketed, then bisects.
    fn next_probe(&mut self) -> u64 {
        let hint = self.feed.held().end;
        let Some(c) = self.catch.as_mut() else { return hint };
        let (x, gallop) = match (c.below, c.above) {
            (None, None) => (hint, false),
            (Some((b, _)), None) => (b + c.step, true),
            (None, Some(a)) => (a.saturating_sub(c.step).max(1), true),
            (Some((b, _)), Some(a)) => (b + (a - b) / 2, false),
        };
        if gallop {
            c.step = c.step.saturating_mul(2);
        }
        x
    }

    /// Locating: the peer's feed entry at position `x` came back.
    fn probed(&mut self, j: u8, x: u64, bytes: &[u8], now: Now) {
        let covered = self.covered();
        let Some(c) = self.catch.as_mut().filter(|c| c.peer == j && c.holds && c.at == 0) else { return };
        match FeedEntry::parse(bytes.try_into().expect("an entry's bytes")) {
            None if bytes.iter().any(|&b| b != 0) => {
                c.torn += 1;
                if c.torn > CATCH_UP_TORN_READS {
                    return self.refuse(j, "an entry stays unreadable", now);
                }
                return;
            }
            // Not written yet, or above what this feed covers: the start is at or
            // before it.
            None => c.above = Some(c.above.map_or(x, |a| a.min(x))),
            Some(e) if e.position < x || (e.position == x && e.version > covered) => {
                c.above = Some(c.above.map_or(x, |a| a.min(x)));
            }
            // Overwritten (`false`), or held at or below what this feed covers.
            Some(e) => {
                let held = e.position == x;
                if c.below.is_none_or(|(b, _)| x > b) {
                    c.below = Some((x, held));
                }
            }
        }
        c.torn = 0;
        let (below, above) = (c.below, c.above);
        match (below, above) {
            // The peer holds the entry right before the start, at or below what this
            // feed covers: nothing between is missing from it.
            (Some((b, true)), Some(a)) if a == b + 1 => c.at = a,
            // From the peer's first entry ever: only for a feed that has nothing yet.
            (None, Some(1)) if covered == 0 => c.at = 1,
            (Some((b, false)), Some(a)) if a == b + 1 => {
                self.refuse(j, "its feed wrapped past what this node misses", now)
            }
            (None, Some(1)) => self.refuse(j, "its feed is younger than this node's", now),
            _ => {}
        }
    }

    /// Catching up: entries of peer `j`'s feed from position `from` came back. Takes
    /// them while each is whole, at its position and below the peer's cursor.
    fn copy_feed(&mut self, j: u8, from: u64, chunk: &[u8], now: Now) {
        let Some(mut c) = self.catch.filter(|c| c.peer == j && c.at == from && !c.done) else { return };
        for (i, bytes) in chunk.chunks_exact(FEED_ENTRY_LEN).enumerate() {
            let position = from + i as u64;
            let Some(e) = FeedEntry::parse(bytes.try_into().expect("an entry's bytes")) else {
                if bytes.iter().all(|&b| b == 0) {
                    // Never written: the peer's feed ends here.
                    c.done = true;
                } else {
                    // Torn (being written): read again, a few times.
                    c.torn += 1;
                    if c.torn > CATCH_UP_TORN_READS {
                        self.catch = Some(c);
                        return self.refuse(j, "an entry stays unreadable", now);
                    }
                }
                break;
            };
            if e.position < position || e.version >= c.upto {
                // Not written yet, or written after the cursor was read: every write
                // below the cursor is copied.
                c.done = true;
                break;
            }
            if e.position > position {
                // Overwritten while copying: what was copied stays; another peer (or
                // this one again) is located from there.
                self.catch = Some(c);
                return self.refuse(j, "its feed wrapped while this node copied it", now);
            }
            c.torn = 0;
            c.at = position + 1;
            match self.feed.append(e.version, e.key_hash, e.tombstone) {
                Ok(_) => self.stats.copied += 1,
                Err(err) => {
                    self.stats.feed_errors += 1;
                    tracing::error!(node = self.me, peer = j, error = %err, "cannot copy a peer's feed entry");
                    self.catch = Some(c);
                    return self.refuse(j, "an entry would not append", now);
                }
            }
        }
        self.catch = Some(c);
    }

    /// Catching up: peer `j` cannot serve the copy. Another is tried; once every peer
    /// was refused in a row, the versions below the last one's cursor are marked
    /// missing from this feed and the order starts again there.
    fn refuse(&mut self, j: u8, why: &'static str, now: Now) {
        let peers = self.sources.len() - 1;
        let Some(c) = self.catch.as_mut() else { return };
        c.refused += 1;
        self.stats.refusals += 1;
        if self.stats.refusals.is_power_of_two() {
            tracing::warn!(
                node = self.me,
                peer = j,
                times = self.stats.refusals,
                "cannot catch up from node {j}'s change feed: {why}"
            );
        }
        if c.refused < peers {
            return self.next_peer(now);
        }
        let upto = c.upto;
        if !self.mark_missing(upto) {
            return;
        }
        tracing::warn!(
            node = self.me,
            last = self.feed.last_version(),
            upto,
            times = self.stats.feed_gaps,
            "no peer's change feed still holds the writes this node missed: its feed marks the versions up to {upto:#x} missing, so a host following it from before gets `CursorTooOld` and restarts from a snapshot; a larger `feed_entries` (or `fate_entries`) in the cluster file's [cluster] keeps a node from falling this far behind"
        );
    }

    /// Ends a catch-up that cannot copy: every version below `upto` not in the feed is
    /// marked missing ([`FeedLog::skip_to`]), counted, and the order starts again at
    /// `upto`. True when the caller should say so (the 1st, 2nd, 4th, ... time).
    fn mark_missing(&mut self, upto: u64) -> bool {
        let Some(c) = self.catch.as_mut() else { return false };
        (c.upto, c.done) = (upto, true);
        self.stats.feed_gaps += 1;
        if let Err(err) = self.feed.skip_to(upto - 1) {
            self.stats.feed_errors += 1;
            tracing::error!(node = self.me, error = %err, "cannot mark the change feed's missing versions");
        }
        self.stats.feed_gaps.is_power_of_two()
    }

    /// Starts the order again at `cursor` once a catch-up copied every write below it:
    /// every ring is read afresh from its header.
    fn restart_at(&mut self, cursor: u64, own: &FateRing, now: Now) {
        let order = match OrderedApply::new(cursor) {
            Ok(order) => order,
            Err(err) => {
                self.stats.conflicts += 1;
                tracing::error!(node = self.me, error = %err, "cannot start the order again after a catch-up");
                self.catch = None;
                return;
            }
        };
        let peer = self.catch.map_or(self.me, |c| c.peer);
        self.order = order;
        own.set_cursor(cursor);
        for s in &mut self.sources {
            // A READ still in flight is of the old order: its completion is ignored.
            let generation = (s.generation + 1) & WR_INDEX_MAX;
            *s = Source { generation, ..FRESH };
        }
        self.pending.clear();
        self.blocks.clear();
        self.ends.clear();
        (self.complete, self.stuck, self.rolled_at, self.catch) = (None, (cursor, now.mono_ns), 0, None);
        self.stats.catch_ups += 1;
        tracing::info!(
            node = self.me,
            peer,
            cursor,
            copied = self.stats.copied,
            "caught up from a peer's change feed; the order goes on from the cursor"
        );
    }

    fn end_of(&mut self, epoch: u32, end: u64) {
        if let Some(e) = self.ends.iter_mut().find(|e| e.0 == epoch) {
            e.1 = e.1.max(end);
            return;
        }
        let cursor_epoch = epoch_of(self.order.cursor());
        self.ends.retain(|e| e.0 >= cursor_epoch);
        if self.ends.len() < self.ends.capacity() {
            self.ends.push((epoch, end));
        }
    }

    fn take_entry(&mut self, j: u8, e: &FateEntry, now: Now) -> Took {
        self.stats.entries += 1;
        let epoch = epoch_of(e.version);
        let s = &mut self.sources[j as usize];
        s.epoch = s.epoch.max(epoch);
        let stamps = e.stamps();
        if !stamps.is_empty() && e.kind != FateKind::Epoch {
            self.end_of(epoch, stamps.end);
        }
        let cursor = self.order.cursor();
        let result = match e.kind {
            FateKind::Epoch => return Took::Final,
            FateKind::Block => {
                if stamps.end > cursor && !self.blocks.iter().any(|(b, _)| *b == stamps) {
                    if self.blocks.len() == BLOCKS_HELD {
                        self.blocks.retain(|(b, _)| b.end > cursor);
                    }
                    if self.blocks.len() < BLOCKS_HELD {
                        self.blocks.push((stamps, j));
                    }
                }
                return Took::Final;
            }
            FateKind::Pending => {
                if e.version >= cursor {
                    self.pending.entry(e.version).or_insert((j, *e, now.mono_ns));
                }
                return Took::Open;
            }
            FateKind::Committed | FateKind::Aborted => {
                self.pending.remove(&e.version);
                let write = e.kind == FateKind::Committed;
                if self.ledgers.fenced_here(j) && e.version >= cursor {
                    // This node may hold the write frozen, its rollback not taken: its
                    // store learns the fate here (`node/apply.rs`).
                    let key = Some((e.key_hash, e.tombstone));
                    self.decided.push(Ruled { version: e.version, w: j, key, write, held: 0 });
                }
                let fate =
                    if write { Fate::Write { key_hash: e.key_hash, tombstone: e.tombstone } } else { Fate::NoOp };
                self.order.resolve(e.version, fate, now.mono_ns)
            }
            FateKind::Unused => {
                let from = if epoch_of(cursor) == epoch { stamps.start.max(cursor) } else { stamps.start };
                self.order.resolve_unused(from, stamps.end.max(from), now.mono_ns)
            }
        };
        match result {
            Ok(()) => Took::Final,
            Err(OrderError::Ahead { .. }) => Took::Later,
            Err(err) => {
                self.stats.conflicts += 1;
                if self.stats.conflicts.is_power_of_two() {
                    tracing::error!(node = self.me, ring = j, error = %err, times = self.stats.conflicts, "a fate contradicts the order");
                }
                Took::Final
            }
        }
    }

    /// Closes the cursor's epoch once every ring has moved past it, and settles its
    /// stamps no ring records as no-ops as the cursor reaches them.
    fn settle_epochs(&mut self, now: Now) -> bool {
        let mut busy = false;
        let epoch = epoch_of(self.order.cursor());
        if self.complete.is_some_and(|(e, _)| e >= epoch) {
            return false;
        }
        // A gone writer's ring counts as past the epoch only once its fences were seen
        // whole after every other ring was: the epoch was deposed by then, so nothing
        // of it the writer did after coming back can commit, and a fence read later
        // shows whether it came back before.
        let past = |(j, s): (usize, &Source)| (s.epoch > epoch && !s.lost) || self.ledgers.gone(j as u8);
        if !self.sources.iter().enumerate().all(past) {
            self.past_at = None;
            return false;
        }
        let since = match self.past_at {
            Some((e, ns)) if e == epoch => ns,
            _ => {
                self.past_at = Some((epoch, now.mono_ns));
                now.mono_ns
            }
        };
        let confirmed = (self.sources.iter().enumerate())
            .all(|(j, s)| (s.epoch > epoch && !s.lost) || self.ledgers.gone_since(j as u8, since));
        if confirmed {
            // A gone writer's stamps of the epoch are the ones its holders' ledgers
            // name (`ledgers.rs`): the close is past them too.
            let scanned = (0..self.sources.len() as u8)
                .filter(|&j| self.ledgers.gone(j))
                .flat_map(|j| self.ledgers.scanned(j))
                .filter(|&v| epoch_of(v) == epoch)
                .map(|v| v + 1)
                .max()
                .unwrap_or(0);
            let end = self.ends.iter().find(|e| e.0 == epoch).map_or(0, |e| e.1).max(self.order.cursor()).max(scanned);
            // The first sequence never recorded: an end at the epoch's last sequence
            // wraps into the next epoch's number.
            let end_seq =
                if epoch_of(end) > epoch { 1 << crate::limits::SEQUENCE_BITS } else { sequence_of(end).max(1) };
            match self.order.close_epoch(epoch, end_seq, now.mono_ns) {
                Ok(()) => {
                    tracing::debug!(
                        node = self.me,
                        epoch,
                        end,
                        gone = ?(0..self.sources.len() as u8).filter(|&j| self.ledgers.gone(j)).collect::<Vec<_>>(),
                        since,
                        ledgers = %self.ledgers.debug_state(),
                        "every ring is past the epoch: it is complete"
                    );
                    self.complete = Some((epoch, end));
                    self.complete_gone = (self.sources.iter().enumerate())
                        .filter(|&(_, s)| s.epoch <= epoch || s.lost)
                        .fold(0, |m, (j, _)| m | 1 << j);
                    busy = true;
                }
                Err(err) => {
                    self.stats.conflicts += 1;
                    tracing::error!(node = self.me, error = %err, "an epoch's close contradicts the order");
                }
            }
        }
        busy
    }

    /// Releases what is ready into the feed, settling unrecorded stamps of a complete
    /// epoch on the way; keeps the cursor.
    fn release(&mut self, own: &FateRing, now: Now) -> bool {
        let start = self.order.cursor();
        let bound = self.settle_bound(now);
        for _ in 0..ORDER_WINDOW {
            if let Some(a) = self.order.release() {
                self.append(a);
                continue;
            }
            let c = self.order.cursor();
            match self.complete {
                Some((e, end)) if epoch_of(c) == e && c < end && !self.pending.contains_key(&c) && c < bound => {
                    tracing::trace!(
                        node = self.me,
                        stamp = c,
                        epoch = e,
                        end,
                        "an unrecorded stamp of a complete epoch"
                    );
                    // Every ring moved past this epoch without recording the stamp; a
                    // gone writer's holders may name it.
                    let Some(fate) = self.gone_fate(c) else { break };
                    if fate == Fate::NoOp {
                        self.stats.unrecorded += 1;
                    }
                    if let Err(err) = self.order.resolve(c, fate, now.mono_ns) {
                        self.stats.conflicts += 1;
                        tracing::error!(node = self.me, error = %err, "settling an unrecorded stamp");
                        break;
                    }
                }
                _ => break,
            }
        }
        let c = self.order.cursor();
        if c == start {
            return false;
        }
        // Pending stamps leave the set as their decisions are read; what stays behind
        // the cursor (a ring that stopped) is swept only once the set has grown, since
        // a sweep visits every bucket.
        if self.pending.len() > ORDER_WINDOW as usize {
            self.pending.retain(|&v, _| v >= c);
        }
        self.stuck = (c, now.mono_ns);
        own.set_cursor(c);
        true
    }

    fn append(&mut self, a: Applied) {
        let Fate::Write { key_hash, tombstone } = a.fate else { return };
        if a.version <= self.feed.last_version() {
            // Released again after a restart that kept the feed but not the cursor.
            return;
        }
        if let Err(e) = self.feed.append(a.version, key_hash, tombstone) {
            self.stats.feed_errors += 1;
            if self.stats.feed_errors.is_power_of_two() {
                tracing::error!(node = self.me, error = %e, times = self.stats.feed_errors, "cannot append to the change feed");
            }
        }
    }

    /// Up to `out.len()` feed entries after version `after` (see [`FeedLog::read`]).
    pub fn read_feed(
        &self,
        after: u64,
        out: &mut [crate::cluster::format::feed::FeedEntry],
    ) -> Result<usize, FeedError> {
        self.feed.read(after, out)
    }
}

/// The header words of node `j`'s ring a READ brought into its pool buffer (bytes
/// `CURSOR_AT..DROPPED_AT + 8` of the ring): its cursor, next position and dropped stamp.
fn header_words(pool: &Pool, j: u8) -> (u64, u64, u64) {
    let mut words = [0u8; HEADER_WORDS_LEN];
    pool.read(u32::from(j), &mut words);
    let word = |at: usize| u64::from_le_bytes(words[at - CURSOR_AT..at - CURSOR_AT + 8].try_into().expect("8"));
    (word(CURSOR_AT), word(NEXT_AT), word(DROPPED_AT))
}

/// Bytes of a READ of a ring's header words ([`header_words`]).
const HEADER_WORDS_LEN: usize = DROPPED_AT + 8 - CURSOR_AT;

/// A ring not read yet.
const FRESH: Source = Source {
    next: 0,
    ahead: 0,
    ahead_turn: false,
    sweep_to: 0,
    deferred: u64::MAX,
    epoch: 0,
    reading: Reading::Idle,
    generation: 0,
    posted_ns: 0,
    read_ns: 0,
    moved: true,
    lost: false,
    started: false,
    ledger_turn: false,
};

/// Feed entries per catch-up READ: what a ring chunk's pool buffer holds.
const FEED_CHUNK_ENTRIES: usize = FATE_READ_ENTRIES as usize * ENTRY_LEN / FEED_ENTRY_LEN;

/// What taking one entry did.
enum Took {
    /// Its fate is final (or it carries none).
    Final,
    /// A write not decided yet: read it again.
    Open,
    /// The order cannot hold it yet: read it again once the cursor moved.
    Later,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::format::file::testing::TempDir;
    use crate::cluster::sequence::version;
    use crate::fabric::emu::{EmuNode, ModelConfig, Network, SystemClock};
    use crate::fabric::{Access, Fabric, QpOptions};
    use std::sync::Arc;

    type Qp = <EmuNode as Fabric>::Qp;

    /// A one-node applier over its own ring (no peer is READ), with its files in `dir`.
    fn one_node(dir: &TempDir, ring_entries: u32) -> (EmuNode, FateRing, Applier, Links<Qp>, Pool) {
        let (fabric, ring, applier) = node_0_of(dir, 1, ring_entries);
        let links = Links::new(0, vec![None], QpOptions::default(), 0, 0);
        let pool = Pool::new(&fabric, 1, FATE_READ_ENTRIES as usize * ENTRY_LEN, Access::LOCAL_WRITE).unwrap();
        (fabric, ring, applier, links, pool)
    }

    /// Node 0 of `n`: its fabric node, its own ring and its applier, files in `dir`.
    fn node_0_of(dir: &TempDir, n: usize, ring_entries: u32) -> (EmuNode, FateRing, Applier) {
        let net = Network::new(ModelConfig::ideal(), Arc::new(SystemClock::new())).unwrap();
        let fabric = net.node().unwrap();
        let ring = FateRing::open(&fabric, &dir.file("fates.prfate"), 0, ring_entries).unwrap();
        let feed = FeedLog::open(&dir.file("feed.prfeed"), 0, 1 << 14).unwrap();
        let placement = crate::cluster::placement::Placement::all_storage(n);
        let ledgers = Ledgers::new(0, n, 1, 1, placement, 1_000_000);
        let now = Now { mono_ns: 0, wall_us: 0 };
        let applier = Applier::new(0, n, &ring, feed, 1_000_000, ledgers, now).unwrap();
        (fabric, ring, applier)
    }

    /// Polls until the cursor passes `past` or `rounds` polls went by (1 ms apart).
    fn poll_until(a: &mut Applier, ring: &FateRing, links: &mut Links<Qp>, pool: &Pool, past: u64, rounds: u64) -> u64 {
        for t in 1..=rounds {
            let mut cx = ApplyCx { links: &mut *links, pool, own: ring, ledger: None };
            a.poll(&mut cx, Now { mono_ns: t * 1_000_000, wall_us: 0 });
            if a.cursor() > past {
                break;
            }
        }
        a.cursor()
    }

    #[test]
    fn an_unrecorded_hole_followed_by_more_than_the_window_is_settled_by_the_epochs_end() {
        // Stamp 1 of epoch 1 is a hole no ring records (its taker crashed before it
        // recorded the block); the ring then records more committed writes of epoch 1
        // than the order's window holds, then moves to epoch 2. The marker of epoch 2
        // lies past entries the order cannot hold until the hole is settled, and only
        // that marker settles it: the ring must be read on past them.
        let dir = TempDir::new("apply-window");
        let (_fabric, mut ring, mut a, mut links, pool) = one_node(&dir, 1 << 14);
        let writes = ORDER_WINDOW + 900;
        for s in 2..2 + writes {
            ring.append(FateKind::Committed, version(1, s).unwrap(), s, false, 1).unwrap();
        }
        ring.append(FateKind::Epoch, first_of(2), 0, false, 0).unwrap();
        ring.append(FateKind::Committed, first_of(2), 7, false, 1).unwrap();
        let cursor = poll_until(&mut a, &ring, &mut links, &pool, first_of(2), 10_000);
        assert_eq!(cursor, first_of(2) + 1, "every write released, the hole settled: {:?}", a.stats);
        assert_eq!(a.stats.unrecorded, 1, "only the hole is a no-op");
        assert_eq!(a.order_stats().writes, writes + 1);
        assert_eq!(a.stats.conflicts, 0);
        assert_eq!(a.feed().last_version(), first_of(2));
    }

    #[test]
    fn a_write_ahead_of_the_window_is_not_taken_for_a_hole_when_the_epoch_ends() {
        // As above, but a write far ahead is recorded before the hole's neighbours: the
        // epoch's end settles only stamps no ring records, never one read ahead of the
        // window and not held yet.
        let dir = TempDir::new("apply-ahead");
        let (_fabric, mut ring, mut a, mut links, pool) = one_node(&dir, 1 << 14);
        let far = ORDER_WINDOW + 500;
        ring.append(FateKind::Committed, version(1, far).unwrap(), 99, false, 1).unwrap();
        for s in (2..far).chain(far + 1..far + 300) {
            ring.append(FateKind::Committed, version(1, s).unwrap(), s, false, 1).unwrap();
        }
        ring.append(FateKind::Epoch, first_of(2), 0, false, 0).unwrap();
        let cursor = poll_until(&mut a, &ring, &mut links, &pool, version(1, far + 299).unwrap(), 10_000);
        assert_eq!(cursor, first_of(2), "{:?}", a.stats);
        assert_eq!(a.stats.unrecorded, 1, "only stamp 1 is a no-op");
        let mut out = vec![FeedEntry::default(); 8];
        let n = a.read_feed(version(1, far - 2).unwrap(), &mut out).unwrap();
        let got: Vec<(u64, u64)> = out[..n].iter().map(|e| (e.version, e.key_hash)).collect();
        let want: Vec<(u64, u64)> =
            (far - 1..far + 2).map(|s| (version(1, s).unwrap(), if s == far { 99 } else { s })).collect();
        assert_eq!(&got[..3], &want[..], "the write read ahead is in the feed, in its place");
    }

    #[test]
    fn holes_of_later_epochs_wait_for_the_writes_of_theirs_the_order_could_not_hold() {
        // Epoch 1 ends in a hole; epoch 2 records more writes (each its own range)
        // than the order holds for later epochs, with holes among them; epoch 3 follows.
        // Every write comes out once, in order, and every hole as a no-op.
        let dir = TempDir::new("apply-later");
        let (_fabric, mut ring, mut a, mut links, pool) = one_node(&dir, 1 << 12);
        ring.append(FateKind::Committed, version(1, 2).unwrap(), 1, false, 1).unwrap();
        ring.append(FateKind::Epoch, first_of(2), 0, false, 0).unwrap();
        let later: Vec<u64> = (1..3 * crate::limits::ORDER_AHEAD_MAX as u64).filter(|s| s % 5 != 0).collect();
        for &s in &later {
            ring.append(FateKind::Committed, version(2, s).unwrap(), s, false, 1).unwrap();
        }
        ring.append(FateKind::Epoch, first_of(3), 0, false, 0).unwrap();
        ring.append(FateKind::Committed, first_of(3), 3, false, 1).unwrap();
        let cursor = poll_until(&mut a, &ring, &mut links, &pool, first_of(3), 10_000);
        assert_eq!(cursor, first_of(3) + 1, "{:?}", a.stats);
        let mut out = vec![FeedEntry::default(); 2048];
        let n = a.read_feed(0, &mut out).unwrap();
        let mut want = vec![version(1, 2).unwrap()];
        want.extend(later.iter().map(|&s| version(2, s).unwrap()));
        want.push(first_of(3));
        assert_eq!(out[..n].iter().map(|e| e.version).collect::<Vec<_>>(), want);
        assert_eq!(a.stats.conflicts, 0);
    }

    #[test]
    fn a_read_ahead_that_lands_after_the_sweep_began_keeps_its_stamps_unsettled() {
        // Seed 300062 with never-posted holders counted as lacking: node 0's sweep of
        // ring 3 began (the cursor reached the stamp it had deferred, `ahead` went back
        // to `next`), then a READ ahead posted before that came back with a write of a
        // later epoch further ahead than the order holds. The sweep's first chunk
        // forgot it, and once the epoch closed the write was settled as a no-op.
        let dir = TempDir::new("apply-stale-ahead");
        let (_fabric, _own, mut a) = node_0_of(&dir, 2, 64);
        let now = Now { mono_ns: 0, wall_us: 0 };
        let entry = |position: u64, seq: u64| {
            let version = version(1, seq).unwrap();
            FateEntry {
                position,
                version,
                key_hash: seq,
                kind: FateKind::Committed,
                tombstone: false,
                count: 1,
                write_seq: 1,
            }
            .emit()
        };
        // Right after the sweep began: ring 1 is read again from position 1 up to 5.
        a.sources[1] = Source { next: 1, ahead: 1, sweep_to: 5, deferred: u64::MAX, started: true, ..FRESH };
        let far = ORDER_WINDOW + 100;
        // The READ ahead posted before, from 5: a write further ahead than the window.
        let stale: Vec<u8> = [entry(5, far), entry(6, far + 1)].concat();
        a.take_chunk(1, 5, &stale, now);
        // The sweep's first READ, from 1: writes the order takes at once.
        let sweep: Vec<u8> = (1..5).flat_map(|p| entry(p, p)).collect();
        a.take_chunk(1, 1, &sweep, now);
        let bound = a.settle_bound(now);
        assert!(
            bound <= version(1, far).unwrap(),
            "the write read ahead at stamp {far} must bound what is settled until it is read again: bound {bound:#x}"
        );
    }
}
