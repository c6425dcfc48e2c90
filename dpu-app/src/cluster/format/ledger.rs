//! A holder's stamp ledger (`ordering = "sequencer"`, issue 16): per writer, which of
//! its stamped writes this node accepted (acknowledged a fragment of) and which it has
//! since rolled back, in a file its peers can READ.
//!
//! Why it exists: once a writer is gone for good, the fates of its last stamps can
//! only be learned from its writes' holders (`dpu-app/src/cluster/README.md`, "Not built"). There, a write a
//! quorum of holders accepted and did not roll back is committed; one that more than
//! `holders - quorum` holders lack is not. The store cannot answer that: it drops a
//! version once a newer one of its key commits, and nobody else knows a dead writer's
//! keys. The ledger can, for as long as the writer's fate ring could: it keeps, per
//! writer, one entry per write number (`write_seq`), at `write_seq % entries` with as
//! many entries as a fate ring (`fate_entries`). A writer takes a fate-ring entry per
//! write and never overwrites one still Pending, so an entry here is overwritten only
//! by a write the writer took a whole ring later, once the older write's fate is final
//! in its ring. The fate ring records each write's number (mod 2^24), so a ring's
//! entry leads to its ledger entries on every holder.
//!
//! What is recorded, always before the acknowledgement that tells the writer:
//! - [`LedgerState::Held`]: a fragment of the write was accepted (stored, or already
//!   superseded by a newer version of its key: either way acknowledged as persisted,
//!   which the writer counts towards its quorum). The writer records its own fragment
//!   too, in its own part of its ledger.
//! - [`LedgerState::RolledBack`]: the writer's rollback of the write was persisted
//!   here (whether or not a fragment ever was). Sticky: a fragment of the same write
//!   arriving later does not turn it back to Held.
//!
//! An entry only moves forward in write number: a late fragment or rollback of an
//! older write never overwrites a newer write's entry.
//!
//! **Fences.** Once writer `w` has been silent for the cluster's `fence_after`, this
//! node fences it (`protocol/fence.rs`): from then on its part of the ledger is frozen
//! for every write the fence covers. Fragments of those writes are refused, and the
//! rollback of one held here is not taken (it stays Held); a rollback of one never held
//! may still land (to the holders' rule, never held and rolled back are the same). A
//! reader that READs the fence and then the entries has what they will always say, so
//! the holders' rule can decide the writer's stamps from them
//! (`cluster/holders_rule.rs`). A fence covers every write of `w` until `w` connects
//! again (back from a partition, or restarted): its Hello says the first write number
//! `n` it may still take, and the fence is narrowed to the writes below `n` (they stay
//! frozen for good; the later ones are taken as usual).
//!
//! File layout: a 4096-byte header page (magic "PRSCLEDG", format 1, node, nodes,
//! entries, CRC32C in the common layout of [`super::file`]; from byte 1024, a 24-byte
//! fence slot per writer: 0..8 the first write number not frozen (0: no fence,
//! `u64::MAX`: every write), 8..12 the writer's incarnation when fenced, 12..16 how many
//! times the slot changed (a reader that finds it the same before and after READing
//! entries knows they were frozen meanwhile), 16..20 zero, 20..24 CRC32C of 0..20),
//! then, for each writer
//! `w` in `0..nodes`, `entries` (a power of two, at most 2^24) 32-byte entries; write
//! `s` of writer `w` uses entry `w * entries + s % entries`. An entry, all integers
//! little-endian:
//!
//! ```text
//!  0..8 write_seq   8..16 stamp (version << 8 | writer)   16..24 key hash
//! 24..28 word: bits 0..4 state (1 Held, 2 RolledBack), bit 4 tombstone
//! 28..32 CRC32C of 0..28
//! ```
//!
//! Only this node's CPU writes it, with plain stores: a READ that meets an entry being
//! written sees a bad checksum and reads it again. A writer can only ever fill its own
//! part: the writer of an entry is the link it came on, not anything it claims.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::file::{self, le32, le64, FileHeader, HeaderError, Opened};
use crate::fabric::{Access, Fabric, FabricError, Memory, MemoryRegion, RemoteRegion};
use crate::limits::{FATE_ENTRIES_MAX, FATE_ENTRIES_MIN, HEADER_PAGE_BYTES, LEDGER_ENTRY_BYTES, NODES_MAX};

