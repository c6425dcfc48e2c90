//! The change-feed log a node keeps, and [`FeedReader`], which follows it from another
//! process: the committed writes the node released, in global (version) order, from a
//! cursor the reader keeps (the version of the last entry it took; 0: from the start).
//!
//! This module is the one definition of the on-disk format; `prescient-dpu`'s writer
//! (`cluster::format::feed::FeedLog`) uses it. The file is a 4096-byte header page
//! followed by `entries` (a power of two) 32-byte entries; position `p` (1, 2, ... in
//! feed order) lives in entry `p % entries`. All integers little-endian:
//!
//! ```text
//! header page:  0..8 magic "PRSCFEED"   8..12 format (1)   12 node   13..16 zero
//!              16..20 entries          20..24 CRC32C of bytes 0..20   24..64 zero
//!              64..72 dropped: the version of the newest entry overwritten (0: none)
//! entry:        0..8 position   8..16 version   16..24 key_hash
//!              24..28 flags (bit 0 tombstone)   28..32 CRC32C of bytes 0..28
//! ```
//!
//! The header page's first 64 bytes are the common header of every cluster file
//! ([`crate::file_header`], with the node as first id, no second id and one geometry
//! parameter, the entries), checked by the same code that `prescient-dpu` uses for its
//! files.
//!
//! The writer is the only writer and appends in place with plain stores: positions are
//! dense and versions rise with them. Before it overwrites an entry it stores that
//! entry's version in `dropped`, then a release fence. So the reader, which never
//! trusts a byte of the file:
//! - takes an entry only if its checksum holds and its position is the one it expects;
//!   anything else is an entry not written yet (or torn: being written), or one
//!   overwritten since;
//! - copies entries out word by word (atomic loads, never a reference into the file),
//!   then, after an acquire fence, re-reads `dropped` (a seqlock): an entry copied while
//!   it was being overwritten had its version in `dropped` before any byte of it
//!   changed, so a cursor below `dropped` gets [`FeedReadError::CursorTooOld`] and
//!   nothing of that read is returned. A reader is never handed a feed with a gap.
//!
//! A file scribbled by a buggy or hostile process gives a clear error or an empty read,
//! never a panic or an entry out of order. (A file truncated under a live mapping is a
//! SIGBUS, as for any mapped file: `prescient-dpu` never truncates it.)
#![forbid(unsafe_code)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, Ordering};

use crate::config::{FEED_ANCHOR_PROBES, FEED_ENTRIES_MAX, FEED_ENTRIES_MIN, FEED_ENTRY_BYTES, FEED_HEADER_BYTES};
use crate::file_header::{FileHeader, HeaderError, COMMON_BYTES};
use crate::region::FileView;

/// Magic of a change-feed log file.
pub const MAGIC: &[u8; 8] = b"PRSCFEED";
// Format of the header page this build reads: the cluster files' common format.
pub use crate::file_header::FORMAT;
/// Bytes of the header page; the entries start after it.
pub const HEADER_BYTES: usize = FEED_HEADER_BYTES;
/// Bytes of one entry.
pub const ENTRY_LEN: usize = FEED_ENTRY_BYTES;
/// Flag: the write deletes the key.
pub const FLAG_TOMBSTONE: u32 = 1 << 0;
/// Where in the header page the version of the newest overwritten entry is kept.
pub const DROPPED_AT: usize = header::DROPPED.start;

/// Byte ranges of the header page's feed fields; the rest of its first 64 bytes is the
/// common header's ([`crate::file_header::field`]).
pub mod header {
    use crate::file_header::{field, COMMON_BYTES};
    use std::ops::Range;
    /// The node whose feed this is: the common header's first id.
    pub const NODE: usize = field::ID0;
    /// The common header's second id: zero, a feed has none.
    pub const ID1: usize = field::ID1;
    /// Entries in the ring: the common header's one geometry parameter.
    pub const ENTRIES: Range<usize> = field::PARAMS..field::PARAMS + 4;
    /// The version of the newest entry overwritten (0: none); written before each
    /// overwrite.
    pub const DROPPED: Range<usize> = COMMON_BYTES..COMMON_BYTES + 8;
}

/// Byte ranges of an entry's fields.
pub mod field {
    use std::ops::Range;
    /// Position in the feed (from 1).
    pub const POSITION: Range<usize> = 0..8;
    /// The write's sequencer version.
    pub const VERSION: Range<usize> = 8..16;
    /// Hash of the key written.
    pub const KEY_HASH: Range<usize> = 16..24;
    /// Flags.
    pub const FLAGS: Range<usize> = 24..28;
    /// Checksum of the bytes before it.
    pub const CRC: Range<usize> = 28..32;
}

const _: () = assert!(field::CRC.end == ENTRY_LEN);
const _: () = assert!(header::DROPPED.end <= HEADER_BYTES && DROPPED_AT % 8 == 0, "dropped is an aligned word");

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes(b.try_into().expect("field is 4 bytes"))
}

fn le64(b: &[u8]) -> u64 {
    u64::from_le_bytes(b.try_into().expect("field is 8 bytes"))
}

/// One committed write of the feed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeedEntry {
    /// Its position in this node's feed (from 1).
    pub position: u64,
    /// Its version: the order of the feed, the same on every node.
    pub version: u64,
    /// Hash of the key written.
    pub key_hash: u64,
    /// The write deletes the key.
    pub tombstone: bool,
}

