//! Reading the holders' stamp ledgers to decide a fenced writer's stamps by the
//! holders' rule: the applier's half of `fence.rs` (`ordering = "sequencer"`).
//!
//! A writer's stamps are decided by its fate ring. When its ring cannot decide one in
//! time (the order has stood at it for `dead_after`), and holders have fenced the
//! writer, the applier asks the ledgers instead ([`Ledgers`], driven by `apply.rs`):
//! - **A Pending write** of the ring ([`Question::Entry`]): every storage node's ledger
//!   entry of that write and its fence of the writer. A holder whose fence covers the
//!   write, or whose entry is a rollback (rollbacks are never undone), says what it
//!   will always say; the rule decides from those (`cluster/holders_rule.rs`), or waits.
//! - **A writer gone** ([`Question::Scan`]): once enough holders fence every write of
//!   it that no write quorum of it can form without one of them, it can commit nothing
//!   more, and those ledgers hold every write of it that may have committed. The
//!   applier READs the writer's whole part of each, and from then on takes the ring as
//!   past every epoch: a stamp of the writer that a ledger holds is decided by the
//!   rule, one no ledger holds is a no-op (the rule says so of a stamp of unknown key
//!   with too few holders left unread). The scan holds as long as those fences do; a
//!   fence that changed (the writer connected again) drops it.
//!
//! Every fence is READ before and after the entries: a fence the same both times (its
//! change count included) was in place while they were read, so they are what that
//! ledger will always say of the writes it covers. A node's own ledger is read in place.
#![forbid(unsafe_code)]

use std::collections::HashMap;

use crate::cluster::format::ledger::{
    Fence, Ledger, LedgerEntry, LedgerState, ENTRIES_AT, ENTRY_LEN, FENCES_AT, FENCES_LEN, FENCE_LEN,
};
use crate::cluster::holders_rule::{self, Verdict};
use crate::cluster::placement::{mask_of, Placement};
use crate::fabric::RemoteRegion;
use crate::limits::{LEDGER_SCAN_ENTRIES, NODES_MAX};

/// What the ledgers are asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Question {
    /// Writer `w`'s Pending write of stamp `stamp`, number `write_seq` (mod 2^24, as
    /// its ring records it).
    Entry {
        /// The writer.
        w: u8,
        /// The write's number mod 2^24.
        write_seq: u32,
        /// Its stamp (`version << 8 | w`).
        stamp: u64,
        /// Its key.
        key_hash: u64,
        /// It deletes the key.
        tombstone: bool,
    },
    /// Every write of writer `w` (it is gone).
    Scan {
        /// The writer.
        w: u8,
    },
}

/// One READ of a peer's ledger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Every fence slot (bytes [`FENCES_AT`].. of the ledger): alone, or before a
    /// question's entries.
    Slots,
    /// A question's entries: `k` of writer `w`'s from entry index `from`.
    Entries {
        /// The first entry index (of `w`'s part).
        from: u64,
        /// How many.
        k: u64,
    },
    /// The fence slots again, after the entries.
    After,
}

/// What a gone writer's scan says of one of its stamps: the verdict, the stamp's key
/// (and whether it deletes it) if a ledger named it, and the holders read holding it.
pub type Ruling = (Verdict, Option<(u64, bool)>, u32);

/// A stamp the ledgers decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ruled {
    /// The stamp's version.
    pub version: u64,
    /// Its writer.
    pub w: u8,
    /// Its key and whether it deletes it (a write's), if a ledger named them.
    pub key: Option<(u64, bool)>,
    /// Write or no-op.
    pub write: bool,
    /// The holders whose ledgers were read holding its fragment (0: not known).
    pub held: u32,
}

