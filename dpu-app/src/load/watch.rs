//! Timing invalidation from the readers' side: for each watched write, when every
//! remote host's directory slot for its key left the `Valid` word it held when the PUT
//! was submitted - from then on a `Fresh` reader there no longer serves the old value -
//! and how that compares with the write's commit point.
//!
//! A watch opens while the key is still a few writes ahead in its writer's stream
//! (the writer's lookahead), so that a predictor lease marking the slot *before* the
//! PUT is seen: the slot's latest `Valid` word is tracked until submission, and a slot
//! that left it for a `Pending` mark of the writer's own node before submission counts
//! as invalidated at that moment (a negative time). A slot that left `Valid` for any
//! other reason before submission (another node's write, a revocation) does not count.
//! Only writes with at least one remote slot `Valid` at submission are counted; the time
//! is the latest of their slots' departures. After submission every change of the word
//! counts as leaving it.
//!
//! The stale-read window of a counted write is `max(0, last departure - commit point)`,
//! the commit point taken from the writer node's commit log. A watch that is still not
//! invalidated `timeout_ns` after submission ends as "never invalidated" (what the
//! `none` policy gives).
//!
//! Memory: a fixed table of watches, allocated at start; when it is full, writes go
//! unwatched (and are counted as such).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use prescient_shim::directory::{self, SlotState, SlotWord};
use prescient_shim::Host;

use crate::histogram::Histogram;
use crate::limits::NODES_MAX;

/// One remote host's slot, as one watch sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct HostWatch {
    /// The `Valid` word the slot held (last seen before submission; at submission).
    valid: Option<u64>,
    /// When the slot left it.
    left_ns: Option<u64>,
}

/// Where a watch is in its write's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// The key is still ahead in the writer's stream.
    Upcoming,
    /// The PUT was submitted at `at_ns`.
    Submitted {
        /// Submission time.
        at_ns: u64,
    },
}

#[derive(Clone, Copy, Debug)]
struct Watch {
    /// The handle's generation: a stale handle (of a watch that ended) finds another.
    generation: u32,
    writer: u8,
    slot: u32,
    phase: Phase,
    /// The write completed Ok, with its commit point if the commit log had it.
    completed: Option<Option<u64>>,
    /// When the host reaped its completion.
    completed_ns: u64,
    hosts: [HostWatch; NODES_MAX],
}

/// What the watches measured.
#[derive(Clone, Debug, Default)]
pub struct WatchStats {
    /// Invalidation times at or after submission (ns after it).
    pub after: Histogram,
    /// Invalidation times before submission (ns before it): predictor leases.
    pub before: Histogram,
    /// Counted writes' remote slots that were `Valid` at submission, summed.
    pub valid_slots: u64,
    /// Writes whose remote slots were all not `Valid` at submission (not counted).
    pub no_valid_slot: u64,
    /// Counted writes whose slots were still not all invalidated at the timeout.
    pub never: u64,
    /// Writes not watched: the table was full, or the key was already ahead or in
    /// flight in the same stream (the earlier write would invalidate it first).
    pub unwatched: u64,
    /// Stale-read windows of counted writes (ns, 0 if invalidated before commit).
    pub window: Histogram,
    /// Counted writes with a window above 0.
    pub window_positive: u64,
    /// Counted writes whose commit point was not in the writer's commit log.
    pub window_unknown: u64,
    /// Counted writes whose last remote slot left Valid only after the host had the
    /// PUT's completion (a reader there could serve the old value after the write
    /// completed; the policies that invalidate should have none).
    pub after_completion: u64,
}

impl WatchStats {
    /// Writes counted (invalidated in time).
    pub fn counted(&self) -> u64 {
        self.after.count() + self.before.count()
    }

    /// The signed `q`-quantile of the invalidation times, in ns (negative: before the
    /// PUT was submitted); 0 if nothing was counted.
    pub fn invalidation_quantile(&self, q: f64) -> i64 {
        signed_quantile(&self.before, &self.after, q)
    }