impl FeedEntry {
    /// The entry's bytes.
    pub fn emit(&self) -> [u8; ENTRY_LEN] {
        let mut b = [0u8; ENTRY_LEN];
        b[field::POSITION].copy_from_slice(&self.position.to_le_bytes());
        b[field::VERSION].copy_from_slice(&self.version.to_le_bytes());
        b[field::KEY_HASH].copy_from_slice(&self.key_hash.to_le_bytes());
        let flags = if self.tombstone { FLAG_TOMBSTONE } else { 0 };
        b[field::FLAGS].copy_from_slice(&flags.to_le_bytes());
        let crc = crc32c::crc32c(&b[..field::CRC.start]);
        b[field::CRC].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// An entry read from the file: `None` if it was never written, is torn, or has
    /// unknown flags.
    pub fn parse(b: &[u8; ENTRY_LEN]) -> Option<Self> {
        if crc32c::crc32c(&b[..field::CRC.start]) != le32(&b[field::CRC]) {
            return None;
        }
        let flags = le32(&b[field::FLAGS]);
        let position = le64(&b[field::POSITION]);
        if flags & !FLAG_TOMBSTONE != 0 || position == 0 {
            return None;
        }
        Some(Self {
            position,
            version: le64(&b[field::VERSION]),
            key_hash: le64(&b[field::KEY_HASH]),
            tombstone: flags & FLAG_TOMBSTONE != 0,
        })
    }
}

/// What is wrong with a file's header page, as a change-feed log.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderProblem {
    /// The common header of every cluster file is not a feed log's, or is damaged: the
    /// file is short, another kind of file, of another format, fails its checksum, or
    /// has a nonzero byte where a feed log has none (its second id).
    #[error(transparent)]
    Common(#[from] HeaderError),
    /// A ring size outside the limits.
    #[error(
        "its header gives {entries} entries, not a power of two from {FEED_ENTRIES_MIN} to {FEED_ENTRIES_MAX}: the header is damaged"
    )]
    Entries {
        /// Entries in the header.
        entries: u32,
    },
}

/// The facts of a feed log's header page: whose feed it is and its ring's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeedHeader {
    /// The node whose feed this is.
    pub node: u8,
    /// Entries in the ring (a power of two within the limits).
    pub entries: u32,
}

impl FeedHeader {
    /// Checks the common part of a header page (its first 64 bytes): the common header
    /// of every cluster file ([`FileHeader::parse_common`]: magic, format, checksum, zero
    /// bytes), then what a feed log adds: no second id, and the ring size.
    pub fn parse(page: &[u8; COMMON_BYTES]) -> Result<Self, HeaderProblem> {
        let found = FileHeader::<1>::parse_common(MAGIC, page)?;
        if found.ids[1] != 0 {
            return Err(HeaderError::NonZero { offset: header::ID1, value: found.ids[1] }.into());
        }
        let entries = found.params[0];
        if !entries.is_power_of_two() || !(FEED_ENTRIES_MIN..=FEED_ENTRIES_MAX).contains(&entries) {
            return Err(HeaderProblem::Entries { entries });
        }
        Ok(Self { node: found.ids[0], entries })
    }

    /// Bytes of a file with this header: the header page and the ring.
    pub fn file_bytes(&self) -> u64 {
        HEADER_BYTES as u64 + u64::from(self.entries) * ENTRY_LEN as u64
    }
}

/// What failed while following a change-feed log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FeedReadError {
    /// Opening, measuring or mapping the file failed.
    #[error("cannot {action} feed log {path}: {source}; check that the path names a node's feed log and that this process may read it")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not a feed log this build reads.
    #[error("{path} is not a change-feed log this build reads: {problem}; point the reader at a node's feed log, and run the shim and prescient-dpu from the same release")]
    NotAFeed {
        /// The file.
        path: PathBuf,
        /// What is wrong with its header page.
        problem: HeaderProblem,
    },
    /// The file's length does not match its header.
    #[error("feed log {path} is {len} bytes, its header says {expected}: it was truncated or extended by something other than prescient-dpu; follow another node's feed")]
    Length {
        /// The file.
        path: PathBuf,
        /// Its length.
        len: u64,
        /// The length its header implies.
        expected: u64,
    },
    /// Entries after the cursor were overwritten: the feed no longer covers it.
    #[error("feed cursor {after:#x} is older than the feed log holds (entries up to version {dropped:#x} were overwritten): rebuild from a snapshot taken at version {dropped:#x} or later and follow from that snapshot's version, or give the feed log more entries")]
    CursorTooOld {
        /// The reader's cursor.
        after: u64,
        /// The newest version overwritten.
        dropped: u64,
    },
    /// The file contradicts what the node's writer keeps true: it was damaged, or
    /// written by something else.
    #[error("feed log {path} is damaged at entry {position}: {damage}; the file was written by something other than prescient-dpu: follow another node's feed")]
    Damaged {
        /// The file.
        path: PathBuf,
        /// The entry's position.
        position: u64,
        /// What is wrong.
        damage: Damage,
    },
}

/// How a feed log contradicts its writer's invariants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Damage {
    /// Versions do not rise with positions.
    #[error("its version {version:#x} is not above {previous:#x} of the entry before it")]
    Disorder {
        /// The entry's version.
        version: u64,
        /// The version of the entry before it.
        previous: u64,
    },
    /// The entry right after the cursor was overwritten, but `dropped` does not say so.
    #[error("it follows the cursor and was overwritten, but the header says only versions up to {dropped:#x} were")]
    DroppedBehind {
        /// The header's `dropped`.
        dropped: u64,
    },
}

/// What one position's entry of the ring holds, as read now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    /// The entry of that position, whole.
    Held(FeedEntry),
    /// A later position's entry: this one was overwritten.
    Later,
    /// An earlier position's entry: this one is not written yet.
    Earlier,
    /// No whole entry of this slot (torn, never written, or scribbled).
    Unreadable,
}

/// Where a read from a cursor starts.
#[derive(Clone, Copy, Debug)]
struct Start {
    /// The first position to look at.
    position: u64,
    /// The version of the entry before it, when it was seen (or handed out) whole;
    /// `None` when that entry was seen overwritten, or `position` is 1.
    previous: Option<u64>,
}

/// The last entry a reader handed out: where a follower's next read starts.
#[derive(Clone, Copy, Debug)]
struct Hint {
    position: u64,
    version: u64,
}

/// What one copy took.
#[derive(Clone, Copy, Debug)]
struct Copied {
    /// Entries handed out.
    n: usize,
    /// The last of them.
    last: Option<Hint>,
    /// The position right after the cursor's entry, seen overwritten: `dropped` must be
    /// above the cursor.
    lost: Option<u64>,
}