/// What one peer has answered of the question under way.
#[derive(Clone, Debug, Default)]
struct Job {
    /// The next READ to post (`None`: nothing more).
    next: Option<Step>,
    /// The READ in flight for this job, if any: a completion of any other (a READ
    /// posted for an earlier question, which finished without it) is not this job's.
    in_flight: Option<Step>,
    /// The writer's fence slot as read before the entries.
    before: Option<Result<Option<Fence>, ()>>,
    /// The entries read (of the question's writer).
    entries: Vec<LedgerEntry>,
    /// Done, the fence the same after as before: the entries stand.
    stable: bool,
    /// Entries per writer in its ledger.
    entries_per: u64,
}

/// A question under way.
#[derive(Debug)]
struct Ask {
    q: Question,
    jobs: Vec<Job>,
    /// When it was asked, or a READ of it last came back.
    progress_ns: u64,
}

/// What a fenced holder's ledger said of one stamp of a gone writer.
#[derive(Clone, Copy, Debug, Default)]
struct Seen {
    key_hash: u64,
    tombstone: bool,
    /// Holders whose entry is Held.
    held: u32,
}

/// A gone writer's part of the ledgers that fence it whole.
#[derive(Debug)]
struct Scan {
    /// The holders read, each fencing every write of the writer throughout.
    fenced: u32,
    /// Their fences' change counts then.
    changes: [u32; NODES_MAX],
    /// Every stamp their entries name.
    stamps: HashMap<u64, Seen>,
}

/// The ledgers as the applier reads them (see the module doc).
#[derive(Debug)]
pub struct Ledgers {
    me: u8,
    rule_after_ns: u64,
    n: usize,
    quorum: u32,
    fragments: usize,
    placement: Placement,
    /// Per node `h`, its fences of every writer as last read (`fences[h][w]`).
    fences: Vec<[Option<Fence>; NODES_MAX]>,
    /// Per node: when its fence slots were last read (a READ completed, or this node's
    /// own read in place).
    slots_ns: Vec<u64>,
    /// Per peer: a READ of its slots alone is wanted, or in flight.
    slots_wanted: Vec<bool>,
    slots_in_flight: Vec<bool>,
    ask: Option<Ask>,
    scans: Vec<Option<Scan>>,
    /// Decisions made, for the applier to take.
    ruled: Vec<Ruled>,
    /// Questions asked and scans taken.
    pub asked: u64,
    /// Scans of a gone writer's part of the ledgers completed.
    pub scans_done: u64,
}

impl Ledgers {
    /// The ledgers of a cluster of `n` nodes placed by `placement`, as node `me` reads
    /// them; `quorum` of the write's `fragments` holders commit a write. They are asked
    /// once an order has stood `rule_after_ns`.
    pub fn new(me: u8, n: usize, quorum: u32, fragments: usize, placement: Placement, rule_after_ns: u64) -> Self {
        Self {
            me,
            rule_after_ns,
            n,
            quorum,
            fragments,
            placement,
            fences: vec![[None; NODES_MAX]; n],
            slots_ns: vec![0; n],
            slots_wanted: vec![false; n],
            slots_in_flight: vec![false; n],
            ask: None,
            scans: (0..n).map(|_| None).collect(),
            ruled: Vec::new(),
            asked: 0,
            scans_done: 0,
        }
    }

    /// Reads this node's own fences in place, and asks every peer's slots (posted as
    /// their links allow).
    pub fn refresh(&mut self, own: Option<&Ledger>, now_ns: u64) {
        self.read_own_fences(own, now_ns);
        for (h, wanted) in self.slots_wanted.iter_mut().enumerate() {
            *wanted = h != self.me as usize;
        }
        self.check_scans();
    }

    /// While a scan is held: reads this node's own fences in place (a memory read),
    /// and drops a scan one of them no longer supports. A writer that connects again
    /// narrows this node's fence at once, and a scan that outlived it would let the
    /// order settle that writer's stamps from ledgers it is writing to again (seed
    /// 300009: node 3, catching up, never re-read the fences and kept writer 0's scan
    /// after writer 0 came back; its ring's entries of a later epoch, read ahead of
    /// the order's window, were then taken for stamps nobody recorded).
    pub fn watch_own_fences(&mut self, own: Option<&Ledger>, now_ns: u64) {
        if self.scans.iter().any(Option::is_some) && own.is_some() {
            self.read_own_fences(own, now_ns);
            self.check_scans();
        }
    }

