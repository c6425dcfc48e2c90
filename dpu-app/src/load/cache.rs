//! A reader's value cache, as a KV store on a node keeps it: direct-mapped, sized at
//! start, each entry tagged with the exact `Valid` directory word its refill put in the
//! key's slot.
//!
//! The reader protocol (host-shim/README.md, "The cache directory and reads"): an entry is filled
//! from a GET issued after a miss, before the refill CAS, and is served only while
//! the key's slot holds exactly the word it is tagged with. Slots are shared by
//! colliding keys and every transition changes the word, so a tag that still matches
//! proves no write of any key of the slot was announced since the refill.

use prescient_shim::directory;

/// One cached value's bookkeeping (its bytes live in the cache's slab).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    key_id: u64,
    /// The packed `Valid` word the entry may be served under.
    tag: u64,
    /// The value's version (the write's stamp).
    version: u64,
    len: u32,
    used: bool,
}

const EMPTY: Entry = Entry { key_id: 0, tag: 0, version: 0, len: 0, used: false };

/// A cached value served to a reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hit<'c> {
    /// The value's version.
    pub version: u64,
    /// The value.
    pub value: &'c [u8],
}

/// A direct-mapped cache of `entries` values of at most `value_bytes` each.
#[derive(Debug)]
pub struct ReaderCache {
    entries: Vec<Entry>,
    values: Vec<u8>,
    value_bytes: usize,
}

impl ReaderCache {
    /// A cache of `entries` entries (at least 1) of `value_bytes` each; the only
    /// allocation it makes.
    pub fn new(entries: u32, value_bytes: usize) -> Self {
        let entries = entries.max(1);
        Self { entries: vec![EMPTY; entries as usize], values: vec![0; entries as usize * value_bytes], value_bytes }
    }

    fn index(&self, key_id: u64) -> usize {
        directory::slot_of(key_id, self.entries.len() as u32) as usize
    }

    /// The value of `key_id` if it is cached under exactly `word` (the slot's current
    /// `Valid` word, packed).
    pub fn lookup(&self, key_id: u64, word: u64) -> Option<Hit<'_>> {
        let i = self.index(key_id);
        let e = &self.entries[i];
        (e.used && e.key_id == key_id && e.tag == word).then(|| {
            let start = i * self.value_bytes;
            Hit { version: e.version, value: &self.values[start..start + e.len as usize] }
        })
    }

    /// Puts `value` (truncated to the entry size) in the cache for `key_id`, servable
    /// under `tag` only: call before the refill CAS, and [`ReaderCache::forget`] if the
    /// CAS fails.
    pub fn fill(&mut self, key_id: u64, tag: u64, version: u64, value: &[u8]) {
        let i = self.index(key_id);
        let len = value.len().min(self.value_bytes);
        let start = i * self.value_bytes;
        self.values[start..start + len].copy_from_slice(&value[..len]);
        self.entries[i] = Entry { key_id, tag, version, len: len as u32, used: true };
    }

    /// Drops `key_id`'s entry (its refill did not take).
    pub fn forget(&mut self, key_id: u64) {
        let i = self.index(key_id);
        if self.entries[i].key_id == key_id {
            self.entries[i] = EMPTY;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prescient_shim::directory::{SlotState, SlotWord};

    fn valid(version: u64) -> u64 {
        SlotWord { state: SlotState::Valid, writer: 1, version }.pack()
    }

    #[test]
    fn an_entry_is_served_only_under_its_exact_word() {
        let mut c = ReaderCache::new(64, 16);
        assert_eq!(c.lookup(7, valid(3)), None);
        c.fill(7, valid(3), 0x301, b"hello");
        assert_eq!(c.lookup(7, valid(3)), Some(Hit { version: 0x301, value: b"hello" }));
        assert_eq!(c.lookup(7, valid(4)), None, "the slot moved on");
        assert_eq!(c.lookup(8, valid(3)), None, "another key");
        c.forget(7);
        assert_eq!(c.lookup(7, valid(3)), None);
    }

    #[test]
    fn colliding_keys_replace_each_other_and_long_values_are_cut() {
        let mut c = ReaderCache::new(1, 4);
        c.fill(1, valid(1), 1, b"abcdef");
        assert_eq!(c.lookup(1, valid(1)).unwrap().value, b"abcd");
        c.fill(2, valid(1), 2, b"xy");
        assert_eq!(c.lookup(1, valid(1)), None);
        c.forget(1); // not its entry any more: nothing happens
        assert_eq!(c.lookup(2, valid(1)).unwrap().value, b"xy");
    }
}
