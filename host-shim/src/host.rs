//! The host's handle on its region: create it or attach to it, take and free arena
//! buffers, open queue pairs, reach the cache directory's words. Reads through the
//! directory are in [`crate::reads`]; submitting and reaping in [`crate::queue_pair`].
//!
//! ```no_run
//! use prescient_shim::{Host, HostOptions, RegionConfig, Request};
//! use std::time::Duration;
//!
//! let host = Host::create("/dev/shm/prescient-kv".as_ref(), RegionConfig::default(), HostOptions::default())?;
//! let mut qp = host.queue_pair(0)?;             // one per KV-store thread
//! let mut buf = host.take_buffer()?;
//! let value = b"hello";
//! buf.value_mut()[..value.len()].copy_from_slice(value); // serialise in place
//! qp.submit(Request::put(b"key-1", buf, value.len()).user_data(42)).map_err(|(e, _buf)| e)?;
//! qp.wait(Duration::from_secs(1), |c| assert_eq!(c.user_data, 42))?;
//! # Ok::<(), prescient_shim::ShimError>(())
//! ```

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::arena::{self, BufferState};
use crate::buffer::Buffer;
use crate::config::*;
use crate::error::ShimError;
use crate::layout::{header, RegionConfig};
use crate::liveness::{Beater, Watch};
use crate::queue::QueueWords;
use crate::region::Region;

/// How the host maps and watches a region.
#[derive(Clone, Copy, Debug)]
pub struct HostOptions {
    /// Lock the region in memory (`mlock`). On by default; the DPU's NIC reads the
    /// arena directly, so production regions must be pinned.
    pub pin: bool,
    /// Time without a DPU heartbeat after which host calls fail.
    pub dpu_timeout: Duration,
}

impl Default for HostOptions {
    fn default() -> Self {
        Self { pin: true, dpu_timeout: Duration::from_millis(DPU_TIMEOUT_MS_DEFAULT) }
    }
}

/// A host's handle on its region. Shared by all KV-store threads (`Arc<Host>`).
pub struct Host {
    region: Arc<Region>,
    claimed: Vec<AtomicBool>,
    cursor: AtomicU32,
    options: HostOptions,
    _beater: Beater,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host").field("region", &self.region).finish()
    }
}

fn host_heartbeat(region: &Region) -> &AtomicU64 {
    region.u64_at(header::HOST_HEARTBEAT)
}

impl Host {
    /// Creates a new region file at `path` (under `/dev/shm`, or on hugetlbfs) and
    /// becomes its host.
    pub fn create(path: &Path, config: RegionConfig, options: HostOptions) -> Result<Arc<Self>, ShimError> {
        let region = Region::create(path, config, options.pin)?;
        // A fresh region has nothing for a DPU app to take over: mark generation 1 as
        // served, so requests submitted before the DPU app starts are kept for it.
        let generation = Self::claim(&region);
        region.u32_at(header::DPU_SERVED_GENERATION).store(generation, Ordering::Release);
        Self::start(Arc::new(region), options)
    }

    /// Attaches to an existing region whose previous host is gone (a restarted KV
    /// store). The serving DPU app must acknowledge the takeover within
    /// `dpu_timeout`: it drops the previous host's unconsumed requests and reclaims its
    /// buffers; this host then discards the previous host's completions, so it starts
    /// with empty queues and a full arena.
    ///
    /// Gives up after `dpu_timeout` whatever the region holds: with
    /// [`ShimError::DpuNotResponding`] if the DPU app's heartbeat stopped, with
    /// [`ShimError::AttachNotAcknowledged`] if it beats but never acknowledged this
    /// host (a generation or served word overwritten in the region makes the DPU app
    /// take this host for the one it serves already; attaching again claims the next
    /// generation, which it does take over).
    pub fn attach(path: &Path, options: HostOptions) -> Result<Arc<Self>, ShimError> {
        let region = Region::open(path, options.pin)?;
        let pid = region.u32_at(header::HOST_PID).load(Ordering::Acquire);
        if pid != 0 && pid != std::process::id() && process_alive(pid) {
            return Err(ShimError::Busy { what: format!("region {}", path.display()), pid });
        }
        let region = Arc::new(region);
        let generation = Self::claim(&region);
        let started = Instant::now();
        let timeout_ms = options.dpu_timeout.as_millis() as u64;
        let mut dpu = Watch::new(region.u64_at(header::DPU_HEARTBEAT), options.dpu_timeout, started);
        loop {
            let served = region.u32_at(header::DPU_SERVED_GENERATION).load(Ordering::Acquire);
            if served == generation {
                break;
            }
            let now = Instant::now();
            if let Err(silent) = dpu.check(region.u64_at(header::DPU_HEARTBEAT), now) {
                return Err(ShimError::DpuNotResponding { silent_ms: silent.as_millis() as u64, timeout_ms });
            }
            // A beating DPU app that has not acknowledged us within the timeout never
            // will on its own: the words it compares (the host generation, the served
            // generation) are ours to scribble, and it may take us for the host it
            // serves. Bounded by the same timeout as a silent one.
            if now.saturating_duration_since(started) >= options.dpu_timeout {
                return Err(ShimError::AttachNotAcknowledged {
                    path: path.to_path_buf(),
                    generation,
                    served,
                    timeout_ms,
                });
            }
            std::thread::sleep(Duration::from_micros(HEARTBEAT_PERIOD_US / 5));
        }
        for qp in 0..region.layout().config.queue_pairs {
            let words = QueueWords::new(region.clone(), qp);
            // Release: the DPU app may reuse these completion slots at once.
            words.cq_head().store(words.cq_tail().load(Ordering::Acquire), Ordering::Release);
        }
        Self::start(region, options)
    }

