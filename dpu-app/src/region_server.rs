//! Serving one host's region: attach (and recover a dead predecessor's requests),
//! take requests from its queue pairs and complete them, watch the host, and reclaim
//! a dead host's buffers.
//!
//! A region is a failure domain. Whatever its host writes, it can fence its own queue
//! pairs or have its region refused at attach, never stop the others: every word this
//! DPU app owns (heartbeat, served generation, ring heads and tails, the doorbells)
//! is kept here and only ever stored to the region; a word the host writes is read
//! once per batch and checked; a violation fences that queue pair in O(1); and each
//! turn serves a bounded number of descriptors (see [`crate::limits`]).

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use prescient_shim::arena::{self, BufferState};
use prescient_shim::completion::CompletionEntry;
use prescient_shim::config::COMPLETION_BYTES;
use prescient_shim::descriptor::{Checked, Descriptor, OpCode};
use prescient_shim::host::process_alive;
use prescient_shim::layout::header;
use prescient_shim::liveness::Watch;
use prescient_shim::queue::{FenceReason, QueueWords};
use prescient_shim::region::Region;
use prescient_shim::ring::RingMemory;
use prescient_shim::Status;

use crate::door::{Door, Line};
use crate::limits::{HOST_CHECK_PERIOD_MS, REGION_TURN_DESCRIPTORS, TAKE_OVER_INTERVAL_MS};
use crate::metrics::{Metrics, OpKind};
use crate::queue::{Accepted, Outcome, QueueServer, Room};
use crate::Error;

const HOST_CHECK_PERIOD: Duration = Duration::from_millis(HOST_CHECK_PERIOD_MS);
const TAKE_OVER_INTERVAL: Duration = Duration::from_millis(TAKE_OVER_INTERVAL_MS);

/// The DPU end of one region.
#[derive(Debug)]
pub struct RegionServer {
    region: Arc<Region>,
    queues: Vec<QueueServer>,
    /// The checks every descriptor passes, the in-flight table, refusal counts and
    /// log limits: kept across host take-overs.
    door: Door,
    host: Watch,
    host_checked: Instant,
    /// Whether the host's heartbeat is silent past the timeout while its process
    /// lives (counted once per stall).
    host_stalled: bool,
    /// When the last new host generation was taken over (`None`: never).
    taken_over: Option<Instant>,
    /// The host generation being served; `None` while the host is dead.
    serving: Option<u32>,
    /// The generation last acknowledged in the region (our copy: never read back).
    served: u32,
    /// This DPU app's heartbeat as last stored (our copy: never read back).
    beats: u64,
    /// The DPU epoch this attach bumped the region to.
    epoch: u32,
    /// The region file shrank under the mapping: fenced off for good (the mapping is
    /// zeroed private memory now, see `prescient_shim::region_guard`).
    lost: bool,

    /// Scratch for one queue pair's batch of a take (allocated once).
    batch: Vec<Accepted>,
    /// Where the next `take` starts, so no queue pair starves the others.
    next_queue: usize,
}

/// A request accepted from one host generation: completing it after that host died or
/// was replaced only frees its buffer.
#[derive(Clone, Copy, Debug)]
pub struct Taken {
    /// The request.
    pub accepted: Accepted,
    /// The host generation it came from.
    pub generation: u32,
}

