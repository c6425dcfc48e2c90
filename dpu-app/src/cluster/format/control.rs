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
//!  40 + 24 N      persisted leader word: the leader word this node last wrote to its
//!                 `leader-word` file with fsync (0 in HLC mode)
//! ```
//! (N = [`NODES_MAX`].) Every field but the leader word and the counter has one writer,
//! this node, which stores aligned words; the leader word is also CASed by claimants
//! and the counter advanced by writers, both with remote atomics (so the block is
//! registered for them). Peers copy the whole block with one RDMA READ and check it here before
//! believing any of it: a heartbeat READ also carries the peer's leader word (how a
//! node that missed a claim learns of it) and its counter (how a new sequencer learns
//! how far a reachable old one got).
//!
//! The block is a shared mapping of the node's `control.prctl` file, so what remote
//! atomics put there outlives a crash of the DPU app: a claimant's CAS into the leader
//! word lands before the node notices it and writes its `leader-word` file, and a node
//! restarted in that window must still refuse the epoch it voted against
//! ([`ControlBlock::open`] carries the word over; every other field starts afresh).
//! The file lives in the page cache, so that covers a process crash but not a power
//! loss, which forgets the CAS until fsync. So a vote counts only once it is durable:
//! the node publishes the word it persisted (the persisted leader word), and a
//! claimant counts a node for its claim only once that node's persisted word is the
//! claim's (`protocol/sequencer.rs`, `settle_claim`). Format 2 (no persisted word)
//! files are read as such at a start and rewritten in format 3.
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

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
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
pub const CONTROL_BYTES: usize = 32 + 24 * NODES_MAX + 16;
const MAGIC: u64 = u64::from_le_bytes(*b"PRCTRL\0\0");
const FORMAT: u8 = 3;
/// The format before the persisted leader word: a start reads it and rewrites the file.
const FORMAT_2: u8 = 2;

const HEARTBEAT: usize = 16;
/// Where the leader word sits (peers CAS it).
pub const LEADER_AT: usize = 24;
/// Where the sequencer counter sits (writers FETCH_ADD it).
pub const COUNTER_AT: usize = 32 + 24 * NODES_MAX;
/// Where the persisted leader word sits (claimants READ it with the block).
const PERSISTED_AT: usize = COUNTER_AT + 8;
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

/// What a node's control file kept from its last run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Carried {
    /// The leader word as the last run left it (a claimant's CAS included, whether or
    /// not that run noticed it); carried into the new block.
    pub leader: u64,
    /// The sequencer counter as the last run left it (how far this node got if it
    /// sequenced); the new block starts from 0, so nothing is fetched from it again.
    pub counter: u64,
}

/// Why a node's control file could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControlFileError {
    /// The file could not be created, sized or mapped.
    #[error("cannot open control file {path}: {source}; check that the data folder is writable and has room")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file holds something other than this node's control block.
    #[error("{path} is not node {node}'s control block (magic {magic:#x}, format {format}, node {found}): the data folder belongs to another node or build; give this node its own folder, or move the file away if the folder is this node's (it forgets the sequencer epochs it voted for)")]
    Foreign {
        /// The file.
        path: PathBuf,
        /// The node opening it.
        node: u8,
        /// Magic found.
        magic: u64,
        /// Format found.
        format: u8,
        /// Node id found.
        found: u8,
    },
    /// Mapping or registering it.
    #[error("control file {path}: {source}")]
    Fabric {
        /// The file.
        path: PathBuf,
        /// Why.
        source: FabricError,
    },
}

impl ControlBlock {
    /// Node `node`'s block in `incarnation`, mapped from the file at `path` (created
    /// if missing) and registered on `fabric`, with what the file kept of the last run:
    /// the leader word carries over, every other field starts afresh (the counter at 0).
    pub fn open<F: Fabric>(
        fabric: &F,
        node: u8,
        incarnation: u32,
        path: &Path,
    ) -> Result<(Self, Carried), ControlFileError> {
        assert!((node as usize) < NODES_MAX);
        let io = |source| ControlFileError::Io { path: path.to_owned(), source };
        let fab = |source| ControlFileError::Fabric { path: path.to_owned(), source };
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).map_err(io)?;
        if file.metadata().map_err(io)?.len() < CONTROL_BYTES as u64 {
            file.set_len(CONTROL_BYTES as u64).map_err(io)?;
        }
        let memory = Memory::map_file(&file, 0, CONTROL_BYTES).map_err(fab)?;
        let mut old = [0u8; CONTROL_BYTES];
        memory.read(0, &mut old).map_err(fab)?;
        let carried = if old.iter().all(|&b| b == 0) {
            Carried::default()
        } else if old[0..8] == MAGIC.to_le_bytes() && old[8] == FORMAT_2 && old[9] == node {
            // The fields it has sit where they sit in format 3.
            let word = |at: usize| u64::from_le_bytes(old[at..at + 8].try_into().expect("8 bytes"));
            Carried { leader: word(LEADER_AT), counter: word(COUNTER_AT) }
        } else {
            let view = ControlView::new_checked(old, node).map_err(|_| ControlFileError::Foreign {
                path: path.to_owned(),
                node,
                magic: u64::from_le_bytes(old[0..8].try_into().expect("8 bytes")),
                format: old[8],
                found: old[9],
            })?;
            Carried { leader: view.leader(), counter: view.counter() }
        };
        // Every field afresh but the leader word: a zeroed block, then the new head.
        memory.write(0, &[0u8; CONTROL_BYTES]).map_err(fab)?;
        memory.store_u64(LEADER_AT, carried.leader).map_err(fab)?;
        let block = Self::init(fabric, memory, node, incarnation).map_err(fab)?;
        Ok((block, carried))
    }

    fn init<F: Fabric>(fabric: &F, memory: Memory, node: u8, incarnation: u32) -> Result<Self, FabricError> {
        let memory = Arc::new(memory);
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

    /// Publishes the leader word this node has persisted with fsync: from now on a
    /// claimant may count this node's vote for it.
    pub fn set_persisted_leader(&self, word: u64) {
        self.store(PERSISTED_AT, word);
    }

    /// Takes `add` stamps from this node's own counter, as a writer's FETCH_ADD would;
    /// returns the first.
    pub fn fetch_add_counter(&self, add: u64) -> u64 {
        self.mr.memory().fetch_add(COUNTER_AT, add).expect("aligned word inside the block")
    }
}

