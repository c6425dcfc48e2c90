//! The sequencer order protocol (`ordering = "sequencer"`) as a small model, explored
//! exhaustively at small bounds with stateright's breadth-first checker.
//!
//! What is modelled, each rule as the code has it:
//! - **Stamps**: the sequencer's epoch and its counter; a writer fetches a stamp into
//!   its hand (a block of one) while it knows the current epoch, and uses it for a
//!   write, or drops it (recorded Unused) when it learns of a newer epoch, after which
//!   its ring gets the epoch's marker (`protocol/sequencer.rs`). A crash loses the hand
//!   unrecorded (a hole only the epoch's close settles).
//! - **Fate rings**: Pending when a write takes its stamp, Committed once a quorum
//!   (the writer's own fragment counted) persisted the fragment, Aborted once the
//!   rollback reached enough holders (`holders_rule::rollback_settled`, called here), or
//!   as the writer's own order decided it from the ledgers (`take_ordered_fate`).
//! - **Ledgers and fences** (`format/ledger.rs`, `protocol/holder.rs`): a holder
//!   records Held before it acknowledges a fragment and RolledBack (sticky) before it
//!   acknowledges a rollback; a fence freezes a writer's writes below `frozen_below`
//!   (refused fragments, rollbacks of held entries answered `ACK_FENCED`); a holder
//!   fences a writer that is down (or, with `partitions`, one that is up but cut off),
//!   and narrows the fence to the writes below the writer's next write number when it
//!   connects again.
//! - **Writers** (`protocol/replicate.rs`, `protocol/rollbacks.rs`): commit on a
//!   quorum, roll back at any time before (the write's deadline), resend rollbacks at a
//!   holder's resync, and on a restart abort what was in progress and settle the ring's
//!   Pending stamps from the outcome table (`recover_outcomes`, `recover_fates`).
//! - **Appliers** at chosen nodes (`protocol/apply.rs`, `protocol/ledgers.rs`,
//!   `cluster/order.rs`): read a ring (its writer up, or its own in place), read a
//!   holder's fence slots, ask the ledgers about the Pending stamp at the cursor when
//!   some holder fences its writer (each holder's fence and entry read together: the
//!   fence-entry-fence READs with an unchanged change count linearise to one point),
//!   finish a question at any time (peers not heard count unread) and decide by
//!   `holders_rule::verdict` (called here); scan a fenced-out writer's part of the
//!   ledgers and take it as gone while the fences it rests on stand, deciding its
//!   stamps by the rule once its fences were read again since the stamp was seen;
//!   close an epoch once every ring is past it or its writer is gone (fences read
//!   again since), at the highest stamp the rings or scans name, and release the
//!   stamp at the cursor once its fate is known, unrecorded stamps of a closed epoch
//!   as the gone writers' scans say (`gone_fate`), else no-ops.
//!
//! What is abstracted away: timers (every timeout is a nondeterministic choice, so
//! the model has every interleaving the timers allow and more); block entries and the
//! roll of a live epoch (the hole a roll settles is left out of the liveness target);
//! leader words and the claim (a deposed epoch's fragments are not refused: more
//! behaviours, not fewer); directory marks, stores, GETs, repairs, the change feed and
//! catching up from a peer's feed; ring and ledger wrap-around; the READ chunking of a
//! ring (a ring is read whole: its entries only move forward, so a chunked read equals
//! one whole read at some point); the ledger question rounds over stamps above the
//! cursor and a node's own Pending stamps below it (only the cursor's is asked).
//! Every write goes to every node (k + m = nodes), as in the simulator's clusters.
//!
//! Properties (`always`): no two nodes release different fates for a stamp; no
//! order is handed two different fates for a stamp (`OrderError::Conflict`); a stamp
//! a ring records Committed is never released a no-op, one it records Aborted or
//! Unused never a write; a write its writer recorded Committed in its outcome table
//! (its host may have been answered OK) is never released a no-op; the holders' rule
//! never takes a stamp a ring records Aborted for a write, nor decides one stamp both
//! ways. Liveness, checked in every terminal state (no step left to take): with at
//! most the tolerated faults, every live applier's order has passed every stamp of
//! the epochs before the last, and every stamp of the last that a ring still read
//! records.
//!
//! Bounds: three nodes, quorum 2 (RS(2,1): every write to every node), one writer
//! (node 0) with one write, one stamp per epoch, two epochs, one crash of the writer
//! (gone for good in one run, back in the other), no message lost (a rollback is resent
//! at every resync), holders fence the writer only while it is down. The gone-for-good
//! run has appliers at nodes 0 and 1 and stamps waiting in the writer's hand (26,112
//! states, 3 s in the dev profile); the comes-back run an applier at the writer
//! (247,520 states, 29 s). `a_writer_that_comes_back_two_appliers` (`-- --ignored`)
//! adds the second applier and the hand there: not seen to finish in ten minutes.
//!
//! What it found while it was built: nothing in the shipped rules. Two faults of the
//! model itself: a fence budget that kept a holder from fencing a writer twice (a
//! stuck order), and epoch closes running on past the sequencer's epoch once the only
//! writer was gone (the rings of nodes that take no stamps, not modelled, bound it
//! in the code; here `e < epoch` does).
//!
//! Run: `cargo test -p prescient-dpu --test order_model -- --nocapture` (prints the
//! states explored per configuration).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use prescient_dpu::cluster::holders_rule::{self, Verdict};
use stateright::{Checker, Model, Property};

/// A sequencer stamp: (epoch, sequence), both from 1.
type Stamp = (u8, u8);

/// A set of nodes, a bit each (as `holders_rule` takes them).
type Mask = u32;

/// A fence of every write (`Fence::is_whole`).
const WHOLE: u8 = u8::MAX;

