//! Ordered apply of sequencer stamps (`ordering = "sequencer"`, issue 16 part 4): the
//! state machine that turns fates of stamps, learned in any order, into one release
//! in stamp order, and says which hole holds it back and since when.
//!
//! Every stamp the sequencer issued has exactly one fate: the committed write that
//! carries it ([`Fate::Write`]), or none ([`Fate::NoOp`]: a stamp a writer fetched and
//! never used, a write rolled back, a block whose FETCH_ADD answer was lost). An
//! epoch's stamps are sequences `1..end` for the `end` its close names
//! ([`OrderedApply::close_epoch`]); the order moves from one epoch to the next only
//! once that close is known, since nothing else says how far a deposed sequencer got.
//! The applier releases ([`OrderedApply::release`]) the stamp at its cursor once its fate
//! is known, and only then moves the cursor: whatever order fates arrive in, and
//! however often, every applier fed the same fates releases the same sequence, each
//! prefix of it in turn. A stamp given two different fates is refused
//! ([`OrderError::Conflict`]): that is the invariant "every node's applied order is a
//! prefix of one order" caught where it breaks.
//!
//! A stamp with no fate yet below a stamp that has one is a hole. The applier records
//! when it noticed each hole (when a fate above it arrived, or its epoch's close) and
//! reports the oldest one ([`OrderedApply::oldest_hole`]), so a caller can bound how
//! long a hole stays open and resolve it.
//!
//! What this module does not decide is who may declare a hole a no-op: that must be
//! made impossible to contradict (no write of that stamp may commit afterwards), which
//! takes the cluster's agreement, not one node's timer; see `dpu-app/src/cluster/README.md`,
//! "Not built".
//!
//! Bounds: fates of the current epoch within [`ORDER_WINDOW`] stamps of the cursor,
//! [`ORDER_AHEAD_MAX`] ranges and [`ORDER_CLOSES_MAX`] closes of later epochs; all
//! tables are allocated when the applier is made, none grows afterwards.
#![forbid(unsafe_code)]

use crate::cluster::sequence::{epoch_of, first_of, sequence_of};
use crate::limits::{ORDER_AHEAD_MAX, ORDER_CLOSES_MAX, ORDER_NOTICED_MAX, ORDER_WINDOW, SEQUENCE_BITS};

/// What became of one stamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// A committed write of the key with this hash (a DELETE if `tombstone`).
    Write {
        /// Hash of the key written.
        key_hash: u64,
        /// The write deletes the key.
        tombstone: bool,
    },
    /// No write carries the stamp: the order skips it.
    NoOp,
}

/// One stamp released in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The stamp's version (`epoch << SEQUENCE_BITS | sequence`).
    pub version: u64,
    /// Its fate.
    pub fate: Fate,
}

/// A fate or close the applier refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OrderError {
    /// The version is of no stamp (epoch 0 or sequence 0): a bug of the caller.
    #[error("version {version:#x} is no sequencer stamp (epoch 0 or sequence 0)")]
    NotAStamp {
        /// The version.
        version: u64,
    },
    /// Two different fates for one stamp: the cluster disagrees on the order.
    #[error("stamp {version:#x} was resolved as {had:?} and now as {got:?}: the nodes disagree on the order")]
    Conflict {
        /// The stamp.
        version: u64,
        /// The fate known before.
        had: Fate,
        /// The fate refused.
        got: Fate,
    },
    /// A committed write at or past its epoch's close, or a close below a committed
    /// write or below what was released: the close or the write is wrong.
    #[error("epoch {epoch} closed at sequence {end}, but stamp {version:#x} is a committed write or was released")]
    PastClose {
        /// The epoch.
        epoch: u32,
        /// The close's end (first sequence not issued).
        end: u64,
        /// The stamp on the wrong side of it.
        version: u64,
    },
    /// Two different closes of one epoch.
    #[error("epoch {epoch} was closed at sequence {had} and now at {got}")]
    ClosedTwice {
        /// The epoch.
        epoch: u32,
        /// The close known before.
        had: u64,
        /// The close refused.
        got: u64,
    },
    /// The fate or close is further ahead than the applier holds: give it again once
    /// the cursor has moved (release what is ready, resolve the hole at the cursor).
    #[error("stamp {version:#x} is too far ahead of the cursor {cursor:#x}; resolve the hole at the cursor first")]
    Ahead {
        /// The stamp (for a close, the first stamp of its epoch).
        version: u64,
        /// The applier's cursor.
        cursor: u64,
    },
}

