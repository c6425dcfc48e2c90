//! A node's fate ring (`ordering = "sequencer"`, issue 16 part 4): what became of every
//! sequencer stamp this node took, in the order it took them, in a file its peers READ.
//!
//! Every node applies the cluster's writes in stamp order, and for that it must learn
//! the fate of every stamp: a committed write (which key), or none. The node that took
//! a stamp is the one that knows, so each node records its own stamps here and every
//! applier pulls the rings of all nodes with one-sided READs (`protocol/fates.rs`). A
//! pull needs no delivery protocol: an applier that missed a round, restarted or was
//! cut off reads again from where it stopped, and a writer's ring outlives its crash.
//!
//! What a writer records, in the order it happens:
//! - [`FateKind::Block`]: a block of stamps fetched from the sequencer, recorded before
//!   any of it is used (so a stamp no ring records as part of a block was never used);
//! - [`FateKind::Pending`]: a stamp given to a write (key hash, tombstone, the write's
//!   number mod 2^24, which finds its entry in every holder's stamp ledger,
//!   `format/ledger.rs`), later turned
//!   in place into [`FateKind::Committed`] when it commits, or [`FateKind::Aborted`]
//!   once its rollback reached enough holders that fewer than a quorum can still hold
//!   its fragment (`protocol/rollbacks.rs`; a restart decides what its crash left
//!   Pending from the outcome table, by the same rule);
//! - [`FateKind::Unused`]: the rest of a block dropped unused (`count` stamps from
//!   `version`), also the rests a crash left in hand (found again at the restart);
//! - [`FateKind::Epoch`]: the node moved to a newer sequencer epoch (`version` is its
//!   first stamp): it never takes a stamp of an older epoch again. Once every node's
//!   ring shows such a marker above epoch `e`, the stamps of `e` its rings record are
//!   all there will ever be, and every other stamp of `e` is a no-op.
//!
//! File layout: a 4096-byte header page (magic "PRSCFATE", format 1, node, entries, CRC32C
//! in the common layout of [`super::file`]), whose bytes 64..72 hold this node's applied
//! cursor (the next stamp its applier releases; 0: none yet), 72..80 the next position to
//! be written, and 80..88 the end of the stamps of every entry overwritten so far (an
//! applier whose cursor is at or above it needs nothing that is gone), then `entries` (a
//! power of two) 32-byte entries; position `p` (1, 2, ...) uses entry `p % entries`. An entry,
//! all integers little-endian:
//!
//! ```text
//!  0..8 position   8..16 version   16..24 key hash   24..28 word   28..32 CRC32C of 0..28
//!  word: bits 0..4 kind, bit 4 tombstone, bits 8..32 count (stamps from `version`;
//!        for Pending, Committed and Aborted, which cover one stamp, the write's number
//!        mod 2^24 instead; 0 for Epoch)
//! ```
//!
//! Only this node's CPU writes the ring, with plain stores: a READ that meets an entry
//! being written sees a bad checksum and reads it again later. An entry is overwritten
//! `entries` positions later only once it is no longer Pending; an applier that fell
//! further behind than the ring holds finds positions missing and says so.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::file::{self, le32, le64, FileHeader, HeaderError, Opened};
use crate::cluster::sequence::epoch_of;
use crate::fabric::{Access, Fabric, FabricError, Memory, MemoryRegion, RemoteRegion};
use crate::limits::{FATE_ENTRIES_MAX, FATE_ENTRIES_MIN, FATE_ENTRY_BYTES, HEADER_PAGE_BYTES};

/// Magic of a fate ring file.
pub const MAGIC: &[u8; 8] = b"PRSCFATE";
/// Bytes of one entry.
pub const ENTRY_LEN: usize = FATE_ENTRY_BYTES;
/// Where in the header page the applied cursor is kept.
pub const CURSOR_AT: usize = 64;
/// Where in the header page the next position to be written is published.
pub const NEXT_AT: usize = 72;
/// Where in the header page the end of the stamps of every overwritten entry is kept.
pub const DROPPED_AT: usize = 80;
/// Where the entries start.
pub const ENTRIES_AT: usize = HEADER_PAGE_BYTES;
/// Most stamps one entry covers.
pub const COUNT_MAX: u32 = (1 << 24) - 1;

/// Pending entries tracked without growing (writes in flight per node are fewer).
const PENDING_HELD: usize = 4096;

