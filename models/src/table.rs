//! A bounded, set-associative table of contexts and their successor counts.
//!
//! A context (one key, or a hash of the two last keys) owns one [`Entry`]: how often
//! it was followed by anything (`total`) and by each of up to [`SUCCESSOR_SLOTS`]
//! successors. The table is allocated once at construction and never grows: a new
//! context replaces the coldest of the [`TABLE_WAYS`] entries of its set, so a flood
//! of one-off keys evicts only other newcomers while contexts that recur stay.
//! Counts are halved when `total` reaches the configured decay point, which bounds
//! them and lets a context's new habit overtake an old one.

use crate::config::{HEAT_MAX, SUCCESSOR_SLOTS, TABLE_WAYS};

/// One context and what followed it, as the model file stores it. `heat == 0` marks
/// an empty entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The context's identity: the key (order 1) or the hash of two keys (order 2).
    pub tag: u64,
    /// Successor keys; a slot with count 0 is free.
    pub successors: [u64; SUCCESSOR_SLOTS],
    /// How often each successor followed the context (decayed).
    pub counts: [u16; SUCCESSOR_SLOTS],
    /// How often the context was followed by any key (decayed).
    pub total: u16,
    /// Recency of use, for replacement; 0 when the entry is empty.
    pub heat: u8,
}

/// What a lookup needs of a whole set, on one cache line: probing a set, choosing a
/// victim and checking a context's evidence touch only this line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(align(64))]
struct SetHead {
    tags: [u64; TABLE_WAYS],
    totals: [u16; TABLE_WAYS],
    heat: [u8; TABLE_WAYS],
}

/// The successors of one entry, read only when the context has enough evidence.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Successors {
    /// Successor keys; a slot with count 0 is free.
    pub keys: [u64; SUCCESSOR_SLOTS],
    /// How often each followed the context.
    pub counts: [u16; SUCCESSOR_SLOTS],
}

const SET_BYTES: usize = std::mem::size_of::<SetHead>() + TABLE_WAYS * std::mem::size_of::<Successors>();
const _: () = assert!(std::mem::size_of::<SetHead>() == 64, "a set head is one cache line");

/// Bytes one entry occupies in the table (its share of the set head included).
pub(crate) const ENTRY_BYTES: usize = SET_BYTES / TABLE_WAYS;
const _: () = assert!(ENTRY_BYTES <= 56, "an entry must stay within 56 bytes");

/// The table: `sets * TABLE_WAYS` entries, `sets` a power of two.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Table {
    heads: Vec<SetHead>,
    successors: Vec<Successors>,
    set_mask: usize,
}

