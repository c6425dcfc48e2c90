//! The node's dispatch for membership and connections (`protocol/membership.rs`,
//! `protocol/connect.rs`): builds their context from the node's fields, runs the
//! timers in order, and passes on what membership returns - to the writer (a
//! directory readmitted or excluded, a holder dead, the entries of a lost link) or
//! back to membership (a link to fail before an offer is answered).

use super::Node;
use crate::cluster::format::hello::HelloRepr;
use crate::cluster::protocol::connect::HelloNext;
use crate::cluster::protocol::holder::Holder;
use crate::cluster::protocol::host_directory::HostDirectory;
use crate::cluster::protocol::membership::{Advert, Heard, LogAdvert, MemberCx, Membership, PeerLogs};
use crate::cluster::protocol::peer::Link;
use crate::cluster::protocol::time::Now;
use crate::fabric::{Fabric, WcStatus};

impl<F: Fabric> Node<F> {
    /// Membership and its context, from disjoint fields of the node.
    fn membership_parts(&mut self) -> (&mut Membership, MemberCx<'_, F>) {
        let cx = MemberCx {
            me: self.me,
            n: self.n,
            incarnation: self.incarnation,
            started_ns: self.started_ns,
            links: &mut self.links,
            control: &self.control,
            control_pool: &self.pools.control,
            zero_pool: &self.pools.zero,
            region: &self.region,
            directory: HostDirectory::new(&self.region, self.directory_slots),
            stats: &mut self.stats,
            fabric: &*self.fabric,
            cqs: (&self.send_cq, &self.recv_cq),
            advert: Advert {
                config: &self.config,
                logs: &self.holder,
                store: &self.store,
                store_mr: &self.store_mr,
                directory_mr: self.directory_mr.as_deref(),
                directory_slots: self.directory_slots,
                next_write_seq: self.writer.next_write_seq(),
                fates: self.sequencer.as_ref().map(|s| s.fates().remote()),
                feed: self.applier.as_ref().and_then(|a| a.feed().remote()),
                ledger: self.holder.ledger(),
            },
        };
        (&mut self.membership, cx)
    }

    /// Timers: heartbeats, exclusion, dead peers, leases, offers, drained links.
    pub(in crate::cluster::protocol) fn run_timers(&mut self, now: Now) -> bool {
        let mut busy = self.finish_draining(now);
        if !self.membership.heartbeat_due(now) {
            return busy;
        }
        busy = true;
        self.control.beat();
        self.host.beat();
        self.host.watch_host(std::time::Instant::now(), &mut self.metrics);
        for j in 0..self.n as u8 {
            if j == self.me {
                continue;
            }
            let (m, mut cx) = self.membership_parts();
            m.offer_if_due(&mut cx, j, now);
            m.answer_if_due(&mut cx, j, now);
            m.post_heartbeat(&mut cx, j, now);
            self.resync(j, now);
            let (m, mut cx) = self.membership_parts();
            if m.check_trust(&mut cx, j, now) {
                self.skip_failed_marks(j);
            }
            let (m, mut cx) = self.membership_parts();
            if m.check_dead(&mut cx, j, now) {
                // Writes waiting on the dead peer's fragment stop waiting.
                self.writer.holder_dead(j);
            }
            let (m, mut cx) = self.membership_parts();
            m.check_fence(&mut cx, j, now);
        }
        // Committed writes' entries stop waiting for holders fenced whole, and for one
        // back from a fence until its resync has gone over the table (else the entries
        // it missed would stop this node's writes until then).
        if let Some(ledger) = self.holder.ledger() {
            let resyncing = |j: u8| self.links.peer(j).is_some_and(|p| p.resync.is_some());
            let excused = (0..self.n as u8)
                .filter(|&j| ledger.fence_of(j).is_some_and(|f| f.is_whole() || resyncing(j)))
                .fold(0, |m, j| m | 1 << j);
            self.outcomes.excuse(excused);
        }
        self.resync_own(now);
        let (m, mut cx) = self.membership_parts();
        m.renew_lease(&mut cx, now);
        self.expire_leases(now);
        let (m, cx) = self.membership_parts();
        m.publish_peers_up(&cx);
        busy
    }

