//! The sequencer role (`ordering = "sequencer"`): where this node's writes get their
//! versions, who sequences, and the claim that changes it.
//!
//! Every node keeps a leader word (`epoch << 8 | sequencer`) in its control block. The
//! node the word names sequences: its counter word (also in its control block) holds
//! the next version, `epoch << SEQUENCE_BITS | sequence`, and writers take stamps from
//! it with one-sided RDMA FETCH_ADD, a block of `stamp_block` at a time, so no CPU of
//! the sequencer runs for them. The sequencer's own writes take theirs with the same
//! atomic, locally.
//!
//! A claim ([`Sequencer::poll`]) CASes the next epoch, naming the claimant, into every
//! node's leader word, each from the word last seen there; it wins once a majority
//! (itself included) holds its word and has persisted it (each node publishes the word
//! it wrote to its `leader-word` file with fsync in its control block, which the
//! claimant READs with every heartbeat: a CAS alone would be forgotten by a power loss
//! before the node's next poll), and only then sets its counter to the first
//! version of its epoch: the epoch is above the sequence, so every stamp it issues is
//! above every stamp any earlier sequencer could have issued, reachable or not. A claim
//! that meets a word of its epoch or higher has lost (a competing claimant); one that
//! cannot reach a majority tries again after a pause that grows with its rank, so the
//! first shadow usually wins the next round outright. Who claims, and when:
//! - the configured sequencer, at start, while no epoch has been claimed;
//! - a node the word names that does not sequence that epoch (it restarted: its counter
//!   is gone; or its claim reached no majority), after `dead_after` without hearing of
//!   a newer word;
//! - the claimants (the first sequencer, then the shadows, in a ring) when the named
//!   sequencer has not been seen sequencing its epoch (its heartbeat block READ with
//!   the word and a counter of that epoch) for `dead_after` (the claimant after it in
//!   the ring), half a `dead_after` more for each one further on: whoever sequences,
//!   the next claimant takes over first.
//!
//! Words only move forward: a node adopts any higher word it sees (its own, CASed by a
//! claimant, or a peer's, in the heartbeat block it READs every period) and persists
//! it; a deposed sequencer zeroes its counter, so what writers fetch from it after that
//! is of no epoch and dropped. Holders refuse fragments stamped in an epoch below their
//! word (`holder.rs`), and since every write quorum meets every majority (checked in
//! the cluster file), a deposed epoch's writes cannot commit once a claim has won.
//!
//! A write takes a stamp only from a block whose FETCH_ADD was posted after the write
//! arrived (or, on the sequencer, from its counter at once): such a stamp is above
//! every stamp issued before, so versions follow real time across keys and nodes, and
//! a key's versions only move forward for writes that do not overlap. A block is as
//! large as the writes waiting when it is posted (at most `stamp_block`), since no
//! write that arrives later may use it: under light load each write fetches a block of
//! one, under load one round trip serves many. Stamps a writer fetched and does not
//! use (left by a write that failed before taking its stamp, a block of a deposed
//! epoch, a block older than four heartbeats) are holes: counted and dropped, never
//! given to a write.
//!
//! Every stamp this node takes is recorded in its fate ring (`format/fates.rs`), which
//! every node's applier READs (`fates.rs`): a block when it comes back, before any of
//! it is used; a stamp when a write takes it (then its decision: a rollback only once
//! it reached enough holders, `rollbacks.rs`); a block's unused
//! rest when it is dropped; and a marker when the node moves to a newer epoch, after
//! which it never takes a stamp of an older one. A write takes a stamp only while the
//! ring has room for it.
//!
//! Invariants: every version this node hands out is of the epoch of its leader word at
//! that moment, and each is handed out at most once in the cluster (FETCH_ADD ranges
//! of one counter are disjoint, and one epoch has one counter).

use super::links::Links;
use super::pool::Pool;
use super::rollbacks::{Begun, Rollbacks};
use super::time::Now;
use super::wr::{Kind, WrId};
use crate::cluster::config::SequencerConfig;
use crate::cluster::format::control::{ControlBlock, ControlView, COUNTER_AT, LEADER_AT};
use crate::cluster::format::fates::{FateError, FateKind, FateRing};
use crate::cluster::hlc::{HlcError, HlcFloor};
use crate::cluster::sequence::{epoch_of, first_of, sequence_of, LeaderWord};
use crate::fabric::{Op, RawQp};
use crate::limits::{CLAIM_ROUNDS_MAX, NODES_MAX, SEQUENCE_BITS, STAMP_BLOCK_TTL_HEARTBEATS, UNREACHED_DEAD_AFTERS};

/// The result word of the stamp FETCH_ADD in the sequencer's pool; node `j`'s claim
/// CAS lands in word `1 + j`.
const FETCH_WORD: u32 = 0;

/// Words of the sequencer's result pool: the fetch, and one CAS per node.
pub const POOL_WORDS: u32 = 1 + NODES_MAX as u32;

/// What the sequencer role may use of its node for one call.
pub struct SeqCx<'a, Q: RawQp> {
    pub(super) links: &'a mut Links<Q>,
    pub(super) control: &'a ControlBlock,
    pub(super) pool: &'a Pool,
    /// Writes this node holds (waiting for a stamp, or for their key): a block
    /// fetched now serves at most these.
    pub(super) waiting: usize,
}