/// Where the fence slots start in the header page.
pub const FENCES_AT: usize = 1024;
/// Bytes of one writer's fence slot.
pub const FENCE_LEN: usize = 24;
/// Bytes of every writer's fence slot: one READ gets them all.
pub const FENCES_LEN: usize = NODES_MAX * FENCE_LEN;
const _: () = assert!(FENCES_AT + FENCES_LEN <= HEADER_PAGE_BYTES);

/// A holder's fence of one writer (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fence {
    /// The first write number not frozen: `u64::MAX` while the fence covers every write
    /// of the writer (it has not connected since).
    pub frozen_below: u64,
    /// The writer's incarnation when it was fenced (for messages).
    pub incarnation: u32,
    /// Times the slot changed: a fence read twice with the same count did not change
    /// in between.
    pub changes: u32,
}

impl Fence {
    /// Every write of the writer is frozen (it has not connected since).
    pub fn is_whole(&self) -> bool {
        self.frozen_below == u64::MAX
    }

    /// Write `write_seq` of the writer is frozen here.
    pub fn freezes(&self, write_seq: u64) -> bool {
        write_seq < self.frozen_below
    }

    /// The write a fate ring records with number `write_seq` mod 2^24
    /// (`FateEntry::write_seq`) is frozen here. Exact for writes within 2^23 of the
    /// fence's bound (a fate ring holds at most 2^24 entries, so the writes an applier
    /// asks about are that close).
    pub fn freezes_recorded(&self, write_seq: u32) -> bool {
        if self.is_whole() {
            return true;
        }
        let below = (self.frozen_below as u32).wrapping_sub(write_seq) & WRITE_SEQ_MASK;
        below != 0 && below <= WRITE_SEQ_MASK / 2 + 1
    }

    fn emit(&self) -> [u8; FENCE_LEN] {
        let mut b = [0u8; FENCE_LEN];
        b[0..8].copy_from_slice(&self.frozen_below.to_le_bytes());
        b[8..12].copy_from_slice(&self.incarnation.to_le_bytes());
        b[12..16].copy_from_slice(&self.changes.to_le_bytes());
        let crc = crc32c::crc32c(&b[..20]);
        b[20..24].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// A fence slot as read: `Ok(None)` if the writer is not fenced, `Err(())` if the
    /// slot is torn (being written: read it again).
    #[allow(clippy::result_unit_err)]
    pub fn parse(b: &[u8]) -> Result<Option<Self>, ()> {
        let b: &[u8; FENCE_LEN] = b.get(..FENCE_LEN).and_then(|b| b.try_into().ok()).ok_or(())?;
        if b.iter().all(|&v| v == 0) {
            return Ok(None);
        }
        if crc32c::crc32c(&b[..20]) != le32(&b[20..24]) || b[16..20] != [0; 4] {
            return Err(());
        }
        let fence = Self { frozen_below: le64(&b[0..8]), incarnation: le32(&b[8..12]), changes: le32(&b[12..16]) };
        Ok((fence.frozen_below != 0).then_some(fence))
    }

    /// Writer `w`'s fence in a READ of every slot (`FENCES_LEN` bytes from
    /// [`FENCES_AT`]).
    #[allow(clippy::result_unit_err)]
    pub fn of(slots: &[u8], w: u8) -> Result<Option<Self>, ()> {
        slots.get(w as usize * FENCE_LEN..).map_or(Err(()), Self::parse)
    }
}

/// Magic of a stamp ledger file.
pub const MAGIC: &[u8; 8] = b"PRSCLEDG";
/// Bytes of one entry.
pub const ENTRY_LEN: usize = LEDGER_ENTRY_BYTES;
/// Where the entries start.
pub const ENTRIES_AT: usize = HEADER_PAGE_BYTES;
/// The bits of a write number a fate ring keeps (`FateEntry::write_seq`): entries per
/// writer are at most this many plus one, so they find the entry.
const WRITE_SEQ_MASK: u32 = (1 << 24) - 1;
const _: () = assert!(FATE_ENTRIES_MAX <= WRITE_SEQ_MASK + 1);

/// Byte ranges of an entry's fields.
pub mod field {
    use std::ops::Range;
    /// The writer's write number.
    pub const WRITE_SEQ: Range<usize> = 0..8;
    /// The write's stamp (`version << 8 | writer`).
    pub const STAMP: Range<usize> = 8..16;
    /// Hash of the key written.
    pub const KEY_HASH: Range<usize> = 16..24;
    /// State and tombstone.
    pub const WORD: Range<usize> = 24..28;
    /// Checksum of the bytes before it.
    pub const CRC: Range<usize> = 28..32;
}

const _: () = assert!(field::CRC.end == ENTRY_LEN);

/// What this node has of one write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LedgerState {
    /// A fragment was accepted and not rolled back.
    Held = 1,
    /// The writer's rollback was persisted here.
    RolledBack = 2,
}

