//! Fencing a silent writer (`ordering = "sequencer"`): what lets every order go on
//! without a node that never comes back.
//!
//! A writer's stamps are decided by its fate ring, which only it writes. Once it has
//! been silent for `fence_after` (declared dead, its link down), this node fences it in
//! its stamp ledger (`format/ledger.rs`): from then on it takes no fragment of the
//! writer's writes and no rollback of one it holds, so what its ledger says of them
//! stays as it is. Appliers READ the fences and then the entries, and decide the
//! writer's stamps by the holders' rule (`cluster/holders_rule.rs`,
//! `protocol/ledgers.rs`): a Pending write of its ring, and, once enough holders fence
//! it that it cannot commit anything any more, every stamp its ring would have told
//! them of. The fence is the holder's CPU's own, written between two entries it takes
//! (a fence CASed by a peer would race the holder's check of each entry).
//!
//! A fenced writer that connects again (back from a partition, or restarted) says in
//! its Hello the first write number it may still take; the fence is narrowed to the
//! writes below it before anything of the writer is taken on the new link. Those stay
//! frozen for good, so a decision the rule made from them stands; the writer learns the
//! fates of its open ones from the order, like every node (`node/apply.rs`).
#![forbid(unsafe_code)]

use super::membership::{MemberCx, Membership};
use super::peer::Link;
use super::time::Now;
use crate::fabric::Fabric;

impl Membership {
    /// Fences peer `j` in this node's ledger if it has been silent for the cluster's
    /// `fence_after` with its link down (sequencer mode only): true when the fence is new.
    pub(super) fn check_fence<F: Fabric>(&mut self, cx: &mut MemberCx<'_, F>, j: u8, now: Now) -> bool {
        let (Some(ledger), Some(after_ns)) = (cx.advert.ledger, self.fence_after_ns()) else { return false };
        let started = cx.started_ns.unwrap_or(now.mono_ns);
        let Some(p) = cx.links.peer(j) else { return false };
        let silent = p.dead
            && matches!(p.link(), Link::Down | Link::Offered { .. })
            && now.mono_ns >= p.last_heard_ns.max(started) + after_ns;
        if !silent || ledger.fence_of(j).is_some_and(|f| f.is_whole()) {
            return false;
        }
        let incarnation = p.remote.map_or(0, |r| r.incarnation);
        match ledger.fence(j, incarnation) {
            Ok(true) => {
                cx.stats.fences += 1;
                tracing::warn!(
                    node = cx.me,
                    peer = j,
                    incarnation,
                    silent_ms = (now.mono_ns - p.last_heard_ns.max(started)) / 1_000_000,
                    "peer silent past fence_after: fenced; this node takes none of its writes until it connects again, and the orders decide its stamps from the holders' ledgers"
                );
                true
            }
            Ok(false) => false,
            Err(e) => {
                tracing::error!(node = cx.me, peer = j, error = %e, "cannot fence a silent peer; the orders wait for it");
                false
            }
        }
    }

    /// A hello from `j`, whose next write number is `next_write`: a fence of `j` is
    /// narrowed to the writes below it before the link comes up. False if the fence
    /// could not be written (the hello must be ignored: `j` offers again).
    pub(super) fn narrow_fence<F: Fabric>(cx: &mut MemberCx<'_, F>, j: u8, next_write: u64) -> bool {
        let Some(ledger) = cx.advert.ledger else { return true };
        if !ledger.fence_of(j).is_some_and(|f| f.is_whole()) {
            return true;
        }
        match ledger.narrow(j, next_write) {
            Ok(changed) => {
                if changed {
                    cx.stats.fences_narrowed += 1;
                    tracing::info!(
                        node = cx.me,
                        peer = j,
                        next_write,
                        "fenced peer connects again: its writes from {next_write} on are taken, the earlier ones stay frozen"
                    );
                }
                true
            }
            Err(e) => {
                tracing::error!(node = cx.me, peer = j, error = %e, "cannot narrow the fence of a peer that connects again; its hello is ignored");
                false
            }
        }
    }
}
