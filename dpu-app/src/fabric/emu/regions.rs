//! A node's table of registered memory regions, as its NIC sees them: rkey -> memory
//! and rights. The responder checks every remote access against it; requesters' region
//! caches (`region_cache`) keep copies of its entries, valid while its epoch stands.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use crate::fabric::{Access, FabricError, Memory, Result};
use crate::limits::REGIONS_PER_NODE_MAX;

/// A registered region as the NIC sees it.
#[derive(Clone)]
pub(crate) struct RegionEntry {
    pub(crate) key: u32,
    pub(crate) memory: Arc<Memory>,
    pub(crate) access: Access,
}

/// The regions registered on one node (its protection domain).
#[derive(Default)]
pub(crate) struct Regions {
    table: RwLock<Vec<Option<RegionEntry>>>,
    /// Bumped (Release) by every deregistration after its slot is cleared: requesters'
    /// region caches compare it before each access (see `region_cache`).
    pub(crate) epoch: AtomicU64,
    key_generation: AtomicU32,
}

impl Regions {
    /// The table, read-locked (the responder holds it across one access instead of
    /// cloning the entry).
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Vec<Option<RegionEntry>>> {
        self.table.read().expect("regions lock")
    }

    /// The memory and rights of the region registered under `rkey`, if any (a
    /// requester's region cache fills from here).
    pub(crate) fn region(&self, rkey: u32) -> Option<(Arc<Memory>, Access)> {
        let regions = self.read();
        match regions.get((rkey & 0xFFFF) as usize) {
            Some(Some(e)) if e.key == rkey => Some((Arc::clone(&e.memory), e.access)),
            _ => None,
        }
    }

    /// Registers `memory` with `access`; returns its key.
    pub(crate) fn register(&self, memory: Arc<Memory>, access: Access) -> Result<u32> {
        let mut regions = self.table.write().expect("regions lock");
        let index = match regions.iter().position(Option::is_none) {
            Some(i) => i,
            None if regions.len() < REGIONS_PER_NODE_MAX => {
                regions.push(None);
                regions.len() - 1
            }
            None => return Err(FabricError::Limit { what: "memory regions per node", limit: REGIONS_PER_NODE_MAX }),
        };
        // Keys carry a generation so that a stale rkey of a deregistered region never
        // reaches a new region in the same slot.
        let generation = self.key_generation.fetch_add(1, Ordering::Relaxed).wrapping_add(1) & 0xFFFF;
        let key = (generation.max(1) << 16) | index as u32;
        regions[index] = Some(RegionEntry { key, memory, access });
        Ok(key)
    }

    /// Forgets the region registered under `key`, if it still is.
    pub(crate) fn deregister(&self, key: u32) {
        let mut regions = self.table.write().expect("regions lock");
        if let Some(slot) = regions.get_mut((key & 0xFFFF) as usize) {
            if matches!(slot, Some(e) if e.key == key) {
                *slot = None;
                // Release: a requester that sees the new epoch sees the cleared slot.
                self.epoch.fetch_add(1, Ordering::Release);
            }
        }
    }
}