/// One entry of a ledger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LedgerEntry {
    /// The writer's write number.
    pub write_seq: u64,
    /// The write's stamp (`version << 8 | writer`).
    pub stamp: u64,
    /// Hash of the key written.
    pub key_hash: u64,
    /// What this node has of it.
    pub state: LedgerState,
    /// The write deletes the key.
    pub tombstone: bool,
}

impl LedgerEntry {
    /// The entry's bytes.
    pub fn emit(&self) -> [u8; ENTRY_LEN] {
        let mut b = [0u8; ENTRY_LEN];
        b[field::WRITE_SEQ].copy_from_slice(&self.write_seq.to_le_bytes());
        b[field::STAMP].copy_from_slice(&self.stamp.to_le_bytes());
        b[field::KEY_HASH].copy_from_slice(&self.key_hash.to_le_bytes());
        let word = self.state as u32 | u32::from(self.tombstone) << 4;
        b[field::WORD].copy_from_slice(&word.to_le_bytes());
        let crc = crc32c::crc32c(&b[..field::CRC.start]);
        b[field::CRC].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// It is of the write a fate ring records with number `write_seq` mod 2^24
    /// (`FateEntry::write_seq`) and stamp `stamp`.
    pub fn is_of(&self, write_seq: u32, stamp: u64) -> bool {
        self.stamp == stamp && self.write_seq & u64::from(WRITE_SEQ_MASK) == u64::from(write_seq)
    }

    /// An entry as read (from this node's file or a peer's): `None` if it was never
    /// written, is torn (being written), or is not one this build writes.
    pub fn parse(b: &[u8]) -> Option<Self> {
        let b: &[u8; ENTRY_LEN] = b.get(..ENTRY_LEN)?.try_into().ok()?;
        if crc32c::crc32c(&b[..field::CRC.start]) != le32(&b[field::CRC]) {
            return None;
        }
        let word = le32(&b[field::WORD]);
        let state = match word & 0xf {
            1 => LedgerState::Held,
            2 => LedgerState::RolledBack,
            _ => return None,
        };
        if word & !0x1f != 0 {
            return None;
        }
        Some(Self {
            write_seq: le64(&b[field::WRITE_SEQ]),
            stamp: le64(&b[field::STAMP]),
            key_hash: le64(&b[field::KEY_HASH]),
            state,
            tombstone: word & 0x10 != 0,
        })
    }
}

/// What failed with a ledger.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerError {
    /// The geometry is out of range.
    #[error("stamp ledger of {nodes} nodes with {entries} entries each is out of range: entries must be a power of two from {FATE_ENTRIES_MIN} to {FATE_ENTRIES_MAX} (the cluster's `fate_entries`), nodes at most {NODES_MAX}")]
    Geometry {
        /// Nodes given.
        nodes: usize,
        /// Entries given.
        entries: u32,
    },
    /// Opening, creating or reading the file failed.
    #[error("cannot {action} stamp ledger {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not a ledger of this format, or of another node or geometry.
    #[error("{path} is not node {node}'s stamp ledger for {nodes} nodes with {entries} entries each ({why}); the data folder belongs to another node or configuration: give this node its own folder")]
    Foreign {
        /// The file.
        path: PathBuf,
        /// Who opens it.
        node: u8,
        /// Nodes of the cluster.
        nodes: usize,
        /// Entries per writer.
        entries: u32,
        /// What is wrong.
        why: String,
    },
    /// Mapping, registering or flushing the file.
    #[error("stamp ledger {path}: {source}")]
    Fabric {
        /// The file.
        path: PathBuf,
        /// Why.
        source: FabricError,
    },
}