/// Spreads a tag over the sets (Fibonacci hashing: the high bits of a multiply).
fn set_of(tag: u64, set_mask: usize) -> usize {
    let mixed = (tag ^ (tag >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (mixed >> 32) as usize & set_mask
}

impl Table {
    /// The largest table (a power of two sets, at least one) within `memory_bytes`.
    pub fn with_budget(memory_bytes: u64) -> Self {
        let sets_fit = (memory_bytes / SET_BYTES as u64).max(1);
        let sets = 1usize << (63 - sets_fit.leading_zeros());
        Self::with_sets(sets)
    }

    /// A table of exactly `sets` sets (a power of two).
    pub fn with_sets(sets: usize) -> Self {
        assert!(sets.is_power_of_two(), "sets must be a power of two, got {sets}");
        Self {
            heads: vec![SetHead::default(); sets],
            successors: vec![Successors::default(); sets * TABLE_WAYS],
            set_mask: sets - 1,
        }
    }

    /// Number of sets.
    pub fn sets(&self) -> usize {
        self.set_mask + 1
    }

    /// Number of entries.
    pub fn slots(&self) -> usize {
        self.successors.len()
    }

    /// Bytes the table occupies; fixed at construction.
    pub fn memory_bytes(&self) -> u64 {
        (self.heads.capacity() * std::mem::size_of::<SetHead>()
            + self.successors.capacity() * std::mem::size_of::<Successors>()) as u64
    }

    /// The entry in `slot`, empty or not.
    pub fn entry(&self, slot: usize) -> Entry {
        let (h, w) = (&self.heads[slot / TABLE_WAYS], slot % TABLE_WAYS);
        let s = &self.successors[slot];
        Entry { tag: h.tags[w], successors: s.keys, counts: s.counts, total: h.totals[w], heat: h.heat[w] }
    }

    /// Puts `entry` at `slot` (loading a model file). `None` if the slot is out of range
    /// or the entry belongs to another set.
    pub fn place(&mut self, slot: usize, entry: Entry) -> Option<()> {
        if slot >= self.slots() || set_of(entry.tag, self.set_mask) != slot / TABLE_WAYS {
            return None;
        }
        let (h, w) = (&mut self.heads[slot / TABLE_WAYS], slot % TABLE_WAYS);
        h.tags[w] = entry.tag;
        h.totals[w] = entry.total;
        h.heat[w] = entry.heat;
        self.successors[slot] = Successors { keys: entry.successors, counts: entry.counts };
        Some(())
    }

    /// The slot holding `tag`, if any.
    pub fn find(&self, tag: u64) -> Option<usize> {
        let set = set_of(tag, self.set_mask);
        let h = &self.heads[set];
        (0..TABLE_WAYS).find(|&w| h.heat[w] != 0 && h.tags[w] == tag).map(|w| set * TABLE_WAYS + w)
    }

    /// The slot of `tag`, warmed because the context just occurred; a missing context
    /// replaces the coldest entry of its set (ties: fewest observations, then lowest
    /// slot) and every other entry of the set cools by one.
    pub fn touch(&mut self, tag: u64) -> usize {
        let set = set_of(tag, self.set_mask);
        let h = &mut self.heads[set];
        if let Some(w) = (0..TABLE_WAYS).find(|&w| h.heat[w] != 0 && h.tags[w] == tag) {
            h.heat[w] = (h.heat[w] + 2).min(HEAT_MAX);
            return set * TABLE_WAYS + w;
        }
        let victim = (0..TABLE_WAYS).min_by_key(|&w| (h.heat[w], h.totals[w], w)).unwrap_or(0);
        for heat in &mut h.heat {
            *heat = heat.saturating_sub(1).max(u8::from(*heat != 0));
        }
        h.tags[victim] = tag;
        h.totals[victim] = 0;
        h.heat[victim] = 1;
        let slot = set * TABLE_WAYS + victim;
        self.successors[slot] = Successors::default();
        slot
    }

    /// Records that the context in `slot` (which must still hold `tag`; otherwise the
    /// context was evicted meanwhile and nothing is recorded) was followed by
    /// `successor`.
    pub fn record(&mut self, slot: usize, tag: u64, successor: u64, decay_at: u16) {
        let (h, w) = (&mut self.heads[slot / TABLE_WAYS], slot % TABLE_WAYS);
        if h.heat[w] == 0 || h.tags[w] != tag {
            return;
        }
        let e = &mut self.successors[slot];
        h.totals[w] += 1;
        let held = (0..SUCCESSOR_SLOTS).find(|&i| e.counts[i] != 0 && e.keys[i] == successor);
        let i = held.unwrap_or_else(|| {
            // A free slot, else the weakest successor gives way (Misra-Gries style:
            // a successor that clears 1/(SLOTS+1) of the total is never the weakest).
            (0..SUCCESSOR_SLOTS).min_by_key(|&i| (e.counts[i], i)).unwrap_or(0)
        });
        if held.is_none() {
            e.keys[i] = successor;
            e.counts[i] = 0;
        }
        e.counts[i] += 1;
        if h.totals[w] >= decay_at {
            h.totals[w] /= 2;
            for c in &mut e.counts {
                *c /= 2;
            }
        }
    }

    /// How often the context in `slot` was followed, if the slot still holds `tag`.
    pub fn total(&self, slot: usize, tag: u64) -> Option<u16> {
        let (h, w) = (self.heads.get(slot / TABLE_WAYS)?, slot % TABLE_WAYS);
        (h.heat[w] != 0 && h.tags[w] == tag).then_some(h.totals[w])
    }

    /// The successors recorded in `slot`.
    pub fn successors(&self, slot: usize) -> &Successors {
        &self.successors[slot]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_rounds_down_to_power_of_two_sets() {
        let t = Table::with_budget(1 << 20);
        assert!(t.memory_bytes() <= 1 << 20);
        assert!(t.memory_bytes() * 2 > 1 << 20);
        assert!(t.sets().is_power_of_two());
    }

    #[test]
    fn counts_successors_and_decays() {
        let mut t = Table::with_sets(4);
        let s = t.touch(7);
        for _ in 0..3 {
            t.record(s, 7, 8, 4);
        }
        let e = t.entry(s);
        assert_eq!((e.total, e.counts[0]), (3, 3));
        t.record(s, 7, 9, 4);
        // total reached 4: halved to 2, counts 3 -> 1 and 1 -> 0 (slot freed).
        let e = t.entry(s);
        assert_eq!((e.total, e.counts[0], e.counts[1]), (2, 1, 0));
    }

    #[test]
    fn weakest_successor_gives_way() {
        let mut t = Table::with_sets(1);
        let s = t.touch(1);
        for succ in [10, 10, 11, 12, 13, 14] {
            t.record(s, 1, succ, 1000);
        }
        let e = t.entry(s);
        assert_eq!(e.successors[0], 10);
        assert_eq!(e.counts[0], 2);
        assert!(e.successors.contains(&14));
        assert!(!e.successors.contains(&11));
    }

    #[test]
    fn flood_of_new_keys_keeps_the_hot_context() {
        let mut t = Table::with_sets(1);
        for _ in 0..10 {
            t.touch(42);
        }
        for k in 1000..1100 {
            t.touch(k);
            t.touch(42);
        }
        for k in 2000..2010 {
            t.touch(k);
        }
        assert!(t.find(42).is_some());
    }

    #[test]
    fn record_on_evicted_slot_is_dropped() {
        let mut t = Table::with_sets(1);
        let s = t.touch(1);
        for k in 2..10 {
            t.touch(k);
        }
        t.record(s, 1, 5, 100);
        assert!(t.find(1).is_none());
        assert!((0..t.slots()).all(|s| t.entry(s).total == 0));
    }
}