    /// Forgets every figure (keeps the histograms' memory).
    pub fn clear(&mut self) {
        self.after.clear();
        self.before.clear();
        self.window.clear();
        self.valid_slots = 0;
        self.no_valid_slot = 0;
        self.never = 0;
        self.unwatched = 0;
        self.window_positive = 0;
        self.window_unknown = 0;
        self.after_completion = 0;
    }
}

/// The `q`-quantile of the values `-b` for each `b` in `before` and `a` for each `a`
/// in `after`, by rank `ceil(q * count)`; within the histograms' 6.25% of the true one
/// (a magnitude is reported as its bucket's upper edge on either side).
fn signed_quantile(before: &Histogram, after: &Histogram, q: f64) -> i64 {
    let (nb, na) = (before.count(), after.count());
    let total = nb + na;
    if total == 0 {
        return 0;
    }
    let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).clamp(1, total);
    if rank <= nb {
        // The rank-th smallest signed value is the (nb - rank + 1)-th smallest magnitude.
        let r = nb - rank + 1;
        -(before.percentile(r as f64 / nb as f64) as i64)
    } else {
        after.percentile((rank - nb) as f64 / na as f64) as i64
    }
}

/// The watch table.
#[derive(Debug)]
pub struct Watches {
    hosts: Vec<Arc<Host>>,
    slots: u32,
    entries: Vec<Option<Watch>>,
    free: Vec<u32>,
    /// The next generation of each entry.
    generations: Vec<u32>,
    /// Entries of the watches that are live (polled every step).
    live: Vec<u32>,
    /// Each watch's position in `live`.
    live_at: Vec<u32>,
    timeout_ns: u64,
    /// Only watches submitted at or after this count.
    count_from_ns: u64,
    /// What was measured.
    pub stats: WatchStats,
}

/// A watch's handle: its index in the table and the generation of that entry, so a
/// handle kept past its watch's end (a timeout) never touches the entry's next watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchId {
    index: u32,
    generation: u32,
}

impl Watches {
    /// A table of `capacity` watches over the directories of `hosts` (one per node, in
    /// node order; all with the same number of slots).
    pub fn new(hosts: Vec<Arc<Host>>, capacity: u32, timeout_ns: u64) -> Self {
        let slots = hosts.first().map_or(0, |h| h.config().directory_slots);
        Self {
            hosts,
            slots,
            entries: vec![None; capacity as usize],
            free: (0..capacity).rev().collect(),
            generations: vec![0; capacity as usize],
            live: Vec::with_capacity(capacity as usize),
            live_at: vec![0; capacity as usize],
            timeout_ns,
            count_from_ns: 0,
            stats: WatchStats::default(),
        }
    }

    /// Counts only writes submitted from `now_ns` on, and forgets what was measured.
    pub fn count_from(&mut self, now_ns: u64) {
        self.count_from_ns = now_ns;
        self.stats.clear();
    }

    /// Opens a watch on `key_id`, a key ahead in node `writer`'s stream; None (and
    /// counted as unwatched) if the table is full or there is no directory.
    pub fn open(&mut self, writer: u8, key_id: u64, now_ns: u64) -> Option<WatchId> {
        if self.slots == 0 {
            return None;
        }
        let Some(index) = self.free.pop() else {
            self.stats.unwatched += 1;
            return None;
        };
        let generation = self.generations[index as usize];
        self.generations[index as usize] = generation.wrapping_add(1);
        let slot = directory::slot_of(key_id, self.slots);
        let mut w = Watch {
            generation,
            writer,
            slot,
            phase: Phase::Upcoming,
            completed: None,
            completed_ns: 0,
            hosts: [HostWatch::default(); NODES_MAX],
        };
        observe(&self.hosts, &mut w, now_ns);
        self.entries[index as usize] = Some(w);
        self.live_at[index as usize] = self.live.len() as u32;
        self.live.push(index);
        Some(WatchId { index, generation })
    }

    /// Counts a write that was not watched.
    pub fn unwatched(&mut self) {
        self.stats.unwatched += 1;
    }

    /// The entry of `id` if its watch is still on.
    fn entry(&mut self, id: WatchId) -> Option<&mut Watch> {
        self.entries.get_mut(id.index as usize)?.as_mut().filter(|w| w.generation == id.generation)
    }

