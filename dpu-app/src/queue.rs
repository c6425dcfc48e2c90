//! Serving one queue pair: take descriptors, check them, hand each accepted request
//! to the caller, and post its completion whenever it is done.
//!
//! The host is untrusted. Each descriptor is copied out of the ring once and checked
//! on the copy; a bad field becomes an error completion for that request alone. A ring
//! index that moves backwards or past capacity fences this queue pair off (the host
//! sees why in the fence word) while every other queue pair keeps being served.
//!
//! Requests may complete out of order (a replicated write waits for the network while
//! a later NOP completes at once). The submission ring's head is released to the host
//! only up to the oldest request still open, so a successor that finds this DPU app
//! dead can still read every request it took and did not complete (see
//! `region_server::recover`). A completion slot is reserved for every accepted request
//! when it is taken, so completing never waits for the host.
//!
//! Completions are coalesced before they are published: a completion that follows the
//! last one posted (the next submission index, the same outcome) widens that entry
//! instead of taking a slot of its own, so a batch of NOPs, or of requests refused for
//! one reason, is one entry. The entry being widened is kept here and written to the
//! ring only when the next one cannot join it or the batch is published; the host never
//! sees a slot change under it.

use std::sync::atomic::{fence, Ordering};

use prescient_shim::arena::{self, BufferState};
use prescient_shim::config::{BATCH_MAX, DESCRIPTOR_BYTES, KEY_BYTES_MAX};
use prescient_shim::descriptor::{Descriptor, OpCode};
use prescient_shim::queue::{Completions, FenceReason, QueueWords, Submissions};
use prescient_shim::region::Region;
use prescient_shim::ring::{Consumer, Producer, RingMemory};
use prescient_shim::{sys, CompletionEntry, Status};

use crate::door::{Door, Line};
use crate::metrics::Metrics;

/// A request taken from a queue pair and accepted: its buffer is held by the DPU app
/// (ownership word `Dpu`, private in-flight table) until [`QueueServer::complete`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// Queue pair it came from.
    pub qp: u32,
    /// Its free-running submission index.
    pub sq_index: u32,
    /// The checked descriptor.
    pub desc: Descriptor,
    /// The host buffer it names.
    pub buffer: u32,
}

/// How a request ends: its status, the version it got and the op-specific detail
/// (an error's offending value, a GET's value length).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Status for the host.
    pub status: Status,
    /// Version the write was given or the value read has (0 if none).
    pub version: u64,
    /// Error detail or value length.
    pub detail: u32,
    /// Completion flags (a GET's `FLAG_NEWER_PENDING`, a write's `FLAG_LEASED`).
    pub flags: u8,
}

impl Outcome {
    /// Success with `version`.
    pub fn ok(version: u64) -> Self {
        Self { status: Status::Ok, version, detail: 0, flags: 0 }
    }

    /// Failure with `status`.
    pub fn failed(status: Status, detail: u32) -> Self {
        Self { status, version: 0, detail, flags: 0 }
    }
}

/// The DPU end of one queue pair.
#[derive(Debug)]
pub struct QueueServer {
    words: QueueWords,
    sq: Consumer<Submissions>,
    cq: Producer<Completions>,
    fenced: bool,
    /// Submission slots taken and not completed yet (indexed by `sq_index % entries`).
    open: Vec<bool>,
    /// Accepted requests not completed yet (each holds a reserved completion slot).
    outstanding: u32,
    /// Completion entries posted and not published (the open run included).
    posted: u32,
    /// The entry being widened, not written to the ring yet: its slot is the next one
    /// (the room for it is kept free, see [`QueueServer::completion_room`]).
    run: Option<CompletionEntry>,
    /// The completion doorbell's value as this server last bumped it: the word is the
    /// host's to scribble, so it is only ever stored, never read back.
    doorbell: u32,
    /// A take's private copies of the descriptors it looks at.
    copies: Box<[[u8; DESCRIPTOR_BYTES]; BATCH_MAX as usize]>,
}

/// How many requests the caller can start now, by kind and in all: a take stops
/// before the first write or GET that has no room left (NOPs, and descriptors refused
/// at once, need none). A descriptor is counted before it is checked, so a malformed
/// PUT uses a write's room for the take it arrives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Room {
    /// PUTs and DELETEs.
    pub writes: u32,
    /// GETs.
    pub gets: u32,
    /// Requests of either kind (what the caller's list of taken requests holds).
    pub requests: u32,
}

