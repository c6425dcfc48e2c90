//! The fragment store: one file-backed, set-associative table per node holding the
//! fragments it was sent, which peers RDMA READ a whole set at a time to rebuild values.
//!
//! File layout: a 4096-byte header page, then `sets` sets of `ways` records of
//! `record_bytes` (see [`super::record`]). The header page, all integers little-endian:
//!
//! ```text
//!  0..8  magic "PRSCSTOR"   8..12 format (1)   12 node   13..16 zero
//! 16..20 sets (a power of two)   20..24 ways   24..28 record_bytes   28..32 payload_max
//! 32..36 CRC32C of bytes 0..32   rest zero
//! ```
//!
//! A key lives in set `key_hash % sets`: key hashes are SHA-256 prefixes, uniform in every
//! bit, so the low bits pick sets as well as any mixer would.
//!
//! Invariants:
//! - Only this process writes the store (peers only READ it), under the lock of the set,
//!   so the records' heads can be trusted once the store is open: [`Store::open`] checks
//!   every non-empty record in full and empties those that fail (torn by a crash, never
//!   data).
//! - A new record is written payload, fragment header, header fields and checksum, then
//!   its first word with the state last (Release); a state change is a store of that one
//!   aligned word with only the state byte changed, outside the checksum. A crash in the
//!   middle of writing leaves a record that is empty or fails its checksum.
//! - A key has at most [`VERSIONS_PER_KEY_MAX`] records, and the store never drops another
//!   key's record, a Pending record that is not superseded, or the newest Committed record
//!   of a key to make room.
//! - Surviving a kill -9 needs nothing (the page cache keeps the mapping's stores);
//!   surviving power loss needs [`Store::sync_record`] after each change the node acks.
#![forbid(unsafe_code)]

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::entry::Outcome;
use super::file::{self, FileHeader, HeaderError, Opened};
use super::limits::{HEADER_PAGE_BYTES, STORE_LOCKS, STORE_WAYS_MAX, VERSIONS_PER_KEY_MAX};
use super::record::{field, RecordError, RecordRepr, RecordState, RecordView, HEAD_LEN};
pub use super::record::{GeometryError, StoreGeometry};
use crate::fabric::{FabricError, Memory};
use crate::stripe::HEADER_LEN as FRAGMENT_HEADER_LEN;

/// Magic of a fragment store file.
pub const MAGIC: &[u8; 8] = b"PRSCSTOR";