/// Byte ranges of an entry's fields.
pub mod field {
    use std::ops::Range;
    /// Position in the ring (from 1).
    pub const POSITION: Range<usize> = 0..8;
    /// The (first) stamp.
    pub const VERSION: Range<usize> = 8..16;
    /// Hash of the key written (Pending, Committed, Aborted).
    pub const KEY_HASH: Range<usize> = 16..24;
    /// Kind, tombstone and count (or write number).
    pub const WORD: Range<usize> = 24..28;
    /// Checksum of the bytes before it.
    pub const CRC: Range<usize> = 28..32;
}

const _: () = assert!(field::CRC.end == ENTRY_LEN);

/// What an entry records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FateKind {
    /// A write holds the stamp and has not decided.
    Pending = 1,
    /// The write with the stamp committed.
    Committed = 2,
    /// The write with the stamp rolled back: a no-op.
    Aborted = 3,
    /// `count` stamps from `version` were dropped unused: no-ops.
    Unused = 4,
    /// `count` stamps from `version` were fetched (before any was used).
    Block = 5,
    /// The node moved to the epoch of `version`.
    Epoch = 6,
}

impl FateKind {
    fn from_bits(b: u32) -> Option<Self> {
        Some(match b {
            1 => Self::Pending,
            2 => Self::Committed,
            3 => Self::Aborted,
            4 => Self::Unused,
            5 => Self::Block,
            6 => Self::Epoch,
            _ => return None,
        })
    }
}

/// One entry of a fate ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FateEntry {
    /// Its position in the ring (from 1).
    pub position: u64,
    /// The stamp (the first, for a range; an epoch's first stamp for a marker).
    pub version: u64,
    /// Hash of the key written (writes only).
    pub key_hash: u64,
    /// What it records.
    pub kind: FateKind,
    /// The write deletes the key.
    pub tombstone: bool,
    /// Stamps covered from `version` (1 for a write, 0 for an epoch marker).
    pub count: u32,
    /// A write's number (`write_seq`) mod 2^24, which says where its holders' stamp
    /// ledgers keep it (`format/ledger.rs`); 0 for every other kind.
    pub write_seq: u32,
}

impl FateEntry {
    /// The entry's bytes.
    pub fn emit(&self) -> [u8; ENTRY_LEN] {
        let mut b = [0u8; ENTRY_LEN];
        b[field::POSITION].copy_from_slice(&self.position.to_le_bytes());
        b[field::VERSION].copy_from_slice(&self.version.to_le_bytes());
        b[field::KEY_HASH].copy_from_slice(&self.key_hash.to_le_bytes());
        let high = if self.is_write() { self.write_seq & COUNT_MAX } else { self.count.min(COUNT_MAX) };
        let word = self.kind as u32 | u32::from(self.tombstone) << 4 | high << 8;
        b[field::WORD].copy_from_slice(&word.to_le_bytes());
        let crc = crc32c::crc32c(&b[..field::CRC.start]);
        b[field::CRC].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// An entry as read (from this node's file or a peer's ring): `None` if it was never
    /// written, is torn (being written), or is not one this build writes.
    pub fn parse(b: &[u8]) -> Option<Self> {
        let b: &[u8; ENTRY_LEN] = b.get(..ENTRY_LEN)?.try_into().ok()?;
        if crc32c::crc32c(&b[..field::CRC.start]) != le32(&b[field::CRC]) {
            return None;
        }
        let word = le32(&b[field::WORD]);
        let kind = FateKind::from_bits(word & 0xf)?;
        let position = le64(&b[field::POSITION]);
        let version = le64(&b[field::VERSION]);
        let high = word >> 8;
        let (count, write_seq) = match kind {
            FateKind::Pending | FateKind::Committed | FateKind::Aborted => (1, high),
            FateKind::Unused | FateKind::Block | FateKind::Epoch => (high, 0),
        };
        let sane = match kind {
            FateKind::Unused | FateKind::Block => count >= 1,
            FateKind::Epoch => count == 0,
            _ => true,
        };
        if position == 0 || word & 0xe0 != 0 || !sane || epoch_of(version) == 0 {
            return None;
        }
        let (key_hash, tombstone) = (le64(&b[field::KEY_HASH]), word & 0x10 != 0);
        Some(Self { position, version, key_hash, kind, tombstone, count, write_seq })
    }

    /// It records a write (Pending, Committed or Aborted), which covers one stamp.
    pub fn is_write(&self) -> bool {
        matches!(self.kind, FateKind::Pending | FateKind::Committed | FateKind::Aborted)
    }

    /// The stamps it covers.
    pub fn stamps(&self) -> std::ops::Range<u64> {
        self.version..self.version + u64::from(self.count)
    }
}

/// What failed with a fate ring.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FateError {
    /// The number of entries is out of range.
    #[error("fate ring entries = {entries} is out of range: must be a power of two from {FATE_ENTRIES_MIN} to {FATE_ENTRIES_MAX}")]
    Geometry {
        /// The value given.
        entries: u32,
    },
    /// Opening, creating or reading the file failed.
    #[error("cannot {action} fate ring {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not a fate ring of this format, or of another node or size.
    #[error("{path} is not node {node}'s fate ring with {entries} entries ({why}); the data folder belongs to another node or configuration: give this node its own folder")]
    Foreign {
        /// The file.
        path: PathBuf,
        /// Who opens it.
        node: u8,
        /// With what size.
        entries: u32,
        /// What is wrong.
        why: String,
    },
    /// Mapping or registering the file.
    #[error("fate ring {path}: {source}")]
    Fabric {
        /// The file.
        path: PathBuf,
        /// Why.
        source: FabricError,
    },
    /// The entry the next position would overwrite is still Pending: a write has been
    /// undecided for a whole ring of stamps.
    #[error("fate ring {path} is full: position {position} would overwrite the fate of stamp {pending:#x}, still undecided; writes wait until it decides (every write decides within the cluster's `write_timeout_us`)")]
    Full {
        /// The file.
        path: PathBuf,
        /// The position that would be written.
        position: u64,
        /// The undecided stamp in its way.
        pending: u64,
    },
}

