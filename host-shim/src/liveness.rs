//! Heartbeats: each side bumps a counter in its own header line; the other side
//! notes when it last saw the counter change and declares the peer dead after a
//! timeout. Counters, not timestamps, so the two sides need no common clock (the host
//! and the BlueField Arm have none).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Watches a peer's heartbeat counter.
#[derive(Clone, Copy, Debug)]
pub struct Watch {
    seen: u64,
    changed_at: Instant,
    timeout: Duration,
}

impl Watch {
    /// Starts watching at `now`, giving the peer a full timeout to show life.
    pub fn new(counter: &AtomicU64, timeout: Duration, now: Instant) -> Self {
        Self { seen: counter.load(Ordering::Acquire), changed_at: now, timeout }
    }

    /// Looks at the counter at `now`; returns how long it has been silent if that
    /// exceeds the timeout.
    pub fn check(&mut self, counter: &AtomicU64, now: Instant) -> Result<(), Duration> {
        let value = counter.load(Ordering::Acquire);
        if value != self.seen {
            self.seen = value;
            self.changed_at = now;
            return Ok(());
        }
        let silent = now.saturating_duration_since(self.changed_at);
        if silent > self.timeout {
            Err(silent)
        } else {
            Ok(())
        }
    }

    /// The timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// A thread that bumps a heartbeat counter every `period` until dropped.
#[derive(Debug)]
pub struct Beater {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Beater {
    /// Starts bumping `counter(&owner)` every `period`.
    pub fn start<T: Send + Sync + 'static>(
        owner: Arc<T>,
        counter: fn(&T) -> &AtomicU64,
        period: Duration,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new().name("prescient-heartbeat".into()).spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                counter(&owner).fetch_add(1, Ordering::Release);
                std::thread::park_timeout(period);
            }
        })?;
        Ok(Self { stop, thread: Some(thread) })
    }
}

impl Drop for Beater {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silence_past_the_timeout_is_reported_and_a_beat_clears_it() {
        let counter = AtomicU64::new(0);
        let t0 = Instant::now();
        let mut watch = Watch::new(&counter, Duration::from_millis(100), t0);
        assert!(watch.check(&counter, t0 + Duration::from_millis(50)).is_ok());
        assert_eq!(watch.check(&counter, t0 + Duration::from_millis(150)), Err(Duration::from_millis(150)));
        counter.fetch_add(1, Ordering::Relaxed);
        assert!(watch.check(&counter, t0 + Duration::from_millis(200)).is_ok());
        assert!(watch.check(&counter, t0 + Duration::from_millis(250)).is_ok());
    }
}