/// Follows one node's change-feed log, read-only, from another process.
///
/// ```no_run
/// use prescient_shim::feed::{FeedEntry, FeedReadError, FeedReader};
///
/// # fn apply(_: &FeedEntry) {}
/// # fn main() -> Result<(), FeedReadError> {
/// let mut feed = FeedReader::open("/var/lib/prescient/node0/feed.prfeed".as_ref())?;
/// let mut cursor = 0; // kept with the store's data: 0 is from the start
/// let mut batch = [FeedEntry::default(); 64];
/// loop {
///     let n = feed.read(cursor, &mut batch)?; // CursorTooOld: rebuild from a snapshot
///     for entry in &batch[..n] {
///         apply(entry);
///         cursor = entry.version;
///     }
///     if n == 0 {
///         std::thread::sleep(std::time::Duration::from_millis(1));
///     }
/// }
/// # }
/// ```
pub struct FeedReader {
    path: PathBuf,
    view: FileView,
    node: u8,
    /// Entries in the ring (a power of two): a position's slot is `position & mask`.
    entries: u64,
    mask: u64,
    hint: Option<Hint>,
    /// Entries loaded from the ring so far (tests check a follower's reads stay O(1)).
    #[cfg(test)]
    loads: std::cell::Cell<u64>,
}

impl std::fmt::Debug for FeedReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeedReader")
            .field("path", &self.path)
            .field("node", &self.node)
            .field("entries", &self.entries)
            .finish()
    }
}