/// A block of stamps in hand: versions `next..end`, its FETCH_ADD posted at
/// `posted_ns` and back at `fetched_ns`.
#[derive(Clone, Copy, Debug, Default)]
struct Block {
    next: u64,
    end: u64,
    posted_ns: u64,
    fetched_ns: u64,
}

impl Block {
    fn left(&self) -> u64 {
        self.end - self.next
    }
}

/// A FETCH_ADD in flight.
#[derive(Clone, Copy, Debug)]
struct Fetch {
    generation: u32,
    epoch: u32,
    posted_ns: u64,
    add: u64,
}

/// A claim in flight: the word it CASes in, and where.
#[derive(Clone, Copy, Debug)]
struct Claim {
    word: LeaderWord,
    generation: u32,
    /// Nodes that hold `word` (a bit each).
    held: u32,
    /// Of those, the nodes seen to have persisted it (their published persisted word
    /// is `word`): only these count for the majority, since a CAS that landed in a
    /// node's block is forgotten by a power loss until that node's next poll writes
    /// its `leader-word` file with fsync.
    durable: u32,
    /// When the claim started: one whose majority has not persisted its word within
    /// `dead_after` gives up like one that reached no majority.
    started_ns: u64,
    /// Nodes with a CAS of this claim in flight.
    outstanding: u32,
    /// The word each CAS expects.
    compare: [u64; NODES_MAX],
    /// CAS rounds made at each node.
    rounds: [u8; NODES_MAX],
    /// A competing claimant's word of the same epoch, found at some node.
    rival: Option<LeaderWord>,
    won: bool,
}

/// What the sequencer role counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeqStats {
    /// Versions handed to this node's writes.
    pub stamps: u64,
    /// FETCH_ADDs posted to a remote sequencer.
    pub fetches: u64,
    /// Stamps fetched and never used (a deposed epoch, an aged block): holes.
    pub holes: u64,
    /// Claims this node won, and lost or gave up.
    pub claims_won: u64,
    /// Claims that lost to another claimant or reached no majority.
    pub claims_failed: u64,
    /// Epochs this node claimed while it sequenced, to seal a hole in the order.
    pub rolls: u64,
    /// Fate ring records that failed (a full ring: a write undecided for a whole
    /// ring of stamps); the stamps go unused.
    pub fates_full: u64,
    /// Times this node found itself deposed while it sequenced.
    pub deposed: u64,
    /// Pending stamps of this node the order decided by the holders' ledgers.
    pub adopted: u64,
    /// Rollbacks the table of those waiting for enough holders had no room for: their
    /// stamps stay Pending until the next restart (`rollbacks.rs`).
    pub rollbacks_full: u64,
}

/// How a restart found the write of a stamp its fate ring had left Pending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovered {
    /// Committed: a quorum of holders persisted its fragment.
    Committed,
    /// Rolled back: sent to `holders`, of which `lacking` are known not to hold it.
    RolledBack {
        /// Nodes that were sent a fragment.
        holders: u32,
        /// Of those other than this node, the ones that persisted the rollback.
        lacking: u32,
    },
    /// No write began with it (no outcome entry holds it): it was never used.
    NeverBegan,
}

/// The sequencer role of one node.
#[derive(Debug)]
pub struct Sequencer {
    me: u8,
    n: usize,
    stamp_block: u64,
    /// The claimants in order: the first sequencer, then the shadows.
    order: Vec<u8>,
    /// This node's place in `order`; `None`: it never claims.
    rank: Option<usize>,
    dead_after_ns: u64,
    block_ttl_ns: u64,
    /// The newest word this node knows.
    leader: LeaderWord,
    /// When it learned `leader`.
    leader_since_ns: u64,
    /// When it last saw the leader sequencing `leader`'s epoch, and the leader's
    /// heartbeat then (a block READ again without a new beat is not news).
    leader_heard_ns: u64,
    leader_beat: u64,
    /// Since when this node's link to the named sequencer has been up (`None` while it
    /// is down), and whether it has been up at all since this node learned the word:
    /// silence counts only from a moment the sequencer could have been heard.
    leader_link_up_ns: Option<u64>,
    leader_link_seen: bool,
    /// The epoch this node won and sequences.
    leading: Option<u32>,
    blocks: [Block; 2],
    /// Whether writes wait for a stamp: blocks are fetched only then, so an idle node
    /// does not fetch blocks only to age them out.
    wanted: bool,
    /// A write that arrived at this time waits for a stamp fetched after it.
    want_after_ns: u64,
    fetch: Option<Fetch>,
    claim: Option<Claim>,
    generation: u32,
    /// A failed claim tries again from here.
    claim_after_ns: u64,
    /// The leader word on disk.
    file: HlcFloor,
    /// What became of every stamp this node took, READ by every applier.
    fates: FateRing,
    /// The stamp the last `take` handed out, until its write is under way.
    last_taken: Option<u64>,
    /// Rolled-back writes whose stamps wait for enough holders before they are
    /// recorded Aborted.
    rollbacks: Rollbacks,
    /// The newest epoch the fate ring has a marker (or any entry) of.
    marked_epoch: u32,
    /// Counters.
    pub stats: SeqStats,
}

