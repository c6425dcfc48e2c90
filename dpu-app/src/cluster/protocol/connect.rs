//! Connection setup: the lower node id offers (its queue pair's endpoint and the
//! regions the peer needs), the higher brings its queue pair up and answers with its
//! own, and the lower brings its own up and says Ready. The higher posts nothing on
//! the link before Ready (or anything else from the peer) arrives: its requests
//! would reach a queue pair not yet ready to receive, be dropped and retried, and a
//! peer slow to take the answer (a restarted node busy with its ring) would see the
//! link fail. Lost offers and answers are sent again on a timer; a repeated offer is
//! answered again and a repeated answer gets Ready again. A restarted node (a new
//! incarnation) or a broken link starts over the same way; a link with requests
//! outstanding is drained first.
//!
//! These are [`Membership`]'s: it owns the mailbox and the offers waiting for a link
//! to drain; failing a live link (whose lost entries the writer must hear of) is left
//! to `Node`, which [`Membership::on_hello`] asks for with [`HelloNext::Reconnect`].

use super::membership::{MemberCx, Membership};
use super::peer::{Conn, Link, Remote};
use super::time::Now;
use super::wr::{Kind, WrId};
use crate::cluster::format::hello::{HelloKind, HelloRepr};
use crate::fabric::{Fabric, RemoteRegion};

/// What handling a hello leaves to the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum HelloNext {
    /// Nothing.
    Done,
    /// An offer on a link that is not down: the link must fail (unless it drains
    /// already) and be reset; the offer is kept and answered then.
    Reconnect,
}

impl Membership {
    /// The next hello the mailbox holds.
    pub(super) fn next_hello(&mut self) -> Option<HelloRepr> {
        self.mailbox().try_recv()
    }

    /// Sends an offer to `j` when this node is the lower id and no link is up.
    pub(super) fn offer_if_due<F: Fabric>(&mut self, cx: &mut MemberCx<'_, F>, j: u8, now: Now) {
        if cx.me > j {
            return;
        }
        let Some(p) = cx.links.peer(j) else { return };
        let due = match p.link() {
            Link::Down => true,
            Link::Offered { at_ns } => now.mono_ns >= at_ns + self.offer_retry_ns(),
            _ => false,
        };
        if !due || !matches!(p.conn, Conn::Reset(_)) {
            return;
        }
        let hello = Self::hello_for(cx, j, HelloKind::Offer);
        match self.mailbox().send(j, &hello) {
            Ok(()) => {
                let me = cx.me;
                if let Some(p) = cx.links.peer_mut(j) {
                    p.set_link(me, Link::Offered { at_ns: now.mono_ns });
                }
            }
            Err(e) => tracing::debug!(node = cx.me, peer = j, error = %e, "offer not sent"),
        }
    }

    /// Sends the answer to `j` again when this node is the higher id and Ready has not
    /// come within [`Membership::offer_retry_ns`] of the last one.
    pub(super) fn answer_if_due<F: Fabric>(&mut self, cx: &mut MemberCx<'_, F>, j: u8, now: Now) {
        if cx.me < j {
            return;
        }
        let Some(p) = cx.links.peer(j) else { return };
        let retry_ns = self.offer_retry_ns();
        let due = p.link() == Link::Connected && p.awaiting_ready.is_some_and(|at| now.mono_ns >= at + retry_ns);
        if !due {
            return;
        }
        let answer = Self::hello_for(cx, j, HelloKind::Answer);
        if let Err(e) = self.mailbox().send(j, &answer) {
            tracing::debug!(node = cx.me, peer = j, error = %e, "answer not sent again");
        }
        if let Some(p) = cx.links.peer_mut(j) {
            p.awaiting_ready = Some(now.mono_ns);
        }
    }

