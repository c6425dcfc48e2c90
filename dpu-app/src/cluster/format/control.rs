//! A node's control block: the words its peers READ every heartbeat.
//!
//! ```text
//!   0..8    magic "PRCTRL\0\0"       8 format (2)   9 node id   10..12 zero
//!  12..16   incarnation (u32, bumped at each start)
//!  16..24   heartbeat (u64, bumped every heartbeat period)
//!  24..32   leader word (`cluster::sequence::LeaderWord`): the sequencer epoch this
//!           node has seen, CASed by claimants (0 in HLC mode)
//!  32 + 16 j      suspect[j]: how many times this node, as a writer, failed to reach
//!                 node j's cache directory (each failure a new epoch node j must honor),
//!                 counted from [`first_epoch`] of this incarnation
//!  32 + 16 j + 8  readmitted[j]: the epoch of j this node has seen honored and trusts
//!                 j's directory again from
//!  32 + 16 N + 8 j  honored[j]: the last suspect epoch of writer j this node has
//!                 honored by revoking its whole directory
//!  32 + 24 N      counter: the next sequencer version this node issues while it
//!                 sequences, advanced by writers' FETCH_ADD (0 unless it sequences)
//! ```
//! (N = [`NODES_MAX`].) Every field but the last two has one writer, this node, which
//! stores aligned words; the leader word is also CASed by claimants and the counter
//! advanced by writers, both with remote atomics (so the block is registered for
//! them). Peers copy the whole block with one RDMA READ and check it here before
//! believing any of it: a heartbeat READ also carries the peer's leader word (how a
//! node that missed a claim learns of it) and its counter (how a new sequencer learns
//! how far a reachable old one got).
//!
//! The epochs implement exclusion without a membership service: a writer that cannot
//! reach node j's directory bumps `suspect[j]` and waits until j's directory lease must
//! have lapsed (j renews it only while it hears from every peer, and only when its
//! honored epochs match what each writer has readmitted); j, on reading the bump,
//! revokes its directory and publishes `honored`; the writer then publishes
//! `readmitted`, and j renews its lease again only after revoking once more.
//!
//! Epochs are ordered across a writer's incarnations: a new incarnation counts from
//! [`first_epoch`] (its incarnation in the high half), above every epoch of its
//! earlier lives, and starts with `suspect[j] = readmitted[j] = first_epoch` for every
//! j. Counting from zero again broke exclusion both ways: j still published `honored`
//! of the earlier life (say 23), so the new life's first suspicion (epoch 1) looked
//! honored at once and its writes skipped j's directory while j had revoked nothing -
//! a cached value older than a committed write was served Fresh; and a suspicion the
//! earlier life raised but j never read (a partition, then the writer's crash) was
//! lost with it, though that life's writes had skipped j. The first epoch is such a
//! suspicion of every directory, honored (one revocation) and readmitted at once.

use std::sync::Arc;

use crate::fabric::{Access, Fabric, FabricError, Memory, MemoryRegion, RemoteRegion};
use crate::limits::NODES_MAX;

/// Suspicions one incarnation may raise of one peer: epochs of incarnation `i` are
/// `first_epoch(i) .. first_epoch(i + 1)`.
pub const SUSPICIONS_PER_INCARNATION_MAX: u64 = 1 << 32;

/// The epoch a node's suspicions of each peer start from in `incarnation` (never
/// reused: the incarnation is bumped, in a file, at every start).
pub fn first_epoch(incarnation: u32) -> u64 {
    u64::from(incarnation) * SUSPICIONS_PER_INCARNATION_MAX
}

/// Bytes of a control block.
pub const CONTROL_BYTES: usize = 32 + 24 * NODES_MAX + 8;
const MAGIC: u64 = u64::from_le_bytes(*b"PRCTRL\0\0");
const FORMAT: u8 = 2;

const HEARTBEAT: usize = 16;
/// Where the leader word sits (peers CAS it).
pub const LEADER_AT: usize = 24;
/// Where the sequencer counter sits (writers FETCH_ADD it).
pub const COUNTER_AT: usize = 32 + 24 * NODES_MAX;
fn suspect_at(j: u8) -> usize {
    32 + 16 * j as usize
}
fn readmitted_at(j: u8) -> usize {
    32 + 16 * j as usize + 8
}
fn honored_at(j: u8) -> usize {
    32 + 16 * NODES_MAX + 8 * j as usize
}