impl Room {
    /// Room for `requests` requests of any kind.
    pub fn any(requests: u32) -> Room {
        Room { writes: requests, gets: requests, requests }
    }

    /// Debits the room of a descriptor whose op byte is `op`, if it has one; false if
    /// it has none.
    fn admit(&mut self, op: u8) -> bool {
        let left = match op {
            x if x == OpCode::Put as u8 || x == OpCode::Delete as u8 => &mut self.writes,
            x if x == OpCode::Get as u8 => &mut self.gets,
            _ => return true,
        };
        if *left == 0 || self.requests == 0 {
            return false;
        }
        *left -= 1;
        self.requests -= 1;
        true
    }
}

impl QueueServer {
    /// Takes over the DPU end of `words` where the shared indices stand, fenced if a
    /// predecessor fenced it (the fence word is read once, here).
    pub fn new(words: QueueWords) -> Self {
        let fenced = words.fence_reason().load(Ordering::Acquire) != 0;
        Self::with_fence(words, fenced)
    }

    /// Serves the same queue pair for a new host: not fenced, whatever the fence word
    /// says (the caller clears it), and continuing from this server's own submission
    /// head and completion tail, which are published again: the shared copies are the
    /// host's to scribble and are not read back.
    pub fn for_new_host(&self) -> Self {
        let words = self.words.clone();
        let sq = Consumer::resume(words.submissions(), self.sq.head());
        let cq = Producer::resume(words.completions(), self.cq.tail());
        Self::with_rings(words, sq, cq, false)
    }

    fn with_fence(words: QueueWords, fenced: bool) -> Self {
        let sq = Consumer::new(words.submissions());
        let cq = Producer::new(words.completions());
        Self::with_rings(words, sq, cq, fenced)
    }

    fn with_rings(words: QueueWords, sq: Consumer<Submissions>, cq: Producer<Completions>, fenced: bool) -> Self {
        let entries = words.submissions().entries();
        Self {
            sq,
            cq,
            doorbell: words.cq_doorbell().load(Ordering::Relaxed),
            words,
            fenced,
            open: vec![false; entries as usize],
            outstanding: 0,
            posted: 0,
            run: None,
            copies: Box::new([[0; DESCRIPTOR_BYTES]; BATCH_MAX as usize]),
        }
    }

    /// The queue pair's words.
    pub fn words(&self) -> &QueueWords {
        &self.words
    }

    /// Whether this queue pair has been fenced off.
    pub fn fenced(&self) -> bool {
        self.fenced
    }

    /// Accepted requests not completed yet.
    pub fn outstanding(&self) -> u32 {
        self.outstanding
    }

    /// The submission consumer (restart recovery moves it).
    pub fn submissions(&mut self) -> &mut Consumer<Submissions> {
        &mut self.sq
    }

    /// Fences the queue pair off for `reason` (O(1): nothing is walked).
    pub fn fence(&mut self, reason: FenceReason, detail: u64, door: &mut Door, metrics: &mut Metrics) {
        if let Some(left_out) = door.log(Line::Fence) {
            let region = self.words.region().path().display().to_string();
            tracing::error!(
                region,
                qp = self.words.index(),
                reason = reason.describe(),
                detail,
                left_out,
                "fencing queue pair off"
            );
        }
        self.words.fence_detail().store(detail, Ordering::Relaxed);
        // Release: the detail is visible before the reason that makes the host look.
        self.words.fence_reason().store(reason as u32, Ordering::Release);
        self.fenced = true;
        metrics.fences += 1;
        door.count_fence();
        self.wake_host();
    }

    /// Whether the host has published descriptors not yet taken (one shared read).
    pub fn has_work(&self) -> bool {
        !self.fenced && self.words.sq_tail().load(Ordering::Relaxed) != self.sq.head()
    }

    /// Posts the completion of one request (`entry.count` is 1; the caller checked there
    /// is room) without publishing: it joins the open run if it extends it.
    pub fn post(&mut self, entry: CompletionEntry) {
        debug_assert_eq!(entry.count, 1);
        if let Some(run) = &mut self.run {
            if run.extends_to(&entry) {
                run.count += 1;
                return;
            }
            let run = *run;
            self.write(run);
        }
        self.run = Some(entry);
        self.posted += 1;
    }