    /// A heartbeat READ of peer `j` came back.
    pub(in crate::cluster::protocol) fn on_heartbeat(&mut self, j: u8, ok: bool, now: Now) {
        let (m, mut cx) = self.membership_parts();
        let heard = m.on_heartbeat(&mut cx, j, ok);
        if ok && heard != Heard::Refused && self.sequencer.is_some() {
            self.sequencer_heard(j, now);
        }
        match heard {
            Heard::Nothing => {}
            Heard::Refused => self.link_failed(j, WcStatus::RemoteOperation, now),
            Heard::Readmitted => self.skip_failed_marks(j),
        }
    }

    /// This node failed to reach peer `j`'s directory (or lost its link to it).
    pub(in crate::cluster::protocol) fn suspect(&mut self, j: u8, now: Now) {
        let (m, mut cx) = self.membership_parts();
        m.suspect(&mut cx, j, now);
    }

    /// Writes waiting on a failed mark at `j` go ahead: `j` has revoked its directory
    /// after our suspicion epoch, or its lease has lapsed.
    fn skip_failed_marks(&mut self, j: u8) {
        self.writer.host_excluded(j);
    }

    /// The link to `j` failed (an error completion): stop posting, fail what waited on
    /// acknowledgements, suspect its directory, and reset once the rest has flushed.
    pub(in crate::cluster::protocol) fn link_failed(&mut self, j: u8, status: WcStatus, now: Now) {
        let (m, mut cx) = self.membership_parts();
        if !m.link_lost(&mut cx, j, status) {
            return;
        }
        let mut sent = self.links.peer_mut(j).map(|p| std::mem::take(&mut p.sent)).unwrap_or_default();
        for s in sent.drain(..) {
            self.entry_lost(j, s);
        }
        // Keep the queue's room for the next connection (nothing is sent on a
        // draining link).
        if let Some(p) = self.links.peer_mut(j) {
            if p.sent.is_empty() {
                p.sent = sent;
            }
        }
        self.suspect(j, now);
    }

    /// Resets drained links and answers offers that waited for it.
    fn finish_draining(&mut self, now: Now) -> bool {
        let mut busy = false;
        for j in 0..self.n as u8 {
            let (m, mut cx) = self.membership_parts();
            if !m.reset_if_drained(&mut cx, j) {
                continue;
            }
            busy = true;
            if let Some(hello) = m.take_offer(j) {
                self.on_hello(hello, now);
            }
        }
        busy
    }

    /// Handles every hello the mailbox holds.
    pub(in crate::cluster::protocol) fn poll_mailbox(&mut self, now: Now) -> bool {
        let mut busy = false;
        while let Some(hello) = self.membership.next_hello() {
            busy = true;
            self.on_hello(hello, now);
        }
        busy
    }

    /// One hello from the mailbox.
    pub(in crate::cluster::protocol) fn on_hello(&mut self, hello: HelloRepr, now: Now) {
        let j = hello.from;
        let (m, mut cx) = self.membership_parts();
        if m.on_hello(&mut cx, hello, now) == HelloNext::Done {
            return;
        }
        if self.links.peer(j).is_some_and(|p| p.link() != Link::Draining) {
            self.link_failed(j, WcStatus::Flushed, now);
        }
        let (m, mut cx) = self.membership_parts();
        if m.reset_if_idle(&mut cx, j) {
            let hello = m.take_offer(j).expect("just stored");
            self.on_hello(hello, now);
        }
    }
}

impl PeerLogs for Holder {
    fn advert(&self, j: u8) -> Option<LogAdvert> {
        self.log(j).map(|(log, mr)| LogAdvert {
            region: mr.remote(),
            applied: log.applied_seq(),
            geometry: log.geometry(),
        })
    }
}
