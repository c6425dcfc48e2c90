//! The fragment store: one file-backed, set-associative table per node holding the
//! fragments it was sent, which peers RDMA READ a whole set at a time to rebuild values.
//!
//! File layout: a 4096-byte header page, then `sets` sets, each a 64-byte set head and
//! `ways` records of `record_bytes` (see [`super::record`]). The header page, all
//! integers little-endian:
//!
//! ```text
//!  0..8  magic "PRSCSTOR"   8..12 format (1)   12 node   13 layout (2)   14..16 zero
//! 16..20 sets   20..24 ways   24..28 record_bytes   28..32 payload_max
//! 32..36 CRC32C of bytes 0..32   rest zero
//! ```
//!
//! A set head is one little-endian u32 (the rest zero): how many records of the keys
//! homed in this set lie in their spill sets.
//!
//! The store is sized by bytes (`cluster.store_bytes`): as many sets as fit. A key lives
//! in its home set (`key_hash % sets`) while that has room, else in its spill set (picked
//! by the hash's high half), so a set that draws more keys than its ways - the Poisson
//! tail of any hashed table - borrows room from another instead of refusing writes; the
//! store refuses a write only when both of the key's sets are full of records that must
//! stay, which near-uniform hashing makes happen only as the whole store fills. A reader
//! READs the home set; a nonzero count in its head sends it to READ the spill set too.
//!
//! Invariants:
//! - Only this process writes the store (peers only READ it), under the locks of the
//!   key's sets, so the records' heads can be trusted once the store is open:
//!   [`Store::open`] checks every non-empty record in full and empties those that fail
//!   (torn by a crash, never data), and rebuilds the set heads from the records.
//! - A new record is written payload, fragment header, header fields and checksum, then
//!   its first word with the state last (Release); a state change is a store of that one
//!   aligned word with only the state byte changed, outside the checksum. A crash in the
//!   middle of writing leaves a record that is empty or fails its checksum.
//! - A record placed in a spill set is counted in its home set's head before it is
//!   written, and uncounted only after it is emptied.
//! - A key has at most [`VERSIONS_PER_KEY_MAX`] records, and the store never drops another
//!   key's record, a Pending record that is not superseded, or the newest Committed record
//!   of a key to make room. Superseded records (older than the key's newest Committed
//!   one) are dropped when the newer write commits, or reused by the key's next write.
//! - Surviving a kill -9 needs nothing (the page cache keeps the mapping's stores);
//!   surviving power loss needs [`Store::sync_record`] after each change the node acks.
#![forbid(unsafe_code)]

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::entry::Outcome;
use super::file::{self, FileHeader, HeaderError, Opened};
use super::record::{
    field, gathered_range, set_spilled, spill_slot, RecordError, RecordRepr, RecordState, RecordView, HEAD_LEN,
};
pub use super::record::{GeometryError, StoreGeometry};
use crate::fabric::{FabricError, Memory};
use crate::limits::{
    HEADER_PAGE_BYTES, HOME_WAYS_FIRST, SET_HEAD_BYTES, STORE_LOCKS, STORE_WAYS_MAX, VERSIONS_PER_KEY_MAX,
};
use crate::stripe::HEADER_LEN as FRAGMENT_HEADER_LEN;

/// Magic of a fragment store file.
pub const MAGIC: &[u8; 8] = b"PRSCSTOR";
/// Store layout this build writes and reads (header byte 13): 2 has set heads and spill
/// sets; 0 was the layout without them.
pub const LAYOUT: u8 = 2;

/// Which node a store file belongs to and its shape: what a mismatch error shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreIdentity {
    /// The node.
    pub node: u8,
    /// The layout ([`LAYOUT`]).
    pub layout: u8,
    /// Sets.
    pub sets: u32,
    /// Ways per set.
    pub ways: u32,
    /// Bytes per record.
    pub record_bytes: u32,
    /// Most fragment bytes per record.
    pub payload_max: u32,
}

impl fmt::Display for StoreIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "node {} / layout {} / {} sets x {} ways of {}-byte records (payload_max {})",
            self.node, self.layout, self.sets, self.ways, self.record_bytes, self.payload_max
        )
    }
}

/// What failed in the fragment store, with the file or record and what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A geometry parameter is out of range.
    #[error(transparent)]
    Geometry(#[from] GeometryError),
    /// Opening, creating or reading the store file failed.
    #[error("cannot {action} fragment store {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not a fragment store of this format.
    #[error(
        "{path} is not a fragment store this build reads: {source}; remove it or point the config at another file"
    )]
    NotAStore {
        /// The file.
        path: PathBuf,
        /// What is wrong with its header page.
        source: HeaderError,
    },
    /// The file is a store of another node or geometry.
    #[error("fragment store {path} was made for {found}, but this node opens it as {expected}; remove it or fix the cluster config")]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// What the file says.
        found: StoreIdentity,
        /// What the caller asked for.
        expected: StoreIdentity,
    },
    /// The file is not as long as its header says.
    #[error("fragment store {path} is {len} bytes, its header says {expected}: the file was truncated or extended; remove it")]
    Length {
        /// The file.
        path: PathBuf,
        /// Its length.
        len: u64,
        /// The length its geometry needs.
        expected: u64,
    },
    /// Mapping, reaching or flushing the store memory failed.
    #[error("fragment store {path}: {source}")]
    Memory {
        /// The file.
        path: PathBuf,
        /// The fabric memory error.
        source: FabricError,
    },
    /// A fragment handed to [`Store::insert`] does not fit the record or the store.
    #[error("cannot store a fragment whose {what} is {len} bytes: it must be {expected}")]
    Input {
        /// What is wrong.
        what: &'static str,
        /// Its length.
        len: usize,
        /// What it must be.
        expected: String,
    },
    /// Both sets a key may use hold records that must stay: the store is full where the
    /// key goes.
    #[error("fragment store {path} ({file_bytes} bytes, {live} of {records} records in use) has no room for key {key_hash:#018x}: its home set {home} and spill set {spill} hold other keys' records, Pending writes and newest versions; raise cluster.store_bytes and restart the node with a new store file")]
    Full {
        /// The store file.
        path: PathBuf,
        /// Its size.
        file_bytes: u64,
        /// Records in use.
        live: u64,
        /// Records it has room for.
        records: u64,
        /// The key.
        key_hash: u64,
        /// Its home set.
        home: u32,
        /// Its spill set (the home set in a store of one set).
        spill: u32,
    },
    /// The key has its most records, none superseded.
    #[error("key {key_hash:#018x} already has {versions} records in home set {set} and its spill set, none superseded; its older writes must be decided first (the writer retries later)")]
    KeyFull {
        /// The key.
        key_hash: u64,
        /// Its home set.
        set: u32,
        /// Records it has.
        versions: usize,
    },
    /// An Aborted notice for a write this store already holds as Committed.
    #[error("write {stamp:#x} of key {key_hash:#018x} is Committed here but the notice says Aborted; the writer is broken or hostile: fence it")]
    Conflict {
        /// The key.
        key_hash: u64,
        /// The write's stamp.
        stamp: u64,
    },
    /// A set or way index is out of range.
    #[error("{what} {value} is out of range: the store has {limit}")]
    OutOfRange {
        /// "set" or "way".
        what: &'static str,
        /// The index.
        value: u32,
        /// How many there are.
        limit: u32,
    },
    /// An output buffer is smaller than a set.
    #[error("buffer of {len} bytes is smaller than a {need}-byte set")]
    Buffer {
        /// Buffer length.
        len: usize,
        /// Set length.
        need: usize,
    },
    /// A record changed under the store since it was opened: damaged memory or a foreign
    /// writer.
    #[error("fragment store record (set {set}, way {way}) is damaged: {source}; restart the node to drop it")]
    Record {
        /// The set.
        set: u32,
        /// The way.
        way: u32,
        /// What is wrong.
        source: RecordError,
    },
}

/// What [`Store::insert`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inserted {
    /// Written Pending at this set and way.
    Stored {
        /// The set.
        set: u32,
        /// The way.
        way: u32,
    },
    /// The same (key, stamp, fragment index) is already there (a replayed or repaired
    /// fragment): nothing written.
    Duplicate {
        /// The set.
        set: u32,
        /// The way holding it.
        way: u32,
    },
    /// A newer write of the key is already Committed here: this fragment can never be
    /// read, nothing written.
    Superseded,
}

