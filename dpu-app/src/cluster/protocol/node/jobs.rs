//! The node's dispatch for the directory jobs (`protocol/jobs.rs`): builds the jobs'
//! context from the node's fields, tells a job's owner how it ended, and answers what
//! a job asks of the writer.

use super::Node;
use crate::cluster::protocol::host_directory::HostDirectory;
use crate::cluster::protocol::jobs::{JobCx, JobDone, Jobs, Writes};
use crate::cluster::protocol::replicate::Writer;
use crate::cluster::protocol::slotjob::Intent;
use crate::cluster::protocol::slotjob::{Owner, Started};
use crate::cluster::protocol::slots::WriteId;
use crate::cluster::protocol::time::Now;
use crate::cluster::protocol::wr::WrId;
use crate::fabric::Fabric;

impl<F: Fabric> Node<F> {
    /// The jobs role and its context, from disjoint fields of the node.
    fn job_parts(&mut self) -> (&mut Jobs, JobCx<'_, F::Qp>, &Writer) {
        let cx = JobCx {
            me: self.me,
            links: &mut self.links,
            cas: &self.pools.cas,
            directory: HostDirectory::new(&self.region, self.directory_slots),
            hlc: &mut self.hlc,
            stats: &mut self.stats,
        };
        (&mut self.jobs, cx, &self.writer)
    }

    /// Starts `intent` on slot `slot` of host `host`'s directory for `owner` (see
    /// [`Jobs::start`]); a job that runs tells its owner through [`Node::on_job_done`].
    pub(in crate::cluster::protocol) fn start_job(
        &mut self,
        owner: Owner,
        host: u8,
        slot: u32,
        intent: Intent,
        guess: Option<u64>,
    ) -> Started {
        let (jobs, mut cx, _) = self.job_parts();
        jobs.start(&mut cx, owner, host, slot, intent, guess)
    }

    /// A CAS completion: the job takes its result; its end goes to the owner.
    pub(in crate::cluster::protocol) fn on_cas_completion(&mut self, wr_id: WrId, ok: bool, now: Now) {
        let (jobs, mut cx, writer) = self.job_parts();
        if let Some(done) = jobs.on_cas_result(&mut cx, wr_id, ok, now, writer) {
            self.on_job_done(done, now);
        }
    }

    /// Tells a job's owner how it ended (suspecting the host first if it must be).
    pub(in crate::cluster::protocol) fn on_job_done(&mut self, done: JobDone, now: Now) {
        let JobDone { owner, host, slot, intent, finished, suspect } = done;
        if suspect {
            self.suspect(host, now);
        }
        match owner {
            Owner::Write(id) => self.write_job_done(id, host, slot, intent, finished, now),
            Owner::Lease(id) => self.lease_job_done(id, host, slot, intent, finished, now),
            Owner::Detached => {}
        }
    }

    /// Revokes this node's whole host directory (at start, and on a peer's suspicion).
    pub(in crate::cluster::protocol) fn revoke_directory(&mut self) {
        HostDirectory::new(&self.region, self.directory_slots).revoke(self.me, &mut self.stats);
    }
}

impl Writes for Writer {
    fn is_deciding(&self, id: WriteId) -> bool {
        Writer::is_deciding(self, id)
    }

    fn before_deadline(&self, id: WriteId, now: Now) -> bool {
        Writer::before_deadline(self, id, now)
    }
}
