//! The node's dispatch for the leases (`protocol/lease.rs`): opens and rolls back the
//! marks the leases ask for as directory jobs, and tells a lease how its jobs ended.

use super::Node;
use crate::cluster::protocol::lease::Rollback;
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
                Started::Finished(f) => self.lease_job_done(id, j, dir_slot, intent, f),
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
    ) {
        if let Some(r) = self.leases.job_done(id, j, intent, f) {
            self.start_rollback(r, dir_slot);
        }
    }

    /// The predictor says `key_id`'s lease ended unused: roll its marks back.
    pub(in crate::cluster::protocol) fn lease_expired(&mut self, key_id: u64, _now: Now) {
        let Some(id) = self.leases.open_lease_of(key_id) else { return };
        self.roll_back_lease(id);
        self.stats.leases_rolled_back += 1;
    }

    /// Rolls back leases older than [`crate::cluster::protocol::lease::LEASE_MARK_MAX_NS`].
    pub(in crate::cluster::protocol) fn expire_leases(&mut self, now: Now) {
        for slot in 0..self.leases.capacity() {
            if let Some(id) = self.leases.timed_out(slot, now.mono_ns) {
                self.roll_back_lease(id);
                self.stats.leases_timed_out += 1;
            }
        }
    }

    fn roll_back_lease(&mut self, id: LeaseId) {
        let (key_id, rollbacks) = self.leases.roll_back(id);
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
