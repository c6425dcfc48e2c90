//! Connection setup: the lower node id offers (its queue pair's endpoint and the
//! regions the peer needs), the higher answers with its own, and both bring their
//! queue pairs to RTS. A restarted node (a new incarnation) or a broken link starts
//! over the same way; a link with requests outstanding is drained first.
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

/// How long an offer waits for its answer before it is sent again.
const OFFER_RETRY_NS: u64 = 20_000_000;

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
            Link::Offered { at_ns } => now.mono_ns >= at_ns + OFFER_RETRY_NS,
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
        }
    }

    /// One hello from the mailbox.
    pub(super) fn on_hello<F: Fabric>(&mut self, cx: &mut MemberCx<'_, F>, hello: HelloRepr) -> HelloNext {
        let me = cx.me;
        let j = hello.from;
        let geometry = cx.advert.store.geometry();
        let bad = if hello.to != me {
            Some("it is addressed to another node")
        } else if j == me || j as usize >= cx.n {
            Some("it comes from a node not in this cluster")
        } else if hello.cluster_hash != cx.advert.config.cluster_hash() {
            Some("its cluster configuration differs from ours: give every node the same cluster file")
        } else if (hello.kind == HelloKind::Offer) != (j < me) {
            Some("the lower node id offers, the higher answers")
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
        let link = cx.links.peer(j).map(|p| p.link()).expect("a peer");
        match hello.kind {
            HelloKind::Offer => {
                let same = cx
                    .links
                    .peer(j)
                    .and_then(|p| p.remote)
                    .is_some_and(|r| r.incarnation == hello.incarnation && r.endpoint == hello.endpoint);
                if same && matches!(link, Link::Connected | Link::Up) {
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
                    let answer = Self::hello_for(cx, j, HelloKind::Answer);
                    if let Err(e) = self.mailbox().send(j, &answer) {
                        tracing::debug!(node = me, peer = j, error = %e, "answer not sent; the peer offers again");
                    }
                }
            }
            HelloKind::Answer => {
                if !matches!(link, Link::Offered { .. }) {
                    tracing::debug!(node = me, peer = j, ?link, "answer without an offer outstanding: ignored");
                    return HelloNext::Done;
                }
                self.connect(cx, j, &hello);
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
        p.set_link(me, Link::Down);
    }
}
