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
//! change), a Pending write (its writer decides within its timeout, or at its restart).
//! An applier that finds entries it needed overwritten (it fell a whole ring behind a
//! writer) stops, counts it and says so: catching up from a peer's feed is not built.

use std::collections::HashSet;

use super::links::Links;
use super::pool::Pool;
use super::time::Now;
use super::wr::{Kind, WrId};
use crate::cluster::format::fates::{
    FateEntry, FateKind, FateRing, CURSOR_AT, DROPPED_AT, ENTRIES_AT, ENTRY_LEN, NEXT_AT,
};
use crate::cluster::format::feed::{FeedError, FeedLog};
use crate::cluster::order::{Applied, Fate, OrderError, OrderStats, OrderedApply};
use crate::cluster::sequence::{epoch_of, first_of, sequence_of};
use crate::fabric::{Op, RawQp};
use crate::limits::{FATE_READ_ENTRIES, ORDER_CLOSES_MAX, ORDER_WINDOW, WR_INDEX_MAX};

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
}

/// One node's ring as this applier reads it.
#[derive(Clone, Copy, Debug)]
struct Source {
    /// The first position not yet taken as final; 0 until the header was read.
    next: u64,
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
    /// Rings that lost entries this applier needed (it stopped).
    pub lost: u64,
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
    /// Stamps some ring shows Pending.
    pending: HashSet<u64>,
    /// Blocks the rings record that reach past the cursor: their writers account for
    /// every stamp in them (used, or unused when dropped), so no roll is needed there.
    blocks: Vec<std::ops::Range<u64>>,
    /// The end (exclusive) of the highest stamp recorded of each epoch seen.
    ends: Vec<(u32, u64)>,
    /// The epoch every ring has moved past, and its end: its unrecorded stamps are no-ops.
    complete: Option<(u32, u64)>,
    /// The cursor and since when it has not moved.
    stuck: (u64, u64),
    /// The cursor a roll was last asked at (once per stuck stamp).
    rolled_at: u64,
    reread_ns: u64,
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
        let source = Source {
            next: 0,
            epoch: 0,
            reading: Reading::Idle,
            generation: 0,
            posted_ns: 0,
            read_ns: 0,
            moved: true,
            lost: false,
            started: false,
        };
        Ok(Self {
            me,
            order: OrderedApply::new(cursor)?,
            feed,
            sources: vec![source; n],
            pending: HashSet::with_capacity(ORDER_WINDOW as usize),
            blocks: Vec::with_capacity(BLOCKS_HELD),
            ends: Vec::with_capacity(2 * ORDER_CLOSES_MAX),
            complete: None,
            stuck: (cursor, now.mono_ns),
            rolled_at: 0,
            reread_ns,
            stats: ApplyStats::default(),
        })
    }

    /// The next stamp to release: every stamp below it was released.
    pub fn cursor(&self) -> u64 {
        self.order.cursor()
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
            && !self.pending.contains(&c)
            && !self.blocks.iter().any(|b| b.contains(&c))
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
        let mut busy = self.read_own(cx.own, now);
        for j in 0..self.sources.len() as u8 {
            if j != self.me {
                busy |= self.post_read(cx, j, now);
            }
        }
        busy |= self.settle_epochs(now);
        busy |= self.release(cx.own, now);
        busy
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
        let (from, to) = (self.sources[me].next, own.next());
        // As for a peer's ring: at once only while a chunk's worth waits.
        if to < from + u64::from(FATE_READ_ENTRIES) && now.mono_ns < self.sources[me].read_ns + self.reread_ns {
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
        if s.reading != Reading::Idle && now.mono_ns >= s.posted_ns + READ_GIVEN_UP_REREADS * self.reread_ns {
            // A link reset drops what was in flight on it without a completion: the
            // READ is given up (a late completion carries an old generation) and posted
            // again once the link is back.
            self.sources[j as usize].reading = Reading::Idle;
            self.stats.reads_given_up += 1;
            return false;
        }
        if s.reading != Reading::Idle || s.lost || (!s.moved && now.mono_ns < s.read_ns + self.reread_ns) {
            return false;
        }
        let Some(remote) = cx.links.peer(j).filter(|p| p.is_up()).and_then(|p| p.remote).map(|r| r.fates) else {
            return false;
        };
        if remote.len <= ENTRIES_AT as u64 {
            return false;
        }
        let entries = (remote.len - ENTRIES_AT as u64) / ENTRY_LEN as u64;
        let generation = (s.generation + 1) & WR_INDEX_MAX;
        let (reading, at, len) = if s.next == 0 {
            (Reading::Header(entries), CURSOR_AT as u64, DROPPED_AT + 8 - CURSOR_AT)
        } else {
            let slot = s.next % entries;
            let k = u64::from(FATE_READ_ENTRIES).min(entries - slot);
            (Reading::Chunk(s.next, k), ENTRIES_AT as u64 + slot * ENTRY_LEN as u64, k as usize * ENTRY_LEN)
        };
        let src = &mut self.sources[j as usize];
        (src.reading, src.generation, src.posted_ns) = (reading, generation, now.mono_ns);
        self.stats.reads += 1;
        cx.links.post(
            j,
            WrId::new(Kind::FateRead, j, generation, 0),
            Op::Read { remote: remote.at(at) },
            cx.pool.buf(u32::from(j), len),
        );
        true
    }

    /// A READ of node `j`'s ring came back (`ok`: its bytes are in the pool).
    pub fn on_read(&mut self, pool: &Pool, j: u8, generation: u32, ok: bool, now: Now) {
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
                let mut words = [0u8; DROPPED_AT + 8 - CURSOR_AT];
                pool.read(u32::from(j), &mut words);
                let word =
                    |at: usize| u64::from_le_bytes(words[at - CURSOR_AT..at - CURSOR_AT + 8].try_into().expect("8"));
                let (next, dropped) = (word(NEXT_AT), word(DROPPED_AT));
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
        }
    }

    /// Takes in the entries of node `j`'s ring from position `from`, as far as they go
    /// in order; true if anything was learned.
    fn take_chunk(&mut self, j: u8, from: u64, chunk: &[u8], now: Now) -> bool {
        let s = &mut self.sources[j as usize];
        s.read_ns = now.mono_ns;
        let mut open: Option<u64> = None;
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
                if i == 0 && !self.sources[j as usize].started {
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
                    open.get_or_insert(position);
                    break;
                }
            }
            last = Some(position);
            self.sources[j as usize].started = true;
        }
        let s = &mut self.sources[j as usize];
        let before = s.next;
        if let Some(last) = last {
            s.next = open.unwrap_or(last + 1);
        }
        // A ring keeps being READ at once only while READs come back full; otherwise
        // once per `reread_ns` (each READ of the emulated fabric costs CPU, and a
        // write's fate reaches every feed within that anyway).
        let taken = chunk.len() / ENTRY_LEN;
        s.moved = s.next >= before + taken as u64 && taken == FATE_READ_ENTRIES as usize;
        last.is_some()
    }

    fn lose(&mut self, j: u8, stamp: u64) {
        let s = &mut self.sources[j as usize];
        if !s.lost {
            s.lost = true;
            self.stats.lost += 1;
            tracing::error!(
                node = self.me,
                ring = j,
                stamp,
                cursor = self.order.cursor(),
                "node {j}'s fate ring overwrote entries this node had not read: this node's order and change feed stop here (catching up from a peer's feed is not built); a larger `fate_entries` in the cluster file's [cluster] lets a node stay down longer"
            );
        }
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
                if stamps.end > cursor && !self.blocks.contains(&stamps) {
                    if self.blocks.len() == BLOCKS_HELD {
                        self.blocks.retain(|b| b.end > cursor);
                    }
                    if self.blocks.len() < BLOCKS_HELD {
                        self.blocks.push(stamps);
                    }
                }
                return Took::Final;
            }
            FateKind::Pending => {
                if e.version >= cursor {
                    self.pending.insert(e.version);
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
        for _ in 0..ORDER_WINDOW {
            if let Some(a) = self.order.release() {
                self.append(a);
                continue;
            }
            let c = self.order.cursor();
            match self.complete {
                Some((e, end)) if epoch_of(c) == e && c < end && !self.pending.contains(&c) => {
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
            self.pending.retain(|&v| v >= c);
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