    /// Writes `entry` into the next completion slot (room was checked for it).
    fn write(&mut self, entry: CompletionEntry) {
        let mut bytes = [0u8; prescient_shim::config::COMPLETION_BYTES];
        CompletionEntry { cq_index: self.cq.tail(), ..entry }.emit(&mut bytes);
        assert!(self.cq.push(&bytes), "caller checked completion room");
    }

    /// Completion slots free for new entries (rereads the host's head): the open
    /// run's slot is not among them. A head out of bounds fences.
    pub fn completion_room(&mut self, door: &mut Door, metrics: &mut Metrics) -> u32 {
        match self.cq.refresh() {
            Ok(free) => free.saturating_sub(u32::from(self.run.is_some())),
            Err(e) => {
                self.fence(FenceReason::CompletionHead, e.index().into(), door, metrics);
                0
            }
        }
    }

    /// Publishes posted completions and wakes the host if it sleeps.
    pub fn publish_completions(&mut self) {
        if let Some(run) = self.run.take() {
            self.write(run);
        }
        self.cq.publish();
        self.posted = 0;
        // SeqCst: the completion tail is visible before we read the host's waiting flag;
        // pairs with the host's fence between setting that flag and its last poll.
        fence(Ordering::SeqCst);
        if self.words.host_waiting().load(Ordering::Relaxed) != 0 {
            self.wake_host();
        }
    }

    fn wake_host(&mut self) {
        self.doorbell = self.doorbell.wrapping_add(1);
        // Release: the completions published before are visible to a host woken by it.
        self.words.cq_doorbell().store(self.doorbell, Ordering::Release);
        sys::wake_all(self.words.cq_doorbell());
    }

    /// Takes up to `max` ready descriptors, stopping before the first write or GET
    /// that `room` (which it debits) has no place for, so a queue pair's requests
    /// still start in the order they were submitted.
    /// Refused descriptors and NOPs complete at once and need no room; every other
    /// request is accepted into `out` and must be completed with
    /// [`QueueServer::complete`]. Returns the number of descriptors taken.
    pub fn take(
        &mut self,
        region: &Region,
        door: &mut Door,
        max: u32,
        room: &mut Room,
        out: &mut Vec<Accepted>,
        metrics: &mut Metrics,
    ) -> u32 {
        if self.fenced {
            return 0;
        }
        let ready = match self.sq.refresh() {
            Ok(ready) => ready,
            Err(e) => {
                self.fence(FenceReason::for_submission(&e), e.index().into(), door, metrics);
                return 0;
            }
        };
        let want = ready.min(BATCH_MAX).min(max);
        if want == 0 {
            return 0;
        }
        // Reread the host's completion head only when the room last seen is short:
        // it is a line the host writes, so every read may be a cache miss. Every
        // accepted request keeps a completion slot reserved until it completes.
        let free = |q: &Self| q.cq.free().saturating_sub(q.outstanding + u32::from(q.run.is_some()));
        let completion_room = if free(self) >= want {
            free(self)
        } else {
            self.completion_room(door, metrics);
            free(self)
        };
        let peeked = want.min(completion_room);
        if peeked == 0 {
            return 0;
        }
        // Copy the candidates out first, then decide and check on the copies: the
        // copies are independent loads of lines the host just wrote, so they miss in
        // parallel instead of one per turn of the checking loop. The copies live in
        // this server (a batch of them on the stack would be zeroed on every take).
        let mut batch = 0;
        for (i, copy) in self.copies[..peeked as usize].iter_mut().enumerate() {
            *copy = self.sq.peek(i as u32).expect("peeked <= ready");
            if !room.admit(copy[0]) {
                break;
            }
            batch += 1;
        }
        if batch == 0 {
            return 0;
        }
        // Journal first: a successor that finds these taken but not completed fails them.
        self.words.sq_taken().store(self.sq.head().wrapping_add(batch), Ordering::Release);
        let qp = self.words.index();
        let first = self.sq.head();
        self.sq.advance(batch);
        for i in 0..batch as usize {
            // A copy of the copy: `post` below borrows the server.
            let copy = self.copies[i];
            let bytes = &copy;
            let sq_index = first.wrapping_add(i as u32);
            match door.accept(region, qp, sq_index, bytes) {
                Ok(Some((desc, buffer))) => {
                    let slot = self.slot(sq_index);
                    self.open[slot] = true;
                    self.outstanding += 1;
                    out.push(Accepted { qp, sq_index, desc, buffer });
                }
                Ok(None) => {
                    metrics.count(bytes[0], Status::Ok);
                    self.post(CompletionEntry::one(sq_index, Status::Ok, bytes[0]));
                }
                Err(refused) => {
                    metrics.count(refused.op, refused.status);
                    self.post(refused);
                }
            }
        }
        self.flush();
        batch
    }

