//! The single-producer single-consumer ring protocol, shared by both rings of a queue
//! pair and by both sides.
//!
//! The ring is split the io-uring way: [`RingMemory`] owns the shared words and slots;
//! [`Producer`] and [`Consumer`] keep local copies of both indices, read their own
//! index plainly, the peer's with Acquire, and publish with Release once per batch.
//! Indices are free-running `u32`s; a slot is `index % entries`.
//!
//! The peer is untrusted. A consumer refuses a tail that moved backwards or claims
//! more entries than the ring holds; a producer refuses a head that moved backwards
//! or past its tail. Either is a [`RingError`] for the caller to fence the peer off,
//! never an out-of-bounds access.
//!
//! The protocol is written once against [`RingMemory`], so the same code runs over a
//! mapped region in production and over loom's checked atomics in the model tests at
//! the bottom of this file (`RUSTFLAGS="--cfg loom"`, see `ci/loom.sh`).

use std::sync::atomic::Ordering;

/// The shared part of one ring: two indices and `entries` slots.
pub trait RingMemory {
    /// One slot's bytes.
    type Slot: Copy;
    /// Slots in the ring (a power of two).
    fn entries(&self) -> u32;
    /// Loads the producer's index.
    fn load_tail(&self, order: Ordering) -> u32;
    /// Stores the producer's index.
    fn store_tail(&self, value: u32, order: Ordering);
    /// Loads the consumer's index.
    fn load_head(&self, order: Ordering) -> u32;
    /// Stores the consumer's index.
    fn store_head(&self, value: u32, order: Ordering);
    /// Writes slot `slot` (< entries).
    fn write_slot(&self, slot: u32, bytes: &Self::Slot);
    /// Copies slot `slot` (< entries) out.
    fn read_slot(&self, slot: u32) -> Self::Slot;
}

/// The peer broke the ring protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RingError {
    /// The peer's index went backwards.
    #[error("peer index moved backwards from {from} to {to}")]
    Backwards {
        /// Last value seen.
        from: u32,
        /// Value now.
        to: u32,
    },
    /// The peer's index claims more entries than the ring holds, or passed ours.
    #[error("peer index {index} is past capacity (our index {ours}, {entries} entries)")]
    PastCapacity {
        /// The peer's index.
        index: u32,
        /// Our index.
        ours: u32,
        /// Ring size.
        entries: u32,
    },
}

impl RingError {
    /// A stable code for the fence word in shared memory.
    pub fn code(&self) -> u32 {
        match self {
            Self::Backwards { .. } => 1,
            Self::PastCapacity { .. } => 2,
        }
    }

    /// The offending index.
    pub fn index(&self) -> u32 {
        match *self {
            Self::Backwards { to, .. } => to,
            Self::PastCapacity { index, .. } => index,
        }
    }
}

/// The producing end of a ring.
#[derive(Debug)]
pub struct Producer<M> {
    mem: M,
    tail: u32,
    head: u32,
}

impl<M: RingMemory> Producer<M> {
    /// Takes over the producing end where the shared indices stand (a restarted
    /// producer: the shared tail is the only copy of ours left). Both are read once,
    /// here; see [`Producer::resume`] for a head that makes no sense.
    pub fn new(mem: M) -> Self {
        // Our own index as we last published it (the peer may have scribbled it: then
        // the peer's ring is garbage, which only the peer sees).
        let tail = mem.load_tail(Ordering::Relaxed);
        Self::resume(mem, tail)
    }

    /// Takes over the producing end at our own `tail` (kept privately across the
    /// peer's restart) and publishes it. The peer's head is read once: if it is not
    /// within a ring's worth behind `tail` it is taken as caught up, so `free` never
    /// exceeds the ring; a peer that then moves it anywhere but forward within what we
    /// pushed is refused by [`Producer::refresh`].
    pub fn resume(mem: M, tail: u32) -> Self {
        mem.store_tail(tail, Ordering::Release);
        // Acquire: slots the consumer released before publishing this head are free.
        let head = mem.load_head(Ordering::Acquire);
        let head = if tail.wrapping_sub(head) > mem.entries() { tail } else { head };
        Self { mem, tail, head }
    }