    fn read_own_fences(&mut self, own: Option<&Ledger>, now_ns: u64) {
        if let Some(l) = own {
            for w in 0..self.n as u8 {
                self.fences[self.me as usize][w as usize] = l.fence_of(w);
            }
            self.slots_ns[self.me as usize] = now_ns;
        }
    }

    /// How long an order stands before the ledgers are asked.
    pub fn rule_after_ns(&self) -> u64 {
        self.rule_after_ns
    }

    /// Some node fences writer `w` (as last read).
    pub fn fenced_anywhere(&self, w: u8) -> bool {
        self.fences.iter().any(|f| f[w as usize].is_some())
    }

    /// This node fences writer `w`.
    pub fn fenced_here(&self, w: u8) -> bool {
        self.fences[self.me as usize][w as usize].is_some()
    }

    /// Writer `w` can commit nothing more: enough storage nodes fence every write of
    /// it (as last read) that no write quorum of it forms without one of them.
    fn fenced_out(&self, w: u8, fenced: u32) -> bool {
        let others = self.placement.mask() & !(1 << w);
        let unread = (others & !fenced).count_ones();
        unread + u32::from(self.placement.stores(w)) < self.quorum
    }

    /// The storage nodes (not `w`) whose last-read fence covers every write of `w`.
    fn whole_fences(&self, w: u8) -> u32 {
        let others = self.placement.mask() & !(1 << w);
        (0..self.n)
            .filter(|&h| others & (1 << h) != 0 && self.fences[h][w as usize].is_some_and(|f| f.is_whole()))
            .fold(0, |m, h| m | 1 << h)
    }

    /// Writer `w` is gone: a scan of the ledgers that fence it out holds.
    pub fn gone(&self, w: u8) -> bool {
        self.scans[w as usize].as_ref().is_some_and(|s| self.fenced_out(w, s.fenced))
    }

    /// Writer `w` is fenced out (as last read), and no scan is held, or the one held
    /// read fewer of the holders that fence it than fence it now (a stamp it left
    /// undecided may be decided with them).
    pub fn wants_scan(&self, w: u8) -> bool {
        let whole = self.whole_fences(w);
        self.fenced_out(w, whole) && self.scans[w as usize].as_ref().is_none_or(|s| whole & !s.fenced != 0)
    }

    /// Writer `w` is gone, and every fence its scan rests on was read again, unchanged,
    /// at `since_ns` or later. A decision that relies on `w` committing nothing more
    /// must see its fences whole after what it decides about: a fence read before a
    /// writer came back would let a write of it go unseen.
    pub fn gone_since(&self, w: u8, since_ns: u64) -> bool {
        let Some(scan) = self.scans[w as usize].as_ref().filter(|s| self.fenced_out(w, s.fenced)) else {
            return false;
        };
        (0..self.n).filter(|&h| scan.fenced & (1 << h) != 0).all(|h| {
            self.slots_ns[h] >= since_ns
                && self.fences[h][w as usize].is_some_and(|f| f.is_whole() && f.changes == scan.changes[h])
        })
    }