/// A range of fates of a later epoch: versions `from..end`, each `fate`.
#[derive(Clone, Copy, Debug)]
struct Range {
    from: u64,
    end: u64,
    fate: Fate,
    at_ns: u64,
}

/// What an applier counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OrderStats {
    /// Committed writes released.
    pub writes: u64,
    /// Stamps released as no-ops.
    pub noops: u64,
    /// Fates that arrived again (already known, or already released).
    pub repeats: u64,
}

/// The ordered applier of one node: a cursor (the first stamp not yet released) and
/// the fates known above it.
#[derive(Debug)]
pub struct OrderedApply {
    cursor: u64,
    /// The first sequence past the cursor's epoch, once its close is known.
    end: Option<u64>,
    /// Fates of the cursor's epoch, versions `cursor..cursor + ORDER_WINDOW`, each at
    /// `version % ORDER_WINDOW`.
    window: Box<[Option<Fate>]>,
    /// Fates of later epochs.
    ahead: Vec<Range>,
    /// Closes of later epochs: `(epoch, end sequence, learned at ns)`.
    closes: Vec<(u32, u64, u64)>,
    /// When holes were noticed: `(upto, at_ns)`, holes below `upto` (of the cursor's
    /// epoch; `u64::MAX`: all of it) noticed at `at_ns`, `upto` and `at_ns` rising.
    noticed: std::collections::VecDeque<(u64, u64)>,
    /// Counters.
    pub stats: OrderStats,
}

impl OrderedApply {
    /// An applier whose next stamp to release is `cursor` (`first_of(1)` for a cluster
    /// that has released nothing; a restart resumes from its feed's cursor).
    pub fn new(cursor: u64) -> Result<Self, OrderError> {
        if epoch_of(cursor) == 0 || sequence_of(cursor) == 0 {
            return Err(OrderError::NotAStamp { version: cursor });
        }
        Ok(Self {
            cursor,
            end: None,
            window: vec![None; ORDER_WINDOW as usize].into_boxed_slice(),
            ahead: Vec::with_capacity(ORDER_AHEAD_MAX),
            closes: Vec::with_capacity(ORDER_CLOSES_MAX),
            noticed: std::collections::VecDeque::with_capacity(ORDER_NOTICED_MAX),
            stats: OrderStats::default(),
        })
    }

    /// The next stamp to release: every stamp below it was released.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// The fate of stamp `version`, learned at `now_ns`.
    pub fn resolve(&mut self, version: u64, fate: Fate, now_ns: u64) -> Result<(), OrderError> {
        self.resolve_range(version, version + 1, fate, now_ns)
    }

    /// Stamps `from..end` of one epoch (a block's unused rest) are no-ops.
    pub fn resolve_unused(&mut self, from: u64, end: u64, now_ns: u64) -> Result<(), OrderError> {
        self.resolve_range(from, end, Fate::NoOp, now_ns)
    }