/// This node's control block, registered for peers to READ.
#[derive(Debug)]
pub struct ControlBlock {
    mr: Arc<MemoryRegion>,
}

impl ControlBlock {
    /// A fresh block for `node` in `incarnation`, registered on `fabric`.
    pub fn new<F: Fabric>(fabric: &F, node: u8, incarnation: u32) -> Result<Self, FabricError> {
        assert!((node as usize) < NODES_MAX);
        let memory = Arc::new(Memory::anonymous(CONTROL_BYTES)?);
        let mut head = [0u8; 16];
        head[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        head[8] = FORMAT;
        head[9] = node;
        head[12..16].copy_from_slice(&incarnation.to_le_bytes());
        memory.write(0, &head)?;
        // Every directory is suspected once, and readmitted at once: its host revokes
        // what this node's earlier lives may have skipped (see the module doc).
        let first = first_epoch(incarnation).to_le_bytes();
        for j in 0..NODES_MAX as u8 {
            memory.write(suspect_at(j), &first)?;
            memory.write(readmitted_at(j), &first)?;
        }
        // Peers READ it; this node writes it with the CPU, never through the NIC, but
        // for the leader word and counter, which peers change with remote atomics.
        let mr = fabric.register(memory, Access::REMOTE_READ | Access::REMOTE_ATOMIC | Access::LOCAL_WRITE)?;
        Ok(Self { mr })
    }

    /// Where peers READ it.
    pub fn remote(&self) -> RemoteRegion {
        self.mr.remote()
    }

    fn store(&self, at: usize, v: u64) {
        self.mr.memory().store_u64(at, v).expect("aligned word inside the block");
    }

    /// Bumps the heartbeat.
    pub fn beat(&self) {
        self.mr.memory().fetch_add(HEARTBEAT, 1).expect("aligned word inside the block");
    }

    /// Publishes `suspect[j]`.
    pub fn set_suspect(&self, j: u8, epoch: u64) {
        self.store(suspect_at(j), epoch);
    }

    /// Publishes `readmitted[j]`.
    pub fn set_readmitted(&self, j: u8, epoch: u64) {
        self.store(readmitted_at(j), epoch);
    }

    /// Publishes `honored[j]`.
    pub fn set_honored(&self, j: u8, epoch: u64) {
        self.store(honored_at(j), epoch);
    }

    /// This node's leader word as it is now (a claimant may CAS it at any time).
    pub fn leader(&self) -> u64 {
        self.mr.memory().load_u64(LEADER_AT).expect("aligned word inside the block")
    }

    /// CASes this node's own leader word from `compare` to `swap` (atomic against
    /// claimants' remote CASes); returns the word it found.
    pub fn cas_leader(&self, compare: u64, swap: u64) -> u64 {
        self.mr.memory().compare_swap(LEADER_AT, compare, swap).expect("aligned word inside the block")
    }

    /// This node's sequencer counter as it is now.
    pub fn counter(&self) -> u64 {
        self.mr.memory().load_u64(COUNTER_AT).expect("aligned word inside the block")
    }

    /// Sets the counter (when this node starts to sequence an epoch, before any
    /// writer can know it does).
    pub fn set_counter(&self, next: u64) {
        self.store(COUNTER_AT, next);
    }

    /// Takes `add` stamps from this node's own counter, as a writer's FETCH_ADD would;
    /// returns the first.
    pub fn fetch_add_counter(&self, add: u64) -> u64 {
        self.mr.memory().fetch_add(COUNTER_AT, add).expect("aligned word inside the block")
    }
}

/// Why a peer's control block was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// Not a control block, or another format.
    #[error("node {node}'s control block has magic {magic:#x} / format {format}: not a Prescient {FORMAT} block")]
    Format {
        /// The peer.
        node: u8,
        /// Magic found.
        magic: u64,
        /// Format found.
        format: u8,
    },
    /// It names another node.
    #[error("the control block READ from node {expected} says it is node {found}")]
    WrongNode {
        /// The peer READ.
        expected: u8,
        /// What it says.
        found: u8,
    },
}