    fn slot(&self, sq_index: u32) -> usize {
        (sq_index as usize) & (self.open.len() - 1)
    }

    /// Completes an accepted request: posts its completion (not yet published, see
    /// [`QueueServer::flush`]) and hands its buffer back - to the arena for writes, to
    /// the host (state `Host`) for a GET, whose value the host then reads.
    pub fn complete(
        &mut self,
        region: &Region,
        door: &mut Door,
        accepted: &Accepted,
        outcome: Outcome,
        metrics: &mut Metrics,
    ) {
        let slot = self.slot(accepted.sq_index);
        assert!(self.open[slot], "request {} of queue pair {} completed twice", accepted.sq_index, accepted.qp);
        let back = if accepted.desc.op == OpCode::Get { BufferState::Host } else { BufferState::Free };
        let cell = region.u32_at(region.layout().buffer_state(accepted.buffer));
        // Release: publishes the stages' writes to the buffer along with its new owner.
        cell.store(arena::word(accepted.desc.buffer_gen, back), Ordering::Release);
        door.inflight_mut().remove(accepted.buffer);
        self.open[slot] = false;
        self.outstanding -= 1;
        let completion = CompletionEntry {
            flags: outcome.flags,
            version: outcome.version,
            detail: outcome.detail,
            ..CompletionEntry::one(accepted.sq_index, outcome.status, accepted.desc.op as u8)
        };
        metrics.count(accepted.desc.op as u8, outcome.status);
        self.post(completion);
    }

    /// Publishes posted completions and releases the submission ring up to the oldest
    /// request still open.
    pub fn flush(&mut self) {
        if self.posted > 0 {
            self.publish_completions();
        }
        // From the head this server last published (its own copy: the shared word is
        // the host's to scribble, and a walk from a scribbled value to ours took up to
        // 2^32 steps on the thread that serves every region). At most a ring's worth.
        let head = self.sq.head();
        let published = self.sq.released();
        let mut release = published;
        while release != head && !self.open[self.slot(release)] {
            release = release.wrapping_add(1);
        }
        if release != published {
            self.sq.release_to(release);
        }
    }
}

/// The key of an accepted request, copied out of its buffer.
pub fn key_of<'k>(region: &Region, accepted: &Accepted, key: &'k mut [u8; KEY_BYTES_MAX]) -> &'k [u8] {
    let key = &mut key[..accepted.desc.key_len as usize];
    region.read_bytes(region.layout().buffer(accepted.buffer), key);
    key
}

#[cfg(test)]
mod tests {
    use super::*;
    use prescient_shim::{Host, HostOptions, RegionConfig};
    use std::sync::Arc;

