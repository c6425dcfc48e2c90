//! The links to a node's peers and the one way work requests leave the node: every
//! role posts through [`Links::post`], which counts what each queue pair has in
//! flight and turns a refused post into a failed completion delivered at the next
//! poll, so every owner hears of every request exactly once. With congestion control
//! each peer's paced requests go through its [`Pacer`] first (held until its window
//! opens; [`Links::pump`] posts them).

use super::pacer::{paced, Held, Pacer, PacerStats};
use super::peer::Peer;
use super::wr::WrId;
use crate::fabric::swift::SwiftConfig;
use crate::fabric::{Completion, LocalBuf, Op, PathSignal, QpOptions, RawQp, WcOpcode, WcStatus, WorkRequest};

/// The peers of a node and the completions its refused posts owe their owners.
#[derive(Debug)]
pub struct Links<Q: RawQp> {
    me: u8,
    peers: Vec<Option<Peer<Q>>>,
    /// Completions of posts that never reached a queue pair, delivered next poll.
    deferred: Vec<Completion>,
    options: QpOptions,
    /// Send-queue entries kept for acknowledgements (one per log slot, and a margin).
    ack_reserve: u32,
    /// Each peer's pacer, by node id (empty: no congestion control).
    pacers: Vec<Option<Pacer>>,
    /// The time of the poll running (set by [`Links::pump`]), for pacing.
    now_ns: u64,
}

impl<Q: RawQp> Links<Q> {
    /// Links of node `me` to `peers` (its own entry `None`), each queue pair created
    /// with `options`; `ack_reserve` send-queue entries per peer are kept for
    /// acknowledgements; room for `deferred` refused posts between polls.
    pub fn new(me: u8, peers: Vec<Option<Peer<Q>>>, options: QpOptions, ack_reserve: u32, deferred: usize) -> Self {
        Self { me, peers, deferred: Vec::with_capacity(deferred), options, ack_reserve, pacers: Vec::new(), now_ns: 0 }
    }

    /// Paces every peer's requests with Swift (`cfg`), the path to peer `j` taking
    /// `base_rtt_ns(j)` without queues.
    pub fn with_pacing(mut self, cfg: SwiftConfig, base_rtt_ns: impl Fn(u8) -> u64) -> Self {
        let depth = self.options.send_depth;
        self.pacers =
            (0..self.peers.len() as u8).map(|j| self.peer(j).map(|_| Pacer::new(cfg, base_rtt_ns(j), depth))).collect();
        self
    }