    /// The stamps of gone writer `w` its scan found, for the epochs' ends.
    pub fn scanned(&self, w: u8) -> impl Iterator<Item = u64> + '_ {
        self.scans[w as usize].iter().flat_map(|s| s.stamps.keys().map(|&stamp| stamp >> 8))
    }

    /// Drops the scans whose fences changed since (the writer connected again).
    fn check_scans(&mut self) {
        for w in 0..self.n {
            let Some(scan) = self.scans[w].as_ref() else { continue };
            let changed = (0..self.n).any(|h| {
                scan.fenced & (1 << h) != 0
                    && !self.fences[h][w].is_some_and(|f| f.is_whole() && f.changes == scan.changes[h])
            });
            if changed {
                self.scans[w] = None;
            }
        }
    }

    /// The verdict on stamp `version` of gone writer `w`, and its key if a ledger named
    /// it; `None` if `w` is not gone.
    pub fn gone_verdict(&self, w: u8, version: u64) -> Option<(Verdict, Option<(u64, bool)>)> {
        self.gone_ruling(w, version).map(|(v, key, _)| (v, key))
    }

    /// [`Self::gone_verdict`], with the holders read holding the stamp's fragment.
    pub fn gone_ruling(&self, w: u8, version: u64) -> Option<Ruling> {
        if !self.gone(w) {
            return None;
        }
        let scan = self.scans[w as usize].as_ref()?;
        let stamp = version << 8 | u64::from(w);
        Some(match scan.stamps.get(&stamp) {
            Some(seen) => {
                let holders = self.holders_of(seen.key_hash);
                let held = seen.held & scan.fenced;
                let v = holders_rule::verdict(self.quorum, holders, w, scan.fenced, held);
                (v, Some((seen.key_hash, seen.tombstone)), held)
            }
            None => (holders_rule::verdict(self.quorum, self.placement.mask(), w, scan.fenced, 0), None, 0),
        })
    }

    fn holders_of(&self, key_hash: u64) -> u32 {
        let f = self.fragments.min(self.placement.storage_nodes());
        mask_of(&self.placement.holders(key_hash, f)[..f])
    }

    /// The fences as last read and the scans held (for a failure's message).
    pub fn debug_state(&self) -> String {
        let scans: Vec<String> = (self.scans.iter().enumerate())
            .filter_map(|(w, s)| {
                s.as_ref().map(|s| {
                    format!(
                        "{w}: fenced {:#b}, changes {:?}, {} stamps",
                        s.fenced,
                        &s.changes[..self.n],
                        s.stamps.len()
                    )
                })
            })
            .collect();
        let fences: Vec<String> = (0..self.n)
            .map(|h| {
                format!(
                    "{h}: {:?}",
                    (0..self.n).map(|w| self.fences[h][w].map(|f| (f.frozen_below, f.changes))).collect::<Vec<_>>()
                )
            })
            .collect();
        format!(
            "fences [{}], scans [{}], slots read at {:?}, asking {:?}",
            fences.join("; "),
            scans.join("; "),
            self.slots_ns,
            self.ask.as_ref().map(|a| a.q)
        )
    }

    /// Whether a question is under way.
    pub fn asking(&self) -> bool {
        self.ask.is_some()
    }

    /// Asks `q` of every storage node's ledger (this node's own read in place at once).
    pub fn ask(&mut self, q: Question, own: Option<&Ledger>, now_ns: u64) {
        if self.ask.is_some() {
            return;
        }
        self.asked += 1;
        let w = match q {
            Question::Entry { w, .. } | Question::Scan { w } => w,
        };
        let mut jobs = vec![Job::default(); self.n];
        for (h, job) in jobs.iter_mut().enumerate() {
            if h as u8 == w || !self.placement.stores(h as u8) {
                continue;
            }
            if h as u8 == self.me {
                if let Some(l) = own {
                    self.fences[h][w as usize] = l.fence_of(w);
                    self.slots_ns[h] = self.slots_ns[h].max(now_ns);
                    job.before = Some(Ok(l.fence_of(w)));
                    job.entries = match q {
                        Question::Entry { write_seq, stamp, .. } => {
                            l.for_stamp(w, write_seq, stamp).into_iter().collect()
                        }
                        Question::Scan { .. } => l.of_writer(w),
                    };
                    job.stable = true;
                }
                continue;
            }
            job.next = Some(Step::Slots);
        }
        self.ask = Some(Ask { q, jobs, progress_ns: now_ns });
    }

    /// The next READ of peer `h`'s ledger `ledger` (its registration) to post, if any:
    /// the step, whether it is the question's (or slots alone), where and how much.
    pub fn next_read(&mut self, h: u8, ledger: RemoteRegion) -> Option<(Step, bool, u64, usize)> {
        let entries_per = entries_per(ledger, self.n)?;
        if let Some(ask) = self.ask.as_mut() {
            let job = &mut ask.jobs[h as usize];
            if let (Some(step), None) = (job.next, job.in_flight) {
                job.entries_per = entries_per;
                job.in_flight = Some(step);
                return Some(match step {
                    Step::Slots | Step::After => (step, true, FENCES_AT as u64, FENCES_LEN),
                    Step::Entries { from, k } => {
                        let w = match ask.q {
                            Question::Entry { w, .. } | Question::Scan { w } => w,
                        };
                        let at = (ENTRIES_AT as u64) + (u64::from(w) * entries_per + from) * ENTRY_LEN as u64;
                        (step, true, at, k as usize * ENTRY_LEN)
                    }
                });
            }
        }
        if self.slots_wanted[h as usize] && !self.slots_in_flight[h as usize] {
            self.slots_wanted[h as usize] = false;
            self.slots_in_flight[h as usize] = true;
            return Some((Step::Slots, false, FENCES_AT as u64, FENCES_LEN));
        }
        None
    }

    /// A READ of peer `h`'s ledger came back at `now_ns` (`bytes`, or `None` if it
    /// failed); `for_ask` says whether it was the question's or a slots READ alone.
    pub fn on_read(&mut self, h: u8, step: Step, for_ask: bool, bytes: Option<&[u8]>, now_ns: u64) {
        if !for_ask {
            self.slots_in_flight[h as usize] = false;
            if let Some(b) = bytes {
                self.take_slots(h, b, now_ns);
            }
            return;
        }
        let Some(ask) = self.ask.as_mut() else { return };
        let w = match ask.q {
            Question::Entry { w, .. } | Question::Scan { w } => w,
        };
        let job = &mut ask.jobs[h as usize];
        if job.in_flight != Some(step) {
            // Posted for an earlier question, which finished (given up) while it was
            // in flight: its bytes answer that question, not this one (seed 200101: an
            // earlier question's READ of another write's slot, taken for this write's,
            // counted a holder of the fragment as lacking it).
            return;
        }
        ask.progress_ns = now_ns;
        job.in_flight = None;
        let Some(b) = bytes else {
            job.next = None;
            return;
        };
        let slots = matches!(step, Step::Slots | Step::After);
        match step {
            Step::Slots => {
                let fence = Fence::of(b, w);
                job.before = Some(fence);
                let per = job.entries_per;
                job.next = match (fence, ask.q) {
                    (Err(()), _) => Some(Step::Slots),
                    (Ok(_), Question::Entry { write_seq, .. }) => {
                        Some(Step::Entries { from: u64::from(write_seq) % per.max(1), k: 1 })
                    }
                    // Only a fence of every write is worth a scan.
                    (Ok(Some(f)), Question::Scan { .. }) if f.is_whole() => {
                        Some(Step::Entries { from: 0, k: per.min(u64::from(LEDGER_SCAN_ENTRIES)) })
                    }
                    (Ok(_), Question::Scan { .. }) => None,
                };
            }
            Step::Entries { from, k } => {
                job.entries.extend(b.chunks_exact(ENTRY_LEN).filter_map(LedgerEntry::parse));
                let next = from + k;
                job.next = if matches!(ask.q, Question::Scan { .. }) && next < job.entries_per {
                    Some(Step::Entries { from: next, k: (job.entries_per - next).min(u64::from(LEDGER_SCAN_ENTRIES)) })
                } else {
                    Some(Step::After)
                };
            }
            Step::After => {
                let after = Fence::of(b, w);
                job.stable = matches!((job.before, after), (Some(Ok(a)), Ok(b)) if a == b);
                job.next = None;
                if !job.stable {
                    job.entries.clear();
                }
            }
        }
        // Slots read for a question tell the fences too.
        if slots {
            self.take_slots(h, b, now_ns);
        }
    }

    fn take_slots(&mut self, h: u8, b: &[u8], now_ns: u64) {
        let mut whole = true;
        for w in 0..self.n.min(NODES_MAX) {
            match Fence::of(b, w as u8) {
                Ok(f) => self.fences[h as usize][w] = f,
                Err(()) => whole = false,
            }
        }
        if whole {
            self.slots_ns[h as usize] = now_ns;
        }
        self.check_scans();
    }

    /// Finishes the question under way once every peer answered, or at `now_ns` when no
    /// READ of it came back for `give_up_ns` (peers that did not answer count as
    /// unread). The decisions made are for the applier to take ([`Self::take_ruled`]).
    pub fn finish(&mut self, now_ns: u64, give_up_ns: u64) {
        let Some(ask) = self.ask.as_ref() else { return };
        let pending = ask.jobs.iter().any(|j| j.next.is_some() || j.in_flight.is_some());
        if pending && now_ns < ask.progress_ns + give_up_ns {
            return;
        }
        let Some(ask) = self.ask.take() else { return };
        match ask.q {
            Question::Entry { w, write_seq, stamp, key_hash, tombstone } => {
                let (mut read, mut held) = (0u32, 0u32);
                let key = Some((key_hash, tombstone));
                for (h, job) in ask.jobs.iter().enumerate() {
                    let Some(Ok(fence)) = job.before.filter(|_| job.stable) else { continue };
                    let entry = job.entries.iter().find(|e| e.is_of(write_seq, stamp));
                    let frozen = fence.is_some_and(|f| f.freezes_recorded(write_seq));
                    let rolled = entry.is_some_and(|e| e.state == LedgerState::RolledBack);
                    if frozen || rolled {
                        read |= 1 << h;
                        if entry.is_some_and(|e| e.state == LedgerState::Held) {
                            held |= 1 << h;
                        }
                    }
                }
                let holders = self.holders_of(key_hash);
                let verdict = holders_rule::verdict(self.quorum, holders, w, read, held);
                tracing::debug!(
                    node = self.me,
                    writer = w,
                    stamp,
                    write_seq,
                    read,
                    held,
                    holders,
                    ?verdict,
                    answered = ?ask.jobs.iter().map(|j| (j.stable, j.before, j.entries.iter().map(|e| (e.write_seq, e.stamp, e.state)).collect::<Vec<_>>())).collect::<Vec<_>>(),
                    "the holders' ledgers on a Pending write"
                );
                match verdict {
                    Verdict::Write => self.ruled.push(Ruled { version: stamp >> 8, w, key, write: true, held }),
                    Verdict::NoOp => self.ruled.push(Ruled { version: stamp >> 8, w, key, write: false, held }),
                    Verdict::Undecided => {}
                }
            }
            Question::Scan { w } => {
                let mut scan = Scan { fenced: 0, changes: [0; NODES_MAX], stamps: HashMap::new() };
                for (h, job) in ask.jobs.iter().enumerate() {
                    let Some(Ok(Some(fence))) = job.before.filter(|_| job.stable) else { continue };
                    if !fence.is_whole() {
                        continue;
                    }
                    scan.fenced |= 1 << h;
                    scan.changes[h] = fence.changes;
                    for e in &job.entries {
                        let seen = scan.stamps.entry(e.stamp).or_insert(Seen {
                            key_hash: e.key_hash,
                            tombstone: e.tombstone,
                            held: 0,
                        });
                        if e.state == LedgerState::Held {
                            seen.held |= 1 << h;
                        }
                    }
                }
                self.scans_done += 1;
                tracing::debug!(
                    node = self.me,
                    writer = w,
                    fenced = scan.fenced,
                    stamps = scan.stamps.len(),
                    fenced_out = self.fenced_out(w, scan.fenced),
                    "scanned a fenced writer's part of the holders' ledgers"
                );
                self.scans[w as usize] = Some(scan);
            }
        }
    }

    /// The decisions made since the last call.
    pub fn take_ruled(&mut self) -> impl Iterator<Item = Ruled> + '_ {
        self.ruled.drain(..)
    }
}

