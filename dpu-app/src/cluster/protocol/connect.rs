//! Connection setup: the lower node id offers (its queue pair's endpoint and the
//! regions the peer needs), the higher answers with its own, and both bring their
//! queue pairs to RTS. A restarted node (a new incarnation) or a broken link starts
//! over the same way; a link with requests outstanding is drained first.

use super::node::{Node, Now};
use super::peer::{Conn, Link, Remote};
use super::wr::{Kind, WrId};
use crate::cluster::format::hello::{HelloKind, HelloRepr};
use crate::fabric::{Fabric, RemoteRegion};

/// How long an offer waits for its answer before it is sent again.
const OFFER_RETRY_NS: u64 = 20_000_000;

impl<F: Fabric> Node<F> {
    /// Handles every hello the mailbox holds.
    pub(super) fn poll_mailbox(&mut self, now: Now) -> bool {
        let mut busy = false;
        while let Some(hello) = self.mailbox.try_recv() {
            busy = true;
            self.on_hello(hello, now);
        }
        busy
    }

    /// Sends an offer to `j` when this node is the lower id and no link is up.
    pub(super) fn offer_if_due(&mut self, j: u8, now: Now) {
        if self.me > j {
            return;
        }
        let Some(p) = self.links.peer(j) else { return };
        let due = match p.link() {
            Link::Down => true,
            Link::Offered { at_ns } => now.mono_ns >= at_ns + OFFER_RETRY_NS,
            _ => false,
        };
        if !due || !matches!(p.conn, Conn::Reset(_)) {
            return;
        }
        let hello = self.hello_for(j, HelloKind::Offer);
        match self.mailbox.send(j, &hello) {
            Ok(()) => {
                let me = self.me;
                if let Some(p) = self.links.peer_mut(j) {
                    p.set_link(me, Link::Offered { at_ns: now.mono_ns });
                }
            }
            Err(e) => tracing::debug!(node = self.me, peer = j, error = %e, "offer not sent"),
        }
    }

    /// What node `j` needs to know of this node.
    fn hello_for(&self, j: u8, kind: HelloKind) -> HelloRepr {
        let p = self.links.peer(j).expect("a peer");
        let endpoint = match &p.conn {
            Conn::Reset(qp) => qp.endpoint(),
            Conn::Ready(qp) => qp.endpoint(),
            Conn::Gone => unreachable!("hellos are built for a queue pair"),
        };
        let (log, applied) = match self.holder.log(j) {
            Some((log, mr)) => (mr.remote(), log.applied_seq()),
            None => unreachable!("every peer has a log here"),
        };
        let geometry = self.store.geometry();
        let log_geometry = self.holder.log(j).map(|(l, _)| l.geometry()).expect("a log");
        HelloRepr {
            from: self.me,
            to: j,
            kind,
            incarnation: self.incarnation,
            cluster_hash: self.config.cluster_hash(),
            endpoint,
            control: self.control.remote(),
            log,
            acks: RemoteRegion { addr: 0, len: 0, rkey: 0 },
            store: self.store_mr.remote(),
            directory: self.directory_mr.as_ref().map_or(RemoteRegion { addr: 0, len: 0, rkey: 0 }, |mr| mr.remote()),
            directory_slots: self.directory_slots,
            store_sets: geometry.sets(),
            store_ways: geometry.ways(),
            store_record_bytes: geometry.record_bytes(),
            log_slots: log_geometry.slots(),
            log_slot_bytes: log_geometry.slot_bytes(),
            applied,
        }
    }

    pub(super) fn pending_offer_take(&mut self, j: u8) -> Option<HelloRepr> {
        self.pending_offers.get_mut(j as usize).and_then(Option::take)
    }