    fn resolve_range(&mut self, from: u64, end: u64, fate: Fate, now_ns: u64) -> Result<(), OrderError> {
        if from >= end {
            return Ok(());
        }
        let last = end - 1;
        for v in [from, last] {
            if epoch_of(v) == 0 || sequence_of(v) == 0 {
                return Err(OrderError::NotAStamp { version: v });
            }
        }
        assert!(epoch_of(from) == epoch_of(last), "a range of fates is of one epoch: {from:#x}..{end:#x}");
        let epoch = epoch_of(from);
        let current = epoch_of(self.cursor);
        if epoch < current || last < self.cursor {
            self.stats.repeats += 1;
            return Ok(());
        }
        let close = if epoch > current { self.closes.iter().find(|c| c.0 == epoch).map(|c| c.1) } else { self.end };
        if let (Some(e), Fate::Write { .. }) = (close, fate) {
            if sequence_of(last) >= e {
                return Err(OrderError::PastClose { epoch, end: e, version: last });
            }
        }
        // No-ops past a close name stamps never issued: nothing to hold.
        let end = close.map_or(end, |e| end.min(((epoch as u64) << SEQUENCE_BITS) + e));
        if from >= end {
            return Ok(());
        }
        self.check_ahead(from, end, fate)?;
        if epoch > current {
            return self.hold_ahead(Range { from, end, fate, at_ns: now_ns });
        }
        // Of the cursor's epoch: check against the window first, so a refused range
        // changes nothing.
        let (from, last) = (from.max(self.cursor), end - 1);
        if last >= self.cursor + ORDER_WINDOW {
            return Err(OrderError::Ahead { version: last, cursor: self.cursor });
        }
        for v in from..end {
            if let Some(had) = self.window[(v % ORDER_WINDOW) as usize] {
                if had != fate {
                    return Err(OrderError::Conflict { version: v, had, got: fate });
                }
            }
        }
        for v in from..end {
            let slot = &mut self.window[(v % ORDER_WINDOW) as usize];
            if slot.is_some() {
                self.stats.repeats += 1;
            }
            *slot = Some(fate);
        }
        self.notice(last, now_ns);
        Ok(())
    }

    /// Holds a range of a later epoch until the cursor gets there.
    fn hold_ahead(&mut self, range: Range) -> Result<(), OrderError> {
        if self.ahead.iter().any(|h| (h.from, h.end, h.fate) == (range.from, range.end, range.fate)) {
            self.stats.repeats += 1;
            return Ok(());
        }
        if self.ahead.len() == ORDER_AHEAD_MAX {
            return Err(OrderError::Ahead { version: range.from, cursor: self.cursor });
        }
        self.ahead.push(range);
        // The cursor's epoch is over: every stamp left in it is a hole from now.
        self.notice(u64::MAX - 1, range.at_ns);
        Ok(())
    }

    /// Refuses a range that gives a stamp held ahead another fate.
    fn check_ahead(&self, from: u64, end: u64, fate: Fate) -> Result<(), OrderError> {
        match self.ahead.iter().find(|h| h.from < end && from < h.end && h.fate != fate) {
            Some(h) => Err(OrderError::Conflict { version: from.max(h.from), had: h.fate, got: fate }),
            None => Ok(()),
        }
    }

    /// Moves the fates held ahead that are of the cursor's epoch and fit the window
    /// into it (checked against it when they were held).
    fn pull_ahead(&mut self) {
        let epoch = epoch_of(self.cursor);
        let mut i = 0;
        while i < self.ahead.len() {
            let r = self.ahead[i];
            if epoch_of(r.from) == epoch && r.from < self.cursor + ORDER_WINDOW {
                // A range longer than the window (a long run of no-ops) comes in a
                // window's worth at a time; the rest waits for the cursor.
                let upto = r.end.min(self.cursor + ORDER_WINDOW);
                for v in r.from.max(self.cursor)..upto {
                    self.window[(v % ORDER_WINDOW) as usize] = Some(r.fate);
                }
                if upto == r.end {
                    self.ahead.swap_remove(i);
                } else {
                    self.ahead[i].from = upto;
                    i += 1;
                }
            } else {
                i += 1;
            }
        }
    }

