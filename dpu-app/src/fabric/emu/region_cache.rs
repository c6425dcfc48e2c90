//! The requester's cache of its peer's registered regions, as a NIC caches memory
//! translation entries: the few regions one queue pair reaches (a log, a store, a
//! directory) resolve without touching the peer's region table, whose lock would cost
//! two atomic read-modify-writes on every remote access.
//!
//! Invariants: an entry is a copy of the peer's table entry for its rkey as of the
//! peer's registration epoch in `epoch`; every deregistration bumps that epoch after
//! clearing the table slot, and every lookup compares the epoch first (Acquire, pairing
//! with the Release bump), so an access that starts after a deregistration returned
//! never sees the region: it fails with a remote access error, as on hardware. An entry
//! holds its memory by `Arc`, so an access that raced with the deregistration (and is
//! ordered before it) touches live memory; the mapping outlives the deregistration only
//! until this queue pair's next access to that node, reset or drop.
//!
//! The cache belongs to one send queue and is used under its lock.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::regions::Regions;
use crate::fabric::{Access, Memory};
use crate::limits::REGION_CACHE_ENTRIES;

/// Up to [`REGION_CACHE_ENTRIES`] regions of one peer node.
#[derive(Default)]
pub(crate) struct RegionCache {
    /// The cached rkeys, scanned on every access (0: a free entry; no key is 0, see
    /// `Regions::register`).
    keys: [u32; REGION_CACHE_ENTRIES],
    /// The memory and rights under `keys[i]`.
    regions: [Option<(Arc<Memory>, Access)>; REGION_CACHE_ENTRIES],
    /// The peer's registration epoch the entries are valid for.
    epoch: u64,
    /// The entry a miss replaces next (round robin).
    victim: usize,
}

impl RegionCache {
    /// The memory and rights of the region with key `rkey` in `regions` (the peer node's),
    /// or `None` when no such region is registered there.
    pub(crate) fn lookup(&mut self, regions: &Regions, rkey: u32) -> Option<(&Memory, Access)> {
        // Acquire: pairs with the Release bump of a deregistration (see the module doc).
        let epoch = regions.epoch.load(Ordering::Acquire);
        if epoch != self.epoch {
            self.clear();
            self.epoch = epoch;
        }
        let at = match self.keys.iter().position(|&k| k == rkey && k != 0) {
            Some(at) => at,
            None => {
                let region = regions.region(rkey)?;
                let at = self.victim;
                self.victim = (self.victim + 1) % REGION_CACHE_ENTRIES;
                self.keys[at] = rkey;
                self.regions[at] = Some(region);
                at
            }
        };
        self.regions[at].as_ref().map(|(memory, access)| (&**memory, *access))
    }

    /// Forgets every entry (the queue pair was reset: its next peer may be another node).
    pub(crate) fn clear(&mut self) {
        self.keys = [0; REGION_CACHE_ENTRIES];
        self.regions = Default::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::emu::{ModelConfig, Network, SystemClock};
    use crate::fabric::Fabric;

    #[test]
    fn a_deregistered_region_is_forgotten_and_a_new_key_is_found() {
        let net = Network::new(ModelConfig::ideal(), Arc::new(SystemClock::new())).unwrap();
        let node = net.node().unwrap();
        let mr = node.register(Arc::new(Memory::anonymous(64).unwrap()), Access::ALL).unwrap();
        let mut cache = RegionCache::default();
        let rkey = mr.rkey();
        assert_eq!(cache.lookup(&node.inner.regions, rkey).map(|(m, a)| (m.len(), a)), Some((64, Access::ALL)));
        assert!(cache.lookup(&node.inner.regions, rkey ^ 0x1_0000).is_none(), "another generation is another key");
        drop(mr);
        assert!(cache.lookup(&node.inner.regions, rkey).is_none(), "gone once deregistration returned");
        let others: Vec<_> = (0..REGION_CACHE_ENTRIES + 2)
            .map(|_| node.register(Arc::new(Memory::anonymous(8).unwrap()), Access::REMOTE_READ).unwrap())
            .collect();
        for mr in others.iter().chain(others.iter().rev()) {
            assert_eq!(cache.lookup(&node.inner.regions, mr.rkey()).map(|(m, _)| m.addr()), Some(mr.memory().addr()));
        }
    }
}
