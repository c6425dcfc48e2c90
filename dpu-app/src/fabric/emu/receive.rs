//! The receive queue of an emulated queue pair: the posted receives, the completions
//! that consume them (an incoming SEND or WRITE_WITH_IMM) and the handshake with a
//! requester that found none posted (receiver not ready). The responder (`responder`)
//! executes requests against it; the queue pair (`qp`) owns it, posts to it, flushes it
//! and resets it, and sits above both.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::cq::CqInner;
use super::spin::{SpinGuard, SpinLock};
use crate::fabric::{
    Completion, FabricError, InFlight, InFlightEntry, LocalBuf, Memory, PathSignal, PostError, WcOpcode, WcStatus,
};

/// Where the bytes of a WRITE or SEND come from.
pub(crate) enum Payload<'a> {
    /// The requester's registered memory (in-process: DMA straight across).
    Memory { memory: &'a Memory, offset: usize },
    /// A received frame.
    Bytes(&'a [u8]),
}

/// When a receive completion becomes visible.
pub(crate) enum Publish<'a> {
    /// At this clock time.
    At(u64),
    /// Later: the caller publishes it with [`Receiver::publish`].
    Defer(&'a mut Option<Completion>),
}

/// The posted receives, under the receiver's lock.
pub(crate) struct RecvQueue {
    inflight: InFlight,
    posted: VecDeque<u64>,
    /// Threads in [`Receiver::wait`] (a post wakes sleepers only when there is one: the
    /// in-process fabric never waits).
    waiters: u32,
}

impl RecvQueue {
    /// Whether a receive is posted.
    pub(crate) fn has_receive(&self) -> bool {
        !self.posted.is_empty()
    }
}

/// The receive half of a queue pair.
pub(crate) struct Receiver {
    qpn: u32,
    /// Where its completions go.
    pub(crate) cq: Arc<CqInner>,
    queue: SpinLock<RecvQueue>,
    /// Where [`Receiver::wait`] sleeps (the TCP responder's RNR retries); a post notifies
    /// under it, so a waiter that found no receive cannot miss the wake-up.
    sleep: Mutex<()>,
    posted: Condvar,
    /// Set by a requester that found no receive posted here (under the receive queue's
    /// lock): the next post of a receive lets that requester retry at once, and only then
    /// does a post look at its peer.
    rnr_waiting: AtomicBool,
}

impl Receiver {
    /// The receive queue of queue pair `qpn`, `depth` receives deep, completing to `cq`.
    pub(crate) fn new(qpn: u32, cq: Arc<CqInner>, depth: usize) -> Self {
        Self {
            qpn,
            cq,
            queue: SpinLock::new(RecvQueue {
                inflight: InFlight::new(depth),
                posted: VecDeque::with_capacity(depth),
                waiters: 0,
            }),
            sleep: Mutex::new(()),
            posted: Condvar::new(),
            rnr_waiting: AtomicBool::new(false),
        }
    }

    /// The posted receives, locked.
    pub(crate) fn lock(&self) -> SpinGuard<'_, RecvQueue> {
        self.queue.lock()
    }

    /// A requester found no receive posted (called under the receive queue's lock).
    pub(crate) fn note_receiver_not_ready(&self) {
        self.rnr_waiting.store(true, Ordering::Release);
    }

    /// Consumes the head receive for an incoming SEND (`payload` given) or WRITE_WITH_IMM.
    /// Returns false when a SEND does not fit the receive buffer (the receive then
    /// completes with `LocalLength`).
    pub(crate) fn complete(
        &self,
        rq: &mut RecvQueue,
        opcode: WcOpcode,
        len: usize,
        imm: Option<u32>,
        payload: Option<&Payload<'_>>,
        publish: Publish<'_>,
    ) -> bool {
        let Some(token) = rq.posted.pop_front() else {
            return false;
        };
        let Some(entry) = rq.inflight.remove(token) else {
            return false;
        };
        let mut status = WcStatus::Success;
        if let Some(payload) = payload {
            if len > entry.buf.len() {
                status = WcStatus::LocalLength;
            } else {
                let mem = entry.buf.region().memory();
                let ok = match payload {
                    Payload::Memory { memory, offset } => memory.copy_to(*offset, mem, entry.buf.offset(), len),
                    Payload::Bytes(b) => mem.write(entry.buf.offset(), &b[..len]),
                };
                if ok.is_err() {
                    status = WcStatus::LocalLength;
                }
            }
        }
        let c = Completion {
            wr_id: entry.wr_id,
            status,
            opcode,
            byte_len: if status == WcStatus::Success { len as u32 } else { 0 },
            imm,
            qp_num: self.qpn,
            buf: Some(entry.buf),
            path: PathSignal::default(),
        };
        match publish {
            Publish::Defer(slot) => *slot = Some(c),
            Publish::At(ready_ns) => self.cq.push(ready_ns, c),
        }
        status == WcStatus::Success
    }

    /// Makes a receive completion that [`Receiver::complete`] held back visible.
    pub(crate) fn publish(&self, c: Completion) {
        self.cq.push(0, c);
    }

    /// Posts receive `wr_id` into `buf`; a queue pair that has `failed` (read under the
    /// queue's lock, so a concurrent failure flushes it or it is flushed here) completes it
    /// at once with `Flushed`. True when a requester had found no receive posted: the
    /// caller lets it retry now.
    pub(crate) fn post(
        &self,
        wr_id: u64,
        buf: LocalBuf,
        failed: impl FnOnce() -> bool,
    ) -> Result<bool, PostError<LocalBuf>> {
        let waiters = {
            let mut rq = self.lock();
            let token = match rq.inflight.insert(InFlightEntry { wr_id, opcode: WcOpcode::Recv, buf }) {
                Ok(t) => t,
                Err(entry) => {
                    let depth = rq.inflight.depth();
                    return Err(PostError {
                        error: FabricError::QueueFull { queue: "receive", qpn: self.qpn, depth },
                        request: entry.buf,
                    });
                }
            };
            if failed() {
                let entry = rq.inflight.remove(token).expect("just inserted");
                self.cq.push(0, flushed(entry, self.qpn));
                return Ok(false);
            }
            rq.posted.push_back(token);
            rq.waiters
        };
        if waiters > 0 {
            let _sleep = self.sleep.lock().expect("receive sleep lock");
            self.posted.notify_all();
        }
        // The flag was set under the receive queue's lock before ours, so it is seen here.
        if self.rnr_waiting.load(Ordering::Acquire) {
            self.rnr_waiting.store(false, Ordering::Relaxed);
            return Ok(true);
        }
        Ok(false)
    }

    /// Completes every posted receive with `Flushed`, visible at `ready_ns` (the queue
    /// pair failed).
    pub(crate) fn flush(&self, ready_ns: u64) {
        let mut rq = self.lock();
        while let Some(token) = rq.posted.pop_front() {
            if let Some(entry) = rq.inflight.remove(token) {
                self.cq.push(ready_ns, flushed(entry, self.qpn));
            }
        }
    }

    /// Forgets every posted receive, handing its entry to `out` (the queue pair is reset).
    pub(crate) fn drain(&self, out: &mut Vec<InFlightEntry>) {
        let mut rq = self.lock();
        rq.posted.clear();
        rq.inflight.drain(out);
    }

    /// Waits up to `timeout` for a receive to be posted (the TCP responder's RNR retries).
    /// `alive` says whether the node still lives (a dead node's queue pair stops waiting).
    pub(crate) fn wait(&self, timeout: Duration, alive: impl Fn() -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let sleep = self.sleep.lock().expect("receive sleep lock");
            {
                let mut rq = self.lock();
                if rq.has_receive() {
                    return true;
                }
                // Counted under the receive queue's lock, so a post that lands after our
                // look sees us; it notifies under `sleep`, which it gets once we wait.
                rq.waiters += 1;
            }
            let now = Instant::now();
            let woke = now < deadline && alive();
            if woke {
                let _unused = self.posted.wait_timeout(sleep, deadline - now).expect("receive sleep lock");
            } else {
                drop(sleep);
            }
            self.lock().waiters -= 1;
            if !woke {
                return self.lock().has_receive();
            }
        }
    }
}

fn flushed(entry: InFlightEntry, qpn: u32) -> Completion {
    Completion {
        wr_id: entry.wr_id,
        status: WcStatus::Flushed,
        opcode: entry.opcode,
        byte_len: 0,
        imm: None,
        qp_num: qpn,
        buf: Some(entry.buf),
        path: PathSignal::default(),
    }
}