impl FeedReader {
    /// Maps the feed log at `path` read-only and shared, and checks its header page
    /// (magic, format, checksum, ring size) and its length.
    pub fn open(path: &Path) -> Result<Self, FeedReadError> {
        let io = |action| move |source| FeedReadError::Io { action, path: path.to_owned(), source };
        let not_a_feed = |problem| FeedReadError::NotAFeed { path: path.to_owned(), problem };
        let file = File::open(path).map_err(io("open"))?;
        let len = file.metadata().map_err(io("read the length of"))?.len();
        if len < HEADER_BYTES as u64 {
            let len = usize::try_from(len).expect("below a header page");
            return Err(not_a_feed(HeaderError::Truncated { len, need: HEADER_BYTES }.into()));
        }
        let page = FileView::map(&file, HEADER_BYTES).map_err(io("map"))?;
        let found = FeedHeader::parse(&words(&page, 0)).map_err(not_a_feed)?;
        drop(page);
        if len != found.file_bytes() {
            return Err(FeedReadError::Length { path: path.to_owned(), len, expected: found.file_bytes() });
        }
        let file_bytes = usize::try_from(found.file_bytes()).expect("a feed log within the limits fits memory");
        let view = FileView::map(&file, file_bytes).map_err(io("map"))?;
        let entries = u64::from(found.entries);
        Ok(Self {
            path: path.to_owned(),
            view,
            node: found.node,
            entries,
            mask: entries - 1,
            hint: None,
            #[cfg(test)]
            loads: std::cell::Cell::new(0),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The node whose feed this is.
    pub fn node(&self) -> u8 {
        self.node
    }

    /// Entries in the ring: how far a reader may fall behind the writer before its
    /// cursor is too old.
    pub fn entries(&self) -> u32 {
        self.entries as u32
    }

    /// The version of the newest entry overwritten so far (0: none): a cursor below it
    /// is too old.
    pub fn dropped(&self) -> u64 {
        self.view.load_u64(DROPPED_AT, Ordering::Acquire)
    }

    /// Up to `out.len()` entries with versions above `after` (0: from the start), in
    /// order, each exactly once; how many were written to `out`. A reader keeps the
    /// version of the last entry it took as its cursor and so resumes where it
    /// stopped, across restarts of either side. 0 entries: none after the cursor yet
    /// (or the one after it is being written). Safe while the writer appends in another
    /// process; a follower's read costs O(entries returned) and allocates nothing.
    ///
    /// # Errors
    /// [`FeedReadError::CursorTooOld`] once entries after `after` were overwritten;
    /// [`FeedReadError::Damaged`] for a file whose versions do not rise.
    pub fn read(&mut self, after: u64, out: &mut [FeedEntry]) -> Result<usize, FeedReadError> {
        self.read_each(after, out.len(), |i, e| out[i] = e)
    }

    /// [`FeedReader::read`], handing the `i`th entry to `put(i, entry)` for `i` in
    /// `0..max`. On an error the entries handed so far are not part of the feed.
    pub(crate) fn read_each(
        &mut self,
        after: u64,
        max: usize,
        mut put: impl FnMut(usize, FeedEntry),
    ) -> Result<usize, FeedReadError> {
        let dropped = self.dropped();
        if after < dropped {
            return Err(FeedReadError::CursorTooOld { after, dropped });
        }
        let mut copied = Copied { n: 0, last: None, lost: None };
        if max > 0 {
            if let Some(start) = self.locate(after) {
                copied = self.copy(after, start, max, &mut put)?;
            }
        }
        // Orders every entry load above before the re-read of `dropped`: pairs with the
        // writer's release fence between storing `dropped` and overwriting an entry, so
        // an entry copied while it was being overwritten shows here as a `dropped` at
        // or above its version.
        fence(Ordering::Acquire);
        let dropped = self.view.load_u64(DROPPED_AT, Ordering::Relaxed);
        if after < dropped {
            return Err(FeedReadError::CursorTooOld { after, dropped });
        }
        if let Some(position) = copied.lost {
            let damage = Damage::DroppedBehind { dropped };
            return Err(FeedReadError::Damaged { path: self.path.clone(), position, damage });
        }
        if let Some(hint) = copied.last {
            self.hint = Some(hint);
        }
        Ok(copied.n)
    }

    /// Copies the entries from `start` on with versions above `after`, up to `max`.
    /// Stops at the first entry not written yet, or overwritten once one was copied
    /// (the caller's re-read of `dropped` then refuses the read). Leading entries at or
    /// below `after`, or overwritten, are passed over (at most a ring's worth), which
    /// the caller's check covers too.
    fn copy(
        &self,
        after: u64,
        start: Start,
        max: usize,
        put: &mut impl FnMut(usize, FeedEntry),
    ) -> Result<Copied, FeedReadError> {
        let (mut position, mut previous) = (start.position, start.previous);
        let mut copied = Copied { n: 0, last: None, lost: None };
        let mut passed = 0;
        while copied.n < max && passed <= self.entries {
            match self.slot(position) {
                Slot::Held(e) => {
                    if let Some(previous) = previous.filter(|&v| e.version <= v) {
                        let damage = Damage::Disorder { version: e.version, previous };
                        return Err(FeedReadError::Damaged { path: self.path.clone(), position, damage });
                    }
                    previous = Some(e.version);
                    if e.version > after {
                        put(copied.n, e);
                        copied.n += 1;
                        copied.last = Some(Hint { position, version: e.version });
                    }
                }
                // Overwritten before anything was copied: its version is at most
                // `dropped`, which the caller checks against `after`. Right after the
                // entry whose version is the cursor, its version is above the cursor:
                // `dropped` must say so.
                Slot::Later if copied.n == 0 => {
                    if previous == Some(after) {
                        copied.lost = Some(position);
                    }
                    previous = None;
                }
                Slot::Later | Slot::Earlier | Slot::Unreadable => break,
            }
            if copied.n == 0 {
                passed += 1;
            }
            let Some(next) = position.checked_add(1) else { break };
            position = next;
        }
        Ok(copied)
    }

    /// Where a read from `after` starts: the position after the last one handed out
    /// when `after` is its version; otherwise found by a search over the positions
    /// held, from an entry known to be held. `None`: no entry is readable (an empty
    /// feed, or one whose first entries are being written).
    fn locate(&self, after: u64) -> Option<Start> {
        if let Some(hint) = self.hint.filter(|h| h.version == after) {
            return Some(Start { position: hint.position.checked_add(1)?, previous: Some(hint.version) });
        }
        let anchor = self.anchor()?;
        let n = self.entries;
        // Invariant: every position below `lo` was seen at or below `after`, or
        // overwritten (`previous` as for `Start`); `hi` and above are not.
        let (mut lo, mut previous, mut hi);
        if anchor.version <= after {
            (lo, previous, hi) =
                (anchor.position.saturating_add(1), Some(anchor.version), anchor.position.saturating_add(n));
            let mut step = 1;
            while step < n {
                let Some(q) = anchor.position.checked_add(step) else { break };
                match self.below(q, after) {
                    Some(seen) => (lo, previous, step) = (q.saturating_add(1), seen, step * 2),
                    None => {
                        hi = q;
                        break;
                    }
                }
            }
        } else {
            // The anchor overwrote the entry `n` before it: nothing older is held.
            (lo, previous, hi) = (anchor.position.saturating_sub(n - 1).max(1), None, anchor.position);
            let mut step = 1;
            while step < n {
                let Some(q) = anchor.position.checked_sub(step).filter(|&q| q >= lo) else { break };
                match self.below(q, after) {
                    Some(seen) => {
                        (lo, previous) = (q.saturating_add(1), seen);
                        break;
                    }
                    None => (hi, step) = (q, step * 2),
                }
            }
        }
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.below(mid, after) {
                Some(seen) => (lo, previous) = (mid.saturating_add(1), seen),
                None => hi = mid,
            }
        }
        Some(Start { position: lo, previous })
    }

    /// `Some` when position `q` is below where a read from `after` starts: held with a
    /// version at or below `after` (`Some(Some(version))`) or overwritten
    /// (`Some(None)`). `None` when it is held above `after`, not written yet or
    /// unreadable.
    fn below(&self, q: u64, after: u64) -> Option<Option<u64>> {
        match self.slot(q) {
            Slot::Held(e) if e.version <= after => Some(Some(e.version)),
            Slot::Later => Some(None),
            Slot::Held(_) | Slot::Earlier | Slot::Unreadable => None,
        }
    }

    /// An entry held now, to search from: the last one handed out if it is still in
    /// place, else the first whole entry in the first few slots (a live writer tears at
    /// most one slot, a crash leaves at most one more).
    fn anchor(&self) -> Option<FeedEntry> {
        if let Some(Slot::Held(e)) = self.hint.map(|h| self.slot(h.position)) {
            return Some(e);
        }
        (1..=FEED_ANCHOR_PROBES).find_map(|index| self.load(index))
    }

    /// The whole entry in slot `index`, if it is in its place (`position & mask ==
    /// index`).
    fn load(&self, index: u64) -> Option<FeedEntry> {
        debug_assert!(index <= self.mask);
        #[cfg(test)]
        self.loads.set(self.loads.get() + 1);
        let at = HEADER_BYTES + index as usize * ENTRY_LEN;
        let mut b = [0u8; ENTRY_LEN];
        for (i, word) in b.chunks_exact_mut(8).enumerate() {
            word.copy_from_slice(&self.view.load_u64(at + 8 * i, Ordering::Relaxed).to_ne_bytes());
        }
        FeedEntry::parse(&b).filter(|e| e.position & self.mask == index)
    }

    /// What the slot of `position` holds now.
    fn slot(&self, position: u64) -> Slot {
        match self.load(position & self.mask) {
            Some(e) if e.position == position => Slot::Held(e),
            Some(e) if e.position > position => Slot::Later,
            Some(_) => Slot::Earlier,
            None => Slot::Unreadable,
        }
    }
}

/// The first 64 bytes at `offset` of `view`, loaded a word at a time.
fn words(view: &FileView, offset: usize) -> [u8; COMMON_BYTES] {
    let mut b = [0u8; COMMON_BYTES];
    for (i, word) in b.chunks_exact_mut(8).enumerate() {
        word.copy_from_slice(&view.load_u64(offset + 8 * i, Ordering::Relaxed).to_ne_bytes());
    }
    b
}

#[cfg(test)]
pub(crate) mod testing {
    //! A feed log written by the writer's protocol through `pwrite` (the page cache the
    //! reader's mapping shares), with the model of everything appended.
    use std::fs::{File, OpenOptions};
    use std::os::unix::fs::FileExt;
    use std::path::PathBuf;

    use super::*;

    /// The header page `prescient-dpu` writes for node `node` with `entries` entries,
    /// byte by byte.
    pub fn header_page(node: u8, entries: u32) -> Vec<u8> {
        let mut page = vec![0u8; HEADER_BYTES];
        page[..8].copy_from_slice(b"PRSCFEED");
        page[8] = 1;
        page[12] = node;
        page[16..20].copy_from_slice(&entries.to_le_bytes());
        let crc = crc32c::crc32c(&page[..20]);
        page[20..24].copy_from_slice(&crc.to_le_bytes());
        page
    }

    /// A feed log file under the temporary directory, removed on drop.
    pub struct TestLog {
        pub path: PathBuf,
        file: File,
        entries: u64,
        oldest: u64,
        /// Every entry appended, in order (position `p` at `p - 1`).
        pub model: Vec<FeedEntry>,
    }

    impl TestLog {
        /// A fresh feed log of node 7 with `entries` entries.
        pub fn create(name: &str, entries: u32) -> Self {
            let path = std::env::temp_dir().join(format!("prescient-feed-{name}-{}", std::process::id()));
            let _ = std::fs::remove_file(&path);
            let file = OpenOptions::new().read(true).write(true).create_new(true).open(&path).unwrap();
            file.write_all_at(&header_page(7, entries), 0).unwrap();
            file.set_len(HEADER_BYTES as u64 + u64::from(entries) * ENTRY_LEN as u64).unwrap();
            Self { path, file, entries: u64::from(entries), oldest: 1, model: Vec::new() }
        }

        /// Writes `bytes` at `offset` of the file.
        pub fn scribble(&self, offset: u64, bytes: &[u8]) {
            self.file.write_all_at(bytes, offset).unwrap();
        }

        fn slot_offset(&self, position: u64) -> u64 {
            HEADER_BYTES as u64 + (position % self.entries) * ENTRY_LEN as u64
        }

        /// Starts the next append as the writer does, stopping after the first `bytes`
        /// of the entry (a torn write in progress, or a writer killed there).
        pub fn append_torn(&mut self, version: u64, key_hash: u64, tombstone: bool, bytes: usize) -> FeedEntry {
            let position = self.model.len() as u64 + 1;
            if position - self.oldest == self.entries {
                let gone = self.model[self.oldest as usize - 1].version;
                self.scribble(DROPPED_AT as u64, &gone.to_le_bytes());
                self.oldest += 1;
            }
            let e = FeedEntry { position, version, key_hash, tombstone };
            self.scribble(self.slot_offset(position), &e.emit()[..bytes]);
            e
        }

        /// Appends an entry as the writer does: the overwritten entry's version to
        /// `dropped` first, then the entry in place.
        pub fn append(&mut self, version: u64, key_hash: u64, tombstone: bool) -> FeedEntry {
            let e = self.append_torn(version, key_hash, tombstone, ENTRY_LEN);
            self.model.push(e);
            e
        }

        /// Finishes an append begun by [`TestLog::append_torn`].
        pub fn finish(&mut self, e: FeedEntry) {
            self.scribble(self.slot_offset(e.position), &e.emit());
            self.model.push(e);
        }

        /// The model's entries with versions above `after`.
        pub fn after(&self, after: u64) -> Vec<FeedEntry> {
            self.model.iter().filter(|e| e.version > after).copied().collect()
        }

        /// The version in the header's `dropped` word.
        pub fn dropped(&self) -> u64 {
            let mut b = [0u8; 8];
            self.file.read_exact_at(&mut b, DROPPED_AT as u64).unwrap();
            u64::from_le_bytes(b)
        }
    }

    impl Drop for TestLog {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{header_page, TestLog};
    use super::*;

    /// Version of the `s`th write in the tests: rising, with gaps.
    fn v(s: u64) -> u64 {
        (1 << 40) | (s * 2)
    }

    /// Reads everything after `after` in batches of `batch`, until an empty read.
    fn drain(reader: &mut FeedReader, mut after: u64, batch: usize) -> Result<Vec<FeedEntry>, FeedReadError> {
        let mut got = Vec::new();
        let mut out = vec![FeedEntry::default(); batch];
        loop {
            let n = reader.read(after, &mut out)?;
            if n == 0 {
                return Ok(got);
            }
            got.extend_from_slice(&out[..n]);
            after = out[n - 1].version;
        }
    }

    #[test]
    fn entry_bytes_are_golden_and_checked() {
        let e = FeedEntry { position: 2, version: 0x0100_0000_0005, key_hash: 0xaabb, tombstone: true };
        let b = e.emit();
        assert_eq!(
            &b[..28],
            &[2, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 1, 0, 0, 0xbb, 0xaa, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0]
        );
        assert_eq!(b[28..], crc32c::crc32c(&b[..28]).to_le_bytes());
        assert_eq!(FeedEntry::parse(&b), Some(e));
        let mut torn = b;
        torn[9] ^= 1;
        assert_eq!(FeedEntry::parse(&torn), None);
        assert_eq!(FeedEntry::parse(&[0; ENTRY_LEN]), None, "a never-written slot is no entry");
        let mut unknown = FeedEntry { tombstone: false, ..e }.emit();
        unknown[24] = 2;
        let crc = crc32c::crc32c(&unknown[..28]);
        unknown[28..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(FeedEntry::parse(&unknown), None, "unknown flags");
    }

    #[test]
    fn the_header_page_is_golden_and_every_damage_is_refused_saying_what_to_do() {
        const GOLDEN: [u8; 20] = [b'P', b'R', b'S', b'C', b'F', b'E', b'E', b'D', 1, 0, 0, 0, 3, 0, 0, 0, 64, 0, 0, 0];
        let page = header_page(3, 64);
        assert_eq!(page[..20], GOLDEN);
        let common = |p: &[u8]| -> [u8; 64] { p[..64].try_into().unwrap() };
        assert_eq!(FeedHeader::parse(&common(&page)), Ok(FeedHeader { node: 3, entries: 64 }));
        assert_eq!(FeedHeader { node: 3, entries: 64 }.file_bytes(), 4096 + 64 * 32);
        let damaged = |at: usize, value: u8| {
            let mut p = page.clone();
            p[at] = value;
            FeedHeader::parse(&common(&p))
        };
        assert!(matches!(damaged(0, b'X'), Err(HeaderProblem::Common(HeaderError::Magic { .. }))));
        assert_eq!(damaged(8, 2), Err(HeaderProblem::Common(HeaderError::Format { found: 2 })));
        for at in [12, 13, 16, 19, 21] {
            assert!(matches!(damaged(at, 0x55), Err(HeaderProblem::Common(HeaderError::Checksum { .. }))), "byte {at}");
        }
        assert_eq!(damaged(40, 9), Err(HeaderProblem::Common(HeaderError::NonZero { offset: 40, value: 9 })));
        for entries in [0, 4, 48, 1 << 25] {
            let p = header_page(3, entries);
            assert_eq!(FeedHeader::parse(&common(&p)), Err(HeaderProblem::Entries { entries }));
        }
        // With the checksum made good: a common zero byte, and the second id a feed has not.
        for at in [13, 14] {
            let mut p = header_page(3, 64);
            p[at] = 1;
            let crc = crc32c::crc32c(&p[..20]);
            p[20..24].copy_from_slice(&crc.to_le_bytes());
            let e = FeedHeader::parse(&common(&p)).unwrap_err();
            assert_eq!(e, HeaderProblem::Common(HeaderError::NonZero { offset: at, value: 1 }));
            assert!(e.to_string().contains("must be zero: the header is damaged or of a newer format"), "{e}");
        }

        // Whole files: each refusal names the file and says what to do.
        let log = TestLog::create("header", 16);
        let reader = FeedReader::open(&log.path).unwrap();
        assert_eq!((reader.node(), reader.entries(), reader.dropped()), (7, 16, 0));
        let missing = FeedReader::open(&log.path.with_extension("missing")).unwrap_err();
        assert!(matches!(missing, FeedReadError::Io { action: "open", .. }), "{missing}");
        assert!(missing.to_string().contains("check that the path names a node's feed log"), "{missing}");
        log.scribble(0, b"PRSCLOG!");
        let e = FeedReader::open(&log.path).unwrap_err();
        assert!(
            matches!(e, FeedReadError::NotAFeed { problem: HeaderProblem::Common(HeaderError::Magic { .. }), .. }),
            "{e}"
        );
        assert!(e.to_string().contains("point the reader at a node's feed log"), "{e}");
        assert!(e.to_string().contains("it is another kind of file"), "{e}");
        log.scribble(0, b"PRSCFEED");
        log.scribble(4096 + 16 * 32, &[0; 8]);
        let e = FeedReader::open(&log.path).unwrap_err();
        assert!(matches!(e, FeedReadError::Length { len: 4616, expected: 4608, .. }), "{e}");
        std::fs::write(&log.path, b"short").unwrap();
        let e = FeedReader::open(&log.path).unwrap_err();
        assert!(
            matches!(
                e,
                FeedReadError::NotAFeed { problem: HeaderProblem::Common(HeaderError::Truncated { len: 5, .. }), .. }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("it is 5 bytes long, shorter than its 4096-byte header page"), "{e}");
    }

    #[test]
    fn a_follower_gets_every_entry_once_and_resumes_from_its_cursor_after_a_reopen() {
        let mut log = TestLog::create("resume", 16);
        let mut reader = FeedReader::open(&log.path).unwrap();
        let mut out = [FeedEntry::default(); 3];
        assert_eq!(reader.read(0, &mut out).unwrap(), 0, "an empty feed");
        for s in [1, 2, 5, 9, 10] {
            log.append(v(s), s * 100, s == 5);
        }
        assert_eq!(reader.read(0, &mut out).unwrap(), 3);
        assert_eq!(out.map(|e| e.version), [v(1), v(2), v(5)]);
        assert!(out[2].tombstone && !out[1].tombstone);
        let cursor = out[1].version;
        drop(reader);
        let mut reader = FeedReader::open(&log.path).unwrap();
        assert_eq!(drain(&mut reader, cursor, 3).unwrap(), log.after(cursor));
        // A cursor between versions, one past the end, an empty output.
        assert_eq!(reader.read(v(3), &mut out).unwrap(), 3);
        assert_eq!(out[0], log.model[2]);
        assert_eq!(reader.read(v(10), &mut out).unwrap(), 0);
        assert_eq!(reader.read(v(10) + 7, &mut out).unwrap(), 0);
        assert_eq!(reader.read(0, &mut []).unwrap(), 0);
        // It goes on as the writer appends, through several wraps.
        let mut cursor = v(10);
        for s in 11..=100 {
            log.append(v(s), s, false);
            let got = drain(&mut reader, cursor, 2).unwrap();
            assert_eq!(got, log.model[log.model.len() - 1..]);
            cursor = got[0].version;
        }
    }

    #[test]
    fn a_followers_read_loads_only_the_entries_it_returns() {
        let mut log = TestLog::create("hint", 1 << 12);
        for s in 1..=3000 {
            log.append(v(s), s, false);
        }
        let mut reader = FeedReader::open(&log.path).unwrap();
        let mut out = [FeedEntry::default(); 8];
        let n = reader.read(v(2000), &mut out).unwrap();
        assert_eq!(out[..n], log.model[2000..2008]);
        let mut cursor = out[n - 1].version;
        for s in 3001..=3100 {
            log.append(v(s), s, false);
            let before = reader.loads.get();
            let n = reader.read(cursor, &mut out).unwrap();
            assert!(n >= 1);
            // The entries returned, and the slot after them when the output had room.
            assert!(reader.loads.get() - before <= n as u64 + 1, "a follower's read searched");
            cursor = out[n - 1].version;
        }
    }

    #[test]
    fn a_torn_entry_is_not_there_yet() {
        let mut log = TestLog::create("torn", 8);
        for s in 1..=3 {
            log.append(v(s), s, false);
        }
        let mut reader = FeedReader::open(&log.path).unwrap();
        let torn = log.append_torn(v(4), 4, true, 16);
        assert_eq!(drain(&mut reader, 0, 8).unwrap(), log.model, "the torn fourth entry is not handed out");
        assert_eq!(drain(&mut reader, v(3), 8).unwrap(), []);
        log.finish(torn);
        assert_eq!(drain(&mut reader, v(3), 8).unwrap(), [torn]);

        // A wrap in progress: the first entry's version is in `dropped`, its slot half
        // overwritten by the ninth. A follower past it reads on; a reader with no hint
        // whose cursor is the first entry cannot tell the torn slot from the next entry
        // being written, so it reads nothing until the write is whole (never a gap).
        let mut follower = FeedReader::open(&log.path).unwrap();
        assert_eq!(follower.read(0, &mut [FeedEntry::default(); 1]).unwrap(), 1);
        for s in 5..=8 {
            log.append(v(s), s, false);
        }
        let ninth = log.append_torn(v(9), 9, false, 20);
        assert_eq!(log.dropped(), v(1));
        let mut reader = FeedReader::open(&log.path).unwrap();
        assert!(
            matches!(drain(&mut reader, 0, 8), Err(FeedReadError::CursorTooOld { after: 0, dropped }) if dropped == v(1))
        );
        assert_eq!(drain(&mut follower, v(1), 3).unwrap(), log.model[1..8]);
        assert_eq!(drain(&mut reader, v(1), 3).unwrap(), []);
        assert_eq!(drain(&mut reader, v(2), 3).unwrap(), log.model[2..8]);
        log.finish(ninth);
        assert_eq!(drain(&mut reader, v(1), 3).unwrap(), log.model[1..9]);
    }

    #[test]
    fn a_reader_that_falls_a_ring_behind_is_told_its_cursor_is_too_old() {
        let mut log = TestLog::create("too-old", 8);
        for s in 1..=5 {
            log.append(v(s), s, false);
        }
        let mut reader = FeedReader::open(&log.path).unwrap();
        let mut out = [FeedEntry::default(); 2];
        assert_eq!(reader.read(0, &mut out).unwrap(), 2);
        for s in 6..=20 {
            log.append(v(s), s, false);
        }
        // Positions 13..=20 are held; 12 was the last overwritten.
        let e = reader.read(out[1].version, &mut out).unwrap_err();
        assert!(
            matches!(e, FeedReadError::CursorTooOld { after, dropped } if after == v(2) && dropped == v(12)),
            "{e}"
        );
        assert!(e.to_string().contains("rebuild from a snapshot"), "{e}");
        assert_eq!(reader.dropped(), v(12));
        assert!(matches!(reader.read(v(12) - 1, &mut out), Err(FeedReadError::CursorTooOld { .. })));
        assert_eq!(drain(&mut reader, v(12), 3).unwrap(), log.model[12..20]);
    }

    /// A small deterministic generator for the randomized tests.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Random appends, reopens and reads from random cursors (with and without the
    /// hint) against the model: a read returns exactly the model's entries after the
    /// cursor, or `CursorTooOld` exactly when one of them was overwritten.
    #[test]
    fn reads_from_any_cursor_match_a_model_through_wraps_and_reopens() {
        for seed in 1..=20u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let entries = 8u32 << rng.below(3);
            let mut log = TestLog::create(&format!("model-{seed}"), entries);
            let mut reader = FeedReader::open(&log.path).unwrap();
            let (mut version, mut follow) = (0, 0);
            let mut out = vec![FeedEntry::default(); 40];
            for _ in 0..400 {
                match rng.below(10) {
                    0 => reader = FeedReader::open(&log.path).unwrap(),
                    1..=5 => {
                        version += 1 + rng.below(3);
                        log.append(version, rng.next(), rng.below(4) == 0);
                    }
                    choice => {
                        let after = if choice == 9 { follow } else { rng.below(version + 2) };
                        let want = log.after(after);
                        let kept = log.model.len().saturating_sub(entries as usize);
                        let lost = log.model[..kept].iter().any(|e| e.version > after);
                        let cap = 1 + rng.below(out.len() as u64) as usize;
                        match reader.read(after, &mut out[..cap]) {
                            Ok(n) => {
                                assert!(!lost, "seed {seed}: a read from {after} skipped overwritten entries");
                                assert_eq!(out[..n], want[..cap.min(want.len())], "seed {seed}: read from {after}");
                                if n > 0 && choice == 9 {
                                    follow = out[n - 1].version;
                                }
                            }
                            Err(FeedReadError::CursorTooOld { dropped, .. }) => {
                                assert!(lost, "seed {seed}: {after} refused");
                                assert_eq!(dropped, log.dropped());
                                if choice == 9 {
                                    follow = dropped;
                                }
                            }
                            Err(e) => panic!("seed {seed}: {e}"),
                        }
                    }
                }
            }
        }
    }

    /// Random bytes written anywhere in the ring or over `dropped`: every read gives an
    /// error or entries the writer wrote, in order, each once; never a panic.
    #[test]
    fn a_scribbled_file_gives_an_error_or_an_empty_read_never_a_wrong_entry() {
        for seed in 1..=200u64 {
            let mut rng = Rng(seed.wrapping_mul(0x2545_f491_4f6c_dd1d));
            let mut log = TestLog::create(&format!("scribble-{seed}"), 16);
            for s in 1..=(1 + rng.below(60)) {
                log.append(v(s), s, false);
            }
            let mut reader = FeedReader::open(&log.path).unwrap();
            let (dropped, kept) = (log.dropped(), log.model.len().saturating_sub(16));
            for _ in 0..1 + rng.below(6) {
                let len = 1 + rng.below(40) as usize;
                let at = if rng.below(8) == 0 { DROPPED_AT as u64 } else { 4096 + rng.below(16 * 32 - len as u64 + 1) };
                let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                log.scribble(at, &bytes);
            }
            let mut out = [FeedEntry::default(); 8];
            for _ in 0..8 {
                let after = if rng.below(2) == 0 { rng.next() } else { v(rng.below(64)) };
                let Ok(n) = reader.read(after, &mut out) else { continue };
                let got = &out[..n];
                assert!(got.iter().all(|e| log.model.contains(e) && e.version > after), "seed {seed}: {got:?}");
                assert!(got.windows(2).all(|w| w[1].position == w[0].position + 1), "seed {seed}: {got:?}");
                if log.dropped() == dropped {
                    // With `dropped` intact, no gap either: the entries are the first
                    // ones after the cursor, and none of those was lost.
                    assert!(log.model[..kept].iter().all(|e| e.version <= after), "seed {seed}: {after} lost");
                    assert_eq!(got, &log.after(after)[..n], "seed {seed}: read from {after}");
                }
            }
        }
        // A whole entry in its place whose version does not rise: refused as damaged.
        let mut log = TestLog::create("damaged", 16);
        for s in 1..=6 {
            log.append(v(s), s, false);
        }
        let forged = FeedEntry { position: 4, version: v(1), key_hash: 0, tombstone: false };
        log.scribble(4096 + 4 * 32, &forged.emit());
        let mut reader = FeedReader::open(&log.path).unwrap();
        let e = drain(&mut reader, 0, 8).unwrap_err();
        assert!(matches!(e, FeedReadError::Damaged { position: 4, damage: Damage::Disorder { .. }, .. }), "{e}");
        assert!(e.to_string().contains("follow another node's feed"), "{e}");
        // A `dropped` of all ones refuses every cursor below it.
        log.scribble(DROPPED_AT as u64, &[0xff; 8]);
        assert!(matches!(drain(&mut reader, v(6), 8), Err(FeedReadError::CursorTooOld { dropped: u64::MAX, .. })));

        // A follower lapped by the writer, whose `dropped` was set back: the entry right
        // after its cursor is gone, so the read is refused rather than handed a gap.
        let mut log = TestLog::create("dropped-behind", 8);
        for s in 1..=4 {
            log.append(v(s), s, false);
        }
        let mut reader = FeedReader::open(&log.path).unwrap();
        let mut out = [FeedEntry::default(); 8];
        assert_eq!(reader.read(0, &mut out).unwrap(), 4);
        for s in 5..=14 {
            log.append(v(s), s, false);
        }
        log.scribble(DROPPED_AT as u64, &0u64.to_le_bytes());
        let e = reader.read(v(4), &mut out).unwrap_err();
        assert!(
            matches!(e, FeedReadError::Damaged { position: 5, damage: Damage::DroppedBehind { dropped: 0 }, .. }),
            "{e}"
        );
    }

    /// A writer thread appends through a 16-entry ring, never more than a ring ahead of
    /// the reader's cursor, while the reader follows: every entry comes exactly once, in
    /// order, though the writer overwrites the slots right behind the reader and writes
    /// the one it reads next as it reads it.
    #[test]
    fn a_reader_racing_the_writer_sees_every_entry_once_in_order() {
        use std::sync::atomic::AtomicU64;
        use std::sync::Arc;
        const APPENDS: u64 = 20_000;
        let mut log = TestLog::create("race", 16);
        let path = log.path.clone();
        let taken = Arc::new(AtomicU64::new(0));
        let writer = {
            let taken = taken.clone();
            std::thread::spawn(move || {
                for s in 1..=APPENDS {
                    while s > taken.load(Ordering::Acquire) + 15 {
                        std::thread::yield_now();
                    }
                    log.append(v(s), s ^ 0x5555, s % 3 == 0);
                }
                log
            })
        };
        let mut reader = FeedReader::open(&path).unwrap();
        let (mut cursor, mut next) = (0, 1);
        let mut out = [FeedEntry::default(); 5];
        while next <= APPENDS {
            let n = reader.read(cursor, &mut out).unwrap();
            for e in &out[..n] {
                assert_eq!(
                    *e,
                    FeedEntry { position: next, version: v(next), key_hash: next ^ 0x5555, tombstone: next % 3 == 0 }
                );
                next += 1;
            }
            if n > 0 {
                cursor = out[n - 1].version;
                taken.store(next - 1, Ordering::Release);
            } else {
                std::thread::yield_now();
            }
        }
        drop(writer.join().unwrap());
    }

    /// A writer thread appends as fast as it can through an 8-entry ring while a reader
    /// follows: the reader is lapped again and again, also in the middle of its reads.
    /// Every read hands out the entries right after the cursor, in order, or is refused
    /// `CursorTooOld`; never a gap. (Fails when the re-read of `dropped` after the
    /// copy is taken out.)
    #[test]
    fn a_reader_lapped_while_it_reads_is_refused_never_handed_a_gap() {
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        const APPENDS: u64 = 200_000;
        let mut log = TestLog::create("lapped", 8);
        let path = log.path.clone();
        let done = Arc::new(AtomicBool::new(false));
        let writer = {
            let done = done.clone();
            std::thread::spawn(move || {
                for s in 1..=APPENDS {
                    log.append(v(s), s, false);
                }
                done.store(true, Ordering::Release);
                log
            })
        };
        let mut reader = FeedReader::open(&path).unwrap();
        let (mut cursor, mut refused, mut taken) = (0, 0u64, 0u64);
        let mut out = [FeedEntry::default(); 3];
        while !done.load(Ordering::Acquire) {
            match reader.read(cursor, &mut out) {
                Ok(n) => {
                    let first = (cursor & 0xffff_ffff) / 2 + 1;
                    for (i, e) in out[..n].iter().enumerate() {
                        let s = first + i as u64;
                        assert_eq!(*e, FeedEntry { position: s, version: v(s), key_hash: s, tombstone: false });
                    }
                    if n > 0 {
                        cursor = out[n - 1].version;
                        taken += n as u64;
                    }
                }
                Err(FeedReadError::CursorTooOld { after, dropped }) => {
                    assert!(after == cursor && dropped > cursor);
                    (cursor, refused) = (dropped, refused + 1);
                }
                Err(e) => panic!("{e}"),
            }
        }
        drop(writer.join().unwrap());
        assert!(taken > 0, "the reader took nothing ({refused} refusals)");
    }
}
