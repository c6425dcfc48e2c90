//! The change-feed log (issue 16 part 4): the committed writes one node has released in
//! stamp order ([`crate::cluster::order`]), in a bounded file that wraps, read by a host
//! from a cursor it keeps: the version of the last entry it has seen.
//!
//! File layout: a 4096-byte header page (magic "PRSCFEED", format 1, node, entries, CRC32C
//! in the common layout of [`super::file`]), whose bytes 64..72 hold the version of the
//! newest entry overwritten so far (0: none), then `entries` (a power of two) 32-byte
//! entries; position `p` (1, 2, ... in feed order) uses entry `p % entries`. An entry, all
//! integers little-endian:
//!
//! ```text
//!  0..8 position   8..16 version   16..24 key_hash   24..28 flags (bit 0 tombstone)
//! 28..32 CRC32C of bytes 0..28
//! ```
//!
//! Invariants: positions are dense and versions rise with them; the entries held are the
//! positions `oldest..next`, each at its slot with a good checksum. Before an entry is
//! overwritten its version goes to the header ("dropped"), so a reader whose cursor is
//! below it is told its cursor is too old ([`FeedError::CursorTooOld`]) rather than
//! handed a feed with a gap; a crash between the two only makes that answer come one
//! entry early. A torn last entry fails its checksum and is not part of the feed at the
//! next open. The file is a shared mapping: a killed process loses nothing appended;
//! [`FeedLog::sync`] makes it survive power loss.
//!
//! This is the writer. The entry format and the header facts are the shim's
//! ([`prescient_shim::feed`]), where a host's `FeedReader` follows the file from another
//! process while this appends: what this writer must keep for it is the order "version
//! to `dropped`, release fence, then the overwrite" in [`FeedLog::append`].
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::file::{self, FileHeader, HeaderError, Opened};
use crate::fabric::{Access, Fabric, FabricError, Memory, MemoryRegion, RemoteRegion};
use crate::limits::{FEED_ENTRIES_MAX, FEED_ENTRIES_MIN, HEADER_PAGE_BYTES};

// The entry format and the header-page facts a host's reader checks are defined once,
// in the shim, which follows this file from the host (`prescient_shim::feed`).
pub use prescient_shim::feed::{field, FeedEntry, DROPPED_AT, ENTRY_LEN, FLAG_TOMBSTONE, MAGIC};

/// What failed with a change-feed log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FeedError {
    /// The number of entries is out of range.
    #[error("feed log entries = {entries} is out of range: must be a power of two from {FEED_ENTRIES_MIN} to {FEED_ENTRIES_MAX}")]
    Geometry {
        /// The value given.
        entries: u32,
    },
    /// Opening, creating or reading the file failed.
    #[error("cannot {action} feed log {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not a feed log of this format.
    #[error("{path} is not a feed log this build reads: {source}; remove it or point the node at another data folder")]
    NotAFeed {
        /// The file.
        path: PathBuf,
        /// What is wrong with its header page.
        source: HeaderError,
    },
    /// The file is a feed log of another node or size.
    #[error("feed log {path} was made for node {found_node} with {found_entries} entries, but node {node} opens it with {entries}; remove it or fix the configuration")]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// What the file says.
        found_node: u8,
        /// What the file says.
        found_entries: u32,
        /// Who opens it.
        node: u8,
        /// With what size.
        entries: u32,
    },
    /// The file's length does not match its header.
    #[error("feed log {path} is {len} bytes, its header says {expected}: it was truncated or extended; remove it")]
    Length {
        /// The file.
        path: PathBuf,
        /// Its length.
        len: u64,
        /// The length its header implies.
        expected: u64,
    },
    /// The file's mapping failed.
    #[error("feed log {path}: {source}")]
    Memory {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: FabricError,
    },
    /// An append not above the last version: the applier released out of order (a bug).
    #[error("feed log append of version {version:#x} after {last:#x}: the feed only moves forward")]
    OutOfOrder {
        /// The version appended.
        version: u64,
        /// The feed's last version.
        last: u64,
    },
    /// The reader's cursor is older than what the log still holds: entries after it
    /// were overwritten.
    #[error("feed cursor {after:#x} is older than this feed log holds (entries up to {dropped:#x} were overwritten); start again from a snapshot, or give the feed log more entries")]
    CursorTooOld {
        /// The reader's cursor.
        after: u64,
        /// The newest version overwritten.
        dropped: u64,
    },
}