/// The bounds and faults of one exploration.
#[derive(Clone, Debug)]
struct Config {
    /// Nodes; every write goes to all of them.
    nodes: u8,
    /// The write quorum.
    quorum: u32,
    /// Nodes that write.
    writers: Vec<u8>,
    /// Nodes that run an ordered applier.
    appliers: Vec<u8>,
    /// Writes per writer.
    writes: u8,
    /// Stamps the sequencer issues per epoch.
    stamps: u8,
    /// Epochs.
    epochs: u8,
    /// Crashes in all.
    crashes: u8,
    /// Nodes that may crash.
    crashable: Vec<u8>,
    /// A fetched stamp waits in the writer's hand before a write takes it (so a write
    /// may take a stamp of an epoch the sequencer already left, and a crash may lose
    /// one unrecorded); otherwise a write takes its stamp as it is fetched.
    hands: bool,
    /// A node that crashes may come back.
    comes_back: bool,
    /// Nodes that may crash and never come back (at most one per run).
    may_go: Vec<u8>,
    /// Fragments or their acknowledgements lost in all.
    losses: u8,
    /// Holders may fence a writer that is up (cut off from them).
    partitions: bool,
    /// Check that no order is stuck in a terminal state.
    liveness: bool,
}

/// The kind of a fate-ring entry (`format/fates.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Pending,
    Committed,
    Aborted,
    Unused,
    /// The writer moved to the epoch of the stamp `(epoch, 0)`.
    Epoch,
}

/// A fate-ring entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Entry {
    kind: Kind,
    stamp: Stamp,
    /// The write's number (writes only).
    wseq: u8,
}

/// A ledger entry's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Held {
    Held,
    RolledBack,
}

/// A holder's fence of one writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Fence {
    /// First write number not frozen ([`WHOLE`]: every write).
    below: u8,
    /// Times the slot changed.
    changes: u8,
}

impl Fence {
    fn whole(&self) -> bool {
        self.below == WHOLE
    }
    fn freezes(&self, wseq: u8) -> bool {
        wseq < self.below
    }
}

/// One holder's part of its ledger for one writer.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
struct Part {
    /// Entries by write number - 1: the stamp and its state.
    entries: Vec<Option<(Stamp, Held)>>,
    fence: Option<Fence>,
}

/// A writer's outcome-table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum WriteState {
    InProgress,
    Committed,
    Aborted,
}

/// A writer's durable record of one write (`format/outcome.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Outcome {
    stamp: Stamp,
    state: WriteState,
    /// Holders that persisted its rollback.
    lacking: Mask,
}

/// A rollback waiting for enough holders (`protocol/rollbacks.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Rolling {
    wseq: u8,
    lacking: Mask,
    /// Holders that answered `ACK_FENCED`.
    fenced: Mask,
}

/// A message in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Msg {
    Frag { w: u8, wseq: u8, to: u8 },
    FragAck { w: u8, wseq: u8, from: u8, ok: bool },
    Roll { w: u8, wseq: u8, to: u8 },
    RollAck { w: u8, wseq: u8, from: u8, ok: bool },
}

impl Msg {
    fn ends(&self) -> (u8, u8) {
        match *self {
            Msg::Frag { w, to, .. } | Msg::Roll { w, to, .. } => (w, to),
            Msg::FragAck { w, from, .. } | Msg::RollAck { w, from, .. } => (from, w),
        }
    }
}

/// A gone writer's part of the ledgers that fence it whole (`ledgers.rs`, `Scan`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
struct Scan {
    fenced: Mask,
    /// Per holder, its fence's change count when read.
    changes: Vec<u8>,
    /// Every stamp the entries name, and the holders that hold it.
    stamps: BTreeMap<Stamp, Mask>,
}

/// A question to the ledgers under way.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Ask {
    /// A Pending write: holders answered, holders read (frozen or rolled back), and
    /// of those holding it.
    Entry { w: u8, wseq: u8, stamp: Stamp, done: Mask, read: Mask, held: Mask },
    /// A fenced-out writer's whole part.
    Scan { w: u8, done: Mask, scan: Scan },
}

/// One node's ordered applier (`Applier` with its `OrderedApply` and `Ledgers`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Applier {
    cursor: Stamp,
    /// Each node's ring as last read.
    views: Vec<Vec<Entry>>,
    /// Fates the order holds at or above the cursor (true: a write).
    known: BTreeMap<Stamp, bool>,
    /// The cursor's epoch's close, once known: (epoch, end sequence).
    close: Option<(u8, u8)>,
    /// Writers the close was taken without (gone then).
    complete_gone: Mask,
    /// Fences as last read, `fences[h][w]`.
    fences: Vec<Vec<Option<Fence>>>,
    scans: Vec<Option<Scan>>,
    ask: Option<Ask>,
    /// The epoch every ring was first seen past (or gone), and the holders whose
    /// fences were read since.
    past: Option<(u8, Mask)>,
    /// Pending stamps seen, and the holders whose fences were read since.
    seen: BTreeMap<Stamp, Mask>,
}

/// One node.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Node {
    up: bool,
    gone: bool,
    // What survives a crash.
    ring: Vec<Entry>,
    /// The ledger's part of each writer.
    ledger: Vec<Part>,
    /// Outcome table by write number - 1.
    outcomes: Vec<Outcome>,
    /// The order's cursor, kept in the ring's header.
    cursor: Stamp,
    // What a crash loses.
    /// The epoch of the leader word it knows.
    epoch: u8,
    hand: Option<Stamp>,
    /// Writes replicating: (number, holders that persisted the fragment).
    writes: Vec<(u8, Mask)>,
    rolling: Vec<Rolling>,
    app: Option<Applier>,
}

/// The whole cluster, with what the properties read.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    /// The sequencer's epoch.
    epoch: u8,
    /// Stamps issued per epoch (index epoch - 1).
    issued: Vec<u8>,
    nodes: Vec<Node>,
    net: BTreeSet<Msg>,
    /// The first fate any node released for each stamp.
    released: BTreeMap<Stamp, bool>,
    /// Two nodes released different fates for a stamp.
    split: bool,
    /// An order was handed two fates for one stamp, or a write past its epoch's close.
    refused: bool,
    /// What the holders' rule decided, any node.
    ruled: BTreeSet<(Stamp, bool)>,
    crashes: u8,
    losses: u8,
    /// Fences of a writer that was up (cut off), `(holder, writer)`: each pair at most
    /// once. A writer that is down is fenced whenever its fence is not whole.
    fenced: BTreeSet<(u8, u8)>,
}