/// What [`Store::resolve`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolved {
    /// The write's records became Committed, and the key's older records were dropped.
    Committed {
        /// Records of the write (already Committed ones included).
        records: usize,
        /// Older records of the key dropped.
        dropped: usize,
    },
    /// The write's records were dropped.
    Aborted {
        /// Records dropped.
        records: usize,
    },
    /// The write committed, but a newer write of the key is Committed here already: its
    /// records were dropped.
    Superseded {
        /// Records dropped.
        dropped: usize,
    },
    /// No record of this (key, stamp): the notice came before a repair, or the record was
    /// superseded. Nothing changed.
    Unknown,
}

/// Bytes of a record's head kept in memory: its first word (state, fragment index),
/// key hash and stamp - all that `insert` and `resolve` decide on.
const CACHED_HEAD_LEN: usize = 24;
const _: () = assert!(
    field::STATE < 8
        && field::FRAGMENT_INDEX < 8
        && field::KEY_HASH.end <= CACHED_HEAD_LEN
        && field::STAMP.end <= CACHED_HEAD_LEN
        && CACHED_HEAD_LEN <= HEAD_LEN
);

/// The cached heads of a set's ways, copied out of the cache.
type Heads = [[u8; CACHED_HEAD_LEN]; STORE_WAYS_MAX as usize];

fn head_state(head: &[u8; CACHED_HEAD_LEN]) -> RecordState {
    RecordState::from_u8(head[field::STATE]).unwrap_or(RecordState::Empty)
}

fn head_u64(head: &[u8; CACHED_HEAD_LEN], range: std::ops::Range<usize>) -> u64 {
    file::le64(&head[range])
}

/// Every way of a key's sets (from [`Store::key_heads`]): (set, way, cached head).
fn ways_of(sets: &[Option<(u32, Heads)>; 2], ways: usize) -> impl Iterator<Item = (u32, u32, &[u8; CACHED_HEAD_LEN])> {
    sets.iter()
        .flatten()
        .flat_map(move |(set, heads)| heads[..ways].iter().enumerate().map(move |(w, h)| (*set, w as u32, h)))
}

/// The live records of key `key_hash` among `ways`.
fn of_key<'a>(
    ways: impl Iterator<Item = (u32, u32, &'a [u8; CACHED_HEAD_LEN])>,
    key_hash: u64,
) -> impl Iterator<Item = (u32, u32, &'a [u8; CACHED_HEAD_LEN])> {
    ways.filter(move |(_, _, h)| head_state(h) != RecordState::Empty && head_u64(h, field::KEY_HASH) == key_hash)
}

/// Adds `delta` to a set head's count of spilled records and to the key's counter (which
/// saturates at 255 and then stays: a reader READs a spill set too often, never too
/// rarely).
fn count_spill(head: &mut [u8; SET_HEAD_BYTES], key_hash: u64, delta: i32) {
    let total = set_spilled(head).checked_add_signed(delta);
    let total = total.expect("a set's spill count follows the records placed in spill sets");
    head[..4].copy_from_slice(&total.to_le_bytes());
    let slot = &mut head[4 + spill_slot(key_hash)];
    if *slot != u8::MAX {
        *slot = slot.checked_add_signed(delta as i8).expect("a key's spill counter follows its spilled records");
    }
}

/// How full a store is: what the fill command and the full error report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreUsage {
    /// Records in use (Pending or Committed, superseded ones included).
    pub live: u64,
    /// Records the store has room for.
    pub records: u64,
    /// Records that lie in their key's spill set.
    pub spilled: u64,
    /// Bytes of memory the store keeps beside the file: the cached record heads (24 bytes
    /// a record) and set heads (64 bytes a set): its index.
    pub index_bytes: u64,
}

/// One node's fragment store.
pub struct Store {
    path: PathBuf,
    node: u8,
    geometry: StoreGeometry,
    /// The sets, from the file's byte 4096: the memory peers READ.
    memory: Arc<Memory>,
    /// Changes to set `s` hold `locks[s % STORE_LOCKS]`; a change to a key holds the locks
    /// of its home and spill sets, the lower index first.
    locks: Box<[Mutex<()>]>,
    /// A copy of the first 24 bytes of every record's head (state, fragment index, key
    /// hash, stamp), ways of a set side by side: what `insert` and `resolve` scan (16
    /// heads 1.5 KB apart in the file were 16 cache and TLB misses per scan, 11 % of a
    /// loaded node's CPU). Written with the file, under
    /// the set lock; only this process writes the store (peers only READ it).
    heads: Box<[AtomicU64]>,
    /// Per set, a copy of its 64-byte set head (the counts of its keys' records in spill
    /// sets, what readers see). Changed with the file, under the set's lock (every change
    /// is to a key homed there, which holds that lock); rebuilt from the records at open.
    set_heads: Box<[AtomicU64]>,
    /// Records in use, and of those in spill sets (for [`Self::usage`]).
    live: AtomicU64,
    spilled_total: AtomicU64,
}

/// Words of one cached head.
const HEAD_WORDS: usize = CACHED_HEAD_LEN / 8;
/// Words of one set head.
const SET_HEAD_WORDS: usize = SET_HEAD_BYTES / 8;

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.path)
            .field("node", &self.node)
            .field("geometry", &self.geometry)
            .finish()
    }
}

impl Store {
    /// Opens `node`'s store at `path`, or creates it (preallocated) if there is none. An
    /// existing file must be a store of exactly this node, layout and geometry; it is never
    /// reset. Every non-empty record is checked, and those that fail (torn by a crash) are
    /// emptied; the set heads' spill counts are rebuilt from the records.
    pub fn open(path: &Path, node: u8, geometry: StoreGeometry) -> Result<Self, StoreError> {
        let g = geometry;
        let expected = StoreIdentity {
            node,
            layout: LAYOUT,
            sets: g.sets(),
            ways: g.ways(),
            record_bytes: g.record_bytes(),
            payload_max: g.payload_max(),
        };
        let mut page = vec![0u8; HEADER_PAGE_BYTES];
        FileHeader { ids: [node, LAYOUT], params: [g.sets(), g.ways(), g.record_bytes(), g.payload_max()] }
            .emit(MAGIC, &mut page);
        let io = |e: file::FileIoError| StoreError::Io { action: e.action, path: path.to_owned(), source: e.source };
        let not_a_store = |source| StoreError::NotAStore { path: path.to_owned(), source };
        let mut created = false;
        let file = match file::open_or_create(path, &page, g.file_bytes()).map_err(io)? {
            Opened::Created(file) => {
                created = true;
                file
            }
            Opened::Existing { file, page, len } => {
                let found = FileHeader::<4>::parse(MAGIC, &page).map_err(not_a_store)?;
                let [sets, ways, record_bytes, payload_max] = found.params;
                let found =
                    StoreIdentity { node: found.ids[0], layout: found.ids[1], sets, ways, record_bytes, payload_max };
                if found != expected {
                    return Err(StoreError::Mismatch { path: path.to_owned(), found, expected });
                }
                if len != g.file_bytes() {
                    return Err(StoreError::Length { path: path.to_owned(), len, expected: g.file_bytes() });
                }
                file
            }
        };
        let memory = Memory::map_file(&file, HEADER_PAGE_BYTES as u64, g.body_bytes() as usize)
            .map_err(|source| StoreError::Memory { path: path.to_owned(), source })?;
        let store = Self {
            path: path.to_owned(),
            node,
            geometry,
            memory: Arc::new(memory),
            locks: (0..STORE_LOCKS).map(|_| Mutex::new(())).collect(),
            heads: (0..g.sets() as usize * g.ways() as usize * HEAD_WORDS).map(|_| AtomicU64::new(0)).collect(),
            set_heads: (0..g.sets() as usize * SET_HEAD_WORDS).map(|_| AtomicU64::new(0)).collect(),
            live: AtomicU64::new(0),
            spilled_total: AtomicU64::new(0),
        };
        // A file just created is all zeros (every way Empty, no spills): nothing to check,
        // and reading it would touch every page of a file sized for the whole key space.
        if !created {
            let emptied = store.recover()?;
            store.load_heads()?;
            let misplaced = store.rebuild_spills()?;
            if emptied + misplaced > 0 {
                tracing::warn!(store = %path.display(), emptied, misplaced, "emptied torn, damaged or misplaced records");
            }
        }
        Ok(store)
    }