/// A node's stamp ledger: written by this node as it accepts and rolls back other
/// writers' fragments (and its own), READ by every peer.
pub struct Ledger {
    path: PathBuf,
    nodes: usize,
    entries: u32,
    mr: Arc<MemoryRegion>,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("path", &self.path)
            .field("nodes", &self.nodes)
            .field("entries", &self.entries)
            .finish()
    }
}

impl Ledger {
    /// Bytes of the file of a ledger for `nodes` writers with `entries` entries each.
    pub fn file_bytes(nodes: usize, entries: u32) -> u64 {
        (ENTRIES_AT + nodes * entries as usize * ENTRY_LEN) as u64
    }

    /// Opens node `node`'s ledger at `path` for `nodes` writers with `entries` entries
    /// each (or creates it), and registers it on `fabric` for peers to READ.
    pub fn open<F: Fabric>(fabric: &F, path: &Path, node: u8, nodes: usize, entries: u32) -> Result<Self, LedgerError> {
        if !entries.is_power_of_two()
            || !(FATE_ENTRIES_MIN..=FATE_ENTRIES_MAX).contains(&entries)
            || nodes == 0
            || nodes > NODES_MAX
        {
            return Err(LedgerError::Geometry { nodes, entries });
        }
        let file_bytes = Self::file_bytes(nodes, entries);
        let mut page = vec![0u8; HEADER_PAGE_BYTES];
        FileHeader { ids: [node, nodes as u8], params: [entries] }.emit(MAGIC, &mut page);
        let io = |e: file::FileIoError| LedgerError::Io { action: e.action, path: path.to_owned(), source: e.source };
        let foreign = |why: String| LedgerError::Foreign { path: path.to_owned(), node, nodes, entries, why };
        let file = match file::open_or_create(path, &page, file_bytes).map_err(io)? {
            Opened::Created(file) => file,
            Opened::Existing { file, page, len } => {
                let found = FileHeader::<1>::parse(MAGIC, &page).map_err(|e: HeaderError| foreign(e.to_string()))?;
                if (found.ids, found.params[0]) != ([node, nodes as u8], entries) {
                    return Err(foreign(format!(
                        "made for node {} of {} with {} entries",
                        found.ids[0], found.ids[1], found.params[0]
                    )));
                }
                if len != file_bytes {
                    return Err(foreign(format!("{len} bytes, its header says {file_bytes}")));
                }
                file
            }
        };
        let fab = |source| LedgerError::Fabric { path: path.to_owned(), source };
        let memory = Memory::map_file(&file, 0, file_bytes as usize).map_err(fab)?;
        // Peers READ it; only this node's CPU writes it.
        let mr = fabric.register(Arc::new(memory), Access::REMOTE_READ).map_err(fab)?;
        Ok(Self { path: path.to_owned(), nodes, entries, mr })
    }

    /// Where peers READ it.
    pub fn remote(&self) -> RemoteRegion {
        self.mr.remote()
    }

    /// Entries per writer (a power of two).
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// The byte offset of writer `w`'s entry for write `write_seq` in the file (and in
    /// its registered region).
    pub fn offset(entries: u32, w: u8, write_seq: u64) -> usize {
        ENTRIES_AT + (w as usize * entries as usize + (write_seq % u64::from(entries)) as usize) * ENTRY_LEN
    }

    fn slot(&self, w: u8, write_seq: u64) -> Option<LedgerEntry> {
        let mut b = [0u8; ENTRY_LEN];
        self.mr.memory().read(Self::offset(self.entries, w, write_seq), &mut b).ok()?;
        LedgerEntry::parse(&b)
    }

    /// Writer `w`'s entry for write `write_seq`, if the ledger holds it (not overwritten
    /// by a later write, and written at all).
    pub fn at(&self, w: u8, write_seq: u64) -> Option<LedgerEntry> {
        self.slot(w, write_seq).filter(|e| e.write_seq == write_seq)
    }

