//! The node's dispatch for the leases (`protocol/lease.rs`): opens and rolls back the
//! marks the leases ask for as directory jobs, tells a lease how its jobs ended, and
//! tells the predictor's threshold tuner what each lease saved or cost.

use super::Node;
use crate::cluster::protocol::lease::{Rollback, RolledBack};
use crate::cluster::protocol::peer::Trust;
use crate::cluster::protocol::slotjob::{Finished, Intent, Owner, Started};
use crate::cluster::protocol::slots::LeaseId;
use crate::cluster::protocol::time::Now;
use crate::fabric::Fabric;

impl<F: Fabric> Node<F> {
    /// The predictor leased `key_id`: mark it Pending everywhere it can be reached.
    pub(in crate::cluster::protocol) fn open_lease(&mut self, key_id: u64, now: Now) {
        let Some((id, version)) = self.leases.open(key_id, now, &mut self.hlc, &mut self.stats) else { return };
        let intent = Intent::Mark { version };
        for j in 0..self.n as u8 {
            if j != self.me && !self.links.peer(j).is_some_and(|p| p.is_up() && p.trust() == Trust::Trusted) {
                continue;
            }
            let dir_slot = self.slot_for(j, key_id);
            match self.start_job(Owner::Lease(id), j, dir_slot, intent, None) {
                Started::Finished(f) => self.lease_job_done(id, j, dir_slot, intent, f, now),
                Started::Running(job) => self.leases.started(id, j, job),
            }
        }
    }

    /// A lease's directory job on slot `dir_slot` of host `j` ended.
    pub(in crate::cluster::protocol) fn lease_job_done(
        &mut self,
        id: LeaseId,
        j: u8,
        dir_slot: u32,
        intent: Intent,
        f: Finished,
        now: Now,
    ) {
        if let Some(r) = self.leases.job_done(id, j, intent, f, now.mono_ns) {
            self.start_rollback(r, dir_slot);
        }
    }

    /// The predictor says `key_id`'s lease ended unused: roll its marks back.
    pub(in crate::cluster::protocol) fn lease_expired(&mut self, key_id: u64, now: Now) {
        let Some(id) = self.leases.open_lease_of(key_id) else { return };
        self.roll_back_lease(id, now);
        self.stats.leases_rolled_back += 1;
    }

    /// Rolls back leases older than their marks' longest life
    /// ([`crate::cluster::protocol::lease::lease_mark_max_ns`]).
    pub(in crate::cluster::protocol) fn expire_leases(&mut self, now: Now) {
        for slot in 0..self.leases.capacity() {
            if let Some(id) = self.leases.timed_out(slot, now.mono_ns) {
                self.roll_back_lease(id, now);
                self.stats.leases_timed_out += 1;
            }
        }
    }

    /// Rolls lease `id` back; a lease that placed marks tells the tuner its cost:
    /// its marking round trip, and as much again for the rollback's CASes.
    fn roll_back_lease(&mut self, id: LeaseId, now: Now) {
        let RolledBack { key_id, rollbacks, marking_ns } = self.leases.roll_back(id, now.mono_ns);
        if marking_ns > 0 {
            if let Some(t) = self.predictor.as_mut().and_then(|p| p.tuner_mut()) {
                t.measured_false_positive(2 * marking_ns);
            }
        }
        for r in rollbacks.into_iter().flatten() {
            let dir_slot = self.slot_for(r.host, key_id);
            self.start_rollback(r, dir_slot);
        }
    }

    fn start_rollback(&mut self, r: Rollback, dir_slot: u32) {
        let intent = Intent::Rollback { placed: r.placed, prior: r.prior };
        self.start_job(Owner::Detached, r.host, dir_slot, intent, Some(r.placed.pack()));
    }
}
