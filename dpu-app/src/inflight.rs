//! The DPU app's own record of which host buffers it holds.
//!
//! The ownership words in the region are written by both sides, so a hostile host can
//! rewrite them; this table is private to the DPU app and is what decides whether a
//! descriptor names a buffer that is already in flight.

/// One bit per host buffer.
#[derive(Debug)]
pub struct InFlight {
    bits: Vec<u64>,
    count: u32,
}

impl InFlight {
    /// A table for `buffers` buffers, all free. Allocated once, at attach.
    pub fn new(buffers: u32) -> Self {
        Self { bits: vec![0; (buffers as usize).div_ceil(64)], count: 0 }
    }

    /// Marks `buffer` held; false if it already was.
    pub fn insert(&mut self, buffer: u32) -> bool {
        let (word, bit) = (buffer as usize / 64, 1u64 << (buffer % 64));
        if self.bits[word] & bit != 0 {
            return false;
        }
        self.bits[word] |= bit;
        self.count += 1;
        true
    }

    /// Marks `buffer` free again.
    pub fn remove(&mut self, buffer: u32) {
        let (word, bit) = (buffer as usize / 64, 1u64 << (buffer % 64));
        assert!(self.bits[word] & bit != 0, "buffer {buffer} released twice");
        self.bits[word] &= !bit;
        self.count -= 1;
    }

    /// Whether `buffer` is held.
    pub fn contains(&self, buffer: u32) -> bool {
        self.bits[buffer as usize / 64] & (1u64 << (buffer % 64)) != 0
    }

    /// Buffers held.
    pub fn len(&self) -> u32 {
        self.count
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_is_held_once() {
        let mut t = InFlight::new(130);
        assert!(t.insert(129));
        assert!(!t.insert(129));
        assert!(t.contains(129) && !t.contains(128));
        assert_eq!(t.len(), 1);
        t.remove(129);
        assert!(t.is_empty());
    }
}
