//! The load on an in-process cluster, stepped from one thread on the real clock: on
//! every writing node (all, or those of `writer_nodes`) a writer that keeps
//! `writer_depth` PUTs in flight over its part of the key stream - or, with a
//! `write_interval_ns`, submits one PUT per interval (an open loop, at most
//! `writer_depth` in flight) - and on every node a reader that reads keys the other nodes wrote recently through the
//! cache directory (check, on a miss a `Fresh` GET, cache the value under the word its
//! refill CASes in, serve only while the slot holds exactly that word).
//!
//! One [`Driver::tick`] submits what there is room for, steps the cluster once (every
//! node polls, the fabric delivers what is due), reaps every completion and reads the
//! directory slots of the watched writes ([`super::watch`]). PUT latency is host-side,
//! submission to completion.
//!
//! The writer skips a key that is already in flight from the same node (counted), so
//! one node never has two writes of a key outstanding; everything else follows the
//! stream. Each reader's next read is, at even odds, the newest key another node wrote
//! that it has not read yet, or a key it read before (which its cache may serve).
//!
//! Memory: every table (PUT and GET slots, recent keys, caches, watches, the newest
//! committed version per key) is allocated by [`Driver::new`].

use std::collections::VecDeque;
use std::sync::Arc;

use prescient_shim::directory::{RefillToken, SlotState, SlotWord};
use prescient_shim::sys::monotonic_ns;
use prescient_shim::{Completion, Host, QueuePair, ReadCheck, Request, ShimError, Status};

use super::cache::ReaderCache;
use super::keys::{key_bytes, Cursor, KeyStream};
use super::watch::{WatchId, Watches};
use crate::cluster::protocol::stats::NodeStats;
use crate::cluster::run::inprocess::InProcess;
use crate::histogram::Histogram;
use crate::limits::COMMIT_LOG_ENTRIES;
use crate::sim::rng::Rng;
use crate::Error;

/// Commit-log entries searched, newest first, for a completed write's commit point:
/// a write completes shortly after it commits, so its entry is among the newest.
pub const COMMIT_SCAN_MAX: usize = 8192;
/// Keys each reader remembers as written by others and not yet read.
const RECENT_KEYS: usize = 1024;
/// Keys each reader remembers having read (its re-read set).
const HISTORY_KEYS: usize = 4096;
/// Reads waiting on a Pending slot, per reader.
const WAITING_MAX: usize = 64;
/// Entries of the newest-committed-version table (direct-mapped by key).
const NEWEST_ENTRIES: usize = 1 << 20;
/// Keys a writer may skip in one tick because they are in flight already.
const SKIPS_PER_TICK_MAX: u32 = 64;

const _: () = assert!(COMMIT_SCAN_MAX <= COMMIT_LOG_ENTRIES);
const _: () = assert!(NEWEST_ENTRIES.is_power_of_two());

/// How the load behaves.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// PUTs each writer keeps in flight.
    pub writer_depth: u32,
    /// The nodes that write, a bit mask of node ids (`u32::MAX`: every node).
    pub writer_nodes: u32,
    /// Nanoseconds between one writer's PUTs (0: a closed loop, as fast as
    /// `writer_depth` allows); writers start staggered over one interval.
    pub write_interval_ns: u64,
    /// How long the writers take to reach `writer_depth`, from 1 in flight, growing
    /// linearly from the driver's start (a slow start: a cluster fed its whole depth
    /// at once decides a burst of writes in one round trip).
    pub ramp_ns: u64,
    /// Bytes per value.
    pub value_bytes: usize,
    /// Whether the readers run.
    pub readers: bool,
    /// GETs each reader keeps in flight at most (leave room in the node's GET table, or
    /// it stops taking PUTs too).
    pub reader_gets_max: u32,
    /// Reads each reader starts per tick at most.
    pub reads_per_tick: u32,
    /// Entries of each reader's cache.
    pub cache_entries: u32,
    /// How long a reader waits for a Pending slot before a GET without refill.
    pub fresh_wait_ns: u64,
    /// How far ahead in a writer's stream a watch opens.
    pub lookahead: usize,
    /// Watches at most.
    pub watches_max: u32,
    /// After how long a watched write not yet invalidated counts as never.
    pub watch_timeout_ns: u64,
    /// Seed of the readers' choices.
    pub seed: u64,
}