    /// Epoch `epoch` issued sequences `1..end` and no others (`end` 1: none), learned
    /// at `now_ns`.
    pub fn close_epoch(&mut self, epoch: u32, end: u64, now_ns: u64) -> Result<(), OrderError> {
        assert!((1..=1 << SEQUENCE_BITS).contains(&end), "an epoch's end is a sequence 1..=2^SEQUENCE_BITS: {end}");
        let current = epoch_of(self.cursor);
        if epoch < current || epoch == 0 {
            self.stats.repeats += 1;
            return Ok(());
        }
        if epoch > current {
            if let Some(&(_, had, _)) = self.closes.iter().find(|c| c.0 == epoch) {
                return if had == end { Ok(()) } else { Err(OrderError::ClosedTwice { epoch, had, got: end }) };
            }
            self.check_close_ahead(epoch, end)?;
            if self.closes.len() == ORDER_CLOSES_MAX {
                return Err(OrderError::Ahead { version: first_of(epoch), cursor: self.cursor });
            }
            self.trim_ahead(epoch, end);
            self.closes.push((epoch, end, now_ns));
            self.notice(u64::MAX - 1, now_ns);
            return Ok(());
        }
        if let Some(had) = self.end {
            return if had == end { Ok(()) } else { Err(OrderError::ClosedTwice { epoch, had, got: end }) };
        }
        if sequence_of(self.cursor) > end {
            return Err(OrderError::PastClose { epoch, end, version: self.cursor - 1 });
        }
        let base = (epoch as u64) << SEQUENCE_BITS;
        for v in (base + end).max(self.cursor)..self.cursor + ORDER_WINDOW {
            if let Some(Fate::Write { .. }) = self.window[(v % ORDER_WINDOW) as usize] {
                return Err(OrderError::PastClose { epoch, end, version: v });
            }
        }
        self.check_close_ahead(epoch, end)?;
        // No-ops resolved past the close name stamps never issued.
        for v in (base + end).max(self.cursor)..self.cursor + ORDER_WINDOW {
            self.window[(v % ORDER_WINDOW) as usize] = None;
        }
        self.trim_ahead(epoch, end);
        self.end = Some(end);
        if end > 1 {
            self.notice(base + end - 1, now_ns);
        }
        Ok(())
    }

    /// Refuses a close of `epoch` at `end` below a write held ahead.
    fn check_close_ahead(&self, epoch: u32, end: u64) -> Result<(), OrderError> {
        let past = |r: &&Range| {
            epoch_of(r.from) == epoch && matches!(r.fate, Fate::Write { .. }) && sequence_of(r.end - 1) >= end
        };
        match self.ahead.iter().find(past) {
            Some(r) => Err(OrderError::PastClose { epoch, end, version: r.end - 1 }),
            None => Ok(()),
        }
    }

    /// Cuts the no-ops held ahead for `epoch` at its close `end`.
    fn trim_ahead(&mut self, epoch: u32, end: u64) {
        let top = ((epoch as u64) << SEQUENCE_BITS) + end;
        self.ahead.retain_mut(|r| {
            if epoch_of(r.from) == epoch {
                r.end = r.end.min(top);
            }
            r.from < r.end
        });
    }

    /// Records that every stamp of the cursor's epoch below `upto` has something
    /// resolved above it (`u64::MAX - 1`: the whole epoch), from `now_ns`.
    fn notice(&mut self, upto: u64, now_ns: u64) {
        if self.noticed.back().is_some_and(|&(u, _)| u >= upto) {
            return;
        }
        if self.noticed.len() == ORDER_NOTICED_MAX {
            // Merge the newest two: the stamps of the newer inherit the older time, so
            // they look older than they are, never younger.
            let (_, at) = self.noticed.pop_back().expect("the queue is full");
            self.noticed.push_back((upto, at));
            return;
        }
        self.noticed.push_back((upto, now_ns));
    }