/// A node's own fate ring: appended and settled by this node, READ by every peer.
pub struct FateRing {
    path: PathBuf,
    entries: u32,
    mr: Arc<MemoryRegion>,
    /// The next position to write.
    next: u64,
    /// The Pending entries, oldest first: `(position, stamp)` (writes in flight, so
    /// few; kept here so that neither a write's settle nor the room check reads and
    /// checksums the ring).
    pending: std::collections::VecDeque<(u64, u64)>,
    /// The newest epoch of any entry the ring held when it was opened.
    newest_epoch: u32,
}

impl std::fmt::Debug for FateRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FateRing")
            .field("path", &self.path)
            .field("entries", &self.entries)
            .field("next", &self.next)
            .finish()
    }
}

impl FateRing {
    /// Bytes of the file of a ring with `entries` entries.
    pub fn file_bytes(entries: u32) -> u64 {
        (ENTRIES_AT + entries as usize * ENTRY_LEN) as u64
    }

    /// Opens node `node`'s ring at `path` with `entries` entries (or creates it) and
    /// registers it on `fabric` for peers to READ. What an existing ring holds is found
    /// again; a torn last entry is not part of it.
    pub fn open<F: Fabric>(fabric: &F, path: &Path, node: u8, entries: u32) -> Result<Self, FateError> {
        if !entries.is_power_of_two() || !(FATE_ENTRIES_MIN..=FATE_ENTRIES_MAX).contains(&entries) {
            return Err(FateError::Geometry { entries });
        }
        let file_bytes = Self::file_bytes(entries);
        let mut page = vec![0u8; HEADER_PAGE_BYTES];
        FileHeader { ids: [node, 0], params: [entries] }.emit(MAGIC, &mut page);
        let io = |e: file::FileIoError| FateError::Io { action: e.action, path: path.to_owned(), source: e.source };
        let foreign = |why: String| FateError::Foreign { path: path.to_owned(), node, entries, why };
        let file = match file::open_or_create(path, &page, file_bytes).map_err(io)? {
            Opened::Created(file) => file,
            Opened::Existing { file, page, len } => {
                let found = FileHeader::<1>::parse(MAGIC, &page).map_err(|e: HeaderError| foreign(e.to_string()))?;
                if (found.ids, found.params[0]) != ([node, 0], entries) {
                    return Err(foreign(format!("made for node {} with {} entries", found.ids[0], found.params[0])));
                }
                if len != file_bytes {
                    return Err(foreign(format!("{len} bytes, its header says {file_bytes}")));
                }
                file
            }
        };
        let fab = |source| FateError::Fabric { path: path.to_owned(), source };
        let memory = Memory::map_file(&file, 0, file_bytes as usize).map_err(fab)?;
        // Peers READ it; only this node's CPU writes it.
        let mr = fabric.register(Arc::new(memory), Access::REMOTE_READ).map_err(fab)?;
        let mut ring = Self {
            path: path.to_owned(),
            entries,
            mr,
            next: 1,
            pending: std::collections::VecDeque::with_capacity(PENDING_HELD),
            newest_epoch: 0,
        };
        // One pass over the slots: a slot whose entry's position maps to it holds that
        // position's entry (positions are dense, so every such entry is of the last ring).
        let mut newest = 0;
        for slot in 0..u64::from(entries) {
            let Some(e) = ring.slot(slot).filter(|e| e.position % u64::from(entries) == slot) else { continue };
            newest = newest.max(e.position);
            ring.newest_epoch = ring.newest_epoch.max(epoch_of(e.version));
            if e.kind == FateKind::Pending {
                ring.pending.push_back((e.position, e.version));
            }
        }
        ring.pending.make_contiguous().sort_unstable();
        ring.next = newest + 1;
        ring.mr
            .memory()
            .store_u64(NEXT_AT, ring.next)
            .map_err(|source| FateError::Fabric { path: path.to_owned(), source })?;
        Ok(ring)
    }

