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
//!
//! The role is [`Membership`]: its timers, the host's directory lease it publishes,
//! the mailbox and the offers that wait for a link to drain (connection setup is in
//! `connect.rs`). It sees the node through a [`MemberCx`]; what the writer must do
//! about a peer (a failed mark may go ahead, a dead holder's fragments are lost, the
//! entries a broken link carried are lost) comes back to `Node` as a return value.

use std::sync::atomic::Ordering;

use prescient_shim::directory;
use prescient_shim::layout::header;
use prescient_shim::region::Region;

use super::host_directory::HostDirectory;
use super::links::Links;
use super::peer::{Link, Trust};
use super::pool::Pool;
use super::stats::NodeStats;
use super::time::Now;
use super::wr::{Kind, WrId};
use crate::cluster::config::ClusterConfig;
use crate::cluster::format::control::{
    first_epoch, ControlBlock, ControlView, CONTROL_BYTES, SUSPICIONS_PER_INCARNATION_MAX,
};
use crate::cluster::format::hello::HelloRepr;
use crate::cluster::format::ledger::Ledger;
use crate::cluster::format::log::LogGeometry;
use crate::cluster::format::store::Store;
use crate::cluster::protocol::mailbox::Mailbox;
use crate::fabric::{Fabric, MemoryRegion, Op, RemoteRegion, WcStatus};
use crate::limits::OFFER_RETRY_NS;

/// Membership and connections: heartbeat timer, the host's directory lease, the
/// mailbox hellos come and go through, and offers waiting for a link to drain.
pub(super) struct Membership {
    /// Period of heartbeats.
    heartbeat_ns: u64,
    /// The host's directory lease past the last answered heartbeat READ.
    lease_ns: u64,
    /// Silence after which a peer is declared dead.
    dead_after_ns: u64,
    /// When the next heartbeat round is due.
    next_heartbeat_ns: u64,
    /// The lease last published to the host (monotonic ns; 0: none).
    lease_until_ns: u64,
    /// Where hellos come and go.
    mailbox: Box<dyn Mailbox>,
    /// Per peer, an offer that waits for the link to drain before it is answered.
    pending_offers: Vec<Option<HelloRepr>>,
    /// Silence after which a writer is fenced (sequencer mode).
    fence_after_ns: Option<u64>,
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership")
            .field("next_heartbeat_ns", &self.next_heartbeat_ns)
            .field("lease_until_ns", &self.lease_until_ns)
            .finish_non_exhaustive()
    }
}

/// What a hello advertises of the log a peer's writes land in here.
#[derive(Clone, Copy, Debug)]
pub(super) struct LogAdvert {
    /// The log's registration, for the peer's WRITEs.
    pub region: RemoteRegion,
    /// The last entry applied from it (the peer continues after it).
    pub applied: u64,
    /// Its slots.
    pub geometry: LogGeometry,
}

/// The logs of the peers' writes on this node (the holder keeps them).
pub(super) trait PeerLogs {
    /// Peer `j`'s log here, if it is a peer.
    fn advert(&self, j: u8) -> Option<LogAdvert>;
}

/// What this node advertises in a hello, and where a new link's resync starts.
pub(super) struct Advert<'a> {
    /// The cluster (its hash, the outcome table's size).
    pub config: &'a ClusterConfig,
    /// The logs the peers' writes land in here.
    pub logs: &'a dyn PeerLogs,
    /// The fragment store.
    pub store: &'a Store,
    /// Its registration.
    pub store_mr: &'a MemoryRegion,
    /// The host directory's registration (`None`: no directory).
    pub directory_mr: Option<&'a MemoryRegion>,
    /// Slots in the host directory.
    pub directory_slots: u32,
    /// The next write's sequence number (a resync goes back an outcome table from it).
    pub next_write_seq: u64,
    /// The fate ring's registration (sequencer mode).
    pub fates: Option<RemoteRegion>,
    /// The change feed's registration (sequencer mode).
    pub feed: Option<RemoteRegion>,
    /// The stamp ledger (sequencer mode): advertised, and where fences are kept.
    pub ledger: Option<&'a Ledger>,
}

