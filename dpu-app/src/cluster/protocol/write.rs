//! One replicated write in flight on its writer: where its fragments went, which
//! holders persisted them (phase 1), which persisted the decision (phase 2), the state
//! of its mark in every host's cache directory, and the times of each stage.
//!
//! ```text
//!   Replicating --(quorum of fragments persisted)--> Deciding --(m+1 decisions)--> Done
//!        |                                              |
//!        +--(quorum impossible or deadline)--> Aborted  +--(deadline)--> Undecided
//! ```
//! (`Done` also waits for every host's mark to be settled, and, after commit, the
//! baseline policy's invalidations.) A write's buffers stay with it until every work
//! request that carries them has completed.

use prescient_shim::directory::{SlotState, SlotWord};

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
    /// Decided; the baseline policy invalidates the directories now.
    Invalidating,
    /// Over: waiting only for its work requests to complete.
    Finished,
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
    /// A local failure before anything was sent (the detail says which stage).
    Failed,
    /// Refused for lack of room (logs, tables): retry.
    Overloaded,
}

/// The state of the write's mark in one host's directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    /// No mark wanted (policy), or not yet started.
    None,
    /// A CAS job is running (its slot in the job table).
    Running {
        /// Job slot.
        job: u32,
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

/// One write in flight.
#[derive(Debug)]
pub struct Write {
    /// Generation of this slot (bumped at every reuse; part of work-request ids).
    pub generation: u32,
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
    /// Nodes that persisted the decision.
    pub decided: u32,
    /// Nodes a notice went to and has not been answered.
    pub notified: u32,
    /// Where it stands.
    pub phase: Phase,
    /// How it ended (set once it has).
    pub end: Option<End>,
    /// Marks per host directory (indexed by node).
    pub marks: [Mark; NODES_MAX],
    /// Work requests carrying this write's buffers, not completed yet.
    pub wrs: u32,
    /// When it must be over.
    pub deadline_ns: u64,
    /// When each stage ended (ns, 0 = not yet), indexed by `WriteStage`.
    pub times: [u64; WriteStage::ALL.len()],
    /// The predictor lease this write found (its marks were upgraded from the lease's).
    pub lease: Option<u32>,
    /// When the write arrived from the host.
    pub arrived_ns: u64,
    /// Fragments (by index) waiting for log credit at their holder.
    pub waiting_credit: u32,
    /// Per host, what the lease's mark replaced (a mark upgraded from a lease rolls
    /// back to that, not to the lease's Pending word).
    pub lease_priors: [Option<SlotState>; NODES_MAX],
}

impl Write {
    /// Nodes holding a fragment of this write.
    pub fn holder_mask(&self) -> u32 {
        self.holders[..self.layout.fragments()].iter().fold(0, |m, &h| m | 1 << h)
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

    /// Records that `stage` ended at `now_ns` (the first time only).
    pub fn stamp_stage(&mut self, stage: WriteStage, now_ns: u64) {
        let t = &mut self.times[stage as usize];
        if *t == 0 {
            *t = now_ns.max(1);
        }
    }
}

/// A fixed table of writes in flight.
#[derive(Debug)]
pub struct WriteTable {
    slots: Vec<Option<Write>>,
    generations: Vec<u32>,
    free: Vec<u32>,
}

impl WriteTable {
    /// Room for `capacity` writes.
    pub fn new(capacity: u32) -> Self {
        Self {
            slots: (0..capacity).map(|_| None).collect(),
            generations: vec![0; capacity as usize],
            free: (0..capacity).rev().collect(),
        }
    }

    /// Slots in all.
    pub fn capacity(&self) -> u32 {
        self.slots.len() as u32
    }

    /// Free slots.
    pub fn available(&self) -> usize {
        self.free.len()
    }

    /// Writes in flight.
    pub fn in_flight(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Reserves a slot; the caller fills it with [`WriteTable::put`].
    pub fn reserve(&mut self) -> Option<(u32, u32)> {
        let slot = self.free.pop()?;
        let g = &mut self.generations[slot as usize];
        *g = g.wrapping_add(1) & 0xff_ffff;
        Some((slot, *g))
    }

    /// Gives back a reserved slot that was never filled.
    pub fn unreserve(&mut self, slot: u32) {
        debug_assert!(self.slots[slot as usize].is_none());
        self.free.push(slot);
    }

    /// Fills a reserved slot.
    pub fn put(&mut self, slot: u32, write: Write) {
        debug_assert!(self.slots[slot as usize].is_none());
        self.slots[slot as usize] = Some(write);
    }

    /// The write in `slot` if it is still generation `generation`.
    pub fn get_mut(&mut self, slot: u32, generation: u32) -> Option<&mut Write> {
        self.slots.get_mut(slot as usize)?.as_mut().filter(|w| w.generation == generation)
    }

    /// The write in `slot`, whatever its generation.
    pub fn slot_mut(&mut self, slot: u32) -> Option<&mut Write> {
        self.slots.get_mut(slot as usize)?.as_mut()
    }

    /// Removes the write in `slot`.
    pub fn remove(&mut self, slot: u32) -> Option<Write> {
        let w = self.slots.get_mut(slot as usize)?.take()?;
        self.free.push(slot);
        Some(w)
    }

    /// Every write in flight.
    pub fn iter(&self) -> impl Iterator<Item = &Write> + '_ {
        self.slots.iter().flatten()
    }

    /// Every write in flight.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Write> + '_ {
        self.slots.iter_mut().flatten()
    }

    /// Slots of the writes in flight.
    pub fn busy(&self) -> impl Iterator<Item = u32> + '_ {
        self.slots.iter().enumerate().filter(|(_, s)| s.is_some()).map(|(i, _)| i as u32)
    }
}