/// Entries per writer in a ledger registered as `ledger` for `n` writers, if its size
/// says so (a power of two).
fn entries_per(ledger: RemoteRegion, n: usize) -> Option<u64> {
    let body = ledger.len.checked_sub(ENTRIES_AT as u64)?;
    let per = body / (n as u64 * ENTRY_LEN as u64);
    (per.is_power_of_two() && per * n as u64 * ENTRY_LEN as u64 == body).then_some(per)
}

const _: () = assert!(FENCES_LEN == NODES_MAX * FENCE_LEN);

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::cluster::format::file::testing::TempDir;
    use crate::fabric::emu::{EmuNode, ModelConfig, Network, SystemClock};

    /// Five nodes, RS(3,2), quorum 4: every node holds every write; node 0 asks.
    fn setup(dir: &TempDir) -> (Ledgers, Vec<Ledger>) {
        let net = Network::new(ModelConfig::ideal(), Arc::new(SystemClock::new())).unwrap();
        let fabric: EmuNode = net.node().unwrap();
        let ledgers =
            (0..5u8).map(|h| Ledger::open(&fabric, &dir.file(&format!("ledger-{h}")), h, 5, 8).unwrap()).collect();
        (Ledgers::new(0, 5, 4, 5, Placement::all_storage(5), 1_000), ledgers)
    }

    /// Serves every READ the question wants from the peers' files, as the fabric would.
    fn answer(l: &mut Ledgers, files: &[Ledger], now: u64) {
        for _ in 0..64 {
            let mut any = false;
            for h in 1..5u8 {
                let file = &files[h as usize];
                if let Some((step, for_ask, at, len)) = l.next_read(h, file.remote()) {
                    let bytes = file.bytes_at(at as usize, len);
                    l.on_read(h, step, for_ask, Some(&bytes), now);
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
        l.finish(now, 1_000);
    }

    fn entry_question(stamp: u64) -> Question {
        Question::Entry { w: 3, write_seq: 5, stamp, key_hash: 7, tombstone: false }
    }

    #[test]
    fn a_pending_write_is_decided_only_from_ledgers_frozen_for_it() {
        let dir = TempDir::new("ledgers-entry");
        let (mut l, files) = setup(&dir);
        let stamp = 0x100_0000_0009 << 8 | 3;
        // Writer 3's write 5 is held by nodes 0, 1 and 2: with the writer, a quorum.
        for h in [0, 1, 2] {
            files[h].accept(3, 5, stamp, 7, false);
        }
        // Nobody fenced writer 3: nothing is frozen, nothing decided.
        l.ask(entry_question(stamp), Some(&files[0]), 0);
        answer(&mut l, &files, 10);
        assert_eq!(l.take_ruled().count(), 0, "undecided while the holders may still take its rollback");
        // Nodes 0, 1 and 2 fence writer 3: three frozen holders hold it, a write.
        for h in [0, 1, 2] {
            files[h].fence(3, 1).unwrap();
        }
        l.ask(entry_question(stamp), Some(&files[0]), 20);
        answer(&mut l, &files, 30);
        let ruled: Vec<Ruled> = l.take_ruled().collect();
        assert_eq!(ruled.len(), 1);
        assert!(ruled[0].write && ruled[0].held == 0b111, "{ruled:?}");
        // A later write, 6, that node 1 rolled back and nobody else holds: the
        // rollback is final even without a fence at node 4.
        let later = 0x100_0000_000a << 8 | 3;
        files[1].roll_back(3, 6, later, 8);
        files[4].roll_back(3, 6, later, 8);
        l.ask(Question::Entry { w: 3, write_seq: 6, stamp: later, key_hash: 8, tombstone: false }, Some(&files[0]), 40);
        answer(&mut l, &files, 50);
        let ruled: Vec<Ruled> = l.take_ruled().collect();
        assert!(ruled.len() == 1 && !ruled[0].write, "two rolled back, two frozen without it: a no-op; {ruled:?}");
    }

    #[test]
    fn a_read_posted_for_a_question_that_gave_up_does_not_answer_the_next() {
        let dir = TempDir::new("ledgers-stale");
        let (mut l, files) = setup(&dir);
        // Writer 3's write 5 is held, frozen, by every other node: a write.
        let stamp = 0x100_0000_0009 << 8 | 3;
        for h in [0, 1, 2, 4] {
            files[h].accept(3, 5, stamp, 7, false);
            files[h].fence(3, 1).unwrap();
        }
        // A first question posts its slots READ of node 1 and gives up on it.
        l.ask(entry_question(stamp), Some(&files[0]), 0);
        let (step, for_ask, at, len) = l.next_read(1, files[1].remote()).expect("the question's first READ");
        let stale = files[1].bytes_at(at as usize, len);
        l.finish(5_000, 1_000);
        // The next question's job for node 1 has posted nothing when the stale READ
        // lands: it is not this question's (taken, it would skip the READ that learns
        // the ledger's geometry and read the wrong entry).
        l.ask(entry_question(stamp), Some(&files[0]), 6_000);
        l.on_read(1, step, for_ask, Some(&stale), 6_001);
        answer(&mut l, &files, 6_002);
        let ruled: Vec<Ruled> = l.take_ruled().collect();
        assert!(ruled.len() == 1 && ruled[0].write && ruled[0].held == 0b10111, "{ruled:?}");
    }

    #[test]
    fn a_writer_fenced_out_is_gone_once_scanned_and_until_a_fence_changes() {
        let dir = TempDir::new("ledgers-scan");
        let (mut l, files) = setup(&dir);
        let held = 0x100_0000_0004 << 8 | 2;
        for h in [0, 1, 3] {
            files[h].accept(2, 40, held, 9, true);
        }
        // Only node 1 fences writer 2: a quorum of it can still form without it.
        files[1].fence(2, 1).unwrap();
        l.refresh(Some(&files[0]), 0);
        answer(&mut l, &files, 1);
        assert!(!l.wants_scan(2) && !l.gone(2));
        // Nodes 0, 1 and 3 fence it: only node 4 and the writer are left, fewer than
        // a quorum: it is fenced out.
        for h in [0, 3] {
            files[h].fence(2, 1).unwrap();
        }
        l.refresh(Some(&files[0]), 2);
        answer(&mut l, &files, 3);
        assert!(l.wants_scan(2));
        l.ask(Question::Scan { w: 2 }, Some(&files[0]), 4);
        answer(&mut l, &files, 5);
        assert!(l.gone(2) && l.gone_since(2, 3) && !l.gone_since(2, 6), "confirmed only by fences read since");
        assert_eq!(l.gone_verdict(2, 0x100_0000_0004), Some((Verdict::Write, Some((9, true)))), "three frozen hold it");
        assert_eq!(l.gone_verdict(2, 0x100_0000_0005).map(|v| v.0), Some(Verdict::NoOp), "no ledger names it");
        // Writer 2 comes back: node 3 narrows its fence, and the scan is dropped.
        files[3].narrow(2, 41).unwrap();
        l.refresh(Some(&files[0]), 7);
        answer(&mut l, &files, 8);
        assert!(!l.gone(2) && l.gone_verdict(2, 0x100_0000_0005).is_none());
    }
}
