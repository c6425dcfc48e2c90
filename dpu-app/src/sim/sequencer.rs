//! The simulator's sequencer faults and invariants (`sim --sequencer`: the cluster runs
//! with `ordering = "sequencer"`, node 0 sequencing first, nodes 1 and 2 its shadows).
//!
//! Faults aimed at the sequencer, on top of the random crashes, partitions and losses:
//! the node that sequences crashes (and later restarts, a deposed sequencer coming
//! back with its files); a partition isolates it from every other node for a while
//! (it returns deposed, or finds it still sequences if nobody claimed); a partition
//! between it and its first shadow only, so that the shadow claims against a live
//! sequencer that the others still hear (competing claims).
//!
//! Invariants, after every step:
//! - every committed write's version is unique in the cluster (no stamp issued, or
//!   applied, twice) and of an epoch some node won by claim;
//! - a key's versions follow real time: a write submitted after another write of its
//!   key committed commits at a higher version (`Oracle::out_of_order`), blocks of
//!   stamps fetched before included;
//! - no two nodes ever sequence the same epoch;
//! - no node's leader word moves back to a lower epoch, restarts included (it is
//!   persisted);
//! - every node's change feed is a prefix of one order: its versions rise, a version
//!   is the same key's write on every node that released it, a node whose order has
//!   released past a version has it in its feed if any node released it as a write
//!   (none released it as a no-op), and every write a host saw commit is in the feed
//!   of every node whose order released past it (no committed write skipped, none
//!   applied twice);
//!   a feed that marked versions missing (it fell behind what every peer's feed or
//!   ring still held) is checked above its mark; marks are allowed only where the run
//!   chose small fate rings (odd seeds), and fail the run otherwise;
//! - the holders' stamp ledgers (`format/ledger.rs`) agree with every fate ring: a
//!   stamp a ring records Committed is Held (accepted, not rolled back) in the ledgers
//!   of at least a quorum of the nodes, its writer counted whatever its own ledger says
//!   (a writer that took its write's fate from the order, which the holders' rule
//!   decided, may have rolled its own record back), and one it records Aborted in those of fewer
//!   than a quorum (`protocol/rollbacks.rs`: else, with its writer gone, its holders
//!   would take it for a committed write); a node that is down counts with what its
//!   ledger held when it crashed (its files do not change while it is down); and the
//!   holders' rule (`cluster/holders_rule.rs`), applied to every ledger but the
//!   writer's own, as if the writer were gone for good, takes each write the ring
//!   records Committed for a write and each it records Aborted for a no-op;
//! - no hole stays open past its bound: once the run has settled (every node up,
//!   every link healed, nothing in flight), every node's order releases every committed
//!   write within the run's write bound (checked once per seed, in `run`); and in the
//!   runs with a node gone for good, while it is away, whenever every other node has
//!   been up and uncut for the hole bound, each of their orders has released every
//!   write committed a hole bound ago ([`SequencerWatch::hole_bound`]: the holders
//!   fence the gone node and the orders decide its stamps from their ledgers);
//! - failover is measured: from the step the sequencer crashed or was cut off to the
//!   first step a live node sequences a newer epoch, and to the first write of that
//!   epoch completing at a host (the report's percentiles).
//!
//! Liveness is the simulator's: every write submitted completes within its bound, so
//! a cluster that stopped stamping after a fault breaks the run.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::cluster::format::fates::FateKind;
use crate::cluster::format::feed::FeedEntry;
use crate::cluster::format::ledger::LedgerState;
use crate::cluster::holders_rule::{self, Verdict};
use crate::cluster::placement::mask_of;
use crate::cluster::run::inprocess::InProcess;
use crate::cluster::sequence::epoch_of;
use crate::histogram::Histogram;

/// Feed checks between two samples of how far behind the orders are.
const LAG_EVERY: u64 = 64;