/// What the hosts saw.
#[derive(Clone, Debug, Default)]
pub struct HostStats {
    /// PUTs completed Ok.
    pub puts_ok: u64,
    /// PUTs completed with another status.
    pub puts_failed: u64,
    /// The first failure's status, for the report.
    pub first_failure: Option<Status>,
    /// PUT latency, submission to completion, of PUTs submitted while counting.
    pub put_latency: Histogram,
    /// The part of `put_latency` of PUTs whose key held a predictor lease with a mark
    /// placed when they arrived (`FLAG_LEASED` on their completion).
    pub put_latency_leased: Histogram,
    /// The rest of `put_latency`: PUTs that found no lease.
    pub put_latency_unleased: Histogram,
    /// Keys skipped because a write of the same key from the same node was in flight.
    pub skipped: u64,
    /// Reads started.
    pub reads: u64,
    /// Reads served from a cache.
    pub cache_hits: u64,
    /// Reads that waited on a Pending slot.
    pub waited: u64,
    /// Reads that found their slot Pending while no PUT of the key was in flight from
    /// any writer: a predictor lease's mark (or a mark not yet cleared after its write
    /// completed; the policies without leases show how many of those there are).
    pub pending_without_write: u64,
    /// How long those reads waited (until the slot left Pending or the wait ran out).
    pub pending_without_write_wait: Histogram,
    /// Waits that ran out (the read then asked the DPU app without refilling).
    pub wait_timeouts: u64,
    /// GETs completed Ok.
    pub gets_ok: u64,
    /// GETs that found no value.
    pub gets_not_found: u64,
    /// GETs that failed.
    pub gets_failed: u64,
    /// GET latency, submission to completion.
    pub get_latency: Histogram,
    /// Refills that took (the slot became Valid for our cache entry).
    pub refills: u64,
    /// Cache hits that served a version older than one whose PUT had already completed
    /// (stale reads; only the `none` policy should have any).
    pub stale_hits: u64,
    /// Ticks run (each steps the cluster once).
    pub ticks: u64,
    /// The run cut into windows of equal length (empty unless asked for with
    /// [`Driver::track_windows`]): whether throughput and latency hold over time.
    pub windows: Vec<Window>,
    /// Length of each window.
    pub window_ns: u64,
}

/// What the writers saw in one window of a run.
#[derive(Clone, Debug, Default)]
pub struct Window {
    /// PUTs completed Ok in the window.
    pub puts_ok: u64,
    /// PUTs completed with another status in the window.
    pub puts_failed: u64,
    /// Latency of the PUTs completed Ok in the window.
    pub put_latency: Histogram,
}

impl HostStats {
    fn clear(&mut self) {
        let mut kept = [
            std::mem::take(&mut self.put_latency),
            std::mem::take(&mut self.put_latency_leased),
            std::mem::take(&mut self.put_latency_unleased),
            std::mem::take(&mut self.get_latency),
        ];
        kept.iter_mut().for_each(Histogram::clear);
        let [put, leased, unleased, get] = kept;
        let mut lease_wait = std::mem::take(&mut self.pending_without_write_wait);
        lease_wait.clear();
        let (mut windows, window_ns) = (std::mem::take(&mut self.windows), self.window_ns);
        for w in &mut windows {
            w.puts_ok = 0;
            w.puts_failed = 0;
            w.put_latency.clear();
        }
        *self = Self {
            put_latency: put,
            put_latency_leased: leased,
            put_latency_unleased: unleased,
            get_latency: get,
            pending_without_write_wait: lease_wait,
            windows,
            window_ns,
            ..Self::default()
        };
    }
}

/// One PUT in flight.
#[derive(Clone, Copy, Debug)]
struct PutSlot {
    key_id: u64,
    submitted_ns: u64,
    watch: Option<WatchId>,
}

/// A node's writer.
struct Writer {
    node: u8,
    host: Arc<Host>,
    qp: QueuePair,
    cursor: Cursor,
    slots: Vec<Option<PutSlot>>,
    free: Vec<u32>,
    /// The watches of the next `lookahead` keys of the stream, in order.
    upcoming: VecDeque<Option<WatchId>>,
    seq: u64,
    /// With a write interval: when the next PUT is due.
    next_due_ns: u64,
}

/// One GET in flight.
#[derive(Clone, Copy, Debug)]
struct GetSlot {
    key_id: u64,
    began_ns: u64,
    token: Option<RefillToken>,
}