    /// Writer `w`'s entry for the write its fate ring records with number `write_seq`
    /// mod 2^24 (`FateEntry::write_seq`) and stamp `stamp`, if the ledger holds it.
    pub fn for_stamp(&self, w: u8, write_seq: u32, stamp: u64) -> Option<LedgerEntry> {
        self.slot(w, u64::from(write_seq)).filter(|e| e.is_of(write_seq, stamp))
    }

    /// Whatever writer `w`'s entry where write `write_seq` goes holds (for messages).
    pub fn at_slot(&self, w: u8, write_seq: u64) -> Option<LedgerEntry> {
        self.slot(w, write_seq)
    }

    /// Every entry of writer `w` the ledger holds, in slot order (for checks and a
    /// restart, not the data path).
    pub fn of_writer(&self, w: u8) -> Vec<LedgerEntry> {
        if w as usize >= self.nodes {
            return Vec::new();
        }
        (0..u64::from(self.entries)).filter_map(|s| self.slot(w, s)).collect()
    }

    /// Records `e` where its write number goes, unless that entry is of a later write,
    /// or is this write's rollback and `e` would take it back to Held; whether it was
    /// written. A writer `w` out of range is ignored (false).
    fn put(&self, w: u8, e: LedgerEntry) -> bool {
        if w as usize >= self.nodes {
            return false;
        }
        if let Some(old) = self.slot(w, e.write_seq) {
            if old.write_seq > e.write_seq || (old.write_seq == e.write_seq && old.state == LedgerState::RolledBack) {
                return false;
            }
            if old == e {
                return false;
            }
        }
        self.mr
            .memory()
            .write(Self::offset(self.entries, w, e.write_seq), &e.emit())
            .expect("an entry inside the ledger");
        true
    }

    /// This node accepted a fragment of writer `w`'s write `write_seq` (stamp `stamp`,
    /// key `key_hash`): whether the entry changed.
    pub fn accept(&self, w: u8, write_seq: u64, stamp: u64, key_hash: u64, tombstone: bool) -> bool {
        self.put(w, LedgerEntry { write_seq, stamp, key_hash, state: LedgerState::Held, tombstone })
    }

    /// This node persisted writer `w`'s rollback of write `write_seq`: whether the entry
    /// changed.
    pub fn roll_back(&self, w: u8, write_seq: u64, stamp: u64, key_hash: u64) -> bool {
        // The tombstone bit of a rollback is kept from the entry it replaces (an
        // outcome record does not carry it; nothing reads it of a rolled-back write).
        let tombstone = self.at(w, write_seq).is_some_and(|e| e.tombstone);
        self.put(w, LedgerEntry { write_seq, stamp, key_hash, state: LedgerState::RolledBack, tombstone })
    }

    /// This node's fence of writer `w`, if any.
    pub fn fence_of(&self, w: u8) -> Option<Fence> {
        if w as usize >= self.nodes {
            return None;
        }
        let mut b = [0u8; FENCE_LEN];
        self.mr.memory().read(FENCES_AT + w as usize * FENCE_LEN, &mut b).ok()?;
        // Only this thread writes the slots: a torn one cannot be read here.
        Fence::parse(&b).ok().flatten()
    }

    fn put_fence(&self, w: u8, fence: Fence) -> Result<(), LedgerError> {
        let at = FENCES_AT + w as usize * FENCE_LEN;
        let fab = |source| LedgerError::Fabric { path: self.path.clone(), source };
        self.mr.memory().write(at, &fence.emit()).map_err(fab)?;
        // A fence that a crash forgot could let a fragment it refused in later: always
        // on disk before anything relies on it.
        self.mr.memory().flush_range(at, FENCE_LEN).map_err(fab)
    }

    /// Fences writer `w` (last known as incarnation `incarnation`), every write of it
    /// (see the module doc): whether the slot changed. A writer out of range is
    /// ignored.
    pub fn fence(&self, w: u8, incarnation: u32) -> Result<bool, LedgerError> {
        if w as usize >= self.nodes {
            return Ok(false);
        }
        let old = self.fence_of(w);
        if old.is_some_and(|f| f.is_whole()) {
            return Ok(false);
        }
        let changes = old.map_or(1, |f| f.changes.wrapping_add(1));
        self.put_fence(w, Fence { frozen_below: u64::MAX, incarnation, changes })?;
        Ok(true)
    }

