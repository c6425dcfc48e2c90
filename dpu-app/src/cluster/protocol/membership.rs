//! Membership: heartbeats, dead peers, lost links, and exclusion of a host directory
//! this node could not reach (see `control.rs` for the epochs).
//!
//! The rules, for writer W and host P:
//! - W bumps `suspect[P]` whenever it fails to reach P's directory (and when its link
//!   to P breaks); a write that needed P's mark waits until P's lease must have lapsed
//!   (`lease` after the latest bump: P renews only from READs that would have seen it),
//!   or until P honors the bump.
//! - P, reading a bump, revokes its directory, drops its lease to zero and publishes
//!   `honored`; W, reading that, publishes `readmitted`; P, reading that, revokes once
//!   more (refills between the two revocations may predate writes that skipped P) and
//!   renews its lease again.
//! - Epochs are ordered across W's incarnations (`control::first_epoch`), and a new
//!   incarnation of W starts by suspecting every P once: P's `honored` from W's
//!   earlier life can neither pass for a new suspicion's nor hide a bump that life
//!   raised and P never read (P revokes on reading the new life's block).
//! - P's lease is `min over peers of (last answered heartbeat READ, posted at) + lease`,
//!   and zero while any peer's suspicion is not both honored and readmitted. A peer
//!   silent for `dead_after` is declared dead: its Pending marks in P's directory are
//!   cleared (Invalid; a reader then asks the DPU app).

use std::sync::atomic::Ordering;

use prescient_shim::directory;
use prescient_shim::layout::header;

use super::node::{Node, Now};
use super::peer::{Conn, Link, Trust};
use super::wr::{Kind, WrId};
use crate::cluster::format::control::{first_epoch, ControlView, CONTROL_BYTES, SUSPICIONS_PER_INCARNATION_MAX};
use crate::fabric::{Fabric, Op, WcStatus};

impl<F: Fabric> Node<F> {
    /// Timers: heartbeats, exclusion, dead peers, leases, offers, drained links.
    pub(super) fn run_timers(&mut self, now: Now) -> bool {
        let mut busy = self.finish_draining(now);
        if now.mono_ns < self.next_heartbeat_ns {
            return busy;
        }
        busy = true;
        self.next_heartbeat_ns = self.next_heartbeat_ns.saturating_add(self.heartbeat_ns).max(now.mono_ns);
        self.control.beat();
        self.host.beat();
        self.host.watch_host(std::time::Instant::now(), &mut self.metrics);
        for j in 0..self.n as u8 {
            if j == self.me {
                continue;
            }
            self.offer_if_due(j, now);
            self.post_heartbeat(j, now);
            self.resync(j, now);
            self.check_trust(j, now);
            self.check_dead(j, now);
        }
        self.resync_own(now);
        self.renew_lease(now);
        self.expire_leases(now);
        let up = self.links.iter().filter(|p| p.is_up()).fold(1u32 << self.me, |m, p| m | 1 << p.id);
        self.region.u32_at(header::CLUSTER_PEERS_UP).store(up, Ordering::Release);
        busy
    }

    fn post_heartbeat(&mut self, j: u8, now: Now) {
        let Some(p) = self.links.peer(j) else { return };
        if !matches!(p.link(), Link::Connected | Link::Up) || p.heartbeat_posted_ns.is_some() {
            return;
        }
        let Some(remote) = p.remote else { return };
        let buf = self.pools.control.buf(u32::from(j), CONTROL_BYTES);
        if let Some(p) = self.links.peer_mut(j) {
            p.heartbeat_posted_ns = Some(now.mono_ns);
        }
        self.links.post(j, WrId::new(Kind::Heartbeat, j, 0, 0), Op::Read { remote: remote.control.at(0) }, buf);
    }

