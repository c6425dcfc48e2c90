//! What every threshold the tuner considers would have done, measured on the live
//! stream: one shadow lease per predicted key, with a window per threshold level.
//!
//! The model learns the same whatever the threshold (leases do not feed back into
//! its counts), so the leases a threshold `t` would open are exactly the predictions
//! scoring `>= t` (the score is the tuner's, [`crate::Model::predict_scored`]; called
//! the probability below). The ledger follows the lease rules of [`crate::lease`]
//! for every level at once: a prediction of probability `p` opens (or refreshes) the
//! key's lease at every level whose threshold is `<= p`; a write of the key is a hit
//! at every level where it is open; a window that passes unused is a false positive at
//! that level. Level `i`'s counts are therefore what a [`crate::LeaseTracker`] fed
//! the predictions at threshold `level_theta(i)` counts (a test checks it). Nothing
//! is marked for a shadow lease: it costs a table entry, not a CAS.
//!
//! Invariants: a shadow's windows do not increase with the level (a refresh sets a
//! prefix of levels to the newest end); at most [`LEASES_OPEN_MAX`] shadows are open
//! (each write opens at most one per context order at the floor; an extra one is
//! counted in [`LedgerCounts::dropped`]); the table is allocated at construction.

use crate::config::{lease_window, LEASES_OPEN_MAX, THRESHOLD_FLOOR, THRESHOLD_LEVELS, THRESHOLD_STEP};
use crate::error::ModelError;

/// The threshold of level `i` (`THRESHOLD_FLOOR + i * THRESHOLD_STEP`, the top one 1.0).
pub fn level_theta(i: usize) -> f32 {
    assert!(i < THRESHOLD_LEVELS, "threshold level {i} of {THRESHOLD_LEVELS}");
    (THRESHOLD_FLOOR + i as f32 * THRESHOLD_STEP).min(1.0)
}

/// The highest level whose threshold a prediction of `probability` reaches, if any.
pub fn level_of(probability: f32) -> Option<usize> {
    (0..THRESHOLD_LEVELS).rev().find(|&i| probability >= level_theta(i))
}

/// What the leases of one threshold level did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LevelCounts {
    /// Leases opened (refreshes not counted).
    pub opened: u64,
    /// Writes that found their key leased.
    pub hits: u64,
    /// Leases whose window passed unused (false positives).
    pub expired: u64,
}

impl LevelCounts {
    /// Leases that ended, hit or not.
    pub fn closed(&self) -> u64 {
        self.hits + self.expired
    }
}

/// Counts of every level, and the shadows that found no room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerCounts {
    /// Per level, lowest threshold first.
    pub levels: [LevelCounts; THRESHOLD_LEVELS],
    /// Predictions not followed for want of a free shadow (cannot happen within
    /// the limits; counted, not hidden).
    pub dropped: u64,
}

impl Default for LedgerCounts {
    fn default() -> Self {
        Self { levels: [LevelCounts::default(); THRESHOLD_LEVELS], dropped: 0 }
    }
}

/// A key's shadow lease: the last write each level's window covers, 0 when closed.
#[derive(Debug, Clone, Copy)]
struct Shadow {
    key: u64,
    ends_after_write: [u64; THRESHOLD_LEVELS],
}

/// The shadow leases and their counts since the last [`OutcomeLedger::take`].
#[derive(Debug, Clone)]
pub struct OutcomeLedger {
    window: u64,
    writes: u64,
    open: Vec<Shadow>,
    counts: LedgerCounts,
}

impl OutcomeLedger {
    /// A ledger whose leases last `window_writes` writes (1 ..= 64), as the real ones.
    pub fn new(window_writes: u32) -> Result<Self, ModelError> {
        Ok(Self {
            window: lease_window(window_writes)?,
            writes: 0,
            open: Vec::with_capacity(LEASES_OPEN_MAX),
            counts: LedgerCounts::default(),
        })
    }