    /// Writer `w` connected again, its next write number `below`: the fence keeps the
    /// writes below it frozen and lets the rest be taken. Whether the slot changed
    /// (false if `w` is not fenced, or the fence is narrower already).
    pub fn narrow(&self, w: u8, below: u64) -> Result<bool, LedgerError> {
        let Some(old) = self.fence_of(w) else { return Ok(false) };
        if !old.is_whole() || below == u64::MAX || below == 0 {
            return Ok(false);
        }
        self.put_fence(w, Fence { frozen_below: below, changes: old.changes.wrapping_add(1), ..old })?;
        Ok(true)
    }

    /// `len` bytes of the registered file from `at`, as a peer's READ would bring them
    /// (tests of the readers).
    #[cfg(test)]
    pub(crate) fn bytes_at(&self, at: usize, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        self.mr.memory().read(at, &mut b).expect("inside the ledger");
        b
    }

    /// Flushes writer `w`'s entry for `write_seq` to the disk (`durability = "sync"`).
    pub fn sync(&self, w: u8, write_seq: u64) -> Result<(), LedgerError> {
        self.mr
            .memory()
            .flush_range(Self::offset(self.entries, w, write_seq), ENTRY_LEN)
            .map_err(|source| LedgerError::Fabric { path: self.path.clone(), source })
    }
}

#[cfg(test)]
mod tests {
    use super::super::file::testing::TempDir;
    use super::*;
    use crate::fabric::emu::{EmuNode, ModelConfig, Network, SystemClock};

    fn fabric() -> EmuNode {
        let net = Network::new(ModelConfig::ideal(), Arc::new(SystemClock::new())).unwrap();
        net.node().unwrap()
    }

    fn open(dir: &TempDir, entries: u32) -> Ledger {
        Ledger::open(&fabric(), &dir.file("ledger"), 1, 3, entries).unwrap()
    }

    #[test]
    fn entries_are_found_again_after_a_reopen() {
        let dir = TempDir::new("ledger-reopen");
        {
            let l = open(&dir, 8);
            assert!(l.accept(0, 5, 0x500, 0xaa, true));
            assert!(l.accept(2, 5, 0x702, 0xbb, false));
            assert!(l.roll_back(2, 6, 0x802, 0xcc));
        }
        let l = open(&dir, 8);
        let e = l.at(0, 5).unwrap();
        assert_eq!((e.stamp, e.key_hash, e.state, e.tombstone), (0x500, 0xaa, LedgerState::Held, true));
        assert_eq!(l.at(2, 5).map(|e| e.stamp), Some(0x702), "each writer has its own part");
        assert_eq!(l.at(2, 6).map(|e| e.state), Some(LedgerState::RolledBack), "a rollback with no fragment");
        assert_eq!(l.at(1, 5), None, "never written");
        assert_eq!(l.of_writer(2).len(), 2);
    }

    #[test]
    fn a_rollback_is_sticky_and_entries_only_move_forward() {
        let dir = TempDir::new("ledger-forward");
        let l = open(&dir, 8);
        assert!(l.accept(0, 3, 0x300, 1, false));
        assert!(!l.accept(0, 3, 0x300, 1, false), "the same again changes nothing");
        assert!(l.roll_back(0, 3, 0x300, 1));
        assert!(!l.accept(0, 3, 0x300, 1, false), "a late fragment does not undo the rollback");
        assert_eq!(l.at(0, 3).unwrap().state, LedgerState::RolledBack);
        // Write 11 takes write 3's entry (11 % 8); neither 3's rollback nor a fragment
        // of it takes it back.
        assert!(l.accept(0, 11, 0x1100, 2, false));
        assert!(!l.roll_back(0, 3, 0x300, 1));
        assert!(!l.accept(0, 3, 0x300, 1, false));
        assert_eq!(l.at(0, 3), None);
        assert_eq!(l.at(0, 11).unwrap().state, LedgerState::Held);
    }