/// A step.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Action {
    Fetch(u8),
    Use(u8),
    Learn(u8),
    NewEpoch,
    Deliver(Msg),
    Lose(Msg),
    Abort(u8, u8),
    Crash(u8, bool),
    Restart(u8),
    Fence(u8, u8),
    Narrow(u8, u8),
    ReadRing(u8, u8),
    ReadFences(u8),
    /// An applier's local steps to a fixpoint (the rest are parts of it).
    Settle(u8),
    AskEntry(u8),
    AskScan(u8, u8),
    AskRead(u8, u8),
    AskFinish(u8),
    GoneRule(u8),
    MarkPast(u8),
    Close(u8),
    Release(u8),
}

impl Config {
    fn all(&self) -> Mask {
        (1 << self.nodes) - 1
    }

    fn applier(&self, cursor: Stamp) -> Applier {
        let n = self.nodes as usize;
        Applier {
            cursor,
            views: vec![Vec::new(); n],
            known: BTreeMap::new(),
            close: None,
            complete_gone: 0,
            fences: vec![vec![None; n]; n],
            scans: vec![None; n],
            ask: None,
            past: None,
            seen: BTreeMap::new(),
        }
    }

    /// `ledgers.rs`, `fenced_out`: no write quorum of `w` forms without one of `fenced`.
    fn fenced_out(&self, w: u8, fenced: Mask) -> bool {
        let others = self.all() & !(1 << w);
        (others & !fenced).count_ones() + 1 < self.quorum
    }

    fn gone(&self, app: &Applier, w: u8) -> bool {
        app.scans[w as usize].as_ref().is_some_and(|s| self.fenced_out(w, s.fenced))
    }

    /// `ledgers.rs`, `gone_since`: gone, and every fence its scan rests on was read
    /// again, unchanged, since (`since`: the holders read since).
    fn gone_since(&self, app: &Applier, w: u8, since: Mask) -> bool {
        let Some(scan) = app.scans[w as usize].as_ref().filter(|s| self.fenced_out(w, s.fenced)) else {
            return false;
        };
        (0..self.nodes).filter(|&h| scan.fenced & (1 << h) != 0).all(|h| {
            since & (1 << h) != 0
                && app.fences[h as usize][w as usize]
                    .is_some_and(|f| f.whole() && f.changes == scan.changes[h as usize])
        })
    }

    /// `ledgers.rs`, `gone_ruling`: the rule on stamp `c` of gone writer `w`, and whether
    /// a ledger named it.
    fn gone_ruling(&self, app: &Applier, w: u8, c: Stamp) -> Option<(Verdict, bool)> {
        if !self.gone(app, w) {
            return None;
        }
        let scan = app.scans[w as usize].as_ref()?;
        Some(match scan.stamps.get(&c) {
            Some(&held) => (holders_rule::verdict(self.quorum, self.all(), w, scan.fenced, held & scan.fenced), true),
            None => (holders_rule::verdict(self.quorum, self.all(), w, scan.fenced, 0), false),
        })
    }

    /// The ring entry of stamp `c` in `views`, and its writer.
    fn find(views: &[Vec<Entry>], c: Stamp) -> Option<(u8, Entry)> {
        views
            .iter()
            .enumerate()
            .find_map(|(w, v)| v.iter().find(|e| e.kind != Kind::Epoch && e.stamp == c).map(|e| (w as u8, *e)))
    }

    /// The newest epoch a ring (as read) has a marker of.
    fn marked(view: &[Entry]) -> u8 {
        view.iter().filter(|e| e.kind == Kind::Epoch).map(|e| e.stamp.0).max().unwrap_or(1)
    }

