//! The emulated completion queue: completions with the clock time they become visible
//! (the model's latency), handed out in order; busy polling, and waits that spin, then
//! block on a condition variable. Every poll and wait first drives the attached queue
//! pairs that are pending - requests due for delivery, receiver-not-ready retries,
//! timeouts - as the NIC would on its own: in process, the NIC's work runs on the
//! threads that poll.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use super::clock::Clock;
use super::qp::QpInner;
use crate::fabric::config::{CQ_DEPTH_MAX, QPS_PER_CQ_MAX, WAIT_SPINS};
use crate::fabric::{Completion, CompletionQueue, FabricError, Result};

/// How long a blocked waiter sleeps before re-checking the clock and pending requests.
const WAIT_SLICE: Duration = Duration::from_micros(500);

struct Entries {
    queue: VecDeque<(u64, Completion)>,
    overrun: bool,
}

pub(crate) struct CqInner {
    entries: Mutex<Entries>,
    ready: Condvar,
    waiters: AtomicU32,
    depth: usize,
    clock: Arc<dyn Clock>,
    /// Queue pairs that report here, so that polling can drive their pending requests
    /// (deliveries that have come due, receiver-not-ready retries and timeouts), as the
    /// NIC's timers would.
    attached: Mutex<Vec<Weak<QpInner>>>,
    any_pending: AtomicBool,
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
                entries: Mutex::new(Entries { queue: VecDeque::with_capacity(depth), overrun: false }),
                ready: Condvar::new(),
                waiters: AtomicU32::new(0),
                depth,
                clock,
                attached: Mutex::new(Vec::with_capacity(QPS_PER_CQ_MAX)),
                any_pending: AtomicBool::new(false),
            }),
        })
    }
}

impl CqInner {
    pub(crate) fn attach(&self, qp: Weak<QpInner>) -> Result<()> {
        let mut a = self.attached.lock().expect("cq lock");
        a.retain(|w| w.strong_count() > 0);
        if a.len() >= QPS_PER_CQ_MAX {
            return Err(FabricError::Limit { what: "queue pairs per completion queue", limit: QPS_PER_CQ_MAX });
        }
        a.push(qp);
        Ok(())
    }

    /// Marks that an attached queue pair has requests waiting for their delivery time or
    /// on a timer.
    pub(crate) fn note_pending(&self) {
        self.any_pending.store(true, Ordering::Release);
    }

    /// Adds a completion visible from clock time `ready_ns`.
    pub(crate) fn push(&self, ready_ns: u64, c: Completion) {
        let mut e = self.entries.lock().expect("cq lock");
        if e.queue.len() >= self.depth {
            // Hardware reports a CQ overrun as an asynchronous error; so do we, on the next poll.
            e.overrun = true;
            return;
        }
        e.queue.push_back((ready_ns, c));
        drop(e);
        if self.waiters.load(Ordering::Acquire) > 0 {
            self.ready.notify_all();
        }
    }

    fn drive_pending(&self) {
        // A plain load first: the flag's line stays shared while nothing is pending.
        if !self.any_pending.load(Ordering::Acquire) || !self.any_pending.swap(false, Ordering::AcqRel) {
            return;
        }
        let attached = self.attached.lock().expect("cq lock");
        for qp in attached.iter() {
            if let Some(qp) = qp.upgrade() {
                if qp.is_pending() && qp.progress() {
                    self.any_pending.store(true, Ordering::Release);
                }
            }
        }
    }

    fn take(&self, out: &mut Vec<Completion>, max: usize) -> Result<usize> {
        self.drive_pending();
        let mut e = self.entries.lock().expect("cq lock");
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
            inner.waiters.fetch_add(1, Ordering::AcqRel);
            let guard = inner.entries.lock().expect("cq lock");
            // Re-check under the lock: a push between `take` and here would be missed otherwise.
            if guard.queue.is_empty() {
                let _unused = inner.ready.wait_timeout(guard, WAIT_SLICE.min(deadline - now)).expect("cq lock");
            }
            inner.waiters.fetch_sub(1, Ordering::AcqRel);
        }
    }
}
