//! One queue pair's words and rings inside a mapped region.
//!
//! A queue pair is a submission ring (host produces descriptors, DPU consumes) and a
//! completion ring (DPU produces completions, host consumes), plus the words that let
//! each side sleep, and the DPU's `taken` index and fence word.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crate::config::{COMPLETION_BYTES, DESCRIPTOR_BYTES};
use crate::layout::qp;
use crate::region::Region;
use crate::ring::{RingError, RingMemory};

/// Why the DPU app fenced a queue pair off (the value of its fence word).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum FenceReason {
    /// Serving.
    None = 0,
    /// The host's submission tail moved backwards.
    TailBackwards = 1,
    /// The host's submission tail claims more entries than the ring holds.
    TailPastCapacity = 2,
    /// The host's completion head moved backwards or past the completion tail.
    CompletionHead = 3,
    /// A restarted DPU app found the queue pair's restart journal (the taken index)
    /// impossible: more entries past the head than the ring holds.
    Journal = 4,
}

impl FenceReason {
    /// Decodes a fence word.
    pub fn from_u32(v: u32) -> Option<Self> {
        match v {
            0 => Some(Self::None),
            1 => Some(Self::TailBackwards),
            2 => Some(Self::TailPastCapacity),
            3 => Some(Self::CompletionHead),
            4 => Some(Self::Journal),
            _ => None,
        }
    }

    /// For a submission-ring violation.
    pub fn for_submission(err: &RingError) -> Self {
        match err {
            RingError::Backwards { .. } => Self::TailBackwards,
            RingError::PastCapacity { .. } => Self::TailPastCapacity,
        }
    }

    /// Words for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Self::None => "serving",
            Self::TailBackwards => "submission tail moved backwards",
            Self::TailPastCapacity => "submission tail past ring capacity",
            Self::CompletionHead => "completion head moved backwards or past the tail",
            Self::Journal => "taken index past the submission head by more than the ring holds",
        }
    }
}

/// A handle on queue pair `qp` of a region.
#[derive(Clone, Debug)]
pub struct QueueWords {
    region: Arc<Region>,
    qp: u32,
    base: usize,
}

impl QueueWords {
    /// Queue pair `qp` of `region` (must be in range: a programmer error otherwise).
    pub fn new(region: Arc<Region>, qp: u32) -> Self {
        let base = region.layout().qp(qp);
        Self { region, qp, base }
    }

    /// The queue pair's index.
    pub fn index(&self) -> u32 {
        self.qp
    }

    /// The region.
    pub fn region(&self) -> &Arc<Region> {
        &self.region
    }

    fn word(&self, offset: usize) -> &AtomicU32 {
        self.region.u32_at(self.base + offset)
    }

    /// Host-written submission tail.
    pub fn sq_tail(&self) -> &AtomicU32 {
        self.word(qp::SQ_TAIL)
    }
    /// DPU-written submission head.
    pub fn sq_head(&self) -> &AtomicU32 {
        self.word(qp::SQ_HEAD)
    }
    /// DPU-written completion tail.
    pub fn cq_tail(&self) -> &AtomicU32 {
        self.word(qp::CQ_TAIL)
    }
    /// Host-written completion head.
    pub fn cq_head(&self) -> &AtomicU32 {
        self.word(qp::CQ_HEAD)
    }
    /// Futex word the host sleeps on; the DPU bumps it.
    pub fn cq_doorbell(&self) -> &AtomicU32 {
        self.word(qp::CQ_DOORBELL)
    }
    /// Set by the host before it sleeps.
    pub fn host_waiting(&self) -> &AtomicU32 {
        self.word(qp::HOST_WAITING)
    }
    /// DPU-written: descriptors taken into flight (restart journal).
    pub fn sq_taken(&self) -> &AtomicU32 {
        self.word(qp::SQ_TAKEN)
    }
    /// DPU-written fence reason.
    pub fn fence_reason(&self) -> &AtomicU32 {
        self.word(qp::FENCE_REASON)
    }
    /// DPU-written fence detail.
    pub fn fence_detail(&self) -> &AtomicU64 {
        self.region.u64_at(self.base + qp::FENCE_DETAIL)
    }

    /// The submission ring's memory.
    pub fn submissions(&self) -> Submissions {
        let layout = self.region.layout();
        let entries = layout.config.ring_entries;
        Submissions(Slots { words: self.clone(), first: layout.sq_entry(self.qp, 0), entries })
    }

    /// The completion ring's memory.
    pub fn completions(&self) -> Completions {
        let layout = self.region.layout();
        let entries = layout.config.ring_entries;
        Completions(Slots { words: self.clone(), first: layout.cq_entry(self.qp, 0), entries })
    }
}

/// One ring's slots: where the first is and how many there are, worked out once from
/// the layout (every slot access is on the data path). The region still checks each
/// access against the mapping.
#[derive(Clone, Debug)]
struct Slots {
    words: QueueWords,
    first: usize,
    entries: u32,
}

impl Slots {
    fn offset(&self, slot: u32, bytes: usize) -> usize {
        assert!(slot < self.entries, "slot {slot} of a ring of {}", self.entries);
        self.first + slot as usize * bytes
    }
}

/// A queue pair's submission ring in the region.
#[derive(Clone, Debug)]
pub struct Submissions(Slots);

impl RingMemory for Submissions {
    type Slot = [u8; DESCRIPTOR_BYTES];
    fn entries(&self) -> u32 {
        self.0.entries
    }
    fn load_tail(&self, order: Ordering) -> u32 {
        self.0.words.sq_tail().load(order)
    }
    fn store_tail(&self, value: u32, order: Ordering) {
        self.0.words.sq_tail().store(value, order)
    }
    fn load_head(&self, order: Ordering) -> u32 {
        self.0.words.sq_head().load(order)
    }
    fn store_head(&self, value: u32, order: Ordering) {
        self.0.words.sq_head().store(value, order)
    }
    fn write_slot(&self, slot: u32, bytes: &[u8; DESCRIPTOR_BYTES]) {
        self.0.words.region.write_bytes(self.0.offset(slot, DESCRIPTOR_BYTES), bytes)
    }
    fn read_slot(&self, slot: u32) -> [u8; DESCRIPTOR_BYTES] {
        let mut out = [0u8; DESCRIPTOR_BYTES];
        self.0.words.region.read_bytes(self.0.offset(slot, DESCRIPTOR_BYTES), &mut out);
        out
    }
}

/// A queue pair's completion ring in the region.
#[derive(Clone, Debug)]
pub struct Completions(Slots);

impl RingMemory for Completions {
    type Slot = [u8; COMPLETION_BYTES];
    fn entries(&self) -> u32 {
        self.0.entries
    }
    fn load_tail(&self, order: Ordering) -> u32 {
        self.0.words.cq_tail().load(order)
    }
    fn store_tail(&self, value: u32, order: Ordering) {
        self.0.words.cq_tail().store(value, order)
    }
    fn load_head(&self, order: Ordering) -> u32 {
        self.0.words.cq_head().load(order)
    }
    fn store_head(&self, value: u32, order: Ordering) {
        self.0.words.cq_head().store(value, order)
    }
    fn write_slot(&self, slot: u32, bytes: &[u8; COMPLETION_BYTES]) {
        self.0.words.region.write_bytes(self.0.offset(slot, COMPLETION_BYTES), bytes)
    }
    fn read_slot(&self, slot: u32) -> [u8; COMPLETION_BYTES] {
        let mut out = [0u8; COMPLETION_BYTES];
        self.0.words.region.read_bytes(self.0.offset(slot, COMPLETION_BYTES), &mut out);
        out
    }
}