    /// Checks every non-empty record in full and empties those that fail; returns how many.
    fn recover(&self) -> Result<usize, StoreError> {
        let mut record = vec![0u8; self.geometry.record_bytes() as usize];
        let mut emptied = 0;
        for set in 0..self.geometry.sets() {
            let _guard = self.lock(set);
            for way in 0..self.geometry.ways() {
                let base = self.record_offset(set, way);
                let mut first = [0u8; 8];
                self.read(base, &mut first)?;
                if first[field::STATE] == RecordState::Empty as u8 {
                    continue;
                }
                self.read(base, &mut record)?;
                if RecordView::new_checked(&record[..], self.geometry.payload_max()).is_err() {
                    let mut word = u64::from_ne_bytes(first);
                    word &= !(0xff << (8 * field::STATE));
                    self.memory.store_u64(base, word).map_err(self.memory_err())?;
                    emptied += 1;
                }
            }
        }
        Ok(emptied)
    }

    /// After [`Self::load_heads`]: counts every set's spilled records into its head and the
    /// totals, and empties records in a set that is neither their key's home nor spill (a
    /// foreign writer or damage: no build of this layout puts one there). Returns how many
    /// were emptied.
    fn rebuild_spills(&self) -> Result<usize, StoreError> {
        let g = self.geometry;
        let mut heads = vec![[0u8; SET_HEAD_BYTES]; g.sets() as usize];
        let (mut live, mut misplaced) = (0u64, 0usize);
        for set in 0..g.sets() {
            let _guard = self.lock(set);
            let records = self.heads(set);
            for (way, head) in records[..g.ways() as usize].iter().enumerate() {
                if head_state(head) == RecordState::Empty {
                    continue;
                }
                let key_hash = head_u64(head, field::KEY_HASH);
                let home = g.home_of(key_hash);
                if home == set {
                    live += 1;
                } else if g.spill_of(key_hash) == Some(set) {
                    live += 1;
                    count_spill(&mut heads[home as usize], key_hash, 1);
                } else {
                    self.set_state_at(self.record_offset(set, way as u32), RecordState::Empty)?;
                    misplaced += 1;
                }
            }
        }
        let mut total = 0u64;
        for (set, head) in heads.iter().enumerate() {
            let _guard = self.lock(set as u32);
            for word in 0..SET_HEAD_WORDS {
                self.write_set_head_word(set as u32, word, head)?;
            }
            total += u64::from(set_spilled(head));
        }
        self.live.store(live, Ordering::Relaxed);
        self.spilled_total.store(total, Ordering::Relaxed);
        Ok(misplaced)
    }

    /// The sets, to register with the fabric for REMOTE_READ by peers. Offsets into it are
    /// [`Self::set_offset`]; the header page is not part of it.
    pub fn memory(&self) -> &Arc<Memory> {
        &self.memory
    }