    /// Where peers READ it.
    pub fn remote(&self) -> RemoteRegion {
        self.mr.remote()
    }

    /// Its entries (a power of two).
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// The next position to be written.
    pub fn next(&self) -> u64 {
        self.next
    }

    fn slot(&self, slot: u64) -> Option<FateEntry> {
        let mut b = [0u8; ENTRY_LEN];
        self.mr.memory().read(ENTRIES_AT + slot as usize * ENTRY_LEN, &mut b).ok()?;
        FateEntry::parse(&b)
    }

    /// The raw bytes of the entries from `position` on, as many as fit `out` (whole
    /// entries) without passing the ring's end; how many entries were copied.
    pub fn copy_from(&self, position: u64, out: &mut [u8]) -> usize {
        let slot = position % u64::from(self.entries);
        let k = ((out.len() / ENTRY_LEN) as u64).min(u64::from(self.entries) - slot) as usize;
        self.mr
            .memory()
            .read(ENTRIES_AT + slot as usize * ENTRY_LEN, &mut out[..k * ENTRY_LEN])
            .expect("inside the ring");
        k
    }

    /// The entry at `position`, if the ring still holds it.
    pub fn at(&self, position: u64) -> Option<FateEntry> {
        self.slot(position % u64::from(self.entries)).filter(|e| e.position == position)
    }

    fn write(&self, e: &FateEntry) {
        let at = ENTRIES_AT + (e.position % u64::from(self.entries)) as usize * ENTRY_LEN;
        self.mr.memory().write(at, &e.emit()).expect("an entry inside the ring");
    }

    /// Whether the next append has room (the entry it would overwrite has decided).
    pub fn has_room(&self) -> bool {
        self.blocker().is_none()
    }

    fn blocker(&self) -> Option<(u64, u64)> {
        let old = self.next.checked_sub(u64::from(self.entries))?;
        self.pending.front().copied().filter(|&(p, _)| p <= old)
    }

    /// Appends an entry of `kind` for `count` stamps from `version`; returns its
    /// position.
    pub fn append(
        &mut self,
        kind: FateKind,
        version: u64,
        key_hash: u64,
        tombstone: bool,
        count: u32,
    ) -> Result<u64, FateError> {
        debug_assert!(count <= COUNT_MAX && kind != FateKind::Pending, "a write is appended by append_write");
        self.push(FateEntry { position: 0, version, key_hash, kind, tombstone, count, write_seq: 0 })
    }

    /// Appends a Pending entry for write number `write_seq` holding stamp `version`
    /// (of the key with hash `key_hash`); returns its position.
    pub fn append_write(
        &mut self,
        version: u64,
        key_hash: u64,
        tombstone: bool,
        write_seq: u64,
    ) -> Result<u64, FateError> {
        let write_seq = (write_seq & u64::from(COUNT_MAX)) as u32;
        self.push(FateEntry { position: 0, version, key_hash, kind: FateKind::Pending, tombstone, count: 1, write_seq })
    }

    /// Appends `e` at the next position (its `position` is set here).
    fn push(&mut self, e: FateEntry) -> Result<u64, FateError> {
        if let Some((_, pending)) = self.blocker() {
            return Err(FateError::Full { path: self.path.clone(), position: self.next, pending });
        }
        let position = self.next;
        if let Some(old) = position.checked_sub(u64::from(self.entries)).and_then(|p| self.at(p)) {
            // Published before the entry goes: an applier below it must not take the
            // ring for complete.
            let memory = self.mr.memory();
            let dropped = memory.load_u64(DROPPED_AT).expect("aligned word in the header page");
            if old.kind != FateKind::Epoch && old.stamps().end > dropped {
                memory.store_u64(DROPPED_AT, old.stamps().end).expect("aligned word in the header page");
            }
        }
        self.write(&FateEntry { position, ..e });
        if e.kind == FateKind::Pending {
            self.pending.push_back((position, e.version));
        }
        self.next += 1;
        self.mr.memory().store_u64(NEXT_AT, self.next).expect("aligned word in the header page");
        Ok(position)
    }

