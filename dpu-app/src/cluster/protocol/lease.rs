//! Predictor leases as directory marks (DESIGN.md step 2): a key the predictor expects
//! to be written next is marked `Pending` in every host's directory before its PUT
//! arrives. A PUT that finds its key leased upgrades the lease's marks (it knows their
//! exact words, so each CAS takes in one try); a lease that ends unused - the
//! predictor's window passed, or [`LEASE_MARK_MAX_NS`] - is rolled back to what it
//! replaced. Each lease times its marking round trip (opened to its last mark job's
//! end): what a write that takes it does not wait for, and what its rollback costs
//! again (the predictor's threshold tuner weighs the two).

use prescient_shim::directory::{self, SlotState, SlotWord};

use super::slotjob::{Finished, Intent};
use super::slots::{JobId, LeaseId, SlotTable};
use super::stats::NodeStats;
use super::time::Now;
use crate::cluster::hlc::Hlc;
use crate::limits::{LEASE_MARK_FAR_ROUND_TRIPS, LEASE_MARK_MAX_NS, NODES_MAX};

/// How long a lease mark may stay without its PUT on a network whose farthest base
/// round trip is `farthest_rtt_ns`: [`LEASE_MARK_MAX_NS`], or
/// [`LEASE_MARK_FAR_ROUND_TRIPS`] far round trips where that is longer.
pub fn lease_mark_max_ns(farthest_rtt_ns: u64) -> u64 {
    LEASE_MARK_MAX_NS.max(farthest_rtt_ns.saturating_mul(LEASE_MARK_FAR_ROUND_TRIPS))
}

/// The state of a lease's mark in one host's directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseMark {
    /// None out: not started, the host not reachable, or the job did not place one.
    None,
    /// Its directory job runs.
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
    /// Given up: rolled back (by a detached job), or handed to the write that took it.
    Settled,
}

impl LeaseMark {
    /// Whether a mark may go from `from` to `to`.
    fn may_become(from: LeaseMark, to: LeaseMark) -> bool {
        use LeaseMark as M;
        match (from, to) {
            // A job started; or it ended at once (the local directory, or no room).
            (M::None, M::Running { .. } | M::Placed { .. } | M::None) => true,
            // Its job ended: placed, not placed, or placed for a lease already closed
            // (then rolled back at once).
            (M::Running { .. }, M::Placed { .. } | M::None | M::Settled) => true,
            // Rolled back.
            (M::Placed { .. }, M::Settled) => true,
            (M::None, M::Settled)
            | (M::Running { .. }, M::Running { .. })
            | (M::Placed { .. }, M::None | M::Running { .. } | M::Placed { .. })
            | (M::Settled, _) => false,
        }
    }
}

/// Where a lease stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// Its marks are out (or going out), waiting for the predicted PUT.
    Open,
    /// A PUT of its key took it: its placed marks belong to that write now.
    Taken,
    /// It ended unused: its placed marks are being rolled back.
    RolledBack,
}

/// One lease: its marks in the directories of a predicted key.
#[derive(Clone, Copy, Debug)]
pub struct Lease {
    /// The key id leased.
    key_id: u64,
    /// When it was opened.
    opened_ns: u64,
    /// When its latest mark job ended (0: none has).
    marked_ns: u64,
    /// Where it stands.
    state: LeaseState,
    /// Per host.
    marks: [LeaseMark; NODES_MAX],
}

impl Lease {
    /// Changes the mark on host `j` (checked, logged).
    fn set_mark(&mut self, id: LeaseId, j: u8, to: LeaseMark) {
        let from = self.marks[j as usize];
        assert!(LeaseMark::may_become(from, to), "lease {id:?}'s mark on host {j}: {from:?} => {to:?}");
        if from != to {
            tracing::trace!(lease = ?id, host = j, "lease mark {from:?} => {to:?}");
            self.marks[j as usize] = to;
        }
    }

    /// Closes the lease (checked, logged): only an open lease can be taken or rolled back.
    fn set_state(&mut self, id: LeaseId, to: LeaseState) {
        let from = self.state;
        let legal = match (from, to) {
            (LeaseState::Open, LeaseState::Taken | LeaseState::RolledBack) => true,
            (LeaseState::Open, LeaseState::Open) | (LeaseState::Taken | LeaseState::RolledBack, _) => false,
        };
        assert!(legal, "lease {id:?}: {from:?} => {to:?}");
        tracing::trace!(lease = ?id, "lease {from:?} => {to:?}");
        self.state = to;
    }

