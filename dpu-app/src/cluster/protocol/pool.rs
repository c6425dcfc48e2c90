//! Fixed pools of registered staging slots: the small buffers work requests carry
//! (entry headers, CAS results, acknowledgement words, READ targets). Sized once at
//! start-up from what each consumer may have outstanding; taking from an empty pool
//! is back-pressure, never an allocation.

use std::sync::Arc;

use crate::fabric::{Access, Fabric, FabricError, LocalBuf, Memory, MemoryRegion};

/// `slots` registered slots of `slot_bytes` each.
#[derive(Debug)]
pub struct Pool {
    mr: Arc<MemoryRegion>,
    slot_bytes: usize,
    free: Vec<u32>,
    slots: u32,
}

impl Pool {
    /// Registers `slots * slot_bytes` bytes of anonymous memory on `fabric` with
    /// `access`: [`Access::LOCAL_WRITE`] for slots the NIC fills (READ and atomic
    /// results, receives), [`Access::NONE`] for slots it only sends from (a peer never
    /// reaches a pool: no remote right).
    pub fn new<F: Fabric>(fabric: &F, slots: u32, slot_bytes: usize, access: Access) -> Result<Self, FabricError> {
        let slot_bytes = slot_bytes.next_multiple_of(8).max(8);
        let memory = Arc::new(Memory::anonymous(slots as usize * slot_bytes)?);
        let mr = fabric.register(memory, access)?;
        Ok(Self { mr, slot_bytes, free: (0..slots).rev().collect(), slots })
    }

    /// A free slot's index, or `None` when every slot is out.
    pub fn take(&mut self) -> Option<u32> {
        self.free.pop()
    }

    /// Gives slot `index` back.
    pub fn give(&mut self, index: u32) {
        debug_assert!(index < self.slots && !self.free.contains(&index), "slot {index} given back twice");
        self.free.push(index);
    }

    /// Free slots.
    pub fn available(&self) -> usize {
        self.free.len()
    }

    /// Slots in all.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Bytes per slot.
    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// Offset of slot `index` in the pool's memory.
    pub fn offset(&self, index: u32) -> usize {
        index as usize * self.slot_bytes
    }

    /// A work-request buffer over the first `len` bytes of slot `index`.
    pub fn buf(&self, index: u32, len: usize) -> LocalBuf {
        assert!(len <= self.slot_bytes, "{len} bytes do not fit a {}-byte slot", self.slot_bytes);
        self.mr.buf(self.offset(index), len).expect("slot inside the pool")
    }

    /// The pool's memory (to fill or read a slot).
    pub fn memory(&self) -> &Memory {
        self.mr.memory()
    }

    /// Writes `bytes` at the start of slot `index`.
    pub fn write(&self, index: u32, bytes: &[u8]) {
        assert!(bytes.len() <= self.slot_bytes);
        self.mr.memory().write(self.offset(index), bytes).expect("slot inside the pool");
    }

    /// Reads the first `out.len()` bytes of slot `index`.
    pub fn read(&self, index: u32, out: &mut [u8]) {
        assert!(out.len() <= self.slot_bytes);
        self.mr.memory().read(self.offset(index), out).expect("slot inside the pool");
    }

    /// The little-endian word at the start of slot `index` (a CAS or FETCH_ADD result).
    pub fn word(&self, index: u32) -> u64 {
        self.mr.memory().load_u64(self.offset(index)).expect("aligned slot inside the pool")
    }
}

/// The node's staging pools.
#[derive(Debug)]
pub struct Pools {
    /// Entry header + fragment header of each fragment in flight.
    pub header: Pool,
    /// CAS results, two per job.
    pub cas: Pool,
    /// Heartbeat READ targets, one per peer.
    pub control: Pool,
    /// A zero-length source and target (receives, acknowledgements).
    pub zero: Pool,
    /// GET set READ targets, `peers` per GET slot.
    pub sets: Pool,
    /// Outcome notices (entry header + records).
    pub notices: Pool,
    /// The sequencer's FETCH_ADD and claim CAS results (`sequencer::POOL_WORDS`).
    pub seq: Pool,
    /// Fate ring READ targets, a chunk per peer (`apply.rs`).
    pub fates: Pool,
}