    /// The store's shape.
    pub fn geometry(&self) -> StoreGeometry {
        self.geometry
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The node whose store this is.
    pub fn node(&self) -> u8 {
        self.node
    }

    /// How full the store is.
    pub fn usage(&self) -> StoreUsage {
        let g = self.geometry;
        let records = u64::from(g.sets()) * u64::from(g.ways());
        StoreUsage {
            live: self.live.load(Ordering::Relaxed),
            records,
            spilled: self.spilled_total.load(Ordering::Relaxed),
            index_bytes: ((self.heads.len() + self.set_heads.len()) * 8) as u64,
        }
    }

    /// The home set of a key ([`StoreGeometry::home_of`]).
    pub fn home_of(&self, key_hash: u64) -> u32 {
        self.geometry.home_of(key_hash)
    }

    /// The spill set of a key ([`StoreGeometry::spill_of`]).
    pub fn spill_of(&self, key_hash: u64) -> Option<u32> {
        self.geometry.spill_of(key_hash)
    }

    /// Offset of `set` in [`Self::memory`] (`set` in range): where a peer's READ starts.
    pub fn set_offset(&self, set: u32) -> usize {
        set as usize * self.geometry.set_bytes()
    }

    /// Bytes of one set (its head included): the length of a peer's READ.
    pub fn set_bytes(&self) -> usize {
        self.geometry.set_bytes()
    }

    /// Offset in [`Self::memory`] of the record at `way` of `set` (both in range).
    pub fn record_offset(&self, set: u32, way: u32) -> usize {
        self.set_offset(set) + self.geometry.record_in_set(way as usize)
    }

    fn lock(&self, set: u32) -> MutexGuard<'_, ()> {
        // The lock guards no data, only the order of changes: a panic while it was held
        // leaves nothing to repair.
        self.locks[set as usize % STORE_LOCKS].lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The locks of a key's home and spill sets, the lower index first (so two keys
    /// sharing both locks cannot wait on each other).
    fn lock_key(&self, home: u32, spill: Option<u32>) -> [Option<MutexGuard<'_, ()>>; 2] {
        let at = |set: u32| set as usize % STORE_LOCKS;
        let take = |i: usize| self.locks[i].lock().unwrap_or_else(PoisonError::into_inner);
        match spill.map(at).filter(|&b| b != at(home)) {
            Some(b) => {
                let (lo, hi) = (at(home).min(b), at(home).max(b));
                let first = take(lo);
                [Some(first), Some(take(hi))]
            }
            None => [Some(take(at(home))), None],
        }
    }

    fn memory_err(&self) -> impl Fn(FabricError) -> StoreError + '_ {
        move |source| StoreError::Memory { path: self.path.clone(), source }
    }

    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), StoreError> {
        self.memory.read(offset, dst).map_err(self.memory_err())
    }

    /// The heads of set `set`, from the cache (call with the set's lock held).
    fn heads(&self, set: u32) -> Heads {
        let mut heads = [[0u8; CACHED_HEAD_LEN]; STORE_WAYS_MAX as usize];
        let ways = self.geometry.ways() as usize;
        let first = set as usize * ways * HEAD_WORDS;
        for (way, head) in heads.iter_mut().enumerate().take(ways) {
            let words = &self.heads[first + way * HEAD_WORDS..first + (way + 1) * HEAD_WORDS];
            for (chunk, word) in head.chunks_exact_mut(8).zip(words) {
                chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_ne_bytes());
            }
        }
        heads
    }

    /// The cached head words of the record at file offset `base`.
    fn cached_head(&self, base: usize) -> &[AtomicU64] {
        let set_bytes = self.geometry.set_bytes();
        let in_set = base % set_bytes - SET_HEAD_BYTES;
        let (set, way) = (base / set_bytes, in_set / self.geometry.record_bytes() as usize);
        let at = (set * self.geometry.ways() as usize + way) * HEAD_WORDS;
        &self.heads[at..at + HEAD_WORDS]
    }

    /// Fills the head cache and the set-head mirror from the file (an existing store,
    /// after recovery), so the mirror says what the file holds, scribbled or not.
    fn load_heads(&self) -> Result<(), StoreError> {
        let mut head = [0u8; CACHED_HEAD_LEN];
        for set in 0..self.geometry.sets() {
            let _guard = self.lock(set);
            for word in 0..SET_HEAD_WORDS {
                let value = self.memory.load_u64(self.set_offset(set) + word * 8).map_err(self.memory_err())?;
                self.set_heads[set as usize * SET_HEAD_WORDS + word].store(value, Ordering::Relaxed);
            }
            for way in 0..self.geometry.ways() {
                let base = self.record_offset(set, way);
                self.read(base, &mut head)?;
                for (chunk, word) in head.chunks_exact(8).zip(self.cached_head(base)) {
                    word.store(u64::from_ne_bytes(chunk.try_into().expect("8 bytes")), Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }

    /// Stores `state` in the record at `base`: one aligned word store with only the state
    /// byte changed (only this process writes the store, under the set lock).
    fn set_state_at(&self, base: usize, state: RecordState) -> Result<(), StoreError> {
        // The cached word is the file's (both change only here and in `write_record`).
        let cached = &self.cached_head(base)[0];
        let mut word = cached.load(Ordering::Relaxed).to_ne_bytes();
        word[field::STATE] = state as u8;
        let word = u64::from_ne_bytes(word);
        self.memory.store_u64(base, word).map_err(self.memory_err())?;
        cached.store(word, Ordering::Relaxed);
        Ok(())
    }

    /// Stores word `word` of `head` as set `set`'s head word (one aligned store: a peer's
    /// READ sees it old or new) and in the mirror. Call with the set's lock held.
    fn write_set_head_word(&self, set: u32, word: usize, head: &[u8; SET_HEAD_BYTES]) -> Result<(), StoreError> {
        let value = u64::from_ne_bytes(head[word * 8..word * 8 + 8].try_into().expect("8 bytes"));
        let mirror = &self.set_heads[set as usize * SET_HEAD_WORDS + word];
        if mirror.load(Ordering::Relaxed) != value {
            self.memory.store_u64(self.set_offset(set) + word * 8, value).map_err(self.memory_err())?;
            mirror.store(value, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Counts one record of `key_hash` placed in (`delta` 1) or dropped from (-1) its spill
    /// set in the head of its home set `home`. Call with the home set's lock held.
    fn add_spilled(&self, home: u32, key_hash: u64, delta: i32) -> Result<(), StoreError> {
        let mut head = [0u8; SET_HEAD_BYTES];
        let words = &self.set_heads[home as usize * SET_HEAD_WORDS..(home as usize + 1) * SET_HEAD_WORDS];
        for (chunk, word) in head.chunks_exact_mut(8).zip(words) {
            chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_ne_bytes());
        }
        count_spill(&mut head, key_hash, delta);
        // The key's counter first: it is what readers look at.
        self.write_set_head_word(home, (4 + spill_slot(key_hash)) / 8, &head)?;
        self.write_set_head_word(home, 0, &head)?;
        if delta > 0 {
            self.spilled_total.fetch_add(1, Ordering::Relaxed);
        } else {
            self.spilled_total.fetch_sub(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Empties the record at (`set`, `way`) of key `key_hash`, homed at `home`.
    fn drop_record(&self, set: u32, way: u32, home: u32, key_hash: u64) -> Result<(), StoreError> {
        self.set_state_at(self.record_offset(set, way), RecordState::Empty)?;
        self.live.fetch_sub(1, Ordering::Relaxed);
        // After the record is gone: a reader that saw the count still reads the spill set.
        if set != home {
            self.add_spilled(home, key_hash, -1)?;
        }
        Ok(())
    }

    fn write_record(
        &self,
        base: usize,
        rec: &RecordRepr,
        fragment_header: &[u8],
        payload: &[u8],
    ) -> Result<(), StoreError> {
        let mut head = [0u8; HEAD_LEN];
        rec.emit(RecordState::Pending, &mut head, fragment_header, payload);
        let write = |offset, bytes: &[u8]| self.memory.write(offset, bytes).map_err(self.memory_err());
        // The way may hold a superseded record: take it out of service before overwriting.
        self.set_state_at(base, RecordState::Empty)?;
        write(base + field::PAYLOAD, payload)?;
        write(base + field::FRAGMENT_HEADER.start, fragment_header)?;
        write(base + 8, &head[8..])?;
        // Release: the first word (magic, format, state) goes live last, after every byte
        // the checksum covers.
        let first = u64::from_ne_bytes(head[..8].try_into().expect("8 bytes"));
        self.memory.store_u64(base, first).map_err(self.memory_err())?;
        for (chunk, word) in head.chunks_exact(8).zip(self.cached_head(base)) {
            word.store(u64::from_ne_bytes(chunk.try_into().expect("8 bytes")), Ordering::Relaxed);
        }
        Ok(())
    }

    /// The heads of a key's home set and (when the store has more than one set) its spill
    /// set: call with both locks held.
    fn key_heads(&self, home: u32, spill: Option<u32>) -> [Option<(u32, Heads)>; 2] {
        [Some((home, self.heads(home))), spill.map(|s| (s, self.heads(s)))]
    }

    /// Persists a fragment as a Pending record: `fragment_header` is its 40-byte header and
    /// `payload` its `rec.fragment_len` bytes. A (key, stamp, fragment index) already there
    /// is a [`Inserted::Duplicate`], a fragment older than the key's newest Committed
    /// record [`Inserted::Superseded`]; neither writes anything. Otherwise the record takes
    /// the way of the key's oldest superseded record (one at home first), else an empty way
    /// of its home set while that has fewer than [`HOME_WAYS_FIRST`] in use, else an empty
    /// way of whichever of its home and spill sets has fewer in use (a record placed in the
    /// spill set is counted in the home set's head first); a key with
    /// [`VERSIONS_PER_KEY_MAX`] records must give up a superseded one. No room:
    /// [`StoreError::KeyFull`] or [`StoreError::Full`].
    pub fn insert(&self, rec: &RecordRepr, fragment_header: &[u8], payload: &[u8]) -> Result<Inserted, StoreError> {
        let input = |what, len, expected: String| StoreError::Input { what, len, expected };
        if fragment_header.len() != FRAGMENT_HEADER_LEN {
            return Err(input("fragment header", fragment_header.len(), format!("{FRAGMENT_HEADER_LEN} bytes")));
        }
        if payload.len() != rec.fragment_len as usize {
            return Err(input("payload", payload.len(), format!("fragment_len = {} bytes", rec.fragment_len)));
        }
        if rec.fragment_len > self.geometry.payload_max() {
            let expected = format!("at most the store's payload_max of {} bytes", self.geometry.payload_max());
            return Err(input("payload", payload.len(), expected));
        }
        let (home, spill) = (self.home_of(rec.key_hash), self.spill_of(rec.key_hash));
        let _guards = self.lock_key(home, spill);
        let sets = self.key_heads(home, spill);
        let ways = self.geometry.ways() as usize;
        let all = || ways_of(&sets, ways);
        let of_key = || of_key(all(), rec.key_hash);
        let stamp = |h: &[u8; CACHED_HEAD_LEN]| head_u64(h, field::STAMP);

        if let Some((set, way, _)) =
            of_key().find(|(_, _, h)| stamp(h) == rec.stamp && h[field::FRAGMENT_INDEX] == rec.fragment_index)
        {
            return Ok(Inserted::Duplicate { set, way });
        }
        let newest_committed =
            of_key().filter(|(_, _, h)| head_state(h) == RecordState::Committed).map(|(_, _, h)| stamp(h)).max();
        if newest_committed.is_some_and(|newest| rec.stamp < newest) {
            return Ok(Inserted::Superseded);
        }
        // The key's superseded records, those at home first, the oldest first.
        let superseded = of_key()
            .filter(|(_, _, h)| newest_committed.is_some_and(|newest| stamp(h) < newest))
            .min_by_key(|(set, _, h)| (*set != home, stamp(h)))
            .map(|(set, way, _)| (set, way));
        let versions = of_key().count();
        let in_use = |set: u32| all().filter(|(s, _, h)| *s == set && head_state(h) != RecordState::Empty).count();
        let empty_in =
            |set: u32| all().find(|(s, _, h)| *s == set && head_state(h) == RecordState::Empty).map(|(s, w, _)| (s, w));
        // Where a new record goes: home while it has room to spare, else the emptier set.
        let fresh = || {
            let home_used = in_use(home);
            match spill {
                Some(spill) if home_used >= HOME_WAYS_FIRST.min(ways) && in_use(spill) < home_used => {
                    empty_in(spill).or_else(|| empty_in(home))
                }
                Some(spill) => empty_in(home).or_else(|| empty_in(spill)),
                None => empty_in(home),
            }
        };
        let (set, way, reused) = if versions >= VERSIONS_PER_KEY_MAX {
            let (set, way) = superseded.ok_or(StoreError::KeyFull { key_hash: rec.key_hash, set: home, versions })?;
            (set, way, true)
        } else if let Some((set, way)) = superseded {
            (set, way, true)
        } else if let Some((set, way)) = fresh() {
            (set, way, false)
        } else {
            let usage = self.usage();
            return Err(StoreError::Full {
                path: self.path.clone(),
                file_bytes: self.geometry.file_bytes(),
                live: usage.live,
                records: usage.records,
                key_hash: rec.key_hash,
                home,
                spill: spill.unwrap_or(home),
            });
        };
        if !reused {
            // Counted before the record appears: a reader that finds the count zero has
            // READ the home set before any record of its keys went elsewhere.
            if set != home {
                self.add_spilled(home, rec.key_hash, 1)?;
            }
            self.live.fetch_add(1, Ordering::Relaxed);
        }
        self.write_record(self.record_offset(set, way), rec, fragment_header, payload)?;
        Ok(Inserted::Stored { set, way })
    }

    /// Applies a write's outcome to its records here. Committed: its records become
    /// Committed, then the key's records with lower stamps are dropped (unless a newer write
    /// is Committed already: then its own records are dropped, [`Resolved::Superseded`]).
    /// Aborted: its records are dropped; one already Committed is a
    /// [`StoreError::Conflict`]. No record of the write: [`Resolved::Unknown`].
    pub fn resolve(&self, key_hash: u64, stamp: u64, outcome: Outcome) -> Result<Resolved, StoreError> {
        let (home, spill) = (self.home_of(key_hash), self.spill_of(key_hash));
        let _guards = self.lock_key(home, spill);
        let sets = self.key_heads(home, spill);
        let of_key = || of_key(ways_of(&sets, self.geometry.ways() as usize), key_hash);
        let of_write = || of_key().filter(|(_, _, h)| head_u64(h, field::STAMP) == stamp);
        let records = of_write().count();
        if records == 0 {
            return Ok(Resolved::Unknown);
        }
        let drop_all =
            |records: &mut dyn Iterator<Item = (u32, u32, &[u8; CACHED_HEAD_LEN])>| -> Result<usize, StoreError> {
                let mut n = 0;
                for (set, way, _) in records {
                    self.drop_record(set, way, home, key_hash)?;
                    n += 1;
                }
                Ok(n)
            };
        match outcome {
            Outcome::Committed => {
                let newest = of_key()
                    .filter(|(_, _, h)| head_state(h) == RecordState::Committed)
                    .map(|(_, _, h)| head_u64(h, field::STAMP))
                    .max();
                if newest.is_some_and(|newest| newest > stamp) {
                    return Ok(Resolved::Superseded { dropped: drop_all(&mut of_write())? });
                }
                // Commit first, then drop the older versions: a crash in between leaves
                // superseded records, never a key without its newest value.
                for (set, way, head) in of_write() {
                    if head_state(head) == RecordState::Pending {
                        self.set_state_at(self.record_offset(set, way), RecordState::Committed)?;
                    }
                }
                let dropped = drop_all(&mut of_key().filter(|(_, _, h)| head_u64(h, field::STAMP) < stamp))?;
                Ok(Resolved::Committed { records, dropped })
            }
            Outcome::Aborted => {
                if of_write().any(|(_, _, h)| head_state(h) == RecordState::Committed) {
                    return Err(StoreError::Conflict { key_hash, stamp });
                }
                Ok(Resolved::Aborted { records: drop_all(&mut of_write())? })
            }
        }
    }

    /// Copies set `set` (head and records) into the first [`Self::set_bytes`] of `out`, for
    /// the local GET path (read it with [`super::record::parse_set`] or
    /// [`super::record::KeySets`]).
    pub fn read_set(&self, set: u32, out: &mut [u8]) -> Result<(), StoreError> {
        self.check_set(set)?;
        let need = self.set_bytes();
        if out.len() < need {
            return Err(StoreError::Buffer { len: out.len(), need });
        }
        self.read(self.set_offset(set), &mut out[..need])
    }

    /// Copies a key's spill set (when given), then its home set, into node `node`'s places
    /// of a buffer laid out by [`super::record::gathered_range`] - the order peers' sets
    /// are READ in. Returns how each read went: (home, spill).
    pub fn read_key_sets(
        &self,
        home: u32,
        spill: Option<u32>,
        buf: &mut [u8],
        node: usize,
    ) -> (Result<(), StoreError>, Option<Result<(), StoreError>>) {
        let set_bytes = self.set_bytes();
        let spill = spill.map(|s| self.read_set(s, &mut buf[gathered_range(node, true, set_bytes)]));
        (self.read_set(home, &mut buf[gathered_range(node, false, set_bytes)]), spill)
    }

    fn check_set(&self, set: u32) -> Result<(), StoreError> {
        if set >= self.geometry.sets() {
            return Err(StoreError::OutOfRange { what: "set", value: set, limit: self.geometry.sets() });
        }
        Ok(())
    }

    /// Visits every Pending record (at restart the node asks the writers how those writes
    /// ended); returns how many. Allocates one record buffer: not for the data path.
    pub fn pending(&self, mut f: impl FnMut(RecordView<&[u8]>)) -> Result<usize, StoreError> {
        let mut record = vec![0u8; self.geometry.record_bytes() as usize];
        let mut visited = 0;
        for set in 0..self.geometry.sets() {
            let _guard = self.lock(set);
            for way in 0..self.geometry.ways() {
                let base = self.record_offset(set, way);
                let mut first = [0u8; 8];
                self.read(base, &mut first)?;
                if first[field::STATE] != RecordState::Pending as u8 {
                    continue;
                }
                self.read(base, &mut record)?;
                let view = RecordView::new_checked(&record[..], self.geometry.payload_max())
                    .map_err(|source| StoreError::Record { set, way, source })?;
                f(view);
                visited += 1;
            }
        }
        Ok(visited)
    }

    /// Writes the pages of one record back to the file and waits (`msync`), so the record
    /// and its state survive a power loss. Call it after `insert` or `resolve` changed the
    /// record, before acknowledging, when the node is configured for power-loss durability.
    /// (Set heads need no flush: [`Self::open`] rebuilds them from the records.)
    pub fn sync_record(&self, set: u32, way: u32) -> Result<(), StoreError> {
        self.check_set(set)?;
        if way >= self.geometry.ways() {
            return Err(StoreError::OutOfRange { what: "way", value: way, limit: self.geometry.ways() });
        }
        let len = self.geometry.record_bytes() as usize;
        self.memory.flush_range(self.record_offset(set, way), len).map_err(self.memory_err())
    }
}

#[cfg(test)]
mod tests {
    use super::super::file::testing::TempDir;
    use super::super::record::parse_set;
    use super::*;

    const NODE: u8 = 2;
    const FRAGMENT_HEADER: [u8; 40] = [0x5a; 40];

    fn rec(key_hash: u64, stamp: u64, index: u8) -> RecordRepr {
        RecordRepr {
            writer: 3,
            fragment_index: index,
            key_hash,
            stamp,
            write_seq: stamp >> 8,
            fragment_len: 100,
            tombstone: false,
            incarnation: 1,
        }
    }

    fn payload(r: &RecordRepr) -> Vec<u8> {
        vec![r.stamp as u8 ^ r.fragment_index; r.fragment_len as usize]
    }

    fn insert(store: &Store, r: RecordRepr) -> Result<Inserted, StoreError> {
        store.insert(&r, &FRAGMENT_HEADER, &payload(&r))
    }

    /// The live records of `key` in its set, as (stamp, index, state), sorted.
    /// The key's records, from its home and spill sets.
    fn records_of(store: &Store, key: u64) -> Vec<(u64, u8, RecordState)> {
        let mut sets = vec![0u8; 2 * store.set_bytes()];
        let (home, spill) = sets.split_at_mut(store.set_bytes());
        store.read_set(store.home_of(key), home).unwrap();
        if let Some(s) = store.spill_of(key) {
            store.read_set(s, spill).unwrap();
        }
        let g = store.geometry();
        let spill_records = store.spill_of(key).map(|_| parse_set(spill, &g)).into_iter().flatten();
        let mut found: Vec<_> = parse_set(home, &g)
            .chain(spill_records)
            .map(|r| r.unwrap())
            .filter(|v| v.key_hash() == key)
            .map(|v| {
                assert_eq!(v.payload(), payload(&RecordRepr::parse(&v, store.geometry().payload_max()).unwrap()));
                assert_eq!(v.fragment_header(), FRAGMENT_HEADER);
                (v.stamp(), v.fragment_index(), v.state())
            })
            .collect();
        found.sort();
        found
    }

    fn one_set(dir: &TempDir, ways: u32) -> Store {
        Store::open(&dir.file("store"), NODE, StoreGeometry::new(1, ways, 128).unwrap()).unwrap()
    }

    /// Writes a record straight into a way in any state, as a crash between the steps of
    /// `resolve` may leave it.
    fn put(store: &Store, way: u32, r: RecordRepr, state: RecordState) {
        let base = store.record_offset(store.home_of(r.key_hash), way);
        if store.cached_head(base)[0].load(Ordering::Relaxed).to_ne_bytes()[field::STATE] == 0 {
            store.live.fetch_add(1, Ordering::Relaxed);
        }
        store.write_record(base, &r, &FRAGMENT_HEADER, &payload(&r)).unwrap();
        store.set_state_at(base, state).unwrap();
    }

    #[test]
    fn header_page_has_the_golden_bytes() {
        let dir = TempDir::new("store-golden");
        drop(Store::open(&dir.file("store"), NODE, StoreGeometry::new(1024, 4, 4096).unwrap()).unwrap());
        let bytes = std::fs::read(dir.file("store")).unwrap();
        let mut golden = [0u8; 64];
        golden[..32].copy_from_slice(&[
            b'P', b'R', b'S', b'C', b'S', b'T', b'O', b'R', // magic
            1, 0, 0, 0, // format
            2, 2, 0, 0, // node, layout 2, zero
            0, 4, 0, 0, // sets 1024
            4, 0, 0, 0, // ways
            0x80, 0x10, 0, 0, // record_bytes 4224
            0, 0x10, 0, 0, // payload_max 4096
        ]);
        let crc = crc32c::crc32c(&golden[..32]);
        golden[32..36].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(bytes[..64], golden);
        assert!(bytes[64..4096].iter().all(|&b| b == 0));
        assert_eq!(bytes.len() as u64, 4096 + 1024 * (64 + 4 * 4224));
    }

    #[test]
    fn insert_then_commit_keeps_the_newest_version() {
        let dir = TempDir::new("store-commit");
        let store = Store::open(&dir.file("store"), NODE, StoreGeometry::new(64, 4, 128).unwrap()).unwrap();
        let key = 0x1234_5678_9abc_def0;
        assert!(matches!(insert(&store, rec(key, 0x103, 0)).unwrap(), Inserted::Stored { .. }));
        assert!(matches!(insert(&store, rec(key, 0x103, 1)).unwrap(), Inserted::Stored { .. }), "a repaired index");
        assert!(matches!(insert(&store, rec(key, 0x103, 0)).unwrap(), Inserted::Duplicate { .. }));
        assert_eq!(records_of(&store, key), [(0x103, 0, RecordState::Pending), (0x103, 1, RecordState::Pending)]);
        assert_eq!(
            store.resolve(key, 0x103, Outcome::Committed).unwrap(),
            Resolved::Committed { records: 2, dropped: 0 }
        );
        assert_eq!(
            store.resolve(key, 0x103, Outcome::Committed).unwrap(),
            Resolved::Committed { records: 2, dropped: 0 }
        );
        // A newer write replaces it once committed.
        assert!(matches!(insert(&store, rec(key, 0x203, 0)).unwrap(), Inserted::Stored { .. }));
        assert_eq!(records_of(&store, key).len(), 3);
        assert_eq!(
            store.resolve(key, 0x203, Outcome::Committed).unwrap(),
            Resolved::Committed { records: 1, dropped: 2 }
        );
        assert_eq!(records_of(&store, key), [(0x203, 0, RecordState::Committed)]);
        // Late fragments and late commits of older writes change nothing live.
        assert_eq!(insert(&store, rec(key, 0x103, 2)).unwrap(), Inserted::Superseded);
        assert_eq!(store.resolve(key, 0x103, Outcome::Committed).unwrap(), Resolved::Unknown);
        assert_eq!(records_of(&store, key), [(0x203, 0, RecordState::Committed)]);
    }

    #[test]
    fn abort_drops_the_write_and_never_a_committed_one() {
        let dir = TempDir::new("store-abort");
        let store = one_set(&dir, 4);
        insert(&store, rec(7, 0x103, 0)).unwrap();
        insert(&store, rec(7, 0x203, 0)).unwrap();
        assert_eq!(store.resolve(7, 0x203, Outcome::Aborted).unwrap(), Resolved::Aborted { records: 1 });
        assert_eq!(store.resolve(7, 0x203, Outcome::Aborted).unwrap(), Resolved::Unknown);
        assert_eq!(store.resolve(8, 0x103, Outcome::Committed).unwrap(), Resolved::Unknown, "another key");
        assert_eq!(records_of(&store, 7), [(0x103, 0, RecordState::Pending)]);
        store.resolve(7, 0x103, Outcome::Committed).unwrap();
        assert!(matches!(
            store.resolve(7, 0x103, Outcome::Aborted),
            Err(StoreError::Conflict { key_hash: 7, stamp: 0x103 })
        ));
        assert_eq!(records_of(&store, 7), [(0x103, 0, RecordState::Committed)]);
        // A commit of an older write after a newer one drops the older write's records.
        insert(&store, rec(7, 0x303, 0)).unwrap();
        put(&store, 3, rec(7, 0x003, 0), RecordState::Pending);
        assert_eq!(
            store.resolve(7, 0x303, Outcome::Committed).unwrap(),
            Resolved::Committed { records: 1, dropped: 2 }
        );
        put(&store, 3, rec(7, 0x003, 0), RecordState::Pending);
        assert_eq!(store.resolve(7, 0x003, Outcome::Committed).unwrap(), Resolved::Superseded { dropped: 1 });
        assert_eq!(records_of(&store, 7), [(0x303, 0, RecordState::Committed)]);
    }

    #[test]
    fn eviction_takes_only_superseded_records_of_the_same_key() {
        let dir = TempDir::new("store-evict");
        let store = one_set(&dir, 4);
        let (a, b) = (0xa, 0xb);
        put(&store, 0, rec(a, 0x1003, 0), RecordState::Committed); // a's newest
        put(&store, 1, rec(a, 0x0503, 0), RecordState::Committed); // superseded
        put(&store, 2, rec(b, 0x0703, 0), RecordState::Pending); // b has no commit
        put(&store, 3, rec(b, 0x0303, 0), RecordState::Pending);
        assert_eq!(insert(&store, rec(a, 0x2003, 0)).unwrap(), Inserted::Stored { set: 0, way: 1 });
        // a now has its newest Committed and a Pending write: nothing of it may go.
        let err = insert(&store, rec(a, 0x3003, 0)).unwrap_err();
        assert!(matches!(err, StoreError::Full { home: 0, spill: 0, live: 4, records: 4, .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("raise cluster.store_bytes") && text.contains(&dir.file("store").display().to_string()),
            "{text}"
        );
        assert!(matches!(insert(&store, rec(0xc, 0x103, 0)), Err(StoreError::Full { .. })), "b's records stay");
        assert_eq!(records_of(&store, a), [(0x1003, 0, RecordState::Committed), (0x2003, 0, RecordState::Pending)]);
        assert_eq!(records_of(&store, b).len(), 2);
    }

    #[test]
    fn a_key_has_at_most_versions_per_key_max_records() {
        let max = VERSIONS_PER_KEY_MAX as u64;
        let dir = TempDir::new("store-versions");
        let store = one_set(&dir, 16);
        for i in 0..max {
            insert(&store, rec(1, (i + 1) << 8 | 3, 0)).unwrap();
        }
        let err = insert(&store, rec(1, (max + 1) << 8 | 3, 0)).unwrap_err();
        assert!(
            matches!(err, StoreError::KeyFull { key_hash: 1, versions, .. } if versions == VERSIONS_PER_KEY_MAX),
            "{err}"
        );
        assert!(matches!(insert(&store, rec(2, 0x403, 0)).unwrap(), Inserted::Stored { .. }), "other keys have room");
        // At its limit, a key gives up its oldest superseded record.
        let dir = TempDir::new("store-versions-evict");
        let store = one_set(&dir, 16);
        for i in 0..max {
            put(&store, 15 - i as u32, rec(1, i << 8 | 3, 0), RecordState::Committed);
        }
        let newest = max << 8 | 3;
        assert_eq!(insert(&store, rec(1, newest, 0)).unwrap(), Inserted::Stored { set: 0, way: 15 });
        let kept = records_of(&store, 1);
        assert_eq!(kept.len(), VERSIONS_PER_KEY_MAX);
        assert!(kept.contains(&(newest, 0, RecordState::Pending)));
        assert!(kept.iter().all(|r| r.0 != 0x003), "the oldest superseded record went: {kept:?}");
    }

    #[test]
    fn bad_input_is_refused() {
        let dir = TempDir::new("store-input");
        let store = one_set(&dir, 2);
        let r = rec(1, 0x103, 0);
        assert!(matches!(
            store.insert(&r, &[0; 39], &payload(&r)),
            Err(StoreError::Input { what: "fragment header", .. })
        ));
        assert!(matches!(store.insert(&r, &FRAGMENT_HEADER, &[0; 99]), Err(StoreError::Input { what: "payload", .. })));
        let big = RecordRepr { fragment_len: 129, ..r };
        assert!(matches!(
            store.insert(&big, &FRAGMENT_HEADER, &[0; 129]),
            Err(StoreError::Input { what: "payload", .. })
        ));
        let mut out = vec![0u8; store.set_bytes() - 1];
        assert!(matches!(store.read_set(0, &mut out), Err(StoreError::Buffer { .. })));
        assert!(matches!(store.read_set(1, &mut out), Err(StoreError::OutOfRange { what: "set", .. })));
        assert!(matches!(store.sync_record(0, 2), Err(StoreError::OutOfRange { what: "way", .. })));
        assert!(matches!(store.sync_record(1, 0), Err(StoreError::OutOfRange { what: "set", .. })));
        store.sync_record(0, 1).unwrap();
    }

    #[test]
    fn reopening_after_a_kill_finds_every_record() {
        let dir = TempDir::new("store-reopen");
        let g = StoreGeometry::new(16, 4, 128).unwrap();
        let store = Store::open(&dir.file("store"), NODE, g).unwrap();
        // An odd multiplier spreads keys 0..40 over the 16 sets, at most 3 to a set.
        let key_hash = |key: u64| key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        for key in 0..40u64 {
            insert(&store, rec(key_hash(key), 0x103, 0)).unwrap();
        }
        for key in (0..40u64).step_by(3) {
            store.resolve(key_hash(key), 0x103, Outcome::Committed).unwrap();
        }
        let Inserted::Stored { set, way } = insert(&store, rec(5, 0x203, 1)).unwrap() else { panic!() };
        store.sync_record(set, way).unwrap();
        // Dropped without any flush, as a kill -9 leaves it.
        drop(store);
        let store = Store::open(&dir.file("store"), NODE, g).unwrap();
        for key in 0..40u64 {
            let state = if key % 3 == 0 { RecordState::Committed } else { RecordState::Pending };
            assert_eq!(records_of(&store, key_hash(key)), [(0x103, 0, state)], "key {key}");
        }
        let mut pending = Vec::new();
        assert_eq!(store.pending(|v| pending.push((v.key_hash(), v.stamp()))).unwrap(), 27);
        assert!(pending.contains(&(5, 0x203)));
    }

    #[test]
    fn a_torn_record_reads_as_empty_after_reopening() {
        let dir = TempDir::new("store-torn");
        let path = dir.file("store");
        let g = StoreGeometry::new(1, 4, 128).unwrap();
        let store = Store::open(&path, NODE, g).unwrap();
        for stamp in [0x103, 0x203] {
            insert(&store, rec(1, stamp, 0)).unwrap();
        }
        drop(store);
        // A crash in the middle of writing way 2: the first half of a record reached the
        // file (with its state byte), the rest did not. And way 1's payload is damaged.
        let r = rec(2, 0x303, 0);
        let mut record = vec![0u8; g.record_bytes() as usize];
        let mut head = [0u8; HEAD_LEN];
        r.emit(RecordState::Pending, &mut head, &FRAGMENT_HEADER, &payload(&r));
        record[..HEAD_LEN].copy_from_slice(&head);
        record[64..104].copy_from_slice(&FRAGMENT_HEADER);
        record[104..204].copy_from_slice(&payload(&r));
        let mut bytes = std::fs::read(&path).unwrap();
        let way = |w: usize| 4096 + g.record_in_set(w);
        bytes[way(2)..way(2) + 102].copy_from_slice(&record[..102]);
        bytes[way(1) + 150] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();

        let store = Store::open(&path, NODE, g).unwrap();
        assert_eq!(records_of(&store, 1), [(0x103, 0, RecordState::Pending)]);
        assert!(records_of(&store, 2).is_empty());
        assert_eq!(store.pending(|_| {}).unwrap(), 1);
        // Their ways are free again: three more records fit.
        for key in 3..6 {
            assert!(matches!(insert(&store, rec(key, 0x103, 0)).unwrap(), Inserted::Stored { .. }));
        }
        assert!(matches!(insert(&store, rec(6, 0x103, 0)), Err(StoreError::Full { .. })));
    }

    #[test]
    fn any_flipped_byte_but_the_state_fails_the_record() {
        let dir = TempDir::new("store-flip");
        let store = one_set(&dir, 2);
        insert(&store, rec(1, 0x103, 0)).unwrap();
        let mut set = vec![0u8; store.set_bytes()];
        store.read_set(0, &mut set).unwrap();
        let at = SET_HEAD_BYTES;
        for i in (at..at + 104 + 100).filter(|&i| i != at + field::STATE) {
            let mut b = set.clone();
            b[i] ^= 0x10;
            let results: Vec<_> = parse_set(&b, &store.geometry()).collect();
            assert!(matches!(results[..], [Err(_)]), "byte {i}");
        }
        set[at + field::STATE] = RecordState::Committed as u8;
        assert!(parse_set(&set, &store.geometry()).all(|r| r.is_ok()));
    }

    #[test]
    fn a_store_of_another_node_or_geometry_is_refused() {
        let dir = TempDir::new("store-mismatch");
        let path = dir.file("store");
        let g = StoreGeometry::new(64, 4, 1024).unwrap();
        drop(Store::open(&path, NODE, g).unwrap());
        let before = std::fs::read(&path).unwrap();
        let err = Store::open(&path, 3, g).unwrap_err();
        assert!(matches!(err, StoreError::Mismatch { .. }));
        let text = err.to_string();
        assert!(
            text.contains("was made for node 2 / layout 2 / 64 sets x 4 ways") && text.contains("remove it or fix"),
            "{text}"
        );
        // A store of the layout before set heads (byte 13 zero): refused, named.
        let mut old = before.clone();
        old[13] = 0;
        let crc = crc32c::crc32c(&old[..32]);
        old[32..36].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&path, &old).unwrap();
        let err = Store::open(&path, NODE, g).unwrap_err();
        assert!(err.to_string().contains("was made for node 2 / layout 0 /"), "{err}");
        std::fs::write(&path, &before).unwrap();
        for other in [
            StoreGeometry::new(128, 4, 1024).unwrap(),
            StoreGeometry::new(64, 8, 1024).unwrap(),
            StoreGeometry::new(64, 4, 2048).unwrap(),
        ] {
            assert!(matches!(Store::open(&path, NODE, other), Err(StoreError::Mismatch { .. })));
        }
        assert_eq!(std::fs::read(&path).unwrap(), before, "refused opens leave the file alone");
        let log = dir.file("log");
        drop(super::super::log::FragmentLog::open(&log, 1, 2, 4, 64).unwrap());
        let err = Store::open(&log, NODE, g).unwrap_err();
        assert!(matches!(err, StoreError::NotAStore { source: HeaderError::Magic { .. }, .. }), "{err}");
        std::fs::write(&path, &before[..5000]).unwrap();
        assert!(matches!(Store::open(&path, NODE, g), Err(StoreError::Length { len: 5000, .. })));
    }

    #[test]
    fn concurrent_inserts_into_one_set_never_lose_a_record() {
        let dir = TempDir::new("store-threads");
        let store = one_set(&dir, 16);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let store = &store;
                s.spawn(move || {
                    for i in 0..4u64 {
                        insert(store, rec(t * 16 + i, 0x103, 0)).unwrap();
                    }
                });
            }
        });
        for key in (0..4u64).flat_map(|t| (0..4).map(move |i| t * 16 + i)) {
            assert_eq!(records_of(&store, key).len(), 1, "key {key}");
        }
        assert!(matches!(insert(&store, rec(99, 0x103, 0)), Err(StoreError::Full { .. })));
    }

    /// The `n`th key hash (from `from`) whose home and spill sets in `g` are `home` and
    /// `spill`.
    fn key_in(g: StoreGeometry, home: u32, spill: u32, n: usize, from: u64) -> u64 {
        (from..)
            .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .filter(|&k| g.home_of(k) == home && g.spill_of(k) == Some(spill))
            .nth(n)
            .unwrap()
    }

    fn spilled_of(store: &Store, set: u32) -> (u32, Vec<u8>) {
        let mut bytes = vec![0u8; store.set_bytes()];
        store.read_set(set, &mut bytes).unwrap();
        (set_spilled(&bytes), bytes)
    }

    #[test]
    fn a_crowded_home_set_spills_and_its_head_tells_readers() {
        use super::super::record::key_may_have_spilled;
        let dir = TempDir::new("store-spill");
        let g = StoreGeometry::new(4, 16, 128).unwrap();
        let store = Store::open(&dir.file("store"), NODE, g).unwrap();
        // Twelve keys fill set 0 to HOME_WAYS_FIRST: they all stay home.
        let keys: Vec<u64> = (0..20).map(|i| key_in(g, 0, 1, i, 1)).collect();
        for &key in &keys[..HOME_WAYS_FIRST] {
            assert!(matches!(insert(&store, rec(key, 0x103, 0)).unwrap(), Inserted::Stored { set: 0, .. }));
        }
        assert_eq!(spilled_of(&store, 0).0, 0);
        // Past that, the emptier of home and spill: set 1 (empty) takes the next ones
        // until the two are level, then they alternate.
        let mut placed = vec![];
        for &key in &keys[HOME_WAYS_FIRST..] {
            let Inserted::Stored { set, .. } = insert(&store, rec(key, 0x103, 0)).unwrap() else { panic!() };
            placed.push(set);
        }
        let spilled = placed.iter().filter(|&&s| s == 1).count() as u32;
        assert_eq!(placed.len(), 8);
        assert!(spilled >= 6, "{placed:?}");
        let (count, head) = spilled_of(&store, 0);
        assert_eq!(count, spilled);
        assert_eq!(store.usage().spilled, u64::from(spilled));
        assert_eq!(store.usage().live, 20);
        for (&key, &set) in keys[HOME_WAYS_FIRST..].iter().zip(&placed) {
            if set == 1 {
                assert!(key_may_have_spilled(&head, key), "a reader of {key:#x} is sent to the spill set");
            }
            assert_eq!(records_of(&store, key), [(0x103, 0, RecordState::Pending)]);
        }
        // Commits, newer versions and aborts keep the count; dropping every spilled
        // record brings it back to zero.
        for (&key, &set) in keys[HOME_WAYS_FIRST..].iter().zip(&placed) {
            store.resolve(key, 0x103, Outcome::Committed).unwrap();
            insert(&store, rec(key, 0x203, 0)).unwrap();
            store.resolve(key, 0x203, Outcome::Committed).unwrap();
            if set == 1 {
                assert_eq!(records_of(&store, key), [(0x203, 0, RecordState::Committed)]);
            }
        }
        for &key in &keys[..HOME_WAYS_FIRST] {
            store.resolve(key, 0x103, Outcome::Aborted).unwrap();
        }
        for &key in &keys[HOME_WAYS_FIRST..] {
            insert(&store, rec(key, 0x303, 0)).unwrap();
            store.resolve(key, 0x303, Outcome::Aborted).unwrap();
        }
        assert_eq!(store.usage().live, 8);
        let spilled_now = spilled_of(&store, 0).0;
        assert_eq!(u64::from(spilled_now), store.usage().spilled);
        // Reopened, the heads are rebuilt to the same counts.
        drop(store);
        let store = Store::open(&dir.file("store"), NODE, g).unwrap();
        assert_eq!(spilled_of(&store, 0).0, spilled_now);
        assert_eq!(store.usage().live, 8);
        for &key in &keys[HOME_WAYS_FIRST..] {
            assert_eq!(records_of(&store, key).len(), 1);
        }
    }

    #[test]
    fn reopening_rebuilds_scribbled_set_heads_and_empties_misplaced_records() {
        let dir = TempDir::new("store-heads");
        let path = dir.file("store");
        let g = StoreGeometry::new(4, 4, 128).unwrap();
        let store = Store::open(&path, NODE, g).unwrap();
        let keys: Vec<u64> = (0..6).map(|i| key_in(g, 2, 3, i, 7)).collect();
        for &key in &keys {
            insert(&store, rec(key, 0x103, 0)).unwrap();
        }
        let spilled = spilled_of(&store, 2).0;
        assert!(spilled >= 2, "{spilled}");
        // A key homed in set 0 whose record is written into set 1 (neither its home nor
        // its spill set): only damage or a foreign writer does that.
        let stray = (1..)
            .map(|i: u64| i.wrapping_mul(0x2545_f491_4f6c_dd1d))
            .find(|&k| g.home_of(k) == 0 && g.spill_of(k) != Some(1))
            .unwrap();
        let r = rec(stray, 0x103, 0);
        store.write_record(store.record_offset(1, 3), &r, &FRAGMENT_HEADER, &payload(&r)).unwrap();
        drop(store);
        let mut bytes = std::fs::read(&path).unwrap();
        for set in 0..4 {
            let at = 4096 + set * g.set_bytes();
            bytes[at..at + SET_HEAD_BYTES].fill(0xa5);
        }
        std::fs::write(&path, &bytes).unwrap();
        let store = Store::open(&path, NODE, g).unwrap();
        assert_eq!(spilled_of(&store, 2).0, spilled);
        for set in [0, 1, 3] {
            assert!(spilled_of(&store, set).1[..SET_HEAD_BYTES].iter().all(|&b| b == 0), "set {set}");
        }
        assert!(records_of(&store, stray).is_empty(), "the misplaced record was emptied");
        for &key in &keys {
            assert_eq!(records_of(&store, key), [(0x103, 0, RecordState::Pending)]);
        }
        assert_eq!(store.usage().live, 6);
    }

    #[test]
    fn a_store_filled_with_distinct_keys_refuses_only_near_capacity_and_loses_nothing() {
        let dir = TempDir::new("store-fill");
        let g = StoreGeometry::new(512, 16, 64).unwrap();
        let store = Store::open(&dir.file("store"), NODE, g).unwrap();
        let key = |i: u64| (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i.rotate_left(40);
        let mut written = 0u64;
        let err = loop {
            let r = RecordRepr { fragment_len: 64, ..rec(key(written), 0x103, 0) };
            match store.insert(&r, &FRAGMENT_HEADER, &payload(&r)) {
                Ok(Inserted::Stored { .. }) => {
                    store.resolve(r.key_hash, 0x103, Outcome::Committed).unwrap();
                    written += 1;
                }
                Ok(other) => panic!("{other:?}"),
                Err(e) => break e,
            }
        };
        let usage = store.usage();
        assert_eq!(usage.live, written);
        let fill = written as f64 / usage.records as f64;
        // Measured 0.82 on 2^16 sets; a small store's tail comes a little earlier.
        assert!(fill > 0.7, "first refusal at {:.1} % of records in use", 100.0 * fill);
        assert!(matches!(err, StoreError::Full { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("raise cluster.store_bytes") && text.contains(&format!("{written} of 8192 records")),
            "{text}"
        );
        // Every key written is still there, Committed.
        for i in 0..written {
            assert_eq!(records_of(&store, key(i)), [(0x103, 0, RecordState::Committed)], "key {i}");
        }
        // Room comes back as keys' newer versions replace older ones in place.
        let r = RecordRepr { fragment_len: 64, ..rec(key(0), 0x203, 0) };
        assert!(matches!(
            store.insert(&r, &FRAGMENT_HEADER, &payload(&r)),
            Ok(Inserted::Stored { .. }) | Err(StoreError::Full { .. })
        ));
    }

    #[test]
    fn concurrent_writers_of_keys_whose_sets_cross_neither_deadlock_nor_lose_records() {
        let dir = TempDir::new("store-cross");
        let g = StoreGeometry::new(2, 16, 128).unwrap();
        let store = Store::open(&dir.file("store"), NODE, g).unwrap();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let store = &store;
                s.spawn(move || {
                    // Threads 0 and 2 write keys homed in set 0 (spilling to 1), 1 and 3 the
                    // reverse: each takes both locks, in opposite home/spill roles.
                    let (home, spill) = if t % 2 == 0 { (0, 1) } else { (1, 0) };
                    for i in 0..6usize {
                        let key = key_in(g, home, spill, i + 6 * (t as usize / 2), 1);
                        for v in 1..=20u64 {
                            insert(store, rec(key, v << 8 | 3, 0)).unwrap();
                            store.resolve(key, v << 8 | 3, Outcome::Committed).unwrap();
                        }
                    }
                });
            }
        });
        for (home, spill) in [(0, 1), (1, 0)] {
            for i in 0..12 {
                let key = key_in(g, home, spill, i, 1);
                assert_eq!(records_of(&store, key), [(20 << 8 | 3, 0, RecordState::Committed)], "key {key:#x}");
            }
        }
        assert_eq!(store.usage().live, 24);
        let heads = spilled_of(&store, 0).0 + spilled_of(&store, 1).0;
        assert_eq!(u64::from(heads), store.usage().spilled);
    }
}