/// One node's change-feed log.
pub struct FeedLog {
    path: PathBuf,
    entries: u32,
    /// The whole file, header page included.
    memory: Arc<Memory>,
    /// Its registration for peers' READs ([`FeedLog::register`]).
    mr: Option<Arc<MemoryRegion>>,
    /// The oldest position held (`next` when empty).
    oldest: u64,
    /// The next position to append.
    next: u64,
    /// The version of position `next - 1` (0 when nothing was ever appended).
    last_version: u64,
    /// The newest version overwritten (0: none).
    dropped: u64,
}

impl std::fmt::Debug for FeedLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeedLog")
            .field("path", &self.path)
            .field("entries", &self.entries)
            .field("oldest", &self.oldest)
            .field("next", &self.next)
            .finish()
    }
}

impl FeedLog {
    /// Bytes of the file of a feed log with `entries` entries.
    pub fn file_bytes(entries: u32) -> u64 {
        HEADER_PAGE_BYTES as u64 + u64::from(entries) * ENTRY_LEN as u64
    }

    /// Opens node `node`'s feed log at `path` with `entries` entries, or creates it. An
    /// existing file must be of this node and size; what it holds is found again
    /// (a torn last entry is not part of it).
    pub fn open(path: &Path, node: u8, entries: u32) -> Result<Self, FeedError> {
        if !entries.is_power_of_two() || !(FEED_ENTRIES_MIN..=FEED_ENTRIES_MAX).contains(&entries) {
            return Err(FeedError::Geometry { entries });
        }
        let file_bytes = Self::file_bytes(entries);
        let mut page = vec![0u8; HEADER_PAGE_BYTES];
        FileHeader { ids: [node, 0], params: [entries] }.emit(MAGIC, &mut page);
        let io = |e: file::FileIoError| FeedError::Io { action: e.action, path: path.to_owned(), source: e.source };
        let not_a_feed = |source| FeedError::NotAFeed { path: path.to_owned(), source };
        let file = match file::open_or_create(path, &page, file_bytes).map_err(io)? {
            Opened::Created(file) => file,
            Opened::Existing { file, page, len } => {
                let found = FileHeader::<1>::parse(MAGIC, &page).map_err(not_a_feed)?;
                if found.ids[1] != 0 {
                    return Err(not_a_feed(HeaderError::NonZero { offset: file::field::ID1, value: found.ids[1] }));
                }
                if (found.ids[0], found.params[0]) != (node, entries) {
                    return Err(FeedError::Mismatch {
                        path: path.to_owned(),
                        found_node: found.ids[0],
                        found_entries: found.params[0],
                        node,
                        entries,
                    });
                }
                if len != file_bytes {
                    return Err(FeedError::Length { path: path.to_owned(), len, expected: file_bytes });
                }
                file
            }
        };
        let memory = Memory::map_file(&file, 0, file_bytes as usize)
            .map_err(|source| FeedError::Memory { path: path.to_owned(), source })?;
        let mut log = Self {
            path: path.to_owned(),
            entries,
            memory: Arc::new(memory),
            mr: None,
            oldest: 1,
            next: 1,
            last_version: 0,
            dropped: 0,
        };
        log.dropped = log.memory.load_u64(DROPPED_AT).map_err(log.memory_err())?;
        // The newest whole entry is the tail; the feed held runs down from it while
        // each position is in its slot.
        let mut newest: Option<FeedEntry> = None;
        for slot in 0..u64::from(entries) {
            if let Some(e) = log.read_slot(slot)?.filter(|e| e.position % u64::from(entries) == slot) {
                if newest.is_none_or(|n| e.position > n.position) {
                    newest = Some(e);
                }
            }
        }
        if let Some(top) = newest {
            log.next = top.position + 1;
            log.last_version = top.version;
            log.oldest = top.position;
            while log.oldest > 1 && log.oldest + u64::from(entries) > top.position + 1 {
                match log.entry(log.oldest - 1)? {
                    Some(e) if e.version < log.at(log.oldest)?.version => log.oldest -= 1,
                    _ => break,
                }
            }
        }
        Ok(log)
    }

