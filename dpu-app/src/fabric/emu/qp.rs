//! The requester half of the emulated NIC and the queue pair it belongs to.
//!
//! Requests run in post order per queue pair. In process with the ideal model (no
//! latency, loss or partitions), the posting thread performs a request against the peer
//! at once (the DMA a NIC would do). With a timed model, each request's fate is drawn at
//! post time ([`Model::transmit`](super::Model::transmit)): it reaches the peer at
//! `deliver_at = post + one-way delay`, never before the request posted ahead of it on
//! the same queue pair, and only then does it act on the peer - memory effects, atomics,
//! receive completions (visible from `deliver_at`); its own completion is visible one
//! more delay later, when the response is back. A lost request fails with
//! `RetryExceeded` at `post + retry budget`. Until they are due, requests wait on the
//! send queue with the pending flag set; whoever polls or waits on a completion queue the
//! queue pair reports to, posts on it, posts a receive at its peer after it found none
//! there (receiver not ready) or calls [`Network::progress`](super::Network::progress)
//! performs the due ones: in process, the emulated NIC's DMA runs on those threads.
//!
//! A request that cannot run yet (no receive posted at the peer, the peer not answering)
//! waits at the head of the send queue, and everything behind it waits too (per-QP
//! ordering); it is retried when the peer posts a receive or a poll drives the timers,
//! and fails with `RnrRetryExceeded` or `RetryExceeded` once its retry budget has passed
//! on the clock. Over TCP, requests stream to the peer's node, which holds each for its
//! delay, and responses complete them in order (see `tcp`).
//!
//! A fatal completion moves the queue pair to ERR and flushes everything behind it and
//! every posted receive with `Flushed`; posts in ERR complete at once with `Flushed`.

use std::collections::VecDeque;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use super::context::{gid_of, in_process_gid, in_process_id, Attachment, NodeInner};
use super::cq::{CqInner, EmuCq};
use super::driven::Driven;
use super::model::{Fate, Message, WIRE_HEADER_BYTES};
use super::receive::{Payload, Receiver};
use super::region_cache::RegionCache;
use super::responder::{execute, Incoming, Nak, Sink, Target};
use crate::fabric::{
    Access, Completion, Endpoint, FabricError, InFlight, InFlightEntry, LocalBuf, Op, PathSignal, PostError, QpEvent,
    QpOptions, QpState, Result, StateCell, WcOpcode, WcStatus, WorkRequest,
};
use crate::limits::{ATOMIC_BYTES, MESSAGE_BYTES_MAX};

/// How a queue pair reaches its peer.
pub(crate) enum Link {
    None,
    InProcess {
        /// Held strongly (no upgrade per request); a destroyed peer is seen by its
        /// `destroyed` flag, and the owner's drop clears this link, breaking the cycle.
        peer: Arc<QpInner>,
        /// The peer node's place in the model.
        peer_node: u32,
    },
    Tcp {
        stream: TcpStream,
        conn: u64,
        peer_node: u32,
        /// The connection closed while nothing was outstanding: like a dead peer on
        /// hardware, the queue pair learns only when its next request times out.
        broken: bool,
    },
}

/// A posted send request that has not completed.
pub(crate) struct Waiting {
    pub(crate) token: u64,
    pub(crate) op: Op,
    pub(crate) psn: u32,
    /// Clock time after which a waiting request fails (0: not waiting on a timer yet).
    pub(crate) deadline_ns: u64,
    /// Over TCP: a request that never went out (lost by the model, or failing a local
    /// check) fails with this status, this long after it reaches the head.
    pub(crate) doomed: Option<(WcStatus, u64)>,
    /// In process: when the request takes effect at the peer, fixed at post time.
    pub(crate) transit: Transit,
}

