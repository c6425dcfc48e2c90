//! The emulated completion queue: completions with the clock time they become visible
//! (the model's latency), handed out in that order (each queue pair's in its own
//! order); busy polling, and waits that spin, then
//! block on a condition variable. Every poll and wait first drives the attached queue
//! pairs that are pending - requests due for delivery, receiver-not-ready retries,
//! timeouts - as the NIC would on its own: in process, the NIC's work runs on the
//! threads that poll.
//!
//! The entries sit behind a [`SpinLock`] (one atomic per push and per poll, where a
//! `Mutex` costs two); a blocked waiter sleeps on a separate mutex and condition variable,
//! which a push touches only when the waiter count (read under the entries' lock) says
//! someone sleeps. The queue rewinds to the start of its buffer whenever it drains, so a
//! queue that is polled as fast as it fills stays on a few hot cache lines instead of
//! sweeping its whole depth.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::clock::Clock;
use super::driven::Driven;
use super::spin::SpinLock;
use crate::fabric::{Completion, CompletionQueue, FabricError, Result};
use crate::limits::{CQ_DEPTH_MAX, QPS_PER_CQ_MAX, WAIT_SPINS};

/// How long a blocked waiter sleeps before re-checking the clock and pending requests.
const WAIT_SLICE: Duration = Duration::from_micros(500);

struct Entries {
    queue: VecDeque<(u64, Completion)>,
    overrun: bool,
    /// Threads blocked in `wait` (changed under this lock, so a push sees every waiter
    /// that looked at the queue before it).
    waiters: u32,
}

pub(crate) struct CqInner {
    entries: SpinLock<Entries>,
    /// Where blocked waiters sleep; a push notifies under it, so a waiter that found the
    /// queue empty cannot miss the wake-up between its look and its sleep.
    sleep: Mutex<()>,
    ready: Condvar,
    depth: usize,
    clock: Arc<dyn Clock>,
    /// Queue pairs that report here, so that polling can drive their pending requests
    /// (deliveries that have come due, receiver-not-ready retries and timeouts), as the
    /// NIC's timers would. Held strongly (no upgrade per poll): a queue pair detaches
    /// itself when its owner destroys it, which breaks the cycle through its own `Arc`s
    /// of this queue.
    attached: SpinLock<Vec<Arc<dyn Driven>>>,
    any_pending: AtomicBool,
    /// The queue's length as of its last change (nonzero after an overrun too), so a
    /// poll of an empty queue - most polls of an idle node - reads one shared line and
    /// takes no lock.
    queued: AtomicUsize,
}

/// A completion queue of the emulated NIC.
#[derive(Clone)]
pub struct EmuCq {
    pub(crate) inner: Arc<CqInner>,
}

impl std::fmt::Debug for EmuCq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmuCq").field("depth", &self.inner.depth).finish()
    }
}

impl EmuCq {
    pub(crate) fn new(depth: usize, clock: Arc<dyn Clock>) -> Result<Self> {
        if depth == 0 || depth > CQ_DEPTH_MAX {
            return Err(FabricError::Limit { what: "completion queue depth", limit: CQ_DEPTH_MAX });
        }
        Ok(Self {
            inner: Arc::new(CqInner {
                entries: SpinLock::new(Entries { queue: VecDeque::with_capacity(depth), overrun: false, waiters: 0 }),
                sleep: Mutex::new(()),
                ready: Condvar::new(),
                depth,
                clock,
                attached: SpinLock::new(Vec::with_capacity(QPS_PER_CQ_MAX)),
                any_pending: AtomicBool::new(false),
                queued: AtomicUsize::new(0),
            }),
        })
    }
}

impl CqInner {
    pub(crate) fn attach(&self, qp: Arc<dyn Driven>) -> Result<()> {
        let mut a = self.attached.lock();
        if a.len() >= QPS_PER_CQ_MAX {
            return Err(FabricError::Limit { what: "queue pairs per completion queue", limit: QPS_PER_CQ_MAX });
        }
        a.push(qp);
        Ok(())
    }

    /// Forgets `qp` (destroyed by its owner). The others keep their order: polls drive
    /// them in attach order, which a simulation's replay depends on.
    pub(crate) fn detach(&self, qp: &dyn Driven) {
        let mut a = self.attached.lock();
        if let Some(at) = a.iter().position(|q| std::ptr::addr_eq(&**q, qp)) {
            a.remove(at);
        }
    }

    /// Marks that an attached queue pair has requests waiting for their delivery time or
    /// on a timer.
    pub(crate) fn note_pending(&self) {
        self.any_pending.store(true, Ordering::Release);
    }