    /// Whether a directory job of the lease still runs.
    fn running(&self) -> bool {
        self.marks.iter().any(|m| matches!(m, LeaseMark::Running { .. }))
    }

    /// Its marking round trip at `now_ns`: opened to its last mark job's end, or to
    /// now while one still runs; 0 when no mark is placed (it saves and costs nothing).
    fn marking_ns(&self, now_ns: u64) -> u64 {
        if !self.marks.iter().any(|m| matches!(m, LeaseMark::Placed { .. })) {
            return 0;
        }
        let end = if self.running() { now_ns } else { self.marked_ns };
        end.saturating_sub(self.opened_ns)
    }
}

/// What a write takes of the lease of its key.
#[derive(Clone, Copy, Debug)]
pub struct TakenLease {
    /// The lease (release it with [`Leases::release`] once the write's marks started).
    pub id: LeaseId,
    /// Its marks per host, as the write found them.
    pub marks: [LeaseMark; NODES_MAX],
    /// The marking round trip the write did not wait for (0: no mark was placed).
    pub saved_ns: u64,
}

/// A lease rolled back unused.
#[derive(Clone, Copy, Debug)]
pub struct RolledBack {
    /// Its key.
    pub key_id: u64,
    /// Per host, the placed mark to roll back with a detached job.
    pub rollbacks: [Option<Rollback>; NODES_MAX],
    /// Its marking round trip (0: no mark was placed): the rollback's CASes cost
    /// about as much again.
    pub marking_ns: u64,
}

/// A placed lease mark to roll back with a detached job (the lease lets go of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rollback {
    /// The host.
    pub host: u8,
    /// The word the lease placed there.
    pub placed: SlotWord,
    /// What it replaced.
    pub prior: SlotState,
}

/// The leases with marks out.
#[derive(Debug)]
pub struct Leases {
    table: SlotTable<Lease, LeaseId>,
    mark_max_ns: u64,
}

impl Leases {
    /// Room for `capacity` leases, each rolled back after `mark_max_ns` without its
    /// PUT ([`lease_mark_max_ns`]).
    pub fn new(capacity: u32, mark_max_ns: u64) -> Self {
        Self { table: SlotTable::new(capacity), mark_max_ns }
    }

    /// Slots in all.
    pub fn capacity(&self) -> u32 {
        self.table.capacity()
    }

    /// The open lease of `key_id`.
    fn find(&self, key_id: u64) -> Option<LeaseId> {
        self.table.iter().find(|(_, l)| l.key_id == key_id && l.state == LeaseState::Open).map(|(id, _)| id)
    }

    /// Opens a lease of `key_id` at `now`, unless one is open: its handle and the
    /// version its marks carry. `None` when it is open already, the table is full
    /// (counted) or the clock has no version to give.
    pub(super) fn open(
        &mut self,
        key_id: u64,
        now: Now,
        hlc: &mut Hlc,
        stats: &mut NodeStats,
    ) -> Option<(LeaseId, u64)> {
        if self.find(key_id).is_some() {
            return None;
        }
        let Some(id) = self.table.reserve() else {
            stats.leases_dropped += 1;
            return None;
        };
        let version = match hlc.next(now.wall_us) {
            Ok(s) => s.raw() >> 8,
            // Can happen (the clock's floor is not persisted yet, or it is exhausted):
            // no lease this time; the write marks on its own.
            Err(_) => {
                self.table.unreserve(id);
                return None;
            }
        };
        let lease = Lease {
            key_id,
            opened_ns: now.mono_ns,
            marked_ns: 0,
            state: LeaseState::Open,
            marks: [LeaseMark::None; NODES_MAX],
        };
        self.table.put(id, lease);
        stats.leases_opened += 1;
        Some((id, version))
    }

    /// The lease's mark on host `j` is job `job`, running.
    pub(super) fn started(&mut self, id: LeaseId, j: u8, job: JobId) {
        self.table.get_mut(id).expect("a lease whose job just started").set_mark(id, j, LeaseMark::Running { job });
    }