impl RegionServer {
    /// Maps the region at `path`, claims it for this process and recovers whatever a
    /// dead predecessor left: requests it took but did not complete are failed with
    /// [`Status::DpuRestarted`], and buffers it held go back to the arena.
    pub fn attach(path: &Path, pin: bool, host_timeout: Duration, metrics: &mut Metrics) -> Result<Self, Error> {
        let region = Region::open(path, pin).map_err(|source| Error::Attach { path: path.into(), source })?;
        // Guarded before the first access past the header: a host that truncates its
        // file then loses its region, not every tenant its DPU app.
        if !region.guard() {
            tracing::warn!(region = %path.display(), "cannot guard the region's mapping: a host truncating its file would stop this DPU app");
        }
        let region = Arc::new(region);
        let me = std::process::id();
        let pid_word = region.u32_at(header::DPU_PID);
        let other = pid_word.load(Ordering::Acquire);
        if other != 0 && other != me && process_alive(other) {
            return Err(Error::AlreadyServed { path: path.into(), pid: other });
        }
        pid_word.store(me, Ordering::Release);
        // Read once, here: from now on the epoch, heartbeat and served generation are
        // ours, kept in this struct and only stored.
        let epoch = region.u32_at(header::DPU_EPOCH).fetch_add(1, Ordering::AcqRel).wrapping_add(1);
        let beats = region.u64_at(header::DPU_HEARTBEAT).load(Ordering::Relaxed);
        let served = region.u32_at(header::DPU_SERVED_GENERATION).load(Ordering::Acquire);
        let config = region.layout().config;
        let now = Instant::now();
        let mut server = Self {
            queues: (0..config.queue_pairs).map(|qp| QueueServer::new(QueueWords::new(region.clone(), qp))).collect(),
            door: Door::new(&config),
            host: Watch::new(region.u64_at(header::HOST_HEARTBEAT), host_timeout, now),
            host_checked: now,
            host_stalled: false,
            taken_over: None,
            serving: None,
            served,
            beats,
            epoch,
            lost: false,
            batch: Vec::with_capacity(prescient_shim::config::BATCH_MAX as usize),
            next_queue: 0,
            region,
        };
        let generation = server.region.u32_at(header::HOST_GENERATION).load(Ordering::Acquire);
        if generation == served {
            server.recover(path, metrics);
            server.serving = Some(generation);
        } else {
            // A new host attached while no DPU app ran: the old host's requests have no
            // one to complete to. Drop them; the new host waits for our acknowledgement.
            server.take_over_host(generation, now, metrics);
        }
        tracing::info!(region = %path.display(), epoch, generation, "attached");
        Ok(server)
    }