/// What the sequencer checks keep between steps.
#[derive(Debug, Default)]
pub struct SequencerWatch {
    /// Which node won each epoch.
    leaders: HashMap<u32, u8>,
    /// The highest epoch each node's word has shown.
    epochs: Vec<u32>,
    /// Every committed version.
    versions: std::collections::BTreeSet<u64>,
    /// Every version some node's feed released as a write, with its key hash.
    order: BTreeMap<u64, u64>,
    /// Per node: the last feed version read, the versions its feed holds, and its
    /// order's cursor at the last check.
    feeds: Vec<(u64, HashSet<u64>, u64)>,
    /// Most committed writes a node's order had not released yet at any check, and
    /// the feed entries checked.
    pub order_lag: (u64, u64),
    /// From the cluster settling (every node up, nothing in flight) to every order
    /// having released every committed write, ns.
    pub order_drained_ns: Histogram,
    /// Feed checks made.
    checks: u64,
    /// Per node: its incarnation's catch-ups from a peer's feed and entries copied, as
    /// last seen; and those of incarnations that ended (a restart zeroes the counts).
    catch_seen: Vec<(u64, u64, u64)>,
    catch_banked: (u64, u64, u64),
    /// Whether a feed may mark versions missing (small fate rings: an order stalled
    /// longer than a ring loses fates everywhere); otherwise a mark breaks the run.
    gaps_allowed: bool,
    /// Per node: it came back from being gone for good after more writes committed
    /// than a change feed holds, so its catch-up must mark versions missing.
    gaps_owed: Vec<bool>,
    /// Per node: every version up to this one is marked missing from its feed.
    marks: Vec<u64>,
    /// A fault took the sequencer of this epoch away at this time.
    lost: Option<(u32, u64)>,
    /// The new epoch, once claimed after `lost`, and when; waits for its first write.
    claimed: Option<(u32, u64)>,
    /// Sequencer lost to a newer epoch sequencing, ns of simulated time.
    pub to_claim: Histogram,
    /// Sequencer lost to the first write of the newer epoch completing.
    pub to_write: Histogram,
    /// Per node: the next position of its fate ring to look at, and the positions
    /// seen Pending, looked at again until they decide.
    rings: Vec<(u64, std::collections::BTreeSet<u64>)>,
    /// Stamps recorded Aborted, and the most ledgers that still held any of them then.
    pub aborted: (u64, u64),
    /// Stamps recorded Committed, and the fewest ledgers that held any of them then.
    pub committed: (u64, u64),
    /// Per node, while it is down: the stamps its ledger held (not rolled back) when
    /// it crashed, `(writer, stamp)`.
    down_held: Vec<Option<HashSet<(u8, u64)>>>,
    /// Committed versions and when, not yet checked against the hole bound (kept only
    /// once [`Self::track_hole_bound`] was called).
    commits: std::collections::VecDeque<(u64, u64)>,
    tracking: bool,
}

impl SequencerWatch {
    /// A watch for a cluster of `nodes`.
    pub fn new(nodes: u8, gaps_allowed: bool) -> Self {
        Self {
            epochs: vec![0; nodes.into()],
            feeds: (0..nodes).map(|_| (0, HashSet::new(), 0)).collect(),
            catch_seen: vec![(0, 0, 0); nodes.into()],
            gaps_allowed,
            gaps_owed: vec![false; nodes.into()],
            marks: vec![0; nodes.into()],
            rings: vec![(1, std::collections::BTreeSet::new()); nodes.into()],
            down_held: vec![None; nodes.into()],
            commits: std::collections::VecDeque::new(),
            tracking: false,
            committed: (0, u64::MAX),
            ..Self::default()
        }
    }

    /// The node sequencing the highest epoch now, and that epoch.
    pub fn sequencer(cluster: &InProcess) -> Option<(u8, u32)> {
        cluster
            .nodes()
            .filter_map(|n| n.sequencer_state().filter(|(_, leading)| *leading).map(|(w, _)| (n.id(), w.epoch)))
            .max_by_key(|&(_, e)| e)
    }

    /// A fault just took the sequencer away at `now` (failover is timed from here),
    /// unless a failover is already being timed.
    pub fn lost(&mut self, epoch: u32, now: u64) {
        if self.lost.is_none() {
            self.lost = Some((epoch, now));
        }
    }