    fn memory_err(&self) -> impl Fn(FabricError) -> FeedError + '_ {
        move |source| FeedError::Memory { path: self.path.clone(), source }
    }

    fn read_slot(&self, slot: u64) -> Result<Option<FeedEntry>, FeedError> {
        let mut b = [0u8; ENTRY_LEN];
        self.memory.read(HEADER_PAGE_BYTES + slot as usize * ENTRY_LEN, &mut b).map_err(self.memory_err())?;
        Ok(FeedEntry::parse(&b))
    }

    /// The entry at `position`, if its slot holds it.
    fn entry(&self, position: u64) -> Result<Option<FeedEntry>, FeedError> {
        Ok(self.read_slot(position % u64::from(self.entries))?.filter(|e| e.position == position))
    }

    /// The entry at a position known to be held.
    fn at(&self, position: u64) -> Result<FeedEntry, FeedError> {
        let e = self.entry(position)?;
        Ok(e.unwrap_or_else(|| {
            panic!("feed log {}: position {position} is held but its slot is not", self.path.display())
        }))
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The version of the last entry (0: none ever): an applier that restarts resumes
    /// its cursor above it.
    pub fn last_version(&self) -> u64 {
        self.last_version
    }

    /// Positions held: `oldest..next`.
    pub fn held(&self) -> std::ops::Range<u64> {
        self.oldest..self.next
    }

    /// The newest version overwritten, or marked missing by [`FeedLog::skip_to`] (0:
    /// none): a reader whose cursor is below it is told its cursor is too old.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Registers the file on `fabric` for peers to READ: a node that fell behind
    /// copies the writes it missed from a peer's feed (`protocol/apply.rs`). Only this
    /// node's CPU writes it.
    pub fn register<F: Fabric>(&mut self, fabric: &F) -> Result<RemoteRegion, FeedError> {
        let mr = fabric
            .register(Arc::clone(&self.memory), Access::REMOTE_READ)
            .map_err(|source| FeedError::Memory { path: self.path.clone(), source })?;
        let remote = mr.remote();
        self.mr = Some(mr);
        Ok(remote)
    }

    /// Where peers READ it, once registered.
    pub fn remote(&self) -> Option<RemoteRegion> {
        self.mr.as_ref().map(|mr| mr.remote())
    }

    /// Marks every version up to `version` as missing from this feed: the writes
    /// between the last entry and `version` could not be copied (every peer's feed had
    /// overwritten them), so a reader whose cursor is below `version` is told its
    /// cursor is too old rather than handed a feed with a gap. Appends go on above it.
    pub fn skip_to(&mut self, version: u64) -> Result<(), FeedError> {
        if version <= self.dropped {
            return Ok(());
        }
        self.memory.store_u64(DROPPED_AT, version).map_err(self.memory_err())?;
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        self.dropped = version;
        Ok(())
    }

    /// Appends a committed write released in order; returns its position.
    pub fn append(&mut self, version: u64, key_hash: u64, tombstone: bool) -> Result<u64, FeedError> {
        if version <= self.last_version {
            return Err(FeedError::OutOfOrder { version, last: self.last_version });
        }
        let position = self.next;
        if position - self.oldest == u64::from(self.entries) {
            // The oldest entry goes: its version first, so no reader below it is
            // handed a feed with a gap.
            let gone = self.at(self.oldest)?;
            // (A skip may have marked more as missing already.)
            let dropped = gone.version.max(self.dropped);
            self.memory.store_u64(DROPPED_AT, dropped).map_err(self.memory_err())?;
            // Orders the store of `dropped` before every byte of the overwrite below: a
            // host reader that copies a byte of the new entry and then (after its
            // acquire fence) re-reads `dropped` sees this version or a later one, and
            // does not hand out what it copied (prescient_shim::feed).
            std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
            self.dropped = dropped;
            self.oldest += 1;
        }
        let bytes = FeedEntry { position, version, key_hash, tombstone }.emit();
        let offset = HEADER_PAGE_BYTES + (position % u64::from(self.entries)) as usize * ENTRY_LEN;
        self.memory.write(offset, &bytes).map_err(self.memory_err())?;
        self.next += 1;
        self.last_version = version;
        Ok(position)
    }

    /// Up to `out.len()` entries with versions above `after` (0: from the start), in
    /// order; how many were written to `out`. A reader keeps the version of the last
    /// entry it took as its cursor, and so resumes where it stopped, across restarts of
    /// either side.
    pub fn read(&self, after: u64, out: &mut [FeedEntry]) -> Result<usize, FeedError> {
        if after < self.dropped {
            return Err(FeedError::CursorTooOld { after, dropped: self.dropped });
        }
        // The first position above `after`: versions rise with positions.
        let (mut lo, mut hi) = (self.oldest, self.next);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.at(mid)?.version <= after {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let mut n = 0;
        for position in lo..self.next {
            let Some(slot) = out.get_mut(n) else { break };
            *slot = self.at(position)?;
            n += 1;
        }
        Ok(n)
    }

    /// Makes every entry appended so far survive power loss (msync).
    pub fn sync(&self) -> Result<(), FeedError> {
        self.memory.flush_range(0, self.memory.len()).map_err(self.memory_err())
    }
}

#[cfg(test)]
mod tests {
    use super::super::file::testing::TempDir;
    use super::*;

    fn v(s: u64) -> u64 {
        crate::cluster::sequence::version(1, s).unwrap()
    }

    #[test]
    fn the_shims_reader_follows_this_log_from_another_mapping() {
        use prescient_shim::feed::{FeedReadError, FeedReader};
        let dir = TempDir::new("feed-shim");
        let path = dir.file("feed.prfeed");
        let mut log = FeedLog::open(&path, 4, 8).unwrap();
        // The header this writer made is the one the shim checks: the common part is the
        // same code on both sides; the node and the ring size are where the reader looks.
        let mut reader = FeedReader::open(&path).unwrap();
        assert_eq!((reader.node(), reader.entries()), (4, 8));
        let mut out = [FeedEntry::default(); 16];
        for s in 1..=5 {
            log.append(v(s), s, s == 2).unwrap();
        }
        assert_eq!(reader.read(0, &mut out).unwrap(), 5);
        assert_eq!(out[1], FeedEntry { position: 2, version: v(2), key_hash: 2, tombstone: true });
        for s in 6..=20 {
            log.append(v(s), s, false).unwrap();
        }
        assert!(
            matches!(reader.read(v(5), &mut out), Err(FeedReadError::CursorTooOld { dropped, .. }) if dropped == v(12))
        );
        assert_eq!(reader.read(v(12), &mut out).unwrap(), 8);
        let mut writers = [FeedEntry::default(); 8];
        assert_eq!(log.read(v(12), &mut writers).unwrap(), 8);
        assert_eq!(out[..8], writers, "the writer's own read and the host's agree");
    }

    #[test]
    fn a_reader_resumes_from_its_cursor_across_a_reopen() {
        let dir = TempDir::new("feed-resume");
        let path = dir.file("feed.prfeed");
        let mut log = FeedLog::open(&path, 3, 16).unwrap();
        for s in [1, 2, 5, 9] {
            log.append(v(s), s * 100, s == 5).unwrap();
        }
        let mut out = [FeedEntry::default(); 3];
        assert_eq!(log.read(0, &mut out).unwrap(), 3);
        assert_eq!(out.map(|e| e.version), [v(1), v(2), v(5)]);
        assert!(out[2].tombstone);
        let cursor = out[1].version;
        drop(log);
        let mut log = FeedLog::open(&path, 3, 16).unwrap();
        assert_eq!((log.held(), log.last_version()), (1..5, v(9)));
        assert_eq!(log.read(cursor, &mut out).unwrap(), 2);
        assert_eq!(out[..2].iter().map(|e| (e.position, e.version)).collect::<Vec<_>>(), [(3, v(5)), (4, v(9))]);
        // A cursor between versions, and one past the end.
        assert_eq!(log.read(v(3), &mut out).unwrap(), 2);
        assert_eq!(log.read(v(9), &mut out).unwrap(), 0);
        assert!(matches!(log.append(v(9), 0, false), Err(FeedError::OutOfOrder { .. })));
        assert_eq!(log.append(v(10), 0, false).unwrap(), 5);
        assert!(matches!(FeedLog::open(&path, 4, 16), Err(FeedError::Mismatch { found_node: 3, .. })));
        assert!(matches!(FeedLog::open(&path, 3, 32), Err(FeedError::Mismatch { found_entries: 16, .. })));
        assert!(matches!(FeedLog::open(&dir.file("other"), 3, 12), Err(FeedError::Geometry { entries: 12 })));
    }

    #[test]
    fn a_wrapped_log_refuses_a_cursor_it_no_longer_covers() {
        let dir = TempDir::new("feed-wrap");
        let path = dir.file("feed.prfeed");
        let mut log = FeedLog::open(&path, 0, 8).unwrap();
        for s in 1..=20 {
            log.append(v(s * 2), s, false).unwrap();
        }
        // Positions 13..=20 are held; 12 (version 24) was the last overwritten.
        assert_eq!(log.held(), 13..21);
        let mut out = [FeedEntry::default(); 16];
        assert!(
            matches!(log.read(0, &mut out), Err(FeedError::CursorTooOld { after: 0, dropped }) if dropped == v(24))
        );
        assert!(matches!(log.read(v(23), &mut out), Err(FeedError::CursorTooOld { .. })));
        assert_eq!(log.read(v(24), &mut out).unwrap(), 8);
        assert_eq!(out[0].version, v(26));
        drop(log);
        let log = FeedLog::open(&path, 0, 8).unwrap();
        assert_eq!(log.held(), 13..21);
        assert!(matches!(log.read(v(23), &mut out), Err(FeedError::CursorTooOld { .. })));
        assert_eq!(log.read(v(39), &mut out).unwrap(), 1);
    }

    /// A skip marks versions missing: a reader below the mark is told its cursor is too
    /// old, appends go on above it at the next position, a later wrap never lowers the
    /// mark, and all of it survives a reopen; the shim's reader sees the same.
    #[test]
    fn a_skip_marks_versions_missing_and_a_wrap_never_lowers_the_mark() {
        use prescient_shim::feed::{FeedReadError, FeedReader};
        let dir = TempDir::new("feed-skip");
        let path = dir.file("feed.prfeed");
        let mut log = FeedLog::open(&path, 1, 8).unwrap();
        log.append(v(1), 1, false).unwrap();
        log.append(v(2), 2, false).unwrap();
        log.skip_to(v(50)).unwrap();
        log.skip_to(v(40)).unwrap();
        assert_eq!((log.dropped(), log.last_version(), log.held()), (v(50), v(2), 1..3));
        let mut out = [FeedEntry::default(); 16];
        assert!(matches!(log.read(v(2), &mut out), Err(FeedError::CursorTooOld { dropped, .. }) if dropped == v(50)));
        assert_eq!(log.read(v(50), &mut out).unwrap(), 0);
        for s in 51..=58 {
            log.append(v(s), s, false).unwrap();
        }
        // Two wraps overwrote versions 1 and 2, below the mark: it stays.
        assert_eq!((log.dropped(), log.held()), (v(50), 3..11));
        let drop_and_open = |log: FeedLog| {
            drop(log);
            FeedLog::open(&path, 1, 8).unwrap()
        };
        let mut log = drop_and_open(log);
        assert_eq!(log.dropped(), v(50));
        assert_eq!(log.read(v(50), &mut out).unwrap(), 8);
        assert_eq!(out[0], FeedEntry { position: 3, version: v(51), key_hash: 51, tombstone: false });
        let mut reader = FeedReader::open(&path).unwrap();
        assert!(
            matches!(reader.read(v(2), &mut out), Err(FeedReadError::CursorTooOld { dropped, .. }) if dropped == v(50))
        );
        assert_eq!(reader.read(v(50), &mut out).unwrap(), 8);
        // The next wrap overwrites version 51, above the mark: the mark follows it.
        log.append(v(59), 59, false).unwrap();
        assert_eq!(log.dropped(), v(51));
    }

    /// Random appends, reopens and reads from random cursors against a model of the
    /// feed: a read returns exactly the model's entries after the cursor, or
    /// `CursorTooOld` exactly when one of them was overwritten.
    #[test]
    fn reads_from_any_cursor_match_a_model_through_wraps_and_reopens() {
        let dir = TempDir::new("feed-model");
        for seed in 1..=20u64 {
            let mut rng = crate::sim::rng::Rng::new(seed);
            let path = dir.file(&format!("feed-{seed}.prfeed"));
            let entries = 8 << rng.below(3);
            let mut log = FeedLog::open(&path, 2, entries as u32).unwrap();
            let mut model: Vec<FeedEntry> = Vec::new();
            let mut version = 0;
            let mut out = vec![FeedEntry::default(); 40];
            for _ in 0..300 {
                match rng.below(10) {
                    0 => log = FeedLog::open(&path, 2, entries as u32).unwrap(),
                    1..=5 => {
                        version += 1 + rng.below(3);
                        let (key_hash, tombstone) = (rng.next_u64(), rng.chance(100_000));
                        let position = log.append(version, key_hash, tombstone).unwrap();
                        model.push(FeedEntry { position, version, key_hash, tombstone });
                        assert_eq!(position, model.len() as u64);
                    }
                    _ => {
                        let after = rng.below(version + 2);
                        let kept = model.len().saturating_sub(entries as usize);
                        let want: Vec<FeedEntry> = model.iter().filter(|e| e.version > after).copied().collect();
                        let lost = model[..kept].iter().any(|e| e.version > after);
                        let n = out.len().min(want.len());
                        match log.read(after, &mut out) {
                            Ok(got) => {
                                assert!(!lost, "seed {seed}: a read from {after} skipped overwritten entries");
                                assert_eq!(out[..got], want[..n], "seed {seed}: read from {after}");
                            }
                            Err(FeedError::CursorTooOld { .. }) => assert!(lost, "seed {seed}: {after} refused"),
                            Err(e) => panic!("seed {seed}: {e}"),
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_torn_last_entry_is_not_part_of_the_feed_after_a_crash() {
        let dir = TempDir::new("feed-torn");
        let path = dir.file("feed.prfeed");
        let mut log = FeedLog::open(&path, 1, 8).unwrap();
        for s in 1..=3 {
            log.append(v(s), s, false).unwrap();
        }
        // The third append was torn: its checksum no longer matches.
        let at = HEADER_PAGE_BYTES + 3 * ENTRY_LEN + 10;
        let mut byte = [0u8; 1];
        log.memory.read(at, &mut byte).unwrap();
        log.memory.write(at, &[byte[0] ^ 0xff]).unwrap();
        drop(log);
        let mut log = FeedLog::open(&path, 1, 8).unwrap();
        assert_eq!((log.held(), log.last_version()), (1..3, v(2)));
        assert_eq!(log.append(v(3), 3, false).unwrap(), 3);
    }
}