/// What a power loss leaves of the control file at `path` for the sequencer: the
/// leader word `persisted` (the `leader-word` file's, written with fsync), whatever
/// claimants CASed in since. For the in-process cluster's power-loss fault.
pub fn keep_persisted_leader(path: &Path, persisted: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let file = OpenOptions::new().write(true).open(path)?;
    file.write_all_at(&persisted.to_le_bytes(), LEADER_AT as u64)
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

    /// The leader word the peer has persisted (its vote, durable).
    pub fn persisted_leader(&self) -> u64 {
        self.u64_at(PERSISTED_AT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::emu::{ModelConfig, Network, SystemClock};

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("prescient-control-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_block_reads_back_and_foreign_bytes_are_refused() {
        let net = Network::new(ModelConfig::ideal(), Arc::new(SystemClock::new())).unwrap();
        let node = net.node().unwrap();
        let dir = temp_dir("reads");
        let (block, carried) = ControlBlock::open(&node, 3, 7, &dir.join("control.prctl")).unwrap();
        assert_eq!(carried, Carried::default(), "a new file carries nothing");
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
        assert_eq!(&bytes[0..10], b"PRCTRL\0\0\x03\x03");
        assert_eq!((view.leader(), view.counter()), (0, 0));
        assert_eq!(block.cas_leader(0, 0x105), 0);
        assert_eq!(block.cas_leader(0, 0x206), 0x105, "a stale compare leaves the word");
        block.set_counter(1 << 40 | 1);
        assert_eq!(block.fetch_add_counter(16), 1 << 40 | 1);
        block.mr.memory().read(0, &mut bytes).unwrap();
        let view = ControlView::new_checked(bytes, 3).unwrap();
        assert_eq!((view.leader(), view.counter()), (0x105, 1 << 40 | 17));
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A claimant's CAS lands in the file-backed block before the node notices it; a
    /// node that crashed then must still hold the word after its restart (and only the
    /// word: the counter it sequenced is not handed out again).
    #[test]
    fn a_restart_keeps_the_leader_word_a_claimant_cased_in_and_nothing_else() {
        let net = Network::new(ModelConfig::ideal(), Arc::new(SystemClock::new())).unwrap();
        let node = net.node().unwrap();
        let dir = temp_dir("restart");
        let path = dir.join("control.prctl");
        let (block, _) = ControlBlock::open(&node, 2, 1, &path).unwrap();
        assert_eq!(block.cas_leader(0, 0x201), 0);
        block.set_counter(2 << 40 | 9);
        block.beat();
        block.set_suspect(4, 77);
        drop(block);
        let (block, carried) = ControlBlock::open(&node, 2, 2, &path).unwrap();
        assert_eq!(carried, Carried { leader: 0x201, counter: 2 << 40 | 9 });
        let mut bytes = [0u8; CONTROL_BYTES];
        block.mr.memory().read(0, &mut bytes).unwrap();
        let view = ControlView::new_checked(bytes, 2).unwrap();
        assert_eq!((view.leader(), view.counter(), view.heartbeat()), (0x201, 0, 0));
        assert_eq!((view.incarnation(), view.suspect(4), view.honored(4)), (2, first_epoch(2), 0));
        drop(block);
        // Another node's folder is refused by name, not silently reset.
        let err = ControlBlock::open(&node, 3, 1, &path).unwrap_err();
        assert!(matches!(err, ControlFileError::Foreign { node: 3, found: 2, .. }), "{err}");
        std::fs::write(&path, [0xabu8; CONTROL_BYTES]).unwrap();
        assert!(matches!(ControlBlock::open(&node, 2, 3, &path), Err(ControlFileError::Foreign { .. })));
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A data folder of the format before the persisted leader word keeps its vote.
    #[test]
    fn a_format_2_file_carries_its_leader_word_into_format_3() {
        let net = Network::new(ModelConfig::ideal(), Arc::new(SystemClock::new())).unwrap();
        let node = net.node().unwrap();
        let dir = temp_dir("format2");
        let path = dir.join("control.prctl");
        let mut old = vec![0u8; CONTROL_BYTES - 8];
        old[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        (old[8], old[9]) = (FORMAT_2, 1);
        old[LEADER_AT..LEADER_AT + 8].copy_from_slice(&0x302u64.to_le_bytes());
        std::fs::write(&path, &old).unwrap();
        let (block, carried) = ControlBlock::open(&node, 1, 4, &path).unwrap();
        assert_eq!(carried.leader, 0x302);
        block.set_persisted_leader(0x302);
        let mut bytes = [0u8; CONTROL_BYTES];
        block.mr.memory().read(0, &mut bytes).unwrap();
        let view = ControlView::new_checked(bytes, 1).unwrap();
        assert_eq!((view.leader(), view.persisted_leader()), (0x302, 0x302));
        let _ = std::fs::remove_dir_all(dir);
    }
}
