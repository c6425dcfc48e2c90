//! Where a key's fragments live: its holders, on the cluster's storage nodes.
//!
//! A node is a **storage** node (the default) or a **cache-only** member (`role =
//! "cache"` in its `[[node]]`): a host in some region that caches values and whose
//! directory every write invalidates like any other, but that holds no fragments. Its
//! GETs READ the key's sets from the storage nodes only, so a cache-only member in a
//! far region never waits for another far region, and the storage nodes never wait for
//! it. This is the seed design's remote caches in other regions.
//!
//! A key's k + m fragments go to consecutive storage nodes (in id order) from the
//! key's home, `key_hash % storage nodes`: fragment `i` on storage node `(home + i) %
//! storage nodes`. With every node a storage node this is the placement the cluster
//! always had.

use crate::limits::{FRAGMENTS_MAX, NODES_MAX};

/// What a node does in the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Role {
    /// Holds fragments, answers GETs' set READs, is counted in quorums.
    #[default]
    Storage,
    /// Holds no fragments; its host's directory is invalidated by every write and its
    /// GETs read from the storage nodes.
    Cache,
}

impl Role {
    /// The name in the cluster file.
    pub const fn name(self) -> &'static str {
        match self {
            Role::Storage => "storage",
            Role::Cache => "cache",
        }
    }

    /// The role named `name` in the cluster file.
    pub fn parse(name: &str) -> Option<Self> {
        [Role::Storage, Role::Cache].into_iter().find(|r| r.name() == name)
    }
}

/// The storage nodes, in id order, and the holders of each key on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    storage: [u8; NODES_MAX],
    count: usize,
    mask: u32,
}

/// The mask (bit `h` for node `h`) of the nodes in `holders`, e.g. the first `k + m`
/// of [`Placement::holders`].
pub fn mask_of(holders: &[u8]) -> u32 {
    holders.iter().fold(0, |m, &h| m | 1 << h)
}

impl Placement {
    /// The placement over the nodes `roles[id]` calls storage nodes (`roles` in node id
    /// order). `None` when no node stores.
    pub fn new(roles: &[Role]) -> Option<Self> {
        let mut p = Self { storage: [0; NODES_MAX], count: 0, mask: 0 };
        for (id, _) in roles.iter().enumerate().take(NODES_MAX).filter(|(_, r)| **r == Role::Storage) {
            p.storage[p.count] = id as u8;
            p.count += 1;
            p.mask |= 1 << id;
        }
        (p.count > 0).then_some(p)
    }

    /// Every one of `nodes` nodes a storage node: the classic placement.
    pub fn all_storage(nodes: usize) -> Self {
        Self::new(&[Role::Storage; NODES_MAX][..nodes.clamp(1, NODES_MAX)]).expect("at least one node")
    }

    /// Storage nodes.
    pub fn storage_nodes(&self) -> usize {
        self.count
    }

    /// The storage nodes as a bit mask of node ids.
    pub fn mask(&self) -> u32 {
        self.mask
    }

    /// Whether node `id` holds fragments.
    pub fn stores(&self, id: u8) -> bool {
        u32::from(id) < 32 && self.mask & (1 << id) != 0
    }

    /// The storage node ids, in order.
    pub fn storage(&self) -> &[u8] {
        &self.storage[..self.count]
    }

    /// The holders of `fragments` fragments of key `key_hash`: holder `i` keeps fragment
    /// `i`. `fragments` is at most the storage nodes (the configuration checks k + m).
    pub fn holders(&self, key_hash: u64, fragments: usize) -> [u8; FRAGMENTS_MAX] {
        debug_assert!(fragments <= self.count && fragments <= FRAGMENTS_MAX);
        let home = (key_hash % self.count as u64) as usize;
        let mut holders = [0u8; FRAGMENTS_MAX];
        for (i, h) in holders.iter_mut().take(fragments.min(self.count)).enumerate() {
            *h = self.storage[(home + i) % self.count];
        }
        holders
    }

    /// The fragment index node `id` keeps of key `key_hash` (among `fragments`), or
    /// `None` when it holds none of it.
    pub fn fragment_of(&self, key_hash: u64, fragments: usize, id: u8) -> Option<usize> {
        let position = self.storage().iter().position(|&s| s == id)?;
        let home = (key_hash % self.count as u64) as usize;
        let index = (position + self.count - home) % self.count;
        (index < fragments).then_some(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_storage_is_the_classic_consecutive_placement() {
        let p = Placement::all_storage(5);
        for key_hash in 0..50u64 {
            let holders = p.holders(key_hash, 5);
            for (i, &h) in holders.iter().take(5).enumerate() {
                assert_eq!(usize::from(h), (key_hash as usize % 5 + i) % 5);
                assert_eq!(p.fragment_of(key_hash, 5, h), Some(i));
            }
        }
        assert_eq!(p.mask(), 0b11111);
    }

    #[test]
    fn cache_members_hold_nothing_and_every_storage_node_its_share() {
        use Role::{Cache, Storage};
        let roles = [Storage, Cache, Storage, Storage, Cache, Storage, Storage];
        let p = Placement::new(&roles).unwrap();
        assert_eq!(p.storage(), &[0, 2, 3, 5, 6]);
        assert!(!p.stores(1) && !p.stores(4) && p.stores(6) && !p.stores(40));
        let mut per_node = [0u32; 7];
        for key_hash in 0..1000u64 {
            let holders = p.holders(key_hash, 3);
            let distinct: std::collections::HashSet<u8> = holders[..3].iter().copied().collect();
            assert_eq!(distinct.len(), 3, "three different holders");
            for (i, &h) in holders[..3].iter().enumerate() {
                assert!(p.stores(h));
                assert_eq!(p.fragment_of(key_hash, 3, h), Some(i));
                per_node[usize::from(h)] += 1;
            }
            assert_eq!(p.fragment_of(key_hash, 3, 1), None);
            assert_eq!(p.fragment_of(key_hash, 3, 4), None);
        }
        assert_eq!((per_node[1], per_node[4]), (0, 0));
        assert!(per_node.iter().enumerate().filter(|(i, _)| p.stores(*i as u8)).all(|(_, &n)| n == 600));
        assert_eq!(Placement::new(&[Cache, Cache]), None);
        assert_eq!(Role::parse("cache"), Some(Cache));
        assert_eq!(Role::parse("replica"), None);
    }
}