    /// What node `j` needs to know of this node.
    fn hello_for<F: Fabric>(cx: &MemberCx<'_, F>, j: u8, kind: HelloKind) -> HelloRepr {
        let p = cx.links.peer(j).expect("a peer");
        let endpoint = match &p.conn {
            Conn::Reset(qp) => qp.endpoint(),
            Conn::Ready(qp) => qp.endpoint(),
            Conn::Gone => unreachable!("hellos are built for a queue pair"),
        };
        let a = &cx.advert;
        let Some(log) = a.logs.advert(j) else { unreachable!("every peer has a log here") };
        let geometry = a.store.geometry();
        HelloRepr {
            from: cx.me,
            to: j,
            kind,
            incarnation: cx.incarnation,
            cluster_hash: a.config.cluster_hash(),
            endpoint,
            control: cx.control.remote(),
            log: log.region,
            acks: RemoteRegion { addr: 0, len: 0, rkey: 0 },
            store: a.store_mr.remote(),
            directory: a.directory_mr.map_or(RemoteRegion { addr: 0, len: 0, rkey: 0 }, |mr| mr.remote()),
            directory_slots: a.directory_slots,
            store_sets: geometry.sets(),
            store_ways: geometry.ways(),
            store_record_bytes: geometry.record_bytes(),
            log_slots: log.geometry.slots(),
            log_slot_bytes: log.geometry.slot_bytes(),
            applied: log.applied,
            fates: a.fates.unwrap_or(RemoteRegion { addr: 0, len: 0, rkey: 0 }),
            feed: a.feed.unwrap_or(RemoteRegion { addr: 0, len: 0, rkey: 0 }),
            ledger: a.ledger.map_or(RemoteRegion { addr: 0, len: 0, rkey: 0 }, |l| l.remote()),
            next_write: a.next_write_seq,
        }
    }

    /// One hello from the mailbox.
    pub(super) fn on_hello<F: Fabric>(&mut self, cx: &mut MemberCx<'_, F>, hello: HelloRepr, now: Now) -> HelloNext {
        let me = cx.me;
        let j = hello.from;
        let geometry = cx.advert.store.geometry();
        let bad = if hello.to != me {
            Some("it is addressed to another node")
        } else if j == me || j as usize >= cx.n {
            Some("it comes from a node not in this cluster")
        } else if hello.cluster_hash != cx.advert.config.cluster_hash() {
            Some("its cluster configuration differs from ours: give every node the same cluster file")
        } else if (hello.kind == HelloKind::Answer) == (j < me) {
            Some("the lower node id offers and says ready, the higher answers")
        } else if hello.store_sets != geometry.sets()
            || hello.store_ways != geometry.ways()
            || hello.store_record_bytes != geometry.record_bytes()
        {
            Some("its fragment store has another geometry")
        } else {
            None
        };
        if let Some(why) = bad {
            tracing::warn!(node = me, from = j, why, "hello refused");
            return HelloNext::Done;
        }
        // Before anything of the peer is taken on a new link (`fence.rs`).
        if !Self::narrow_fence(cx, j, hello.next_write) {
            return HelloNext::Done;
        }
        let link = cx.links.peer(j).map(|p| p.link()).expect("a peer");
        // An offer or answer of the connection this link is up on: a retransmission.
        let same = matches!(link, Link::Connected | Link::Up)
            && cx
                .links
                .peer(j)
                .and_then(|p| p.remote)
                .is_some_and(|r| r.incarnation == hello.incarnation && r.endpoint == hello.endpoint);
        match hello.kind {
            HelloKind::Offer => {
                if same {
                    // A retransmitted offer: our answer was lost.
                    let answer = Self::hello_for(cx, j, HelloKind::Answer);
                    if let Err(e) = self.mailbox().send(j, &answer) {
                        // Handled: the peer offers again, and is answered then.
                        tracing::debug!(node = me, peer = j, error = %e, "answer not sent again");
                    }
                    return HelloNext::Done;
                }
                if !matches!(link, Link::Down) {
                    // Reconnect: drain what is outstanding first, then answer.
                    self.keep_offer(hello);
                    return HelloNext::Reconnect;
                }
                if self.connect(cx, j, &hello) {
                    if let Some(p) = cx.links.peer_mut(j) {
                        p.awaiting_ready = Some(now.mono_ns);
                    }
                    let answer = Self::hello_for(cx, j, HelloKind::Answer);
                    if let Err(e) = self.mailbox().send(j, &answer) {
                        tracing::debug!(node = me, peer = j, error = %e, "answer not sent; it is sent again");
                    }
                }
            }
            HelloKind::Answer => {
                // With `same`, this node is up against this answer already: its Ready
                // was lost, and goes again.
                if !same {
                    if !matches!(link, Link::Offered { .. }) {
                        tracing::debug!(node = me, peer = j, ?link, "answer without an offer outstanding: ignored");
                        return HelloNext::Done;
                    }
                    if !self.connect(cx, j, &hello) {
                        return HelloNext::Done;
                    }
                }
                // Ready names the answer's endpoint, which the answerer's queue pair
                // keeps until it posts (ours moves with every send on some fabrics).
                let ready = HelloRepr { endpoint: hello.endpoint, ..Self::hello_for(cx, j, HelloKind::Ready) };
                if let Err(e) = self.mailbox().send(j, &ready) {
                    tracing::debug!(node = me, peer = j, error = %e, "ready not sent; the peer answers again");
                }
            }
            HelloKind::Ready => {
                let mine = cx.links.peer(j).and_then(|p| Some((p.remote?.incarnation, p.conn.ready()?.endpoint())));
                if link == Link::Connected && mine == Some((hello.incarnation, hello.endpoint)) {
                    if let Some(p) = cx.links.peer_mut(j) {
                        p.awaiting_ready = None;
                    }
                    // Its first heartbeat now, not at the next round: the link is up
                    // (and the host's lease may start) one round trip after Ready.
                    self.post_heartbeat(cx, j, now);
                } else {
                    tracing::debug!(node = me, peer = j, ?link, "ready for another connection: ignored");
                }
            }
        }
        HelloNext::Done
    }