/// A read waiting for a Pending slot.
#[derive(Clone, Copy, Debug)]
struct Waiting {
    key_id: u64,
    began_ns: u64,
    until_ns: u64,
    /// No PUT of the key was in flight when the read found it Pending.
    without_write: bool,
}

/// A node's reader.
struct Reader {
    host: Arc<Host>,
    qp: QueuePair,
    cache: ReaderCache,
    recent: VecDeque<u64>,
    history: Vec<u64>,
    history_next: usize,
    gets: Vec<Option<GetSlot>>,
    free: Vec<u32>,
    waiting: Vec<Waiting>,
    rng: Rng,
}

/// The newest committed stamp of each key whose PUT completed (direct-mapped: a key
/// that collides with another loses its entry, so stale hits are undercounted, never
/// invented).
struct Newest {
    entries: Vec<(u64, u64)>,
}

impl Newest {
    fn new() -> Self {
        Self { entries: vec![(u64::MAX, 0); NEWEST_ENTRIES] }
    }

    fn index(key_id: u64) -> usize {
        prescient_shim::directory::slot_of(key_id, NEWEST_ENTRIES as u32) as usize
    }

    fn record(&mut self, key_id: u64, stamp: u64) {
        let e = &mut self.entries[Self::index(key_id)];
        if e.0 != key_id || e.1 < stamp {
            *e = (key_id, stamp);
        }
    }

    fn get(&self, key_id: u64) -> Option<u64> {
        let e = self.entries[Self::index(key_id)];
        (e.0 == key_id).then_some(e.1)
    }
}

/// The load on every node of one cluster.
pub struct Driver {
    config: LoadConfig,
    writers: Vec<Writer>,
    readers: Vec<Reader>,
    /// The invalidation watches.
    pub watches: Watches,
    newest: Newest,
    /// Only PUTs submitted from here on are timed.
    count_from_ns: u64,
    /// When the driver started (the ramp's origin).
    started_ns: u64,
    /// What the hosts saw.
    pub stats: HostStats,
    completions: Vec<Completion>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver").field("nodes", &self.writers.len()).field("stats", &self.stats).finish()
    }
}

impl Driver {
    /// The load of `config` on every node of `cluster`, each writer on its share of
    /// `stream`. Uses queue pair 0 of each host for the writer and 1 for the reader.
    pub fn new(cluster: &InProcess, stream: &KeyStream, config: LoadConfig) -> Result<Self, Error> {
        let n = cluster.len() as u8;
        let hosts: Vec<Arc<Host>> = (0..n).map(|i| Arc::clone(cluster.host(i))).collect();
        let qp = |node: u8, index: u32| {
            hosts[node as usize].queue_pair(index).map_err(|source| Error::Host { node, source })
        };
        let depth = config.writer_depth.max(1);
        let writing: Vec<u8> = (0..n).filter(|&i| i >= 32 || config.writer_nodes & (1 << i) != 0).collect();
        let mut writers = Vec::with_capacity(writing.len());
        let mut readers = Vec::with_capacity(n.into());
        let start = monotonic_ns();
        for (i, &node) in writing.iter().enumerate() {
            writers.push(Writer {
                node,
                host: Arc::clone(&hosts[node as usize]),
                qp: qp(node, 0)?,
                cursor: stream.cursor(i as u8, writing.len() as u8),
                slots: vec![None; depth as usize],
                free: (0..depth).rev().collect(),
                upcoming: VecDeque::with_capacity(config.lookahead + 1),
                seq: 0,
                next_due_ns: start + config.write_interval_ns * i as u64 / writing.len() as u64,
            });
        }
        for node in 0..n {
            let gets = config.reader_gets_max.max(1);
            readers.push(Reader {
                host: Arc::clone(&hosts[node as usize]),
                qp: qp(node, 1)?,
                cache: ReaderCache::new(config.cache_entries, config.value_bytes),
                recent: VecDeque::with_capacity(RECENT_KEYS),
                history: Vec::with_capacity(HISTORY_KEYS),
                history_next: 0,
                gets: vec![None; gets as usize],
                free: (0..gets).rev().collect(),
                waiting: Vec::with_capacity(WAITING_MAX),
                rng: Rng::new(config.seed ^ u64::from(node) << 32),
            });
        }
        let capacity = config.watches_max.max(1);
        let mut driver = Self {
            watches: Watches::new(hosts, capacity, config.watch_timeout_ns),
            writers,
            readers,
            newest: Newest::new(),
            count_from_ns: 0,
            started_ns: monotonic_ns(),
            stats: HostStats::default(),
            completions: Vec::with_capacity(512),
            config,
        };
        let now = monotonic_ns();
        for w in 0..driver.writers.len() {
            for ahead in 0..driver.config.lookahead {
                let key = driver.writers[w].cursor.peek(ahead);
                let watch = driver.open_watch(w, key, now);
                driver.writers[w].upcoming.push_back(watch);
            }
        }
        Ok(driver)
    }