/// Which node a store file belongs to and its shape: what a mismatch error shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreIdentity {
    /// The node.
    pub node: u8,
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
            "node {} / {} sets x {} ways of {}-byte records (payload_max {})",
            self.node, self.sets, self.ways, self.record_bytes, self.payload_max
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
    /// Every way of the set holds a record that must stay.
    #[error("fragment store {path} ({file_bytes} bytes, sized for {keys} keys) has set {set} full: its {ways} ways hold other keys' records, Pending writes and newest versions; raise cluster.store_keys (the store grows by 2 x keys records) and restart the node with a new store file")]
    SetFull {
        /// The store file.
        path: PathBuf,
        /// Its size.
        file_bytes: u64,
        /// Keys it is sized for (at half load).
        keys: u64,
        /// The set.
        set: u32,
        /// Its ways.
        ways: u32,
    },
    /// The key has its most records, none superseded.
    #[error("key {key_hash:#018x} already has {versions} records in set {set}, none superseded; its older writes must be decided first (the writer retries later)")]
    KeyFull {
        /// The key.
        key_hash: u64,
        /// Its set.
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

/// The heads (first 64 bytes) of a set's ways, copied out of the store.
type Heads = [[u8; HEAD_LEN]; STORE_WAYS_MAX as usize];

fn head_state(head: &[u8; HEAD_LEN]) -> RecordState {
    RecordState::from_u8(head[field::STATE]).unwrap_or(RecordState::Empty)
}

fn head_u64(head: &[u8; HEAD_LEN], range: std::ops::Range<usize>) -> u64 {
    file::le64(&head[range])
}

/// One node's fragment store.
pub struct Store {
    path: PathBuf,
    node: u8,
    geometry: StoreGeometry,
    /// The sets, from the file's byte 4096: the memory peers READ.
    memory: Arc<Memory>,
    /// Changes to set `s` hold `locks[s % STORE_LOCKS]`.
    locks: Box<[Mutex<()>]>,
    /// A copy of every record's 64-byte head, ways of a set side by side: what
    /// `insert` and `resolve` scan (16 heads 1.5 KB apart in the file were 16 cache and
    /// TLB misses per scan, 11 % of a loaded node's CPU). Written with the file, under
    /// the set lock; only this process writes the store (peers only READ it).
    heads: Box<[AtomicU64]>,
}

/// Words of one cached head.
const HEAD_WORDS: usize = HEAD_LEN / 8;

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
    /// Opens `node`'s store at `path`, or creates it (sparse) if there is none. An existing
    /// file must be a store of exactly this node and geometry; it is never reset. Every
    /// non-empty record is checked, and those that fail (torn by a crash) are emptied.
    pub fn open(path: &Path, node: u8, geometry: StoreGeometry) -> Result<Self, StoreError> {
        let g = geometry;
        let expected = StoreIdentity {
            node,
            sets: g.sets(),
            ways: g.ways(),
            record_bytes: g.record_bytes(),
            payload_max: g.payload_max(),
        };
        let mut page = vec![0u8; HEADER_PAGE_BYTES];
        FileHeader { ids: [node, 0], params: [g.sets(), g.ways(), g.record_bytes(), g.payload_max()] }
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
                if found.ids[1] != 0 {
                    return Err(not_a_store(HeaderError::NonZero { offset: 13, value: found.ids[1] }));
                }
                let [sets, ways, record_bytes, payload_max] = found.params;
                let found = StoreIdentity { node: found.ids[0], sets, ways, record_bytes, payload_max };
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
        };
        // A file just created is all zeros (every way Empty): nothing to check, and
        // reading it would touch every page of a file sized for the whole key space.
        if !created {
            store.load_heads()?;
        }
        let emptied = if created { 0 } else { store.recover()? };
        if emptied > 0 {
            tracing::warn!(store = %path.display(), emptied, "emptied torn or damaged records");
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
                    self.set_state_at(base, RecordState::Empty)?;
                    emptied += 1;
                }
            }
        }
        Ok(emptied)
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

    /// The set of a key: `key_hash % sets`. Key hashes are SHA-256 prefixes, uniform in
    /// their low bits, so no mixing is needed.
    pub fn set_of(&self, key_hash: u64) -> u32 {
        (key_hash % u64::from(self.geometry.sets())) as u32
    }

    /// Offset of `set` in [`Self::memory`] (`set` in range): where a peer's READ starts.
    pub fn set_offset(&self, set: u32) -> usize {
        set as usize * self.geometry.set_bytes()
    }

    /// Bytes of one set: the length of a peer's READ.
    pub fn set_bytes(&self) -> usize {
        self.geometry.set_bytes()
    }

    /// Offset in [`Self::memory`] of the record at `way` of `set` (both in range).
    pub fn record_offset(&self, set: u32, way: u32) -> usize {
        self.set_offset(set) + way as usize * self.geometry.record_bytes() as usize
    }

    fn lock(&self, set: u32) -> MutexGuard<'_, ()> {
        // The lock guards no data, only the order of changes: a panic while it was held
        // leaves nothing to repair.
        self.locks[set as usize % STORE_LOCKS].lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn memory_err(&self) -> impl Fn(FabricError) -> StoreError + '_ {
        move |source| StoreError::Memory { path: self.path.clone(), source }
    }

    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), StoreError> {
        self.memory.read(offset, dst).map_err(self.memory_err())
    }

    /// The heads of set `set`, from the cache (call with the set's lock held).
    fn heads(&self, set: u32) -> Result<Heads, StoreError> {
        let mut heads = [[0u8; HEAD_LEN]; STORE_WAYS_MAX as usize];
        let ways = self.geometry.ways() as usize;
        let first = set as usize * ways * HEAD_WORDS;
        for (way, head) in heads.iter_mut().enumerate().take(ways) {
            let words = &self.heads[first + way * HEAD_WORDS..first + (way + 1) * HEAD_WORDS];
            for (chunk, word) in head.chunks_exact_mut(8).zip(words) {
                chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_ne_bytes());
            }
        }
        Ok(heads)
    }

    /// The cached head words of the record at file offset `base`.
    fn cached_head(&self, base: usize) -> &[AtomicU64] {
        let set_bytes = self.geometry.set_bytes();
        let (set, way) = (base / set_bytes, (base % set_bytes) / self.geometry.record_bytes() as usize);
        let at = (set * self.geometry.ways() as usize + way) * HEAD_WORDS;
        &self.heads[at..at + HEAD_WORDS]
    }

    /// Fills the head cache from the file (an existing store, after recovery).
    fn load_heads(&self) -> Result<(), StoreError> {
        let mut head = [0u8; HEAD_LEN];
        for set in 0..self.geometry.sets() {
            let _guard = self.lock(set);
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

    /// Persists a fragment as a Pending record: `fragment_header` is its 40-byte header and
    /// `payload` its `rec.fragment_len` bytes. A (key, stamp, fragment index) already there
    /// is a [`Inserted::Duplicate`], a fragment older than the key's newest Committed
    /// record [`Inserted::Superseded`]; neither writes anything. Otherwise the record takes
    /// an empty way, or the way of a superseded record of the same key (the oldest); a key
    /// with [`VERSIONS_PER_KEY_MAX`] records must give up a superseded one. No room:
    /// [`StoreError::KeyFull`] or [`StoreError::SetFull`].
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
        let set = self.set_of(rec.key_hash);
        let _guard = self.lock(set);
        let heads = self.heads(set)?;
        let ways = &heads[..self.geometry.ways() as usize];
        let live =
            || ways.iter().enumerate().filter(|(_, h)| head_state(h) != RecordState::Empty).map(|(w, h)| (w as u32, h));
        let of_key = || live().filter(|(_, h)| head_u64(h, field::KEY_HASH) == rec.key_hash);
        let stamp = |h: &[u8; HEAD_LEN]| head_u64(h, field::STAMP);

        if let Some((way, _)) =
            of_key().find(|(_, h)| stamp(h) == rec.stamp && h[field::FRAGMENT_INDEX] == rec.fragment_index)
        {
            return Ok(Inserted::Duplicate { set, way });
        }
        let newest_committed =
            of_key().filter(|(_, h)| head_state(h) == RecordState::Committed).map(|(_, h)| stamp(h)).max();
        if newest_committed.is_some_and(|newest| rec.stamp < newest) {
            return Ok(Inserted::Superseded);
        }
        let superseded = of_key()
            .filter(|(_, h)| newest_committed.is_some_and(|newest| stamp(h) < newest))
            .min_by_key(|(_, h)| stamp(h))
            .map(|(way, _)| way);
        let versions = of_key().count();
        let empty = || ways.iter().position(|h| head_state(h) == RecordState::Empty).map(|w| w as u32);
        let way = if versions >= VERSIONS_PER_KEY_MAX {
            superseded.ok_or(StoreError::KeyFull { key_hash: rec.key_hash, set, versions })?
        } else {
            empty().or(superseded).ok_or_else(|| StoreError::SetFull {
                path: self.path.clone(),
                file_bytes: self.geometry.file_bytes(),
                keys: u64::from(self.geometry.sets()) * u64::from(self.geometry.ways()) / 2,
                set,
                ways: self.geometry.ways(),
            })?
        };
        self.write_record(self.record_offset(set, way), rec, fragment_header, payload)?;
        Ok(Inserted::Stored { set, way })
    }

    /// Applies a write's outcome to its records here. Committed: its records become
    /// Committed, then the key's records with lower stamps are dropped (unless a newer write
    /// is Committed already: then its own records are dropped, [`Resolved::Superseded`]).
    /// Aborted: its records are dropped; one already Committed is a
    /// [`StoreError::Conflict`]. No record of the write: [`Resolved::Unknown`].
    pub fn resolve(&self, key_hash: u64, stamp: u64, outcome: Outcome) -> Result<Resolved, StoreError> {
        let set = self.set_of(key_hash);
        let _guard = self.lock(set);
        let heads = self.heads(set)?;
        let ways = &heads[..self.geometry.ways() as usize];
        let of_key = || {
            ways.iter()
                .enumerate()
                .filter(|(_, h)| head_state(h) != RecordState::Empty && head_u64(h, field::KEY_HASH) == key_hash)
                .map(|(w, h)| (self.record_offset(set, w as u32), h))
        };
        let of_write = || of_key().filter(|(_, h)| head_u64(h, field::STAMP) == stamp);
        let records = of_write().count();
        if records == 0 {
            return Ok(Resolved::Unknown);
        }
        let drop_all = |records: &mut dyn Iterator<Item = (usize, &[u8; HEAD_LEN])>| -> Result<usize, StoreError> {
            let mut n = 0;
            for (base, _) in records {
                self.set_state_at(base, RecordState::Empty)?;
                n += 1;
            }
            Ok(n)
        };
        match outcome {
            Outcome::Committed => {
                let newest = of_key()
                    .filter(|(_, h)| head_state(h) == RecordState::Committed)
                    .map(|(_, h)| head_u64(h, field::STAMP))
                    .max();
                if newest.is_some_and(|newest| newest > stamp) {
                    return Ok(Resolved::Superseded { dropped: drop_all(&mut of_write())? });
                }
                // Commit first, then drop the older versions: a crash in between leaves
                // superseded records, never a key without its newest value.
                for (base, head) in of_write() {
                    if head_state(head) == RecordState::Pending {
                        self.set_state_at(base, RecordState::Committed)?;
                    }
                }
                let dropped = drop_all(&mut of_key().filter(|(_, h)| head_u64(h, field::STAMP) < stamp))?;
                Ok(Resolved::Committed { records, dropped })
            }
            Outcome::Aborted => {
                if of_write().any(|(_, h)| head_state(h) == RecordState::Committed) {
                    return Err(StoreError::Conflict { key_hash, stamp });
                }
                Ok(Resolved::Aborted { records: drop_all(&mut of_write())? })
            }
        }
    }

    /// Copies set `set` into the first [`Self::set_bytes`] of `out`, for the local GET path
    /// (read it with [`super::record::parse_set`]).
    pub fn read_set(&self, set: u32, out: &mut [u8]) -> Result<(), StoreError> {
        self.check_set(set)?;
        let need = self.set_bytes();
        if out.len() < need {
            return Err(StoreError::Buffer { len: out.len(), need });
        }
        self.read(self.set_offset(set), &mut out[..need])
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
    fn records_of(store: &Store, key: u64) -> Vec<(u64, u8, RecordState)> {
        let mut set = vec![0u8; store.set_bytes()];
        store.read_set(store.set_of(key), &mut set).unwrap();
        let mut found: Vec<_> = parse_set(&set, &store.geometry())
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
        let base = store.record_offset(store.set_of(r.key_hash), way);
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
            2, 0, 0, 0, // node, zero
            0, 4, 0, 0, // sets 1024
            4, 0, 0, 0, // ways
            0x80, 0x10, 0, 0, // record_bytes 4224
            0, 0x10, 0, 0, // payload_max 4096
        ]);
        let crc = crc32c::crc32c(&golden[..32]);
        golden[32..36].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(bytes[..64], golden);
        assert!(bytes[64..4096].iter().all(|&b| b == 0));
        assert_eq!(bytes.len() as u64, 4096 + 1024 * 4 * 4224);
    }

    #[test]
    fn insert_then_commit_keeps_the_newest_version() {
        let dir = TempDir::new("store-commit");
        let store = Store::open(&dir.file("store"), NODE, StoreGeometry::for_keys(100, 4, 128).unwrap()).unwrap();
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
        assert!(matches!(err, StoreError::SetFull { set: 0, ways: 4, .. }), "{err}");
        assert!(err.to_string().contains("raise cluster.store_keys"), "{err}");
        assert!(matches!(insert(&store, rec(0xc, 0x103, 0)), Err(StoreError::SetFull { .. })), "b's records stay");
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
        let way = |w: usize| 4096 + w * g.record_bytes() as usize;
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
        assert!(matches!(insert(&store, rec(6, 0x103, 0)), Err(StoreError::SetFull { .. })));
    }

    #[test]
    fn any_flipped_byte_but_the_state_fails_the_record() {
        let dir = TempDir::new("store-flip");
        let store = one_set(&dir, 2);
        insert(&store, rec(1, 0x103, 0)).unwrap();
        let mut set = vec![0u8; store.set_bytes()];
        store.read_set(0, &mut set).unwrap();
        for i in (0..104 + 100).filter(|&i| i != field::STATE) {
            let mut b = set.clone();
            b[i] ^= 0x10;
            let results: Vec<_> = parse_set(&b, &store.geometry()).collect();
            assert!(matches!(results[..], [Err(_)]), "byte {i}");
        }
        set[field::STATE] = RecordState::Committed as u8;
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
        assert!(text.contains("was made for node 2 / 64 sets x 4 ways") && text.contains("remove it or fix"), "{text}");
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
        assert!(matches!(insert(&store, rec(99, 0x103, 0)), Err(StoreError::SetFull { .. })));
    }
}