    /// The shared memory.
    pub fn memory(&self) -> &M {
        &self.mem
    }

    /// Our (possibly unpublished) index.
    pub fn tail(&self) -> u32 {
        self.tail
    }

    /// Entries pushed and not yet released by the consumer, as last seen.
    pub fn in_flight(&self) -> u32 {
        self.tail.wrapping_sub(self.head)
    }

    /// Rereads the consumer's index and returns the free slots.
    pub fn refresh(&mut self) -> Result<u32, RingError> {
        // Acquire: pairs with the consumer's Release in `Consumer::release`, so the
        // slots it freed are no longer read when we overwrite them.
        let head = self.mem.load_head(Ordering::Acquire);
        let moved = head.wrapping_sub(self.head);
        if moved > self.in_flight() {
            return Err(if (moved as i32) < 0 {
                RingError::Backwards { from: self.head, to: head }
            } else {
                RingError::PastCapacity { index: head, ours: self.tail, entries: self.mem.entries() }
            });
        }
        self.head = head;
        Ok(self.free())
    }

    /// Free slots as last seen (no shared read).
    pub fn free(&self) -> u32 {
        self.mem.entries() - self.in_flight()
    }

    /// Writes `bytes` into the next slot without publishing it. Returns false when the
    /// ring is full as last seen (call [`Producer::refresh`]).
    pub fn push(&mut self, bytes: &M::Slot) -> bool {
        if self.free() == 0 {
            return false;
        }
        self.mem.write_slot(self.tail & (self.mem.entries() - 1), bytes);
        self.tail = self.tail.wrapping_add(1);
        true
    }

    /// Makes every pushed slot visible to the consumer.
    pub fn publish(&mut self) {
        // Release: orders the slot writes in `push` before the new tail; pairs with the
        // consumer's Acquire in `Consumer::refresh`.
        self.mem.store_tail(self.tail, Ordering::Release);
    }
}

/// The consuming end of a ring.
#[derive(Debug)]
pub struct Consumer<M> {
    mem: M,
    head: u32,
    tail: u32,
    /// The head last published: kept here, never read back from the shared word,
    /// which the producer (the untrusted side) can overwrite at any time.
    released: u32,
}

impl<M: RingMemory> Consumer<M> {
    /// Takes over the consuming end where the shared head stands (read once, here).
    pub fn new(mem: M) -> Self {
        let head = mem.load_head(Ordering::Relaxed);
        Self { mem, head, tail: head, released: head }
    }

    /// Takes over the consuming end at our own `head` (kept privately across the
    /// producer's restart) and publishes it.
    pub fn resume(mem: M, head: u32) -> Self {
        // Release: our reads of the slots below `head` happened before the producer
        // may reuse them; pairs with the producer's Acquire in `Producer::refresh`.
        mem.store_head(head, Ordering::Release);
        Self { mem, head, tail: head, released: head }
    }

    /// The head this consumer last published (or found at [`Self::new`]): where
    /// [`Self::release_to`] may start from.
    pub fn released(&self) -> u32 {
        self.released
    }

    /// The shared memory.
    pub fn memory(&self) -> &M {
        &self.mem
    }

    /// Our (possibly unpublished) index.
    pub fn head(&self) -> u32 {
        self.head
    }

    /// Moves our index forward to `index` (a restarted consumer skipping entries its
    /// predecessor took). `index` must be within the entries published.
    pub fn skip_to(&mut self, index: u32) -> Result<(), RingError> {
        self.refresh()?;
        if index.wrapping_sub(self.head) > self.tail.wrapping_sub(self.head) {
            return Err(RingError::PastCapacity { index, ours: self.head, entries: self.mem.entries() });
        }
        self.head = index;
        Ok(())
    }