    /// Records the decision of the write holding stamp `version` (Committed or
    /// Aborted) where its Pending entry is; false if the ring holds no Pending entry of
    /// it (decided already, or a stamp this ring never recorded).
    pub fn settle(&mut self, version: u64, kind: FateKind) -> bool {
        debug_assert!(matches!(kind, FateKind::Committed | FateKind::Aborted));
        let Some(i) = self.pending.iter().position(|&(_, v)| v == version) else { return false };
        let (position, _) = self.pending.remove(i).expect("found just above");
        match self.at(position).filter(|e| e.kind == FateKind::Pending && e.version == version) {
            Some(e) => {
                self.write(&FateEntry { kind, ..e });
                true
            }
            None => false,
        }
    }

    /// Every entry the ring holds, oldest first (for a restart's recovery, not the data
    /// path).
    pub fn held(&self) -> Vec<FateEntry> {
        let oldest = self.next.saturating_sub(u64::from(self.entries)).max(1);
        (oldest..self.next).filter_map(|p| self.at(p)).collect()
    }

    /// The stamps of blocks this ring recorded that no entry after them accounts for
    /// (neither used nor recorded unused): the rests a crash left in hand. Stamps are
    /// taken from a block in order, so each rest runs from past its last used stamp to
    /// the block's end.
    pub fn unaccounted(&self) -> Vec<std::ops::Range<u64>> {
        // One pass: blocks by first stamp, each with how far its stamps were used or
        // given up (blocks of one node never overlap: they are ranges of a counter).
        let mut blocks = std::collections::BTreeMap::new();
        for e in self.held() {
            let stamps = e.stamps();
            match e.kind {
                FateKind::Block => {
                    blocks.insert(stamps.start, (stamps.end, stamps.start));
                }
                FateKind::Epoch => {}
                _ => {
                    if let Some((_, (end, used))) = blocks.range_mut(..=stamps.start).next_back() {
                        if stamps.start < *end {
                            *used = (*used).max(stamps.end);
                        }
                    }
                }
            }
        }
        blocks.into_values().filter(|&(end, used)| used < end).map(|(end, used)| used..end).collect()
    }

    /// The newest epoch of any entry the ring held when it was opened (0: none).
    pub fn newest_epoch_at_open(&self) -> u32 {
        self.newest_epoch
    }

    /// The stamps of the writes still Pending, oldest first.
    pub fn pending(&self) -> impl Iterator<Item = u64> + '_ {
        self.pending.iter().map(|&(_, v)| v)
    }

    /// The entries still Pending (a write undecided), oldest first.
    pub fn pending_entries(&self) -> impl Iterator<Item = FateEntry> + '_ {
        self.pending.iter().filter_map(|&(position, _)| self.at(position).filter(|e| e.kind == FateKind::Pending))
    }

    /// The end of the stamps of every entry overwritten so far (0: none).
    pub fn dropped(&self) -> u64 {
        self.mr.memory().load_u64(DROPPED_AT).expect("aligned word in the header page")
    }

    /// The applied cursor kept in the header page (0: none yet).
    pub fn cursor(&self) -> u64 {
        self.mr.memory().load_u64(CURSOR_AT).expect("aligned word in the header page")
    }

    /// Keeps the applied cursor (the next stamp the applier releases).
    pub fn set_cursor(&self, cursor: u64) {
        self.mr.memory().store_u64(CURSOR_AT, cursor).expect("aligned word in the header page");
    }
}

#[cfg(test)]
mod tests {
    use super::super::file::testing::TempDir;
    use super::*;
    use crate::cluster::sequence::version;
    use crate::fabric::emu::{ModelConfig, Network, SystemClock};

    fn v(s: u64) -> u64 {
        version(1, s).unwrap()
    }

