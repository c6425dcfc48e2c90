//! The host's own record of the requests it submitted on one queue pair and has not
//! seen completed: the tag and op of each, by submission index.
//!
//! A completion entry names a run of submission indices (see [`crate::completion`]);
//! the host hands its caller the tag and op it recorded here, never bytes from the DPU
//! app. An entry is accepted only if every request it names is open; it closes them
//! all at once, so a DPU app that names a request twice, one never submitted, or one
//! from a ring's worth ago is refused (`ShimError::BadCompletion`), and cannot make the
//! host deliver a completion twice or to the wrong caller.
//!
//! One record per submission ring slot, allocated once when the queue pair is taken.
//! A slot is reused only by the request `ring_entries` later, which the queue pair
//! submits only once this one was delivered ([`Submitted::is_free`]: the DPU app
//! completes out of order, so fewer than `ring_entries` in flight does not mean the
//! next slot is free), so a closed record stays readable until its completion is
//! delivered.

use crate::completion::CompletionEntry;

#[derive(Clone, Copy, Debug, Default)]
struct Record {
    sq_index: u32,
    op: u8,
    /// Submitted and not closed by a completion entry.
    open: bool,
    /// Open, or closed and not delivered yet: the slot is taken.
    taken: bool,
    user_data: u64,
}

/// Why an entry was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NotOpen {
    /// The first submission index of the entry that is not open.
    pub sq_index: u32,
}

/// One record per submission ring slot.
#[derive(Debug)]
pub(crate) struct Submitted {
    records: Box<[Record]>,
}

impl Submitted {
    /// A table for a ring of `ring_entries` slots (a power of two).
    pub fn new(ring_entries: u32) -> Self {
        assert!(ring_entries.is_power_of_two(), "ring entries {ring_entries} not a power of two");
        Self { records: vec![Record::default(); ring_entries as usize].into_boxed_slice() }
    }

    fn slot(&self, sq_index: u32) -> usize {
        sq_index as usize & (self.records.len() - 1)
    }

    /// Whether the slot of `sq_index` holds no open request: the request a ring
    /// earlier was delivered. The DPU app completes out of order, so a slot can still
    /// be taken while fewer than `ring_entries` requests are in flight.
    pub fn is_free(&self, sq_index: u32) -> bool {
        !self.records[self.slot(sq_index)].taken
    }

    /// Records the request submitted at `sq_index`. Its slot must be free
    /// ([`Submitted::is_free`]; the queue pair checks before it submits).
    pub fn open(&mut self, sq_index: u32, user_data: u64, op: u8) {
        let slot = self.slot(sq_index);
        assert!(!self.records[slot].taken, "submission {sq_index} reuses the slot of an undelivered request");
        self.records[slot] = Record { sq_index, op, open: true, taken: true, user_data };
    }

    /// Closes every request `entry` names if all of them are open; otherwise changes
    /// nothing.
    pub fn close(&mut self, entry: &CompletionEntry) -> Result<(), NotOpen> {
        let indices = (0..u32::from(entry.count)).map(|i| entry.sq_index.wrapping_add(i));
        for sq_index in indices.clone() {
            let r = &self.records[self.slot(sq_index)];
            if !(r.open && r.sq_index == sq_index) {
                return Err(NotOpen { sq_index });
            }
        }
        for sq_index in indices {
            let slot = self.slot(sq_index);
            self.records[slot].open = false;
        }
        Ok(())
    }

    /// The tag and op recorded for `sq_index` (closed by [`Submitted::close`] and not
    /// delivered yet), as it is delivered: the slot is free from now on.
    pub fn deliver(&mut self, sq_index: u32) -> (u64, u8) {
        let slot = self.slot(sq_index);
        let r = &mut self.records[slot];
        debug_assert_eq!(r.sq_index, sq_index);
        r.taken = false;
        (r.user_data, r.op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::Status;

    fn run(sq_index: u32, count: u16) -> CompletionEntry {
        CompletionEntry { count, ..CompletionEntry::one(sq_index, Status::Ok, 0) }
    }

    #[test]
    fn an_entry_closes_open_requests_once() {
        let mut t = Submitted::new(4);
        for i in 6..9 {
            t.open(i, 100 + u64::from(i), 1);
        }
        assert_eq!(t.close(&run(6, 2)), Ok(()));
        assert_eq!(t.deliver(7), (107, 1));
        assert_eq!(t.close(&run(7, 1)), Err(NotOpen { sq_index: 7 }), "closed already");
        assert_eq!(t.close(&run(8, 2)), Err(NotOpen { sq_index: 9 }), "9 was never submitted");
        assert_eq!(t.close(&run(8, 1)), Ok(()), "a refused entry changed nothing");
    }

    #[test]
    fn a_slot_is_free_only_once_its_request_was_delivered() {
        // Four slots; requests 1..4 complete before request 0 (out of order).
        let mut t = Submitted::new(4);
        for i in 0..4u32 {
            t.open(i, u64::from(i), 1);
        }
        assert_eq!(t.close(&run(1, 3)), Ok(()));
        for i in 1..4u32 {
            t.deliver(i);
        }
        // Three delivered, one in flight: submission 4 would land on request 0's slot.
        assert!(!t.is_free(4) && t.is_free(5));
        assert_eq!(t.close(&run(0, 1)), Ok(()));
        assert!(!t.is_free(4), "closed but not delivered: its tag is still to be read");
        assert_eq!(t.deliver(0), (0, 1));
        assert!(t.is_free(4));
    }

    #[test]
    fn hostile_entries_change_nothing() {
        let mut t = Submitted::new(4);
        t.open(u32::MAX, 1, 0);
        t.open(0, 2, 0);
        // The slot of u32::MAX with another index, a run past what is open, and a run
        // longer than the ring that wraps onto open slots.
        for bad in [run(3, 1), run(u32::MAX - 4, 1), run(u32::MAX, 3), run(u32::MAX, 64)] {
            assert!(t.close(&bad).is_err(), "{bad:?}");
        }
        assert_eq!(t.close(&run(u32::MAX, 2)), Ok(()), "indices wrap");
        assert_eq!((t.deliver(u32::MAX).0, t.deliver(0).0), (1, 2));
    }
}