    /// Rereads the producer's index and returns the entries ready.
    pub fn refresh(&mut self) -> Result<u32, RingError> {
        // Acquire: pairs with the producer's Release in `Producer::publish`, so the
        // slots below the new tail are fully written before we read them.
        let tail = self.mem.load_tail(Ordering::Acquire);
        if (tail.wrapping_sub(self.tail) as i32) < 0 {
            return Err(RingError::Backwards { from: self.tail, to: tail });
        }
        if tail.wrapping_sub(self.head) > self.mem.entries() {
            return Err(RingError::PastCapacity { index: tail, ours: self.head, entries: self.mem.entries() });
        }
        self.tail = tail;
        Ok(self.ready())
    }

    /// Entries ready as last seen (no shared read).
    pub fn ready(&self) -> u32 {
        self.tail.wrapping_sub(self.head)
    }

    /// Copies out the next entry and its index, if one is ready as last seen.
    pub fn pop(&mut self) -> Option<(u32, M::Slot)> {
        let bytes = self.peek(0)?;
        let index = self.head;
        self.advance(1);
        Some((index, bytes))
    }

    /// Copies out the entry `i` places past our head, if it is ready as last seen,
    /// without taking it: a consumer that decides from the copies how many to take
    /// then [`Self::advance`]s over them.
    pub fn peek(&self, i: u32) -> Option<M::Slot> {
        if i >= self.ready() {
            return None;
        }
        Some(self.mem.read_slot(self.head.wrapping_add(i) & (self.mem.entries() - 1)))
    }

    /// Takes the next `n` entries (peeked already) without copying them again.
    ///
    /// Panics (programmer error) if fewer than `n` are ready as last seen.
    pub fn advance(&mut self, n: u32) {
        assert!(n <= self.ready(), "advance({n}) past the {} entries ready", self.ready());
        self.head = self.head.wrapping_add(n);
    }

    /// Hands popped slots back to the producer up to `index` (at most our head): a
    /// consumer that completes entries out of order keeps the oldest open one, and
    /// everything after it, readable in the ring until it is done.
    pub fn release_to(&mut self, index: u32) {
        // Our own copy of what we published: the shared word may have been scribbled.
        let published = self.released;
        assert!(
            index.wrapping_sub(published) <= self.head.wrapping_sub(published),
            "release_to({index}) is outside {published}..={}",
            self.head
        );
        // Release: our reads of the popped slots happen before the producer may reuse
        // them; pairs with the producer's Acquire in `Producer::refresh`.
        self.mem.store_head(index, Ordering::Release);
        self.released = index;
    }