    /// The lease's mark job on host `j` ended with `f` at `now_ns`. Returns the mark
    /// to roll back at once: one that landed after a write took the lease (the write
    /// marked on its own) or after it was rolled back.
    pub(super) fn job_done(
        &mut self,
        id: LeaseId,
        j: u8,
        intent: Intent,
        f: Finished,
        now_ns: u64,
    ) -> Option<Rollback> {
        assert!(matches!(intent, Intent::Mark { .. }), "a lease's jobs only mark: {intent:?}");
        // A lease is freed only once none of its jobs runs.
        let l = self.table.get_mut(id).unwrap_or_else(|| panic!("a job of lease {id:?}, which is gone"));
        l.marked_ns = l.marked_ns.max(now_ns);
        let open = l.state == LeaseState::Open;
        let rollback = match f {
            Finished::Done { placed, replaced } => {
                let prior = directory::prior_of(replaced);
                if open {
                    l.set_mark(id, j, LeaseMark::Placed { placed, prior });
                    None
                } else {
                    // The write came while this CAS flew and marked on its own: undo ours
                    // (the rollback takes only if the slot still holds our word).
                    l.set_mark(id, j, LeaseMark::Settled);
                    Some(Rollback { host: j, placed, prior })
                }
            }
            Finished::NotNeeded { .. } | Finished::Failed | Finished::Contended { .. } => {
                l.set_mark(id, j, LeaseMark::None);
                None
            }
        };
        if !open {
            self.release(id);
        }
        rollback
    }

    /// Hands the marks of `key_id`'s open lease to the write that found it at
    /// `now_ns` (the lease stays until [`Leases::release`], so jobs still running find
    /// it).
    pub fn take_for(&mut self, key_id: u64, now_ns: u64) -> Option<TakenLease> {
        let id = self.find(key_id)?;
        let l = self.table.get_mut(id).expect("found");
        l.set_state(id, LeaseState::Taken);
        Some(TakenLease { id, marks: l.marks, saved_ns: l.marking_ns(now_ns) })
    }

    /// Frees lease `id` once no job runs for it (a job that ends later frees it then).
    pub fn release(&mut self, id: LeaseId) {
        if self.table.get(id).is_some_and(|l| !l.running()) {
            self.table.remove(id);
        }
    }

    /// The open lease of `key_id`, which the predictor says ended unused.
    pub(super) fn open_lease_of(&self, key_id: u64) -> Option<LeaseId> {
        self.find(key_id)
    }

    /// The lease in `slot`, if it is open and older than its mark's longest life at
    /// `now_ns`.
    pub(super) fn timed_out(&self, slot: u32, now_ns: u64) -> Option<LeaseId> {
        let id = self.table.current(slot)?;
        let l = self.table.get(id).expect("current");
        (l.state == LeaseState::Open && now_ns >= l.opened_ns + self.mark_max_ns).then_some(id)
    }

    /// Rolls open lease `id` back at `now_ns`: its key, per host the placed mark to
    /// roll back with a detached job, and its marking round trip (the lease is freed,
    /// or is once its jobs still running end).
    pub(super) fn roll_back(&mut self, id: LeaseId, now_ns: u64) -> RolledBack {
        let l = self.table.get_mut(id).expect("rolling back a lease that is open");
        l.set_state(id, LeaseState::RolledBack);
        let marking_ns = l.marking_ns(now_ns);
        let mut rollbacks = [None; NODES_MAX];
        for (j, rollback) in rollbacks.iter_mut().enumerate() {
            if let LeaseMark::Placed { placed, prior } = l.marks[j] {
                l.set_mark(id, j as u8, LeaseMark::Settled);
                *rollback = Some(Rollback { host: j as u8, placed, prior });
            }
        }
        let key_id = l.key_id;
        self.release(id);
        RolledBack { key_id, rollbacks, marking_ns }
    }
}

#[cfg(test)]
mod tests {
    use super::super::slots::Handle;
    use super::*;

    fn word(state: SlotState, writer: u8, version: u64) -> SlotWord {
        SlotWord { state, writer, version }
    }

    fn opened(leases: &mut Leases, key_id: u64, now_ns: u64) -> (LeaseId, u64) {
        let mut hlc = Hlc::new(0, 0);
        hlc.floor_persisted(1 << 40);
        let mut stats = NodeStats::new(3);
        leases.open(key_id, Now { mono_ns: now_ns, wall_us: 1_000 }, &mut hlc, &mut stats).expect("room")
    }

    fn job(slot: u32) -> JobId {
        JobId::from_parts(slot, 1)
    }

