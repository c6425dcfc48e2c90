//! Time for the emulated fabric, passed in: a real monotonic clock for normal runs, a
//! manual clock that tests advance by hand so that a run replays exactly.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A source of nanoseconds since some fixed start.
pub trait Clock: Send + Sync {
    /// Nanoseconds now.
    fn now_ns(&self) -> u64;
}

/// The monotonic system clock, counted from its creation.
#[derive(Debug)]
pub struct SystemClock {
    start: Instant,
}

impl SystemClock {
    /// A clock that reads 0 now.
    pub fn new() -> Self {
        Self { start: Instant::now() }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }
}

/// A clock that only moves when told to.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ns: AtomicU64,
}

impl ManualClock {
    /// A clock at 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward by `ns`.
    pub fn advance(&self, ns: u64) {
        self.now_ns.fetch_add(ns, Ordering::AcqRel);
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.now_ns.load(Ordering::Acquire)
    }
}