    /// Counts PUTs in `count` windows of `window_ns` each from the start of counting
    /// ([`Self::count_from_now`]); completions after the last window are not counted
    /// in any. Allocates the windows: call it before the run.
    pub fn track_windows(&mut self, window_ns: u64, count: usize) {
        self.stats.window_ns = window_ns.max(1);
        self.stats.windows = vec![Window::default(); count];
    }

    fn window_mut(&mut self, now: u64) -> Option<&mut Window> {
        let i = now.checked_sub(self.count_from_ns)? / self.stats.window_ns.max(1);
        self.stats.windows.get_mut(usize::try_from(i).ok()?)
    }

    /// Starts counting now: forgets what the hosts and the watches measured so far.
    pub fn count_from_now(&mut self) {
        let now = monotonic_ns();
        self.count_from_ns = now;
        self.stats.clear();
        self.watches.count_from(now);
    }

    /// PUTs in flight on every node.
    pub fn puts_in_flight(&self) -> usize {
        self.writers.iter().map(|w| w.slots.len() - w.free.len()).sum()
    }

    /// Runs ticks until `seconds` have passed; `submit` false lets what is in flight
    /// finish without starting more.
    pub fn run_for(&mut self, cluster: &mut InProcess, seconds: f64, submit: bool) -> Result<(), Error> {
        let end = monotonic_ns() + (seconds.max(0.0) * 1e9) as u64;
        while monotonic_ns() < end {
            self.tick(cluster, submit)?;
            if !submit && self.puts_in_flight() == 0 {
                break;
            }
        }
        Ok(())
    }

    /// One round: submit, step the cluster, reap, poll the watches.
    pub fn tick(&mut self, cluster: &mut InProcess, submit: bool) -> Result<(), Error> {
        if submit {
            let now = monotonic_ns();
            for w in 0..self.writers.len() {
                self.submit_puts(w, now)?;
            }
            if self.config.readers {
                for r in 0..self.readers.len() {
                    self.start_reads(r, now);
                }
            }
        }
        for r in &mut self.readers {
            let _ = r.qp.flush();
        }
        cluster.step();
        self.stats.ticks += 1;
        let now = monotonic_ns();
        for w in 0..self.writers.len() {
            self.reap_puts(w, cluster, now)?;
        }
        for r in 0..self.readers.len() {
            self.reap_gets(r, now)?;
            self.recheck_waiting(r, now);
        }
        self.watches.poll(now);
        Ok(())
    }

    /// A watch on `key` ahead in writer `w`'s stream, unless that key is ahead already
    /// or in flight (the earlier write would invalidate the slot first).
    fn open_watch(&mut self, w: usize, key: u64, now: u64) -> Option<WatchId> {
        let writer = &self.writers[w];
        let ahead = (0..writer.upcoming.len()).any(|i| writer.cursor.peek(i) == key);
        let in_flight = writer.slots.iter().flatten().any(|s| s.key_id == key);
        if ahead || in_flight {
            self.watches.unwatched();
            return None;
        }
        self.watches.open(writer.node, key, now)
    }

    /// Moves writer `w` one key on, keeping its upcoming watches in step; returns the
    /// watch of the key it moved past.
    fn advance(&mut self, w: usize, now: u64) -> Option<WatchId> {
        let passed = self.writers[w].upcoming.pop_front().flatten();
        self.writers[w].cursor.advance();
        let lookahead = self.config.lookahead;
        if lookahead > 0 {
            let key = self.writers[w].cursor.peek(lookahead - 1);
            let watch = self.open_watch(w, key, now);
            self.writers[w].upcoming.push_back(watch);
        }
        passed
    }

    /// PUTs a writer may have in flight at `now` (the ramp, then `writer_depth`).
    fn depth_at(&self, now: u64) -> usize {
        let depth = u64::from(self.config.writer_depth.max(1));
        let elapsed = now.saturating_sub(self.started_ns);
        if elapsed >= self.config.ramp_ns {
            return depth as usize;
        }
        (depth * elapsed / self.config.ramp_ns.max(1)).max(1) as usize
    }