    /// The checks of one step; an error names the broken invariant.
    pub fn check(&mut self, cluster: &InProcess, now: u64) -> Result<(), String> {
        for node in cluster.nodes() {
            let Some((word, leading)) = node.sequencer_state() else { continue };
            let id = node.id();
            let seen = &mut self.epochs[id as usize];
            if word.epoch < *seen {
                return Err(format!("node {id}'s leader word went back from epoch {seen} to {}", word.epoch));
            }
            *seen = word.epoch;
            if leading {
                if let Some(&other) = self.leaders.get(&word.epoch).filter(|&&o| o != id) {
                    return Err(format!("nodes {other} and {id} both sequence epoch {}", word.epoch));
                }
                self.leaders.insert(word.epoch, id);
                if let Some((_, since)) = self.lost.filter(|&(old, _)| word.epoch > old) {
                    if self.claimed.is_none() {
                        self.to_claim.record(now - since);
                        self.claimed = Some((word.epoch, now));
                    }
                }
            }
        }
        self.check_ledgers(cluster)?;
        self.check_feeds(cluster)
    }

    /// Node `id` is about to crash: what its ledger holds is kept for the ledger
    /// check (`check_ledgers`) while it is down.
    pub fn crashing(&mut self, cluster: &InProcess, id: u8) {
        let n = self.epochs.len() as u8;
        self.down_held[id as usize] = cluster.node(id).and_then(|node| node.ledger()).map(|ledger| {
            (0..n)
                .flat_map(|w| {
                    ledger.of_writer(w).into_iter().filter(|e| e.state == LedgerState::Held).map(move |e| (w, e.stamp))
                })
                .collect()
        });
    }