    /// One write of `key`, before the predictions it leads to: a hit at every level
    /// where `key` is leased; every window that ended before it closes unused.
    pub fn on_write(&mut self, key: u64) {
        self.writes += 1;
        let now = self.writes;
        let mut i = 0;
        while i < self.open.len() {
            let s = &mut self.open[i];
            for (level, end) in s.ends_after_write.iter_mut().enumerate() {
                if *end == 0 {
                    continue;
                }
                if s.key == key && *end >= now {
                    self.counts.levels[level].hits += 1;
                    *end = 0;
                } else if *end < now {
                    self.counts.levels[level].expired += 1;
                    *end = 0;
                }
            }
            if s.ends_after_write[0] == 0 {
                // Windows do not increase with the level: level 0 closed means all did.
                self.open.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// The model predicts `key` with `probability` after the write just seen: open or
    /// refresh its lease at every level that probability reaches.
    pub fn predicted(&mut self, key: u64, probability: f32) {
        let Some(top) = level_of(probability) else { return };
        let end = self.writes + self.window;
        let at = match self.open.iter().position(|s| s.key == key) {
            Some(at) => at,
            None if self.open.len() == LEASES_OPEN_MAX => {
                self.counts.dropped += 1;
                return;
            }
            None => {
                self.open.push(Shadow { key, ends_after_write: [0; THRESHOLD_LEVELS] });
                self.open.len() - 1
            }
        };
        let s = &mut self.open[at];
        for (level, e) in s.ends_after_write[..=top].iter_mut().enumerate() {
            if *e == 0 {
                self.counts.levels[level].opened += 1;
            }
            *e = end;
        }
        debug_assert!(s.ends_after_write.windows(2).all(|w| w[0] >= w[1]), "windows grow with the level");
    }

    /// The counts since the last call, which start again from zero.
    pub fn take(&mut self) -> LedgerCounts {
        std::mem::take(&mut self.counts)
    }

    /// Writes seen.
    pub fn writes(&self) -> u64 {
        self.writes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::LeaseTracker;
    use proptest::prelude::*;

    #[test]
    fn levels_span_floor_to_one() {
        assert_eq!(level_theta(0), THRESHOLD_FLOOR);
        assert_eq!(level_theta(THRESHOLD_LEVELS - 1), 1.0);
        assert_eq!(level_of(0.49), None);
        assert_eq!(level_of(0.5), Some(0));
        assert_eq!(level_of(0.77), Some(5));
        assert_eq!(level_of(1.0), Some(THRESHOLD_LEVELS - 1));
    }

    proptest! {
        /// Every level counts exactly what a lease tracker at its threshold counts.
        #[test]
        fn each_level_is_a_lease_tracker_at_its_threshold(
            ops in proptest::collection::vec((0u64..12, proptest::collection::vec((0u64..12, 0u32..=100), 0..3)), 0..400),
            window in 1u32..10,
        ) {
            let mut ledger = OutcomeLedger::new(window).unwrap();
            let mut trackers: Vec<LeaseTracker> = (0..THRESHOLD_LEVELS).map(|_| LeaseTracker::new(window).unwrap()).collect();
            for (key, predictions) in ops {
                ledger.on_write(key);
                for t in &mut trackers { t.on_write(key, |_| {}); }
                for (next, percent) in predictions {
                    let p = percent as f32 / 100.0;
                    ledger.predicted(next, p);
                    for (level, t) in trackers.iter_mut().enumerate() {
                        if p >= level_theta(level) { t.open(next); }
                    }
                }
            }
            let counts = ledger.take();
            prop_assert_eq!(counts.dropped, 0);
            for (level, t) in trackers.iter().enumerate() {
                let s = t.stats();
                let c = counts.levels[level];
                prop_assert_eq!((c.opened, c.hits, c.expired), (s.opened, s.hits, s.expired), "level {}", level);
            }
            prop_assert_eq!(ledger.take(), LedgerCounts::default());
        }
    }
}
