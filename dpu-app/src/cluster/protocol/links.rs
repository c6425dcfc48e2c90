//! The links to a node's peers and the one way work requests leave the node: every
//! role posts through [`Links::post`], which counts what each queue pair has in
//! flight and turns a refused post into a failed completion delivered at the next
//! poll, so every owner hears of every request exactly once.

use super::peer::Peer;
use super::wr::WrId;
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
}

impl<Q: RawQp> Links<Q> {
    /// Links of node `me` to `peers` (its own entry `None`), each queue pair created
    /// with `options`; `ack_reserve` send-queue entries per peer are kept for
    /// acknowledgements; room for `deferred` refused posts between polls.
    pub fn new(me: u8, peers: Vec<Option<Peer<Q>>>, options: QpOptions, ack_reserve: u32, deferred: usize) -> Self {
        Self { me, peers, deferred: Vec::with_capacity(deferred), options, ack_reserve }
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
        self.deferred.push(Completion {
            wr_id: wr_id.encode(),
            status: WcStatus::Flushed,
            opcode,
            byte_len: 0,
            imm: None,
            qp_num: 0,
            buf,
            path: PathSignal::default(),
        });
        // The deferred completion decrements the peer's count like a real one.
        if let Some(p) = self.peer_mut(peer) {
            p.sends += 1;
        }
    }

    /// Moves the deferred completions to `wc`.
    pub fn take_deferred(&mut self, wc: &mut Vec<Completion>) {
        wc.append(&mut self.deferred);
    }

    /// Room for `count` more work requests to `peer` (its send queue, minus what
    /// acknowledgements to it may need).
    pub fn send_room(&self, peer: u8, count: u32) -> bool {
        self.peer(peer).is_some_and(|p| p.sends + count + self.ack_reserve <= self.options.send_depth as u32)
    }
}
