//! Predictor leases as directory marks (DESIGN.md step 2): a key the predictor expects
//! to be written next is marked `Pending` in every host's directory before its PUT
//! arrives. A PUT that finds its key leased upgrades the lease's marks (it knows their
//! exact words, so each CAS takes in one try); a lease that ends unused - the
//! predictor's window passed, or [`LEASE_MARK_MAX_NS`] - is rolled back to what it
//! replaced.

use prescient_shim::directory;

use super::node::{Node, Now, Owner, Started};
use super::peer::Trust;
use super::slotjob::{Finished, Intent};
use super::slots::{Handle, LeaseId};
use super::write::Mark;
use crate::fabric::Fabric;
use crate::limits::NODES_MAX;

/// Longest a lease mark stays without its PUT, whatever the predictor's window.
pub const LEASE_MARK_MAX_NS: u64 = 20_000_000;

/// One lease's marks.
#[derive(Clone, Copy, Debug)]
pub struct LeaseMarks {
    /// Its slot.
    pub slot: u32,
    /// Its generation.
    pub generation: u32,
    /// The key id leased.
    pub key_id: u64,
    /// When it was opened.
    pub opened_ns: u64,
    /// The version its marks carry.
    pub version: u64,
    /// Per host.
    pub marks: [Mark; NODES_MAX],
    /// Taken by a write (its marks belong to the write now).
    pub taken: bool,
}

/// The leases with marks out.
#[derive(Debug)]
pub struct LeaseTable {
    slots: Vec<Option<LeaseMarks>>,
    generations: Vec<u32>,
    free: Vec<u32>,
}

impl LeaseTable {
    /// Room for `capacity` leases.
    pub fn new(capacity: u32) -> Self {
        Self {
            slots: (0..capacity).map(|_| None).collect(),
            generations: vec![0; capacity as usize],
            free: (0..capacity).rev().collect(),
        }
    }

    fn find(&self, key_id: u64) -> Option<u32> {
        self.slots.iter().position(|s| s.as_ref().is_some_and(|l| l.key_id == key_id && !l.taken)).map(|i| i as u32)
    }

    /// Hands the marks of `key_id`'s lease to the write that found it (the slot stays
    /// until [`LeaseTable::release`], so jobs still running find their lease).
    pub fn take_for(&mut self, key_id: u64) -> Option<LeaseMarks> {
        let slot = self.find(key_id)?;
        let l = self.slots[slot as usize].as_mut().expect("found");
        l.taken = true;
        Some(*l)
    }

    /// Frees `slot` once no job runs for it.
    pub fn release(&mut self, slot: u32) {
        let running = self.slots[slot as usize]
            .as_ref()
            .is_some_and(|l| l.marks.iter().any(|m| matches!(m, Mark::Running { .. })));
        if !running && self.slots[slot as usize].take().is_some() {
            self.free.push(slot);
        }
    }

    /// Leases with marks out.
    pub fn in_use(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

impl<F: Fabric> Node<F> {
    /// The predictor leased `key_id`: mark it Pending everywhere it can be reached.
    pub(super) fn open_lease(&mut self, key_id: u64, now: Now) {
        if self.leases.find(key_id).is_some() {
            return;
        }
        let Some(slot) = self.leases.free.pop() else {
            self.stats.leases_dropped += 1;
            return;
        };
        let version = match self.hlc.next(now.wall_us) {
            Ok(s) => s.raw() >> 8,
            Err(_) => {
                self.leases.free.push(slot);
                return;
            }
        };
        let g = &mut self.leases.generations[slot as usize];
        *g = g.wrapping_add(1) & 0xff_ffff;
        let generation = *g;
        self.leases.slots[slot as usize] = Some(LeaseMarks {
            slot,
            generation,
            key_id,
            opened_ns: now.mono_ns,
            version,
            marks: [Mark::None; NODES_MAX],
            taken: false,
        });
        self.stats.leases_opened += 1;
        for j in 0..self.n as u8 {
            if j != self.me && !self.links.peer(j).is_some_and(|p| p.is_up() && p.trust() == Trust::Trusted) {
                continue;
            }
            let dir_slot = self.slot_for(j, key_id);
            let owner = Owner::Lease(LeaseId::from_parts(slot, generation));
            match self.start_job(owner, j, dir_slot, Intent::Mark { version }, None) {
                Started::Finished(f) => {
                    self.lease_job_done(slot, generation, j, dir_slot, Intent::Mark { version }, f, now)
                }
                Started::Running(job) => self.set_lease_mark(slot, j, Mark::Running { job: job.slot() }),
            }
        }
    }

    fn set_lease_mark(&mut self, slot: u32, j: u8, mark: Mark) {
        if let Some(l) = self.leases.slots[slot as usize].as_mut() {
            l.marks[j as usize] = mark;
        }
    }

    /// A lease's directory job ended.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn lease_job_done(
        &mut self,
        slot: u32,
        generation: u32,
        j: u8,
        dir_slot: u32,
        intent: Intent,
        f: Finished,
        _now: Now,
    ) {
        let Some(l) =
            self.leases.slots.get_mut(slot as usize).and_then(Option::as_mut).filter(|l| l.generation == generation)
        else {
            return;
        };
        if !matches!(intent, Intent::Mark { .. }) {
            return;
        }
        match f {
            Finished::Done { placed, replaced } => {
                let prior = directory::prior_of(replaced);
                if l.taken {
                    // The write came while this CAS flew and marked on its own: undo ours
                    // (the rollback takes only if the slot still holds our word).
                    l.marks[j as usize] = Mark::Settled;
                    self.start_job(
                        Owner::Detached,
                        j,
                        dir_slot,
                        Intent::Rollback { placed, prior },
                        Some(placed.pack()),
                    );
                    self.leases.release(slot);
                } else {
                    l.marks[j as usize] = Mark::Placed { placed, prior };
                }
            }
            Finished::NotNeeded { .. } | Finished::Failed | Finished::Contended { .. } => {
                l.marks[j as usize] = Mark::None;
                if l.taken {
                    self.leases.release(slot);
                }
            }
        }
    }

    /// The predictor says `key_id`'s lease ended unused: roll its marks back.
    pub(super) fn lease_expired(&mut self, key_id: u64, _now: Now) {
        let Some(slot) = self.leases.find(key_id) else { return };
        self.roll_back_lease(slot);
        self.stats.leases_rolled_back += 1;
    }

    fn roll_back_lease(&mut self, slot: u32) {
        let Some(l) = self.leases.slots[slot as usize].as_mut() else { return };
        l.taken = true;
        let marks = l.marks;
        let key_id = l.key_id;
        for (j, mark) in marks.iter().enumerate() {
            if let Mark::Placed { placed, prior } = *mark {
                let j = j as u8;
                let dir_slot = self.slot_for(j, key_id);
                self.start_job(Owner::Detached, j, dir_slot, Intent::Rollback { placed, prior }, Some(placed.pack()));
                if let Some(l) = self.leases.slots[slot as usize].as_mut() {
                    l.marks[j as usize] = Mark::Settled;
                }
            }
        }
        self.leases.release(slot);
    }

    /// Rolls back leases older than [`LEASE_MARK_MAX_NS`].
    pub(super) fn expire_leases(&mut self, now: Now) {
        for slot in 0..self.leases.slots.len() as u32 {
            let old = self.leases.slots[slot as usize]
                .as_ref()
                .is_some_and(|l| !l.taken && now.mono_ns >= l.opened_ns + LEASE_MARK_MAX_NS);
            if old {
                self.roll_back_lease(slot);
                self.stats.leases_timed_out += 1;
            }
        }
    }
}