    #[test]
    fn consecutive_equal_outcomes_share_one_entry_and_the_host_sees_each_request() {
        let path = std::env::temp_dir().join(format!("prescient-queue-runs-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let config = RegionConfig {
            queue_pairs: 1,
            ring_entries: 64,
            host_buffers: 4,
            dpu_buffers: 0,
            buffer_bytes: 4096,
            directory_slots: 0,
        };
        let host = Host::create(&path, config, HostOptions { pin: false, ..HostOptions::default() }).unwrap();
        let mut qp = host.queue_pair(0).unwrap();
        // 10 NOPs, 2 descriptors with a bad op, 5 NOPs: three runs.
        for tag in 0..10 {
            qp.push_nop(tag).unwrap();
        }
        for tag in 10..12u64 {
            let mut bad = [0u8; 64];
            bad[0] = 9;
            bad[24..32].copy_from_slice(&tag.to_le_bytes());
            qp.push_raw(&bad).unwrap();
        }
        for tag in 12..17 {
            qp.push_nop(tag).unwrap();
        }
        qp.flush().unwrap();
        let region = Arc::clone(host.region());
        let mut server = QueueServer::new(QueueWords::new(region.clone(), 0));
        let mut door = Door::new(&config);
        let mut metrics = Metrics::default();
        let mut out = Vec::with_capacity(BATCH_MAX as usize);
        assert_eq!(server.take(&region, &mut door, BATCH_MAX, &mut Room::any(BATCH_MAX), &mut out, &mut metrics), 17);
        assert!(out.is_empty(), "NOPs and refusals complete at once");
        assert_eq!(server.words().cq_tail().load(Ordering::Acquire), 3, "one entry per run");
        let mut got = Vec::new();
        assert_eq!(qp.poll(|c| got.push((c.user_data, c.sq_index, c.status))).unwrap(), 17);
        let expected: Vec<_> = (0..17u32)
            .map(|i| (u64::from(i), i, if (10..12).contains(&i) { Status::BadOp } else { Status::Ok }))
            .collect();
        assert_eq!(got, expected);
        assert_eq!(qp.in_flight(), 0);
        drop(qp);
        drop(host);
        let _ = std::fs::remove_file(&path);
    }

    /// A take stops before the first write or GET its room has no place for (NOPs
    /// need none, so a full writer does not stop them), keeping the ring's order; the
    /// next take with room goes on from there.
    #[test]
    fn a_take_stops_at_the_first_request_without_room_and_nops_need_none() {
        let path = std::env::temp_dir().join(format!("prescient-queue-room-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let config = RegionConfig {
            queue_pairs: 1,
            ring_entries: 64,
            host_buffers: 8,
            dpu_buffers: 0,
            buffer_bytes: 4096,
            directory_slots: 0,
        };
        let host = Host::create(&path, config, HostOptions { pin: false, ..HostOptions::default() }).unwrap();
        let mut qp = host.queue_pair(0).unwrap();
        qp.push_nop(0).unwrap();
        qp.push(prescient_shim::Request::put(b"a", host.take_buffer().unwrap(), 3).user_data(1))
            .map_err(|e| e.0)
            .unwrap();
        qp.push(prescient_shim::Request::get(b"b", host.take_buffer().unwrap()).user_data(2)).map_err(|e| e.0).unwrap();
        qp.push(prescient_shim::Request::put(b"c", host.take_buffer().unwrap(), 3).user_data(3))
            .map_err(|e| e.0)
            .unwrap();
        qp.push_nop(4).unwrap();
        qp.push_nop(5).unwrap();
        qp.flush().unwrap();
        let region = Arc::clone(host.region());
        let mut server = QueueServer::new(QueueWords::new(region.clone(), 0));
        let mut door = Door::new(&config);
        let mut metrics = Metrics::default();
        let mut out = Vec::with_capacity(BATCH_MAX as usize);
        let mut room = Room { writes: 1, gets: 1, requests: 8 };
        assert_eq!(server.take(&region, &mut door, BATCH_MAX, &mut room, &mut out, &mut metrics), 3);
        assert_eq!(out.iter().map(|a| a.sq_index).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(room, Room { writes: 0, gets: 0, requests: 6 });
        // The second PUT waits at the head: nothing behind it is taken either.
        let mut none = Room { writes: 0, gets: 5, requests: 8 };
        assert_eq!(server.take(&region, &mut door, BATCH_MAX, &mut none, &mut out, &mut metrics), 0);
        // Room for requests in all bounds too, whatever the kinds have.
        let mut full_list = Room { writes: 5, gets: 5, requests: 0 };
        assert_eq!(server.take(&region, &mut door, BATCH_MAX, &mut full_list, &mut out, &mut metrics), 0);
        assert_eq!(server.take(&region, &mut door, BATCH_MAX, &mut Room::any(8), &mut out, &mut metrics), 3);
        assert_eq!(out.iter().map(|a| a.sq_index).collect::<Vec<_>>(), [1, 2, 3]);
        // The NOPs completed at once; the host sees them and nothing else yet.
        let mut got = Vec::new();
        qp.poll(|c| got.push(c.user_data)).unwrap();
        assert_eq!(got, [0, 4, 5]);
        drop(qp);
        drop(host);
        let _ = std::fs::remove_file(&path);
    }
}