/// What membership and connection setup may touch of the node.
pub(super) struct MemberCx<'a, F: Fabric> {
    /// This node.
    pub me: u8,
    /// Nodes in the cluster.
    pub n: usize,
    /// This node's incarnation.
    pub incarnation: u32,
    /// When this node first polled.
    pub started_ns: Option<u64>,
    /// The peers.
    pub links: &'a mut Links<F::Qp>,
    /// This node's control block (its epochs).
    pub control: &'a ControlBlock,
    /// Heartbeat READ targets, one per peer.
    pub control_pool: &'a Pool,
    /// The zero-length receive buffer.
    pub zero_pool: &'a Pool,
    /// The host region (where the lease and the peers up are published).
    pub region: &'a Region,
    /// The host's directory (revoked, or swept of a dead writer's marks).
    pub directory: HostDirectory<'a>,
    /// Counters.
    pub stats: &'a mut NodeStats,
    /// The NIC (new queue pairs).
    pub fabric: &'a F,
    /// The completion queues new queue pairs report to.
    pub cqs: (&'a F::Cq, &'a F::Cq),
    /// What hellos advertise.
    pub advert: Advert<'a>,
}

/// What a heartbeat READ's answer asks of the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Heard {
    /// Nothing more.
    Nothing,
    /// The peer's control block was refused: the link must fail.
    Refused,
    /// The peer's directory is readmitted: writes waiting on a failed mark there go
    /// ahead.
    Readmitted,
}

impl Membership {
    /// Membership of a node of `config` at `now`, hellos going through `mailbox`.
    pub(super) fn new(config: &ClusterConfig, mailbox: Box<dyn Mailbox>, now: Now) -> Self {
        Self {
            heartbeat_ns: config.heartbeat_us * 1_000,
            lease_ns: config.lease_us * 1_000,
            dead_after_ns: config.dead_after_us * 1_000,
            next_heartbeat_ns: now.mono_ns,
            lease_until_ns: 0,
            mailbox,
            pending_offers: (0..config.nodes.len()).map(|_| None).collect(),
            fence_after_ns: config.ordering.sequencer().map(|s| s.fence_after_ns(config.dead_after_us)),
        }
    }

    /// Silence after which a writer is fenced (sequencer mode).
    pub(super) fn fence_after_ns(&self) -> Option<u64> {
        self.fence_after_ns
    }

    /// The mailbox, for the node that takes over this one's network endpoint.
    pub(super) fn into_mailbox(self) -> Box<dyn Mailbox> {
        self.mailbox
    }

    /// The mailbox hellos come and go through.
    pub(super) fn mailbox(&mut self) -> &mut dyn Mailbox {
        &mut *self.mailbox
    }

    /// How long an offer or an answer waits before it is sent again:
    /// [`OFFER_RETRY_NS`], or a quarter of `dead_after`
    /// where that is shorter (but at least a heartbeat), so that a lost hello costs a
    /// link a small part of the failure-detection bound.
    pub(super) fn offer_retry_ns(&self) -> u64 {
        (self.dead_after_ns / 4).max(self.heartbeat_ns).min(OFFER_RETRY_NS)
    }

    /// The offer that waited for the link to `j` to drain, if any.
    pub(super) fn take_offer(&mut self, j: u8) -> Option<HelloRepr> {
        self.pending_offers.get_mut(j as usize).and_then(Option::take)
    }

    /// Keeps `hello` until the link to its sender has drained.
    pub(super) fn keep_offer(&mut self, hello: HelloRepr) {
        self.pending_offers[hello.from as usize] = Some(hello);
    }

    /// Whether a heartbeat round is due at `now` (then the next is scheduled).
    pub(super) fn heartbeat_due(&mut self, now: Now) -> bool {
        if now.mono_ns < self.next_heartbeat_ns {
            return false;
        }
        self.next_heartbeat_ns = self.next_heartbeat_ns.saturating_add(self.heartbeat_ns).max(now.mono_ns);
        true
    }

