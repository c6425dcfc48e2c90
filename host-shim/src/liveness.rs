//! Heartbeats: each side bumps a counter in its own header line; the other side
//! notes when it last saw the counter change and declares the peer dead after a
//! timeout. Counters, not timestamps, so the two sides need no common clock (the host
//! and the BlueField Arm have none).
//!
//! A pid says more than a heartbeat where it can be checked: an exited process is
//! gone at once, and a live one whose heartbeat thread is starved (a loaded machine)
//! is not dead. A pid can be checked only by a process of the same kernel and pid
//! namespace, which [`pid_space`] names; on a BlueField the host's pids are another
//! kernel's, and the heartbeat is all there is.

use std::os::unix::fs::MetadataExt as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// A point in time a [`Watch`] measures silence with.
pub trait Moment: Copy {
    /// Time from `earlier` to `self`, 0 if `earlier` is later.
    fn since(self, earlier: Self) -> Duration;
}

impl Moment for Instant {
    fn since(self, earlier: Self) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

/// `CLOCK_MONOTONIC_COARSE` ([`crate::sys::coarse_ns`]): the kernel's last tick, read
/// without the time stamp counter. A few milliseconds of resolution are plenty for
/// timeouts of hundreds, and a queue pair checks its DPU app on every flush, where a
/// precise clock read was the largest cost after the descriptor copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Coarse(pub u64);

impl Coarse {
    /// Now.
    pub fn now() -> Self {
        Self(crate::sys::coarse_ns())
    }
}

impl Moment for Coarse {
    fn since(self, earlier: Self) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

/// Watches a peer's heartbeat counter.
#[derive(Clone, Copy, Debug)]
pub struct Watch<T: Moment = Instant> {
    seen: u64,
    changed_at: T,
    timeout: Duration,
}

impl<T: Moment> Watch<T> {
    /// Starts watching at `now`, giving the peer a full timeout to show life.
    pub fn new(counter: &AtomicU64, timeout: Duration, now: T) -> Self {
        Self { seen: counter.load(Ordering::Acquire), changed_at: now, timeout }
    }

    /// Looks at the counter at `now`; returns how long it has been silent if that
    /// exceeds the timeout.
    pub fn check(&mut self, counter: &AtomicU64, now: T) -> Result<(), Duration> {
        let value = counter.load(Ordering::Acquire);
        if value != self.seen {
            self.seen = value;
            self.changed_at = now;
            return Ok(());
        }
        let silent = now.since(self.changed_at);
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

/// This process's pid space: which boot of which kernel, and which pid namespace, its
/// pids belong to, as one nonzero word (0 if `/proc` cannot tell). A pid written by a
/// process with the same word may be checked with [`crate::host::process_alive`]; any
/// other may name a different process, or none.
pub fn pid_space() -> u64 {
    static SPACE: OnceLock<u64> = OnceLock::new();
    *SPACE.get_or_init(|| {
        let boot = std::fs::read("/proc/sys/kernel/random/boot_id");
        let namespace = std::fs::metadata("/proc/self/ns/pid").map(|m| m.ino());
        match (boot, namespace) {
            (Ok(boot), Ok(ino)) => {
                // FNV-1a over the boot id, then the namespace's inode mixed in.
                let h = boot
                    .iter()
                    .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
                (h ^ ino.wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1
            }
            _ => 0,
        }
    })
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

    #[test]
    fn the_pid_space_is_known_here_and_stable() {
        let space = pid_space();
        assert_ne!(space, 0, "this test host has /proc");
        assert_eq!(pid_space(), space);
        // A child of this process shares the kernel and the pid namespace.
        let out = std::process::Command::new("cat").arg("/proc/sys/kernel/random/boot_id").output().unwrap();
        assert!(out.status.success() && !out.stdout.is_empty());
    }

    #[test]
    fn a_coarse_watch_measures_the_same_silence() {
        let counter = AtomicU64::new(0);
        let ms = |ms: u64| Coarse(ms * 1_000_000);
        let mut watch = Watch::new(&counter, Duration::from_millis(100), ms(1000));
        assert!(watch.check(&counter, ms(1100)).is_ok());
        assert_eq!(watch.check(&counter, ms(1150)), Err(Duration::from_millis(150)));
        assert!(watch.check(&counter, ms(900)).is_ok(), "an earlier reading is no silence");
        let now = Coarse::now();
        assert!(Coarse::now() >= now);
    }
}
