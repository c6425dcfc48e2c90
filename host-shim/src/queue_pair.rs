//! One KV-store thread's queue pair: queue requests into the submission ring, publish
//! them, and reap the completion ring. Every completion entry is checked against what
//! this queue pair submitted before any request it names is handed over; the buffers
//! of GETs stay in a table until their value is taken.

use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::arena::{self, BufferState};
use crate::buffer::Buffer;
use crate::completion::{Completion, CompletionEntry};
use crate::config::*;
use crate::descriptor::{ArenaShape, Descriptor, OpCode};
use crate::error::ShimError;
use crate::get_table::{GetBuffer, GetTable};
use crate::host::Host;
use crate::layout::header;
use crate::liveness::{Coarse, Watch};
use crate::queue::{Completions, FenceReason, QueueWords, Submissions};
use crate::read_sla::ReadSla;
use crate::region::Region;
use crate::request::Request;
use crate::ring::{Consumer, Producer};
use crate::signal::CompletionSignal;
use crate::submitted::Submitted;
use crate::sys as futex;
use crate::value::Value;

/// One KV-store thread's queue pair. Not shared between threads; send it to the
/// thread that uses it.
pub struct QueuePair {
    host: Arc<Host>,
    words: QueueWords,
    sq: Producer<Submissions>,
    cq: Consumer<Completions>,
    dpu: Watch<Coarse>,
    in_flight: u32,
    /// Entries per ring (the region's, kept here: every push checks it).
    entries: u32,
    /// The buffers of GETs whose value the host has not taken.
    gets: GetTable,
    /// The tag and op of every request in flight, by submission index.
    submitted: Submitted,
    /// A completion entry checked and taken off the ring whose requests are not all
    /// handed to the caller yet (a `poll_max` that stopped inside it), and how many are.
    run: Option<(CompletionEntry, u16)>,
    /// The error of an entry that failed its checks during a [`Ready`] iteration not
    /// yet reported: by [`Ready::finish`], else by the next reap.
    failed: Option<ShimError>,
}

impl Host {
    /// Takes queue pair `qp` for the calling thread. Each queue pair may be taken once
    /// per host; it is given back when the [`QueuePair`] drops.
    pub fn queue_pair(self: &Arc<Self>, qp: u32) -> Result<QueuePair, ShimError> {
        let count = self.config().queue_pairs;
        if !self.claim_queue_pair(qp) {
            return Err(ShimError::NoQueuePair { qp, count });
        }
        Ok(QueuePair::new(self.clone(), qp))
    }
}

impl std::fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePair").field("qp", &self.words.index()).finish()
    }
}