    /// READs peer `j`'s control block, if its link is connected, the peer has shown it
    /// is ready and no READ is out.
    pub(super) fn post_heartbeat<F: Fabric>(&mut self, cx: &mut MemberCx<'_, F>, j: u8, now: Now) {
        let Some(p) = cx.links.peer(j) else { return };
        if !matches!(p.link(), Link::Connected | Link::Up)
            || p.heartbeat_posted_ns.is_some()
            || p.awaiting_ready.is_some()
        {
            return;
        }
        let Some(remote) = p.remote else { return };
        let buf = cx.control_pool.buf(u32::from(j), CONTROL_BYTES);
        if let Some(p) = cx.links.peer_mut(j) {
            p.heartbeat_posted_ns = Some(now.mono_ns);
        }
        cx.links.post(j, WrId::new(Kind::Heartbeat, j, 0, 0), Op::Read { remote: remote.control.at(0) }, buf);
    }

    /// A heartbeat READ of peer `j` came back (`ok`: with its control block).
    pub(super) fn on_heartbeat<F: Fabric>(&mut self, cx: &mut MemberCx<'_, F>, j: u8, ok: bool) -> Heard {
        let me = cx.me;
        let Some(posted_ns) = cx.links.peer_mut(j).and_then(|p| p.heartbeat_posted_ns.take()) else {
            return Heard::Nothing;
        };
        if !ok {
            return Heard::Nothing;
        }
        let mut bytes = [0u8; CONTROL_BYTES];
        cx.control_pool.read(u32::from(j), &mut bytes);
        let view = match ControlView::new_checked(bytes, j) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(node = me, peer = j, error = %e, "refused a peer's control block");
                return Heard::Refused;
            }
        };
        let Some(p) = cx.links.peer_mut(j) else { return Heard::Nothing };
        if p.remote.is_some_and(|r| r.incarnation != view.incarnation()) {
            tracing::warn!(node = me, peer = j, "peer's control block is of another incarnation; reconnecting");
            return Heard::Refused;
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
        let epoch_readmitted = p.readmitted;
        if revoke {
            // Lease to zero first: no reader may trust a slot while we sweep.
            self.set_lease(cx.region, 0);
            cx.directory.revoke(me, cx.stats);
            cx.control.set_honored(j, honored);
        }
        if readmit {
            cx.control.set_readmitted(j, epoch_readmitted);
            tracing::info!(node = me, peer = j, epoch = epoch_readmitted, "peer's directory readmitted");
            return Heard::Readmitted;
        }
        Heard::Nothing
    }

    /// This node failed to reach peer `j`'s directory (or lost its link to it): bump
    /// the suspicion epoch that `j` must honor before it trusts its directory again.
    pub(super) fn suspect<F: Fabric>(&mut self, cx: &mut MemberCx<'_, F>, j: u8, now: Now) {
        let (me, incarnation) = (cx.me, cx.incarnation);
        let Some(p) = cx.links.peer_mut(j) else { return };
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
        cx.control.set_suspect(j, epoch);
        cx.stats.suspicions += 1;
    }

    /// Excludes peer `j`'s directory once its lease must have lapsed since the latest
    /// suspicion. Returns whether it did now (writes waiting on a failed mark at `j`
    /// then go ahead).
    pub(super) fn check_trust<F: Fabric>(&mut self, cx: &mut MemberCx<'_, F>, j: u8, now: Now) -> bool {
        let wait_ns = self.lease_ns + self.heartbeat_ns;
        let Some(p) = cx.links.peer_mut(j) else { return false };
        if let Trust::Suspect { since_ns } = p.trust() {
            // Margin: one heartbeat, for the READ that renewed its lease last.
            if now.mono_ns >= since_ns + wait_ns {
                p.set_trust(cx.me, Trust::Excluded);
                return true;
            }
        }
        false
    }

    /// Declares peer `j` dead once it has been silent for `dead_after` and clears its
    /// marks from the host's directory. Returns whether it did now (writes waiting on
    /// its fragments then stop waiting).
    pub(super) fn check_dead<F: Fabric>(&mut self, cx: &mut MemberCx<'_, F>, j: u8, now: Now) -> bool {
        let me = cx.me;
        let started = cx.started_ns.unwrap_or(now.mono_ns);
        let Some(p) = cx.links.peer_mut(j) else { return false };
        if p.dead || now.mono_ns < p.last_heard_ns.max(started) + self.dead_after_ns {
            return false;
        }
        p.dead = true;
        tracing::warn!(node = me, peer = j, "peer silent too long: declared dead; clearing its marks");
        let cleared = cx.directory.sweep(|w| directory::clear_dead(w, j));
        cx.stats.dead_declared += 1;
        cx.stats.marks_cleared += cleared;
        true
    }

    /// The host's directory lease: `min over peers of last heard + lease`, or zero
    /// while a suspicion of this node is not yet honored and readmitted.
    pub(super) fn renew_lease<F: Fabric>(&mut self, cx: &mut MemberCx<'_, F>, now: Now) {
        let mut until = u64::MAX;
        for p in cx.links.iter() {
            let pending = p.view.is_some_and(|v| v.suspect(cx.me) > p.honored);
            if !p.readmitted_by_peer || pending || p.last_heard_ns == 0 {
                until = 0;
                break;
            }
            until = until.min(p.last_heard_ns + self.lease_ns);
        }
        if until == u64::MAX {
            until = now.mono_ns + self.lease_ns;
        }
        self.set_lease(cx.region, until);
    }

    fn set_lease(&mut self, region: &Region, until_ns: u64) {
        if until_ns != self.lease_until_ns {
            self.lease_until_ns = until_ns;
            region.u64_at(header::DIRECTORY_LEASE_UNTIL_NS).store(until_ns, Ordering::Release);
        }
    }

    /// Publishes to the host which nodes are up (this one always).
    pub(super) fn publish_peers_up<F: Fabric>(&self, cx: &MemberCx<'_, F>) {
        let up = cx.links.iter().filter(|p| p.is_up()).fold(1u32 << cx.me, |m, p| m | 1 << p.id);
        cx.region.u32_at(header::CLUSTER_PEERS_UP).store(up, Ordering::Release);
    }

    /// The link to `j` failed (an error completion): stop posting. Returns whether it
    /// was live (then the entries it carried are lost, and `j` is to be suspected).
    pub(super) fn link_lost<F: Fabric>(&mut self, cx: &mut MemberCx<'_, F>, j: u8, status: WcStatus) -> bool {
        let me = cx.me;
        let Some(p) = cx.links.peer_mut(j) else { return false };
        if matches!(p.link(), Link::Draining | Link::Down | Link::Offered { .. }) && p.sent.is_empty() {
            return false;
        }
        tracing::warn!(node = me, peer = j, ?status, "link lost");
        p.set_link(me, Link::Draining);
        cx.stats.links_lost += 1;
        true
    }

    /// Resets the link to `j` if it is draining and its requests have all flushed.
    pub(super) fn reset_if_drained<F: Fabric>(&mut self, cx: &mut MemberCx<'_, F>, j: u8) -> bool {
        let ready = cx.links.peer(j).is_some_and(|p| p.link() == Link::Draining && p.sends == 0);
        if ready {
            self.reset_link(cx, j);
        }
        ready
    }

    /// Resets the link to `j` if nothing is outstanding on it.
    pub(super) fn reset_if_idle<F: Fabric>(&mut self, cx: &mut MemberCx<'_, F>, j: u8) -> bool {
        let idle = cx.links.peer(j).is_some_and(|p| p.sends == 0);
        if idle {
            self.reset_link(cx, j);
        }
        idle
    }
}