    fn submit_puts(&mut self, w: usize, now: u64) -> Result<(), Error> {
        let mut skips = 0;
        let depth = self.depth_at(now);
        let interval = self.config.write_interval_ns;
        while let Some(&index) = self.writers[w].free.last() {
            if self.writers[w].slots.len() - self.writers[w].free.len() >= depth {
                break;
            }
            if interval > 0 && now < self.writers[w].next_due_ns {
                break;
            }
            let key = self.writers[w].cursor.peek(0);
            if self.writers[w].slots.iter().flatten().any(|s| s.key_id == key) {
                if skips == SKIPS_PER_TICK_MAX {
                    break;
                }
                skips += 1;
                self.stats.skipped += 1;
                if let Some(watch) = self.advance(w, now) {
                    self.watches.abandon(watch);
                }
                continue;
            }
            let writer = &mut self.writers[w];
            let mut buf = match writer.host.take_buffer() {
                Ok(buf) => buf,
                Err(ShimError::ArenaExhausted { .. }) => break,
                Err(source) => return Err(Error::Host { node: writer.node, source }),
            };
            let len = self.config.value_bytes.min(buf.capacity());
            let value = &mut buf.value_mut()[..len];
            // The value a KV store would serialise: the key, a sequence number, a body.
            value.fill(writer.seq as u8);
            let head = len.min(16);
            let mut header = [0u8; 16];
            header[..8].copy_from_slice(&key.to_le_bytes());
            header[8..].copy_from_slice(&writer.seq.to_le_bytes());
            value[..head].copy_from_slice(&header[..head]);
            match writer.qp.push(Request::put(&key_bytes(key), buf, len).user_data(u64::from(index))) {
                Ok(()) => {}
                Err((ShimError::RingFull { .. }, _buf)) => break,
                Err((source, _buf)) => return Err(Error::Host { node: writer.node, source }),
            }
            writer.free.pop();
            writer.seq += 1;
            if interval > 0 {
                // Due again one interval on; a writer that fell behind (its depth full)
                // starts again from now rather than catching up in a burst.
                writer.next_due_ns = (writer.next_due_ns + interval).max(now);
            }
            let submitted_ns = monotonic_ns();
            let passed = self.advance(w, now);
            let watch = passed.filter(|&id| self.watches.submitted(id, submitted_ns));
            self.writers[w].slots[index as usize] = Some(PutSlot { key_id: key, submitted_ns, watch });
        }
        let writer = &mut self.writers[w];
        writer.qp.flush().map_err(|source| Error::Host { node: writer.node, source })
    }

    fn reap_puts(&mut self, w: usize, cluster: &InProcess, now: u64) -> Result<(), Error> {
        let mut done = std::mem::take(&mut self.completions);
        done.clear();
        let node = self.writers[w].node;
        self.writers[w].qp.poll(|c| done.push(c)).map_err(|source| Error::Host { node, source })?;
        for c in done.drain(..) {
            let Some(slot) = self.writers[w].slots.get_mut(c.user_data as usize).and_then(Option::take) else {
                continue;
            };
            self.writers[w].free.push(c.user_data as u32);
            let timed = slot.submitted_ns >= self.count_from_ns;
            if c.status != Status::Ok {
                self.stats.puts_failed += 1;
                self.stats.first_failure.get_or_insert(c.status);
                if let Some(win) = self.window_mut(now) {
                    win.puts_failed += 1;
                }
                if let Some(id) = slot.watch {
                    self.watches.abandon(id);
                }
                continue;
            }
            self.stats.puts_ok += 1;
            if timed {
                let latency_ns = now.saturating_sub(slot.submitted_ns);
                self.stats.put_latency.record(latency_ns);
                if c.leased() {
                    self.stats.put_latency_leased.record(latency_ns);
                } else {
                    self.stats.put_latency_unleased.record(latency_ns);
                }
                if let Some(win) = self.window_mut(now) {
                    win.puts_ok += 1;
                    win.put_latency.record(now.saturating_sub(slot.submitted_ns));
                }
            }
            self.newest.record(slot.key_id, c.version);
            if let Some(id) = slot.watch {
                let commit = cluster.node(node).and_then(|n| commit_point(n.stats(), c.version));
                self.watches.completed(id, commit, now);
            }
            if self.config.readers {
                for (r, reader) in self.readers.iter_mut().enumerate() {
                    if r != usize::from(node) {
                        if reader.recent.len() == RECENT_KEYS {
                            reader.recent.pop_front();
                        }
                        reader.recent.push_back(slot.key_id);
                    }
                }
            }
        }
        self.completions = done;
        Ok(())
    }

