//! The in-flight table: owns every buffer posted to the NIC until its completion.
//!
//! Slots are allocated at start-up (the queue depth); a posted request takes a slot and
//! the NIC is given the slot's token as its wr_id. The completion's token finds the slot,
//! which gives back the caller's wr_id, the opcode and the buffer. Tokens carry a
//! 16-bit generation so a stale or forged token from the NIC never matches a reused slot;
//! the top 16 bits of a token are zero, free for a backend to tag (verbs puts the queue
//! pair's table number there, since its completions do not name the queue pair).

use super::region::LocalBuf;
use super::work::WcOpcode;

/// One posted request.
#[derive(Debug)]
pub struct Entry {
    /// Caller's wr_id.
    pub wr_id: u64,
    /// Opcode to report (also for flushed requests).
    pub opcode: WcOpcode,
    /// The owned buffer.
    pub buf: LocalBuf,
}

#[derive(Debug)]
struct Slot {
    generation: u16,
    entry: Option<Entry>,
}

/// Fixed-capacity table of posted requests.
#[derive(Debug)]
pub struct InFlight {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

impl InFlight {
    /// A table of `depth` slots, all allocated now.
    pub fn new(depth: usize) -> Self {
        Self {
            slots: (0..depth).map(|_| Slot { generation: 0, entry: None }).collect(),
            free: (0..depth as u32).rev().collect(),
        }
    }

    /// Slots in use.
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// True when nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.free.len() == self.slots.len()
    }

    /// Capacity.
    pub fn depth(&self) -> usize {
        self.slots.len()
    }

    /// Takes ownership of `entry`; returns the token to give the NIC, or the entry back
    /// when the table is full.
    pub fn insert(&mut self, entry: Entry) -> Result<u64, Entry> {
        let Some(index) = self.free.pop() else {
            return Err(entry);
        };
        let slot = &mut self.slots[index as usize];
        debug_assert!(slot.entry.is_none());
        slot.generation = slot.generation.wrapping_add(1);
        slot.entry = Some(entry);
        Ok((u64::from(slot.generation) << 32) | u64::from(index))
    }

    /// Releases the entry of `token`; `None` when the token matches no posted request.
    pub fn remove(&mut self, token: u64) -> Option<Entry> {
        if token >> 48 != 0 {
            return None;
        }
        let index = (token & 0xFFFF_FFFF) as usize;
        let generation = (token >> 32) as u16;
        let slot = self.slots.get_mut(index)?;
        if slot.generation != generation {
            return None;
        }
        let entry = slot.entry.take()?;
        self.free.push(index as u32);
        Some(entry)
    }

    /// The entry of `token`, left in place.
    pub fn get(&self, token: u64) -> Option<&Entry> {
        if token >> 48 != 0 {
            return None;
        }
        let slot = self.slots.get((token & 0xFFFF_FFFF) as usize)?;
        if slot.generation != (token >> 32) as u16 {
            return None;
        }
        slot.entry.as_ref()
    }

    /// Drains every entry (a reset of the queue pair hands all buffers back).
    pub fn drain(&mut self, out: &mut Vec<Entry>) {
        for (index, slot) in self.slots.iter_mut().enumerate() {
            if let Some(e) = slot.entry.take() {
                out.push(e);
                self.free.push(index as u32);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::{Access, Memory, MemoryRegion};
    use std::sync::Arc;

    fn buf() -> LocalBuf {
        let mr = Arc::new(MemoryRegion::new(
            Arc::new(Memory::anonymous(8).unwrap()),
            Access::LOCAL_WRITE,
            (1, 1),
            0,
            Box::new(()),
        ));
        mr.buf(0, 8).unwrap()
    }

    #[test]
    fn tokens_are_single_use_and_table_is_bounded() {
        let mut t = InFlight::new(2);
        let a = t.insert(Entry { wr_id: 7, opcode: WcOpcode::Write, buf: buf() }).unwrap();
        let b = t.insert(Entry { wr_id: 8, opcode: WcOpcode::Read, buf: buf() }).unwrap();
        assert!(t.insert(Entry { wr_id: 9, opcode: WcOpcode::Read, buf: buf() }).is_err());
        assert_eq!(t.remove(a).unwrap().wr_id, 7);
        assert!(t.remove(a).is_none(), "a token completes once");
        let c = t.insert(Entry { wr_id: 10, opcode: WcOpcode::Send, buf: buf() }).unwrap();
        assert_ne!(a, c, "a reused slot gets a new generation");
        assert!(t.remove(a).is_none());
        assert!(t.remove(u64::MAX).is_none());
        let mut out = Vec::new();
        t.drain(&mut out);
        assert_eq!(out.len(), 2);
        assert!(t.is_empty());
        let _ = b;
    }
}