    /// Every step that changes the state.
    fn step(&self, s: &State, a: &Action) -> Option<State> {
        let mut t = s.clone();
        let q = self.quorum;
        let all = self.all();
        match *a {
            Action::Fetch(w) => {
                let n = &mut t.nodes[w as usize];
                let e = s.epoch;
                let issued = &mut t.issued[e as usize - 1];
                if !n.up
                    || n.hand.is_some()
                    || n.epoch != e
                    || n.outcomes.len() >= self.writes as usize
                    || *issued >= self.stamps
                {
                    return None;
                }
                *issued += 1;
                n.hand = Some((e, *issued));
                if !self.hands {
                    return self.step(&t, &Action::Use(w));
                }
            }
            Action::Use(w) => {
                let n = &mut t.nodes[w as usize];
                let stamp = n.hand.take()?;
                if !n.up || n.epoch != stamp.0 || n.outcomes.len() >= self.writes as usize {
                    return None;
                }
                let wseq = n.outcomes.len() as u8 + 1;
                n.ring.push(Entry { kind: Kind::Pending, stamp, wseq });
                n.outcomes.push(Outcome { stamp, state: WriteState::InProgress, lacking: 0 });
                n.ledger[w as usize].entries[wseq as usize - 1] = Some((stamp, Held::Held));
                n.writes.push((wseq, 1 << w));
                for h in (0..self.nodes).filter(|&h| h != w) {
                    t.net.insert(Msg::Frag { w, wseq, to: h });
                }
            }
            Action::Learn(w) => {
                let n = &mut t.nodes[w as usize];
                if !n.up || n.epoch >= s.epoch {
                    return None;
                }
                if let Some(stamp) = n.hand.take() {
                    n.ring.push(Entry { kind: Kind::Unused, stamp, wseq: 0 });
                }
                n.epoch = s.epoch;
                n.ring.push(Entry { kind: Kind::Epoch, stamp: (s.epoch, 0), wseq: 0 });
            }
            Action::NewEpoch => {
                if s.epoch >= self.epochs {
                    return None;
                }
                t.epoch += 1;
            }
            Action::Deliver(m) => {
                if !t.net.remove(&m) {
                    return None;
                }
                self.deliver(&mut t, m)?;
            }
            Action::Lose(m) => {
                if t.losses >= self.losses || !matches!(m, Msg::Frag { .. } | Msg::FragAck { .. }) || !t.net.remove(&m)
                {
                    return None;
                }
                t.losses += 1;
            }
            Action::Abort(w, wseq) => {
                let n = &mut t.nodes[w as usize];
                let i = n.writes.iter().position(|x| x.0 == wseq)?;
                n.writes.remove(i);
                let o = &mut n.outcomes[wseq as usize - 1];
                o.state = WriteState::Aborted;
                let (stamp, lacking) = (o.stamp, o.lacking);
                // settle_own: its own ledger's record rolled back.
                n.ledger[w as usize].entries[wseq as usize - 1] = Some((stamp, Held::RolledBack));
                for h in (0..self.nodes).filter(|&h| h != w) {
                    t.net.insert(Msg::Roll { w, wseq, to: h });
                }
                let n = &mut t.nodes[w as usize];
                if holders_rule::rollback_settled(q, all, w, lacking) {
                    settle(&mut n.ring, stamp, Kind::Aborted);
                } else {
                    n.rolling.push(Rolling { wseq, lacking, fenced: 0 });
                }
            }
            Action::Crash(x, for_good) => {
                let gone_already = s.nodes.iter().any(|n| n.gone);
                let n = &mut t.nodes[x as usize];
                if !n.up
                    || !self.crashable.contains(&x)
                    || (!for_good && !self.comes_back)
                    || s.crashes >= self.crashes
                    || (for_good && (gone_already || !self.may_go.contains(&x)))
                {
                    return None;
                }
                n.up = false;
                n.gone = for_good;
                n.hand = None;
                n.writes.clear();
                n.rolling.clear();
                n.app = None;
                t.crashes += 1;
                t.net.retain(|m| {
                    let (from, to) = m.ends();
                    from != x && to != x
                });
            }
            Action::Restart(x) => {
                if s.nodes[x as usize].up || s.nodes[x as usize].gone {
                    return None;
                }
                self.restart(&mut t, x);
            }
            Action::Fence(h, w) => {
                let fence = s.nodes[h as usize].ledger[w as usize].fence;
                if !s.nodes[h as usize].up
                    || h == w
                    || !self.writers.contains(&w)
                    || fence.is_some_and(|f| f.whole())
                    || (s.nodes[w as usize].up && (!self.partitions || s.fenced.contains(&(h, w))))
                {
                    return None;
                }
                if s.nodes[w as usize].up {
                    t.fenced.insert((h, w));
                }
                let changes = fence.map_or(1, |f| f.changes + 1);
                t.nodes[h as usize].ledger[w as usize].fence = Some(Fence { below: WHOLE, changes });
            }
            Action::Narrow(h, w) => {
                let fence = s.nodes[h as usize].ledger[w as usize].fence?;
                if !s.nodes[h as usize].up || !s.nodes[w as usize].up || !fence.whole() {
                    return None;
                }
                let below = s.nodes[w as usize].outcomes.len() as u8 + 1;
                t.nodes[h as usize].ledger[w as usize].fence = Some(Fence { below, changes: fence.changes + 1 });
            }
            Action::ReadRing(x, w) => {
                let ring = s.nodes[w as usize].ring.clone();
                let app = self.app(&mut t, x)?;
                if !(x == w || s.nodes[w as usize].up) || app.views[w as usize] == ring {
                    return None;
                }
                let mut refused = false;
                for e in &ring {
                    if e.stamp < app.cursor || e.kind == Kind::Epoch {
                        continue;
                    }
                    match e.kind {
                        Kind::Pending => {
                            app.seen.entry(e.stamp).or_insert(0);
                        }
                        Kind::Committed | Kind::Aborted | Kind::Unused => {
                            refused |= resolve(app, e.stamp, e.kind == Kind::Committed);
                            app.seen.remove(&e.stamp);
                        }
                        Kind::Epoch => {}
                    }
                }
                app.views[w as usize] = ring;
                t.refused |= refused;
            }
            Action::ReadFences(x) => {
                let app = self.app(&mut t, x)?;
                for h in (0..self.nodes).filter(|&h| h == x || s.nodes[h as usize].up) {
                    let slots: Vec<Option<Fence>> = s.nodes[h as usize].ledger.iter().map(|p| p.fence).collect();
                    self.take_slots(app, h, slots);
                }
            }
            Action::Settle(x) => t = self.settle_local(t, x),
            Action::AskEntry(x) => {
                let app = self.app(&mut t, x)?;
                let c = app.cursor;
                if app.ask.is_some() || app.known.contains_key(&c) {
                    return None;
                }
                let (w, e) = Self::find(&app.views, c).filter(|(_, e)| e.kind == Kind::Pending)?;
                let fenced_anywhere = app.fences.iter().any(|f| f[w as usize].is_some());
                if !fenced_anywhere || self.gone(app, w) {
                    return None;
                }
                app.ask = Some(Ask::Entry { w, wseq: e.wseq, stamp: c, done: 1 << w, read: 0, held: 0 });
            }
            Action::AskScan(x, w) => {
                let app = self.app(&mut t, x)?;
                if app.ask.is_some() || w == x || !self.writers.contains(&w) {
                    return None;
                }
                // `wants_scan`: fenced out as last read, and no scan, or one that read
                // fewer of the holders fencing it.
                let whole = (0..self.nodes)
                    .filter(|&h| h != w && app.fences[h as usize][w as usize].is_some_and(|f| f.whole()))
                    .fold(0, |m, h| m | 1 << h);
                let wants = self.fenced_out(w, whole)
                    && app.scans[w as usize].as_ref().is_none_or(|sc| whole & !sc.fenced != 0);
                if !wants {
                    return None;
                }
                let scan = Scan { changes: vec![0; self.nodes as usize], ..Scan::default() };
                app.ask = Some(Ask::Scan { w, done: 1 << w, scan });
            }
            Action::AskRead(x, h) => {
                if !(x == h || s.nodes[h as usize].up) {
                    return None;
                }
                let holder = &s.nodes[h as usize];
                let slots: Vec<Option<Fence>> = holder.ledger.iter().map(|p| p.fence).collect();
                let app = self.app(&mut t, x)?;
                match app.ask.as_mut()? {
                    Ask::Entry { w, wseq, stamp, done, read, held } => {
                        if *done & (1 << h) != 0 {
                            return None;
                        }
                        *done |= 1 << h;
                        let part = &holder.ledger[*w as usize];
                        let entry = part.entries[*wseq as usize - 1].filter(|e| e.0 == *stamp);
                        let frozen = part.fence.is_some_and(|f| f.freezes(*wseq));
                        let rolled = entry.is_some_and(|e| e.1 == Held::RolledBack);
                        if frozen || rolled {
                            *read |= 1 << h;
                            if entry.is_some_and(|e| e.1 == Held::Held) {
                                *held |= 1 << h;
                            }
                        }
                    }
                    Ask::Scan { w, done, scan } => {
                        if *done & (1 << h) != 0 {
                            return None;
                        }
                        *done |= 1 << h;
                        let part = &holder.ledger[*w as usize];
                        if let Some(f) = part.fence.filter(|f| f.whole()) {
                            scan.fenced |= 1 << h;
                            scan.changes[h as usize] = f.changes;
                            for &(stamp, state) in part.entries.iter().flatten() {
                                *scan.stamps.entry(stamp).or_insert(0) |= if state == Held::Held { 1 << h } else { 0 };
                            }
                        }
                    }
                }
                // Slots read for a question tell the fences too.
                self.take_slots(app, h, slots);
            }
            Action::AskFinish(x) => {
                let up = (0..self.nodes).filter(|&h| h == x || s.nodes[h as usize].up).fold(0, |m, h| m | 1 << h);
                let app = self.app(&mut t, x)?;
                // Finished once every holder up answered: one that is down counts
                // unread (the give-up period).
                let done = match app.ask.as_ref()? {
                    Ask::Entry { done, .. } | Ask::Scan { done, .. } => *done,
                };
                if up & !done != 0 {
                    return None;
                }
                match app.ask.take()? {
                    Ask::Entry { w, stamp, read, held, .. } => match holders_rule::verdict(q, all, w, read, held) {
                        Verdict::Write => self.rule(&mut t, x, w, stamp, true),
                        Verdict::NoOp => self.rule(&mut t, x, w, stamp, false),
                        Verdict::Undecided => {}
                    },
                    Ask::Scan { w, scan, .. } => app.scans[w as usize] = Some(scan),
                }
            }
            Action::GoneRule(x) => {
                let app = self.app(&mut t, x)?;
                let c = app.cursor;
                if app.known.contains_key(&c) {
                    return None;
                }
                let (w, _) = Self::find(&app.views, c).filter(|(_, e)| e.kind == Kind::Pending)?;
                let since = *app.seen.get(&c)?;
                if !self.gone_since(app, w, since) {
                    return None;
                }
                match self.gone_ruling(app, w, c)? {
                    (Verdict::Write, true) => self.rule(&mut t, x, w, c, true),
                    (Verdict::NoOp, _) => self.rule(&mut t, x, w, c, false),
                    _ => return None,
                }
            }
            Action::MarkPast(x) => {
                let app = self.app(&mut t, x)?;
                let e = app.cursor.0;
                if app.close.is_some() {
                    return None;
                }
                // The rings of nodes that take no stamps (not modelled) show the marker
                // of each epoch as soon as there is one.
                let past = e < s.epoch
                    && self.writers.iter().all(|&w| Self::marked(&app.views[w as usize]) > e || self.gone(app, w));
                match (past, app.past) {
                    (true, Some((pe, _))) if pe == e => return None,
                    (true, _) => app.past = Some((e, 0)),
                    (false, None) => return None,
                    (false, Some(_)) => app.past = None,
                }
            }
            Action::Close(x) => {
                let app = self.app(&mut t, x)?;
                let e = app.cursor.0;
                let (pe, since) = app.past?;
                if app.close.is_some() || pe != e {
                    return None;
                }
                let confirmed = self
                    .writers
                    .iter()
                    .all(|&w| Self::marked(&app.views[w as usize]) > e || self.gone_since(app, w, since));
                if !confirmed {
                    return None;
                }
                let recorded = app.views.iter().flatten().filter(|x| x.kind != Kind::Epoch && x.stamp.0 == e);
                let scanned = (0..self.nodes)
                    .filter(|&w| self.gone(app, w))
                    .flat_map(|w| app.scans[w as usize].iter().flat_map(|s| s.stamps.keys().copied()))
                    .filter(|st| st.0 == e);
                let end = recorded.map(|x| x.stamp.1 + 1).chain(scanned.map(|st| st.1 + 1)).fold(app.cursor.1, u8::max);
                // `close_epoch`: a write at or past the close is refused.
                if app.known.iter().any(|(st, &write)| write && st.0 == e && st.1 >= end) {
                    t.refused = true;
                }
                let app = self.app(&mut t, x)?;
                app.known.retain(|st, _| !(st.0 == e && st.1 >= end));
                app.close = Some((e, end));
                app.complete_gone = self
                    .writers
                    .iter()
                    .filter(|&&w| Self::marked(&app.views[w as usize]) <= e)
                    .fold(0, |m, &w| m | 1 << w);
            }
            Action::Release(x) => {
                let app = self.app(&mut t, x)?;
                let c = app.cursor;
                if let Some((e, end)) = app.close.filter(|&(e, end)| e == c.0 && c.1 >= end) {
                    let _ = end;
                    app.cursor = (e + 1, 1);
                    app.close = None;
                    app.past = None;
                    app.known.retain(|st, _| st.0 > e);
                    app.seen.retain(|st, _| st.0 > e);
                    t.nodes[x as usize].cursor = (e + 1, 1);
                    return Some(t);
                }
                let fate = match app.known.get(&c) {
                    Some(&f) => f,
                    None => {
                        let (e, end) = app.close?;
                        let pending = Self::find(&app.views, c).is_some_and(|(_, en)| en.kind == Kind::Pending);
                        if e != c.0 || c.1 >= end || pending {
                            return None;
                        }
                        let write = self.gone_fate(app, c)?;
                        if write {
                            t.ruled.insert((c, true));
                        }
                        write
                    }
                };
                let app = self.app(&mut t, x)?;
                app.known.remove(&c);
                app.seen.remove(&c);
                app.cursor = (c.0, c.1 + 1);
                t.nodes[x as usize].cursor = (c.0, c.1 + 1);
                match t.released.get(&c) {
                    Some(&had) if had != fate => t.split = true,
                    Some(_) => {}
                    None => {
                        t.released.insert(c, fate);
                    }
                }
            }
        }
        if let Action::ReadRing(x, _) | Action::ReadFences(x) | Action::AskRead(x, _) = *a {
            t = self.settle_local(t, x);
        }
        (t != *s).then_some(t)
    }