    /// Fails every request the predecessor took without completing. A queue pair whose
    /// journal or rings make no sense is fenced off (its host sees why), naming the
    /// region; the region's other queue pairs, and other regions, are served.
    fn recover(&mut self, path: &Path, metrics: &mut Metrics) {
        let entries = self.region.layout().config.ring_entries;
        // Scratch, allocated once per attach: how many of the predecessor's completion
        // entries start (+1) and end (-1) at each offset from the head, whose running
        // sum says whether the request at that offset of [head, taken) completed.
        let mut edges = vec![0i32; entries as usize + 1];
        for q in &mut self.queues {
            if q.fenced() {
                continue;
            }
            let words = q.words().clone();
            let head = words.sq_head().load(Ordering::Acquire);
            let taken = words.sq_taken().load(Ordering::Acquire);
            let pending = taken.wrapping_sub(head);
            let fence = |q: &mut QueueServer,
                         door: &mut Door,
                         metrics: &mut Metrics,
                         why: (FenceReason, u32),
                         what: String| {
                let (reason, detail) = why;
                tracing::error!(region = %path.display(), qp = words.index(), "{what}; fencing the queue pair off (the host re-attaching clears it)");
                q.fence(reason, detail.into(), door, metrics);
            };
            if pending > entries {
                let what = format!("taken index {taken} is {pending} past head {head}, more than {entries} entries");
                fence(q, &mut self.door, metrics, (FenceReason::Journal, taken), what);
                continue;
            }
            if pending == 0 {
                continue;
            }
            let completions = words.completions();
            let cq_tail = words.cq_tail().load(Ordering::Acquire);
            // Completions the predecessor published: the last `entries` slots, each
            // counted only if it was written at the index its position implies, for the
            // requests of its run that fall in [head, taken). O(entries), whatever runs
            // a hostile host wrote over the ring: each entry is two edges, not a walk.
            edges.fill(0);
            for back in 1..=entries {
                let at = cq_tail.wrapping_sub(back);
                let bytes: [u8; COMPLETION_BYTES] = completions.read_slot(at & (entries - 1));
                let Ok(c) = CompletionEntry::parse_checked(&bytes) else { continue };
                // Signed distance from the head (a run cannot span 2^31 indices).
                let start = i64::from(c.sq_index.wrapping_sub(head) as i32);
                let (lo, hi) = (start.max(0), (start + i64::from(c.count)).min(pending.into()));
                if c.cq_index == at && lo < hi {
                    edges[lo as usize] += 1;
                    edges[hi as usize] -= 1;
                }
            }
            let submissions = words.submissions();
            let mut failed = 0;
            let mut no_room = false;
            let mut covered = 0i32;
            for (offset, index) in (0..pending).map(|i| (i, head.wrapping_add(i))) {
                covered += edges[offset as usize];
                if covered > 0 {
                    continue;
                }
                let bytes = submissions.read_slot(index & (entries - 1));
                // Its buffer goes back, whether the predecessor had accepted it (Dpu)
                // or not yet (Submitted): a GET's to the host, which takes it back with
                // the completion, any other to the arena.
                if let Ok(Checked { desc, buffer: Some(buffer) }) = Descriptor::parse_checked(&bytes, self.door.shape())
                {
                    let cell = self.region.u32_at(self.region.layout().buffer_state(buffer));
                    let to = if desc.op == OpCode::Get { BufferState::Host } else { BufferState::Free };
                    for from in [BufferState::Dpu, BufferState::Submitted] {
                        if arena::transition(cell, desc.buffer_gen, from, to).is_ok() {
                            metrics.buffers_reclaimed += 1;
                        }
                    }
                }
                if q.completion_room(&mut self.door, metrics) == 0 {
                    no_room = true;
                    break;
                }
                q.post(CompletionEntry::one(index, Status::DpuRestarted, bytes[0]));
                metrics.by_op[OpKind::of_byte(bytes[0]) as usize].count(Status::DpuRestarted);
                failed += 1;
            }
            q.publish_completions();
            metrics.restart_failed += failed;
            if q.fenced() {
                continue;
            }
            if no_room {
                let what = "no completion slot free to fail a predecessor's request".to_string();
                fence(q, &mut self.door, metrics, (FenceReason::CompletionHead, 0), what);
                continue;
            }
            if let Err(e) = q.submissions().skip_to(taken) {
                let what = format!("cannot skip to the taken index {taken}: {e}");
                fence(q, &mut self.door, metrics, (FenceReason::for_submission(&e), e.index()), what);
                continue;
            }
            q.submissions().release();
            tracing::warn!(region = %path.display(), qp = words.index(), failed, "failed requests a dead predecessor took");
        }
        // Nothing is in flight in this process yet: any buffer marked Dpu was the
        // predecessor's.
        metrics.buffers_reclaimed += self.reclaim(&[BufferState::Dpu]);
    }