    /// Records this process as the region's host; returns the new host generation.
    fn claim(region: &Region) -> u32 {
        region.u64_at(header::HOST_PID_SPACE).store(crate::liveness::pid_space(), Ordering::Release);
        region.u32_at(header::HOST_PID).store(std::process::id(), Ordering::Release);
        region.u32_at(header::HOST_GENERATION).fetch_add(1, Ordering::AcqRel).wrapping_add(1)
    }

    fn start(region: Arc<Region>, options: HostOptions) -> Result<Arc<Self>, ShimError> {
        let beater = Beater::start(region.clone(), host_heartbeat, Duration::from_micros(HEARTBEAT_PERIOD_US))
            .map_err(|source| ShimError::Io { action: "start heartbeat for", path: region.path().into(), source })?;
        let queue_pairs = region.layout().config.queue_pairs;
        Ok(Arc::new(Self {
            claimed: (0..queue_pairs).map(|_| AtomicBool::new(false)).collect(),
            cursor: AtomicU32::new(0),
            region,
            options,
            _beater: beater,
        }))
    }

    /// Waits up to `timeout` for a live DPU app: one attached to the region whose
    /// heartbeat moves. Requests may be submitted before; this is for callers that
    /// want to know the DPU app is there.
    pub fn wait_for_dpu(&self, timeout: Duration) -> Result<(), ShimError> {
        let deadline = Instant::now() + timeout;
        let beat = self.region.u64_at(header::DPU_HEARTBEAT);
        let first = beat.load(Ordering::Acquire);
        loop {
            let pid = self.region.u32_at(header::DPU_PID).load(Ordering::Acquire);
            if pid != 0 && beat.load(Ordering::Acquire) != first {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(ShimError::DpuNotResponding {
                    silent_ms: timeout.as_millis() as u64,
                    timeout_ms: timeout.as_millis() as u64,
                });
            }
            std::thread::sleep(Duration::from_micros(HEARTBEAT_PERIOD_US / 5));
        }
    }

    /// The mapped region.
    pub fn region(&self) -> &Arc<Region> {
        &self.region
    }

    /// The region's sizes.
    pub fn config(&self) -> RegionConfig {
        self.region.layout().config
    }

    /// Claims queue pair `qp` for one [`crate::QueuePair`]; false if it is out of range
    /// or taken.
    pub(crate) fn claim_queue_pair(&self, qp: u32) -> bool {
        self.claimed.get(qp as usize).is_some_and(|c| !c.swap(true, Ordering::AcqRel))
    }

    /// Gives queue pair `qp` back to be taken again (its [`crate::QueuePair`] dropped).
    pub(crate) fn release_queue_pair(&self, qp: u32) {
        self.claimed[qp as usize].store(false, Ordering::Release);
    }

    /// How long the DPU app may be silent before host calls fail.
    pub(crate) fn dpu_timeout(&self) -> Duration {
        self.options.dpu_timeout
    }

    /// Takes a free buffer from the arena to fill in place.
    pub fn take_buffer(&self) -> Result<Buffer, ShimError> {
        let count = self.config().host_buffers;
        let start = self.cursor.fetch_add(1, Ordering::Relaxed);
        for probe in 0..count {
            let index = start.wrapping_add(probe) % count;
            let cell = self.region.u32_at(self.region.layout().buffer_state(index));
            if let Some(generation) = arena::take(cell) {
                self.cursor.store(index.wrapping_add(1), Ordering::Relaxed);
                return Ok(Buffer::new(self.region.clone(), index, generation));
            }
        }
        Err(ShimError::ArenaExhausted { count })
    }

    /// Frees buffer `index` taken at `generation` through the raw C ABI. Refuses a
    /// buffer that is in flight or not held at that generation.
    pub fn free_raw(&self, index: u32, generation: u32) -> Result<(), ShimError> {
        let cell = self.buffer_word(index)?;
        arena::transition(cell, generation, BufferState::Host, BufferState::Free).map_err(|found| {
            ShimError::BufferState {
                index,
                state: BufferState::describe(BufferState::of(found)),
                hint: "free only buffers you took and have not submitted",
            }
        })
    }

