//! One replicated write in flight on its writer: where its fragments went, which
//! holders persisted them (phase 1), which persisted the decision (phase 2), the state
//! of its mark in every host's cache directory, and the times of each stage.
//!
//! ```text
//!   Replicating ---> Deciding ---> [Invalidating] ---> Finished(Committed)
//!        |              |                |
//!        |              +----------------+--(deadline)--> Finished(Undecided)
//!        +--(no quorum possible, or deadline)--> Finished(NotDurable)
//! ```
//! - `Replicating -> Deciding`: a quorum of holders persisted their fragment (the
//!   write is committed at the writer, in its outcome table).
//! - `Replicating -> Finished(NotDurable)`: the quorum can no longer be reached, or
//!   the deadline passed first (rolled back).
//! - `Deciding -> Finished(Committed)`: m + 1 holders persisted the decision and every
//!   host's mark is settled; `Deciding -> Invalidating` instead under the after-commit
//!   (baseline) policy, which invalidates the directories only now. Under the
//!   speculative policy the host gets its completion earlier, still in `Deciding`:
//!   once m + 1 holders persisted the decision, every mark is placed (no cache serves
//!   an older value; a reader that finds the Pending mark reads through) and no work
//!   request carries its buffer. Moving the marks to the committed version, which
//!   lets caches refill, goes on after: on a far directory that is a whole round trip
//!   the writer's host does not wait for.
//! - `Invalidating -> Finished(Committed)`: every host's mark is settled.
//! - `Deciding` or `Invalidating -> Finished(Undecided)`: the deadline passed first.
//!
//! [`Phase`] names the states and [`Phase::next_allowed`] the arrows; a write's phase
//! changes only through [`Write::set_phase`], which checks the arrow and logs it. A
//! `Finished` write waits only for the work requests that carry its buffers to
//! complete; then it completes to the host (unless it did already) and leaves the
//! table.

use prescient_shim::directory::{SlotState, SlotWord};

use super::slots::JobId;
use crate::cluster::placement;
use crate::histogram::WriteStage;
use crate::limits::FRAGMENTS_MAX;
use crate::limits::NODES_MAX;
use crate::region_server::Taken;
use crate::stripe::StripeLayout;

/// Where a write stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Fragments (and marks) are out; waiting for a quorum of holders to persist.
    Replicating,
    /// Committed at the writer; the decision goes to the holders.
    Deciding,
    /// Decided on m + 1 holders; the baseline policy invalidates the directories now.
    Invalidating,
    /// Over, with how it ended: waiting only for its work requests to complete.
    Finished(End),
}

impl Phase {
    /// Whether a write may go from `self` to `to` (the arrows of the diagram above).
    pub fn next_allowed(self, to: Phase) -> bool {
        use Phase::*;
        matches!(
            (self, to),
            (Replicating, Deciding | Finished(End::NotDurable))
                | (Deciding, Invalidating | Finished(End::Committed | End::Undecided))
                | (Invalidating, Finished(End::Committed | End::Undecided))
        )
    }

    /// How the write ended, once it has.
    pub fn end(self) -> Option<End> {
        match self {
            Phase::Finished(end) => Some(end),
            _ => None,
        }
    }
}

/// How a write ended, for its completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Committed and the decision persisted on m + 1 holders.
    Committed,
    /// Rolled back: the quorum was not reached.
    NotDurable,
    /// Committed at the writer, but the decision reached fewer than m + 1 holders
    /// before the deadline.
    Undecided,
}

/// The state of the write's mark in one host's directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    /// No mark wanted (policy), or not yet started.
    None,
    /// A CAS job is running.
    Running {
        /// The job.
        job: JobId,
    },
    /// Placed: the slot holds `placed`, which replaced a word of state `prior`.
    Placed {
        /// The word placed.
        placed: SlotWord,
        /// What rollback restores.
        prior: SlotState,
    },
    /// The host could not be reached: the write waits for its exclusion.
    Failed,
    /// The host is excluded: its lease has lapsed, no mark is needed.
    Skipped,
    /// Resolved after commit or rollback (nothing more to do).
    Settled,
}

impl Mark {
    /// Whether a mark may go from `from` to `to`: nothing goes back to `None` (a mark
    /// not wanted is decided when the write starts), and `Skipped` and `Settled` are
    /// final (no job of the write runs on that host after them). Every other move
    /// happens: a job starts (`Running`), lands (`Placed`), resolves (`Settled`) or
    /// fails (`Failed`, then `Skipped` once the host is excluded), and a job may also
    /// finish at once, without passing through `Running`.
    pub fn can_become(from: Mark, to: Mark) -> bool {
        !matches!(to, Mark::None) && !matches!(from, Mark::Skipped | Mark::Settled)
    }

    /// Whether this host needs nothing more from the write: no mark wanted, its
    /// directory excluded, or its mark resolved (Invalid after commit, rolled back).
    pub fn is_settled(&self) -> bool {
        matches!(self, Mark::None | Mark::Skipped | Mark::Settled)
    }