    fn start_reads(&mut self, r: usize, now: u64) {
        for _ in 0..self.config.reads_per_tick {
            let reader = &mut self.readers[r];
            if reader.free.is_empty() {
                return;
            }
            let fresh_key = reader.rng.below(2) == 0 || reader.history.is_empty();
            let key = match (fresh_key, reader.recent.pop_back()) {
                (true, Some(k)) => k,
                (_, popped) => {
                    if let Some(k) = popped {
                        reader.recent.push_back(k);
                    }
                    match reader.history.len() {
                        0 => return,
                        len => reader.history[reader.rng.below(len as u64) as usize],
                    }
                }
            };
            self.read(r, key, now, now);
        }
    }

    /// Reads `key` on reader `r` through its cache and the directory.
    fn read(&mut self, r: usize, key: u64, began_ns: u64, now: u64) {
        self.stats.reads += 1;
        let check = self.readers[r].host.check_read(&key_bytes(key), now);
        match check {
            ReadCheck::Cached(word) => self.serve_cached(r, key, word, began_ns),
            ReadCheck::Pending(_) if self.readers[r].waiting.len() < WAITING_MAX => {
                self.stats.waited += 1;
                let until_ns = now + self.config.fresh_wait_ns;
                let without_write = !self.in_flight_anywhere(key);
                self.stats.pending_without_write += u64::from(without_write);
                self.readers[r].waiting.push(Waiting { key_id: key, began_ns, until_ns, without_write });
            }
            ReadCheck::Pending(_) => {
                self.stats.pending_without_write += u64::from(!self.in_flight_anywhere(key));
                self.get(r, key, began_ns, None);
            }
            ReadCheck::Miss(token) => self.get(r, key, began_ns, Some(token)),
            ReadCheck::NoLease | ReadCheck::NoDirectory => self.get(r, key, began_ns, None),
        }
    }

    /// Whether some writer has a PUT of `key` in flight.
    fn in_flight_anywhere(&self, key: u64) -> bool {
        self.writers.iter().any(|w| w.slots.iter().flatten().any(|s| s.key_id == key))
    }

    fn serve_cached(&mut self, r: usize, key: u64, word: SlotWord, began_ns: u64) {
        let hit = self.readers[r].cache.lookup(key, word.pack()).map(|hit| {
            // The value names its key: a cache that served another key's bytes would be
            // a bug in this cache.
            debug_assert!(hit.value.len() < 8 || hit.value[..8] == key.to_le_bytes());
            hit.version
        });
        match hit {
            Some(version) => {
                self.stats.cache_hits += 1;
                if self.newest.get(key).is_some_and(|n| n > version) {
                    self.stats.stale_hits += 1;
                }
            }
            // Valid, but not from our refill of this key: ask the DPU app, no refill
            // (refilling needs an Invalid word).
            None => self.get(r, key, began_ns, None),
        }
    }

    fn get(&mut self, r: usize, key: u64, began_ns: u64, token: Option<RefillToken>) {
        let reader = &mut self.readers[r];
        let Some(&index) = reader.free.last() else { return };
        let Ok(buf) = reader.host.take_buffer() else { return };
        if reader.qp.push(Request::get(&key_bytes(key), buf).user_data(u64::from(index))).is_ok() {
            reader.free.pop();
            reader.gets[index as usize] = Some(GetSlot { key_id: key, began_ns, token });
        }
    }