impl QueuePair {
    /// Opens queue pair `qp` of `host`, which the caller has claimed for it.
    fn new(host: Arc<Host>, qp: u32) -> Self {
        let region = host.region();
        let config = host.config();
        let words = QueueWords::new(region.clone(), qp);
        Self {
            sq: Producer::new(words.submissions()),
            cq: Consumer::new(words.completions()),
            dpu: Watch::new(region.u64_at(header::DPU_HEARTBEAT), host.dpu_timeout(), Coarse::now()),
            gets: GetTable::new(config.ring_entries),
            submitted: Submitted::new(config.ring_entries),
            run: None,
            failed: None,
            entries: config.ring_entries,
            host,
            words,
            in_flight: 0,
        }
    }

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
        let counter = self.host.region().u64_at(header::DPU_HEARTBEAT);
        self.dpu.check(counter, Coarse::now()).map_err(|silent| ShimError::DpuNotResponding {
            silent_ms: silent.as_millis() as u64,
            timeout_ms: self.dpu.timeout().as_millis() as u64,
        })
    }

    fn room(&mut self) -> Result<(), ShimError> {
        // One completion slot per request in flight: never more in flight than the
        // completion ring holds, so the DPU app can always complete what it takes.
        let entries = self.entries;
        if self.in_flight() >= entries || self.sq.free() == 0 {
            self.sq.refresh().map_err(|e| ShimError::BadCompletion(format!("submission head: {e}")))?;
            if self.in_flight() >= entries || self.sq.free() == 0 {
                return Err(ShimError::RingFull { qp: self.index(), depth: entries, in_flight: self.in_flight() });
            }
        }
        // Completions come out of order: the request a ring earlier may still be open
        // with fewer than `entries` in flight (the simulator's seed 400172 with
        // `--sequencer --predictive` submitted over it and the host panicked).
        if !self.submitted.is_free(self.sq.tail()) {
            return Err(ShimError::RingFull { qp: self.index(), depth: entries, in_flight: self.in_flight() });
        }
        Ok(())
    }

    /// Queues `req` without publishing it (see [`QueuePair::flush`]): checks the key,
    /// a PUT's length against the buffer, the fence and room in both rings, writes the
    /// key into the buffer and hands the buffer to the DPU app. On error the buffer
    /// comes back.
    ///
    /// A GET fails with [`ShimError::RingFull`] (handing the buffer back) while the GET
    /// submitted `ring_entries` requests earlier has not completed yet: its table
    /// entry, keyed by submission index, is still taken.
    ///
    /// ```no_run
    /// # use prescient_shim::{Host, Request, ShimError};
    /// # fn batch(host: &std::sync::Arc<Host>) -> Result<(), ShimError> {
    /// let mut qp = host.queue_pair(0)?;
    /// for tag in 0..4u64 {
    ///     let buf = host.take_buffer()?;
    ///     qp.push(Request::put(&tag.to_le_bytes(), buf, 0).user_data(tag)).map_err(|(e, _buf)| e)?;
    /// }
    /// qp.flush()?; // one publish, one wake-up for the batch
    /// # Ok(())
    /// # }
    /// ```
    pub fn push(&mut self, req: Request<'_>) -> Result<(), (ShimError, Buffer)> {
        let sla = match req.wire_sla() {
            Ok(sla) => sla,
            Err(e) => return Err((e, req.into_buffer())),
        };
        let Request { op, key, buf, value_len, user_data, .. } = req;
        match op {
            OpCode::Put if value_len > buf.capacity() => {
                let max = buf.capacity();
                Err((ShimError::BadValue { len: value_len, max }, buf))
            }
            OpCode::Get => self.push_get(key, buf, sla, user_data),
            _ => self.push_with_buffer(op, key, buf, value_len as u32, sla, user_data),
        }
    }

    /// Queues `req` and publishes it with everything queued before it. Fails, handing
    /// the buffer back, if the DPU app is not responding. See [`QueuePair::push`].
    pub fn submit(&mut self, req: Request<'_>) -> Result<(), (ShimError, Buffer)> {
        if let Err(e) = self.check_dpu() {
            return Err((e, req.into_buffer()));
        }
        self.push(req)?;
        self.publish();
        Ok(())
    }

    /// Queues a GET, recording its buffer for [`QueuePair::take_value`].
    fn push_get(&mut self, key: &[u8], buf: Buffer, sla: ReadSla, user_data: u64) -> Result<(), (ShimError, Buffer)> {
        let sq_index = self.sq.tail();
        if !self.gets.can_record(sq_index) {
            let (qp, depth, in_flight) = (self.index(), self.host.config().ring_entries, self.in_flight());
            return Err((ShimError::RingFull { qp, depth, in_flight }, buf));
        }
        let got = GetBuffer { index: buf.index(), generation: buf.generation() };
        self.push_with_buffer(OpCode::Get, key, buf, 0, sla, user_data)?;
        if let Some(abandoned) = self.gets.record(sq_index, got) {
            Self::free_get_buffer(self.host.region(), abandoned);
        }
        Ok(())
    }

    /// Hands back the value of GET completion `c` in the buffer that carried it,
    /// whatever its status: the [`Value`] derefs to the value's bytes when the status
    /// is `Ok` (`c.detail` of them), to none otherwise; [`Value::into_buffer`] keeps the
    /// buffer. None for a completion of any other request, for a second call, if the
    /// buffer's ownership word does not say the host holds it (the buffer is then left
    /// to the DPU app), or if an `Ok` completion reports more bytes than the buffer
    /// holds (the buffer is freed): both are a DPU app that broke the protocol.
    ///
    /// Take the value before submitting `ring_entries` more requests on this queue
    /// pair: a GET whose value is never taken keeps its buffer until its table entry is
    /// reused by a later GET or the queue pair drops, and then the buffer is freed.
    pub fn take_value(&mut self, c: &Completion) -> Option<Value> {
        let got = self.gets.take(c.sq_index)?;
        let region = self.host.region();
        let cell = region.u32_at(region.layout().buffer_state(got.index));
        // A DPU app hands a GET's buffer back `Host`; one that refused the descriptor
        // before accepting it left it `Submitted`, and the completion says it is done
        // with it. The Host -> Host move checks the word and acquires the DPU app's
        // writes of the value.
        let held = arena::transition(cell, got.generation, BufferState::Host, BufferState::Host).is_ok()
            || arena::transition(cell, got.generation, BufferState::Submitted, BufferState::Host).is_ok();
        let buf = held.then(|| Buffer::new(region.clone(), got.index, got.generation))?;
        let len = if c.status == crate::Status::Ok { c.detail as usize } else { 0 };
        Value::new(buf, len)
    }

    /// Frees the buffer of a completed GET whose value the host never took.
    fn free_get_buffer(region: &Region, got: GetBuffer) {
        let cell = region.u32_at(region.layout().buffer_state(got.index));
        // As in `take_value`: `Host` normally, `Submitted` if the DPU app refused it. A
        // word in any other state is not the host's to free.
        for from in [BufferState::Host, BufferState::Submitted] {
            if arena::transition(cell, got.generation, from, BufferState::Free).is_ok() {
                return;
            }
        }
    }

    fn push_with_buffer(
        &mut self,
        op: OpCode,
        key: &[u8],
        mut buf: Buffer,
        value_len: u32,
        sla: ReadSla,
        user_data: u64,
    ) -> Result<(), (ShimError, Buffer)> {
        if key.is_empty() || key.len() > KEY_BYTES_MAX {
            return Err((ShimError::BadKey { len: key.len(), max: KEY_BYTES_MAX }, buf));
        }
        if let Err(e) = self.check_fence().and_then(|()| self.room()) {
            return Err((e, buf));
        }
        buf.write_key(key);
        let cell = self.host.region().u32_at(self.host.region().layout().buffer_state(buf.index()));
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
        };
        self.push_checked(&desc);
        Ok(())
    }

    /// Emits `desc` into the next slot; the caller checked room.
    fn push_checked(&mut self, desc: &Descriptor) {
        let mut bytes = [0u8; DESCRIPTOR_BYTES];
        desc.emit(&mut bytes);
        self.push_bytes(&bytes, desc.user_data, desc.op as u8);
    }

    /// Writes `bytes` into the next slot and records the request; the caller checked
    /// room.
    fn push_bytes(&mut self, bytes: &[u8; DESCRIPTOR_BYTES], user_data: u64, op: u8) {
        self.submitted.open(self.sq.tail(), user_data, op);
        assert!(self.sq.push(bytes), "room() checked a free slot");
        self.in_flight += 1;
    }

    /// Queues a NOP: completes at once, names no buffer.
    pub fn push_nop(&mut self, user_data: u64) -> Result<(), ShimError> {
        self.check_fence()?;
        self.room()?;
        let desc = Descriptor {
            op: OpCode::Nop,
            sla: ReadSla::Stale,
            key_len: 0,
            value_offset: 0,
            value_len: 0,
            buffer_gen: 0,
            user_data,
        };
        self.push_checked(&desc);
        Ok(())
    }

    /// Pushes raw descriptor bytes, bypassing every host-side check. For fault
    /// injection: this is how a buggy or hostile host looks to the DPU app. Only with
    /// the `fault-injection` feature.
    #[cfg(any(test, feature = "fault-injection"))]
    pub fn push_raw(&mut self, bytes: &[u8; DESCRIPTOR_BYTES]) -> Result<(), ShimError> {
        self.room()?;
        let user_data = u64::from_le_bytes(bytes[crate::descriptor::field::USER_DATA].try_into().expect("8 bytes"));
        self.push_bytes(bytes, user_data, bytes[crate::descriptor::field::OP]);
        Ok(())
    }

    /// The queue pair's shared words, to break the ring protocol on purpose (fault
    /// injection) and watch what the DPU app does. Only with the `fault-injection`
    /// feature; a store that wants to sleep on completions in a thread of its own
    /// uses [`QueuePair::completion_signal`].
    #[cfg(any(test, feature = "fault-injection"))]
    pub fn words(&self) -> &QueueWords {
        &self.words
    }

    /// A handle another thread can sleep on until this queue pair has completions to
    /// reap (see [`CompletionSignal`]); the reaping stays with this queue pair.
    pub fn completion_signal(&self) -> CompletionSignal {
        CompletionSignal::new(self.words.clone())
    }

    /// The region the queue pair lives in.
    pub(crate) fn region(&self) -> &Arc<crate::region::Region> {
        self.words.region()
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
        let region = self.host.region();
        if region.u32_at(header::DPU_SLEEPING).load(Ordering::Relaxed) != 0 {
            let doorbell = region.u32_at(header::DPU_DOORBELL);
            doorbell.fetch_add(1, Ordering::Release);
            futex::wake_all(doorbell);
        }
    }

    /// The completions ready now, as an iterator; the completion-ring slots it
    /// consumed go back to the DPU app when it drops, so `break` and `?` inside the loop
    /// lose nothing: a completion not yet yielded stays for the next call.
    ///
    /// Each completion entry is checked before any request it names is handed over:
    /// its bytes, and that every request it names is one this queue pair submitted and
    /// has not seen completed. An entry that fails is dropped and ends the iteration;
    /// its [`ShimError::BadCompletion`] (the DPU app broke the protocol) comes from
    /// [`Ready::finish`], or, for an iterator dropped without it, from the next
    /// `completions`, `poll` or `wait`. The requests it named stay in flight.
    ///
    /// ```no_run
    /// # use prescient_shim::{QueuePair, ShimError, Status};
    /// # fn reap(qp: &mut QueuePair) -> Result<(), ShimError> {
    /// for c in qp.completions()? {
    ///     if c.status != Status::Ok {
    ///         return Err(ShimError::BadCompletion(format!("request {} failed", c.user_data)));
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn completions(&mut self) -> Result<Ready<'_>, ShimError> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        let ready = self.cq.refresh().map_err(|e| ShimError::BadCompletion(format!("completion tail: {e}")))?;
        if ready > self.in_flight() {
            return Err(ShimError::BadCompletion(format!(
                "{ready} completion entries ready but only {} requests in flight",
                self.in_flight()
            )));
        }
        Ok(Ready { qp: self })
    }

    /// Hands every completion ready now to `on`; returns how many.
    pub fn poll(&mut self, on: impl FnMut(Completion)) -> Result<usize, ShimError> {
        self.poll_max(usize::MAX, on)
    }

    /// Hands at most `max` completions ready now to `on`; returns how many. The checks
    /// are those of [`QueuePair::completions`]; an entry that fails them is this call's
    /// error.
    pub fn poll_max(&mut self, max: usize, on: impl FnMut(Completion)) -> Result<usize, ShimError> {
        let mut ready = self.completions()?;
        let count = ready.by_ref().take(max).map(on).count();
        ready.finish().map(|()| count)
    }

    /// The next completion ready now: the next request of the entry being delivered,
    /// else of the next entry on the ring, checked. None when the ring holds no more
    /// as last refreshed, or when an entry failed its checks (then in `failed`).
    fn next_ready(&mut self) -> Option<Completion> {
        loop {
            if let Some(c) = self.deliver_one() {
                return Some(c);
            }
            if self.failed.is_some() {
                return None;
            }
            let (cq_index, bytes) = self.cq.pop()?;
            // The entry is a private copy now: its slot goes back to the DPU app when
            // the iterator drops.
            let entry = match CompletionEntry::parse_checked(&bytes) {
                Ok(entry) => entry,
                Err(e) => {
                    self.failed = Some(ShimError::BadCompletion(format!("entry {cq_index}: {e}")));
                    return None;
                }
            };
            if let Err(not_open) = self.submitted.close(&entry) {
                self.failed = Some(ShimError::BadCompletion(format!(
                    "entry {cq_index} completes {} requests from submission {}, but submission {} is not in flight",
                    entry.count, entry.sq_index, not_open.sq_index
                )));
                return None;
            }
            self.run = Some((CompletionEntry { cq_index, ..entry }, 0));
        }
    }

    /// Hands over the next request of the entry being delivered, if any.
    fn deliver_one(&mut self) -> Option<Completion> {
        let (entry, done) = self.run.as_mut()?;
        let sq_index = entry.sq_index.wrapping_add((*done).into());
        let (user_data, op) = self.submitted.deliver(sq_index);
        self.gets.complete(sq_index);
        self.in_flight -= 1;
        *done += 1;
        let c = Completion {
            user_data,
            status: entry.status,
            op,
            flags: entry.flags,
            sq_index,
            version: entry.version,
            detail: entry.detail,
            cq_index: entry.cq_index,
        };
        if *done == entry.count {
            self.run = None;
        }
        Some(c)
    }

    /// Gives the completion-ring slots of every entry taken off the ring back to the
    /// DPU app (an entry part-delivered is a private copy in `run`).
    fn release_consumed(&mut self) {
        if self.cq.head() != self.cq.released() {
            self.cq.release();
        }
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
        // GET buffers whose value was never taken go back to the arena. Those of GETs
        // still in flight stay with the DPU app, which hands them back `Host`; they
        // return to the arena when this host detaches or dies.
        for got in self.gets.drain_completed() {
            Self::free_get_buffer(self.host.region(), got);
        }
        self.host.release_queue_pair(self.words.index());
    }
}