    /// Each peer's pacer's counts and window (none without congestion control).
    pub fn pacing(&self) -> impl Iterator<Item = (u8, PacerStats, f64)> + '_ {
        self.pacers.iter().enumerate().filter_map(|(j, p)| p.as_ref().map(|p| (j as u8, p.stats(), p.window())))
    }

    /// This node.
    pub fn me(&self) -> u8 {
        self.me
    }

    /// The queue-pair options every link was created with.
    pub fn options(&self) -> QpOptions {
        self.options
    }

    /// Peer `id`, if it is one.
    pub fn peer(&self, id: u8) -> Option<&Peer<Q>> {
        self.peers.get(id as usize).and_then(Option::as_ref)
    }

    /// Peer `id`, if it is one.
    pub fn peer_mut(&mut self, id: u8) -> Option<&mut Peer<Q>> {
        self.peers.get_mut(id as usize).and_then(Option::as_mut)
    }

    /// Every peer.
    pub fn iter(&self) -> impl Iterator<Item = &Peer<Q>> + '_ {
        self.peers.iter().flatten()
    }

    /// Every peer.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Peer<Q>> + '_ {
        self.peers.iter_mut().flatten()
    }

    /// Posts `op` to `peer`. A refused post is handled as a failed completion (next
    /// poll), so every owner hears of every request exactly once. Returns whether the
    /// queue pair took it.
    pub fn post(&mut self, peer: u8, wr_id: WrId, op: Op, buf: LocalBuf) -> bool {
        let now_ns = self.now_ns;
        let depth = self.options.send_depth as u32;
        let pacer = self.pacers.get_mut(peer as usize).and_then(Option::as_mut).filter(|_| paced(wr_id.kind));
        let Some(p) = self.peers.get_mut(peer as usize).and_then(Option::as_mut) else {
            unreachable!("posting to node {peer}, which is this node or not in the cluster");
        };
        if let Some(pacer) = pacer {
            if p.conn.ready().is_some() && p.sends < depth {
                if !pacer.may_post(now_ns) {
                    pacer.hold(Held { wr_id, op, buf, conn_gen: p.conn_gen });
                    p.sends += 1;
                    return true;
                }
                let posted = self.post_now(peer, wr_id, op, buf);
                if posted {
                    if let Some(pacer) = self.pacers.get_mut(peer as usize).and_then(Option::as_mut) {
                        pacer.posted(now_ns);
                    }
                }
                return posted;
            }
        }
        self.post_now(peer, wr_id, op, buf)
    }

    /// Posts to the queue pair now, or fails the request at the next poll.
    fn post_now(&mut self, peer: u8, wr_id: WrId, op: Op, buf: LocalBuf) -> bool {
        let request = WorkRequest { wr_id: wr_id.encode(), op, buf };
        let opcode = op.opcode();
        let me = self.me;
        let Some(p) = self.peer_mut(peer) else {
            unreachable!("posting to node {peer}, which is this node or not in the cluster");
        };
        let refused = match p.conn.ready() {
            Some(qp) if p.sends < u32::MAX => match qp.post(request) {
                Ok(()) => {
                    p.sends += 1;
                    return true;
                }
                Err(e) => {
                    tracing::debug!(node = me, peer, error = %e.error, "post refused");
                    e.request.buf
                }
            },
            _ => request.buf,
        };
        self.fail(peer, wr_id, opcode, Some(refused));
        false
    }

    /// Completes `wr_id` to `peer` as flushed at the next poll, as if posted and
    /// failed (for a request that cannot be posted at all, e.g. with no link).
    pub fn fail(&mut self, peer: u8, wr_id: WrId, opcode: WcOpcode, buf: Option<LocalBuf>) {
        self.deferred.push(flushed(wr_id, opcode, buf));
        // The deferred completion decrements the peer's count like a real one.
        if let Some(p) = self.peer_mut(peer) {
            p.sends += 1;
        }
    }

    /// Moves the deferred completions to `wc`; returns how many (they come first).
    pub fn take_deferred(&mut self, wc: &mut Vec<Completion>) -> usize {
        let count = self.deferred.len();
        wc.append(&mut self.deferred);
        count
    }

    /// Sets the time of the poll running and posts what each peer's window now lets
    /// out; a request held across a broken link (or for a connection since replaced)
    /// completes `Flushed` at the next poll, as the queue pair's own did.
    pub fn pump(&mut self, now_ns: u64) {
        self.now_ns = now_ns;
        for j in 0..self.pacers.len() {
            while let Some(pacer) = self.pacers[j].as_mut() {
                let Some(p) = self.peers.get(j).and_then(Option::as_ref) else { break };
                let (live, gen) = (p.conn.ready().is_some(), p.conn_gen);
                let stale = pacer.held() > 0 && !live;
                if !stale && !pacer.may_release(now_ns) {
                    break;
                }
                let Some(h) = pacer.take() else { break };
                if !live || h.conn_gen != gen {
                    // Counted in `sends` when held: the deferred completion uncounts it.
                    self.deferred.push(flushed(h.wr_id, h.op.opcode(), Some(h.buf)));
                    continue;
                }
                let peer = j as u8;
                if let Some(p) = self.peer_mut(peer) {
                    p.sends -= 1; // post_now counts it again
                }
                if self.post_now(peer, h.wr_id, h.op, h.buf) {
                    if let Some(pacer) = self.pacers[j].as_mut() {
                        pacer.posted(now_ns);
                    }
                }
            }
        }
    }

    /// A request that reached peer `peer`'s queue pair completed (not a deferred one):
    /// its pacer, if it is paced, learns the round trip.
    pub fn completed(&mut self, peer: u8, wr_id: WrId, status: WcStatus, path: PathSignal, now_ns: u64) {
        if !paced(wr_id.kind) {
            return;
        }
        if let Some(pacer) = self.pacers.get_mut(peer as usize).and_then(Option::as_mut) {
            pacer.completed(now_ns, status, path);
        }
    }

    /// Room for `count` more work requests to `peer` (its send queue, minus what
    /// acknowledgements to it may need).
    pub fn send_room(&self, peer: u8, count: u32) -> bool {
        self.peer(peer).is_some_and(|p| p.sends + count + self.ack_reserve <= self.options.send_depth as u32)
    }
}

/// A completion saying `wr_id` was flushed without reaching a queue pair.
fn flushed(wr_id: WrId, opcode: WcOpcode, buf: Option<LocalBuf>) -> Completion {
    Completion {
        wr_id: wr_id.encode(),
        status: WcStatus::Flushed,
        opcode,
        byte_len: 0,
        imm: None,
        qp_num: 0,
        buf,
        path: PathSignal::default(),
    }
}