    /// The next stamp in order, if its fate is known: the cursor moves past it (and on
    /// into the next epoch once the current one's close is reached).
    pub fn release(&mut self) -> Option<Applied> {
        loop {
            if self.end.is_some_and(|e| sequence_of(self.cursor) >= e) {
                self.enter_next_epoch();
                continue;
            }
            let at = (self.cursor % ORDER_WINDOW) as usize;
            if self.window[at].is_none() && self.ahead.iter().any(|r| epoch_of(r.from) == epoch_of(self.cursor)) {
                // Fates of this epoch held past the window when the cursor entered it.
                self.pull_ahead();
            }
            let fate = self.window[at].take()?;
            let version = self.cursor;
            self.cursor += 1;
            while self.noticed.front().is_some_and(|&(u, _)| u <= self.cursor) {
                self.noticed.pop_front();
            }
            match fate {
                Fate::Write { .. } => self.stats.writes += 1,
                Fate::NoOp => self.stats.noops += 1,
            }
            return Some(Applied { version, fate });
        }
    }

    /// The cursor's epoch is done: moves to the first stamp of the next, with its
    /// close and the fates held for it.
    fn enter_next_epoch(&mut self) {
        let epoch = epoch_of(self.cursor) + 1;
        // The window is empty here: every stamp below the close was released, and no
        // fate at or past the close was taken.
        debug_assert!(self.window.iter().all(Option::is_none));
        self.cursor = first_of(epoch);
        self.end = None;
        let mut first_at = u64::MAX;
        if let Some(at) = self.closes.iter().position(|c| c.0 == epoch) {
            let (_, end, at_ns) = self.closes.swap_remove(at);
            self.end = Some(end);
            first_at = at_ns;
        }
        self.noticed.clear();
        // Holes of the new epoch count from the earliest fate that showed them
        // (conservative: never younger than they are).
        let mut top = 0;
        for r in &self.ahead {
            first_at = first_at.min(r.at_ns);
            top = top.max(if epoch_of(r.from) == epoch { r.end - 1 } else { u64::MAX - 1 });
        }
        self.pull_ahead();
        if let Some(e) = self.end.filter(|&e| e > 1) {
            top = top.max(((epoch as u64) << SEQUENCE_BITS) + e - 1);
        }
        if top > 0 {
            self.noticed.push_back((top, first_at));
        }
    }

    /// The oldest hole: the stamp at the cursor when a fate or close above it is
    /// known, and how long it has been open at `now_ns`.
    pub fn oldest_hole(&self, now_ns: u64) -> Option<(u64, u64)> {
        if self.window[(self.cursor % ORDER_WINDOW) as usize].is_some() {
            return None;
        }
        if self.end.is_some_and(|e| sequence_of(self.cursor) >= e) {
            return None;
        }
        let &(_, at) = self.noticed.iter().find(|&&(u, _)| u > self.cursor)?;
        Some((self.cursor, now_ns.saturating_sub(at)))
    }

