//! The buffers of a queue pair's GETs, from submission until the host takes the value.
//!
//! A GET's buffer comes back to the host on completion (the DPU app leaves it `Host`),
//! so the host must remember which buffer each GET named: one entry per submission
//! ring slot, keyed by the free-running submission index (`Completion::sq_index`),
//! allocated once when the queue pair is taken. The table is only bookkeeping; the
//! queue pair moves the ownership words.
//!
//! Invariants:
//! - An entry is handed out only after a completion with its exact submission index
//!   was seen, and only once.
//! - An entry whose completion was not seen is never handed out nor dropped: the DPU
//!   app may still be writing its buffer. A new GET that would reuse its slot is refused.
//! - A completion naming a submission index with no GET recorded changes nothing.

/// A buffer named by a GET.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GetBuffer {
    /// Arena index.
    pub index: u32,
    /// Generation the host took it at.
    pub generation: u32,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    sq_index: u32,
    buffer: GetBuffer,
    completed: bool,
}

/// One entry per submission ring slot.
#[derive(Debug)]
pub(crate) struct GetTable {
    entries: Box<[Option<Entry>]>,
}

impl GetTable {
    /// A table for a ring of `ring_entries` slots (a power of two).
    pub fn new(ring_entries: u32) -> Self {
        assert!(ring_entries.is_power_of_two(), "ring entries {ring_entries} not a power of two");
        Self { entries: vec![None; ring_entries as usize].into_boxed_slice() }
    }

    fn slot(&self, sq_index: u32) -> usize {
        sq_index as usize & (self.entries.len() - 1)
    }

    /// Whether a GET submitted at `sq_index` can be recorded: its slot is empty or
    /// holds a GET whose completion was seen.
    pub fn can_record(&self, sq_index: u32) -> bool {
        self.entries[self.slot(sq_index)].is_none_or(|e| e.completed)
    }

    /// Records the GET submitted at `sq_index` (the caller checked
    /// [`GetTable::can_record`]). Returns the buffer of a completed GET whose value the
    /// host never took and whose slot this one reuses, for the caller to free.
    pub fn record(&mut self, sq_index: u32, buffer: GetBuffer) -> Option<GetBuffer> {
        let slot = self.slot(sq_index);
        let old = self.entries[slot].replace(Entry { sq_index, buffer, completed: false });
        debug_assert!(old.is_none_or(|e| e.completed), "can_record was checked");
        old.map(|e| e.buffer)
    }

    /// Notes a completion for `sq_index`; nothing happens if no GET was recorded
    /// there.
    pub fn complete(&mut self, sq_index: u32) {
        let slot = self.slot(sq_index);
        if let Some(e) = &mut self.entries[slot] {
            if e.sq_index == sq_index {
                e.completed = true;
            }
        }
    }

    /// Hands out the buffer of the GET submitted at `sq_index`, if its completion was
    /// seen and it was not taken already.
    pub fn take(&mut self, sq_index: u32) -> Option<GetBuffer> {
        let slot = self.slot(sq_index);
        match self.entries[slot] {
            Some(e) if e.sq_index == sq_index && e.completed => self.entries[slot].take().map(|e| e.buffer),
            _ => None,
        }
    }

    /// Removes and returns every completed GET's buffer (the queue pair is closing).
    pub fn drain_completed(&mut self) -> impl Iterator<Item = GetBuffer> + '_ {
        self.entries.iter_mut().filter_map(|e| e.take_if(|e| e.completed)).map(|e| e.buffer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: GetBuffer = GetBuffer { index: 1, generation: 7 };
    const B: GetBuffer = GetBuffer { index: 2, generation: 9 };

    #[test]
    fn a_buffer_is_handed_out_once_and_only_after_its_completion() {
        let mut t = GetTable::new(4);
        assert_eq!(t.record(5, A), None);
        assert_eq!(t.take(5), None, "not completed yet");
        t.complete(9); // same slot, another submission index: not ours
        assert_eq!(t.take(5), None);
        t.complete(5);
        assert_eq!(t.take(9), None, "the slot's other index");
        assert_eq!(t.take(5), Some(A));
        assert_eq!(t.take(5), None, "taken once");
    }

    #[test]
    fn a_slot_is_reused_only_after_its_completion_and_frees_the_abandoned_buffer() {
        let mut t = GetTable::new(4);
        t.record(1, A);
        assert!(!t.can_record(5), "the GET at 1 may still be in the DPU app");
        assert!(t.can_record(2));
        t.complete(1);
        assert!(t.can_record(5));
        assert_eq!(t.record(5, B), Some(A), "the host never took A: the caller frees it");
        t.complete(5);
        assert_eq!(t.take(5), Some(B));
    }

    #[test]
    fn closing_returns_only_completed_buffers() {
        let mut t = GetTable::new(4);
        t.record(0, A);
        t.record(1, B);
        t.complete(1);
        assert_eq!(t.drain_completed().collect::<Vec<_>>(), vec![B]);
        assert!(!t.can_record(4), "A is still in the DPU app");
        assert_eq!(t.drain_completed().count(), 0);
    }

    #[test]
    fn hostile_completion_indices_change_nothing() {
        let mut t = GetTable::new(4);
        for i in [0, 3, u32::MAX, 0x8000_0000] {
            t.complete(i);
            assert_eq!(t.take(i), None);
        }
        t.record(u32::MAX, A);
        t.complete(u32::MAX);
        assert_eq!(t.take(u32::MAX), Some(A), "indices wrap");
    }
}