/// When an in-process request takes effect at the peer, decided at post time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transit {
    /// As soon as it reaches the head of the send queue: the ideal model's fast path.
    /// TCP requests carry it unused (the TCP responder holds each request for its delay).
    Now,
    /// Reaches the peer at clock time `at_ns`; the response takes `back_ns` more; the
    /// completion carries `signal`.
    Deliver { at_ns: u64, back_ns: u64, signal: PathSignal },
    /// Never reaches the peer (every attempt lost, or the local check failed): completes
    /// with `status` at clock time `at_ns` and moves the queue pair to ERR.
    Fail { status: WcStatus, at_ns: u64 },
}

pub(crate) struct SendQueue {
    pub(crate) state: StateCell,
    pub(crate) link: Link,
    pub(crate) inflight: InFlight,
    pub(crate) waiting: VecDeque<Waiting>,
    next_psn: u32,
    last_ready_ns: u64,
    /// The latest delivery time handed out on a timed model: a later request is never
    /// due before it, so requests of one queue pair reach the peer in post order.
    last_due_ns: u64,
    pub(crate) frame: Vec<u8>,
    /// In process: the peer node's regions this queue pair has reached.
    regions: RegionCache,
}

pub(crate) struct QpInner {
    pub(crate) qpn: u32,
    pub(crate) node: Arc<NodeInner>,
    send_cq: Arc<CqInner>,
    pub(crate) options: QpOptions,
    state_mirror: AtomicU8,
    pub(crate) sq: Mutex<SendQueue>,
    /// The receive queue (the responder's side).
    pub(crate) recv: Receiver,
    peer: Mutex<Option<Weak<QpInner>>>,
    pending: AtomicBool,
    /// Set when the owner destroys the queue pair; threads that still hold it briefly
    /// must treat it as gone.
    destroyed: AtomicBool,
}

fn encode_state(s: QpState) -> u8 {
    match s {
        QpState::Reset => 0,
        QpState::Init => 1,
        QpState::Rtr => 2,
        QpState::Rts => 3,
        QpState::Error => 4,
    }
}

fn decode_state(v: u8) -> QpState {
    match v {
        0 => QpState::Reset,
        1 => QpState::Init,
        2 => QpState::Rtr,
        3 => QpState::Rts,
        _ => QpState::Error,
    }
}

/// What one attempt at the head request came to.
enum Attempt {
    /// Completed (successfully or not), visible at clock time `ready_ns`, with an
    /// atomic's old value and what the fabric measured.
    Done { status: WcStatus, value: u64, ready_ns: u64, path: PathSignal },
    /// Cannot run yet; fails with `status` once `budget_ns` has passed.
    Wait { status: WcStatus, budget_ns: u64 },
}

impl QpInner {
    pub(crate) fn create(
        node: &Arc<NodeInner>,
        send_cq: &EmuCq,
        recv_cq: &EmuCq,
        options: QpOptions,
    ) -> Result<Arc<Self>> {
        let qp = node.add_qp(|qpn| {
            Arc::new(QpInner {
                qpn,
                node: Arc::clone(node),
                send_cq: Arc::clone(&send_cq.inner),
                options,
                state_mirror: AtomicU8::new(encode_state(QpState::Reset)),
                sq: Mutex::new(SendQueue {
                    state: StateCell::new(qpn),
                    link: Link::None,
                    inflight: InFlight::new(options.send_depth),
                    waiting: VecDeque::with_capacity(options.send_depth),
                    next_psn: initial_psn(node.id, qpn),
                    last_ready_ns: 0,
                    last_due_ns: 0,
                    frame: Vec::new(),
                    regions: RegionCache::default(),
                }),
                recv: Receiver::new(qpn, Arc::clone(&recv_cq.inner), options.recv_depth),
                peer: Mutex::new(None),
                pending: AtomicBool::new(false),
                destroyed: AtomicBool::new(false),
            })
        })?;
        send_cq.inner.attach(qp.clone())?;
        if !Arc::ptr_eq(&send_cq.inner, &recv_cq.inner) {
            if let Err(e) = recv_cq.inner.attach(qp.clone()) {
                send_cq.inner.detach(&*qp);
                return Err(e);
            }
        }
        Ok(qp)
    }