    #[test]
    fn entry_bytes_are_golden_and_checked() {
        let e = FateEntry {
            position: 3,
            version: v(7),
            key_hash: 0xaabb,
            kind: FateKind::Committed,
            tombstone: true,
            count: 1,
            write_seq: 0x12_3456,
        };
        let b = e.emit();
        assert_eq!(&b[0..8], &3u64.to_le_bytes());
        assert_eq!(&b[8..16], &v(7).to_le_bytes());
        assert_eq!(&b[24..28], &(2u32 | 1 << 4 | 0x12_3456 << 8).to_le_bytes(), "a write keeps its number");
        assert_eq!(FateEntry::parse(&b), Some(e));
        for i in 0..ENTRY_LEN {
            let mut torn = b;
            torn[i] ^= 0x40;
            assert_eq!(FateEntry::parse(&torn), None, "byte {i} flipped");
        }
        assert_eq!(FateEntry::parse(&[0u8; ENTRY_LEN]), None, "never written");
        let bad = FateEntry { kind: FateKind::Unused, count: 0, write_seq: 0, ..e }.emit();
        assert_eq!(FateEntry::parse(&bad), None, "a range covers a stamp at least");
        let block = FateEntry { kind: FateKind::Block, count: 16, write_seq: 0, ..e };
        assert_eq!(FateEntry::parse(&block.emit()), Some(block));
    }

    #[test]
    fn a_ring_records_settles_survives_a_reopen_and_finds_the_rests_a_crash_left() {
        let dir = TempDir::new("fates");
        let path = dir.file("fates.prfate");
        let net = Network::new(ModelConfig::ideal(), Arc::new(SystemClock::new())).unwrap();
        let fabric = net.node().unwrap();
        let mut ring = FateRing::open(&fabric, &path, 0, 8).unwrap();
        ring.append(FateKind::Block, v(1), 0, false, 4).unwrap();
        ring.append_write(v(1), 11, false, 40).unwrap();
        ring.append_write(v(2), 12, true, (1 << 24) + 41).unwrap();
        assert!(ring.settle(v(1), FateKind::Committed));
        assert_eq!(ring.at(2).map(|e| (e.kind, e.write_seq)), Some((FateKind::Committed, 40)), "settled in place");
        assert_eq!(ring.at(3).map(|e| e.write_seq), Some(41), "a write's number mod 2^24");
        assert!(!ring.settle(v(1), FateKind::Aborted), "decided once");
        assert!(!ring.settle(v(9), FateKind::Aborted), "never recorded");
        ring.append(FateKind::Block, v(5), 0, false, 4).unwrap();
        ring.set_cursor(v(2));
        drop(ring);
        // Reopened after a crash: both blocks' rests are unaccounted for.
        let mut ring = FateRing::open(&fabric, &path, 0, 8).unwrap();
        assert_eq!(ring.next(), 5);
        assert_eq!(ring.cursor(), v(2));
        assert_eq!(ring.unaccounted(), vec![v(3)..v(5), v(5)..v(9)]);
        ring.append(FateKind::Unused, v(3), 0, false, 2).unwrap();
        ring.append(FateKind::Unused, v(5), 0, false, 4).unwrap();
        assert!(ring.unaccounted().is_empty());
        // Stamp 2 is still Pending: position 3 is in the way of position 11.
        ring.append(FateKind::Epoch, version(2, 1).unwrap(), 0, false, 0).unwrap();
        ring.append(FateKind::Block, version(2, 1).unwrap(), 0, false, 2).unwrap();
        ring.append_write(version(2, 1).unwrap(), 1, false, 42).unwrap();
        ring.append_write(version(2, 2).unwrap(), 1, false, 43).unwrap();
        let err = ring.append(FateKind::Block, version(2, 3).unwrap(), 0, false, 2).unwrap_err();
        assert!(matches!(err, FateError::Full { position: 11, .. }), "{err}");
        assert!(!ring.has_room());
        assert!(ring.settle(v(2), FateKind::Aborted));
        assert!(ring.has_room());
        ring.append(FateKind::Block, version(2, 3).unwrap(), 0, false, 2).unwrap();
        assert_eq!(ring.at(3), None, "overwritten");
        assert_eq!(ring.dropped(), v(5), "the end of the first block, whose entry went first");
        assert_eq!(ring.at(11).unwrap().kind, FateKind::Block);
        drop(ring);
        assert!(matches!(FateRing::open(&fabric, &path, 1, 8), Err(FateError::Foreign { .. })));
        assert!(matches!(FateRing::open(&fabric, &path, 0, 16), Err(FateError::Foreign { .. })));
        assert!(matches!(FateRing::open(&fabric, &path, 0, 6), Err(FateError::Geometry { .. })));
    }
}
