//! Pre-invalidation leases: the contract between the predictor and the DPU app.
//!
//! A prediction opens a lease on a key for a window of `lease_window_writes` writes:
//! a lease opened right after write `t` covers writes `t+1 ..= t+window`. A write that
//! finds its key leased is a *hit* (its remote invalidation is already done) and
//! closes the lease. A lease that reaches the end of its window unused *expires*: a
//! false positive, reported so that the caller rolls the key back from `Pending`.
//! Opening a lease on a key already leased refreshes its window instead of issuing a
//! second one (no second CAS).
//!
//! Bounds: at most [`LEASES_OPEN_MAX`] leases are open; the table is allocated at
//! construction.

use crate::config::{lease_window, LEASES_OPEN_MAX};
use crate::error::ModelError;

/// An open lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The leased key.
    pub key: u64,
    /// Write number after which it was opened (or last refreshed).
    pub opened_after_write: u64,
    /// Last write number it covers.
    pub expires_after_write: u64,
}

/// What a write found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The key was leased: its invalidation is already under way.
    Hit,
    /// No lease: the write invalidates as usual.
    Miss,
}

/// What opening a lease did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenOutcome {
    /// A new lease: the caller marks the key `Pending` on its peers.
    Opened,
    /// The key was already leased; its window now starts again. Nothing to send.
    Refreshed,
    /// [`LEASES_OPEN_MAX`] leases are open; none was opened. Cannot happen when each
    /// write opens at most `PREDICTIONS_MAX` leases.
    Full,
}

/// Counters of a tracker's life.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeaseStats {
    /// Writes seen.
    pub writes: u64,
    /// Leases opened (refreshes not counted).
    pub opened: u64,
    /// Writes that found their key leased.
    pub hits: u64,
    /// Leases that expired unused (false positives).
    pub expired: u64,
}

impl LeaseStats {
    /// Share of opened leases that were hit. Leases still open count as not hit.
    pub fn precision(&self) -> f64 {
        ratio(self.hits, self.opened)
    }

    /// Share of writes that found a lease.
    pub fn recall(&self) -> f64 {
        ratio(self.hits, self.writes)
    }

    /// Leases opened per write.
    pub fn leases_per_write(&self) -> f64 {
        ratio(self.opened, self.writes)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// The open leases, keyed by key, timed in writes.
#[derive(Debug, Clone)]
pub struct LeaseTracker {
    window: u64,
    writes: u64,
    open: Vec<Lease>,
    stats: LeaseStats,
}

impl LeaseTracker {
    /// A tracker whose leases last `window_writes` writes (1 ..= 64).
    pub fn new(window_writes: u32) -> Result<Self, ModelError> {
        Ok(Self {
            window: lease_window(window_writes)?,
            writes: 0,
            open: Vec::with_capacity(LEASES_OPEN_MAX),
            stats: LeaseStats::default(),
        })
    }

    /// One write of `key`: a hit if `key` is leased (the lease closes). Then every
    /// lease whose window ended before this write is closed and handed to `expired`:
    /// the caller rolls those keys back.
    pub fn on_write(&mut self, key: u64, mut expired: impl FnMut(Lease)) -> WriteOutcome {
        self.writes += 1;
        self.stats.writes += 1;
        let now = self.writes;
        let mut outcome = WriteOutcome::Miss;
        let mut i = 0;
        while i < self.open.len() {
            let lease = self.open[i];
            if lease.key == key && lease.expires_after_write >= now {
                outcome = WriteOutcome::Hit;
                self.stats.hits += 1;
                self.open.swap_remove(i);
            } else if lease.expires_after_write < now {
                self.stats.expired += 1;
                self.open.swap_remove(i);
                expired(lease);
            } else {
                i += 1;
            }
        }
        outcome
    }

    /// Opens (or refreshes) a lease on `key` covering the next `window` writes.
    pub fn open(&mut self, key: u64) -> OpenOutcome {
        let now = self.writes;
        let expires = now + self.window;
        if let Some(lease) = self.open.iter_mut().find(|l| l.key == key) {
            lease.opened_after_write = now;
            lease.expires_after_write = expires;
            return OpenOutcome::Refreshed;
        }
        if self.open.len() == LEASES_OPEN_MAX {
            return OpenOutcome::Full;
        }
        self.open.push(Lease { key, opened_after_write: now, expires_after_write: expires });
        self.stats.opened += 1;
        OpenOutcome::Opened
    }

    /// The leases open now, in no particular order.
    pub fn open_leases(&self) -> &[Lease] {
        &self.open
    }

    /// Counters so far.
    pub fn stats(&self) -> LeaseStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hit_within_window_and_expiry_after() {
        let mut t = LeaseTracker::new(2).unwrap();
        let mut gone = Vec::new();
        t.on_write(1, |l| gone.push(l.key));
        assert_eq!(t.open(5), OpenOutcome::Opened);
        assert_eq!(t.open(6), OpenOutcome::Opened);
        assert_eq!(t.on_write(9, |l| gone.push(l.key)), WriteOutcome::Miss);
        assert_eq!(t.on_write(5, |l| gone.push(l.key)), WriteOutcome::Hit);
        assert!(gone.is_empty());
        // Write 4 is past lease 6's window (writes 2 and 3).
        assert_eq!(t.on_write(6, |l| gone.push(l.key)), WriteOutcome::Miss);
        assert_eq!(gone, [6]);
        let s = t.stats();
        assert_eq!((s.writes, s.opened, s.hits, s.expired), (4, 2, 1, 1));
        assert_eq!(s.precision(), 0.5);
    }

    #[test]
    fn reopening_refreshes() {
        let mut t = LeaseTracker::new(1).unwrap();
        t.open(5);
        t.on_write(1, |_| {});
        assert_eq!(t.open(5), OpenOutcome::Refreshed);
        assert_eq!(t.on_write(5, |_| panic!("refreshed lease expired")), WriteOutcome::Hit);
        assert_eq!(t.stats().opened, 1);
    }

    #[test]
    fn window_is_checked() {
        assert!(LeaseTracker::new(0).is_err());
        assert!(LeaseTracker::new(65).is_err());
    }

    proptest! {
        /// Every opened lease ends exactly once: hit, expired, or still open.
        #[test]
        fn leases_are_conserved(ops in proptest::collection::vec((0u64..16, 0usize..3), 0..300), window in 1u32..10) {
            let mut t = LeaseTracker::new(window).unwrap();
            let mut expired = 0u64;
            for (key, opens) in ops {
                t.on_write(key, |_| expired += 1);
                for j in 0..opens as u64 { t.open((key + 1 + j) % 16); }
                prop_assert!(t.open_leases().len() <= LEASES_OPEN_MAX);
            }
            let s = t.stats();
            prop_assert_eq!(s.expired, expired);
            prop_assert_eq!(s.opened, s.hits + s.expired + t.open_leases().len() as u64);
        }
    }
}