    #[test]
    fn a_taken_lease_stays_until_its_jobs_end_and_rolls_back_a_late_mark() {
        let mut leases = Leases::new(2, LEASE_MARK_MAX_NS);
        let (id, version) = opened(&mut leases, 7, 0);
        assert_eq!(version, 1_000);
        leases.started(id, 1, job(0));
        leases.started(id, 2, job(1));
        let placed = word(SlotState::Pending, 0, version);
        let done = Finished::Done { placed, replaced: word(SlotState::Valid, 0, 5) };
        assert_eq!(leases.job_done(id, 1, Intent::Mark { version }, done, 40), None);
        let taken = leases.take_for(7, 50).expect("open");
        assert_eq!(taken.saved_ns, 50, "host 2's mark still runs: marking so far");
        assert_eq!(taken.marks[1], LeaseMark::Placed { placed, prior: SlotState::Valid });
        assert!(matches!(taken.marks[2], LeaseMark::Running { .. }));
        assert!(leases.take_for(7, 60).is_none(), "a taken lease is not found again");
        leases.release(id);
        assert!(leases.table.get(id).is_some(), "a job still runs for it");
        // The job on host 2 lands after the write took the lease: undone at once.
        let r = leases.job_done(id, 2, Intent::Mark { version }, done, 70).expect("a rollback");
        assert_eq!(r, Rollback { host: 2, placed, prior: SlotState::Valid });
        assert!(leases.table.get(id).is_none(), "freed with its last job");
    }

    #[test]
    fn a_far_network_keeps_lease_marks_for_some_far_round_trips() {
        assert_eq!(lease_mark_max_ns(0), LEASE_MARK_MAX_NS);
        assert_eq!(lease_mark_max_ns(1_000_000), LEASE_MARK_MAX_NS, "a LAN's round trips change nothing");
        assert_eq!(lease_mark_max_ns(180_000_000), 720_000_000, "four 90 ms-each-way round trips");
        let mut leases = Leases::new(1, lease_mark_max_ns(180_000_000));
        let (id, _) = opened(&mut leases, 9, 100);
        assert_eq!(leases.timed_out(id.slot(), 100 + LEASE_MARK_MAX_NS), None, "a far mark is still on its way");
        assert_eq!(leases.timed_out(id.slot(), 100 + 720_000_000), Some(id));
    }

    #[test]
    fn an_old_open_lease_times_out_and_rolls_back_only_what_it_placed() {
        let mut leases = Leases::new(1, LEASE_MARK_MAX_NS);
        let (id, version) = opened(&mut leases, 9, 100);
        let placed = word(SlotState::Pending, 0, version);
        leases.started(id, 0, job(0));
        leases.job_done(
            id,
            0,
            Intent::Mark { version },
            Finished::Done { placed, replaced: word(SlotState::Invalid, 1, 3) },
            130,
        );
        leases.job_done(id, 1, Intent::Mark { version }, Finished::Failed, 160);
        assert_eq!(leases.timed_out(id.slot(), 100 + LEASE_MARK_MAX_NS - 1), None);
        assert_eq!(leases.timed_out(id.slot(), 100 + LEASE_MARK_MAX_NS), Some(id));
        let RolledBack { key_id, rollbacks, marking_ns } = leases.roll_back(id, 100 + LEASE_MARK_MAX_NS);
        assert_eq!(key_id, 9);
        assert_eq!(marking_ns, 60, "opened at 100, its last job ended at 160");
        assert_eq!(rollbacks[0], Some(Rollback { host: 0, placed, prior: SlotState::Invalid }));
        assert!(rollbacks[1..].iter().all(Option::is_none));
        assert_eq!(leases.table.in_use(), 0);
        assert_eq!(leases.open_lease_of(9), None);
    }

    /// An open lease of key 3 with no mark out, and an id for it.
    fn open_lease_on_key_3() -> (LeaseId, Lease) {
        let lease = Lease {
            key_id: 3,
            opened_ns: 0,
            marked_ns: 0,
            state: LeaseState::Open,
            marks: [LeaseMark::None; NODES_MAX],
        };
        (LeaseId::from_parts(0, 1), lease)
    }

    #[test]
    #[should_panic(expected = "Settled => ")]
    fn a_mark_cannot_come_back_after_it_settled() {
        let (id, mut l) = open_lease_on_key_3();
        let placed = word(SlotState::Pending, 0, 9);
        l.set_mark(id, 1, LeaseMark::Running { job: job(0) });
        l.set_mark(id, 1, LeaseMark::Settled);
        l.set_mark(id, 1, LeaseMark::Placed { placed, prior: SlotState::Valid });
    }

    #[test]
    #[should_panic(expected = "Taken => RolledBack")]
    fn a_taken_lease_is_not_rolled_back() {
        let (id, mut l) = open_lease_on_key_3();
        l.set_state(id, LeaseState::Taken);
        l.set_state(id, LeaseState::RolledBack);
    }
}