    /// Whether readers of this host no longer take the old value from their cache
    /// (the mark is in place, or resolved, or the host is excluded).
    pub fn is_placed(&self) -> bool {
        matches!(self, Mark::Placed { .. }) || self.is_settled()
    }
}

/// What a write is when it starts (everything else starts empty, in `Replicating`).
#[derive(Debug)]
pub struct NewWrite {
    /// The host request.
    pub taken: Taken,
    /// SHA-256 prefix of the key (store, AAD).
    pub key_hash: u64,
    /// The directory's key id.
    pub key_id: u64,
    /// The write's stamp (`version << 8 | writer`).
    pub stamp: u64,
    /// A DELETE.
    pub tombstone: bool,
    /// The writer's write number (outcome table).
    pub write_seq: u64,
    /// The stripe.
    pub layout: StripeLayout,
    /// The DPU scratch buffer holding headers and parity.
    pub side: u32,
    /// Node of each fragment.
    pub holders: [u8; FRAGMENTS_MAX],
    /// When it must be over.
    pub deadline_ns: u64,
    /// When the stages up to encode ended (ns), indexed by `WriteStage`.
    pub times: [u64; WriteStage::ALL.len()],
    /// When the write arrived from the host.
    pub arrived_ns: u64,
}

/// One write in flight (in the writer's `SlotTable<Write, WriteId>`).
#[derive(Debug)]
pub struct Write {
    /// The host request.
    pub taken: Taken,
    /// SHA-256 prefix of the key (store, AAD).
    pub key_hash: u64,
    /// The directory's key id.
    pub key_id: u64,
    /// The write's stamp (`version << 8 | writer`).
    pub stamp: u64,
    /// A DELETE.
    pub tombstone: bool,
    /// The writer's write number (outcome table).
    pub write_seq: u64,
    /// The stripe.
    pub layout: StripeLayout,
    /// The DPU scratch buffer holding headers and parity.
    pub side: u32,
    /// Node of each fragment.
    pub holders: [u8; FRAGMENTS_MAX],
    /// Nodes that persisted their fragment.
    pub acked: u32,
    /// Nodes that failed or refused.
    pub failed: u32,
    /// Holders a fragment of it was posted to. One never posted to (it was down when
    /// the write went out) cannot hold it, so its rollback need not wait for it
    /// (`replicate.rs`, `abort`).
    pub posted: u32,
    /// Nodes that persisted the decision.
    pub decided: u32,
    /// Nodes a notice went to and has not been answered.
    pub notified: u32,
    /// Where it stands (changed only by [`Write::set_phase`]).
    phase: Phase,
    /// Marks per host directory (indexed by node).
    marks: [Mark; NODES_MAX],
    /// Work requests carrying this write's buffers, not completed yet.
    pub wrs: u32,
    /// Completed to the host already (speculative: decided on m + 1 holders with every
    /// mark placed; the marks' move to the committed version goes on after).
    pub completed: bool,
    /// Hosts whose mark was placed at some point (its move to the committed version
    /// may be running since).
    ever_placed: u32,
    /// When it must be over.
    pub deadline_ns: u64,
    /// When each stage ended (ns, 0 = not yet), indexed by `WriteStage`.
    pub times: [u64; WriteStage::ALL.len()],
    /// When the write arrived from the host.
    pub arrived_ns: u64,
    /// Fragments (by index) waiting for log credit at their holder.
    pub waiting_credit: u32,
    /// Per host, what the lease's mark replaced (a mark upgraded from a lease rolls
    /// back to that, not to the lease's Pending word).
    pub lease_priors: [Option<SlotState>; NODES_MAX],
    /// The write's key held a predictor lease with at least one mark placed when the
    /// write arrived (its completion carries `FLAG_LEASED`).
    pub leased: bool,
    /// Sequencer mode: rolled back, and its stamp not recorded Aborted yet (its
    /// rollback has not reached enough holders, `rollbacks.rs`). Its host is answered
    /// `NotDurable` only once it is: until then a quorum may still hold the fragment,
    /// which the holders' rule for a writer gone for good takes for a committed write.
    pub rollback_open: bool,
}

impl Write {
    /// A write starting: `Replicating`, nothing sent, acknowledged or marked yet.
    pub fn new(w: NewWrite) -> Self {
        let NewWrite {
            taken,
            key_hash,
            key_id,
            stamp,
            tombstone,
            write_seq,
            layout,
            side,
            holders,
            deadline_ns,
            times,
            arrived_ns,
        } = w;
        Self {
            taken,
            key_hash,
            key_id,
            stamp,
            tombstone,
            write_seq,
            layout,
            side,
            holders,
            acked: 0,
            failed: 0,
            posted: 0,
            decided: 0,
            notified: 0,
            phase: Phase::Replicating,
            marks: [Mark::None; NODES_MAX],
            wrs: 0,
            completed: false,
            ever_placed: 0,
            deadline_ns,
            times,
            arrived_ns,
            waiting_credit: 0,
            rollback_open: false,
            lease_priors: [None; NODES_MAX],
            leased: false,
        }
    }