    /// Brings the queue pair to `j` up to RTS against `hello`'s endpoint, posts its
    /// receives and records what the peer advertised.
    fn connect<F: Fabric>(&mut self, cx: &mut MemberCx<'_, F>, j: u8, hello: &HelloRepr) -> bool {
        let me = cx.me;
        let recv_depth = cx.links.options().recv_depth as u32;
        let resync_from = cx.advert.next_write_seq.saturating_sub(cx.advert.config.outcome_entries as u64).max(1);
        let zero = cx.zero_pool;
        let Some(p) = cx.links.peer_mut(j) else { return false };
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
                    fates: hello.fates,
                    feed: hello.feed,
                    ledger: hello.ledger,
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
                // A stale hello (its queue pair gone with a restart) meets this too, once
                // per hello a long absence left queued: counted, the details at debug.
                cx.stats.connects_failed += 1;
                tracing::debug!(node = me, peer = j, error = %e, "queue pair bring-up failed; starting over");
                p.set_link(me, Link::Down);
                self.reset_link(cx, j);
                false
            }
        }
    }

    /// Puts the queue pair to `j` back in RESET (or makes a new one).
    pub(super) fn reset_link<F: Fabric>(&mut self, cx: &mut MemberCx<'_, F>, j: u8) {
        let me = cx.me;
        let options = cx.links.options();
        let Some(p) = cx.links.peer_mut(j) else { return };
        // A link is reset only after it failed (which lost every entry it carried) or
        // before it ever came up, and entries are sent only on a link that is up.
        assert!(p.sent.is_empty(), "node {me}: resetting the link to {j} with entries unacknowledged");
        let conn = std::mem::replace(&mut p.conn, Conn::Gone);
        let mut bufs = Vec::new();
        p.conn = match conn {
            Conn::Ready(qp) => qp.reset(&mut bufs).map(Conn::Reset).unwrap_or(Conn::Gone),
            Conn::Reset(qp) => Conn::Reset(qp),
            Conn::Gone => Conn::Gone,
        };
        if matches!(p.conn, Conn::Gone) {
            let (send_cq, recv_cq) = cx.cqs;
            match cx.fabric.create_qp(send_cq, recv_cq, options) {
                Ok(qp) => p.conn = Conn::Reset(qp),
                Err(e) => tracing::error!(node = me, peer = j, error = %e, "cannot create a queue pair"),
            }
        }
        p.recvs = 0;
        p.heartbeat_posted_ns = None;
        p.awaiting_ready = None;
        p.set_link(me, Link::Down);
    }
}