    /// The PUT of watch `id` was submitted at `now_ns`. False if the watch ended there
    /// (no remote slot was Valid: the write is not counted), true if it goes on.
    pub fn submitted(&mut self, id: WatchId, now_ns: u64) -> bool {
        let entry = self.entries.get_mut(id.index as usize).and_then(Option::as_mut);
        let live = match entry.filter(|w| w.generation == id.generation) {
            Some(w) => {
                observe(&self.hosts, w, now_ns);
                w.phase = Phase::Submitted { at_ns: now_ns };
                let writer = usize::from(w.writer);
                w.hosts[..self.hosts.len()].iter().enumerate().any(|(h, hw)| h != writer && hw.valid.is_some())
            }
            None => return false,
        };
        if !live {
            if now_ns >= self.count_from_ns {
                self.stats.no_valid_slot += 1;
            }
            self.close(id.index);
        }
        live
    }

    /// The write of watch `id` completed Ok; `commit_ns` is its commit point if known.
    pub fn completed(&mut self, id: WatchId, commit_ns: Option<u64>, now_ns: u64) {
        let Some(w) = self.entry(id) else { return };
        w.completed = Some(commit_ns);
        w.completed_ns = now_ns;
        self.settle(id.index, now_ns);
    }

    /// The write of watch `id` failed, or will never be submitted: it is not counted.
    pub fn abandon(&mut self, id: WatchId) {
        if self.entry(id).is_some() {
            self.close(id.index);
        }
    }

    fn close(&mut self, index: u32) {
        if self.entries[index as usize].take().is_some() {
            self.free.push(index);
            let at = self.live_at[index as usize] as usize;
            self.live.swap_remove(at);
            if let Some(&moved) = self.live.get(at) {
                self.live_at[moved as usize] = at as u32;
            }
        }
    }

    /// Reads the slots of every live watch at `now_ns` (after every step).
    pub fn poll(&mut self, now_ns: u64) {
        let mut i = 0;
        while i < self.live.len() {
            let index = self.live[i];
            if let Some(w) = self.entries[index as usize].as_mut() {
                observe(&self.hosts, w, now_ns);
            }
            if self.settle(index, now_ns) {
                // `close` swapped the last live watch into position i.
                continue;
            }
            i += 1;
        }
    }

    /// Ends the watch in entry `index` if it is done or timed out; true if it was closed.
    fn settle(&mut self, index: u32, now_ns: u64) -> bool {
        let Some(w) = self.entries[index as usize].as_ref() else { return false };
        let Phase::Submitted { at_ns } = w.phase else { return false };
        let writer = usize::from(w.writer);
        let (mut all_left, mut last, mut valid) = (true, None::<u64>, 0u64);
        for (h, hw) in w.hosts[..self.hosts.len()].iter().enumerate() {
            if h == writer || hw.valid.is_none() {
                continue;
            }
            valid += 1;
            match hw.left_ns {
                Some(t) => last = Some(last.map_or(t, |l| l.max(t))),
                None => all_left = false,
            }
        }
        let (completed, completed_ns) = (w.completed, w.completed_ns);
        let timed_out = now_ns.saturating_sub(at_ns) >= self.timeout_ns;
        if !(timed_out || all_left && completed.is_some()) {
            return false;
        }
        if at_ns >= self.count_from_ns {
            match (all_left, last) {
                (true, Some(last)) => {
                    if last >= at_ns {
                        self.stats.after.record(last - at_ns);
                    } else {
                        self.stats.before.record(at_ns - last);
                    }
                    self.stats.valid_slots += valid;
                    self.stats.after_completion += u64::from(completed.is_some() && last > completed_ns);
                    match completed {
                        Some(Some(commit_ns)) => {
                            let window = last.saturating_sub(commit_ns);
                            self.stats.window.record(window);
                            self.stats.window_positive += u64::from(window > 0);
                        }
                        _ => self.stats.window_unknown += 1,
                    }
                }
                _ => self.stats.never += 1,
            }
        }
        self.close(index);
        true
    }