    /// A heartbeat READ of peer `j` came back.
    pub(super) fn on_heartbeat(&mut self, j: u8, ok: bool, now: Now) {
        let me = self.me;
        let Some(posted_ns) = self.links.peer_mut(j).and_then(|p| p.heartbeat_posted_ns.take()) else { return };
        if !ok {
            return;
        }
        let mut bytes = [0u8; CONTROL_BYTES];
        self.pools.control.read(u32::from(j), &mut bytes);
        let view = match ControlView::new_checked(bytes, j) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(node = me, peer = j, error = %e, "refused a peer's control block");
                self.link_failed(j, WcStatus::RemoteOperation, now);
                return;
            }
        };
        let Some(p) = self.links.peer_mut(j) else { return };
        if p.remote.is_some_and(|r| r.incarnation != view.incarnation()) {
            tracing::warn!(node = me, peer = j, "peer's control block is of another incarnation; reconnecting");
            self.link_failed(j, WcStatus::RemoteOperation, now);
            return;
        }
        p.last_heard_ns = p.last_heard_ns.max(posted_ns);
        p.view = Some(view);
        if p.dead {
            p.dead = false;
            tracing::info!(node = me, peer = j, "peer answers again");
        }
        if p.link() == Link::Connected {
            p.set_link(me, Link::Up);
        }
        // As a host: honor the peer's suspicions of this node.
        let suspected = view.suspect(me);
        let mut revoke = false;
        if suspected > p.honored {
            p.honored = suspected;
            p.readmitted_by_peer = false;
            revoke = true;
        }
        let honored = p.honored;
        if !p.readmitted_by_peer && view.readmitted(me) >= honored {
            p.readmitted_by_peer = true;
            revoke = true;
        }
        // As a writer: readmit the peer's directory once it honored our suspicion.
        let readmit = p.trust() != Trust::Trusted && view.honored(me) >= p.suspect_epoch;
        if readmit {
            p.readmitted = p.suspect_epoch;
            p.set_trust(me, Trust::Trusted);
            p.shadow.clear();
        }
        let (epoch_readmitted, suspect_epoch) = (p.readmitted, p.suspect_epoch);
        if revoke {
            // Lease to zero first: no reader may trust a slot while we sweep.
            self.set_lease(0);
            self.revoke_directory();
            self.control.set_honored(j, honored);
        }
        if readmit {
            self.control.set_readmitted(j, epoch_readmitted);
            self.skip_failed_marks(j, suspect_epoch);
            tracing::info!(node = me, peer = j, epoch = epoch_readmitted, "peer's directory readmitted");
        }
    }

    /// This node failed to reach peer `j`'s directory (or lost its link to it): bump
    /// the suspicion epoch that `j` must honor before it trusts its directory again.
    pub(super) fn suspect(&mut self, j: u8, now: Now) {
        let me = self.me;
        let incarnation = self.incarnation;
        let Some(p) = self.links.peer_mut(j) else { return };
        // Past the range of this incarnation its epochs would collide with the next
        // one's: crash (the restart is the next incarnation) rather than reuse one.
        let epoch = p
            .suspect_epoch
            .checked_add(1)
            .filter(|e| e - first_epoch(incarnation) < SUSPICIONS_PER_INCARNATION_MAX)
            .unwrap_or_else(|| {
                panic!("node {me}: {SUSPICIONS_PER_INCARNATION_MAX} suspicions of node {j} in one incarnation")
            });
        p.suspect_epoch = epoch;
        // Every bump restarts the wait: the host renews its lease only from READs
        // that would have seen the newest bump.
        p.set_trust(me, Trust::Suspect { since_ns: now.mono_ns });
        self.control.set_suspect(j, epoch);
        self.stats.suspicions += 1;
    }

    fn check_trust(&mut self, j: u8, now: Now) {
        let me = self.me;
        let wait_ns = self.lease_ns + self.heartbeat_ns;
        let Some(p) = self.links.peer_mut(j) else { return };
        if let Trust::Suspect { since_ns } = p.trust() {
            // Margin: one heartbeat, for the READ that renewed its lease last.
            if now.mono_ns >= since_ns + wait_ns {
                p.set_trust(me, Trust::Excluded);
                let epoch = p.suspect_epoch;
                self.skip_failed_marks(j, epoch);
            }
        }
    }

    /// Writes waiting on a failed mark at `j` go ahead: `j` has revoked its directory
    /// after our suspicion epoch `epoch`, or its lease has lapsed.
    fn skip_failed_marks(&mut self, j: u8, _epoch: u64) {
        self.writer.host_excluded(j);
    }

    fn check_dead(&mut self, j: u8, now: Now) {
        let me = self.me;
        let (dead_after, started) = (self.dead_after_ns, self.started_ns.unwrap_or(now.mono_ns));
        let Some(p) = self.links.peer_mut(j) else { return };
        if p.dead || now.mono_ns < p.last_heard_ns.max(started) + dead_after {
            return;
        }
        p.dead = true;
        tracing::warn!(node = me, peer = j, "peer silent too long: declared dead; clearing its marks");
        let cleared = super::host_directory::HostDirectory::new(&self.region, self.directory_slots)
            .sweep(|w| directory::clear_dead(w, j));
        self.stats.dead_declared += 1;
        self.stats.marks_cleared += cleared;
        // Writes waiting on the dead peer's fragment stop waiting.
        self.writer.holder_dead(j);
    }

    /// The host's directory lease: `min over peers of last heard + lease`, or zero
    /// while a suspicion of this node is not yet honored and readmitted.
    fn renew_lease(&mut self, now: Now) {
        let mut until = u64::MAX;
        for p in self.links.iter() {
            let pending = p.view.is_some_and(|v| v.suspect(self.me) > p.honored);
            if !p.readmitted_by_peer || pending || p.last_heard_ns == 0 {
                until = 0;
                break;
            }
            until = until.min(p.last_heard_ns + self.lease_ns);
        }
        if until == u64::MAX {
            until = now.mono_ns + self.lease_ns;
        }
        self.set_lease(until);
    }

    pub(super) fn set_lease(&mut self, until_ns: u64) {
        if until_ns != self.lease_until_ns {
            self.lease_until_ns = until_ns;
            self.region.u64_at(header::DIRECTORY_LEASE_UNTIL_NS).store(until_ns, Ordering::Release);
        }
    }

    /// The link to `j` failed (an error completion): stop posting, fail what waited on
    /// acknowledgements, suspect its directory, and reset once the rest has flushed.
    pub(super) fn link_failed(&mut self, j: u8, status: WcStatus, now: Now) {
        let me = self.me;
        let Some(p) = self.links.peer_mut(j) else { return };
        if matches!(p.link(), Link::Draining | Link::Down | Link::Offered { .. }) && p.sent.is_empty() {
            return;
        }
        tracing::warn!(node = me, peer = j, ?status, "link lost");
        p.set_link(me, Link::Draining);
        let sent: Vec<_> = p.sent.drain(..).collect();
        for s in sent {
            self.entry_lost(j, s);
        }
        self.suspect(j, now);
        self.stats.links_lost += 1;
    }

    /// Resets drained links and answers offers that waited for it.
    fn finish_draining(&mut self, now: Now) -> bool {
        let mut busy = false;
        for j in 0..self.n as u8 {
            let ready = self.links.peer(j).is_some_and(|p| p.link() == Link::Draining && p.sends == 0);
            if !ready {
                continue;
            }
            busy = true;
            self.reset_link(j);
            if let Some(hello) = self.pending_offer_take(j) {
                self.on_hello(hello, now);
            }
        }
        busy
    }

    /// Puts the queue pair to `j` back in RESET (or makes a new one).
    pub(super) fn reset_link(&mut self, j: u8) {
        let me = self.me;
        let options = self.links.options();
        let fabric = std::sync::Arc::clone(&self.fabric);
        let (send_cq, recv_cq) = (self.send_cq.clone(), self.recv_cq.clone());
        let Some(p) = self.links.peer_mut(j) else { return };
        let conn = std::mem::replace(&mut p.conn, Conn::Gone);
        let mut bufs = Vec::new();
        p.conn = match conn {
            Conn::Ready(qp) => qp.reset(&mut bufs).map(Conn::Reset).unwrap_or(Conn::Gone),
            Conn::Reset(qp) => Conn::Reset(qp),
            Conn::Gone => Conn::Gone,
        };
        if matches!(p.conn, Conn::Gone) {
            match fabric.create_qp(&send_cq, &recv_cq, options) {
                Ok(qp) => p.conn = Conn::Reset(qp),
                Err(e) => tracing::error!(node = me, peer = j, error = %e, "cannot create a queue pair"),
            }
        }
        p.recvs = 0;
        p.heartbeat_posted_ns = None;
        p.set_link(me, Link::Down);
        // (Nothing is left in `sent`: the link failed, and that lost every entry.)
        let leftover: Vec<_> = p.sent.drain(..).collect();
        for s in leftover {
            self.entry_lost(j, s);
        }
    }
}
