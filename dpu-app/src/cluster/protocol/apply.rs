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

use super::links::Links;
use super::pool::Pool;
use super::stall::{Stall, StallWarnings};
use super::time::Now;
use super::wr::{Kind, WrId};
use crate::cluster::format::fates::{
    FateEntry, FateKind, FateRing, CURSOR_AT, DROPPED_AT, ENTRIES_AT, ENTRY_LEN, NEXT_AT,
};
use crate::cluster::format::feed::{FeedEntry, FeedError, FeedLog, ENTRY_LEN as FEED_ENTRY_LEN};
use crate::cluster::order::{Applied, Fate, OrderError, OrderStats, OrderedApply};
use crate::cluster::sequence::{epoch_of, first_of, sequence_of};
use crate::fabric::{Op, RawQp};
use crate::limits::{FATE_READ_ENTRIES, HEADER_PAGE_BYTES, ORDER_CLOSES_MAX, ORDER_WINDOW, WR_INDEX_MAX};

/// What the applier may use of its node for one call.
pub struct ApplyCx<'a, Q: RawQp> {
    pub(super) links: &'a mut Links<Q>,
    /// READ targets: one chunk per node.
    pub(super) pool: &'a Pool,
    /// This node's own ring, read in place.
    pub(super) own: &'a FateRing,
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
}