    /// Where it stands.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The one place a write's mark on host `j` changes: `to` must be a move
    /// [`Mark::can_become`] allows (anything else is a programmer error).
    pub fn set_mark(&mut self, j: u8, to: Mark) {
        let from = self.marks[j as usize];
        if matches!(to, Mark::Placed { .. }) {
            self.ever_placed |= 1 << j;
        }
        assert!(
            Mark::can_become(from, to),
            "write {} (writer {}): mark on host {j} {from:?} => {to:?} is not a transition",
            self.write_seq,
            self.stamp as u8
        );
        tracing::trace!(
            writer = self.stamp as u8,
            write_seq = self.write_seq,
            host = j,
            "write mark {from:?} => {to:?}"
        );
        self.marks[j as usize] = to;
    }

    /// The write's mark in host `j`'s directory.
    pub fn mark(&self, j: u8) -> Mark {
        self.marks[j as usize]
    }

    /// Moves it to phase `to`, which must be an arrow of the diagram from where it is
    /// (anything else is a programmer error).
    pub fn set_phase(&mut self, to: Phase) {
        let from = self.phase;
        assert!(
            from.next_allowed(to),
            "write {} (writer {}): phase {from:?} => {to:?} is not a transition",
            self.write_seq,
            self.stamp as u8
        );
        tracing::trace!(writer = self.stamp as u8, write_seq = self.write_seq, "write phase {from:?} => {to:?}");
        self.phase = to;
    }

    /// Nodes holding a fragment of this write.
    pub fn holder_mask(&self) -> u32 {
        placement::mask_of(&self.holders[..self.layout.fragments()])
    }

    /// Whether the quorum can still be reached.
    pub fn quorum_possible(&self, quorum: u32) -> bool {
        let holders = self.holder_mask();
        (holders & !self.failed).count_ones() >= quorum
    }

    /// Whether every host's mark is settled.
    pub fn marks_settled(&self, nodes: usize) -> bool {
        self.marks[..nodes].iter().all(Mark::is_settled)
    }

    /// Whether every host's mark is in place (the speculative invalidation is done).
    pub fn marks_placed(&self, nodes: usize) -> bool {
        self.marks[..nodes].iter().all(Mark::is_placed)
    }

    /// Whether every host's mark was placed and is still in force: placed, moving to
    /// the committed version (its commit job runs), resolved, or not needed. A failed
    /// job does not count: that host waits for its exclusion.
    pub fn marks_in_force(&self, nodes: usize) -> bool {
        self.marks[..nodes]
            .iter()
            .enumerate()
            .all(|(j, m)| m.is_placed() || (matches!(m, Mark::Running { .. }) && self.ever_placed & (1 << j) != 0))
    }

    /// Records that `stage` ended at `now_ns` (the first time only).
    pub fn stamp_stage(&mut self, stage: WriteStage, now_ns: u64) {
        let t = &mut self.times[stage as usize];
        if *t == 0 {
            *t = now_ns.max(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_move_only_along_the_diagram() {
        use End::*;
        use Phase::*;
        let all = [Replicating, Deciding, Invalidating, Finished(Committed), Finished(NotDurable), Finished(Undecided)];
        let allowed = [
            (Replicating, Deciding),
            (Replicating, Finished(NotDurable)),
            (Deciding, Invalidating),
            (Deciding, Finished(Committed)),
            (Deciding, Finished(Undecided)),
            (Invalidating, Finished(Committed)),
            (Invalidating, Finished(Undecided)),
        ];
        for from in all {
            for to in all {
                assert_eq!(from.next_allowed(to), allowed.contains(&(from, to)), "{from:?} => {to:?}");
            }
        }
        assert_eq!(Finished(Undecided).end(), Some(Undecided));
        assert_eq!(Deciding.end(), None);
    }

    #[test]
    fn marks_never_go_back_to_none_nor_leave_skipped_or_settled() {
        use prescient_shim::directory::SlotWord;
        let placed = Mark::Placed {
            placed: SlotWord { state: SlotState::Pending, writer: 1, version: 7 },
            prior: SlotState::Valid,
        };
        let running = Mark::Running { job: <JobId as super::super::slots::Handle>::from_parts(3, 1) };
        let all = [Mark::None, running, placed, Mark::Failed, Mark::Skipped, Mark::Settled];
        for from in all {
            for to in all {
                let want = to != Mark::None && !matches!(from, Mark::Skipped | Mark::Settled);
                assert_eq!(Mark::can_become(from, to), want, "{from:?} => {to:?}");
            }
        }
    }
}