    /// Frees every host buffer in one of `states` that this process does not hold.
    fn reclaim(&mut self, states: &[BufferState]) -> u64 {
        let layout = *self.region.layout();
        let mut freed = 0;
        for index in 0..layout.config.host_buffers {
            if self.door.inflight().contains(index) {
                continue;
            }
            let cell = self.region.u32_at(layout.buffer_state(index));
            let word = cell.load(Ordering::Acquire);
            if BufferState::of(word).is_none_or(|s| states.contains(&s))
                && cell
                    .compare_exchange(
                        word,
                        arena::word(arena::generation(word), BufferState::Free),
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            {
                freed += 1;
            }
        }
        freed
    }

    /// Drops the previous host's unconsumed requests, reclaims its buffers and
    /// acknowledges host `generation`.
    ///
    /// Each queue pair starts empty for the new host: its submission tail is set to
    /// this server's head, and its fence cleared. The new host's producer starts from
    /// the shared tail it finds (`Producer::new`), so a tail the old host left where
    /// this server cannot skip to (moved backwards or past capacity: scribbled before
    /// the re-attach) would otherwise be the new host's start: its first honest
    /// submission then reads as a tail moved backwards (or past capacity), and the
    /// queue pair is fenced again at once. Storing a word the host owns is safe here
    /// only: the old host is gone and the new one submits nothing before it sees the
    /// acknowledgement stored after this. What the new host does after that is
    /// checked as ever: a tail it moves backwards fences the queue pair.
    fn take_over_host(&mut self, generation: u32, now: Instant, metrics: &mut Metrics) {
        for q in &mut self.queues {
            let words = q.words().clone();
            let tail = words.sq_tail().load(Ordering::Acquire);
            let sq = q.submissions();
            // Drop whatever the old host published that is plausible; a hostile tail
            // stays where we are (the reset below drops it all the same).
            if sq.skip_to(tail).is_ok() {
                sq.release();
            }
            let head = sq.head();
            words.sq_taken().store(head, Ordering::Release);
            // Release, with the acknowledgement's Release below: the new host's
            // producer, started after it sees the acknowledgement, reads this tail.
            words.sq_tail().store(head, Ordering::Release);
            words.fence_reason().store(0, Ordering::Release);
            *q = q.for_new_host();
        }
        // Requests of the old host still in flight (a write waiting for its holders)
        // complete by buffer only (see `complete`); every other buffer goes back.
        metrics.buffers_reclaimed += self.reclaim(&[BufferState::Host, BufferState::Submitted, BufferState::Dpu]);
        self.host = Watch::new(self.region.u64_at(header::HOST_HEARTBEAT), self.host.timeout(), now);
        self.served = generation;
        self.region.u32_at(header::DPU_SERVED_GENERATION).store(generation, Ordering::Release);
        self.serving = Some(generation);
        self.taken_over = Some(now);
        if let Some(left_out) = self.door.log(Line::TakeOver) {
            tracing::info!(region = %self.region.path().display(), generation, left_out, "serving a new host");
        }
    }

    /// Refuses PUT values above `max` bytes at the door (a limit the caller worked
    /// out for its own write path, e.g. a cluster's `value_bytes_max`).
    pub fn limit_put_values_to(&mut self, max: u32) {
        self.door.limit_put_values(max);
    }

    /// The door: descriptors refused, the PUT value limit.
    pub fn door(&self) -> &Door {
        &self.door
    }

    /// The DPU epoch this attach bumped the region to.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// The region.
    pub fn region(&self) -> &Arc<Region> {
        &self.region
    }

    /// Whether some queue pair has work (one shared read each).
    pub fn has_work(&self) -> bool {
        self.serving.is_some() && self.queues.iter().any(QueueServer::has_work)
    }

    /// Takes the requests `room` has room for from the queue pairs, round robin, into
    /// `out` (never past the capacity the caller reserved); each must be completed with
    /// [`RegionServer::complete`]. Refused descriptors and NOPs complete at once.
    /// Returns the descriptors taken: at most [`REGION_TURN_DESCRIPTORS`] a call, from
    /// the queue pair after the one the last call started at, so a region whose every
    /// queue pair is full costs the other regions one bounded turn per round.
    pub fn take(&mut self, room: Room, out: &mut Vec<Taken>, metrics: &mut Metrics) -> u32 {
        // One atomic load: a SIGBUS recovered since the last look fences the region now.
        if self.region.lost() {
            self.fence_region(None);
        }
        let Some(generation) = self.serving else { return 0 };
        // The batch of one queue pair holds at most BATCH_MAX, and `out` what the
        // caller reserved: neither grows.
        let mut room = Room { requests: room.requests.min((out.capacity() - out.len()) as u32), ..room };
        let queues = self.queues.len();
        let mut taken = 0;
        for i in 0..queues {
            let want = REGION_TURN_DESCRIPTORS.saturating_sub(taken);
            if want == 0 {
                break;
            }
            let q = (self.next_queue + i) % queues;
            self.batch.clear();
            taken += self.queues[q].take(&self.region, &mut self.door, want, &mut room, &mut self.batch, metrics);
            out.extend(self.batch.drain(..).map(|accepted| Taken { accepted, generation }));
        }
        self.next_queue = (self.next_queue + 1) % queues.max(1);
        taken
    }

    /// Completes a request taken earlier (posted, not yet published: see
    /// [`RegionServer::flush`]). If its host has died or been replaced since, only the
    /// buffer goes back to the arena.
    pub fn complete(&mut self, taken: &Taken, outcome: Outcome, metrics: &mut Metrics) {
        let a = &taken.accepted;
        if self.serving == Some(taken.generation) {
            self.queues[a.qp as usize].complete(&self.region, &mut self.door, a, outcome, metrics);
        } else {
            let cell = self.region.u32_at(self.region.layout().buffer_state(a.buffer));
            let _ = arena::transition(cell, a.desc.buffer_gen, BufferState::Dpu, BufferState::Free);
            self.door.inflight_mut().remove(a.buffer);
        }
    }

    /// Publishes posted completions of every queue pair and releases their rings.
    pub fn flush(&mut self) {
        for q in &mut self.queues {
            q.flush();
        }
    }

    /// Looks at the host at most every few milliseconds: a dead host's buffers are
    /// reclaimed and its queues dropped; a new host is taken over (at most once per
    /// [`TAKE_OVER_INTERVAL_MS`]: each take-over walks every buffer of the region).
    pub fn watch_host(&mut self, now: Instant, metrics: &mut Metrics) {
        if now.saturating_duration_since(self.host_checked) < HOST_CHECK_PERIOD {
            return;
        }
        self.host_checked = now;
        if self.lost {
            return;
        }
        // Before any word is read: a file shrunk under the mapping is fenced while
        // nothing has touched the missing pages yet (the guard covers a truncate that
        // lands after this look).
        // (fstat of a descriptor we hold open does not fail in practice; if it did,
        // the guard is left to catch a shrink.)
        let shrunk = self.region.check_size().ok().flatten();
        if shrunk.is_some() || self.region.lost() {
            self.fence_region(shrunk);
            return;
        }
        let generation = self.region.u32_at(header::HOST_GENERATION).load(Ordering::Acquire);
        if self.serving.is_some_and(|g| g != generation) || (self.serving.is_none() && generation != self.served) {
            if self.taken_over.is_none_or(|at| now.saturating_duration_since(at) >= TAKE_OVER_INTERVAL) {
                self.take_over_host(generation, now, metrics);
            }
            return;
        }
        if self.serving.is_none() {
            return;
        }
        let pid = self.region.u32_at(header::HOST_PID).load(Ordering::Acquire);
        let silent = self.host.check(self.region.u64_at(header::HOST_HEARTBEAT), now);
        // The host's pid says whether it lives only if it is a pid of our kernel and
        // namespace (the emulation; not a host beside a BlueField): then a silent
        // heartbeat with a live process is a stall - its buffers and requests stay
        // its own - and an exited process is gone at once. Elsewhere the heartbeat
        // decides.
        let space = self.region.u64_at(header::HOST_PID_SPACE).load(Ordering::Acquire);
        let pid_visible = space != 0 && space == prescient_shim::liveness::pid_space();
        let dead = pid == 0 || if pid_visible { !process_alive(pid) } else { silent.is_err() };
        let stalled = !dead && silent.is_err();
        if stalled && !self.host_stalled {
            metrics.host_stalls += 1;
            if let Some(left_out) = self.door.log(Line::HostStalled) {
                let silent_ms = silent.err().map_or(0, |d| d.as_millis() as u64);
                tracing::warn!(
                    region = %self.region.path().display(),
                    pid,
                    silent_ms,
                    left_out,
                    "host heartbeat silent past the timeout but its process lives (a starved or stopped host); keeping its buffers"
                );
            }
        }
        self.host_stalled = stalled;
        if dead {
            let freed = self.reclaim(&[BufferState::Host, BufferState::Submitted]);
            metrics.host_deaths += 1;
            metrics.buffers_reclaimed += freed;
            if let Some(left_out) = self.door.log(Line::HostGone) {
                tracing::warn!(region = %self.region.path().display(), pid, freed, left_out, "host is gone; reclaimed its buffers");
            }
            self.serving = None;
        }
    }

    /// Stops serving the region for good: its file shrank under the mapping (to
    /// `bytes`, if a size check found it), which is zeroed private memory now. Requests
    /// of its host still in flight complete by buffer only, into that memory; the
    /// host sees the DPU app's heartbeat stop. Every other region is served on.
    fn fence_region(&mut self, bytes: Option<u64>) {
        if self.lost {
            return;
        }
        self.lost = true;
        self.serving = None;
        let mapped = self.region.layout().region_bytes;
        let found = bytes.map_or_else(|| "shorter".to_string(), |b| format!("{b} bytes"));
        tracing::error!(
            region = %self.region.path().display(),
            "region file is {found}, under its {mapped}-byte mapping (its host truncated it): region fenced off and no longer served; the host must create its region anew"
        );
    }

    /// Whether the region was fenced off because its file shrank under the mapping.
    pub fn lost(&self) -> bool {
        self.lost
    }

    /// Detaches cleanly (a successor need not wait for our heartbeat to stop).
    pub fn detach(&self) {
        if self.lost {
            return;
        }
        let _ = self.region.u32_at(header::DPU_PID).compare_exchange(
            std::process::id(),
            0,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }

    /// Bumps this DPU app's heartbeat in the region (from our own count: the shared
    /// word is only stored, so a host that scribbles it changes nothing we keep).
    pub fn beat(&mut self) {
        if self.lost {
            return;
        }
        self.beats = self.beats.wrapping_add(1);
        self.region.u64_at(header::DPU_HEARTBEAT).store(self.beats, Ordering::Release);
    }

    /// Buffers this DPU app holds now.
    pub fn in_flight(&self) -> u32 {
        self.door.inflight().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prescient_shim::{Host, HostOptions, RegionConfig};

    #[test]
    fn a_region_flooding_every_queue_pair_gets_one_bounded_turn_per_take() {
        let path = std::env::temp_dir().join(format!("prescient-turn-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let config = RegionConfig {
            queue_pairs: 8,
            ring_entries: 256,
            host_buffers: 8,
            dpu_buffers: 0,
            buffer_bytes: 4096,
            directory_slots: 0,
        };
        let host = Host::create(&path, config, HostOptions { pin: false, ..HostOptions::default() }).unwrap();
        let mut metrics = Metrics::default();
        let mut server = RegionServer::attach(&path, false, Duration::from_secs(10), &mut metrics).unwrap();
        // Every queue pair full of NOPs: 8 x 256 descriptors ready.
        let mut qps: Vec<_> = (0..8).map(|i| host.queue_pair(i).unwrap()).collect();
        for qp in &mut qps {
            for tag in 0..256 {
                qp.push_nop(tag).unwrap();
            }
            qp.flush().unwrap();
        }
        let mut out = Vec::with_capacity(REGION_TURN_DESCRIPTORS as usize);
        let total = 8 * 256;
        let mut served = 0;
        let mut turns = 0;
        while served < total {
            let done = server.take(Room::any(u32::MAX), &mut out, &mut metrics);
            assert!(out.is_empty(), "NOPs complete at the door");
            assert!(done > 0 && done <= REGION_TURN_DESCRIPTORS, "turn {turns} took {done}");
            served += done;
            turns += 1;
            // The host drains its completions so the flood keeps being served.
            for qp in &mut qps {
                qp.poll(|_| ()).unwrap();
            }
        }
        assert_eq!(served, total);
        assert!(turns >= total.div_ceil(REGION_TURN_DESCRIPTORS), "{turns} turns");
        drop(server);
        let _ = std::fs::remove_file(&path);
    }
}