    #[test]
    fn a_torn_or_foreign_entry_reads_as_absent() {
        let e = LedgerEntry { write_seq: 9, stamp: 0x900, key_hash: 3, state: LedgerState::Held, tombstone: false };
        let mut b = e.emit();
        assert_eq!(LedgerEntry::parse(&b), Some(e));
        b[17] ^= 1;
        assert_eq!(LedgerEntry::parse(&b), None, "torn");
        let mut w = e.emit();
        w[field::WORD].copy_from_slice(&3u32.to_le_bytes());
        let crc = crc32c::crc32c(&w[..field::CRC.start]);
        w[field::CRC].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(LedgerEntry::parse(&w), None, "no such state");
        assert_eq!(LedgerEntry::parse(&[0u8; ENTRY_LEN]), None, "never written");
        assert_eq!(LedgerEntry::parse(&b[..8]), None, "short");
    }

    #[test]
    fn a_ledger_of_another_geometry_or_node_is_refused() {
        let dir = TempDir::new("ledger-foreign");
        drop(open(&dir, 8));
        let (path, fabric) = (dir.file("ledger"), fabric());
        let err = Ledger::open(&fabric, &path, 1, 3, 16).unwrap_err();
        assert!(matches!(err, LedgerError::Foreign { .. }), "{err}");
        let err = Ledger::open(&fabric, &path, 2, 3, 8).unwrap_err();
        assert!(err.to_string().contains("give this node its own folder"), "{err}");
        let err = Ledger::open(&fabric, &path, 1, 3, 12).unwrap_err();
        assert!(matches!(err, LedgerError::Geometry { .. }), "{err}");
    }

    #[test]
    fn a_fence_survives_a_reopen_and_is_narrowed_only_once() {
        let dir = TempDir::new("ledger-fence");
        {
            let l = open(&dir, 8);
            assert_eq!(l.fence_of(2), None);
            assert!(l.fence(2, 7).unwrap());
            assert!(!l.fence(2, 8).unwrap(), "fenced already");
        }
        let l = open(&dir, 8);
        let f = l.fence_of(2).unwrap();
        assert_eq!(f, Fence { frozen_below: u64::MAX, incarnation: 7, changes: 1 });
        assert!(f.freezes(u64::MAX - 1) && f.freezes_recorded(5));
        assert_eq!(l.fence_of(0), None, "each writer has its own slot");
        assert!(l.narrow(2, 40).unwrap());
        assert!(!l.narrow(2, 50).unwrap(), "narrowed once, when the writer first connects again");
        let f = l.fence_of(2).unwrap();
        assert!(f.freezes(39) && !f.freezes(40));
        assert!(f.freezes_recorded(39) && !f.freezes_recorded(40) && !f.freezes_recorded(41));
        // A fence again (that incarnation went silent too) freezes everything, the writes
        // below 40 still included.
        assert!(l.fence(2, 8).unwrap());
        assert!(l.fence_of(2).unwrap().freezes(39));
        assert_eq!(l.fence_of(2).unwrap().changes, 3, "every change counted");
        assert!(!l.narrow(0, 3).unwrap(), "not fenced: nothing to narrow");
    }

    #[test]
    fn fence_slots_read_remotely_tell_none_torn_and_fenced_apart() {
        let dir = TempDir::new("ledger-fence-remote");
        let l = open(&dir, 8);
        l.fence(1, 3).unwrap();
        let mut slots = vec![0u8; FENCES_LEN];
        l.mr.memory().read(FENCES_AT, &mut slots).unwrap();
        assert_eq!(Fence::of(&slots, 0), Ok(None));
        assert_eq!(Fence::of(&slots, 1), Ok(Some(Fence { frozen_below: u64::MAX, incarnation: 3, changes: 1 })));
        slots[FENCE_LEN + 9] ^= 1;
        assert_eq!(Fence::of(&slots, 1), Err(()), "torn");
        assert_eq!(Fence::of(&slots, NODES_MAX as u8), Err(()), "out of range");
        // Recorded write numbers are compared mod 2^24 near the bound.
        let f = Fence { frozen_below: (1 << 24) + 3, incarnation: 1, changes: 1 };
        assert!(f.freezes_recorded(2) && f.freezes_recorded(WRITE_SEQ_MASK) && !f.freezes_recorded(3));
    }

    #[test]
    fn a_writer_out_of_range_writes_nothing() {
        let dir = TempDir::new("ledger-range");
        let l = open(&dir, 8);
        assert!(!l.accept(3, 1, 0x103, 1, false));
        assert!(l.of_writer(3).is_empty());
    }
}