    /// What an applier's poll does without reading anything: every local step, in the
    /// poll's order, until none changes anything. Every read an applier makes is
    /// followed by it (the poll that made the read goes on), so the model holds no
    /// applier state between a read and what the poll does with it.
    fn settle_local(&self, mut t: State, x: u8) -> State {
        let mut local = vec![Action::AskFinish(x), Action::GoneRule(x)];
        local.extend(self.writers.iter().map(|&w| Action::AskScan(x, w)));
        local.extend([Action::AskEntry(x), Action::MarkPast(x), Action::Close(x), Action::Release(x)]);
        // Bounded: a question that no holder up can answer finishes at once, undecided,
        // and would be asked again.
        for _ in 0..16 {
            let mut changed = false;
            for a in &local {
                if let Some(next) = self.step(&t, a) {
                    t = next;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        t
    }

    /// The applier of node `x`, if it runs one and is up.
    fn app<'a>(&self, t: &'a mut State, x: u8) -> Option<&'a mut Applier> {
        t.nodes[x as usize].app.as_mut()
    }

    /// Fence slots of holder `h` read by an applier: the view, the "read since" marks,
    /// and the scans whose fences changed dropped (`check_scans`).
    fn take_slots(&self, app: &mut Applier, h: u8, slots: Vec<Option<Fence>>) {
        app.fences[h as usize] = slots;
        if let Some((_, since)) = app.past.as_mut() {
            *since |= 1 << h;
        }
        for since in app.seen.values_mut() {
            *since |= 1 << h;
        }
        for w in 0..self.nodes as usize {
            let Some(scan) = app.scans[w].as_ref() else { continue };
            let changed = (0..self.nodes as usize).any(|h| {
                scan.fenced & (1 << h) != 0
                    && !app.fences[h][w].is_some_and(|f| f.whole() && f.changes == scan.changes[h])
            });
            if changed {
                app.scans[w] = None;
            }
        }
    }

    /// `apply.rs`, `gone_fate`: the fate of unrecorded stamp `c` of a closed epoch.
    fn gone_fate(&self, app: &Applier, c: Stamp) -> Option<bool> {
        let back = self.writers.iter().any(|&w| {
            app.complete_gone & (1 << w) != 0 && !self.gone(app, w) && Self::marked(&app.views[w as usize]) <= c.0
        });
        if back {
            return None;
        }
        for &w in &self.writers {
            match self.gone_ruling(app, w, c) {
                None | Some((Verdict::NoOp, _)) => {}
                Some((Verdict::Undecided, _)) | Some((Verdict::Write, false)) => return None,
                Some((Verdict::Write, true)) => return Some(true),
            }
        }
        Some(false)
    }

    /// `apply.rs`, `rule`: node `x`'s order takes what the ledgers decided of writer
    /// `w`'s stamp, and `w`'s own ring takes it (`take_ordered_fate`).
    fn rule(&self, t: &mut State, x: u8, w: u8, stamp: Stamp, write: bool) {
        t.ruled.insert((stamp, write));
        let app = t.nodes[x as usize].app.as_mut().expect("an applier rules");
        if stamp < app.cursor {
            return;
        }
        if resolve(app, stamp, write) {
            t.refused = true;
            return;
        }
        app.seen.remove(&stamp);
        if x == w {
            let n = &mut t.nodes[w as usize];
            if let Some(e) = n.ring.iter().find(|e| e.stamp == stamp && e.kind != Kind::Epoch) {
                let wseq = e.wseq;
                n.rolling.retain(|r| r.wseq != wseq);
            }
            settle(&mut n.ring, stamp, if write { Kind::Committed } else { Kind::Aborted });
        }
    }

    fn deliver(&self, t: &mut State, m: Msg) -> Option<()> {
        let (q, all) = (self.quorum, self.all());
        match m {
            Msg::Frag { w, wseq, to } => {
                if !t.nodes[to as usize].up {
                    return None;
                }
                let stamp = t.nodes[w as usize].outcomes[wseq as usize - 1].stamp;
                let part = &mut t.nodes[to as usize].ledger[w as usize];
                let ok = !part.fence.is_some_and(|f| f.freezes(wseq));
                if ok {
                    let e = &mut part.entries[wseq as usize - 1];
                    if e.is_none() {
                        *e = Some((stamp, Held::Held));
                    }
                }
                t.net.insert(Msg::FragAck { w, wseq, from: to, ok });
            }
            Msg::FragAck { w, wseq, from, ok } => {
                let n = &mut t.nodes[w as usize];
                if !n.up {
                    return None;
                }
                let Some(i) = n.writes.iter().position(|x| x.0 == wseq) else { return Some(()) };
                if ok {
                    n.writes[i].1 |= 1 << from;
                    if n.writes[i].1.count_ones() >= q {
                        n.writes.remove(i);
                        let o = &mut n.outcomes[wseq as usize - 1];
                        o.state = WriteState::Committed;
                        let stamp = o.stamp;
                        settle(&mut n.ring, stamp, Kind::Committed);
                    }
                }
            }
            Msg::Roll { w, wseq, to } => {
                if !t.nodes[to as usize].up {
                    return None;
                }
                let stamp = t.nodes[w as usize].outcomes[wseq as usize - 1].stamp;
                let part = &mut t.nodes[to as usize].ledger[w as usize];
                let e = &mut part.entries[wseq as usize - 1];
                let frozen_held = part.fence.is_some_and(|f| f.freezes(wseq)) && e.is_some_and(|x| x.1 == Held::Held);
                if !frozen_held {
                    *e = Some((stamp, Held::RolledBack));
                }
                t.net.insert(Msg::RollAck { w, wseq, from: to, ok: !frozen_held });
            }
            Msg::RollAck { w, wseq, from, ok } => {
                let n = &mut t.nodes[w as usize];
                if !n.up {
                    return None;
                }
                if ok {
                    n.outcomes[wseq as usize - 1].lacking |= 1 << from;
                }
                let stamp = n.outcomes[wseq as usize - 1].stamp;
                let Some(i) = n.rolling.iter().position(|r| r.wseq == wseq) else { return Some(()) };
                if !ok {
                    n.rolling[i].fenced |= 1 << from;
                    return Some(());
                }
                n.rolling[i].lacking |= 1 << from;
                if holders_rule::rollback_settled(q, all, w, n.rolling[i].lacking) {
                    n.rolling.remove(i);
                    settle(&mut n.ring, stamp, Kind::Aborted);
                }
            }
        }
        Some(())
    }

    /// Node `x` starts again with its files: `recover_outcomes`, `recover_fates`, its
    /// epoch's marker, a fresh applier at its cursor, and the resyncs that resend the
    /// rollbacks waiting (its own to every holder up, and every writer's to it).
    fn restart(&self, t: &mut State, x: u8) {
        let (q, all, epoch) = (self.quorum, self.all(), t.epoch);
        let n = &mut t.nodes[x as usize];
        n.up = true;
        n.epoch = epoch;
        for (i, o) in n.outcomes.iter_mut().enumerate() {
            if o.state == WriteState::InProgress {
                o.state = WriteState::Aborted;
                n.ledger[x as usize].entries[i] = Some((o.stamp, Held::RolledBack));
            }
        }
        let pending: Vec<Entry> = n.ring.iter().filter(|e| e.kind == Kind::Pending).copied().collect();
        for e in pending {
            let o = n.outcomes[e.wseq as usize - 1];
            match o.state {
                WriteState::Committed => {
                    settle(&mut n.ring, e.stamp, Kind::Committed);
                }
                _ if holders_rule::rollback_settled(q, all, x, o.lacking) => {
                    settle(&mut n.ring, e.stamp, Kind::Aborted);
                }
                _ => n.rolling.push(Rolling { wseq: e.wseq, lacking: o.lacking, fenced: 0 }),
            }
        }
        if Self::marked(&n.ring) < epoch {
            n.ring.push(Entry { kind: Kind::Epoch, stamp: (epoch, 0), wseq: 0 });
        }
        if self.appliers.contains(&x) {
            n.app = Some(self.applier(n.cursor));
        }
        let ups: Vec<bool> = t.nodes.iter().map(|n| n.up).collect();
        for w in 0..self.nodes {
            if !ups[w as usize] {
                continue;
            }
            for r in t.nodes[w as usize].rolling.clone() {
                for h in (0..self.nodes).filter(|&h| h != w && ups[h as usize] && (w == x || h == x)) {
                    if (r.lacking | r.fenced) & (1 << h) == 0 {
                        t.net.insert(Msg::Roll { w, wseq: r.wseq, to: h });
                    }
                }
            }
        }
    }

    /// The stamp every live applier's order must have passed in a terminal state:
    /// every stamp of the epochs before the last, and of the last each one a ring of
    /// a writer that is not gone records, up to the first it does not.
    fn drained(&self, s: &State) -> bool {
        let last = s.epoch;
        let recorded = |seq: u8| {
            s.nodes.iter().any(|n| !n.gone && n.ring.iter().any(|e| e.kind != Kind::Epoch && e.stamp == (last, seq)))
        };
        let mut target = (last, 1);
        while recorded(target.1) {
            target.1 += 1;
        }
        s.nodes.iter().all(|n| n.app.as_ref().is_none_or(|a| a.cursor >= target))
    }

    fn candidates(&self, s: &State, out: &mut Vec<Action>) {
        out.push(Action::NewEpoch);
        for &w in &self.writers {
            out.push(Action::Fetch(w));
            out.push(Action::Use(w));
            out.push(Action::Learn(w));
            for &(wseq, _) in &s.nodes[w as usize].writes {
                out.push(Action::Abort(w, wseq));
            }
        }
        for &m in &s.net {
            out.push(Action::Deliver(m));
            out.push(Action::Lose(m));
        }
        for x in 0..self.nodes {
            out.push(Action::Crash(x, false));
            out.push(Action::Crash(x, true));
            out.push(Action::Restart(x));
            for &w in &self.writers {
                out.push(Action::Fence(x, w));
                out.push(Action::Narrow(x, w));
            }
        }
        for &x in &self.appliers {
            if s.nodes[x as usize].app.is_none() {
                continue;
            }
            for &w in &self.writers {
                out.push(Action::ReadRing(x, w));
            }
            out.push(Action::ReadFences(x));
            for h in 0..self.nodes {
                out.push(Action::AskRead(x, h));
            }
            out.push(Action::Settle(x));
        }
    }
}

/// Settles ring entry `stamp` from Pending to `kind`: whether it was Pending.
fn settle(ring: &mut [Entry], stamp: Stamp, kind: Kind) -> bool {
    match ring.iter_mut().find(|e| e.stamp == stamp && e.kind == Kind::Pending) {
        Some(e) => {
            e.kind = kind;
            true
        }
        None => false,
    }
}

/// Hands the order a fate: true if it contradicts one it holds (refused).
fn resolve(app: &mut Applier, stamp: Stamp, write: bool) -> bool {
    if stamp < app.cursor {
        return false;
    }
    if app.close.is_some_and(|(e, end)| stamp.0 == e && stamp.1 >= end) {
        return write;
    }
    match app.known.get(&stamp) {
        Some(&had) => had != write,
        None => {
            app.known.insert(stamp, write);
            false
        }
    }
}

/// The fate a writer's ring records for `stamp`, if final.
fn ring_fate(s: &State, stamp: Stamp) -> Option<Kind> {
    s.nodes.iter().flat_map(|n| n.ring.iter()).find(|e| e.stamp == stamp && e.kind != Kind::Epoch).map(|e| e.kind)
}

impl Model for Config {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let n = self.nodes as usize;
        let nodes = (0..self.nodes)
            .map(|x| Node {
                up: true,
                gone: false,
                ring: Vec::new(),
                ledger: vec![Part { entries: vec![None; self.writes as usize], fence: None }; n],
                outcomes: Vec::new(),
                cursor: (1, 1),
                epoch: 1,
                hand: None,
                writes: Vec::new(),
                rolling: Vec::new(),
                app: self.appliers.contains(&x).then(|| self.applier((1, 1))),
            })
            .collect();
        vec![State {
            epoch: 1,
            issued: vec![0; self.epochs as usize],
            nodes,
            net: BTreeSet::new(),
            released: BTreeMap::new(),
            split: false,
            refused: false,
            ruled: BTreeSet::new(),
            crashes: 0,
            losses: 0,
            fenced: BTreeSet::new(),
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        // Every candidate: a step that is not enabled, or changes nothing, has no next
        // state.
        self.candidates(s, actions);
    }

    fn next_state(&self, s: &State, a: Action) -> Option<State> {
        self.step(s, &a)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("no two nodes release different fates for a stamp", |_, s: &State| !s.split),
            Property::always("no order is handed two fates for a stamp", |_, s: &State| !s.refused),
            Property::always(
                "a ring's Committed is never released a no-op, its Aborted never a write",
                |_, s: &State| {
                    s.released.iter().all(|(&st, &write)| match ring_fate(s, st) {
                        Some(Kind::Committed) => write,
                        Some(Kind::Aborted | Kind::Unused) => !write,
                        _ => true,
                    })
                },
            ),
            Property::always("a write its writer recorded Committed is never released a no-op", |_, s: &State| {
                s.nodes
                    .iter()
                    .flat_map(|n| n.outcomes.iter())
                    .all(|o| o.state != WriteState::Committed || s.released.get(&o.stamp).is_none_or(|&write| write))
            }),
            Property::always("the holders' rule never takes a stamp recorded Aborted for a write", |_, s: &State| {
                s.ruled.iter().all(|&(st, write)| !write || ring_fate(s, st) != Some(Kind::Aborted))
                    && s.ruled.iter().all(|&(st, write)| !s.ruled.contains(&(st, !write)))
            }),
            Property::always("no order is stuck once nothing is left to do", |m: &Config, s: &State| {
                !m.liveness || m.drained(s) || {
                    let mut next = Vec::new();
                    m.candidates(s, &mut next);
                    next.iter().any(|a| m.step(s, a).is_some())
                }
            }),
            Property::sometimes("a stamp is decided by the holders' rule", |_, s: &State| !s.ruled.is_empty()),
        ]
    }
}

/// Explores `config` to the end and fails on any property's counterexample; the
/// states explored and the time taken.
fn check(name: &str, config: Config) -> usize {
    let started = Instant::now();
    let mut builder = config.checker();
    if let Some(n) = std::env::var("ORDER_MODEL_MAX_STATES").ok().and_then(|v| v.parse().ok()) {
        builder = builder.target_state_count(n);
    }
    let checker = builder.spawn_bfs().join();
    let states = checker.unique_state_count();
    println!(
        "{name}: {states} states ({} generated, depth {}) in {:.1?}",
        checker.state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    for (prop, path) in checker.discoveries() {
        if prop != "a stamp is decided by the holders' rule" {
            println!("counterexample for {prop:?}:");
            for action in path.into_actions() {
                println!("  {action:?}");
            }
        }
    }
    let ruled = checker.discovery("a stamp is decided by the holders' rule").is_some();
    println!("{name}: some stamp decided by the holders' rule: {ruled}");
    checker.assert_no_discovery("no two nodes release different fates for a stamp");
    checker.assert_no_discovery("no order is handed two fates for a stamp");
    checker.assert_no_discovery("a ring's Committed is never released a no-op, its Aborted never a write");
    checker.assert_no_discovery("a write its writer recorded Committed is never released a no-op");
    checker.assert_no_discovery("the holders' rule never takes a stamp recorded Aborted for a write");
    checker.assert_no_discovery("no order is stuck once nothing is left to do");
    states
}

/// Three nodes, quorum 2, one writer (node 0) of one write per epoch over two epochs,
/// every write to every node; appliers at `appliers`; node 0 crashes at most once,
/// coming back (`comes_back`) or gone for good (`may_go`).
fn three_nodes(appliers: Vec<u8>, comes_back: bool, may_go: Vec<u8>, hands: bool) -> Config {
    Config {
        nodes: 3,
        quorum: 2,
        writers: vec![0],
        appliers,
        writes: 1,
        stamps: 1,
        epochs: 2,
        crashes: 1,
        crashable: vec![0],
        comes_back,
        may_go,
        losses: 0,
        partitions: false,
        liveness: true,
        hands,
    }
}

/// The writer gone for good at any point, stamps waiting in its hand: the holders
/// fence it, the applier at node 1 scans their ledgers and decides its stamps and the
/// epoch's close without its ring, and the writer's own applier (while it lives)
/// releases the same order.
#[test]
fn a_writer_gone_for_good() {
    let states = check("writer gone for good", three_nodes(vec![0, 1], false, vec![0], true));
    assert!(states > 1000, "the model explored too little: {states}");
}

/// The writer crashes and comes back: its restart settles what it left Pending, the
/// holders narrow their fences, and the writer's own applier takes the ledgers'
/// decisions into its ring.
#[test]
fn a_writer_that_comes_back() {
    let states = check("writer comes back", three_nodes(vec![0], true, vec![], false));
    assert!(states > 1000, "the model explored too little: {states}");
}

/// The comes-back run with a second applier and stamps waiting in the writer's hand:
/// more than ten minutes in the dev profile (not seen to finish), so only on demand
/// (`-- --ignored`, better in release).
#[test]
#[ignore = "more than ten minutes in the dev profile: run on demand with -- --ignored, in release"]
fn a_writer_that_comes_back_two_appliers() {
    check("writer comes back, two appliers", three_nodes(vec![0, 1], true, vec![], true));
}