    fn recheck_waiting(&mut self, r: usize, now: u64) {
        let mut i = 0;
        while i < self.readers[r].waiting.len() {
            let w = self.readers[r].waiting[i];
            let check = self.readers[r].host.check_read(&key_bytes(w.key_id), now);
            if matches!(check, ReadCheck::Pending(_)) && now < w.until_ns {
                i += 1;
                continue;
            }
            if w.without_write {
                self.stats.pending_without_write_wait.record(now.saturating_sub(w.began_ns));
            }
            // The wait ended: on to the read's next step.
            match check {
                ReadCheck::Pending(_) => {
                    self.stats.wait_timeouts += 1;
                    self.readers[r].waiting.swap_remove(i);
                    self.get(r, w.key_id, w.began_ns, None);
                }
                ReadCheck::Cached(word) => {
                    self.readers[r].waiting.swap_remove(i);
                    self.serve_cached(r, w.key_id, word, w.began_ns);
                }
                ReadCheck::Miss(token) => {
                    self.readers[r].waiting.swap_remove(i);
                    self.get(r, w.key_id, w.began_ns, Some(token));
                }
                ReadCheck::NoLease | ReadCheck::NoDirectory => {
                    self.readers[r].waiting.swap_remove(i);
                    self.get(r, w.key_id, w.began_ns, None);
                }
            }
        }
    }

    fn reap_gets(&mut self, r: usize, now: u64) -> Result<(), Error> {
        let mut done = std::mem::take(&mut self.completions);
        done.clear();
        let reader = &mut self.readers[r];
        reader.qp.poll(|c| done.push(c)).map_err(|source| Error::Host { node: r as u8, source })?;
        for c in done.drain(..) {
            let Some(slot) = reader.gets.get_mut(c.user_data as usize).and_then(Option::take) else { continue };
            reader.free.push(c.user_data as u32);
            let buf = reader.qp.take_value(&c);
            self.stats.get_latency.record(now.saturating_sub(slot.began_ns));
            match c.status {
                Status::Ok => {
                    self.stats.gets_ok += 1;
                    let value: &[u8] = buf.as_deref().unwrap_or_default();
                    // Only a value no newer write is deciding may refill (a Valid slot
                    // would otherwise serve it after that write commits).
                    if let Some(token) = slot.token.filter(|_| c.may_refill()) {
                        // The entry first (unservable until the refill takes), then the refill.
                        let tag = SlotWord { state: SlotState::Valid, ..SlotWord::unpack(token.word) }.pack();
                        reader.cache.fill(slot.key_id, tag, c.version, value);
                        if reader.host.refill_at(token, now) {
                            self.stats.refills += 1;
                        } else {
                            reader.cache.forget(slot.key_id);
                        }
                    }
                    if reader.history.len() < HISTORY_KEYS {
                        reader.history.push(slot.key_id);
                    } else {
                        reader.history[reader.history_next] = slot.key_id;
                        reader.history_next = (reader.history_next + 1) % HISTORY_KEYS;
                    }
                }
                Status::NotFound => self.stats.gets_not_found += 1,
                _ => self.stats.gets_failed += 1,
            }
        }
        self.completions = done;
        Ok(())
    }
}

/// The commit point of the write stamped `stamp` in `stats`' commit log, searching the
/// newest [`COMMIT_SCAN_MAX`] entries.
pub fn commit_point(stats: &NodeStats, stamp: u64) -> Option<u64> {
    let log = &stats.commit_log;
    let len = log.len();
    if len == 0 {
        return None;
    }
    let newest = (stats.commit_log_next + len - 1) % len;
    (0..len.min(COMMIT_SCAN_MAX)).map(|back| log[(newest + len - back) % len]).find(|e| e.0 == stamp).map(|e| e.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_commit_point_is_found_in_the_ring_newest_first() {
        let mut stats = NodeStats::new(5);
        assert_eq!(commit_point(&stats, 7), None);
        for i in 0..10u64 {
            stats.record_commit(0x100 + i, 1_000 + i);
        }
        assert_eq!(commit_point(&stats, 0x105), Some(1_005));
        assert_eq!(commit_point(&stats, 0x200), None);
        // Once the ring wraps, the newest entries are still found.
        for i in 0..COMMIT_LOG_ENTRIES as u64 {
            stats.record_commit(0x1_0000 + i, 5_000 + i);
        }
        let last = 0x1_0000 + COMMIT_LOG_ENTRIES as u64 - 1;
        assert_eq!(commit_point(&stats, last), Some(5_000 + COMMIT_LOG_ENTRIES as u64 - 1));
        assert_eq!(commit_point(&stats, 0x105), None, "overwritten");
    }

    #[test]
    fn the_newest_table_keeps_the_highest_stamp_per_key() {
        let mut n = Newest::new();
        assert_eq!(n.get(3), None);
        n.record(3, 0x500);
        n.record(3, 0x400);
        assert_eq!(n.get(3), Some(0x500));
        n.record(3, 0x600);
        assert_eq!(n.get(3), Some(0x600));
    }
}
