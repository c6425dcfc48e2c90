//! The generation-slot table every role keeps its in-flight work in (writes, GETs,
//! repairs, leases, directory jobs, notices): a fixed number of slots allocated once,
//! a free list, and a generation per slot, bumped at every reservation, so a handle
//! to a slot that has since been reused finds nothing instead of someone else's entry.
//!
//! Handles are typed ([`WriteId`], [`GetId`], ...): a GET's handle cannot be passed
//! where a write's is expected, and `(slot, generation)` never travels as two loose
//! integers. A handle fits a work-request id ([`super::wr`]): slot and generation are
//! each at most [`crate::limits::WR_INDEX_MAX`].

use std::marker::PhantomData;

use crate::limits::WR_INDEX_MAX;

/// A typed handle to an entry of a [`SlotTable`]: the slot and the generation it was
/// reserved at.
pub trait Handle: Copy + Eq + std::fmt::Debug {
    /// The handle of `slot` at `generation` (from a work-request id, say).
    fn from_parts(slot: u32, generation: u32) -> Self;
    /// Its slot.
    fn slot(self) -> u32;
    /// Its generation.
    fn generation(self) -> u32;
}

macro_rules! handles {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub struct $name {
            slot: u32,
            generation: u32,
        }

        impl Handle for $name {
            fn from_parts(slot: u32, generation: u32) -> Self {
                Self { slot, generation }
            }
            fn slot(self) -> u32 {
                self.slot
            }
            fn generation(self) -> u32 {
                self.generation
            }
        }
    )*};
}

handles! {
    /// A write this node is replicating.
    WriteId;
    /// A GET this node is serving.
    GetId;
    /// A repair of one key's fragments.
    RepairId;
    /// A lease: this node's marks in the directories for a predicted key.
    LeaseId;
    /// A directory CAS job.
    JobId;
    /// An outcome notice in flight to a holder.
    NoticeId;
}

/// Fixed-capacity storage of entries addressed by generation-checked handles.
pub struct SlotTable<T, H: Handle> {
    entries: Vec<Option<T>>,
    generations: Vec<u32>,
    /// Free slots; the next reserved is the last pushed (the most recently freed, warm
    /// in cache).
    free: Vec<u32>,
    handle: PhantomData<H>,
}

impl<T: std::fmt::Debug, H: Handle> std::fmt::Debug for SlotTable<T, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotTable").field("capacity", &self.capacity()).field("in_use", &self.in_use()).finish()
    }
}

impl<T, H: Handle> SlotTable<T, H> {
    /// Room for `capacity` entries, allocated now (at most [`WR_INDEX_MAX`] + 1).
    pub fn new(capacity: u32) -> Self {
        assert!(capacity <= WR_INDEX_MAX + 1, "a slot table of {capacity} slots does not fit a work-request id");
        Self {
            entries: (0..capacity).map(|_| None).collect(),
            generations: vec![0; capacity as usize],
            free: (0..capacity).rev().collect(),
            handle: PhantomData,
        }
    }

    /// Slots in all.
    pub fn capacity(&self) -> u32 {
        self.entries.len() as u32
    }

    /// Free slots.
    pub fn available(&self) -> usize {
        self.free.len()
    }

    /// Slots reserved or filled.
    pub fn in_use(&self) -> usize {
        self.entries.len() - self.free.len()
    }

    /// Reserves a slot under a new generation; fill it with [`SlotTable::put`] or give
    /// it back with [`SlotTable::unreserve`]. `None` when every slot is in use.
    pub fn reserve(&mut self) -> Option<H> {
        let slot = self.free.pop()?;
        let g = &mut self.generations[slot as usize];
        *g = g.wrapping_add(1) & WR_INDEX_MAX;
        Some(H::from_parts(slot, *g))
    }

    /// Gives back a reserved slot that was never filled.
    pub fn unreserve(&mut self, id: H) {
        assert!(self.is_current(id) && self.entries[id.slot() as usize].is_none(), "unreserving {id:?}, not reserved");
        self.free.push(id.slot());
    }

    /// Fills the slot `id` reserved.
    pub fn put(&mut self, id: H, entry: T) {
        assert!(self.is_current(id), "filling {id:?}, whose slot was given back");
        let e = &mut self.entries[id.slot() as usize];
        assert!(e.is_none(), "filling {id:?} twice");
        *e = Some(entry);
    }