    /// One hello from the mailbox.
    pub(super) fn on_hello(&mut self, hello: HelloRepr, now: Now) {
        let me = self.me;
        let j = hello.from;
        let bad = if hello.to != me {
            Some("it is addressed to another node")
        } else if j == me || j as usize >= self.n {
            Some("it comes from a node not in this cluster")
        } else if hello.cluster_hash != self.config.cluster_hash() {
            Some("its cluster configuration differs from ours: give every node the same cluster file")
        } else if (hello.kind == HelloKind::Offer) != (j < me) {
            Some("the lower node id offers, the higher answers")
        } else if hello.store_sets != self.store.geometry().sets()
            || hello.store_ways != self.store.geometry().ways()
            || hello.store_record_bytes != self.store.geometry().record_bytes()
        {
            Some("its fragment store has another geometry")
        } else {
            None
        };
        if let Some(why) = bad {
            tracing::warn!(node = me, from = j, why, "hello refused");
            return;
        }
        let link = self.links.peer(j).map(|p| p.link()).expect("a peer");
        match hello.kind {
            HelloKind::Offer => {
                let same = self
                    .links
                    .peer(j)
                    .and_then(|p| p.remote)
                    .is_some_and(|r| r.incarnation == hello.incarnation && r.endpoint == hello.endpoint);
                if same && matches!(link, Link::Connected | Link::Up) {
                    // A retransmitted offer: our answer was lost.
                    let answer = self.hello_for(j, HelloKind::Answer);
                    let _ = self.mailbox.send(j, &answer);
                    return;
                }
                if !matches!(link, Link::Down) {
                    // Reconnect: drain what is outstanding first, then answer.
                    self.pending_offers[j as usize] = Some(hello);
                    if link != Link::Draining {
                        self.link_failed(j, crate::fabric::WcStatus::Flushed, now);
                    }
                    if self.links.peer(j).is_some_and(|p| p.sends == 0) {
                        self.reset_link(j);
                        let hello = self.pending_offer_take(j).expect("just stored");
                        self.on_hello(hello, now);
                    }
                    return;
                }
                if self.connect(j, &hello) {
                    let answer = self.hello_for(j, HelloKind::Answer);
                    if let Err(e) = self.mailbox.send(j, &answer) {
                        tracing::debug!(node = me, peer = j, error = %e, "answer not sent; the peer offers again");
                    }
                }
            }
            HelloKind::Answer => {
                if !matches!(link, Link::Offered { .. }) {
                    tracing::debug!(node = me, peer = j, ?link, "answer without an offer outstanding: ignored");
                    return;
                }
                self.connect(j, &hello);
            }
        }
    }

    /// Brings the queue pair to `j` up to RTS against `hello`'s endpoint, posts its
    /// receives and records what the peer advertised.
    fn connect(&mut self, j: u8, hello: &HelloRepr) -> bool {
        let me = self.me;
        let recv_depth = self.links.options().recv_depth as u32;
        let resync_from = self.writer.next_write_seq().saturating_sub(self.config.outcome_entries as u64).max(1);
        let zero = &self.pools.zero;
        let Some(p) = self.links.peer_mut(j) else { return false };
        p.conn_gen = p.conn_gen.wrapping_add(1);
        let gen = p.conn_gen & crate::limits::WR_INDEX_MAX;
        let Conn::Reset(qp) = std::mem::replace(&mut p.conn, Conn::Gone) else {
            tracing::warn!(node = me, peer = j, "connect without a reset queue pair");
            return false;
        };
        let result = (|| {
            let qp = qp.init()?;
            let mut posted = 0;
            for _ in 0..recv_depth {
                if qp.post_recv(WrId::new(Kind::Recv, j, gen, 0).encode(), zero.buf(0, 0)).is_err() {
                    break;
                }
                posted += 1;
            }
            let qp = qp.ready_to_receive(&hello.endpoint)?.ready_to_send()?;
            Ok::<_, crate::fabric::FabricError>((qp, posted))
        })();
        match result {
            Ok((qp, posted)) => {
                p.conn = Conn::Ready(qp);
                p.recvs = posted;
                p.remote = Some(Remote {
                    incarnation: hello.incarnation,
                    endpoint: hello.endpoint,
                    control: hello.control,
                    log: hello.log,
                    store: hello.store,
                    directory: hello.directory,
                    directory_slots: hello.directory_slots,
                    log_slots: hello.log_slots,
                    log_slot_bytes: hello.log_slot_bytes,
                });
                // Continue our log on the peer where it says it has applied.
                p.next_seq = hello.applied;
                debug_assert!(p.sent.is_empty(), "a reset link has nothing outstanding");
                p.shadow.reset_for(hello.directory_slots);
                // Whatever it missed while the link was down comes again.
                p.resync = Some(resync_from);
                p.set_link(me, Link::Connected);
                tracing::info!(node = me, peer = j, incarnation = hello.incarnation, "connected");
                true
            }
            Err(e) => {
                tracing::warn!(node = me, peer = j, error = %e, "queue pair bring-up failed; starting over");
                p.set_link(me, Link::Down);
                self.reset_link(j);
                false
            }
        }
    }
}