    /// Fates of later epochs held, and closes held (for a status line).
    pub fn held(&self) -> (usize, usize) {
        (self.ahead.len(), self.closes.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::sequence::version;
    use crate::sim::rng::Rng;

    fn w(key_hash: u64) -> Fate {
        Fate::Write { key_hash, tombstone: false }
    }

    fn drain(a: &mut OrderedApply) -> Vec<Applied> {
        std::iter::from_fn(|| a.release()).collect()
    }

    #[test]
    fn releases_in_stamp_order_and_reports_the_hole_that_holds_it() {
        let v = |s| version(1, s).unwrap();
        let mut a = OrderedApply::new(first_of(1)).unwrap();
        a.resolve(v(1), w(10), 100).unwrap();
        a.resolve(v(3), w(30), 200).unwrap();
        let got = drain(&mut a);
        assert_eq!(got, vec![Applied { version: v(1), fate: w(10) }]);
        assert_eq!(a.cursor(), v(2));
        // Stamp 2 was noticed missing when stamp 3's fate arrived.
        assert_eq!(a.oldest_hole(1_200), Some((v(2), 1_000)));
        a.resolve_unused(v(2), v(3), 300).unwrap();
        let got = drain(&mut a);
        assert_eq!(got.iter().map(|x| x.version).collect::<Vec<_>>(), vec![v(2), v(3)]);
        assert_eq!(got[0].fate, Fate::NoOp);
        assert_eq!(a.oldest_hole(2_000), None);
        assert_eq!(a.stats, OrderStats { writes: 2, noops: 1, repeats: 0 });
    }

    #[test]
    fn refuses_two_fates_for_one_stamp_and_a_write_past_its_epoch_close() {
        let v = |s| version(2, s).unwrap();
        let mut a = OrderedApply::new(first_of(2)).unwrap();
        a.resolve(v(5), w(1), 0).unwrap();
        a.resolve(v(5), w(1), 0).unwrap();
        assert_eq!(
            a.resolve(v(5), Fate::NoOp, 0),
            Err(OrderError::Conflict { version: v(5), had: w(1), got: Fate::NoOp })
        );
        assert_eq!(
            a.resolve_unused(v(4), v(7), 0),
            Err(OrderError::Conflict { version: v(5), had: w(1), got: Fate::NoOp })
        );
        // The refused range left nothing behind.
        assert_eq!(a.resolve(v(4), w(4), 0), Ok(()));
        assert_eq!(a.close_epoch(2, 5, 0), Err(OrderError::PastClose { epoch: 2, end: 5, version: v(5) }));
        a.close_epoch(2, 6, 0).unwrap();
        assert_eq!(a.close_epoch(2, 7, 0), Err(OrderError::ClosedTwice { epoch: 2, had: 6, got: 7 }));
        assert_eq!(a.resolve(v(6), w(6), 0), Err(OrderError::PastClose { epoch: 2, end: 6, version: v(6) }));
        assert_eq!(OrderedApply::new(0).err(), Some(OrderError::NotAStamp { version: 0 }));
        assert_eq!(
            a.resolve(version(3, 0).unwrap(), w(1), 0),
            Err(OrderError::NotAStamp { version: version(3, 0).unwrap() })
        );
    }

    #[test]
    fn moves_to_the_next_epoch_only_once_the_current_one_is_closed() {
        let mut a = OrderedApply::new(first_of(1)).unwrap();
        a.resolve(version(1, 1).unwrap(), w(1), 0).unwrap();
        // Epoch 2's writes (the deposed sequencer's last stamps not yet known) wait.
        a.resolve(version(2, 1).unwrap(), w(21), 10).unwrap();
        a.resolve_unused(version(2, 2).unwrap(), version(2, 9).unwrap(), 10).unwrap();
        a.close_epoch(2, 9, 10).unwrap();
        assert_eq!(drain(&mut a).len(), 1);
        // The rest of epoch 1 is open from when epoch 2's first fate came.
        assert_eq!(a.oldest_hole(50), Some((version(1, 2).unwrap(), 40)));
        a.resolve(version(1, 2).unwrap(), w(2), 60).unwrap();
        a.close_epoch(1, 3, 60).unwrap();
        let got: Vec<u64> = drain(&mut a).iter().map(|x| x.version).collect();
        let mut want = vec![version(1, 2).unwrap()];
        want.extend((1..9).map(|s| version(2, s).unwrap()));
        assert_eq!(got, want);
        // Epoch 2 is closed too: the cursor waits at the start of epoch 3.
        assert_eq!(a.cursor(), first_of(3));
        assert_eq!(a.release(), None);
        assert_eq!(a.oldest_hole(100), None);
        // An epoch that issued nothing (a claim that won and never stamped).
        a.close_epoch(3, 1, 100).unwrap();
        a.resolve(version(4, 1).unwrap(), w(41), 100).unwrap();
        assert_eq!(a.release().map(|x| x.version), Some(version(4, 1).unwrap()));
    }

    #[test]
    fn bounds_what_it_holds_ahead_of_the_cursor() {
        let mut a = OrderedApply::new(first_of(1)).unwrap();
        let far = first_of(1) + ORDER_WINDOW;
        assert_eq!(a.resolve(far, w(1), 0), Err(OrderError::Ahead { version: far, cursor: first_of(1) }));
        for s in 1..=ORDER_AHEAD_MAX as u64 {
            a.resolve(version(2, s).unwrap(), w(s), 0).unwrap();
        }
        let one_more = version(2, ORDER_AHEAD_MAX as u64 + 1).unwrap();
        assert_eq!(a.resolve(one_more, w(0), 0), Err(OrderError::Ahead { version: one_more, cursor: first_of(1) }));
        assert_eq!(a.held(), (ORDER_AHEAD_MAX, 0));
        // Fates already released come again: counted, nothing else.
        a.resolve(first_of(1), w(9), 0).unwrap();
        a.close_epoch(1, 2, 0).unwrap();
        assert_eq!(a.release().map(|x| x.version), Some(first_of(1)));
        assert_eq!(drain(&mut a).len(), ORDER_AHEAD_MAX);
        a.resolve(first_of(1), w(9), 0).unwrap();
        assert_eq!(a.stats.repeats, 1);
    }

    #[test]
    fn fates_held_past_the_window_of_a_new_epoch_come_in_as_the_cursor_reaches_them() {
        let mut a = OrderedApply::new(first_of(1)).unwrap();
        let far = version(2, ORDER_WINDOW + 10).unwrap();
        a.resolve(far, w(7), 0).unwrap();
        a.close_epoch(1, 1, 0).unwrap();
        assert_eq!(a.release(), None);
        assert_eq!(a.cursor(), first_of(2));
        assert_eq!(a.held(), (1, 0));
        // The hole at the cursor is open since the far fate arrived.
        assert_eq!(a.oldest_hole(40), Some((first_of(2), 40)));
        let mut released = Vec::new();
        let mut s = 1;
        while s < ORDER_WINDOW + 10 {
            let end = (s + 1000).min(ORDER_WINDOW + 10);
            a.resolve_unused(version(2, s).unwrap(), version(2, end).unwrap(), 50).unwrap();
            released.extend(drain(&mut a));
            // Every no-op so far, and the held write once the window reaches it.
            assert_eq!(released.len() as u64, end - 1 + u64::from(end == ORDER_WINDOW + 10));
            s = end;
        }
        assert_eq!(released.last(), Some(&Applied { version: far, fate: w(7) }));
        assert_eq!(a.held(), (0, 0));
        assert_eq!(a.cursor(), far + 1);
    }

    /// A run of no-ops held for a later epoch may be longer than the window (a close's
    /// decision of many unused stamps): it comes in piece by piece. It used to stay
    /// held for good, the cursor stuck at the new epoch's first stamp.
    #[test]
    fn a_held_run_longer_than_the_window_comes_in_a_window_at_a_time() {
        let mut a = OrderedApply::new(first_of(1)).unwrap();
        let end = version(2, 3 * ORDER_WINDOW + 5).unwrap();
        a.resolve_unused(first_of(2), end, 0).unwrap();
        a.resolve(end, w(3), 0).unwrap();
        a.close_epoch(1, 1, 0).unwrap();
        let released = drain(&mut a);
        assert_eq!(released.len() as u64, 3 * ORDER_WINDOW + 5, "every no-op and the write after them");
        assert!(released[..released.len() - 1].iter().all(|x| x.fate == Fate::NoOp));
        assert_eq!(released.last(), Some(&Applied { version: end, fate: w(3) }));
        assert_eq!((a.cursor(), a.held()), (end + 1, (0, 0)));
    }

    #[test]
    fn holes_never_look_younger_than_they_are_when_notices_merge() {
        let mut a = OrderedApply::new(first_of(1)).unwrap();
        for s in 2..(ORDER_NOTICED_MAX as u64 * 3) {
            a.resolve(version(1, s).unwrap(), Fate::NoOp, s * 10).unwrap();
        }
        // Stamp 1 was first noticed open at the fate of stamp 2.
        assert_eq!(a.oldest_hole(1_000_000), Some((first_of(1), 1_000_000 - 20)));
        a.resolve(first_of(1), Fate::NoOp, 0).unwrap();
        let n = drain(&mut a).len() as u64;
        assert_eq!(n, ORDER_NOTICED_MAX as u64 * 3 - 1);
        assert_eq!(a.oldest_hole(1_000_000), None);
        // A new hole: noticed at its own time, not an older one.
        a.resolve(a.cursor() + 1, Fate::NoOp, 5_000).unwrap();
        assert_eq!(a.oldest_hole(6_000), Some((a.cursor(), 1_000)));
    }

    /// Several appliers fed one history's fates, each in its own shuffled order with
    /// repeats and releases interleaved at random, release prefixes of one sequence
    /// at every point, and all of it in the end.
    #[test]
    fn appliers_fed_one_history_in_any_order_release_prefixes_of_one_order() {
        for seed in 1..=40u64 {
            let mut rng = Rng::new(seed);
            // The history: epochs 1..=4, each a few blocks, each stamp a write or not.
            let mut events: Vec<(u64, u64, Fate)> = Vec::new();
            let mut closes = Vec::new();
            let mut truth = Vec::new();
            for epoch in 1..=4u32 {
                let mut seq = 1;
                for _ in 0..rng.below(6) {
                    let block = 1 + rng.below(16);
                    let used = rng.below(block + 1);
                    for s in seq..seq + used {
                        let v = version(epoch, s).unwrap();
                        let fate = if rng.chance(700_000) { w(rng.below(50)) } else { Fate::NoOp };
                        events.push((v, v + 1, fate));
                        truth.push(Applied { version: v, fate });
                    }
                    let (from, end) = (version(epoch, seq + used).unwrap(), version(epoch, seq + block).unwrap());
                    events.push((from, end, Fate::NoOp));
                    truth.extend((from..end).map(|v| Applied { version: v, fate: Fate::NoOp }));
                    seq += block;
                }
                closes.push((epoch, seq));
            }
            for applier in 0..3 {
                let mut rng = Rng::new(seed * 1_000 + applier);
                let mut todo: Vec<(u64, u64, Fate, bool)> = events.iter().map(|&(f, e, x)| (f, e, x, false)).collect();
                todo.extend(closes.iter().map(|&(ep, end)| (u64::from(ep), end, Fate::NoOp, true)));
                let mut a = OrderedApply::new(first_of(1)).unwrap();
                let mut released = Vec::new();
                while !todo.is_empty() {
                    let i = rng.below(todo.len() as u64) as usize;
                    let (f, e, fate, close) = todo[i];
                    let done = if close {
                        a.close_epoch(f as u32, e, 0)
                    } else if e - f == 1 {
                        a.resolve(f, fate, 0)
                    } else {
                        a.resolve_unused(f, e, 0)
                    };
                    match done {
                        Ok(()) => {
                            if rng.chance(200_000) {
                                // Delivered again later.
                            } else {
                                todo.swap_remove(i);
                            }
                        }
                        Err(OrderError::Ahead { .. }) => {}
                        Err(e) => panic!("seed {seed}: {e}"),
                    }
                    if rng.chance(300_000) {
                        released.extend(drain(&mut a));
                        assert_eq!(released[..], truth[..released.len()], "seed {seed} applier {applier}");
                    }
                }
                released.extend(drain(&mut a));
                assert_eq!(released, truth, "seed {seed} applier {applier}");
                assert_eq!(a.cursor(), first_of(5));
            }
        }
    }
}
