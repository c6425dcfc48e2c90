//! Serving one queue pair: take descriptors, check them, run them through the
//! pipeline, post completions.
//!
//! The host is untrusted. Each descriptor is copied out of the ring once and checked
//! on the copy; a bad field becomes an error completion for that request alone. A GET
//! completes at once with `Unsupported` (this DPU app serves no reads yet), its buffer
//! handed back to the host as every GET's is. A ring
//! index that moves backwards or past capacity fences this queue pair off (the host
//! sees why in the fence word) while every other queue pair keeps being served.

use std::sync::atomic::{fence, Ordering};

use prescient_shim::arena::{self, BufferState};
use prescient_shim::config::{BATCH_MAX, KEY_BYTES_MAX, VALUE_OFFSET};
use prescient_shim::descriptor::{ArenaShape, Checked, Descriptor, OpCode};
use prescient_shim::queue::{Completions, FenceReason, QueueWords, Submissions};
use prescient_shim::region::Region;
use prescient_shim::ring::{Consumer, Producer};
use prescient_shim::{sys, Completion, Status};

use crate::inflight::InFlight;
use crate::metrics::Metrics;
use crate::pipeline::{CodecInfo, Op, Pipeline, Request};

/// The DPU end of one queue pair.
#[derive(Debug)]
pub struct QueueServer {
    words: QueueWords,
    sq: Consumer<Submissions>,
    cq: Producer<Completions>,
    fenced: bool,
}

impl QueueServer {
    /// Takes over the DPU end of `words` where the shared indices stand.
    pub fn new(words: QueueWords) -> Self {
        let fenced = words.fence_reason().load(Ordering::Acquire) != 0;
        Self { sq: Consumer::new(words.submissions()), cq: Producer::new(words.completions()), words, fenced }
    }

    /// The queue pair's words.
    pub fn words(&self) -> &QueueWords {
        &self.words
    }

    /// Whether this queue pair has been fenced off.
    pub fn fenced(&self) -> bool {
        self.fenced
    }

    /// The submission consumer (restart recovery moves it).
    pub fn submissions(&mut self) -> &mut Consumer<Submissions> {
        &mut self.sq
    }

    /// Fences the queue pair off for `reason`.
    pub fn fence(&mut self, reason: FenceReason, detail: u64, metrics: &mut Metrics) {
        tracing::error!(qp = self.words.index(), reason = reason.describe(), detail, "fencing queue pair off");
        self.words.fence_detail().store(detail, Ordering::Relaxed);
        // Release: the detail is visible before the reason that makes the host look.
        self.words.fence_reason().store(reason as u32, Ordering::Release);
        self.fenced = true;
        metrics.fences += 1;
        self.wake_host();
    }

    /// Whether the host has published descriptors not yet taken (one shared read).
    pub fn has_work(&self) -> bool {
        !self.fenced && self.words.sq_tail().load(Ordering::Relaxed) != self.sq.head()
    }

    /// Posts `completion` (the caller checked there is room) without publishing.
    pub fn post(&mut self, completion: &Completion) {
        let mut bytes = [0u8; prescient_shim::config::COMPLETION_BYTES];
        Completion { cq_index: self.cq.tail(), ..*completion }.emit(&mut bytes);
        assert!(self.cq.push(&bytes), "caller checked completion room");
    }

    /// Free completion slots (rereads the host's head). A head out of bounds fences.
    pub fn completion_room(&mut self, metrics: &mut Metrics) -> u32 {
        match self.cq.refresh() {
            Ok(free) => free,
            Err(e) => {
                self.fence(FenceReason::CompletionHead, e.index().into(), metrics);
                0
            }
        }
    }

    /// Publishes posted completions and wakes the host if it sleeps.
    pub fn publish_completions(&mut self) {
        self.cq.publish();
        // SeqCst: the completion tail is visible before we read the host's waiting flag;
        // pairs with the host's fence between setting that flag and its last poll.
        fence(Ordering::SeqCst);
        if self.words.host_waiting().load(Ordering::Relaxed) != 0 {
            self.wake_host();
        }
    }

    fn wake_host(&self) {
        self.words.cq_doorbell().fetch_add(1, Ordering::Release);
        sys::wake_all(self.words.cq_doorbell());
    }