    /// Every fate ring's newly decided writes against the holders' ledgers (see the
    /// module doc): Committed is Held by a quorum, Aborted by fewer.
    fn check_ledgers(&mut self, cluster: &InProcess) -> Result<(), String> {
        let quorum = cluster.config().quorum as u64;
        let placement = cluster.config().placement();
        let fragments = cluster.config().k + cluster.config().m;
        let every = (1u32 << self.down_held.len()) - 1;
        for node in cluster.nodes() {
            self.down_held[node.id() as usize] = None;
        }
        for node in cluster.nodes() {
            let Some(ring) = node.fate_ring() else { continue };
            let j = node.id();
            let (next, pending) = &mut self.rings[j as usize];
            let fresh = *next..ring.next();
            *next = ring.next();
            let mut decided = Vec::new();
            let looked: Vec<u64> = pending.iter().copied().chain(fresh).collect();
            for p in looked {
                match ring.at(p) {
                    Some(e) if e.kind == FateKind::Pending => {
                        pending.insert(p);
                    }
                    Some(e) => {
                        pending.remove(&p);
                        decided.push(e);
                    }
                    // Overwritten: the ring wrapped past a position it had settled.
                    None => {
                        pending.remove(&p);
                    }
                }
            }
            for e in decided.into_iter().filter(|e| matches!(e.kind, FateKind::Committed | FateKind::Aborted)) {
                let stamp = e.version << 8 | u64::from(j);
                let mut held_by = 0u32;
                for n in cluster.nodes() {
                    let l = n.ledger().and_then(|l| l.for_stamp(j, e.write_seq, stamp));
                    if l.is_some_and(|l| l.state == LedgerState::Held) {
                        held_by |= 1 << n.id();
                    }
                }
                let mut down_by = 0u32;
                for (i, h) in self.down_held.iter().enumerate() {
                    if h.as_ref().is_some_and(|h| h.contains(&(j, stamp))) {
                        down_by |= 1 << i;
                    }
                }
                held_by |= down_by;
                let (held, down) = (u64::from(held_by.count_ones()), down_by.count_ones());
                // The holders' rule, as the other nodes would apply it were node j gone
                // for good (every other ledger read, j's own not counted), must agree.
                let holders = mask_of(&placement.holders(e.key_hash, fragments)[..fragments]);
                let verdict = holders_rule::verdict(quorum as u32, holders, j, every & !(1 << j), held_by);
                let want = if e.kind == FateKind::Committed { Verdict::Write } else { Verdict::NoOp };
                if verdict != want {
                    return Err(format!(
                        "node {j} recorded stamp {:#x} {:?}, but the holders' rule takes it for {verdict:?} were node {j} gone: held by {held_by:#b} of holders {holders:#b}, quorum {quorum}",
                        e.version, e.kind
                    ));
                }
                if e.kind == FateKind::Aborted {
                    self.aborted = (self.aborted.0 + 1, self.aborted.1.max(held));
                    if held >= quorum {
                        return Err(format!(
                            "node {j} recorded stamp {:#x} Aborted while the ledgers of {held} nodes ({down} of them down; a quorum of {quorum}) still hold its fragment",
                            e.version
                        ));
                    }
                } else {
                    self.committed = (self.committed.0 + 1, self.committed.1.min(held));
                    // The writer counted whatever its own ledger says: a write it took
                    // from the order (the holders' rule decided it, `ledgers.rs`) after
                    // rolling its own record back is held by the rule's threshold of
                    // others, which with the writer is a quorum.
                    let with_writer = u64::from((held_by | 1 << j).count_ones());
                    if with_writer < quorum {
                        let each: Vec<String> = cluster
                            .nodes()
                            .map(|n| {
                                let l = n.ledger().map(|l| l.at_slot(j, u64::from(e.write_seq)));
                                format!("node {}: {l:?}", n.id())
                            })
                            .collect();
                        return Err(format!(
                            "node {j} recorded stamp {:#x} (write {:#x} mod 2^24) Committed, but only the ledgers of {held} nodes ({down} of them down; a quorum of {quorum}) hold its fragment; {}",
                            e.version, e.write_seq, each.join("; ")
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// The feeds' invariants (see the module doc).
    fn check_feeds(&mut self, cluster: &InProcess) -> Result<(), String> {
        self.checks += 1;
        let mut out = [FeedEntry::default(); 64];
        for node in cluster.nodes() {
            let Some(cursor) = node.order_cursor() else { continue };
            let id = node.id() as usize;
            if let Some(a) = node.apply_stats() {
                if a.conflicts > 0 || (a.feed_gaps > 0 && !self.gaps_allowed && !self.gaps_owed[id]) {
                    return Err(format!(
                        "node {id}'s ordered apply met contradicting fates, or fell behind every peer's feed: {a:?}"
                    ));
                }
                let seen = &mut self.catch_seen[id];
                if a.catch_ups < seen.0 {
                    let b = &mut self.catch_banked;
                    *b = (b.0 + seen.0, b.1 + seen.1, b.2 + seen.2);
                }
                *seen = (a.catch_ups, a.copied, a.feed_gaps);
            }
            // Versions a feed marked missing are not in it: the checks below pass
            // over them, and reading goes on above the mark.
            let mark = node.feed_dropped();
            if mark > self.marks[id] {
                self.marks[id] = mark;
                self.feeds[id].0 = self.feeds[id].0.max(mark);
            }
            while node.feed_last_version() > self.feeds[id].0 {
                let got =
                    node.read_feed(self.feeds[id].0, &mut out).map_err(|e| format!("node {id}'s change feed: {e}"))?;
                for e in &out[..got] {
                    let (last, has, _) = &mut self.feeds[id];
                    if e.version <= *last || e.version >= cursor {
                        return Err(format!(
                            "node {id}'s feed has version {:#x} after {last:#x} (cursor {cursor:#x})",
                            e.version
                        ));
                    }
                    *last = e.version;
                    has.insert(e.version);
                    self.order_lag.1 += 1;
                    match self.order.insert(e.version, e.key_hash) {
                        Some(k) if k != e.key_hash => {
                            return Err(format!(
                                "stamp {:#x} is key {k:#x} in one node's feed, {:#x} in node {id}'s",
                                e.version, e.key_hash
                            ));
                        }
                        Some(_) => {}
                        None => {
                            for (j, (_, has, c)) in self.feeds.iter().enumerate() {
                                if *c > e.version && !has.contains(&e.version) && e.version > self.marks[j] {
                                    return Err(format!(
                                        "node {j} released stamp {:#x} as a no-op, node {id} as a write",
                                        e.version
                                    ));
                                }
                            }
                        }
                    }
                }
                if got == 0 {
                    return Err(format!(
                        "node {id}'s feed ends at {:#x} but reads nothing after {:#x}",
                        node.feed_last_version(),
                        self.feeds[id].0
                    ));
                }
            }
            let (_, has, checked) = &mut self.feeds[id];
            let from = (*checked).max(self.marks[id] + 1).min(cursor);
            if let Some((&v, _)) = self.order.range(from..cursor).find(|(v, _)| !has.contains(v)) {
                return Err(format!("node {id}'s order released stamp {v:#x} as a no-op; another node's as a write"));
            }
            if let Some(&v) = self.versions.range(from..cursor).find(|&&v| !has.contains(&v)) {
                return Err(format!(
                    "node {id}'s order released past committed version {v:#x} without it (cursor {cursor:#x}, feed marked missing up to {:#x}; {:?})",
                    self.marks[id],
                    node.apply_stats()
                ));
            }
            *checked = cursor;
            if self.checks % LAG_EVERY == 0 {
                // Counting is linear in the writes behind: sampled.
                self.order_lag.0 = self.order_lag.0.max(self.versions.range(cursor..).count() as u64);
            }
        }
        Ok(())
    }

    /// Writes seen committed so far.
    pub fn committed_count(&self) -> usize {
        self.versions.len()
    }

    /// Node `id` comes back from being gone for good after more writes committed than
    /// a change feed holds: no peer's feed still has what it missed, so it marks those
    /// versions missing (each released version is still checked against the marks).
    pub fn owe_gaps(&mut self, id: u8) {
        self.gaps_owed[id as usize] = true;
    }

    /// A write committed with `stamp`, seen by its host at `now`.
    pub fn committed(&mut self, stamp: u64, now: u64) -> Result<(), String> {
        let version = stamp >> 8;
        if !self.versions.insert(version) {
            return Err(format!("version {version:#x} committed twice (stamp {stamp:#x})"));
        }
        if self.tracking {
            self.commits.push_back((version, now));
        }
        for (j, (_, has, cursor)) in self.feeds.iter().enumerate() {
            if *cursor > version && !has.contains(&version) && version > self.marks[j] {
                return Err(format!(
                    "node {j}'s order released past committed version {version:#x} without it (cursor {cursor:#x}, feed marked missing up to {:#x})",
                    self.marks[j]
                ));
            }
        }
        let epoch = epoch_of(version);
        if !self.leaders.contains_key(&epoch) {
            return Err(format!("version {version:#x} committed in epoch {epoch}, which no node won"));
        }
        if let (Some((_, since)), Some((new, _))) = (self.lost, self.claimed) {
            if epoch >= new {
                self.to_write.record(now - since);
                self.lost = None;
                self.claimed = None;
            }
        }
        Ok(())
    }

    /// Keeps every committed version from now on for [`Self::hole_bound`].
    pub fn track_hole_bound(&mut self) {
        self.tracking = true;
    }

    /// The hole bound while node `gone` is away and the others are steady: every other
    /// node's order has released every version committed `bound_ns` before `now`.
    pub fn hole_bound(&mut self, cluster: &InProcess, now: u64, bound_ns: u64, gone: u8) -> Result<(), String> {
        while let Some(&(version, at)) = self.commits.front().filter(|&&(_, at)| at + bound_ns <= now) {
            for node in cluster.nodes().filter(|x| x.id() != gone) {
                let cursor = node.order_cursor().unwrap_or(0);
                if cursor <= version {
                    return Err(format!(
                        "node {}'s order has not released version {version:#x}, committed {} us ago, past the hole bound of {} us while node {gone} is gone (the others steady): cursor {cursor:#x}, stall {:?}, {:?}, {}",
                        node.id(),
                        (now - at) / 1_000,
                        bound_ns / 1_000,
                        node.order_stall(now),
                        node.apply_stats(),
                        cluster
                            .nodes()
                            .map(|n| format!("node {}: cursor {:#x}, {}", n.id(), n.order_cursor().unwrap_or(0), n.order_debug().unwrap_or_default()))
                            .collect::<Vec<_>>()
                            .join("; ")
                    ));
                }
            }
            self.commits.pop_front();
        }
        Ok(())
    }

    /// The newest committed version (0: none).
    pub fn newest_committed(&self) -> u64 {
        self.versions.last().copied().unwrap_or(0)
    }

    /// Catch-ups in the run, the feed entries they copied from peers, and those that
    /// marked versions missing.
    pub fn catch_ups(&self) -> (u64, u64, u64) {
        self.catch_seen.iter().fold(self.catch_banked, |t, s| (t.0 + s.0, t.1 + s.1, t.2 + s.2))
    }

    /// Epochs won in the run.
    pub fn epochs_won(&self) -> usize {
        self.leaders.len()
    }
}