    /// Reserves a slot and fills it; gives the entry back when every slot is in use.
    pub fn insert(&mut self, entry: T) -> Result<H, T> {
        match self.reserve() {
            Some(id) => {
                self.put(id, entry);
                Ok(id)
            }
            None => Err(entry),
        }
    }

    fn is_current(&self, id: H) -> bool {
        self.generations.get(id.slot() as usize) == Some(&id.generation())
    }

    /// The entry `id` names, if its slot still holds that generation.
    pub fn get(&self, id: H) -> Option<&T> {
        if !self.is_current(id) {
            return None;
        }
        self.entries[id.slot() as usize].as_ref()
    }

    /// The entry `id` names, if its slot still holds that generation.
    pub fn get_mut(&mut self, id: H) -> Option<&mut T> {
        if !self.is_current(id) {
            return None;
        }
        self.entries[id.slot() as usize].as_mut()
    }

    /// The handle of what `slot` holds now, if anything (for owners that carry only
    /// the slot, as a fragment's work-request id does).
    pub fn current(&self, slot: u32) -> Option<H> {
        let s = slot as usize;
        self.entries.get(s)?.as_ref()?;
        Some(H::from_parts(slot, self.generations[s]))
    }

    /// Removes and returns the entry `id` names; its slot is free again.
    pub fn remove(&mut self, id: H) -> Option<T> {
        if !self.is_current(id) {
            return None;
        }
        let entry = self.entries[id.slot() as usize].take()?;
        self.free.push(id.slot());
        Some(entry)
    }

    /// Every entry, with its handle.
    pub fn iter(&self) -> impl Iterator<Item = (H, &T)> + '_ {
        let generations = &self.generations;
        self.entries
            .iter()
            .enumerate()
            .filter_map(move |(i, e)| e.as_ref().map(|e| (H::from_parts(i as u32, generations[i]), e)))
    }

    /// Every entry, with its handle.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (H, &mut T)> + '_ {
        let generations = &self.generations;
        self.entries
            .iter_mut()
            .enumerate()
            .filter_map(move |(i, e)| e.as_mut().map(|e| (H::from_parts(i as u32, generations[i]), e)))
    }

    /// The handles of every entry (collect them to change the table while walking).
    pub fn handles(&self) -> impl Iterator<Item = H> + '_ {
        self.iter().map(|(h, _)| h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_handle_finds_nothing_after_its_slot_is_reused() {
        let mut t: SlotTable<&str, WriteId> = SlotTable::new(1);
        let a = t.insert("a").unwrap();
        assert_eq!(t.insert("b"), Err("b"), "full");
        assert_eq!(t.remove(a), Some("a"));
        let b = t.insert("b").unwrap();
        assert_eq!(a.slot(), b.slot());
        assert_ne!(a, b);
        assert_eq!(t.get(a), None);
        assert_eq!(t.remove(a), None);
        assert_eq!(t.get(b), Some(&"b"));
        assert_eq!(t.current(b.slot()), Some(b));
    }

    #[test]
    fn reserve_put_unreserve_and_counts() {
        let mut t: SlotTable<u32, GetId> = SlotTable::new(3);
        let a = t.reserve().unwrap();
        let b = t.reserve().unwrap();
        assert_eq!((t.in_use(), t.available()), (2, 1));
        assert_eq!(t.get(a), None, "reserved, not filled");
        assert_eq!(t.current(a.slot()), None);
        t.put(a, 7);
        t.unreserve(b);
        assert_eq!((t.in_use(), t.available()), (1, 2));
        assert_eq!(t.iter().collect::<Vec<_>>(), vec![(a, &7)]);
        for (_, v) in t.iter_mut() {
            *v += 1;
        }
        assert_eq!(t.handles().collect::<Vec<_>>(), vec![a]);
        assert_eq!(t.get_mut(a).copied(), Some(8));
    }

    #[test]
    fn generations_wrap_within_a_work_request_index() {
        let mut t: SlotTable<(), RepairId> = SlotTable::new(1);
        for _ in 0..(1 << 12) {
            let id = t.insert(()).unwrap();
            assert!(id.generation() <= WR_INDEX_MAX);
            t.remove(id).unwrap();
        }
        t.generations[0] = WR_INDEX_MAX;
        let id = t.insert(()).unwrap();
        assert_eq!(id.generation(), 0);
    }

    #[test]
    #[should_panic(expected = "twice")]
    fn filling_a_slot_twice_is_a_programmer_error() {
        let mut t: SlotTable<u8, JobId> = SlotTable::new(2);
        let a = t.reserve().unwrap();
        t.put(a, 1);
        t.put(a, 2);
    }
}