    /// Adds a completion visible from clock time `ready_ns`.
    pub(crate) fn push(&self, ready_ns: u64, c: Completion) {
        let mut e = self.entries.lock();
        if e.queue.len() >= self.depth {
            // Hardware reports a CQ overrun as an asynchronous error; so do we, on the next
            // poll. The completion (and the buffer it hands back) drops after the unlock.
            e.overrun = true;
            self.queued.store(e.queue.len(), Ordering::Release);
            drop(e);
            drop(c);
            return;
        }
        // In the order completions become visible, as a NIC writes them: an entry goes
        // behind every entry visible no later than it, and behind every entry of its
        // own queue pair (a queue pair's completions keep their order). So a request
        // to a near peer completes while one posted before it to a far peer is still on
        // its way, instead of waiting behind it. Mostly the back: one comparison.
        let qp = c.qp_num;
        let at = e.queue.iter().rposition(|(r, other)| *r <= ready_ns || other.qp_num == qp).map_or(0, |i| i + 1);
        e.queue.insert(at, (ready_ns, c));
        // Release: a poll that sees the new length finds the entry under the lock.
        self.queued.store(e.queue.len(), Ordering::Release);
        let waiters = e.waiters;
        drop(e);
        if waiters > 0 {
            let _sleep = self.sleep.lock().expect("cq sleep lock");
            self.ready.notify_all();
        }
    }

    fn drive_pending(&self) {
        // A plain load first: the flag's line stays shared while nothing is pending.
        if !self.any_pending.load(Ordering::Acquire) || !self.any_pending.swap(false, Ordering::AcqRel) {
            return;
        }
        let attached = self.attached.lock();
        for qp in attached.iter() {
            if qp.is_pending() && qp.progress() {
                self.any_pending.store(true, Ordering::Release);
            }
        }
    }

    fn take(&self, out: &mut Vec<Completion>, max: usize) -> Result<usize> {
        self.drive_pending();
        // A push racing this look is found by the next poll, as on hardware.
        if self.queued.load(Ordering::Acquire) == 0 {
            return Ok(0);
        }
        let mut e = self.entries.lock();
        if e.overrun {
            return Err(FabricError::Limit { what: "completion queue depth (overrun)", limit: self.depth });
        }
        let mut now_ns = None;
        let mut n = 0;
        while n < max {
            let Some(&(ready_ns, _)) = e.queue.front() else {
                break;
            };
            if ready_ns > 0 && ready_ns > *now_ns.get_or_insert_with(|| self.clock.now_ns()) {
                break;
            }
            let (_, c) = e.queue.pop_front().expect("front exists");
            out.push(c);
            n += 1;
        }
        if e.queue.is_empty() {
            // Back to the start of the buffer (no element moves: the queue is empty).
            e.queue.clear();
        }
        self.queued.store(e.queue.len(), Ordering::Release);
        Ok(n)
    }
}

impl CompletionQueue for EmuCq {
    fn poll(&self, out: &mut Vec<Completion>, max: usize) -> Result<usize> {
        self.inner.take(out, max)
    }

    fn wait(&self, out: &mut Vec<Completion>, max: usize, timeout: Duration) -> Result<usize> {
        let inner = &self.inner;
        for _ in 0..WAIT_SPINS {
            let n = inner.take(out, max)?;
            if n > 0 {
                return Ok(n);
            }
            std::hint::spin_loop();
        }
        let deadline = Instant::now() + timeout;
        loop {
            let n = inner.take(out, max)?;
            if n > 0 {
                return Ok(n);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(0);
            }
            let sleep = inner.sleep.lock().expect("cq sleep lock");
            let empty = {
                let mut e = inner.entries.lock();
                e.waiters += 1;
                e.queue.is_empty()
            };
            // Checked after counting ourselves, under `sleep`: a push after this look sees
            // the count and notifies under `sleep`, which it gets only once we wait.
            if empty {
                let _unused = inner.ready.wait_timeout(sleep, WAIT_SLICE.min(deadline - now)).expect("cq sleep lock");
            } else {
                drop(sleep);
            }
            inner.entries.lock().waiters -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::emu::clock::ManualClock;
    use crate::fabric::{WcOpcode, WcStatus};

    fn completion(wr_id: u64, qp_num: u32) -> Completion {
        Completion {
            wr_id,
            status: WcStatus::Success,
            opcode: WcOpcode::Read,
            byte_len: 0,
            imm: None,
            qp_num,
            buf: None,
            path: Default::default(),
        }
    }

    /// A near peer's completion is not held behind a far peer's posted before it on
    /// another queue pair; one queue pair's completions keep their order.
    #[test]
    fn completions_come_out_when_visible_and_each_queue_pair_in_order() {
        let clock = Arc::new(ManualClock::new());
        let cq = EmuCq::new(16, clock.clone()).unwrap();
        let inner = &cq.inner;
        inner.push(180_000, completion(1, 7)); // far, queue pair 7
        inner.push(1_000, completion(2, 8)); // near, queue pair 8
        inner.push(500, completion(3, 7)); // behind 1 on its queue pair, whatever its time
        inner.push(0, completion(4, 9)); // visible at once
        let mut out = Vec::new();
        clock.advance(1_000);
        assert_eq!(cq.poll(&mut out, 16).unwrap(), 2);
        assert_eq!(out.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [4, 2]);
        out.clear();
        clock.advance(178_999);
        assert_eq!(cq.poll(&mut out, 16).unwrap(), 0, "the far response is still on its way");
        clock.advance(1);
        assert_eq!(cq.poll(&mut out, 16).unwrap(), 2);
        assert_eq!(out.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [1, 3]);
    }
}
