//! The host API a key-value store links: create or attach a region, take buffers,
//! submit requests on a per-thread queue pair, and reap completions.
//!
//! ```no_run
//! use prescient_shim::{Host, HostOptions, RegionConfig, Sla};
//! use std::time::Duration;
//!
//! let host = Host::create("/dev/shm/prescient-kv".as_ref(), RegionConfig::default(), HostOptions::default())?;
//! let mut qp = host.queue_pair(0)?;             // one per KV-store thread
//! let mut buf = host.take_buffer()?;
//! let value = b"hello";
//! buf.value_mut()[..value.len()].copy_from_slice(value); // serialise in place
//! qp.put(b"key-1", buf, value.len(), Sla::Fresh, 42).map_err(|(e, _buf)| e)?;
//! qp.wait(Duration::from_secs(1), |c| assert_eq!(c.user_data, 42))?;
//! # Ok::<(), prescient_shim::ShimError>(())
//! ```

use std::path::Path;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::arena::{self, BufferState};
use crate::buffer::Buffer;
use crate::completion::Completion;
use crate::config::*;
use crate::descriptor::{ArenaShape, Descriptor, OpCode, Sla};
use crate::directory::{self, ReadCheck, ReadGuard, ReadSla, RefillToken, SlotWord};
use crate::error::ShimError;
use crate::layout::{header, RegionConfig};
use crate::liveness::{Beater, Watch};
use crate::queue::{Completions, FenceReason, QueueWords, Submissions};
use crate::region::Region;
use crate::ring::{Consumer, Producer};
use crate::sys as futex;
use crate::sys::monotonic_ns;

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
    pub fn attach(path: &Path, options: HostOptions) -> Result<Arc<Self>, ShimError> {
        let region = Region::open(path, options.pin)?;
        let pid = region.u32_at(header::HOST_PID).load(Ordering::Acquire);
        if pid != 0 && pid != std::process::id() && process_alive(pid) {
            return Err(ShimError::Busy { what: format!("region {}", path.display()), pid });
        }
        let region = Arc::new(region);
        let generation = Self::claim(&region);
        let started = Instant::now();
        let mut dpu = Watch::new(region.u64_at(header::DPU_HEARTBEAT), options.dpu_timeout, started);
        while region.u32_at(header::DPU_SERVED_GENERATION).load(Ordering::Acquire) != generation {
            if let Err(silent) = dpu.check(region.u64_at(header::DPU_HEARTBEAT), Instant::now()) {
                return Err(ShimError::DpuNotResponding {
                    silent_ms: silent.as_millis() as u64,
                    timeout_ms: options.dpu_timeout.as_millis() as u64,
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

    /// Takes queue pair `qp` for the calling thread. Each queue pair may be taken once
    /// per host; it is given back when the [`QueuePair`] drops.
    pub fn queue_pair(self: &Arc<Self>, qp: u32) -> Result<QueuePair, ShimError> {
        let count = self.config().queue_pairs;
        let free = self.claimed.get(qp as usize).is_some_and(|c| !c.swap(true, Ordering::AcqRel));
        if !free {
            return Err(ShimError::NoQueuePair { qp, count });
        }
        let words = QueueWords::new(self.region.clone(), qp);
        let now = Instant::now();
        Ok(QueuePair {
            sq: Producer::new(words.submissions()),
            cq: Consumer::new(words.completions()),
            dpu: Watch::new(self.region.u64_at(header::DPU_HEARTBEAT), self.options.dpu_timeout, now),
            host: self.clone(),
            words,
            in_flight: 0,
        })
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

/// Reading through the cache directory. The protocol for a KV store that caches
/// values on this node:
///
/// 1. [`Host::check_read`] (or [`Host::read_guard`]) for the key. Serve the cache
///    only on `Cached` (and, under a stale SLA, on `Pending`).
/// 2. On a miss, GET the value from the DPU app ([`QueuePair::get`]), keeping the
///    [`RefillToken`] the miss came with: the token must be taken *before* the GET is
///    issued, so that a write the GET may not have seen changes the slot after it.
/// 3. Put the value in the cache (not yet servable), then [`Host::refill`] with the
///    token. Only if it returns true may the cache entry be marked valid; if it
///    returns false, a write (or a revocation) moved the slot meanwhile: drop the
///    entry or keep it unservable, and check again on the next read.
///
/// Without a valid lease ([`Host::lease_valid`]) the directory proves nothing: the
/// cache must not be served and no refill is allowed. Every word read from the
/// directory is decoded whatever it holds: a hostile peer can make a read miss, never
/// make it panic.
///
/// ```no_run
/// use prescient_shim::{sys, Host, ReadCheck};
/// # fn cached(_: &[u8]) -> Option<Vec<u8>> { None }
/// # fn get_from_dpu(_: &[u8]) -> Vec<u8> { Vec::new() }
/// # fn cache_fill(_: &[u8], _: &[u8]) {}
/// # fn cache_mark_valid(_: &[u8]) {}
/// # fn read(host: &Host, key: &[u8]) -> Vec<u8> {
/// match host.check_read(key, sys::monotonic_ns()) {
///     ReadCheck::Cached(_) => cached(key).unwrap_or_else(|| get_from_dpu(key)),
///     ReadCheck::Miss(token) => {
///         let value = get_from_dpu(key); // a GET issued after the token was taken
///         cache_fill(key, &value); // in the cache, not servable yet
///         if host.refill(token) {
///             cache_mark_valid(key);
///         }
///         value
///     }
///     ReadCheck::Pending(_) | ReadCheck::NoLease | ReadCheck::NoDirectory => get_from_dpu(key),
/// }
/// # }
/// ```
impl Host {
    /// The slot of `key` and its word (None if the region has no directory slots).
    fn directory_word(&self, key: &[u8]) -> Option<(u32, &AtomicU64)> {
        let slots = self.config().directory_slots;
        if slots == 0 {
            return None;
        }
        let slot = directory::slot_of(directory::key_id(key), slots);
        self.directory_slot(slot).map(|word| (slot, word))
    }

    /// The decoded word of `key`'s directory slot (None if the region has no
    /// directory slots).
    pub fn slot_state(&self, key: &[u8]) -> Option<SlotWord> {
        // Acquire: pairs with the Release of a local refill, so a reader that sees
        // `Valid` sees the cache entry the refilling thread wrote before it.
        self.directory_word(key).map(|(_, word)| SlotWord::unpack(word.load(Ordering::Acquire)))
    }

    /// Whether the DPU app's directory lease covers `now_ns` (`CLOCK_MONOTONIC`
    /// nanoseconds, see [`crate::sys::monotonic_ns`]).
    pub fn lease_valid(&self, now_ns: u64) -> bool {
        now_ns < self.region.u64_at(header::DIRECTORY_LEASE_UNTIL_NS).load(Ordering::Acquire)
    }

    /// Decides, without blocking, whether `key` may be served from this node's cache
    /// at `now_ns`. See the protocol above.
    pub fn check_read(&self, key: &[u8], now_ns: u64) -> ReadCheck {
        match self.directory_word(key) {
            Some((slot, word)) => self.check_slot(slot, word, now_ns),
            None => ReadCheck::NoDirectory,
        }
    }

    fn check_slot(&self, slot: u32, word: &AtomicU64, now_ns: u64) -> ReadCheck {
        if !self.lease_valid(now_ns) {
            return ReadCheck::NoLease;
        }
        // Acquire: as in `slot_state`.
        ReadCheck::of_word(slot, word.load(Ordering::Acquire))
    }

    /// The blocking form of [`Host::check_read`], on the clock
    /// [`crate::sys::monotonic_ns`].
    ///
    /// - [`ReadSla::Stale`] never waits: `Cached` and `Pending` give
    ///   [`ReadGuard::Cached`], a miss gives its token, no lease or no directory gives
    ///   a miss without one.
    /// - [`ReadSla::Fresh`]: `Cached` gives `Cached`; `Pending` spins, then sleeps
    ///   briefly between rechecks of the slot and the lease, until the slot resolves or
    ///   `max_wait` passes (capped at [`READ_WAIT_US_MAX`]); still `Pending` then gives a
    ///   miss without a token (ask the DPU app with a GET, do not refill). A miss gives
    ///   its token; no lease or no directory a miss without one.
    pub fn read_guard(&self, key: &[u8], sla: ReadSla) -> ReadGuard {
        let Some((slot, word)) = self.directory_word(key) else { return ReadGuard::Miss { token: None } };
        let first = self.check_slot(slot, word, monotonic_ns());
        let max_wait = match (sla, first) {
            (ReadSla::Fresh { max_wait }, ReadCheck::Pending(_)) => max_wait,
            (_, check) => return ReadGuard::of_check(slot, check),
        };
        let wait_ns = max_wait.min(Duration::from_micros(READ_WAIT_US_MAX)).as_nanos() as u64;
        let deadline = monotonic_ns().saturating_add(wait_ns);
        let mut spins = 0u32;
        loop {
            let now = monotonic_ns();
            match self.check_slot(slot, word, now) {
                ReadCheck::Pending(_) if now < deadline => {}
                ReadCheck::Pending(_) => return ReadGuard::Miss { token: None },
                check => return ReadGuard::of_check(slot, check),
            }
            if spins < READ_SPIN_ROUNDS {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(READ_SLEEP_US));
            }
        }
    }

    /// Marks the slot of `token` valid again after a miss: CASes the token's exact
    /// word to its [`directory::refill`] result. True if the slot is now `Valid`: the
    /// caller may then mark its cache entry valid. False if the slot moved since the
    /// token was taken, refilling is not allowed from its word, the lease is not valid
    /// now, or the token names no slot.
    pub fn refill(&self, token: RefillToken) -> bool {
        let Some(word) = self.directory_slot(token.slot) else { return false };
        if !self.lease_valid(monotonic_ns()) {
            return false;
        }
        let Some(next) = directory::refill(SlotWord::unpack(token.word)) else { return false };
        // AcqRel: Release publishes the cache entry this thread wrote before the refill
        // to readers that Acquire the Valid word.
        word.compare_exchange(token.word, next.pack(), Ordering::AcqRel, Ordering::Relaxed).is_ok()
    }
}

impl ReadGuard {
    /// The guard for `check` of directory slot `slot`; a `Pending` check reaches here
    /// only under a stale SLA, which serves it.
    fn of_check(slot: u32, check: ReadCheck) -> Self {
        match check {
            ReadCheck::Cached(word) | ReadCheck::Pending(word) => ReadGuard::Cached { slot, word },
            ReadCheck::Miss(token) => ReadGuard::Miss { token: Some(token) },
            ReadCheck::NoLease | ReadCheck::NoDirectory => ReadGuard::Miss { token: None },
        }
    }

    /// For seqlock-style readers that copied a cached value under this guard: true iff
    /// the slot still holds the word the guard saw and the lease is still valid, so
    /// nothing moved while the value was copied. Always false for a miss.
    pub fn still_valid(&self, host: &Host) -> bool {
        let ReadGuard::Cached { slot, word } = *self else { return false };
        let Some(current) = host.directory_slot(slot) else { return false };
        // Acquire fence: the caller's reads of the cached copy happen before this
        // reread of the word (the seqlock reader's fence). Every transition below the
        // saturated version changes the word, so a word equal to the guard's now was
        // unchanged throughout.
        fence(Ordering::Acquire);
        current.load(Ordering::Relaxed) == word.pack() && host.lease_valid(monotonic_ns())
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

/// Whether process `pid` exists (the emulated DPU app and host share a kernel).
pub fn process_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else { return false };
    // kill(pid, 0) sends nothing; it only asks whether the process exists.
    match crate::sys::kill0(pid) {
        Ok(()) => true,
        Err(errno) => errno != libc::ESRCH,
    }
}

/// One KV-store thread's queue pair. Not shared between threads; send it to the
/// thread that uses it.
pub struct QueuePair {
    host: Arc<Host>,
    words: QueueWords,
    sq: Producer<Submissions>,
    cq: Consumer<Completions>,
    dpu: Watch,
    in_flight: u32,
}

impl std::fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePair").field("qp", &self.words.index()).finish()
    }
}

impl QueuePair {
    /// This queue pair's index.
    pub fn index(&self) -> u32 {
        self.words.index()
    }

    /// Requests submitted and not yet completed, as last seen.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    fn arena(&self) -> ArenaShape {
        let c = self.host.config();
        ArenaShape { host_buffers: c.host_buffers, buffer_bytes: c.buffer_bytes }
    }

    fn check_fence(&self) -> Result<(), ShimError> {
        let reason = self.words.fence_reason().load(Ordering::Acquire);
        if reason == 0 {
            return Ok(());
        }
        let reason = FenceReason::from_u32(reason).map_or("unknown reason", FenceReason::describe);
        Err(ShimError::Fenced { qp: self.index(), reason, detail: self.words.fence_detail().load(Ordering::Acquire) })
    }

    fn check_dpu(&mut self) -> Result<(), ShimError> {
        let counter = self.host.region.u64_at(header::DPU_HEARTBEAT);
        self.dpu.check(counter, Instant::now()).map_err(|silent| ShimError::DpuNotResponding {
            silent_ms: silent.as_millis() as u64,
            timeout_ms: self.dpu.timeout().as_millis() as u64,
        })
    }

    fn room(&mut self) -> Result<(), ShimError> {
        // One completion slot per request in flight: never more in flight than the
        // completion ring holds, so the DPU app can always complete what it takes.
        let entries = self.host.config().ring_entries;
        if self.in_flight() >= entries || self.sq.free() == 0 {
            self.sq.refresh().map_err(|e| ShimError::BadCompletion(format!("submission head: {e}")))?;
            if self.in_flight() >= entries || self.sq.free() == 0 {
                return Err(ShimError::RingFull { qp: self.index(), depth: entries });
            }
        }
        Ok(())
    }

    /// Queues a PUT of `buf`'s first `value_len` value bytes under `key`, without
    /// publishing it (see [`QueuePair::flush`]). On error the buffer comes back.
    pub fn push_put(
        &mut self,
        key: &[u8],
        buf: Buffer,
        value_len: usize,
        sla: Sla,
        user_data: u64,
    ) -> Result<(), (ShimError, Buffer)> {
        if value_len > buf.capacity() {
            let max = buf.capacity();
            return Err((ShimError::BadValue { len: value_len, max }, buf));
        }
        self.push_with_buffer(OpCode::Put, key, buf, value_len as u32, sla, user_data)
    }

    /// Queues a DELETE of `key`, carried in `buf`, without publishing it.
    pub fn push_delete(&mut self, key: &[u8], buf: Buffer, user_data: u64) -> Result<(), (ShimError, Buffer)> {
        self.push_with_buffer(OpCode::Delete, key, buf, 0, Sla::Stale, user_data)
    }

    fn push_with_buffer(
        &mut self,
        op: OpCode,
        key: &[u8],
        mut buf: Buffer,
        value_len: u32,
        sla: Sla,
        user_data: u64,
    ) -> Result<(), (ShimError, Buffer)> {
        if key.is_empty() || key.len() > KEY_BYTES_MAX {
            return Err((ShimError::BadKey { len: key.len(), max: KEY_BYTES_MAX }, buf));
        }
        if let Err(e) = self.check_fence().and_then(|()| self.room()) {
            return Err((e, buf));
        }
        buf.write_key(key);
        let cell = self.host.region.u32_at(self.host.region.layout().buffer_state(buf.index()));
        if let Err(found) = arena::transition(cell, buf.generation(), BufferState::Host, BufferState::Submitted) {
            let state = BufferState::describe(BufferState::of(found));
            let index = buf.index();
            return Err((ShimError::BufferState { index, state, hint: "submit each buffer once" }, buf));
        }
        let (index, buffer_gen) = buf.into_raw();
        let desc = Descriptor {
            op,
            sla,
            key_len: key.len() as u16,
            value_offset: self.arena().value_offset(index),
            value_len,
            buffer_gen,
            user_data,
            wait_us: 0,
        };
        self.push_checked(&desc);
        Ok(())
    }

    /// Emits `desc` into the next slot; the caller checked room.
    fn push_checked(&mut self, desc: &Descriptor) {
        let mut bytes = [0u8; DESCRIPTOR_BYTES];
        desc.emit(&mut bytes);
        assert!(self.sq.push(&bytes), "room() checked a free slot");
        self.in_flight += 1;
    }

    /// Queues a NOP: completes at once, names no buffer.
    pub fn push_nop(&mut self, user_data: u64) -> Result<(), ShimError> {
        self.check_fence()?;
        self.room()?;
        let desc = Descriptor {
            op: OpCode::Nop,
            sla: Sla::Stale,
            key_len: 0,
            value_offset: 0,
            value_len: 0,
            buffer_gen: 0,
            user_data,
            wait_us: 0,
        };
        self.push_checked(&desc);
        Ok(())
    }

    /// Pushes raw descriptor bytes, bypassing every host-side check. For fault
    /// injection: this is how a buggy or hostile host looks to the DPU app.
    pub fn push_raw(&mut self, bytes: &[u8; DESCRIPTOR_BYTES]) -> Result<(), ShimError> {
        self.room()?;
        assert!(self.sq.push(bytes), "room() checked a free slot");
        self.in_flight += 1;
        Ok(())
    }

    /// The queue pair's shared words, for fault injection and diagnostics.
    pub fn words(&self) -> &QueueWords {
        &self.words
    }

    /// Publishes every queued request and wakes the DPU app if it sleeps. Fails if the
    /// DPU app has stopped responding (the requests stay queued for its successor,
    /// which completes or fails each of them).
    pub fn flush(&mut self) -> Result<(), ShimError> {
        self.publish();
        self.check_dpu()
    }

    fn publish(&mut self) {
        self.sq.publish();
        // SeqCst: our tail store must be visible before we read the DPU's sleeping flag,
        // pairing with the fence the DPU app makes between setting that flag and its
        // last look at the rings. Without it both sides could miss each other.
        fence(Ordering::SeqCst);
        let region = &self.host.region;
        if region.u32_at(header::DPU_SLEEPING).load(Ordering::Relaxed) != 0 {
            let doorbell = region.u32_at(header::DPU_DOORBELL);
            doorbell.fetch_add(1, Ordering::Release);
            futex::wake_all(doorbell);
        }
    }

    /// PUT and publish at once. Fails, handing the buffer back, if the DPU app is not
    /// responding. See [`QueuePair::push_put`].
    pub fn put(
        &mut self,
        key: &[u8],
        buf: Buffer,
        value_len: usize,
        sla: Sla,
        user_data: u64,
    ) -> Result<(), (ShimError, Buffer)> {
        if let Err(e) = self.check_dpu() {
            return Err((e, buf));
        }
        self.push_put(key, buf, value_len, sla, user_data)?;
        self.publish();
        Ok(())
    }

    /// DELETE and publish at once. Fails, handing the buffer back, if the DPU app is
    /// not responding.
    pub fn delete(&mut self, key: &[u8], buf: Buffer, user_data: u64) -> Result<(), (ShimError, Buffer)> {
        if let Err(e) = self.check_dpu() {
            return Err((e, buf));
        }
        self.push_delete(key, buf, user_data)?;
        self.publish();
        Ok(())
    }

    /// Hands every completion ready now to `on`; returns how many.
    pub fn poll(&mut self, on: impl FnMut(Completion)) -> Result<usize, ShimError> {
        self.poll_max(usize::MAX, on)
    }

    /// Hands at most `max` completions ready now to `on`; returns how many.
    pub fn poll_max(&mut self, max: usize, mut on: impl FnMut(Completion)) -> Result<usize, ShimError> {
        let ready = self.cq.refresh().map_err(|e| ShimError::BadCompletion(format!("completion tail: {e}")))?;
        if ready > self.in_flight() {
            return Err(ShimError::BadCompletion(format!(
                "{ready} completions ready but only {} requests in flight",
                self.in_flight()
            )));
        }
        let mut count = 0;
        while count < max {
            let Some((_, bytes)) = self.cq.pop() else { break };
            self.in_flight -= 1;
            on(Completion::parse(&bytes));
            count += 1;
        }
        if count > 0 {
            self.cq.release();
        }
        Ok(count)
    }

    /// Waits up to `timeout` for at least one completion: spins briefly, then sleeps
    /// on the queue pair's futex. Fails with [`ShimError::DpuNotResponding`] once the
    /// DPU app has been silent for the host's `dpu_timeout`.
    pub fn wait(&mut self, timeout: Duration, on: impl FnMut(Completion)) -> Result<usize, ShimError> {
        self.wait_max(timeout, usize::MAX, on)
    }

    /// [`QueuePair::wait`], handing over at most `max` completions.
    pub fn wait_max(
        &mut self,
        timeout: Duration,
        max: usize,
        mut on: impl FnMut(Completion),
    ) -> Result<usize, ShimError> {
        let deadline = Instant::now() + timeout;
        for _ in 0..SPIN_ROUNDS {
            let n = self.poll_max(max, &mut on)?;
            if n > 0 {
                return Ok(n);
            }
            std::hint::spin_loop();
        }
        loop {
            let seen = self.words.cq_doorbell().load(Ordering::Acquire);
            self.words.host_waiting().store(1, Ordering::Relaxed);
            // SeqCst: the waiting flag must be visible before our last look at the
            // completion tail; pairs with the DPU app's fence between publishing the
            // tail and reading this flag.
            fence(Ordering::SeqCst);
            let n = self.poll_max(max, &mut on)?;
            if n > 0 {
                self.words.host_waiting().store(0, Ordering::Relaxed);
                return Ok(n);
            }
            self.check_fence()?;
            if let Err(e) = self.check_dpu() {
                self.words.host_waiting().store(0, Ordering::Relaxed);
                return Err(e);
            }
            let now = Instant::now();
            if now >= deadline {
                self.words.host_waiting().store(0, Ordering::Relaxed);
                return Err(ShimError::Timeout(timeout));
            }
            let nap = (deadline - now).min(Duration::from_micros(FUTEX_SLEEP_US_MAX));
            futex::wait(self.words.cq_doorbell(), seen, nap);
        }
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        self.host.claimed[self.words.index() as usize].store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directory::{SlotState, VERSION_MAX};

    struct Fixture {
        host: Arc<Host>,
        path: std::path::PathBuf,
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    fn fixture(name: &str, directory_slots: u32) -> Fixture {
        let path = std::env::temp_dir().join(format!("prescient-host-{name}-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let config = RegionConfig {
            queue_pairs: 1,
            ring_entries: 8,
            host_buffers: 8,
            dpu_buffers: 0,
            buffer_bytes: 1024,
            directory_slots,
        };
        let host = Host::create(&path, config, HostOptions { pin: false, ..HostOptions::default() }).unwrap();
        Fixture { host, path }
    }

    impl Fixture {
        /// The word of `key`'s slot, as a remote DPU app would CAS it.
        fn word(&self, key: &[u8]) -> &AtomicU64 {
            let slot = directory::slot_of(directory::key_id(key), self.host.config().directory_slots);
            self.host.directory_slot(slot).unwrap()
        }

        fn set(&self, key: &[u8], word: SlotWord) {
            self.word(key).store(word.pack(), Ordering::Release);
        }

        fn lease_until(&self, ns: u64) {
            self.host.region.u64_at(header::DIRECTORY_LEASE_UNTIL_NS).store(ns, Ordering::Release);
        }
    }

    fn w(state: SlotState, version: u64, writer: u8) -> SlotWord {
        SlotWord { state, writer, version }
    }

    #[test]
    fn a_fresh_directory_is_valid_but_unleased() {
        let f = fixture("fresh", 16);
        assert_eq!(f.host.slot_state(b"k"), Some(SlotWord::FRESH));
        assert!(!f.host.lease_valid(0), "a lease of 0 is never valid");
        assert_eq!(f.host.check_read(b"k", monotonic_ns()), ReadCheck::NoLease);
        f.lease_until(u64::MAX);
        assert_eq!(f.host.check_read(b"k", monotonic_ns()), ReadCheck::Cached(SlotWord::FRESH));

        let none = fixture("no-directory", 0);
        assert_eq!(none.host.slot_state(b"k"), None);
        assert_eq!(none.host.check_read(b"k", 0), ReadCheck::NoDirectory);
        assert_eq!(none.host.read_guard(b"k", ReadSla::Stale), ReadGuard::Miss { token: None });
        assert!(!none.host.refill(RefillToken { slot: 0, word: w(SlotState::Invalid, 1, 0).pack() }));
    }

    #[test]
    fn the_lease_ends_at_its_deadline() {
        let f = fixture("lease", 16);
        f.lease_until(1_000);
        assert!(f.host.lease_valid(999));
        assert!(!f.host.lease_valid(1_000));
        f.set(b"k", w(SlotState::Invalid, 3, 1));
        assert_eq!(f.host.check_read(b"k", 1_000), ReadCheck::NoLease);
        let ReadCheck::Miss(token) = f.host.check_read(b"k", 999) else { panic!("a miss") };
        // The lease (on the real clock, far past 1000 ns) is over: no refill.
        assert!(!f.host.refill(token));
        assert_eq!(f.host.slot_state(b"k").unwrap().state, SlotState::Invalid);
    }

    #[test]
    fn miss_then_refill_makes_the_slot_cached_once() {
        let f = fixture("refill", 16);
        f.lease_until(u64::MAX);
        f.set(b"k", w(SlotState::Invalid, 5, 2));
        let ReadCheck::Miss(token) = f.host.check_read(b"k", monotonic_ns()) else { panic!("a miss") };
        assert!(f.host.refill(token));
        assert_eq!(f.host.check_read(b"k", monotonic_ns()), ReadCheck::Cached(w(SlotState::Valid, 5, 2)));
        assert!(!f.host.refill(token), "a token refills once");
        assert!(!f.host.refill(RefillToken { slot: 16, ..token }), "a slot out of range");
    }

    #[test]
    fn a_write_between_the_miss_and_the_refill_fails_the_refill() {
        let f = fixture("race", 16);
        f.lease_until(u64::MAX);
        f.set(b"k", w(SlotState::Invalid, 5, 2));
        let ReadCheck::Miss(token) = f.host.check_read(b"k", monotonic_ns()) else { panic!("a miss") };
        // A remote writer marks and commits while the reader's GET is out.
        let placed = directory::mark(SlotWord::unpack(token.word), 5, 2);
        f.set(b"k", placed);
        assert!(!f.host.refill(token));
        f.set(b"k", directory::commit(placed, placed).unwrap());
        assert!(!f.host.refill(token), "the committed word is not the token's");
        // A revocation likewise.
        let ReadCheck::Miss(token) = f.host.check_read(b"k", monotonic_ns()) else { panic!("a miss") };
        f.set(b"k", directory::revoke(SlotWord::unpack(token.word), 0));
        assert!(!f.host.refill(token));
    }

    #[test]
    fn hostile_words_are_misses_never_panics() {
        let f = fixture("hostile", 16);
        f.lease_until(u64::MAX);
        for word in [u64::MAX, 0xc000_0000_0000_0000, 0x8000_0000_0000_0000 | VERSION_MAX, 0x7fff_ffff_ffff_ffff] {
            f.word(b"k").store(word, Ordering::Release);
            let check = f.host.check_read(b"k", monotonic_ns());
            match SlotWord::unpack(word).state {
                SlotState::Valid => assert!(matches!(check, ReadCheck::Cached(_))),
                SlotState::Pending => assert!(matches!(check, ReadCheck::Pending(_))),
                SlotState::Invalid | SlotState::Reserved => {
                    let ReadCheck::Miss(token) = check else { panic!("{word:#x}: {check:?}") };
                    // Reserved is never refilled; nor is a saturated Invalid.
                    assert!(!f.host.refill(token), "{word:#x}");
                }
            }
        }
    }

    #[test]
    fn stale_reads_serve_pending_slots_and_never_wait() {
        let f = fixture("stale", 16);
        f.lease_until(u64::MAX);
        let pending = w(SlotState::Pending, 9, 3);
        f.set(b"k", pending);
        let guard = f.host.read_guard(b"k", ReadSla::Stale);
        assert!(matches!(guard, ReadGuard::Cached { word, .. } if word == pending), "{guard:?}");
        assert!(guard.still_valid(&f.host));
        f.set(b"k", w(SlotState::Invalid, 9, 3));
        assert!(!guard.still_valid(&f.host), "the slot moved while the value was copied");
        let ReadGuard::Miss { token: Some(token) } = f.host.read_guard(b"k", ReadSla::Stale) else { panic!() };
        assert!(!ReadGuard::Miss { token: Some(token) }.still_valid(&f.host));
        f.lease_until(0);
        assert_eq!(f.host.read_guard(b"k", ReadSla::Stale), ReadGuard::Miss { token: None });
    }

    #[test]
    fn a_cached_guard_is_no_longer_valid_once_the_lease_lapses() {
        let f = fixture("guard-lease", 16);
        f.lease_until(u64::MAX);
        let guard = f.host.read_guard(b"k", ReadSla::Fresh { max_wait: Duration::ZERO });
        assert!(matches!(guard, ReadGuard::Cached { word: SlotWord::FRESH, .. }), "{guard:?}");
        assert!(guard.still_valid(&f.host));
        f.lease_until(1);
        assert!(!guard.still_valid(&f.host));
    }

    #[test]
    fn fresh_reads_wait_for_a_pending_slot_to_resolve() {
        let f = fixture("fresh-wait", 16);
        f.lease_until(u64::MAX);
        let placed = directory::mark(SlotWord::FRESH, 4, 1);
        f.set(b"k", placed);
        // Nobody resolves it: the wait ends at max_wait with a miss that may not refill.
        let guard = f.host.read_guard(b"k", ReadSla::Fresh { max_wait: Duration::from_micros(200) });
        assert_eq!(guard, ReadGuard::Miss { token: None });
        // A writer commits while the reader waits: the reader sees the miss and may refill.
        let region = f.host.region.clone();
        let slot = directory::slot_of(directory::key_id(b"k"), 16);
        let committer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            let word = region.u64_at(region.layout().directory_slot(slot));
            word.store(directory::commit(placed, placed).unwrap().pack(), Ordering::Release);
        });
        let guard = f.host.read_guard(b"k", ReadSla::Fresh { max_wait: Duration::from_secs(20) });
        committer.join().unwrap();
        let ReadGuard::Miss { token: Some(token) } = guard else { panic!("{guard:?}") };
        assert_eq!(SlotWord::unpack(token.word), w(SlotState::Invalid, 4, 1));
        assert!(f.host.refill(token));
        // A lease that lapses while the reader waits ends the wait without a token.
        f.set(b"k", directory::mark(SlotWord::unpack(f.word(b"k").load(Ordering::Acquire)), 6, 1));
        let region = f.host.region.clone();
        let revoker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            region.u64_at(header::DIRECTORY_LEASE_UNTIL_NS).store(0, Ordering::Release);
        });
        let guard = f.host.read_guard(b"k", ReadSla::Fresh { max_wait: Duration::from_secs(20) });
        revoker.join().unwrap();
        assert_eq!(guard, ReadGuard::Miss { token: None });
    }
}