/// The completions of one queue pair ready when [`QueuePair::completions`] was called.
/// Dropping it releases the completion-ring slots it consumed; what it did not yield
/// stays for the next call.
#[must_use = "an iterator yields nothing unless it is iterated"]
pub struct Ready<'q> {
    qp: &'q mut QueuePair,
}

impl std::fmt::Debug for Ready<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ready").field("qp", &self.qp.index()).finish()
    }
}

impl Ready<'_> {
    /// Ends the iteration: the error of an entry that failed its checks, if one did
    /// (that entry is dropped, the requests it named stay in flight).
    pub fn finish(self) -> Result<(), ShimError> {
        self.qp.failed.take().map_or(Ok(()), Err)
    }
}

impl Iterator for Ready<'_> {
    type Item = Completion;

    fn next(&mut self) -> Option<Completion> {
        self.qp.next_ready()
    }
}

impl Drop for Ready<'_> {
    fn drop(&mut self) {
        self.qp.release_consumed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::tests::fixture;
    use crate::status::Status;

    /// The DPU end of queue pair 0, driven by hand: what a DPU app does to a GET.
    struct FakeDpu {
        region: Arc<Region>,
        sq: Consumer<Submissions>,
        cq: Producer<Completions>,
    }

    impl FakeDpu {
        fn new(host: &Host) -> Self {
            let words = QueueWords::new(host.region().clone(), 0);
            Self {
                region: host.region().clone(),
                sq: Consumer::new(words.submissions()),
                cq: Producer::new(words.completions()),
            }
        }

        /// Takes the next descriptor: its submission index, fields and buffer.
        fn take(&mut self) -> (u32, Descriptor, u32) {
            self.sq.refresh().unwrap();
            let (sq_index, bytes) = self.sq.pop().expect("a descriptor");
            self.sq.release();
            let c = self.region.layout().config;
            let shape = ArenaShape { host_buffers: c.host_buffers, buffer_bytes: c.buffer_bytes };
            let checked = Descriptor::parse_checked(&bytes, &shape).unwrap();
            (sq_index, checked.desc, checked.buffer.unwrap())
        }

        /// Accepts the buffer, writes `value` into it and leaves it in `to`.
        fn serve(&self, desc: &Descriptor, buffer: u32, value: &[u8], to: BufferState) {
            let layout = self.region.layout();
            let cell = self.region.u32_at(layout.buffer_state(buffer));
            arena::transition(cell, desc.buffer_gen, BufferState::Submitted, BufferState::Dpu).unwrap();
            self.region.write_bytes(layout.buffer(buffer) + VALUE_OFFSET, value);
            cell.store(arena::word(desc.buffer_gen, to), Ordering::Release);
        }

        fn complete(&mut self, sq_index: u32, desc: &Descriptor, status: Status, detail: u32) {
            let c = CompletionEntry {
                version: 77,
                detail,
                cq_index: self.cq.tail(),
                ..CompletionEntry::one(sq_index, status, desc.op as u8)
            };
            let mut bytes = [0u8; COMPLETION_BYTES];
            c.emit(&mut bytes);
            self.cq.refresh().unwrap();
            assert!(self.cq.push(&bytes));
            self.cq.publish();
        }

        /// Serves the next GET with `value` and completes it `Ok`.
        fn get(&mut self, value: &[u8]) -> u32 {
            let (sq_index, desc, buffer) = self.take();
            assert_eq!(desc.op, OpCode::Get);
            self.serve(&desc, buffer, value, BufferState::Host);
            self.complete(sq_index, &desc, Status::Ok, value.len() as u32);
            sq_index
        }
    }

    impl FakeDpu {
        /// Publishes one raw entry, whatever it says.
        fn publish_entry(&mut self, entry: CompletionEntry) {
            let mut bytes = [0u8; COMPLETION_BYTES];
            CompletionEntry { cq_index: self.cq.tail(), ..entry }.emit(&mut bytes);
            self.cq.refresh().unwrap();
            assert!(self.cq.push(&bytes));
            self.cq.publish();
        }
    }

    #[test]
    fn a_run_completes_each_request_with_the_hosts_own_tag_and_max_is_kept() {
        let f = fixture("runs", 0);
        let mut qp = f.host.queue_pair(0).unwrap();
        let mut dpu = FakeDpu::new(&f.host);
        for tag in 0..5u64 {
            qp.push_nop(100 + tag).unwrap();
        }
        qp.flush().unwrap();
        assert_eq!(dpu.sq.refresh(), Ok(5));
        dpu.publish_entry(CompletionEntry { count: 4, ..CompletionEntry::one(0, Status::Ok, 0) });
        dpu.publish_entry(CompletionEntry { detail: 7, ..CompletionEntry::one(4, Status::BadOp, 0) });
        // Three at a time: the run of four is handed over across two polls.
        let mut got = Vec::new();
        assert_eq!(qp.poll_max(3, |c| got.push(c)).unwrap(), 3);
        assert_eq!(qp.in_flight(), 2);
        assert_eq!(qp.poll_max(3, |c| got.push(c)).unwrap(), 2);
        let seen: Vec<(u64, u32, Status, u32)> =
            got.iter().map(|c| (c.user_data, c.sq_index, c.status, c.detail)).collect();
        assert_eq!(
            seen,
            vec![
                (100, 0, Status::Ok, 0),
                (101, 1, Status::Ok, 0),
                (102, 2, Status::Ok, 0),
                (103, 3, Status::Ok, 0),
                (104, 4, Status::BadOp, 7)
            ]
        );
        assert_eq!((qp.in_flight(), completions(&mut qp).len()), (0, 0));
    }

    /// The tags a `completions()` loop sees before it returns early with `?` at `stop`.
    fn reap_until(qp: &mut QueuePair, stop: u64, seen: &mut Vec<u64>) -> Result<(), String> {
        for c in qp.completions().map_err(|e| e.to_string())? {
            seen.push(c.user_data);
            (c.user_data != stop).then_some(()).ok_or(format!("stopped at {stop}"))?;
        }
        Ok(())
    }

    #[test]
    fn a_completions_loop_left_early_keeps_the_rest_and_releases_what_it_took() {
        let f = fixture("iter-break", 0);
        let mut qp = f.host.queue_pair(0).unwrap();
        let mut dpu = FakeDpu::new(&f.host);
        for tag in 0..8u64 {
            qp.push_nop(tag).unwrap();
        }
        qp.flush().unwrap();
        assert_eq!(dpu.sq.refresh(), Ok(8));
        // One entry per request: the completion ring's 8 slots are all taken.
        for sq_index in 0..8 {
            dpu.publish_entry(CompletionEntry::one(sq_index, Status::Ok, 0));
        }
        assert_eq!(dpu.cq.refresh(), Ok(0));
        // `break` after the first: its slot is the DPU app's again, the rest wait.
        let mut seen = Vec::new();
        for c in qp.completions().unwrap() {
            seen.push(c.user_data);
            if c.user_data == 0 {
                break;
            }
        }
        assert_eq!((seen.as_slice(), qp.in_flight()), (&[0][..], 7));
        assert_eq!(dpu.cq.refresh(), Ok(1), "the slot of the one entry taken is released");
        // An early `?` return at tag 2 loses nothing either.
        let mut seen = Vec::new();
        assert_eq!(reap_until(&mut qp, 2, &mut seen), Err("stopped at 2".to_string()));
        assert_eq!(seen, vec![1, 2]);
        assert_eq!(dpu.cq.refresh(), Ok(3));
        let rest: Vec<u64> = qp.completions().unwrap().map(|c| c.user_data).collect();
        assert_eq!(rest, vec![3, 4, 5, 6, 7]);
        assert_eq!((qp.in_flight(), dpu.cq.refresh()), (0, Ok(8)));
        // The released slots are reused: the ring takes a full ring's worth again.
        while dpu.sq.pop().is_some() {}
        dpu.sq.release();
        for tag in 8..16u64 {
            qp.push_nop(tag).unwrap();
        }
        qp.flush().unwrap();
        assert_eq!(dpu.sq.refresh(), Ok(8));
        for sq_index in 8..16 {
            dpu.publish_entry(CompletionEntry::one(sq_index, Status::Ok, 0));
        }
        assert_eq!(completions(&mut qp).iter().map(|c| c.user_data).collect::<Vec<_>>(), (8..16).collect::<Vec<_>>());
    }

    #[test]
    fn a_run_left_part_delivered_frees_its_slot_and_keeps_its_requests() {
        let f = fixture("iter-run", 0);
        let mut qp = f.host.queue_pair(0).unwrap();
        let mut dpu = FakeDpu::new(&f.host);
        for tag in 0..5u64 {
            qp.push_nop(tag).unwrap();
        }
        qp.flush().unwrap();
        assert_eq!(dpu.sq.refresh(), Ok(5));
        dpu.publish_entry(CompletionEntry { count: 5, ..CompletionEntry::one(0, Status::Ok, 0) });
        assert_eq!(qp.completions().unwrap().next().map(|c| c.user_data), Some(0));
        assert_eq!(dpu.cq.refresh(), Ok(8), "the entry is a private copy: its slot is free");
        let rest: Vec<u64> = qp.completions().unwrap().map(|c| c.user_data).collect();
        assert_eq!((rest, qp.in_flight()), (vec![1, 2, 3, 4], 0));
    }

    #[test]
    fn a_bad_entry_ends_the_iteration_and_its_error_is_reported_once() {
        let f = fixture("iter-bad", 0);
        let mut qp = f.host.queue_pair(0).unwrap();
        let mut dpu = FakeDpu::new(&f.host);
        for tag in 0..3u64 {
            qp.push_nop(tag).unwrap();
        }
        qp.flush().unwrap();
        let ok = |sq_index| CompletionEntry::one(sq_index, Status::Ok, 0);
        dpu.publish_entry(ok(0));
        dpu.publish_entry(ok(0)); // completes request 0 again: refused
        dpu.publish_entry(ok(1));
        let mut ready = qp.completions().unwrap();
        assert_eq!(ready.by_ref().map(|c| c.user_data).collect::<Vec<_>>(), vec![0]);
        assert!(matches!(ready.finish(), Err(ShimError::BadCompletion(_))));
        assert_eq!(completions(&mut qp).iter().map(|c| c.user_data).collect::<Vec<_>>(), vec![1]);
        // Dropped without `finish`: the next reap reports it, and the one after goes on.
        qp.push_nop(3).unwrap();
        qp.flush().unwrap();
        dpu.publish_entry(ok(1));
        dpu.publish_entry(ok(2));
        assert_eq!(qp.completions().unwrap().count(), 0);
        assert!(matches!(qp.completions(), Err(ShimError::BadCompletion(_))));
        assert_eq!(completions(&mut qp).iter().map(|c| c.user_data).collect::<Vec<_>>(), vec![2]);
        assert_eq!(qp.in_flight(), 1, "request 3 is still open");
    }

    #[test]
    fn a_hostile_entry_is_refused_and_delivers_nothing() {
        let f = fixture("hostile-entries", 0);
        let mut qp = f.host.queue_pair(0).unwrap();
        let mut dpu = FakeDpu::new(&f.host);
        for tag in 0..3u64 {
            qp.push_nop(tag).unwrap();
        }
        qp.flush().unwrap();
        let ok = |sq_index, count| CompletionEntry { count, ..CompletionEntry::one(sq_index, Status::Ok, 0) };
        // A run past what was submitted, one a ring's worth ahead, a count of 0.
        for bad in [ok(1, 3), ok(8, 1), ok(0, 0)] {
            dpu.publish_entry(bad);
            let mut got = Vec::new();
            let err = qp.poll(|c| got.push(c)).unwrap_err();
            assert!(matches!(err, ShimError::BadCompletion(_)), "{bad:?}: {err}");
            assert!(got.is_empty(), "{bad:?} delivered {got:?}");
            assert_eq!(qp.in_flight(), 3, "{bad:?}");
        }
        dpu.publish_entry(ok(0, 2));
        assert_eq!(completions(&mut qp).len(), 2);
        // The same requests again: refused, nothing delivered twice.
        dpu.publish_entry(ok(1, 1));
        assert!(qp.poll(|_| panic!("delivered twice")).is_err());
        dpu.publish_entry(ok(2, 1));
        assert_eq!(completions(&mut qp).iter().map(|c| c.user_data).collect::<Vec<_>>(), vec![2]);
        assert_eq!(qp.in_flight(), 0);
    }

    fn completions(qp: &mut QueuePair) -> Vec<Completion> {
        let mut out = Vec::new();
        qp.poll(|c| out.push(c)).unwrap();
        out
    }

    fn free_buffers(host: &Host) -> usize {
        let held: Vec<Buffer> = std::iter::from_fn(|| host.take_buffer().ok()).collect();
        held.len()
    }

    #[test]
    fn a_get_brings_its_buffer_back_with_the_value() {
        let f = fixture("get", 16);
        let mut qp = f.host.queue_pair(0).unwrap();
        let mut dpu = FakeDpu::new(&f.host);
        let buf = f.host.take_buffer().unwrap();
        let index = buf.index();
        qp.push(Request::get(b"key-1", buf).user_data(42)).map_err(|(e, _)| e).unwrap();
        qp.flush().unwrap();
        let (sq_index, desc, buffer) = dpu.take();
        assert_eq!(
            (desc.op, desc.sla, desc.key_len, desc.value_len, buffer),
            (OpCode::Get, ReadSla::FRESH_NOW, 5, 0, index)
        );
        let mut key = [0u8; 5];
        f.host.region().read_bytes(f.host.region().layout().buffer(buffer), &mut key);
        assert_eq!(&key, b"key-1", "the buffer carries the key");
        dpu.serve(&desc, buffer, b"the value", BufferState::Host);
        dpu.complete(sq_index, &desc, Status::Ok, 9);
        let got = completions(&mut qp);
        assert_eq!(got.len(), 1);
        let c = got[0];
        assert_eq!((c.user_data, c.status, c.detail, c.version), (42, Status::Ok, 9, 77));
        let value = qp.take_value(&c).expect("the GET's buffer");
        assert_eq!((&*value, value.len()), (&b"the value"[..], 9), "exactly the value's bytes");
        assert!(qp.take_value(&c).is_none(), "taken once");
        assert_eq!(free_buffers(&f.host), 15, "the host holds the value's buffer");
        let buf = value.into_buffer();
        assert_eq!(buf.index(), index);
        drop(buf);
        assert_eq!(free_buffers(&f.host), 16);

        // A DPU app that reports more value bytes than the buffer holds: no value,
        // and the buffer is freed all the same.
        let buf = f.host.take_buffer().unwrap();
        let capacity = buf.capacity() as u32;
        qp.push(Request::get(b"key-2", buf).user_data(43)).map_err(|(e, _)| e).unwrap();
        qp.flush().unwrap();
        let (sq_index, desc, buffer) = dpu.take();
        dpu.serve(&desc, buffer, b"x", BufferState::Host);
        dpu.complete(sq_index, &desc, Status::Ok, capacity + 1);
        let got = completions(&mut qp);
        assert!(qp.take_value(&got[0]).is_none(), "an overlong value is refused");
        assert_eq!(free_buffers(&f.host), 16, "and its buffer freed");

        // A GET that failed hands its buffer back with no value bytes.
        let buf = f.host.take_buffer().unwrap();
        qp.push(Request::get(b"key-3", buf).user_data(44)).map_err(|(e, _)| e).unwrap();
        qp.flush().unwrap();
        let (sq_index, desc, buffer) = dpu.take();
        dpu.serve(&desc, buffer, b"", BufferState::Host);
        dpu.complete(sq_index, &desc, Status::NotFound, 3);
        let got = completions(&mut qp);
        let value = qp.take_value(&got[0]).expect("a failed GET's buffer comes back");
        assert!(value.is_empty());
    }

    #[test]
    fn a_request_becomes_the_descriptor_it_describes() {
        let f = fixture("requests", 0);
        let mut qp = f.host.queue_pair(0).unwrap();
        let mut dpu = FakeDpu::new(&f.host);
        let put = Request::put(b"p", f.host.take_buffer().unwrap(), 3);
        qp.push(put).map_err(|(e, _)| e).unwrap();
        qp.push(Request::put(b"q", f.host.take_buffer().unwrap(), 0).user_data(7)).map_err(|(e, _)| e).unwrap();
        qp.push(Request::get(b"g", f.host.take_buffer().unwrap()).user_data(8)).map_err(|(e, _)| e).unwrap();
        let waiting = ReadSla::Fresh { max_wait: Duration::from_millis(2) };
        let get = Request::get(b"w", f.host.take_buffer().unwrap()).sla(waiting).user_data(10);
        qp.push(get).map_err(|(e, _)| e).unwrap();
        qp.submit(Request::delete(b"d", f.host.take_buffer().unwrap()).user_data(9)).map_err(|(e, _)| e).unwrap();
        let seen: Vec<(OpCode, ReadSla, u16, u32, u64)> = (0..5)
            .map(|_| {
                let (_, d, _) = dpu.take();
                (d.op, d.sla, d.key_len, d.value_len, d.user_data)
            })
            .collect();
        assert_eq!(
            seen,
            vec![
                (OpCode::Put, ReadSla::Stale, 1, 3, 0),
                (OpCode::Put, ReadSla::Stale, 1, 0, 7),
                (OpCode::Get, ReadSla::FRESH_NOW, 1, 0, 8),
                (OpCode::Get, waiting, 1, 0, 10),
                (OpCode::Delete, ReadSla::Stale, 1, 0, 9),
            ],
            "defaults: writes carry no SLA (Stale on the wire), GETs FRESH_NOW, user_data 0"
        );
    }

    #[test]
    fn a_write_given_a_read_sla_is_refused_with_its_buffer() {
        let f = fixture("sla-on-write", 0);
        let mut qp = f.host.queue_pair(0).unwrap();
        for req in [
            Request::put(b"k", f.host.take_buffer().unwrap(), 1).sla(ReadSla::Stale),
            Request::delete(b"k", f.host.take_buffer().unwrap()).sla(ReadSla::FRESH_NOW),
        ] {
            let (err, buf) = qp.push(req).unwrap_err();
            assert!(matches!(err, ShimError::SlaOnWrite { .. }), "{err}");
            drop(buf);
        }
        assert_eq!(qp.in_flight(), 0);
    }

    #[test]
    fn a_refused_request_hands_its_buffer_back() {
        let f = fixture("request-refused", 0);
        let mut qp = f.host.queue_pair(0).unwrap();
        let buf = f.host.take_buffer().unwrap();
        let (index, capacity) = (buf.index(), buf.capacity());
        let (err, buf) = qp.push(Request::put(b"k", buf, capacity + 1)).unwrap_err();
        assert!(matches!(err, ShimError::BadValue { .. }), "{err}");
        let (err, buf) = qp.submit(Request::get(b"", buf)).unwrap_err();
        assert!(matches!(err, ShimError::BadKey { .. }), "{err}");
        assert_eq!(buf.index(), index, "the same buffer, still the host's");
        assert_eq!(qp.in_flight(), 0);
        assert_eq!(Request::delete(b"k", buf).into_buffer().index(), index);
    }

    #[test]
    fn other_completions_carry_no_value() {
        let f = fixture("get-other", 16);
        let mut qp = f.host.queue_pair(0).unwrap();
        let mut dpu = FakeDpu::new(&f.host);
        let buf = f.host.take_buffer().unwrap();
        qp.push(Request::put(b"k", buf, 1).user_data(1)).map_err(|(e, _)| e).unwrap();
        qp.flush().unwrap();
        let (sq_index, desc, buffer) = dpu.take();
        dpu.serve(&desc, buffer, b"", BufferState::Free);
        dpu.complete(sq_index, &desc, Status::Ok, 0);
        let c = completions(&mut qp)[0];
        assert!(qp.take_value(&c).is_none(), "a PUT");
        // A completion the host made up names a GET that is still in the DPU app.
        let buf = f.host.take_buffer().unwrap();
        qp.push(Request::get(b"k", buf).sla(ReadSla::Stale).user_data(2)).map_err(|(e, _)| e).unwrap();
        qp.flush().unwrap();
        assert!(qp.take_value(&Completion { sq_index: 1, ..c }).is_none(), "not completed yet");
        assert_eq!(dpu.get(b"v"), 1);
        let c = completions(&mut qp)[0];
        assert!(qp.take_value(&c).is_some());
    }

    #[test]
    fn a_refused_get_still_brings_its_buffer_back_and_a_hostile_one_does_not() {
        let f = fixture("get-refused", 16);
        let mut qp = f.host.queue_pair(0).unwrap();
        let mut dpu = FakeDpu::new(&f.host);
        for tag in 0..2 {
            let buf = f.host.take_buffer().unwrap();
            qp.push(Request::get(b"k", buf).sla(ReadSla::Stale).user_data(tag)).map_err(|(e, _)| e).unwrap();
        }
        qp.flush().unwrap();
        // Refused before it was accepted: the buffer is still `Submitted`.
        let (i0, d0, _) = dpu.take();
        dpu.complete(i0, &d0, Status::Unsupported, 0);
        // A broken DPU app completes a GET but keeps the buffer.
        let (i1, d1, b1) = dpu.take();
        dpu.serve(&d1, b1, b"x", BufferState::Dpu);
        dpu.complete(i1, &d1, Status::Ok, 1);
        let got = completions(&mut qp);
        assert_eq!(got[0].status, Status::Unsupported);
        assert!(qp.take_value(&got[0]).is_some(), "the refused GET's buffer is the host's again");
        assert!(qp.take_value(&got[1]).is_none(), "the buffer is not the host's to take");
        assert_eq!(free_buffers(&f.host), 15, "only the broken DPU app's buffer is missing");
    }

    #[test]
    fn a_get_is_refused_while_its_table_slot_is_in_flight() {
        let f = fixture("get-slot", 16);
        let mut qp = f.host.queue_pair(0).unwrap();
        let mut dpu = FakeDpu::new(&f.host);
        let buf = f.host.take_buffer().unwrap();
        qp.push(Request::get(b"slow", buf).sla(ReadSla::Stale)).map_err(|(e, _)| e).unwrap();
        for tag in 1..8 {
            qp.push_nop(tag).unwrap();
        }
        qp.flush().unwrap();
        // The DPU app takes all eight, holds the GET and completes the rest.
        let (slow_index, slow, slow_buf) = dpu.take();
        for _ in 1..8 {
            dpu.sq.refresh().unwrap();
            let (i, bytes) = dpu.sq.pop().unwrap();
            dpu.sq.release();
            let nop = Descriptor {
                op: OpCode::Nop,
                user_data: u64::from_le_bytes(bytes[24..32].try_into().unwrap()),
                ..slow
            };
            dpu.complete(i, &nop, Status::Ok, 0);
        }
        assert_eq!(completions(&mut qp).len(), 7);
        // Submission index 8 reuses the GET's table slot: refused, the buffer comes back.
        let buf = f.host.take_buffer().unwrap();
        let (err, buf) = qp.push(Request::get(b"next", buf).sla(ReadSla::Stale).user_data(8)).unwrap_err();
        assert!(matches!(err, ShimError::RingFull { .. }), "{err}");
        dpu.serve(&slow, slow_buf, b"late", BufferState::Host);
        dpu.complete(slow_index, &slow, Status::Ok, 4);
        let c = completions(&mut qp)[0];
        qp.push(Request::get(b"next", buf).sla(ReadSla::Stale).user_data(8)).map_err(|(e, _)| e).unwrap();
        // The slot was reused, so the untaken value's buffer went back to the arena.
        assert!(qp.take_value(&c).is_none());
        assert_eq!(free_buffers(&f.host), 15, "only the new GET's buffer is out");
    }

    #[test]
    fn untaken_values_go_back_to_the_arena() {
        let f = fixture("get-untaken", 16);
        let mut qp = f.host.queue_pair(0).unwrap();
        let mut dpu = FakeDpu::new(&f.host);
        for round in 0..2u64 {
            for tag in 0..8 {
                let buf = f.host.take_buffer().unwrap();
                qp.push(Request::get(b"k", buf).sla(ReadSla::Stale).user_data(round * 8 + tag))
                    .map_err(|(e, _)| e)
                    .unwrap();
            }
            qp.flush().unwrap();
            for _ in 0..8 {
                dpu.get(b"v");
            }
            assert_eq!(completions(&mut qp).len(), 8);
            // Round 1 reused every slot of round 0 and freed its buffers.
            assert_eq!(free_buffers(&f.host), 8, "round {round}");
        }
        drop(qp);
        assert_eq!(free_buffers(&f.host), 16, "the queue pair frees what was never taken");
    }
}