    /// Serves one batch; returns the number of requests completed.
    pub fn serve(
        &mut self,
        region: &Region,
        inflight: &mut InFlight,
        pipeline: &mut Pipeline,
        metrics: &mut Metrics,
    ) -> u32 {
        if self.fenced {
            return 0;
        }
        let ready = match self.sq.refresh() {
            Ok(ready) => ready,
            Err(e) => {
                self.fence(FenceReason::for_submission(&e), e.index().into(), metrics);
                return 0;
            }
        };
        if ready == 0 {
            return 0;
        }
        // Reread the host's completion head only when the room last seen is short:
        // it is a line the host writes, so every read may be a cache miss.
        let want = ready.min(BATCH_MAX);
        let room = if self.cq.free() >= want { self.cq.free() } else { self.completion_room(metrics) };
        let batch = want.min(room);
        if batch == 0 {
            return 0;
        }
        // Journal first: a successor that finds these taken but not completed fails them.
        self.words.sq_taken().store(self.sq.head().wrapping_add(batch), Ordering::Release);
        let config = region.layout().config;
        let shape = ArenaShape { host_buffers: config.host_buffers, buffer_bytes: config.buffer_bytes };
        for _ in 0..batch {
            let (index, bytes) = self.sq.pop().expect("batch <= ready");
            let completion = run_one(region, &shape, index, &bytes, inflight, pipeline, metrics);
            metrics.count(completion.status);
            self.post(&completion);
        }
        self.publish_completions();
        self.sq.release();
        batch
    }
}

/// Checks and runs one descriptor; returns its completion.
fn run_one(
    region: &Region,
    shape: &ArenaShape,
    sq_index: u32,
    bytes: &[u8; 64],
    inflight: &mut InFlight,
    pipeline: &mut Pipeline,
    metrics: &mut Metrics,
) -> Completion {
    let fail = |status: Status, user_data: u64, detail: u64| Completion {
        user_data,
        status,
        op: bytes[0],
        sq_index,
        version: 0,
        detail: detail.min(u32::MAX.into()) as u32,
        cq_index: 0,
    };
    let Checked { desc, buffer } = match Descriptor::parse_checked(bytes, shape) {
        Ok(checked) => checked,
        Err(refused) => {
            tracing::warn!(sq_index, status = %refused.status, detail = refused.detail, "refused descriptor");
            return fail(refused.status, refused.user_data, refused.detail);
        }
    };
    let Some(buffer) = buffer else {
        debug_assert_eq!(desc.op, OpCode::Nop);
        return fail(Status::Ok, desc.user_data, 0);
    };
    if !inflight.insert(buffer) {
        tracing::warn!(sq_index, buffer, "buffer submitted twice");
        return fail(Status::BufferInFlight, desc.user_data, buffer.into());
    }
    let cell = region.u32_at(region.layout().buffer_state(buffer));
    if let Err(found) = arena::transition(cell, desc.buffer_gen, BufferState::Submitted, BufferState::Dpu) {
        inflight.remove(buffer);
        tracing::warn!(sq_index, buffer, found, "buffer not submitted");
        return fail(Status::BufferNotSubmitted, desc.user_data, found.into());
    }
    if desc.op == OpCode::Get {
        // No read path yet. A GET's buffer goes back to the host, not to the arena
        // (the host takes it back with the completion): Release, as below.
        cell.store(arena::word(desc.buffer_gen, BufferState::Host), Ordering::Release);
        inflight.remove(buffer);
        return fail(Status::Unsupported, desc.user_data, 0);
    }
    let buffer_offset = region.layout().buffer(buffer);
    let mut key = [0u8; KEY_BYTES_MAX];
    let key = &mut key[..desc.key_len as usize];
    region.read_bytes(buffer_offset, key);
    #[allow(unsafe_code)]
    // SAFETY: the ownership word moved Submitted -> Dpu for this generation and the
    // private in-flight table holds the buffer, so this is the only view of it in the
    // DPU app until it is released below. A host that writes it anyway breaks the
    // protocol and changes only the bytes the stages see.
    let buf = unsafe { region.bytes_mut(buffer_offset, shape.buffer_bytes as usize) };
    let op = if desc.op == OpCode::Put { Op::Put } else { Op::Delete };
    let config = region.layout().config;
    let side: &mut [u8] = if config.dpu_buffers > 0 {
        #[allow(unsafe_code)]
        // SAFETY: the first DPU scratch buffer (index host_buffers) is the pipeline's
        // side buffer. Host descriptors cannot name it (they are checked against
        // host_buffers), the pipeline runs one request at a time on this thread, and
        // the slice dies with the request below.
        unsafe {
            region.bytes_mut(region.layout().buffer(config.host_buffers), shape.buffer_bytes as usize)
        }
    } else {
        &mut []
    };
    let mut request = Request {
        op,
        key,
        buf,
        payload: VALUE_OFFSET..VALUE_OFFSET + desc.value_len as usize,
        version: 0,
        side,
        codec: CodecInfo::default(),
    };
    let result = pipeline.run(&mut request);
    let version = request.version;
    // The buffer goes back to the arena: Release publishes the stages' writes.
    cell.store(arena::word(desc.buffer_gen, BufferState::Free), Ordering::Release);
    inflight.remove(buffer);
    match result {
        Ok(()) => Completion { version, ..fail(Status::Ok, desc.user_data, 0) },
        Err(e) => {
            metrics.stage_failures += 1;
            tracing::warn!(sq_index, error = %e, "stage failed");
            fail(Status::StageFailed, desc.user_data, 0)
        }
    }
}