impl Sequencer {
    /// The role of node `me` of `n` under `config`, its word persisted in `file`. The
    /// node knows the higher of the file's word and its control block's (which holds
    /// a claimant's CAS that landed before a crash the file never heard of), and both
    /// are set to it: a restarted node remembers every epoch it saw or voted for, and
    /// refuses what they deposed. An error is the file's: the word cannot be persisted.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        me: u8,
        n: usize,
        config: &SequencerConfig,
        dead_after_us: u64,
        heartbeat_us: u64,
        mut file: HlcFloor,
        fates: FateRing,
        control: &ControlBlock,
        now: Now,
    ) -> Result<Self, HlcError> {
        let mut own = control.leader();
        let word = own.max(file.floor());
        while own < word {
            // Words only move up, also against a claimant's CAS racing this one.
            own = match control.cas_leader(own, word) {
                found if found == own => word,
                found => found,
            };
        }
        let leader = LeaderWord::unpack(own);
        file.persist(own)?;
        control.set_persisted_leader(own);
        Ok(Self {
            me,
            n,
            stamp_block: u64::from(config.stamp_block),
            rank: config.rank(me),
            order: std::iter::once(config.sequencer).chain(config.shadows.iter().copied()).collect(),
            dead_after_ns: dead_after_us * 1_000,
            block_ttl_ns: STAMP_BLOCK_TTL_HEARTBEATS * heartbeat_us * 1_000,
            leader,
            leader_since_ns: now.mono_ns,
            leader_heard_ns: now.mono_ns,
            leader_beat: 0,
            leader_link_up_ns: None,
            leader_link_seen: false,
            leading: None,
            blocks: [Block::default(); 2],
            wanted: false,
            want_after_ns: 0,
            fetch: None,
            claim: None,
            generation: 0,
            claim_after_ns: now.mono_ns,
            file,
            marked_epoch: fates.newest_epoch_at_open(),
            fates,
            last_taken: None,
            rollbacks: Rollbacks::new(me),
            stats: SeqStats::default(),
        })
    }

    /// After a restart, before any write: records what the crash left open in the fate
    /// ring. A stamp a write held is decided as `decided` says (from the outcome table),
    /// a rolled-back one once its rollback reached enough holders (`rollbacks.rs`; it
    /// may wait for their resync), the rest of each block the crash left in hand is
    /// unused, and the node's epoch gets its marker. `quorum` is the write quorum.
    pub fn recover_fates(&mut self, quorum: u32, decided: impl Fn(u64) -> Recovered) {
        let pending: Vec<u64> = self.fates.pending().collect();
        let (mut committed, mut aborted, mut rolling) = (0u64, 0u64, 0u64);
        for v in pending {
            match decided(v) {
                Recovered::Committed => {
                    committed += 1;
                    self.fates.settle(v, FateKind::Committed);
                }
                Recovered::NeverBegan => {
                    aborted += 1;
                    self.fates.settle(v, FateKind::Aborted);
                }
                Recovered::RolledBack { holders, lacking } => {
                    if self.roll_back(v, holders, lacking, quorum) {
                        aborted += 1;
                    } else {
                        rolling += 1;
                    }
                }
            }
        }
        let rests = self.fates.unaccounted();
        for r in &rests {
            self.record(FateKind::Unused, r.start, 0, false, (r.end - r.start) as u32);
        }
        if committed + aborted + rolling + rests.len() as u64 > 0 {
            tracing::info!(
                node = self.me,
                committed,
                aborted,
                rolling_back = rolling,
                unused = rests.len(),
                "recorded the fates a previous incarnation left open"
            );
        }
        self.mark_epoch(self.leader.epoch);
    }

    /// Appends to the fate ring; false (counted) if it is full.
    fn record(&mut self, kind: FateKind, version: u64, key_hash: u64, tombstone: bool, count: u32) -> bool {
        let appended = self.fates.append(kind, version, key_hash, tombstone, count);
        self.recorded(appended)
    }

    /// Records stamp `version` Pending for write number `write_seq` of `key_hash`.
    fn record_write(&mut self, version: u64, key_hash: u64, tombstone: bool, write_seq: u64) -> bool {
        let appended = self.fates.append_write(version, key_hash, tombstone, write_seq);
        self.recorded(appended)
    }

    /// Whether an append went in (counted and warned about if not).
    fn recorded(&mut self, appended: Result<u64, FateError>) -> bool {
        match appended {
            Ok(_) => true,
            Err(e) => {
                self.stats.fates_full += 1;
                if self.stats.fates_full.is_power_of_two() {
                    tracing::warn!(node = self.me, error = %e, times = self.stats.fates_full, "cannot record a stamp's fate");
                }
                false
            }
        }
    }

    /// Records that this node moved to `epoch` (once per epoch): it takes no stamp of
    /// an older one from now on.
    fn mark_epoch(&mut self, epoch: u32) {
        if epoch > self.marked_epoch && self.record(FateKind::Epoch, first_of(epoch), 0, false, 0) {
            self.marked_epoch = epoch;
        }
    }

    /// The write that took the stamp `version` committed (a quorum of holders
    /// persisted its fragment): its fate is recorded at once.
    pub fn commit(&mut self, version: u64) {
        if self.last_taken == Some(version) {
            self.last_taken = None;
        }
        if !self.fates.settle(version, FateKind::Committed) {
            tracing::debug!(node = self.me, version, "no pending fate to settle");
        }
    }

    /// The write that took the stamp `version`, sent to `holders`, rolled back;
    /// `lacking` of them are known not to hold its fragment. Its fate is recorded
    /// Aborted once too few of the other holders can hold it for the write quorum
    /// `quorum` ([`crate::cluster::holders_rule::rollback_settled`]): now, or as holders
    /// persist the rollback ([`Sequencer::rollback_reached`]). True if recorded now.
    pub fn roll_back(&mut self, version: u64, holders: u32, lacking: u32, quorum: u32) -> bool {
        if self.last_taken == Some(version) {
            self.last_taken = None;
        }
        match self.rollbacks.begin(version, holders, lacking, quorum) {
            Begun::Settled => {
                self.fates.settle(version, FateKind::Aborted);
                true
            }
            Begun::Waiting => false,
            Begun::Full => {
                self.stats.rollbacks_full += 1;
                if self.stats.rollbacks_full.is_power_of_two() {
                    tracing::warn!(
                        node = self.me,
                        version,
                        times = self.stats.rollbacks_full,
                        "more rolled-back writes wait for their holders than this node tracks: this stamp stays Pending in the fate ring, and every order waits at it, until this node restarts; bring the holders that are down back"
                    );
                }
                false
            }
        }
    }

    /// The order decided this node's stamp `version` by the holders' ledgers
    /// (`ledgers.rs`): a write, or not. Its fate is recorded so if the ring still has it
    /// Pending (true then), and a rollback waiting for its holders is forgotten.
    pub fn take_ordered_fate(&mut self, version: u64, write: bool) -> bool {
        self.rollbacks.forget(version);
        if self.last_taken == Some(version) {
            self.last_taken = None;
        }
        let kind = if write { FateKind::Committed } else { FateKind::Aborted };
        let settled = self.fates.settle(version, kind);
        if settled {
            self.stats.adopted += 1;
        }
        settled
    }

    /// Holder `h` persisted the rollback of the write that took stamp `version`: its
    /// fate is recorded Aborted if too few holders can hold it now (then the holders
    /// that answered it `ACK_FENCED`).
    pub fn rollback_reached(&mut self, version: u64, h: u8) -> Option<u32> {
        let settled = self.rollbacks.reached(version, h);
        if settled.is_some() {
            self.fates.settle(version, FateKind::Aborted);
        }
        settled
    }

    /// Holder `h` answered the rollback of stamp `version` `ACK_FENCED`: true while the
    /// stamp waits for its holders (`h` then needs nothing more once it settles), false
    /// if it is decided already.
    pub fn rollback_fenced(&mut self, version: u64, h: u8) -> bool {
        self.rollbacks.fenced(version, h)
    }

    /// Rolled-back writes whose stamps wait for enough holders.
    pub fn rollbacks_waiting(&self) -> usize {
        self.rollbacks.len()
    }

    /// The write that took the last stamp was refused before it began: the stamp is a
    /// no-op.
    pub fn abandon_taken(&mut self) {
        if let Some(v) = self.last_taken.take() {
            self.fates.settle(v, FateKind::Aborted);
        }
    }

    /// This node's fate ring.
    pub fn fates(&self) -> &FateRing {
        &self.fates
    }

    /// Claims the next epoch while this node sequences, so that every node moves past
    /// the current one and a hole in its order is settled (see `fates.rs`): false if
    /// it does not sequence or a claim is under way.
    pub fn roll(&mut self, cx: &mut SeqCx<'_, impl RawQp>, now: Now) -> bool {
        if self.leading.is_none() || self.claim.is_some() {
            return false;
        }
        self.stats.rolls += 1;
        tracing::info!(node = self.me, leader = %self.leader, "claiming the next epoch to seal a hole in the order");
        self.start_claim(cx, now);
        true
    }

    /// Takes `word` as the one this node follows from `now`: its silence clock and the
    /// state of the link to its sequencer start afresh.
    fn follow(&mut self, word: LeaderWord, now: Now) {
        self.leader = word;
        self.leader_since_ns = now.mono_ns;
        (self.leader_link_up_ns, self.leader_link_seen) = (None, false);
    }

    /// The leader word this node knows.
    pub fn leader(&self) -> LeaderWord {
        self.leader
    }

    /// The epoch this node sequences, if it does.
    pub fn leading(&self) -> Option<u32> {
        self.leading
    }

    fn usable(&self, b: &Block, now: Now) -> bool {
        b.next < b.end && epoch_of(b.next) == self.leader.epoch && now.mono_ns < b.fetched_ns + self.block_ttl_ns
    }

    /// Whether a stamp for a write that arrived at `arrived_ns` is in hand (always,
    /// while this node sequences).
    pub fn has_for(&self, arrived_ns: u64, now: Now) -> bool {
        self.fates.has_room()
            && (self.leading.is_some() || self.blocks.iter().any(|b| self.usable(b, now) && b.posted_ns >= arrived_ns))
    }

    /// A version for a write that arrived at `arrived_ns`, from a block whose
    /// FETCH_ADD was posted after it arrived, or `None` while none is in hand. Such a
    /// stamp is above every stamp issued before the write arrived, so above the
    /// version of every write that had completed by then, of its key or any other:
    /// versions follow real time. (A block fetched earlier could order the write
    /// before a write of its key that completed meanwhile on another node.)
    /// The stamp is recorded Pending in the fate ring for write number `write_seq` of
    /// `key_hash` (`tombstone`: a DELETE) before it is handed out.
    pub fn take(
        &mut self,
        control: &ControlBlock,
        arrived_ns: u64,
        key_hash: u64,
        tombstone: bool,
        write_seq: u64,
        now: Now,
    ) -> Option<u64> {
        self.last_taken = None;
        if !self.fates.has_room() {
            return None;
        }
        if let Some(epoch) = self.leading {
            let v = control.fetch_add_counter(1);
            if epoch_of(v) == epoch && sequence_of(v) != 0 {
                if !self.record_write(v, key_hash, tombstone, write_seq) {
                    return None;
                }
                self.stats.stamps += 1;
                self.last_taken = Some(v);
                return Some(v);
            }
            // The epoch's 2^SEQUENCE_BITS sequences are used up: stop, and the next poll claims
            // the next epoch (the word names this node, which no longer sequences it).
            tracing::error!(node = self.me, epoch, counter = v, "the epoch's sequences are used up; claiming the next");
            self.leading = None;
            return None;
        }
        if self.blocks[0].left() == 0 {
            self.drop_block(0);
        }
        for i in 0..self.blocks.len() {
            let b = self.blocks[i];
            if self.usable(&b, now) && b.posted_ns >= arrived_ns {
                if !self.record_write(b.next, key_hash, tombstone, write_seq) {
                    return None;
                }
                self.last_taken = Some(b.next);
                self.blocks[i].next += 1;
                self.stats.stamps += 1;
                if self.blocks[i].left() == 0 {
                    self.drop_block(i);
                }
                return Some(b.next);
            }
        }
        None
    }

    /// Drops block `i` (its unused stamps are holes) and moves the next one up.
    fn drop_block(&mut self, i: usize) {
        let b = self.blocks[i];
        if b.left() > 0 {
            self.record(FateKind::Unused, b.next, 0, false, b.left() as u32);
        }
        self.stats.holes += self.blocks[i].left();
        self.blocks[i] = Block::default();
        if i == 0 {
            self.blocks.swap(0, 1);
        }
    }

    /// Adopts `word` if it is newer than the one this node knows: persists it,
    /// drops stamps of the older epoch and, if this node sequenced that epoch, stops.
    fn adopt(&mut self, cx: &mut SeqCx<'_, impl RawQp>, word: LeaderWord, now: Now) -> Result<(), HlcError> {
        // Only a higher epoch: a node's word holds one sequencer per epoch, so no two
        // claimants of one epoch can both count it.
        if word.epoch <= self.leader.epoch {
            return Ok(());
        }
        // Own word first: a peer's heartbeat told us; our holders refuse by it. A
        // claimant's CAS may move it meanwhile (only to a higher epoch): a few rounds,
        // then the next poll adopts whatever it became.
        let mut own = cx.control.leader();
        for _ in 0..CLAIM_ROUNDS_MAX {
            if LeaderWord::unpack(own).epoch >= word.epoch {
                break;
            }
            let found = cx.control.cas_leader(own, word.pack());
            if found == own {
                own = word.pack();
                break;
            }
            own = found;
        }
        // This node follows the word it holds: a claimant may have put a later one
        // there, or one of the same epoch first (its vote in that epoch).
        let word = if LeaderWord::unpack(own).epoch >= word.epoch { LeaderWord::unpack(own) } else { word };
        if let Some(epoch) = self.leading.filter(|&e| e < word.epoch) {
            // Deposed: nothing fetched from this counter from now on is of any epoch.
            cx.control.set_counter(0);
            self.leading = None;
            if self.claim.is_some_and(|c| c.word == word) {
                // Its own claim of the next epoch (a roll) reached its own block first.
                tracing::info!(node = self.me, epoch, next = %word, "stopped sequencing for its own claim of the next epoch");
            } else {
                self.stats.deposed += 1;
                tracing::warn!(node = self.me, epoch, by = %word, "deposed as sequencer");
            }
        }
        tracing::info!(node = self.me, from = %self.leader, to = %word, "sequencer epoch changed");
        self.follow(word, now);
        self.leader_heard_ns = now.mono_ns;
        for i in (0..self.blocks.len()).rev() {
            if self.blocks[i].left() > 0 && epoch_of(self.blocks[i].next) != word.epoch {
                self.drop_block(i);
            }
        }
        self.fetch = None;
        self.mark_epoch(word.epoch);
        self.file.persist(word.pack())?;
        cx.control.set_persisted_leader(word.pack());
        if let Some(claim) = self.claim.as_mut().filter(|c| c.word == word) {
            claim.durable |= 1 << self.me;
            self.settle_claim(cx, now);
        }
        Ok(())
    }

    /// Peer `j`'s heartbeat block came back: a newer word in it is adopted; the
    /// leader's, showing it sequences its epoch, counts as hearing it.
    pub fn heard(
        &mut self,
        cx: &mut SeqCx<'_, impl RawQp>,
        j: u8,
        view: &ControlView,
        now: Now,
    ) -> Result<(), HlcError> {
        let word = LeaderWord::unpack(view.leader());
        if let Some(claim) = self.claim.as_mut().filter(|c| view.persisted_leader() == c.word.pack()) {
            claim.durable |= 1 << j;
            self.settle_claim(cx, now);
        }
        self.adopt(cx, word, now)?;
        let sequencing = epoch_of(view.counter()) == word.epoch;
        if sequencing && j == word.sequencer && word.epoch == self.leader.epoch && word != self.leader {
            // Two claimants of one epoch: only the winner sets its counter to the epoch,
            // so this is the word that won. The one this node held (its own losing
            // claim, or its vote for it, left in its block) names a node that will
            // never sequence: followed, it would be found silent and deposed by a claim
            // of the next epoch, and the winner with it.
            tracing::info!(node = self.me, from = %self.leader, to = %word, "following the winner of a competing claim");
            self.follow(word, now);
        }
        let sequencing = sequencing && word == self.leader;
        if j == self.leader.sequencer && sequencing && view.heartbeat() != self.leader_beat {
            self.leader_beat = view.heartbeat();
            self.leader_heard_ns = now.mono_ns;
        }
        Ok(())
    }

    /// One round: adopts a word a claimant CASed into this node, keeps stamps in
    /// hand (a FETCH_ADD when the blocks run low), and claims when it is this node's
    /// turn. An error is the leader file's: the node cannot remember an epoch.
    pub fn poll(&mut self, cx: &mut SeqCx<'_, impl RawQp>, now: Now) -> Result<bool, HlcError> {
        let own = LeaderWord::unpack(cx.control.leader());
        let mut busy = false;
        if own.epoch > self.leader.epoch {
            self.adopt(cx, own, now)?;
            busy = true;
        }
        if self.marked_epoch < self.leader.epoch && self.fates.has_room() {
            // The marker of this node's epoch found the ring full when it moved there
            // (a Pending write a ring earlier, undecided): recorded now that there is
            // room. Left out, this ring never showed the epoch, and every order waited
            // at the end of the one before for it (seed 300199).
            self.mark_epoch(self.leader.epoch);
            busy = true;
        }
        let link_up = cx.links.peer(self.leader.sequencer).is_some_and(|p| p.is_up());
        match (link_up, self.leader_link_up_ns) {
            (true, None) => (self.leader_link_up_ns, self.leader_link_seen) = (Some(now.mono_ns), true),
            (false, Some(_)) => self.leader_link_up_ns = None,
            _ => {}
        }
        if self.claim.is_some() {
            // A claim whose CASes are all back may still wait for its voters to
            // persist the word (`heard`), for at most `dead_after`.
            self.settle_claim(cx, now);
        } else if self.claim_due(cx, now) {
            self.start_claim(cx, now);
            return Ok(true);
        }
        busy |= self.fetch_if_low(cx, now);
        Ok(busy)
    }

    /// Whether this node should claim the next epoch now.
    fn claim_due(&self, cx: &SeqCx<'_, impl RawQp>, now: Now) -> bool {
        let Some(rank) = self.rank else { return false };
        if now.mono_ns < self.claim_after_ns {
            return false;
        }
        // No claim can win without a majority, and one made before this node has READ
        // the majority's heartbeat blocks may be of an epoch they are past: a restarted
        // node whose file names it would claim again and depose the sequencer its
        // peers follow (seen on Soft-RoCE, where its links came up slower than a
        // dead_after). A block READ brings the peer's word (`heard`).
        let heard = 1 + cx.links.iter().filter(|p| p.is_up() && p.view.is_some()).count();
        if heard * 2 <= self.n {
            return false;
        }
        if !self.leader.is_set() {
            // Nobody has sequenced yet: the first sequencer claims once a majority is
            // heard (above); a shadow waits as for a silent sequencer.
            return rank == 0 || now.mono_ns >= self.leader_since_ns + self.wait_ns(rank);
        }
        if self.leader.sequencer == self.me {
            // Named, but without a counter for the epoch (a restart, or a claim that
            // did not win): claim again, once a dead_after has passed in which a newer
            // word would have reached it (a restarted sequencer that others replaced
            // meanwhile follows its successor instead of deposing it).
            return self.leading != Some(self.leader.epoch) && now.mono_ns >= self.leader_since_ns + self.wait_ns(1);
        }
        // How far after the silent sequencer this node comes in the ring of claimants.
        let after = match self.order.iter().position(|&o| o == self.leader.sequencer) {
            Some(at) => (rank + self.order.len() - at) % self.order.len(),
            None => rank + 1,
        };
        // Silence counts from when the sequencer could have been heard: not before this
        // node's link to it came up. A node that has not reached it at all since it
        // learned the word (it just restarted, or the sequencer was already gone) waits
        // longer before it calls it silent, so a restart on a slow fabric follows a live
        // sequencer instead of deposing it; a sequencer that is gone is still replaced.
        let from = match (self.leader_link_up_ns, self.leader_link_seen) {
            (Some(up), _) => self.leader_heard_ns.max(self.leader_since_ns).max(up),
            (None, true) => self.leader_heard_ns.max(self.leader_since_ns),
            (None, false) => self.leader_since_ns + UNREACHED_DEAD_AFTERS * self.dead_after_ns,
        };
        now.mono_ns >= from + self.wait_ns(after.max(1))
    }

    /// How long claimant `rank` (from 1) waits for a silent sequencer.
    fn wait_ns(&self, rank: usize) -> u64 {
        self.dead_after_ns + (rank as u64 - 1) * (self.dead_after_ns / 2)
    }

    /// A write that arrived at `arrived_ns` waits for a stamp: fetch a block at the
    /// next poll if none fetched after it is in hand.
    pub fn want_for(&mut self, arrived_ns: u64) {
        self.wanted = true;
        self.want_after_ns = self.want_after_ns.max(arrived_ns);
    }

    /// Posts the FETCH_ADD a write that just arrived waits for, in the same round as it
    /// arrived rather than at the next [`Sequencer::poll`] (a write fetches its own
    /// block under light load: the round trip is on its latency).
    pub fn fetch_wanted(&mut self, cx: &mut SeqCx<'_, impl RawQp>, now: Now) -> bool {
        self.wanted && self.fetch_if_low(cx, now)
    }

    /// Posts a FETCH_ADD of a block while writes wait for stamps, as large as the
    /// writes waiting (up to `stamp_block`): a write takes a stamp only from a block
    /// posted after it arrived, so no write that arrives later could use the rest,
    /// which would only be holes every node's order must settle.
    fn fetch_if_low(&mut self, cx: &mut SeqCx<'_, impl RawQp>, now: Now) -> bool {
        if self.leading.is_some() || self.claim.is_some() || self.fetch.is_some() || !self.leader.is_set() {
            return false;
        }
        // Aged or deposed blocks go first, so the room below is real; while a write
        // waits, blocks fetched before it arrived are of no use to it or any later one.
        let after = if self.wanted { self.want_after_ns } else { 0 };
        for i in (0..self.blocks.len()).rev() {
            let b = self.blocks[i];
            if b.left() > 0 && (!self.usable(&b, now) || b.posted_ns < after) {
                self.drop_block(i);
            }
        }
        if !self.wanted || self.blocks[1].left() > 0 {
            return false;
        }
        self.wanted = false;
        let l = self.leader.sequencer;
        let Some(remote) = cx.links.peer(l).filter(|p| p.is_up()).and_then(|p| p.remote) else { return false };
        self.generation = self.generation.wrapping_add(1) & crate::limits::WR_INDEX_MAX;
        let add = (cx.waiting as u64).clamp(1, self.stamp_block);
        self.fetch = Some(Fetch { generation: self.generation, epoch: self.leader.epoch, posted_ns: now.mono_ns, add });
        self.stats.fetches += 1;
        cx.links.post(
            l,
            WrId::new(Kind::StampFetch, l, self.generation, 0),
            Op::FetchAdd { remote: remote.control.at(COUNTER_AT as u64), add },
            cx.pool.buf(FETCH_WORD, 8),
        );
        true
    }

    /// A stamp FETCH_ADD came back (`ok`: with the counter's old value in the pool).
    pub fn on_fetch(&mut self, cx: &mut SeqCx<'_, impl RawQp>, generation: u32, ok: bool, now: Now) {
        let Some(fetch) = self.fetch.filter(|f| f.generation == generation) else {
            // Of an epoch given up since: its stamps (at most a block) are holes.
            if ok {
                self.stats.holes += self.stamp_block;
            }
            return;
        };
        self.fetch = None;
        if !ok {
            return;
        }
        let first = cx.pool.word(FETCH_WORD);
        let fits = sequence_of(first) != 0 && sequence_of(first) + fetch.add <= 1 << SEQUENCE_BITS;
        if epoch_of(first) != fetch.epoch || fetch.epoch != self.leader.epoch || !fits {
            // Not (or no longer) the epoch's counter: a deposed or not yet started
            // sequencer. Nothing of it is used.
            self.stats.holes += fetch.add;
            return;
        }
        // Recorded before any of it is used: a stamp no ring records was never used.
        if !self.record(FateKind::Block, first, 0, false, fetch.add as u32) {
            self.stats.holes += fetch.add;
            return;
        }
        let block = Block { next: first, end: first + fetch.add, posted_ns: fetch.posted_ns, fetched_ns: now.mono_ns };
        if self.blocks[0].left() == 0 {
            self.blocks[0] = block;
        } else {
            self.blocks[1] = block;
        }
    }

    /// Starts a claim of the epoch after the newest this node knows.
    fn start_claim(&mut self, cx: &mut SeqCx<'_, impl RawQp>, now: Now) {
        let Some(word) = self.leader.next(self.me) else {
            tracing::error!(node = self.me, leader = %self.leader, "no sequencer epoch left to claim");
            self.claim_after_ns = u64::MAX;
            return;
        };
        let own = cx.control.leader();
        if LeaderWord::unpack(own).epoch >= word.epoch || cx.control.cas_leader(own, word.pack()) != own {
            // A claimant got here first; the next poll adopts its word.
            return;
        }
        tracing::info!(node = self.me, %word, "claiming the sequencer");
        self.generation = self.generation.wrapping_add(1) & crate::limits::WR_INDEX_MAX;
        let mut claim = Claim {
            word,
            generation: self.generation,
            held: 1 << self.me,
            // This node's own vote counts once its next poll persisted it (`adopt`),
            // like every other node's.
            durable: 0,
            started_ns: now.mono_ns,
            outstanding: 0,
            compare: [0; NODES_MAX],
            rounds: [0; NODES_MAX],
            rival: None,
            won: false,
        };
        for j in 0..self.n as u8 {
            if j == self.me {
                continue;
            }
            // From the word last READ there; a wrong guess costs a round.
            let guess = cx.links.peer(j).and_then(|p| p.view).map_or(self.leader.pack(), |v| v.leader());
            Self::post_cas(cx, &mut claim, j, guess);
        }
        self.claim = Some(claim);
        self.settle_claim(cx, now);
    }

    fn post_cas(cx: &mut SeqCx<'_, impl RawQp>, claim: &mut Claim, j: u8, compare: u64) {
        let Some(remote) = cx.links.peer(j).filter(|p| p.is_up()).and_then(|p| p.remote) else { return };
        claim.compare[j as usize] = compare;
        claim.rounds[j as usize] += 1;
        claim.outstanding |= 1 << j;
        cx.links.post(
            j,
            WrId::new(Kind::LeaderCas, j, claim.generation, 0),
            Op::CompareSwap { remote: remote.control.at(LEADER_AT as u64), compare, swap: claim.word.pack() },
            cx.pool.buf(1 + u32::from(j), 8),
        );
    }

    /// A claim CAS at node `j` came back.
    pub fn on_cas(&mut self, cx: &mut SeqCx<'_, impl RawQp>, j: u8, generation: u32, ok: bool, now: Now) {
        let Some(mut claim) = self.claim.filter(|c| c.generation == generation) else { return };
        claim.outstanding &= !(1 << j);
        if ok {
            let found = cx.pool.word(1 + u32::from(j));
            // The word is ours if the CAS took, or if the node adopted it already from
            // a heartbeat block it READ (a word moves only to a higher epoch, so that
            // node can count for no other claimant of this epoch).
            if found == claim.compare[j as usize] || found == claim.word.pack() {
                claim.held |= 1 << j;
            } else if LeaderWord::unpack(found).epoch < claim.word.epoch {
                if u32::from(claim.rounds[j as usize]) < CLAIM_ROUNDS_MAX {
                    Self::post_cas(cx, &mut claim, j, found);
                }
            } else if LeaderWord::unpack(found).epoch == claim.word.epoch {
                // A competing claimant of this epoch got here first: this node counts
                // for it, not for us. The claim goes on: the other nodes may still
                // make its majority (giving up at the first rival word made both
                // claimants of a race give up, even the one a majority held).
                claim.rival = Some(LeaderWord::unpack(found));
            } else if !claim.won {
                // A later epoch is held here: this claim has lost. Its CASes that took
                // are overtaken by the next claim; the next poll adopts that word.
                tracing::info!(node = self.me, word = %claim.word, at = j, found = %LeaderWord::unpack(found), "claim lost");
                self.claim_failed(now);
                return;
            }
        }
        self.claim = Some(claim);
        self.settle_claim(cx, now);
    }

    /// Ends the claim in flight as failed: counted, and the next one waits its pause.
    fn claim_failed(&mut self, now: Now) {
        self.claim = None;
        self.stats.claims_failed += 1;
        self.claim_after_ns = now.mono_ns + self.backoff_ns();
    }

    /// A claim's pause after it failed: a heartbeat-scale wait that grows with rank.
    fn backoff_ns(&self) -> u64 {
        let rank = self.rank.unwrap_or(0) as u64 + 1;
        rank * (self.dead_after_ns / 8).max(1)
    }

    /// Wins the claim once a majority holds its word and has persisted it; ends it once
    /// no CAS is out and either fewer than a majority hold it or a majority's word has
    /// not been persisted within `dead_after` (a voter that stalls before its poll).
    fn settle_claim(&mut self, cx: &mut SeqCx<'_, impl RawQp>, now: Now) {
        let Some(mut claim) = self.claim else { return };
        let n = self.n;
        let majority = |votes: u32| votes.count_ones() as usize > n / 2;
        if !claim.won && self.leader.epoch > claim.word.epoch {
            // This node moved on to a later epoch meanwhile: a majority may hold it.
            tracing::info!(node = self.me, word = %claim.word, leader = %self.leader, "claim overtaken");
            self.claim_failed(now);
            return;
        }
        if !claim.won && majority(claim.held & claim.durable) {
            claim.won = true;
            // Only now: a writer that saw the word before the claim won fetched a
            // counter of no epoch and dropped it.
            cx.control.set_counter(first_of(claim.word.epoch));
            self.leading = Some(claim.word.epoch);
            self.stats.claims_won += 1;
            if let Err(e) = self.file.persist(claim.word.pack()) {
                tracing::error!(node = self.me, error = %e, "cannot persist the leader word");
            }
            self.follow(claim.word, now);
            for i in (0..self.blocks.len()).rev() {
                self.drop_block(i);
            }
            self.fetch = None;
            self.mark_epoch(claim.word.epoch);
            tracing::info!(node = self.me, word = %claim.word, holders = claim.held.count_ones(), "sequencer claimed");
        }
        let waiting = !claim.won && majority(claim.held) && now.mono_ns < claim.started_ns + self.dead_after_ns;
        if claim.outstanding == 0 && !waiting {
            if !claim.won {
                tracing::info!(node = self.me, word = %claim.word, holders = claim.held.count_ones(), durable = claim.durable.count_ones(), rival = ?claim.rival, "claim reached no majority");
                self.claim_failed(now);
                if let Some(rival) = claim.rival.filter(|r| r.epoch == self.leader.epoch.max(claim.word.epoch)) {
                    // Follow the rival, not the own word left in this node's block
                    // (see `heard`): if it won, this node hears it sequence; if it lost
                    // too, it falls silent and the claims go on as after any silence.
                    self.follow(rival, now);
                }
            }
            self.claim = None;
        } else {
            self.claim = Some(claim);
        }
    }
}