    pub(crate) fn state(&self) -> QpState {
        decode_state(self.state_mirror.load(Ordering::Acquire))
    }

    pub(crate) fn accepts_requests(&self) -> bool {
        !self.destroyed.load(Ordering::Acquire) && matches!(self.state(), QpState::Rtr | QpState::Rts)
    }

    fn apply(&self, sq: &mut SendQueue, event: QpEvent, op: &'static str) -> Result<()> {
        let to = sq.state.apply(event).map_err(|state| FabricError::QpState { qpn: self.qpn, state, op })?;
        self.state_mirror.store(encode_state(to), Ordering::Release);
        Ok(())
    }

    pub(crate) fn lock_sq(&self) -> std::sync::MutexGuard<'_, SendQueue> {
        self.sq.lock().expect("send queue lock")
    }

    fn now_ns(&self) -> u64 {
        self.node.clock.now_ns()
    }

    /// Completes send request `token` with `status`, visible at `ready_ns`.
    pub(crate) fn complete_send(&self, sq: &mut SendQueue, token: u64, status: WcStatus, value: u64, ready_ns: u64) {
        self.complete_send_measured(sq, token, status, value, ready_ns, PathSignal::default());
    }

    /// [`QpInner::complete_send`] with what the fabric measured of the request.
    fn complete_send_measured(
        &self,
        sq: &mut SendQueue,
        token: u64,
        status: WcStatus,
        value: u64,
        ready_ns: u64,
        path: PathSignal,
    ) {
        let Some(entry) = sq.inflight.remove(token) else {
            return;
        };
        let ready_ns = ready_ns.max(sq.last_ready_ns);
        sq.last_ready_ns = ready_ns;
        let byte_len = match entry.opcode {
            WcOpcode::CompareSwap | WcOpcode::FetchAdd => {
                if status == WcStatus::Success {
                    // The buffer was checked to be 8 bytes at post time.
                    let _ = entry.buf.write(&value.to_le_bytes());
                }
                ATOMIC_BYTES
            }
            _ => entry.buf.len(),
        };
        self.send_cq.push(
            ready_ns,
            Completion {
                wr_id: entry.wr_id,
                status,
                opcode: entry.opcode,
                byte_len: if status == WcStatus::Success { byte_len as u32 } else { 0 },
                imm: None,
                qp_num: self.qpn,
                buf: Some(entry.buf),
                path: if status == WcStatus::Success { path } else { PathSignal::default() },
            },
        );
    }

    /// Moves the queue pair to ERR and flushes every waiting request and posted receive.
    pub(crate) fn fail(&self, sq: &mut SendQueue) {
        if sq.state.get() == QpState::Error {
            return;
        }
        let _ = self.apply(sq, QpEvent::Fail, "fail");
        if let Link::Tcp { stream, .. } = &sq.link {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        let ready_ns = sq.last_ready_ns;
        while let Some(w) = sq.waiting.pop_front() {
            self.complete_send(sq, w.token, WcStatus::Flushed, 0, ready_ns);
        }
        self.recv.flush(ready_ns);
    }

    /// Marks the queue pair pending, so that polls of its completion queues (and
    /// [`Network::progress`](super::Network::progress)) come back to it.
    fn hold(&self) -> bool {
        self.pending.store(true, Ordering::Release);
        self.send_cq.note_pending();
        if !Arc::ptr_eq(&self.send_cq, &self.recv.cq) {
            self.recv.cq.note_pending();
        }
        true
    }

    /// Performs what has come due at the head of the send queue at `now_ns` (read from
    /// the clock when `None` and the model needs it).
    fn run_waiting(&self, sq: &mut SendQueue, now_ns: Option<u64>) -> bool {
        if !matches!(sq.link, Link::InProcess { .. }) || sq.state.get() != QpState::Rts {
            self.pending.store(false, Ordering::Release);
            return false;
        }
        // An ideal model needs no time: skip the clock read on the fast path.
        let timed = self.node.model.needs_clock();
        let now_ns = match now_ns {
            Some(now_ns) => now_ns,
            None if timed => self.now_ns(),
            None => 0,
        };
        while let Some(head) = sq.waiting.front() {
            let (token, op, psn, deadline_ns, transit) =
                (head.token, head.op, head.psn, head.deadline_ns, head.transit);
            let attempt = match transit {
                Transit::Now => self.attempt(sq, token, op, psn, now_ns),
                // Still on its way (and everything behind it too).
                Transit::Deliver { at_ns, .. } | Transit::Fail { at_ns, .. } if now_ns < at_ns => return self.hold(),
                Transit::Deliver { at_ns, back_ns, signal } => {
                    // The first attempt lands at the delivery time; a retry (RNR, silent
                    // peer) lands when it is driven.
                    let arrive_ns = if deadline_ns == 0 { at_ns } else { now_ns };
                    self.deliver(sq, token, op, arrive_ns, back_ns, signal)
                }
                Transit::Fail { status, at_ns } => {
                    Attempt::Done { status, value: 0, ready_ns: at_ns, path: PathSignal::default() }
                }
            };
            match attempt {
                Attempt::Done { status, value, ready_ns, path } => {
                    sq.waiting.pop_front();
                    self.complete_send_measured(sq, token, status, value, ready_ns, path);
                    if status != WcStatus::Success {
                        self.fail(sq);
                        break;
                    }
                }
                Attempt::Wait { status, budget_ns } => {
                    let now_ns = if timed { now_ns } else { self.now_ns() };
                    let start_ns = match transit {
                        Transit::Deliver { at_ns, .. } => at_ns,
                        Transit::Now | Transit::Fail { .. } => now_ns,
                    };
                    let deadline_ns = if deadline_ns == 0 { start_ns + budget_ns.max(1) } else { deadline_ns };
                    if now_ns >= deadline_ns {
                        sq.waiting.pop_front();
                        self.complete_send(sq, token, status, 0, deadline_ns);
                        self.fail(sq);
                        break;
                    }
                    sq.waiting.front_mut().expect("head exists").deadline_ns = deadline_ns;
                    return self.hold();
                }
            }
        }
        self.pending.store(false, Ordering::Release);
        false
    }

    /// On a timed model, draws the fate of request `token` at post time: when it reaches
    /// the peer (never before the request posted ahead of it), or when it fails.
    fn transit(&self, sq: &mut SendQueue, token: u64, op: Op, psn: u32, peer_node: u32, now_ns: u64) -> Transit {
        let entry = sq.inflight.get(token).expect("just inserted");
        let transit = if let Some(status) = self.local_check(entry, op) {
            Transit::Fail { status, at_ns: now_ns.max(sq.last_due_ns) }
        } else {
            let o = &self.options;
            let timeout_ns = u64::from(o.timeout_us) * 1_000;
            let msg = message(self.node.place, peer_node, self.qpn, psn, op, entry.buf.len());
            match self.node.model.transmit(msg, now_ns, o.retry_count, timeout_ns) {
                Fate::Delivered { delay_ns, back_ns, signal } => {
                    Transit::Deliver { at_ns: (now_ns + delay_ns).max(sq.last_due_ns), back_ns, signal }
                }
                Fate::Lost { after_ns } => {
                    Transit::Fail { status: WcStatus::RetryExceeded, at_ns: (now_ns + after_ns).max(sq.last_due_ns) }
                }
            }
        };
        let (Transit::Deliver { at_ns, .. } | Transit::Fail { at_ns, .. }) = transit else {
            unreachable!("a timed request has a time")
        };
        sq.last_due_ns = at_ns;
        transit
    }

    /// One attempt at an in-process request on the ideal model's fast path: checked,
    /// transmitted and performed now.
    fn attempt(&self, sq: &mut SendQueue, token: u64, op: Op, psn: u32, now_ns: u64) -> Attempt {
        let Link::InProcess { peer_node, .. } = &sq.link else { unreachable!("run_waiting checks the link") };
        let o = &self.options;
        let timeout_ns = u64::from(o.timeout_us) * 1_000;
        let entry = sq.inflight.get(token).expect("waiting requests are in flight");
        if let Some(status) = self.local_check(entry, op) {
            return Attempt::Done { status, value: 0, ready_ns: now_ns, path: PathSignal::default() };
        }
        let msg = message(self.node.place, *peer_node, self.qpn, psn, op, entry.buf.len());
        match self.node.model.transmit(msg, now_ns, o.retry_count, timeout_ns) {
            Fate::Delivered { delay_ns, back_ns, signal } => {
                self.deliver(sq, token, op, now_ns + delay_ns, back_ns, signal)
            }
            Fate::Lost { after_ns } => Attempt::Done {
                status: WcStatus::RetryExceeded,
                value: 0,
                ready_ns: now_ns + after_ns,
                path: PathSignal::default(),
            },
        }
    }

    /// Performs request `token` at the peer as arriving at clock time `arrive_ns` (receive
    /// completions there become visible then); its response takes `back_ns`, and its
    /// completion carries `signal`.
    fn deliver(
        &self,
        sq: &mut SendQueue,
        token: u64,
        op: Op,
        arrive_ns: u64,
        back_ns: u64,
        signal: PathSignal,
    ) -> Attempt {
        let SendQueue { link, inflight, regions, .. } = sq;
        let Link::InProcess { peer, .. } = link else { unreachable!("run_waiting checks the link") };
        let o = &self.options;
        let entry = inflight.get(token).expect("waiting requests are in flight");
        let local = entry.buf.region().memory();
        let offset = entry.buf.offset();
        let len = entry.buf.len();
        let incoming = match op {
            Op::Write { remote, imm } => {
                Incoming::Write { remote, len, imm, payload: Payload::Memory { memory: local, offset } }
            }
            Op::Read { remote } => Incoming::Read { remote, len, sink: Sink::Memory { memory: local, offset } },
            Op::CompareSwap { remote, compare, swap } => Incoming::CompareSwap { remote, compare, swap },
            Op::FetchAdd { remote, add } => Incoming::FetchAdd { remote, add },
            Op::Send => Incoming::Send { len, imm: None, payload: Payload::Memory { memory: local, offset } },
        };
        let ready_ns = arrive_ns + back_ns;
        match execute(peer.target(), Some(regions), incoming, arrive_ns, None) {
            Ok(value) => Attempt::Done { status: WcStatus::Success, value, ready_ns, path: signal },
            Err(Nak::Silent) => Attempt::Wait {
                status: WcStatus::RetryExceeded,
                budget_ns: (u64::from(o.retry_count) + 1) * u64::from(o.timeout_us) * 1_000,
            },
            Err(Nak::ReceiverNotReady) => Attempt::Wait {
                status: WcStatus::RnrRetryExceeded,
                budget_ns: (u64::from(o.rnr_retry_count) + 1) * u64::from(o.rnr_timer_us) * 1_000,
            },
            Err(Nak::RemoteAccess) => {
                Attempt::Done { status: WcStatus::RemoteAccess, value: 0, ready_ns, path: PathSignal::default() }
            }
            Err(Nak::InvalidRequest) => Attempt::Done {
                status: WcStatus::RemoteInvalidRequest,
                value: 0,
                ready_ns,
                path: PathSignal::default(),
            },
        }
    }

    /// The lkey check: the buffer's region is registered on this node, with local write
    /// where the NIC writes into it.
    pub(crate) fn local_check(&self, entry: &InFlightEntry, op: Op) -> Option<WcStatus> {
        let mr = entry.buf.region();
        if mr.domain() != self.node.domain() {
            return Some(WcStatus::LocalProtection);
        }
        let writes_locally = matches!(op, Op::Read { .. } | Op::CompareSwap { .. } | Op::FetchAdd { .. });
        if writes_locally && !mr.access().contains(Access::LOCAL_WRITE) {
            return Some(WcStatus::LocalProtection);
        }
        None
    }

    /// Over TCP: fails the head while it is a request that never went out.
    pub(crate) fn drain_doomed_head(&self, sq: &mut SendQueue) {
        if let Some(Waiting { token, doomed: Some((status, after_ns)), .. }) = sq.waiting.front() {
            let (token, status, ready_ns) = (*token, *status, self.now_ns() + after_ns);
            sq.waiting.pop_front();
            self.complete_send(sq, token, status, 0, ready_ns);
            self.fail(sq);
        }
    }

    /// Waits up to `timeout` for a receive to be posted (the TCP responder's RNR retries).
    pub(crate) fn wait_for_receive(&self, timeout: Duration) -> bool {
        self.recv.wait(timeout, || self.node.is_alive())
    }

    /// The queue pair as the responder sees it, for a request that arrives now.
    pub(crate) fn target(&self) -> Target<'_> {
        Target { node: &self.node, accepts_requests: self.accepts_requests(), recv: &self.recv }
    }

    /// Waits up to `timeout` for the queue pair to reach RTR (a TCP peer may be faster).
    pub(crate) fn wait_until_ready(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while !self.accepts_requests() {
            if Instant::now() >= deadline || self.state() == QpState::Error || self.destroyed.load(Ordering::Acquire) {
                return false;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        true
    }

    /// Posts a send request; over TCP, `send_tcp` sends it (the TCP transport, `tcp`,
    /// sits above the queue pair), called with the send queue locked so that frames
    /// leave in post order.
    pub(crate) fn post(
        &self,
        request: WorkRequest,
        send_tcp: impl FnOnce(&QpInner, &mut SendQueue, u64, Op, u32),
    ) -> Result<(), PostError> {
        let refuse = |error, request| Err(PostError { error, request });
        let len = request.buf.len();
        if len > MESSAGE_BYTES_MAX {
            return refuse(FabricError::TooLong { len, max: MESSAGE_BYTES_MAX }, request);
        }
        if matches!(request.op, Op::CompareSwap { .. } | Op::FetchAdd { .. }) && len != ATOMIC_BYTES {
            return refuse(FabricError::InvalidRequest("an atomic's local buffer must be exactly 8 bytes"), request);
        }
        let mut sq = self.lock_sq();
        let state = sq.state.get();
        if !matches!(state, QpState::Rts | QpState::Error) {
            return refuse(FabricError::QpState { qpn: self.qpn, state, op: "post send" }, request);
        }
        let WorkRequest { wr_id, op, buf } = request;
        let token = match sq.inflight.insert(InFlightEntry { wr_id, opcode: op.opcode(), buf }) {
            Ok(t) => t,
            Err(entry) => {
                let depth = sq.inflight.depth();
                return refuse(
                    FabricError::QueueFull { queue: "send", qpn: self.qpn, depth },
                    WorkRequest { wr_id, op, buf: entry.buf },
                );
            }
        };
        if state == QpState::Error {
            let ready_ns = sq.last_ready_ns;
            self.complete_send(&mut sq, token, WcStatus::Flushed, 0, ready_ns);
            return Ok(());
        }
        let psn = sq.next_psn;
        sq.next_psn = sq.next_psn.wrapping_add(1) & 0x00FF_FFFF;
        match sq.link {
            Link::InProcess { peer_node, .. } => {
                if self.node.model.needs_clock() {
                    // One clock read for the post: its fate and what has come due by then.
                    let now_ns = self.now_ns();
                    let transit = self.transit(&mut sq, token, op, psn, peer_node, now_ns);
                    sq.waiting.push_back(Waiting { token, op, psn, deadline_ns: 0, doomed: None, transit });
                    // A post also performs what has come due on this queue pair.
                    self.run_waiting(&mut sq, Some(now_ns));
                } else {
                    // Nothing ahead of it: perform it now, without queueing it. One that
                    // cannot run yet (no receive at the peer, a silent peer) is queued as
                    // the head below, where `run_waiting` tries again and starts its timer.
                    if sq.waiting.is_empty() {
                        if let Attempt::Done { status, value, ready_ns, path } =
                            self.attempt(&mut sq, token, op, psn, 0)
                        {
                            self.complete_send_measured(&mut sq, token, status, value, ready_ns, path);
                            if status != WcStatus::Success {
                                self.fail(&mut sq);
                            }
                            return Ok(());
                        }
                    }
                    sq.waiting.push_back(Waiting {
                        token,
                        op,
                        psn,
                        deadline_ns: 0,
                        doomed: None,
                        transit: Transit::Now,
                    });
                    if sq.waiting.len() == 1 {
                        self.run_waiting(&mut sq, None);
                    }
                }
            }
            Link::Tcp { .. } => send_tcp(self, &mut sq, token, op, psn),
            Link::None => unreachable!("an RTS queue pair has a link"),
        }
        Ok(())
    }

    /// Posts a receive.
    pub(crate) fn post_receive(&self, wr_id: u64, buf: LocalBuf) -> Result<(), PostError<LocalBuf>> {
        let state = self.state();
        if state == QpState::Reset {
            return Err(PostError {
                error: FabricError::QpState { qpn: self.qpn, state, op: "post receive" },
                request: buf,
            });
        }
        let mr = buf.region();
        if mr.domain() != self.node.domain() || !mr.access().contains(Access::LOCAL_WRITE) {
            return Err(PostError {
                error: FabricError::InvalidRequest("a receive buffer must be registered on this node with LOCAL_WRITE"),
                request: buf,
            });
        }
        // The peer may be waiting for exactly this receive (RNR): let it retry now.
        if self.recv.post(wr_id, buf, || self.state() == QpState::Error)? {
            let peer = self.peer.lock().expect("peer lock").as_ref().and_then(Weak::upgrade);
            if let Some(peer) = peer {
                if peer.pending.load(Ordering::Acquire) {
                    peer.progress();
                }
            }
        }
        Ok(())
    }
}

impl Driven for QpInner {
    fn is_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    fn progress(&self) -> bool {
        let mut sq = self.lock_sq();
        self.run_waiting(&mut sq, None)
    }
}

/// The model's view of a request of `op` with a local buffer of `len` bytes: what it
/// and its response cost the ports on the way.
pub(crate) fn message(src_node: u32, dst_node: u32, src_qpn: u32, psn: u32, op: Op, len: usize) -> Message {
    let len = len as u64;
    let (bytes, response_bytes) = match op {
        Op::Write { .. } | Op::Send => (WIRE_HEADER_BYTES + len, WIRE_HEADER_BYTES),
        Op::Read { .. } => (WIRE_HEADER_BYTES, WIRE_HEADER_BYTES + len),
        Op::CompareSwap { .. } | Op::FetchAdd { .. } => (WIRE_HEADER_BYTES, WIRE_HEADER_BYTES),
    };
    Message { src_node, dst_node, src_qpn, psn, bytes, response_bytes }
}

/// A deterministic first PSN (hardware picks one at random; we derive it).
fn initial_psn(node: u32, qpn: u32) -> u32 {
    (node.wrapping_mul(0x9E37_79B9) ^ qpn.wrapping_mul(0x85EB_CA6B)) & 0x00FF_FFFF
}

impl QpInner {
    /// Destroys the queue pair (its owner dropped it): it stops answering and its
    /// connection closes, so the peer sees it gone.
    pub(crate) fn destroy(&self) {
        self.destroyed.store(true, Ordering::Release);
        let mut sq = self.lock_sq();
        if let Link::Tcp { stream, .. } = &sq.link {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        sq.link = Link::None;
        sq.regions.clear();
        drop(sq);
        self.send_cq.detach(self);
        self.recv.cq.detach(self);
    }

    /// The endpoint a peer connects to.
    pub(crate) fn endpoint(&self) -> Endpoint {
        let psn = self.lock_sq().next_psn;
        match self.node.attachment {
            Attachment::InProcess(_) => {
                Endpoint { gid: in_process_gid(self.node.id), qpn: self.qpn, psn, lid: 0, port: 0 }
            }
            Attachment::Tcp(addr) => Endpoint { gid: gid_of(addr.ip()), qpn: self.qpn, psn, lid: 0, port: addr.port() },
        }
    }

    /// Reset -> INIT.
    pub(crate) fn modify_to_init(&self) -> Result<()> {
        let mut sq = self.lock_sq();
        self.apply(&mut sq, QpEvent::Init, "modify to INIT")
    }

    /// INIT -> RTR, linked to `remote`: the in-process peer, or over TCP the connection
    /// `connect_tcp` opens (the TCP transport, `tcp`, sits above the queue pair).
    pub(crate) fn modify_to_rtr(
        self: &Arc<Self>,
        remote: &Endpoint,
        connect_tcp: impl FnOnce(&Arc<QpInner>, &Endpoint) -> Result<Link>,
    ) -> Result<()> {
        if self.state() != QpState::Init {
            return Err(FabricError::QpState { qpn: self.qpn, state: self.state(), op: "modify to RTR" });
        }
        let link = match &self.node.attachment {
            Attachment::InProcess(net) => {
                let peer_node = in_process_id(&remote.gid).ok_or_else(|| FabricError::Connect {
                    peer: format!("{remote:?}"),
                    why: "not an in-process endpoint".into(),
                })?;
                let net = net.upgrade().ok_or_else(|| FabricError::Connect {
                    peer: format!("{remote:?}"),
                    why: "network is gone".into(),
                })?;
                let node = net.node(peer_node).ok_or_else(|| FabricError::Connect {
                    peer: format!("node {peer_node}"),
                    why: "no such node".into(),
                })?;
                let peer = node.qp::<QpInner>(remote.qpn).ok_or_else(|| FabricError::Connect {
                    peer: format!("node {peer_node} qp {}", remote.qpn),
                    why: "no such queue pair".into(),
                })?;
                *self.peer.lock().expect("peer lock") = Some(Arc::downgrade(&peer));
                Link::InProcess { peer, peer_node: node.place }
            }
            Attachment::Tcp(_) => connect_tcp(self, remote)?,
        };
        let mut sq = self.lock_sq();
        sq.link = link;
        self.apply(&mut sq, QpEvent::Rtr, "modify to RTR")
    }

    /// RTR -> RTS.
    pub(crate) fn modify_to_rts(&self) -> Result<()> {
        let mut sq = self.lock_sq();
        self.apply(&mut sq, QpEvent::Rts, "modify to RTS")
    }

    /// Any state -> Reset: forgets the link and every outstanding request and receive,
    /// handing their buffers to `out`.
    pub(crate) fn modify_to_reset(&self, out: &mut Vec<LocalBuf>) -> Result<()> {
        let mut sq = self.lock_sq();
        if let Link::Tcp { stream, .. } = &sq.link {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        sq.link = Link::None;
        sq.waiting.clear();
        let mut entries = Vec::new();
        sq.inflight.drain(&mut entries);
        self.recv.drain(&mut entries);
        out.extend(entries.into_iter().map(|e| e.buf));
        *self.peer.lock().expect("peer lock") = None;
        sq.last_ready_ns = 0;
        sq.last_due_ns = 0;
        sq.regions.clear();
        self.apply(&mut sq, QpEvent::Reset, "modify to RESET")
    }
}