    /// Hands every popped slot back to the producer.
    pub fn release(&mut self) {
        // Release: our reads of the popped slots happen before the producer may reuse
        // them; pairs with the producer's Acquire in `Producer::refresh`.
        self.mem.store_head(self.head, Ordering::Release);
        self.released = self.head;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::sync::atomic::AtomicU32;

    #[derive(Default)]
    struct Mem {
        head: AtomicU32,
        tail: AtomicU32,
        slots: RefCell<[[u8; 8]; 4]>,
    }
    impl RingMemory for &Mem {
        type Slot = [u8; 8];
        fn entries(&self) -> u32 {
            4
        }
        fn load_tail(&self, o: Ordering) -> u32 {
            self.tail.load(o)
        }
        fn store_tail(&self, v: u32, o: Ordering) {
            self.tail.store(v, o)
        }
        fn load_head(&self, o: Ordering) -> u32 {
            self.head.load(o)
        }
        fn store_head(&self, v: u32, o: Ordering) {
            self.head.store(v, o)
        }
        fn write_slot(&self, slot: u32, bytes: &[u8; 8]) {
            self.slots.borrow_mut()[slot as usize] = *bytes;
        }
        fn read_slot(&self, slot: u32) -> [u8; 8] {
            self.slots.borrow()[slot as usize]
        }
    }

    #[test]
    fn fills_wraps_and_refuses_when_full() {
        let mem = Mem::default();
        let mut p = Producer::new(&mem);
        let mut c = Consumer::new(&mem);
        for round in 0u64..10 {
            for i in 0..4u64 {
                assert!(p.push(&(round * 4 + i).to_le_bytes()));
            }
            assert!(!p.push(&[0; 8]), "full ring refuses");
            p.publish();
            assert_eq!(c.refresh(), Ok(4));
            for i in 0..4u64 {
                let (index, bytes) = c.pop().unwrap();
                assert_eq!(index as u64, round * 4 + i);
                assert_eq!(u64::from_le_bytes(bytes), round * 4 + i);
            }
            assert!(c.pop().is_none());
            c.release();
            assert_eq!(p.refresh(), Ok(4));
        }
    }

    /// Peeking copies without taking; advancing takes what was peeked, across the
    /// wrap, and never past what is ready.
    #[test]
    fn peek_then_advance_takes_what_was_peeked() {
        let mem = Mem::default();
        let mut p = Producer::new(&mem);
        let mut c = Consumer::new(&mem);
        for round in 0u64..6 {
            for i in 0..3u64 {
                assert!(p.push(&(round * 3 + i).to_le_bytes()));
            }
            p.publish();
            assert_eq!(c.refresh(), Ok(3));
            assert_eq!(c.peek(3), None, "only what is ready");
            for i in 0..3u32 {
                assert_eq!(c.peek(i).map(u64::from_le_bytes), Some(round * 3 + u64::from(i)));
            }
            assert_eq!(c.ready(), 3, "peeking takes nothing");
            c.advance(2);
            assert_eq!(
                c.pop().map(|(at, b)| (at, u64::from_le_bytes(b))),
                Some(((round * 3 + 2) as u32, round * 3 + 2))
            );
            c.release();
            assert_eq!(p.refresh(), Ok(4));
        }
        let taken = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.advance(1)));
        assert!(taken.is_err(), "advancing past what is ready is a programmer error");
    }

    #[test]
    fn a_producer_taking_over_a_scribbled_ring_never_counts_more_than_it_holds() {
        let mem = Mem::default();
        // The peer left a head 1000 behind the tail (or ahead of it): nothing is in
        // flight as far as a new producer is concerned, and free never underflows.
        for head in [0u32, 2000, u32::MAX] {
            mem.head.store(head, Ordering::Relaxed);
            mem.tail.store(1000, Ordering::Relaxed);
            let p = Producer::new(&mem);
            assert_eq!((p.in_flight(), p.free()), (0, 4), "head {head}");
            let p = Producer::resume(&mem, 7);
            assert_eq!(mem.tail.load(Ordering::Relaxed), 7, "resume publishes our own tail");
            assert!(p.free() <= 4);
        }
        // A plausible head is kept.
        mem.head.store(5, Ordering::Relaxed);
        let mut p = Producer::resume(&mem, 7);
        assert_eq!(p.in_flight(), 2);
        // A head the peer then moves past our tail is an error, not a bigger ring.
        mem.head.store(9, Ordering::Relaxed);
        assert!(p.refresh().is_err());
    }

    #[test]
    fn hostile_indices_are_errors() {
        let mem = Mem::default();
        let mut p = Producer::new(&mem);
        let mut c = Consumer::new(&mem);
        p.push(&[1; 8]);
        p.push(&[2; 8]);
        p.publish();
        assert_eq!(c.refresh(), Ok(2));
        // Tail moved backwards.
        mem.tail.store(1, Ordering::Release);
        assert_eq!(c.refresh(), Err(RingError::Backwards { from: 2, to: 1 }));
        // Tail past capacity.
        mem.tail.store(9, Ordering::Release);
        assert!(matches!(c.refresh(), Err(RingError::PastCapacity { index: 9, .. })));
        // Head past the producer's tail.
        mem.head.store(3, Ordering::Release);
        assert!(matches!(p.refresh(), Err(RingError::PastCapacity { index: 3, .. })));
        // Head backwards.
        mem.head.store(u32::MAX, Ordering::Release);
        assert!(matches!(p.refresh(), Err(RingError::Backwards { .. })));
    }

    /// The consumer's published head is its own: a producer that scribbles the shared
    /// word cannot make `release_to` panic or walk from the scribbled value.
    #[test]
    fn a_scribbled_head_word_is_never_read_back() {
        let mem = Mem::default();
        let mut p = Producer::new(&mem);
        let mut c = Consumer::new(&mem);
        for i in 0..3u8 {
            assert!(p.push(&[i; 8]));
        }
        p.publish();
        assert_eq!(c.refresh(), Ok(3));
        let _ = c.pop();
        let _ = c.pop();
        c.release_to(1);
        for scribbled in [2, 0, u32::MAX, 1 << 31] {
            mem.head.store(scribbled, Ordering::Relaxed);
            assert_eq!(c.released(), 1, "the consumer keeps what it published");
        }
        // Releasing up to its own head works from its own copy, and publishes it.
        c.release_to(2);
        assert_eq!(mem.head.load(Ordering::Relaxed), 2);
        assert_eq!(c.released(), 2);
    }

    #[test]
    fn indices_wrap_around_u32() {
        let mem = Mem::default();
        mem.head.store(u32::MAX - 1, Ordering::Relaxed);
        mem.tail.store(u32::MAX - 1, Ordering::Relaxed);
        let mut p = Producer::new(&mem);
        let mut c = Consumer::new(&mem);
        for i in 0..4u8 {
            assert!(p.push(&[i; 8]));
        }
        p.publish();
        assert_eq!(c.refresh(), Ok(4));
        let got: Vec<u8> = std::iter::from_fn(|| c.pop()).map(|(_, b)| b[0]).collect();
        assert_eq!(got, vec![0, 1, 2, 3]);
        c.release();
        assert_eq!(p.refresh(), Ok(4));
    }
}