/// The node's ordered apply.
pub struct Applier {
    me: u8,
    order: OrderedApply,
    feed: FeedLog,
    sources: Vec<Source>,
    /// Stamps some ring shows Pending, and that ring's node.
    pending: HashMap<u64, u8>,
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
    /// feed `feed`; rings are read again every `reread_ns` while nothing moves.
    pub fn new(me: u8, n: usize, own: &FateRing, feed: FeedLog, reread_ns: u64, now: Now) -> Result<Self, OrderError> {
        let cursor = match own.cursor() {
            0 => first_of(1),
            c => c,
        };
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
        let ready = epoch_of(c) == leading
            && !self.pending.contains_key(&c)
            && !self.blocks.iter().any(|(b, _)| b.contains(&c))
            && self.rolled_at != c
            && self.stuck_ns(now) >= after_ns
            && self.sources.iter().all(|s| s.next != 0 && !s.lost && s.read_ns > self.stuck.1);
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
        let mut busy = self.read_own(cx.own, now);
        for j in 0..self.sources.len() as u8 {
            if j != self.me {
                busy |= self.post_read(cx, j, now);
            }
        }
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
            .copied()
            .or_else(|| self.blocks.iter().find(|(b, _)| b.contains(&version)).map(|&(_, j)| j));
        let silent_ns = READ_GIVEN_UP_REREADS * self.reread_ns;
        let unread = (self.sources.iter().enumerate())
            .filter(|&(j, s)| j != self.me as usize && now_ns.saturating_sub(s.read_ns) >= silent_ns)
            .fold(0u64, |bits, (j, _)| bits | 1 << j);
        Some(Stall { version, open_ns, held_by, unread })
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
        if s.lost || (!s.moved && now.mono_ns < s.read_ns + self.reread_ns) {
            return false;
        }
        let Some(remote) = cx.links.peer(j).filter(|p| p.is_up()).and_then(|p| p.remote).map(|r| r.fates) else {
            return false;
        };
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
    fn settle_bound(&mut self) -> u64 {
        let cursor = self.order.cursor();
        let mut lowest = u64::MAX;
        for s in &mut self.sources {
            if s.deferred <= cursor {
                (s.sweep_to, s.ahead, s.deferred) = (s.ahead.max(s.sweep_to), s.next, u64::MAX);
            }
            lowest = lowest.min(if s.ahead < s.sweep_to { 0 } else { s.deferred });
        }
        lowest
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
        if !ok {
            return;
        }
        match s.reading {
            Reading::Idle => {}
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
                // reading is, so every entry up to it is read again.
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
        *c = CatchUp { refused: c.refused, wait_until_ns, rounds, past: c.past, ..CatchUp::new(peer as u8) };
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
        if self.catch.is_some_and(|c| c.rounds >= CATCH_UP_ROUNDS) {
            self.skip_past_loss(own);
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
                    self.pending.insert(e.version, j);
                }
                return Took::Open;
            }
            FateKind::Committed => {
                self.pending.remove(&e.version);
                self.order.resolve(e.version, Fate::Write { key_hash: e.key_hash, tombstone: e.tombstone }, now.mono_ns)
            }
            FateKind::Aborted => {
                self.pending.remove(&e.version);
                self.order.resolve(e.version, Fate::NoOp, now.mono_ns)
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
        if self.complete.is_none_or(|(e, _)| e < epoch) && self.sources.iter().all(|s| s.epoch > epoch && !s.lost) {
            let end = self.ends.iter().find(|e| e.0 == epoch).map_or(0, |e| e.1).max(self.order.cursor());
            // The first sequence never recorded: an end at the epoch's last sequence
            // wraps into the next epoch's number.
            let end_seq =
                if epoch_of(end) > epoch { 1 << crate::limits::SEQUENCE_BITS } else { sequence_of(end).max(1) };
            match self.order.close_epoch(epoch, end_seq, now.mono_ns) {
                Ok(()) => {
                    self.complete = Some((epoch, end));
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
        let bound = self.settle_bound();
        for _ in 0..ORDER_WINDOW {
            if let Some(a) = self.order.release() {
                self.append(a);
                continue;
            }
            let c = self.order.cursor();
            match self.complete {
                Some((e, end)) if epoch_of(c) == e && c < end && !self.pending.contains_key(&c) && c < bound => {
                    // Every ring moved past this epoch without recording the stamp.
                    self.stats.unrecorded += 1;
                    if let Err(err) = self.order.resolve(c, Fate::NoOp, now.mono_ns) {
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
};

/// Feed entries per catch-up READ: what a ring chunk's pool buffer holds.
const FEED_CHUNK_ENTRIES: usize = FATE_READ_ENTRIES as usize * ENTRY_LEN / FEED_ENTRY_LEN;

/// Rounds over every peer that find none ahead of this node before a catch-up gives up
/// on copying and marks what was lost missing ([`Applier::skip_past_loss`]).
const CATCH_UP_ROUNDS: u8 = 8;

/// Reads in a row that find a torn entry where a catch-up's copy stands before that
/// peer is given up (an entry is torn only while it is being written).
const CATCH_UP_TORN_READS: u8 = 8;

/// A READ of a ring not back after this many re-read periods is given up (its link was
/// reset under it).
const READ_GIVEN_UP_REREADS: u64 = 8;

/// Blocks of stamps held for the roll decision (two in hand per node, and some more).
const BLOCKS_HELD: usize = 4 * crate::limits::NODES_MAX;

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
        let net = Network::new(ModelConfig::ideal(), Arc::new(SystemClock::new())).unwrap();
        let fabric = net.node().unwrap();
        let ring = FateRing::open(&fabric, &dir.file("fates.prfate"), 0, ring_entries).unwrap();
        let feed = FeedLog::open(&dir.file("feed.prfeed"), 0, 1 << 14).unwrap();
        let applier = Applier::new(0, 1, &ring, feed, 1_000_000, Now { mono_ns: 0, wall_us: 0 }).unwrap();
        let links = Links::new(0, vec![None], QpOptions::default(), 0, 0);
        let pool = Pool::new(&fabric, 1, FATE_READ_ENTRIES as usize * ENTRY_LEN, Access::LOCAL_WRITE).unwrap();
        (fabric, ring, applier, links, pool)
    }

    /// Polls until the cursor passes `past` or `rounds` polls went by (1 ms apart).
    fn poll_until(a: &mut Applier, ring: &FateRing, links: &mut Links<Qp>, pool: &Pool, past: u64, rounds: u64) -> u64 {
        for t in 1..=rounds {
            let mut cx = ApplyCx { links: &mut *links, pool, own: ring };
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
}