/// A checked copy of a peer's control block.
#[derive(Clone, Copy, Debug)]
pub struct ControlView {
    bytes: [u8; CONTROL_BYTES],
}

impl ControlView {
    /// Checks `bytes` READ from node `node`.
    pub fn new_checked(bytes: [u8; CONTROL_BYTES], node: u8) -> Result<Self, ControlError> {
        let magic = u64::from_le_bytes(bytes[0..8].try_into().expect("8 bytes"));
        if magic != MAGIC || bytes[8] != FORMAT {
            return Err(ControlError::Format { node, magic, format: bytes[8] });
        }
        if bytes[9] != node {
            return Err(ControlError::WrongNode { expected: node, found: bytes[9] });
        }
        Ok(Self { bytes })
    }

    fn u64_at(&self, at: usize) -> u64 {
        u64::from_le_bytes(self.bytes[at..at + 8].try_into().expect("8 bytes"))
    }

    /// The peer's incarnation.
    pub fn incarnation(&self) -> u32 {
        u32::from_le_bytes(self.bytes[12..16].try_into().expect("4 bytes"))
    }

    /// The peer's heartbeat.
    pub fn heartbeat(&self) -> u64 {
        self.u64_at(HEARTBEAT)
    }

    /// How often the peer, as a writer, has suspected node `j`.
    pub fn suspect(&self, j: u8) -> u64 {
        self.u64_at(suspect_at(j))
    }

    /// The epoch of node `j` the peer trusts again.
    pub fn readmitted(&self, j: u8) -> u64 {
        self.u64_at(readmitted_at(j))
    }

    /// The suspect epoch of writer `j` the peer has honored.
    pub fn honored(&self, j: u8) -> u64 {
        self.u64_at(honored_at(j))
    }

    /// The peer's leader word.
    pub fn leader(&self) -> u64 {
        self.u64_at(LEADER_AT)
    }

    /// The peer's sequencer counter.
    pub fn counter(&self) -> u64 {
        self.u64_at(COUNTER_AT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::emu::{ModelConfig, Network, SystemClock};

    #[test]
    fn a_block_reads_back_and_foreign_bytes_are_refused() {
        let net = Network::new(ModelConfig::ideal(), Arc::new(SystemClock::new())).unwrap();
        let node = net.node().unwrap();
        let block = ControlBlock::new(&node, 3, 7).unwrap();
        block.beat();
        block.beat();
        block.set_suspect(1, 5);
        block.set_readmitted(1, 4);
        block.set_honored(2, 9);
        let mut bytes = [0u8; CONTROL_BYTES];
        block.mr.memory().read(0, &mut bytes).unwrap();
        let view = ControlView::new_checked(bytes, 3).unwrap();
        assert_eq!((view.incarnation(), view.heartbeat()), (7, 2));
        assert_eq!((view.suspect(1), view.readmitted(1), view.honored(2), view.honored(1)), (5, 4, 9, 0));
        assert!(matches!(ControlView::new_checked(bytes, 4), Err(ControlError::WrongNode { expected: 4, found: 3 })));
        let mut bad = bytes;
        bad[0] ^= 1;
        assert!(matches!(ControlView::new_checked(bad, 3), Err(ControlError::Format { .. })));
        assert_eq!(&bytes[0..10], b"PRCTRL\0\0\x02\x03");
        assert_eq!((view.leader(), view.counter()), (0, 0));
        assert_eq!(block.cas_leader(0, 0x105), 0);
        assert_eq!(block.cas_leader(0, 0x206), 0x105, "a stale compare leaves the word");
        block.set_counter(1 << 40 | 1);
        assert_eq!(block.fetch_add_counter(16), 1 << 40 | 1);
        block.mr.memory().read(0, &mut bytes).unwrap();
        let view = ControlView::new_checked(bytes, 3).unwrap();
        assert_eq!((view.leader(), view.counter()), (0x105, 1 << 40 | 17));
    }
}