/// Model checks of the protocol under every interleaving loom explores.
#[cfg(all(test, loom))]
#[allow(unsafe_code)]
mod loom_tests {
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::atomic::AtomicU32;
    use loom::sync::Arc;

    struct Mem {
        head: AtomicU32,
        tail: AtomicU32,
        slots: [UnsafeCell<u64>; 2],
    }
    // SAFETY: slots are only reached through the ring protocol under test; loom's
    // UnsafeCell reports any access the protocol fails to order.
    unsafe impl Sync for Mem {}

    impl RingMemory for Arc<Mem> {
        type Slot = [u8; 8];
        fn entries(&self) -> u32 {
            2
        }
        fn load_tail(&self, o: Ordering) -> u32 {
            self.tail.load(o)
        }
        fn store_tail(&self, v: u32, o: Ordering) {
            self.tail.store(v, o)
        }
        fn load_head(&self, o: Ordering) -> u32 {
            self.head.load(o)
        }
        fn store_head(&self, v: u32, o: Ordering) {
            self.head.store(v, o)
        }
        fn write_slot(&self, slot: u32, bytes: &[u8; 8]) {
            // SAFETY: loom checks that no read of this slot races with the write.
            self.slots[slot as usize].with_mut(|p| unsafe { *p = u64::from_le_bytes(*bytes) });
        }
        fn read_slot(&self, slot: u32) -> [u8; 8] {
            // SAFETY: loom checks that no write of this slot races with the read.
            self.slots[slot as usize].with(|p| unsafe { *p }).to_le_bytes()
        }
    }

    #[test]
    fn every_entry_arrives_once_in_order() {
        loom::model(|| {
            let mem = Arc::new(Mem {
                head: AtomicU32::new(0),
                tail: AtomicU32::new(0),
                slots: [UnsafeCell::new(0), UnsafeCell::new(0)],
            });
            let producer_mem = mem.clone();
            let producer = loom::thread::spawn(move || {
                let mut p = Producer::new(producer_mem);
                let mut next = 1u64;
                while next <= 3 {
                    if p.refresh().unwrap() > 0 {
                        assert!(p.push(&next.to_le_bytes()));
                        p.publish();
                        next += 1;
                    } else {
                        loom::thread::yield_now();
                    }
                }
            });
            let mut c = Consumer::new(mem);
            let mut expected = 1u64;
            while expected <= 3 {
                c.refresh().unwrap();
                match c.pop() {
                    Some((_, bytes)) => {
                        assert_eq!(u64::from_le_bytes(bytes), expected);
                        expected += 1;
                        c.release();
                    }
                    None => loom::thread::yield_now(),
                }
            }
            producer.join().unwrap();
        });
    }
}