    /// Watches live now.
    pub fn live(&self) -> usize {
        self.live.len()
    }
}

/// Updates `w` from the slots' words at `now_ns`.
fn observe(hosts: &[Arc<Host>], w: &mut Watch, now_ns: u64) {
    for (h, host) in hosts.iter().enumerate() {
        if h == usize::from(w.writer) {
            continue;
        }
        // Acquire: as a reader's check would read it.
        let word = host.directory_slot(w.slot).map_or(0, |x| x.load(Ordering::Acquire));
        let decoded = SlotWord::unpack(word);
        let hw = &mut w.hosts[h];
        match w.phase {
            Phase::Upcoming => {
                if decoded.state == SlotState::Valid {
                    *hw = HostWatch { valid: Some(word), left_ns: None };
                } else if hw.valid.is_some() && hw.left_ns.is_none() {
                    if decoded.state == SlotState::Pending && decoded.writer == w.writer {
                        // A lease of the writer's node, ahead of the PUT.
                        hw.left_ns = Some(now_ns);
                    } else {
                        hw.valid = None;
                    }
                }
            }
            Phase::Submitted { .. } => {
                if let (Some(valid), None) = (hw.valid, hw.left_ns) {
                    if word != valid {
                        hw.left_ns = Some(now_ns);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prescient_shim::{HostOptions, RegionConfig};

    struct Hosts {
        hosts: Vec<Arc<Host>>,
        paths: Vec<std::path::PathBuf>,
    }

    impl Drop for Hosts {
        fn drop(&mut self) {
            for p in &self.paths {
                let _ = std::fs::remove_file(p);
            }
        }
    }

    fn hosts(name: &str, n: usize) -> Hosts {
        let config = RegionConfig { directory_slots: 64, ..RegionConfig::default() };
        let paths: Vec<_> = (0..n)
            .map(|i| std::path::PathBuf::from(format!("/dev/shm/prescient-watch-{name}-{}-{i}", std::process::id())))
            .collect();
        let hosts = paths
            .iter()
            .map(|p| {
                let _ = std::fs::remove_file(p);
                Host::create(p, config, HostOptions { pin: false, ..HostOptions::default() }).unwrap()
            })
            .collect();
        Hosts { hosts, paths }
    }

    fn set(h: &Host, key: u64, state: SlotState, writer: u8, version: u64) {
        let slot = directory::slot_of(key, h.config().directory_slots);
        h.directory_slot(slot).unwrap().store(SlotWord { state, writer, version }.pack(), Ordering::Release);
    }

    #[test]
    fn a_write_counts_from_submission_to_the_last_remote_slot_leaving_valid() {
        let hs = hosts("after", 3);
        let mut w = Watches::new(hs.hosts.clone(), 4, 1_000_000);
        for h in &hs.hosts {
            set(h, 9, SlotState::Valid, 0, 5);
        }
        let id = w.open(0, 9, 100).unwrap();
        w.submitted(id, 1_000);
        w.poll(1_500);
        set(&hs.hosts[1], 9, SlotState::Pending, 0, 6);
        w.poll(2_000);
        set(&hs.hosts[0], 9, SlotState::Invalid, 0, 6); // the writer's own slot: ignored
        set(&hs.hosts[2], 9, SlotState::Pending, 0, 6);
        w.poll(3_000);
        assert_eq!(w.live(), 1, "waits for the completion");
        w.completed(id, Some(2_500), 3_100);
        assert_eq!(w.live(), 0);
        assert_eq!(w.stats.counted(), 1);
        assert_eq!(w.stats.invalidation_quantile(0.5), 2_000);
        assert_eq!((w.stats.valid_slots, w.stats.window_positive, w.stats.after_completion), (2, 1, 0));
        assert_eq!(w.stats.window.max(), 500, "left at 3000, committed at 2500");
    }

    #[test]
    fn a_slot_that_leaves_valid_after_the_completion_is_counted_as_such() {
        let hs = hosts("late", 2);
        let mut w = Watches::new(hs.hosts.clone(), 4, 1_000_000);
        set(&hs.hosts[1], 5, SlotState::Valid, 0, 5);
        let id = w.open(0, 5, 0).unwrap();
        w.submitted(id, 100);
        w.completed(id, Some(150), 200);
        w.poll(200);
        assert_eq!(w.live(), 1);
        set(&hs.hosts[1], 5, SlotState::Invalid, 0, 6);
        w.poll(300);
        assert_eq!((w.live(), w.stats.counted(), w.stats.after_completion), (0, 1, 1));
        assert_eq!(w.stats.window.max(), 150);
    }

    #[test]
    fn a_lease_of_the_writer_before_the_put_is_a_negative_time_and_no_window() {
        let hs = hosts("lease", 2);
        let mut w = Watches::new(hs.hosts.clone(), 4, 1_000_000);
        set(&hs.hosts[1], 4, SlotState::Valid, 0, 5);
        let id = w.open(0, 4, 100).unwrap();
        set(&hs.hosts[1], 4, SlotState::Pending, 0, 6); // node 0's lease
        w.poll(400);
        w.submitted(id, 1_000);
        w.completed(id, Some(900), 5_000);
        assert_eq!(w.stats.invalidation_quantile(0.5), -600);
        assert_eq!(w.stats.after_completion, 0);
        assert_eq!((w.stats.before.count(), w.stats.window_positive), (1, 0));
        assert_eq!(w.stats.window.max(), 0);
    }

    #[test]
    fn slots_not_valid_or_disturbed_by_others_are_not_counted_and_none_never_ends() {
        let hs = hosts("none", 2);
        let mut w = Watches::new(hs.hosts.clone(), 2, 10_000);
        // Invalid at submission: not counted.
        set(&hs.hosts[1], 1, SlotState::Invalid, 0, 5);
        let a = w.open(0, 1, 0).unwrap();
        w.submitted(a, 10);
        assert_eq!(w.stats.no_valid_slot, 1);
        // Valid, then another node's mark before submission: not counted either.
        set(&hs.hosts[1], 2, SlotState::Valid, 0, 5);
        let b = w.open(0, 2, 0).unwrap();
        set(&hs.hosts[1], 2, SlotState::Pending, 3, 6);
        w.poll(5);
        w.submitted(b, 10);
        assert_eq!(w.stats.no_valid_slot, 2);
        // Valid and never changing: never invalidated at the timeout.
        set(&hs.hosts[1], 3, SlotState::Valid, 0, 5);
        let c = w.open(0, 3, 0).unwrap();
        w.submitted(c, 100);
        w.completed(c, Some(150), 200);
        w.poll(10_050);
        assert_eq!(w.live(), 1);
        w.poll(10_100);
        assert_eq!((w.live(), w.stats.never, w.stats.counted()), (0, 1, 0));
        // The handle of a watch that ended touches nothing, not even the entry's next watch.
        let reused = w.open(0, 3, 20_000).unwrap();
        w.completed(c, Some(1), 20_001);
        w.abandon(c);
        assert_eq!(w.live(), 1, "the new watch is still on");
        w.abandon(reused);
        // A full table counts the write as unwatched.
        let _d = w.open(0, 4, 0).unwrap();
        let _e = w.open(0, 5, 0).unwrap();
        assert!(w.open(0, 6, 0).is_none());
        assert_eq!(w.stats.unwatched, 1);
    }

    #[test]
    fn the_signed_quantile_orders_before_and_after_values() {
        let (mut before, mut after) = (Histogram::new(), Histogram::new());
        // Values below 32 ns have exact buckets.
        for v in [30, 20, 10] {
            before.record(v);
        }
        for v in [3, 4] {
            after.record(v);
        }
        // Signed values: -30 -20 -10 3 4.
        assert_eq!(signed_quantile(&before, &after, 0.2), -30);
        assert_eq!(signed_quantile(&before, &after, 0.6), -10);
        assert_eq!(signed_quantile(&before, &after, 0.8), 3);
        assert_eq!(signed_quantile(&before, &after, 1.0), 4);
        assert_eq!(signed_quantile(&Histogram::new(), &Histogram::new(), 0.5), 0);
    }
}