    fn buffer_word(&self, index: u32) -> Result<&AtomicU32, ShimError> {
        if index >= self.config().host_buffers {
            return Err(ShimError::BufferState { index, state: "out of range", hint: "use an index from take" });
        }
        Ok(self.region.u32_at(self.region.layout().buffer_state(index)))
    }

    /// Cache-directory slot `slot`, updated by remote DPUs with compare-and-swap.
    pub fn directory_slot(&self, slot: u32) -> Option<&AtomicU64> {
        (slot < self.config().directory_slots).then(|| self.region.u64_at(self.region.layout().directory_slot(slot)))
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // Detach cleanly: the DPU app reclaims this host's buffers without waiting out
        // the heartbeat timeout.
        let _ = self.region.u32_at(header::HOST_PID).compare_exchange(
            std::process::id(),
            0,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }
}

/// Whether process `pid` exists and has not exited (the emulated DPU app and host share
/// a kernel). A zombie (exited, not yet reaped: a killed process whose parent is gone
/// and whose new parent does not reap, as in some containers) is not alive.
pub fn process_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else { return false };
    // kill(pid, 0) sends nothing; it only asks whether the process exists.
    match crate::sys::kill0(pid) {
        Ok(()) => !is_zombie(pid),
        Err(errno) => errno != libc::ESRCH,
    }
}

/// Whether `/proc` says process `pid` is a zombie (false if it cannot tell).
fn is_zombie(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // `pid (comm) state ...`: comm may hold spaces and parentheses, the state follows
    // the last `)`.
    stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next()) == Some("Z")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) struct Fixture {
        pub(crate) host: Arc<Host>,
        path: std::path::PathBuf,
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    pub(crate) fn fixture(name: &str, directory_slots: u32) -> Fixture {
        let path = std::env::temp_dir().join(format!("prescient-host-{name}-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let config = RegionConfig {
            queue_pairs: 1,
            ring_entries: 8,
            host_buffers: 16,
            dpu_buffers: 0,
            buffer_bytes: 1024,
            directory_slots,
        };
        // No DPU app beats in these tests: give it all the time in the world.
        let options = HostOptions { pin: false, dpu_timeout: Duration::from_secs(3600) };
        let host = Host::create(&path, config, options).unwrap();
        Fixture { host, path }
    }

    /// A DPU app that beats but never acknowledges (the region's served word was
    /// overwritten and its host generation is one the DPU app takes for the host it
    /// serves): attach gives up after `dpu_timeout` with an error saying to attach
    /// again, instead of waiting for ever.
    #[test]
    fn attach_gives_up_after_the_timeout_on_a_beating_dpu_app_that_never_acknowledges() {
        let fixture = fixture("unacknowledged", 0);
        let region = fixture.host.region().clone();
        let generation = region.u32_at(header::HOST_GENERATION).load(Ordering::Acquire);
        region.u32_at(header::DPU_SERVED_GENERATION).store(generation.wrapping_add(2), Ordering::Release);
        let beating = Arc::new(AtomicBool::new(true));
        let dpu = {
            let (region, beating) = (region.clone(), beating.clone());
            std::thread::spawn(move || {
                while beating.load(Ordering::Relaxed) {
                    region.u64_at(header::DPU_HEARTBEAT).fetch_add(1, Ordering::Release);
                    std::thread::sleep(Duration::from_micros(HEARTBEAT_PERIOD_US));
                }
            })
        };
        let path = fixture.path.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let options = HostOptions { pin: false, dpu_timeout: Duration::from_millis(200) };
            let _ = tx.send(Host::attach(&path, options).map(drop));
        });
        // Bounded: a hang fails here rather than holding the test run for ever.
        let result = rx.recv_timeout(Duration::from_secs(60)).expect("attach returned");
        beating.store(false, Ordering::Relaxed);
        dpu.join().unwrap();
        let err = result.unwrap_err();
        assert!(matches!(err, ShimError::AttachNotAcknowledged { .. }), "{err}");
        assert!(err.to_string().contains("attach again"), "{err}");
    }

    #[test]
    fn an_exited_child_not_yet_reaped_is_not_alive() {
        let mut child = std::process::Command::new("true").spawn().expect("spawn true");
        let pid = child.id();
        // Not reaped yet: a zombie once it has exited.
        let deadline = Instant::now() + Duration::from_secs(10);
        while process_alive(pid) {
            assert!(Instant::now() < deadline, "pid {pid} still alive 10 s after `true` started");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(crate::sys::kill0(pid as i32).is_ok(), "the zombie still exists until it is reaped");
        child.wait().expect("reap");
        assert!(!process_alive(pid));
        assert!(process_alive(std::process::id()));
    }
}
