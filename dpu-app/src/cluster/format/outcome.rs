//! The writer's outcome table: per write, its state and which holders have its fragment and
//! its outcome, in a file, so that a restarted writer can finish deciding.
//!
//! File layout: a 4096-byte header page (magic "PRSCOUTC", format 1, node, entries, CRC32C
//! in the common layout of [`super::file`]: entries at 16..20, the checksum at 20..24), then
//! `entries` (a power of two) 64-byte entries; write `w` uses entry `w % entries`. An
//! entry, all integers little-endian:
//!
//! ```text
//!  0..8 write_seq   8..16 key_hash   16..24 stamp
//! 24 state (0 Free, 1 InProgress, 2 Committed, 3 Aborted)   25..28 zero
//! 28..32 holders mask (nodes sent a fragment)
//! 32..36 acked mask (phase 1: fragment persisted, or a newer committed version held)
//! 36..40 decided mask (phase 2: outcome notice persisted)
//! 40..44 flags (bit 0 tombstone)   44..60 zero
//! 60..64 CRC32C of bytes 0..60 with bytes 24 and 28..40 taken as 0
//! ```
//!
//! Invariants: the checksum covers the identity of the write, and the state and masks lie
//! in two aligned words outside it (24..32 and 32..40), each changed by one atomic store.
//! [`OutcomeTable::begin`] empties an entry's state word before it rewrites the identity
//! and sets the state last, so a crash in between leaves a Free entry or one whose
//! checksum fails (read as Free), never a write with another write's masks. Write 0 is
//! never used (Outcomes log entries carry write_seq 0), and write numbers only grow.
#![forbid(unsafe_code)]

use std::fmt;
use std::path::{Path, PathBuf};

use super::file::{self, le32, le64, FileHeader, HeaderError, Opened};
use crate::cluster::holders_rule;
use crate::fabric::{FabricError, Memory};
use crate::limits::{HEADER_PAGE_BYTES, NODES_MAX, OUTCOME_ENTRIES_MAX, OUTCOME_ENTRY_BYTES};

/// Magic of an outcome table file.
pub const MAGIC: &[u8; 8] = b"PRSCOUTC";
/// Bytes of one entry.
pub const ENTRY_LEN: usize = OUTCOME_ENTRY_BYTES;
/// Flag: the write deletes the key.
pub const FLAG_TOMBSTONE: u32 = 1 << 0;

/// Byte ranges of an entry's fields.
pub mod field {
    use std::ops::Range;
    /// The writer's write number.
    pub const WRITE_SEQ: Range<usize> = 0..8;
    /// Hash of the key.
    pub const KEY_HASH: Range<usize> = 8..16;
    /// Stamp of the write.
    pub const STAMP: Range<usize> = 16..24;
    /// State; outside the checksum.
    pub const STATE: usize = 24;
    /// Zero.
    pub const ZERO0: Range<usize> = 25..28;
    /// Nodes sent a fragment; outside the checksum.
    pub const HOLDERS: Range<usize> = 28..32;
    /// Nodes that persisted their fragment; outside the checksum.
    pub const ACKED: Range<usize> = 32..36;
    /// Nodes that persisted the outcome notice; outside the checksum.
    pub const DECIDED: Range<usize> = 36..40;
    /// Flags.
    pub const FLAGS: Range<usize> = 40..44;
    /// Zero.
    pub const ZERO1: Range<usize> = 44..60;
    /// Checksum.
    pub const CRC: Range<usize> = 60..64;
    /// The aligned word of state and holders.
    pub const STATE_WORD: usize = 24;
    /// The aligned word of the acked and decided masks.
    pub const MASK_WORD: usize = 32;
}

const _: () = assert!(field::STATE_WORD % 8 == 0 && field::MASK_WORD % 8 == 0);
const _: () = assert!(field::STATE == field::STATE_WORD && field::HOLDERS.end == field::MASK_WORD);
const _: () = assert!(field::DECIDED.end == field::MASK_WORD + 8);

/// Where a write stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum WriteState {
    /// No write in this entry.
    Free = 0,
    /// Fragments sent, outcome not decided.
    InProgress = 1,
    /// Decided: committed.
    Committed = 2,
    /// Decided: aborted.
    Aborted = 3,
}

impl WriteState {
    /// The state with value `v`.
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(Self::Free),
            1 => Some(Self::InProgress),
            2 => Some(Self::Committed),
            3 => Some(Self::Aborted),
            _ => None,
        }
    }
}

/// The checksum of an entry: CRC32C of bytes 0..60 with the state byte and the masks
/// (24 and 28..40) taken as zero.
pub fn entry_crc(entry: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&entry[..field::STATE]);
    let crc = crc32c::crc32c_append(crc, &[0]);
    let crc = crc32c::crc32c_append(crc, &entry[field::ZERO0]);
    let crc = crc32c::crc32c_append(crc, &[0; 12]);
    crc32c::crc32c_append(crc, &entry[field::FLAGS.start..field::CRC.start])
}

/// A view of one entry over `T`'s bytes (a copy of the table's: never the mapping itself).
#[derive(Clone, Copy, Debug)]
pub struct OutcomeView<T: AsRef<[u8]> = [u8; ENTRY_LEN]> {
    buffer: T,
}

impl<T: AsRef<[u8]>> OutcomeView<T> {
    /// A view without any check; accessors panic if `buffer` is shorter than
    /// [`ENTRY_LEN`].
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// A view of an entry that passes [`Self::check`].
    pub fn new_checked(buffer: T) -> Option<Self> {
        let view = Self::new_unchecked(buffer);
        view.check().then_some(view)
    }

    /// True when the bytes are a whole entry with a known state, zero padding, known flags
    /// and a matching checksum. A failing entry is a torn or damaged one: Free.
    pub fn check(&self) -> bool {
        let b = self.buffer.as_ref();
        b.len() >= ENTRY_LEN
            && WriteState::from_u8(b[field::STATE]).is_some()
            && b[field::ZERO0].iter().chain(&b[field::ZERO1]).all(|&x| x == 0)
            && self.flags() & !FLAG_TOMBSTONE == 0
            && entry_crc(b) == le32(&b[field::CRC])
    }

    /// The writer's write number.
    pub fn write_seq(&self) -> u64 {
        le64(&self.buffer.as_ref()[field::WRITE_SEQ])
    }

    /// Hash of the key.
    pub fn key_hash(&self) -> u64 {
        le64(&self.buffer.as_ref()[field::KEY_HASH])
    }

    /// Stamp of the write.
    pub fn stamp(&self) -> u64 {
        le64(&self.buffer.as_ref()[field::STAMP])
    }

    /// State; `Free` for an unknown value on an unchecked view.
    pub fn state(&self) -> WriteState {
        WriteState::from_u8(self.buffer.as_ref()[field::STATE]).unwrap_or(WriteState::Free)
    }

    /// Nodes sent a fragment.
    pub fn holders(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::HOLDERS])
    }

    /// Nodes that persisted their fragment.
    pub fn acked(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::ACKED])
    }

    /// Nodes that persisted the outcome notice.
    pub fn decided(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::DECIDED])
    }

    /// Flags.
    pub fn flags(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::FLAGS])
    }

    /// The write deletes the key.
    pub fn tombstone(&self) -> bool {
        self.flags() & FLAG_TOMBSTONE != 0
    }

    /// The holders other than the writer `me` known not to hold the write's fragment
    /// once it is rolled back: those that persisted the rollback, and those never sent
    /// a fragment (recorded decided when the write rolled back). The writer never
    /// counts itself, whatever its own store did: `protocol/rollbacks.rs` says why.
    pub fn lacking(&self, me: u8) -> u32 {
        self.decided() & self.holders() & !(1u32 << me)
    }

    /// Decided, and every holder that persisted a fragment persisted the outcome too: the
    /// entry may be reused.
    pub fn is_settled(&self) -> bool {
        matches!(self.state(), WriteState::Committed | WriteState::Aborted) && self.acked() & !self.decided() == 0
    }
}

/// The fields of an entry, what [`OutcomeRepr::emit`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutcomeRepr {
    /// The writer's write number.
    pub write_seq: u64,
    /// Hash of the key.
    pub key_hash: u64,
    /// Stamp of the write.
    pub stamp: u64,
    /// State.
    pub state: WriteState,
    /// Nodes sent a fragment.
    pub holders: u32,
    /// Nodes that persisted their fragment.
    pub acked: u32,
    /// Nodes that persisted the outcome notice.
    pub decided: u32,
    /// The write deletes the key.
    pub tombstone: bool,
}

impl OutcomeRepr {
    /// Reads a checked entry.
    pub fn parse<T: AsRef<[u8]>>(view: &OutcomeView<T>) -> Option<Self> {
        view.check().then(|| Self {
            write_seq: view.write_seq(),
            key_hash: view.key_hash(),
            stamp: view.stamp(),
            state: view.state(),
            holders: view.holders(),
            acked: view.acked(),
            decided: view.decided(),
            tombstone: view.tombstone(),
        })
    }

    /// Writes the entry, checksum included.
    pub fn emit(&self, b: &mut [u8; ENTRY_LEN]) {
        b[field::WRITE_SEQ].copy_from_slice(&self.write_seq.to_le_bytes());
        b[field::KEY_HASH].copy_from_slice(&self.key_hash.to_le_bytes());
        b[field::STAMP].copy_from_slice(&self.stamp.to_le_bytes());
        b[field::STATE] = self.state as u8;
        b[field::ZERO0].fill(0);
        b[field::HOLDERS].copy_from_slice(&self.holders.to_le_bytes());
        b[field::ACKED].copy_from_slice(&self.acked.to_le_bytes());
        b[field::DECIDED].copy_from_slice(&self.decided.to_le_bytes());
        let flags = if self.tombstone { FLAG_TOMBSTONE } else { 0 };
        b[field::FLAGS].copy_from_slice(&flags.to_le_bytes());
        b[field::ZERO1].fill(0);
        let crc = entry_crc(&b[..]);
        b[field::CRC].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Which node an outcome table belongs to and its size: what a mismatch error shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutcomeIdentity {
    /// The writer node.
    pub node: u8,
    /// Entries.
    pub entries: u32,
}

impl fmt::Display for OutcomeIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {} / {} entries", self.node, self.entries)
    }
}

/// What failed in the outcome table, with the file or write and what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutcomeError {
    /// The number of entries is out of range.
    #[error("outcome table entries = {entries} is out of range: must be a power of two up to {OUTCOME_ENTRIES_MAX}; fix outcome_entries in the cluster config")]
    Geometry {
        /// The value given.
        entries: u32,
    },
    /// Opening, creating or reading the table file failed.
    #[error("cannot {action} outcome table {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not an outcome table of this format.
    #[error(
        "{path} is not an outcome table this build reads: {source}; remove it or point the config at another file"
    )]
    NotATable {
        /// The file.
        path: PathBuf,
        /// What is wrong with its header page.
        source: HeaderError,
    },
    /// The file is a table of another node or size.
    #[error("outcome table {path} was made for {found}, but this node opens it as {expected}; remove it or fix the cluster config")]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// What the file says.
        found: OutcomeIdentity,
        /// What the caller asked for.
        expected: OutcomeIdentity,
    },
    /// The file is not as long as its header says.
    #[error("outcome table {path} is {len} bytes, its header says {expected}: the file was truncated or extended; remove it")]
    Length {
        /// The file.
        path: PathBuf,
        /// Its length.
        len: u64,
        /// The length its size needs.
        expected: u64,
    },
    /// Mapping, reaching or flushing the table memory failed.
    #[error("outcome table {path}: {source}")]
    Memory {
        /// The file.
        path: PathBuf,
        /// The fabric memory error.
        source: FabricError,
    },
    /// The entry a new write needs holds a write that is not settled yet.
    #[error("outcome table full: write {write_seq} needs entry {slot}, which holds unsettled write {blocking} ({state:?}, holders {holders:#x}, stored on {acked:#x}, decision persisted on {decided:#x}); the oldest unsettled write is {oldest}: the holders that stored a fragment must come back and take its decision, or raise outcome_entries")]
    Full {
        /// The write that could not begin.
        write_seq: u64,
        /// Its entry.
        slot: u32,
        /// The write in that entry.
        blocking: u64,
        /// Its state.
        state: WriteState,
        /// Its holders.
        holders: u32,
        /// Holders that stored their fragment.
        acked: u32,
        /// Holders that persisted its decision.
        decided: u32,
        /// The oldest unsettled write in the table.
        oldest: u64,
    },
    /// A write number at or below one already used.
    #[error("write {write_seq} was begun before: the next unused write number is {next}; take numbers from next_write_seq()")]
    Reused {
        /// The write number given.
        write_seq: u64,
        /// The next unused one.
        next: u64,
    },
    /// An argument no write has.
    #[error("write {write_seq}: {field} = {value:#x} is invalid: {reason}")]
    Field {
        /// The write.
        write_seq: u64,
        /// The argument.
        field: &'static str,
        /// Its value.
        value: u64,
        /// Why it is invalid.
        reason: &'static str,
    },
    /// The table holds no entry for this write (never begun, or settled and reused).
    #[error("write {write_seq} is not in the outcome table: never begun, or settled and its entry reused")]
    NotFound {
        /// The write.
        write_seq: u64,
    },
    /// A node id beyond the holder masks.
    #[error("node {node} is out of range: node ids are below {NODES_MAX}")]
    Node {
        /// The node id.
        node: u8,
    },
    /// A node that was not sent a fragment of the write reports on it.
    #[error("node {node} reports on write {write_seq}, but it was not sent a fragment (holders {holders:#010x}); the node is broken or hostile")]
    NotAHolder {
        /// The write.
        write_seq: u64,
        /// The node.
        node: u8,
        /// The write's holders.
        holders: u32,
    },
    /// A state change no write makes.
    #[error(
        "write {write_seq} cannot go from {from:?} to {to:?}: a write goes InProgress -> Committed or Aborted, once"
    )]
    Transition {
        /// The write.
        write_seq: u64,
        /// Its state.
        from: WriteState,
        /// The state asked for.
        to: WriteState,
    },
    /// An outcome notice recorded before the write was decided.
    #[error("write {write_seq} is not decided yet: no holder can have persisted its outcome; decide it with set_state first")]
    NotDecided {
        /// The write.
        write_seq: u64,
    },
}

/// One writer's outcome table.
pub struct OutcomeTable {
    path: PathBuf,
    node: u8,
    entries: u32,
    /// The whole file, header page included (it is not registered with the fabric).
    memory: Memory,
    next_write_seq: u64,
    /// With `ordering = "sequencer"`, the write quorum: see [`OutcomeTable::keep_rollbacks`].
    rollback_quorum: Option<u32>,
    /// Holders a committed write's entry does not wait for: see [`OutcomeTable::excuse`].
    excused: u32,
}

impl fmt::Debug for OutcomeTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutcomeTable")
            .field("path", &self.path)
            .field("node", &self.node)
            .field("entries", &self.entries)
            .finish()
    }
}

impl OutcomeTable {
    /// Opens writer `node`'s table at `path` with `entries` entries (a power of two,
    /// [`crate::limits::OUTCOME_ENTRIES_DEFAULT`] unless configured), or creates it (sparse).
    /// An existing file must be a table of exactly this node and size; it is never reset.
    pub fn open(path: &Path, node: u8, entries: u32) -> Result<Self, OutcomeError> {
        if !entries.is_power_of_two() || entries > OUTCOME_ENTRIES_MAX {
            return Err(OutcomeError::Geometry { entries });
        }
        let expected = OutcomeIdentity { node, entries };
        let file_bytes = HEADER_PAGE_BYTES as u64 + u64::from(entries) * ENTRY_LEN as u64;
        let mut page = vec![0u8; HEADER_PAGE_BYTES];
        FileHeader { ids: [node, 0], params: [entries] }.emit(MAGIC, &mut page);
        let io = |e: file::FileIoError| OutcomeError::Io { action: e.action, path: path.to_owned(), source: e.source };
        let not_a_table = |source| OutcomeError::NotATable { path: path.to_owned(), source };
        let file = match file::open_or_create(path, &page, file_bytes).map_err(io)? {
            Opened::Created(file) => file,
            Opened::Existing { file, page, len } => {
                let found = FileHeader::<1>::parse(MAGIC, &page).map_err(not_a_table)?;
                if found.ids[1] != 0 {
                    return Err(not_a_table(HeaderError::NonZero { offset: file::field::ID1, value: found.ids[1] }));
                }
                let found = OutcomeIdentity { node: found.ids[0], entries: found.params[0] };
                if found != expected {
                    return Err(OutcomeError::Mismatch { path: path.to_owned(), found, expected });
                }
                if len != file_bytes {
                    return Err(OutcomeError::Length { path: path.to_owned(), len, expected: file_bytes });
                }
                file
            }
        };
        let memory = Memory::map_file(&file, 0, file_bytes as usize)
            .map_err(|source| OutcomeError::Memory { path: path.to_owned(), source })?;
        let mut table =
            Self { path: path.to_owned(), node, entries, memory, next_write_seq: 1, rollback_quorum: None, excused: 0 };
        let mut highest = 0;
        table.scan(|view| highest = highest.max(view.write_seq()))?;
        table.next_write_seq = highest.saturating_add(1);
        Ok(table)
    }

    /// The table file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The writer node whose table this is.
    pub fn node(&self) -> u8 {
        self.node
    }

    /// Number of entries.
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// One past the highest write number in the table (1 for an empty table): a restarted
    /// writer continues from here and never reuses a number.
    pub fn next_write_seq(&self) -> u64 {
        self.next_write_seq
    }

    fn slot(&self, write_seq: u64) -> u32 {
        (write_seq & u64::from(self.entries - 1)) as u32
    }

    fn offset(&self, write_seq: u64) -> usize {
        HEADER_PAGE_BYTES + self.slot(write_seq) as usize * ENTRY_LEN
    }

    fn memory_err(&self) -> impl Fn(FabricError) -> OutcomeError + '_ {
        move |source| OutcomeError::Memory { path: self.path.clone(), source }
    }

    fn read_slot(&self, offset: usize) -> Result<[u8; ENTRY_LEN], OutcomeError> {
        let mut bytes = [0u8; ENTRY_LEN];
        self.memory.read(offset, &mut bytes).map_err(self.memory_err())?;
        Ok(bytes)
    }

    /// Every valid, non-Free entry.
    fn scan(&self, mut f: impl FnMut(OutcomeView)) -> Result<(), OutcomeError> {
        for slot in 0..self.entries as usize {
            let view = OutcomeView::new_unchecked(self.read_slot(HEADER_PAGE_BYTES + slot * ENTRY_LEN)?);
            if view.check() && view.state() != WriteState::Free {
                f(view);
            }
        }
        Ok(())
    }

    /// With `ordering = "sequencer"` (`quorum` the write quorum): a rolled-back write's
    /// entry stays unsettled, and its slot is not reused, until its rollback reached
    /// enough of the other holders that its stamp may be recorded Aborted
    /// (`protocol/rollbacks.rs`), not only the holders that acknowledged its fragment.
    /// A restart that found the slot reused would take the stamp for one never used and
    /// record it Aborted, while holders whose acknowledgement was lost may still hold
    /// the fragment, a quorum with the writer, which the holders' rule
    /// ([`holders_rule`]) would take for a write. Meanwhile the resync keeps taking the
    /// rollback to the holders that have not persisted it.
    pub fn keep_rollbacks(&mut self, quorum: u32) {
        self.rollback_quorum = Some(quorum);
    }

    /// With `ordering = "sequencer"`: the holders this node has fenced, silent past
    /// `fence_after` (`protocol/fence.rs`), and those back from a fence whose resync
    /// has not gone over the table yet. A committed write's entry no longer waits for
    /// them to persist its decision, so a holder gone for good does not fill the table
    /// and stop every write. One that comes back gets the decisions whose entries are
    /// still here; a write whose entry was reused leaves its record undecided on that
    /// holder (a GET counts it only with a committed record elsewhere, and the key's
    /// next committed write drops it).
    pub fn excuse(&mut self, holders: u32) {
        self.excused = holders;
    }

    /// Whether `view`'s slot may be reused, and a restart has nothing left to finish.
    fn is_settled(&self, view: &OutcomeView) -> bool {
        let committed_excused =
            view.state() == WriteState::Committed && view.acked() & !view.decided() & !self.excused == 0;
        if !view.is_settled() && !committed_excused {
            return false;
        }
        let Some(quorum) = self.rollback_quorum.filter(|_| view.state() == WriteState::Aborted) else {
            return true;
        };
        holders_rule::rollback_settled(quorum, view.holders(), self.node, view.lacking(self.node))
    }

    /// The entry of `write_seq`: `None` if its slot holds another write, a Free entry, or a
    /// torn one.
    pub fn get(&self, write_seq: u64) -> Option<OutcomeView> {
        let view = OutcomeView::new_checked(self.read_slot(self.offset(write_seq)).ok()?)?;
        (view.state() != WriteState::Free && view.write_seq() == write_seq).then_some(view)
    }

    fn entry(&self, write_seq: u64) -> Result<OutcomeView, OutcomeError> {
        self.get(write_seq).ok_or(OutcomeError::NotFound { write_seq })
    }

    /// Records a new write, InProgress, sent to the nodes in `holders`: call it before any
    /// fragment goes out. `flags` bit 0 marks a tombstone. Refuses ([`OutcomeError::Full`],
    /// which the caller turns into an Overloaded completion) when the write's entry holds
    /// a write that is not settled.
    pub fn begin(
        &mut self,
        write_seq: u64,
        key_hash: u64,
        stamp: u64,
        holders: u32,
        flags: u32,
    ) -> Result<(), OutcomeError> {
        let field = |field, value: u64, reason| OutcomeError::Field { write_seq, field, value, reason };
        if write_seq == 0 {
            return Err(field("write_seq", 0, "write 0 is never used"));
        }
        if write_seq < self.next_write_seq {
            return Err(OutcomeError::Reused { write_seq, next: self.next_write_seq });
        }
        if holders == 0 {
            return Err(field("holders", 0, "a write goes to at least one holder"));
        }
        if flags & !FLAG_TOMBSTONE != 0 {
            return Err(field("flags", flags.into(), "unknown flag bits"));
        }
        let offset = self.offset(write_seq);
        let old = OutcomeView::new_unchecked(self.read_slot(offset)?);
        if old.check() && old.state() != WriteState::Free && !self.is_settled(&old) {
            let mut oldest = old.write_seq();
            self.scan(|v| {
                if !self.is_settled(&v) {
                    oldest = oldest.min(v.write_seq());
                }
            })?;
            return Err(OutcomeError::Full {
                write_seq,
                slot: self.slot(write_seq),
                blocking: old.write_seq(),
                state: old.state(),
                holders: old.holders(),
                acked: old.acked(),
                decided: old.decided(),
                oldest,
            });
        }
        let mut bytes = [0u8; ENTRY_LEN];
        let repr = OutcomeRepr {
            write_seq,
            key_hash,
            stamp,
            state: WriteState::InProgress,
            holders,
            acked: 0,
            decided: 0,
            tombstone: flags & FLAG_TOMBSTONE != 0,
        };
        repr.emit(&mut bytes);
        self.write_entry(offset, &bytes)?;
        self.next_write_seq = write_seq + 1;
        Ok(())
    }

    /// Rewrites the entry at `offset`: Free first, masks cleared, identity and checksum,
    /// then the state word last, so a crash at any step leaves a Free or a torn entry.
    fn write_entry(&self, offset: usize, bytes: &[u8; ENTRY_LEN]) -> Result<(), OutcomeError> {
        let m = &self.memory;
        let err = self.memory_err();
        m.store_u64(offset + field::STATE_WORD, 0).map_err(&err)?;
        m.store_u64(offset + field::MASK_WORD, 0).map_err(&err)?;
        m.write(offset, &bytes[..field::STATE_WORD]).map_err(&err)?;
        m.write(offset + field::FLAGS.start, &bytes[field::FLAGS.start..]).map_err(&err)?;
        let state_word = u64::from_le_bytes(bytes[field::STATE_WORD..field::MASK_WORD].try_into().expect("8 bytes"));
        m.store_u64(offset + field::STATE_WORD, state_word).map_err(&err)
    }

    fn holder_bit(&self, write_seq: u64, node: u8) -> Result<(OutcomeView, u32), OutcomeError> {
        if usize::from(node) >= NODES_MAX {
            return Err(OutcomeError::Node { node });
        }
        let view = self.entry(write_seq)?;
        let bit = 1u32 << node;
        if view.holders() & bit == 0 {
            return Err(OutcomeError::NotAHolder { write_seq, node, holders: view.holders() });
        }
        Ok((view, bit))
    }

    fn store_masks(&self, write_seq: u64, acked: u32, decided: u32) -> Result<(), OutcomeError> {
        let word = u64::from(acked) | u64::from(decided) << 32;
        self.memory.store_u64(self.offset(write_seq) + field::MASK_WORD, word).map_err(self.memory_err())
    }

    /// Records that `node` persisted its fragment of `write_seq` (phase 1).
    pub fn set_acked(&mut self, write_seq: u64, node: u8) -> Result<(), OutcomeError> {
        let (view, bit) = self.holder_bit(write_seq, node)?;
        self.store_masks(write_seq, view.acked() | bit, view.decided())
    }

    /// Records that `node` persisted the outcome notice of `write_seq` (phase 2); the write
    /// must be decided.
    pub fn set_decided(&mut self, write_seq: u64, node: u8) -> Result<(), OutcomeError> {
        let (view, bit) = self.holder_bit(write_seq, node)?;
        if view.state() == WriteState::InProgress {
            return Err(OutcomeError::NotDecided { write_seq });
        }
        self.store_masks(write_seq, view.acked(), view.decided() | bit)
    }

    /// Decides `write_seq`: InProgress -> Committed or Aborted. Setting the state it has
    /// already is a no-op; any other change is an error.
    pub fn set_state(&mut self, write_seq: u64, state: WriteState) -> Result<(), OutcomeError> {
        let view = self.entry(write_seq)?;
        let from = view.state();
        if from == state {
            return Ok(());
        }
        if from != WriteState::InProgress || !matches!(state, WriteState::Committed | WriteState::Aborted) {
            return Err(OutcomeError::Transition { write_seq, from, to: state });
        }
        let word = u64::from(state as u8) | u64::from(view.holders()) << 32;
        self.memory.store_u64(self.offset(write_seq) + field::STATE_WORD, word).map_err(self.memory_err())
    }

    /// The order decided rolled-back write `write_seq` by the holders' rule (its holders
    /// fenced this writer; `protocol/ledgers.rs`). Not a write: every holder counts as
    /// decided (those that keep it frozen learn the fate from their own order). A write:
    /// the entry becomes Committed (from Aborted, only here), acknowledged by `holding`
    /// (the holders read holding the fragment) and decided by none, so the resync sends
    /// each the decision and first repairs the fragment of those without it.
    pub fn take_ordered(&mut self, write_seq: u64, write: bool, holding: u32) -> Result<(), OutcomeError> {
        let view = self.entry(write_seq)?;
        let holders = view.holders();
        if !write {
            return self.store_masks(write_seq, view.acked(), holders);
        }
        let word = u64::from(WriteState::Committed as u8) | u64::from(holders) << 32;
        self.memory.store_u64(self.offset(write_seq) + field::STATE_WORD, word).map_err(self.memory_err())?;
        self.store_masks(write_seq, holding & holders, 0)
    }

    /// At restart: visits the writes still to finish, the InProgress ones (to abort) and
    /// the decided ones whose notice some acked holder has not persisted; returns how many.
    pub fn unsettled(&self, mut f: impl FnMut(OutcomeView)) -> Result<usize, OutcomeError> {
        let mut count = 0;
        self.scan(|view| {
            if !self.is_settled(&view) {
                f(view);
                count += 1;
            }
        })?;
        Ok(count)
    }

    /// Writes the entry of `write_seq` back to the file and waits (`msync`), for power-loss
    /// durability; a process crash needs no flush.
    pub fn sync_entry(&self, write_seq: u64) -> Result<(), OutcomeError> {
        self.memory.flush_range(self.offset(write_seq), ENTRY_LEN).map_err(self.memory_err())
    }
}

#[cfg(test)]
mod tests {
    use super::super::file::testing::TempDir;
    use super::*;
    use crate::limits::OUTCOME_ENTRIES_DEFAULT;

    const NODE: u8 = 3;

    fn repr() -> OutcomeRepr {
        OutcomeRepr {
            write_seq: 0x0102,
            key_hash: 0x0123_4567_89ab_cdef,
            stamp: (42 << 8) | 3,
            state: WriteState::Committed,
            holders: 0b0111,
            acked: 0b0011,
            decided: 0b0001,
            tombstone: true,
        }
    }

    /// The exact bytes of one entry, fixed forever for format 1; the checksum (bytes
    /// 60..64) is CRC32C of bytes 0..60 with 24 and 28..40 as zero.
    const GOLDEN: [u8; 60] = [
        0x02, 0x01, 0, 0, 0, 0, 0, 0, // write_seq
        0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01, // key hash
        0x03, 42, 0, 0, 0, 0, 0, 0, // stamp
        2, 0, 0, 0, // Committed, zero
        0x07, 0, 0, 0, // holders
        0x03, 0, 0, 0, // acked
        0x01, 0, 0, 0, // decided
        1, 0, 0, 0, // flags: tombstone
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // zero
    ];

    fn golden() -> [u8; ENTRY_LEN] {
        let mut covered = GOLDEN;
        covered[24] = 0;
        covered[28..40].fill(0);
        let mut g = [0u8; ENTRY_LEN];
        g[..60].copy_from_slice(&GOLDEN);
        g[60..].copy_from_slice(&crc32c::crc32c(&covered).to_le_bytes());
        g
    }

    fn open(dir: &TempDir, entries: u32) -> OutcomeTable {
        OutcomeTable::open(&dir.file("outcomes"), NODE, entries).unwrap()
    }

    #[test]
    fn entries_have_the_golden_bytes() {
        let mut b = [0xffu8; ENTRY_LEN];
        repr().emit(&mut b);
        assert_eq!(b, golden());
        let view = OutcomeView::new_checked(golden()).unwrap();
        assert_eq!(OutcomeRepr::parse(&view), Some(repr()));
        assert!(!view.is_settled(), "node 1 acked but has not the notice");
    }

    #[test]
    fn header_page_has_the_golden_bytes() {
        let dir = TempDir::new("outcome-golden");
        drop(open(&dir, OUTCOME_ENTRIES_DEFAULT));
        let bytes = std::fs::read(dir.file("outcomes")).unwrap();
        let mut golden = [0u8; 64];
        golden[..20].copy_from_slice(&[
            b'P', b'R', b'S', b'C', b'O', b'U', b'T', b'C', // magic
            1, 0, 0, 0, // format
            3, 0, 0, 0, // node, zero
            0, 0, 1, 0, // entries 65536
        ]);
        let crc = crc32c::crc32c(&golden[..20]);
        golden[20..24].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(bytes[..64], golden);
        assert_eq!(bytes.len(), 4096 + 65536 * 64);
    }

    #[test]
    fn state_and_masks_are_outside_the_checksum_and_every_other_byte_is_covered() {
        let g = golden();
        for i in 0..ENTRY_LEN {
            let mut b = g;
            b[i] ^= 0x01;
            let passes = OutcomeView::new_checked(b).is_some();
            assert_eq!(passes, i == field::STATE || (28..40).contains(&i), "byte {i}");
        }
        let mut b = g;
        b[field::STATE] = 4;
        assert!(OutcomeView::new_checked(b).is_none(), "an unknown state");
    }

    #[test]
    fn in_sequencer_order_a_rollback_settles_only_once_too_few_others_can_hold_it() {
        let dir = TempDir::new("outcome-rollback");
        let mut t = open(&dir, 16);
        let me = t.node;
        assert_eq!(me, 3);
        t.keep_rollbacks(3);
        // Five holders, this node one of them: it needs fewer than 2 of the other four.
        t.begin(1, 0xabc, 0x103, 0b11111, 0).unwrap();
        t.set_acked(1, me).unwrap();
        t.set_acked(1, 0).unwrap();
        t.set_state(1, WriteState::Aborted).unwrap();
        t.set_decided(1, me).unwrap();
        t.set_decided(1, 0).unwrap();
        assert!(t.get(1).unwrap().is_settled(), "every holder that acknowledged has the rollback");
        assert_eq!(t.unsettled(|_| {}).unwrap(), 1, "but nodes 1, 2 and 4 may hold the fragment");
        assert!(matches!(t.begin(17, 0xdef, 0x203, 0b1, 0), Err(OutcomeError::Full { blocking: 1, .. })));
        t.set_decided(1, 1).unwrap();
        assert_eq!(t.unsettled(|_| {}).unwrap(), 1, "nodes 2 and 4 may");
        t.set_decided(1, 4).unwrap();
        assert_eq!(t.unsettled(|_| {}).unwrap(), 0, "only node 2 may: too few");
        t.begin(17, 0xdef, 0x203, 0b1, 0).unwrap();
        // A committed write needs no more than before.
        t.begin(18, 0xabc, 0x104, 0b11111, 0).unwrap();
        t.set_acked(18, me).unwrap();
        t.set_state(18, WriteState::Committed).unwrap();
        t.set_decided(18, me).unwrap();
        assert!(t.get(18).unwrap().is_settled());
        let mut left = Vec::new();
        t.unsettled(|v| left.push(v.write_seq())).unwrap();
        assert_eq!(left, [17], "write 17 is still in progress");
    }

    #[test]
    fn a_write_goes_from_begin_to_settled() {
        let dir = TempDir::new("outcome-life");
        let mut t = open(&dir, 16);
        assert_eq!(t.next_write_seq(), 1);
        assert!(t.get(1).is_none());
        t.begin(1, 0xabc, 0x103, 0b1110, FLAG_TOMBSTONE).unwrap();
        assert_eq!(t.next_write_seq(), 2);
        let v = t.get(1).unwrap();
        assert_eq!(
            (v.key_hash(), v.stamp(), v.state(), v.holders(), v.acked()),
            (0xabc, 0x103, WriteState::InProgress, 0b1110, 0)
        );
        assert!(v.tombstone());
        assert!(t.get(17).is_none(), "same entry, another write");
        t.set_acked(1, 1).unwrap();
        t.set_acked(1, 2).unwrap();
        t.set_acked(1, 2).unwrap();
        assert!(matches!(t.set_decided(1, 1), Err(OutcomeError::NotDecided { write_seq: 1 })));
        t.set_state(1, WriteState::Committed).unwrap();
        t.set_state(1, WriteState::Committed).unwrap();
        t.set_decided(1, 1).unwrap();
        let mut seen = Vec::new();
        assert_eq!(t.unsettled(|v| seen.push(v.write_seq())).unwrap(), 1);
        assert_eq!(seen, [1]);
        t.set_decided(1, 2).unwrap();
        let v = t.get(1).unwrap();
        assert_eq!((v.acked(), v.decided(), v.state()), (0b0110, 0b0110, WriteState::Committed));
        assert!(v.is_settled());
        assert_eq!(t.unsettled(|_| {}).unwrap(), 0);
        // Its entry can now take write 17; a holder that acks late finds it gone.
        t.begin(17, 0xdef, 0x203, 0b0001, 0).unwrap();
        assert!(t.get(1).is_none());
        assert!(matches!(t.set_acked(1, 3), Err(OutcomeError::NotFound { write_seq: 1 })));
    }

    #[test]
    fn wrong_reports_and_transitions_are_refused() {
        let dir = TempDir::new("outcome-errors");
        let mut t = open(&dir, 16);
        t.begin(5, 1, 0x103, 0b0110, 0).unwrap();
        assert!(matches!(t.set_acked(5, 0), Err(OutcomeError::NotAHolder { node: 0, holders: 0b0110, .. })));
        assert!(matches!(t.set_acked(5, 32), Err(OutcomeError::Node { node: 32 })));
        assert!(matches!(t.set_acked(6, 1), Err(OutcomeError::NotFound { write_seq: 6 })));
        assert!(matches!(
            t.set_state(5, WriteState::Free),
            Err(OutcomeError::Transition { from: WriteState::InProgress, to: WriteState::Free, .. })
        ));
        t.set_state(5, WriteState::Aborted).unwrap();
        assert!(matches!(t.set_state(5, WriteState::Committed), Err(OutcomeError::Transition { .. })));
        assert!(matches!(t.begin(5, 1, 0x103, 1, 0), Err(OutcomeError::Reused { write_seq: 5, next: 6 })));
        assert!(matches!(t.begin(0, 1, 0x103, 1, 0), Err(OutcomeError::Field { field: "write_seq", .. })));
        assert!(matches!(t.begin(6, 1, 0x103, 0, 0), Err(OutcomeError::Field { field: "holders", .. })));
        assert!(matches!(t.begin(6, 1, 0x103, 1, 2), Err(OutcomeError::Field { field: "flags", .. })));
        for entries in [0, 3, OUTCOME_ENTRIES_MAX * 2] {
            let err = OutcomeTable::open(&dir.file("other"), NODE, entries).unwrap_err();
            assert!(matches!(err, OutcomeError::Geometry { .. }), "{entries}");
        }
    }

    #[test]
    fn a_full_table_names_the_oldest_unsettled_write() {
        let dir = TempDir::new("outcome-full");
        let mut t = open(&dir, 4);
        for w in 1..=4 {
            t.begin(w, w, w << 8, 1, 0).unwrap();
        }
        // Write 2 aborts with no fragment persisted: settled at once.
        t.set_state(2, WriteState::Aborted).unwrap();
        let err = t.begin(5, 5, 0x500, 1, 0).unwrap_err();
        assert!(matches!(err, OutcomeError::Full { write_seq: 5, slot: 1, blocking: 1, oldest: 1, .. }), "{err}");
        assert!(err.to_string().contains("raise outcome_entries"));
        t.begin(6, 6, 0x600, 1, 0).unwrap();
        let err = t.begin(7, 7, 0x700, 1, 0).unwrap_err();
        assert!(matches!(err, OutcomeError::Full { blocking: 3, oldest: 1, .. }), "{err}");
        // Committed and acked, but the notice is not persisted everywhere: still unsettled.
        t.set_acked(3, 0).unwrap();
        t.set_state(3, WriteState::Committed).unwrap();
        assert!(matches!(t.begin(7, 7, 0x700, 1, 0), Err(OutcomeError::Full { blocking: 3, .. })));
        t.set_decided(3, 0).unwrap();
        t.begin(7, 7, 0x700, 1, 0).unwrap();
    }

    #[test]
    fn reopening_after_a_kill_finds_every_write() {
        let dir = TempDir::new("outcome-reopen");
        let mut t = open(&dir, 8);
        for w in 1..=6 {
            t.begin(w, w * 10, w << 8, 0b11, 0).unwrap();
            t.set_acked(w, 0).unwrap();
        }
        t.set_state(2, WriteState::Committed).unwrap();
        t.set_decided(2, 0).unwrap();
        t.set_state(3, WriteState::Aborted).unwrap();
        t.sync_entry(3).unwrap();
        // Dropped without any flush, as a kill -9 leaves it.
        drop(t);
        let t = open(&dir, 8);
        assert_eq!(t.next_write_seq(), 7);
        let v = t.get(2).unwrap();
        assert_eq!((v.state(), v.acked(), v.decided(), v.key_hash()), (WriteState::Committed, 1, 1, 20));
        let mut unsettled = Vec::new();
        t.unsettled(|v| unsettled.push((v.write_seq(), v.state()))).unwrap();
        unsettled.sort_by_key(|&(w, _)| w);
        assert_eq!(
            unsettled,
            [
                (1, WriteState::InProgress),
                (3, WriteState::Aborted),
                (4, WriteState::InProgress),
                (5, WriteState::InProgress),
                (6, WriteState::InProgress)
            ]
        );
    }

    #[test]
    fn a_torn_begin_reads_as_free() {
        let dir = TempDir::new("outcome-torn");
        let path = dir.file("outcomes");
        let mut t = open(&dir, 8);
        t.begin(1, 10, 0x100, 1, 0).unwrap();
        t.begin(2, 20, 0x200, 1, 0).unwrap();
        drop(t);
        // A crash while write 2's entry was being rewritten: its key hash half changed.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[4096 + 2 * 64 + 9] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let mut t = open(&dir, 8);
        assert!(t.get(2).is_none());
        assert_eq!(t.next_write_seq(), 2, "write 2 never went out: its number may be used");
        assert_eq!(t.unsettled(|_| {}).unwrap(), 1);
        t.begin(2, 21, 0x201, 1, 0).unwrap();
        assert_eq!(t.get(2).unwrap().key_hash(), 21);
    }

    #[test]
    fn a_table_of_another_node_or_size_is_refused() {
        let dir = TempDir::new("outcome-mismatch");
        let path = dir.file("outcomes");
        drop(open(&dir, 64));
        let before = std::fs::read(&path).unwrap();
        let err = OutcomeTable::open(&path, 4, 64).unwrap_err();
        assert!(err.to_string().contains("was made for node 3 / 64 entries"), "{err}");
        assert!(matches!(OutcomeTable::open(&path, NODE, 128), Err(OutcomeError::Mismatch { .. })));
        assert_eq!(std::fs::read(&path).unwrap(), before);
        let store = dir.file("store");
        let g = super::super::record::StoreGeometry::new(1, 1, 64).unwrap();
        drop(super::super::store::Store::open(&store, NODE, g).unwrap());
        let err = OutcomeTable::open(&store, NODE, 64).unwrap_err();
        assert!(matches!(err, OutcomeError::NotATable { source: HeaderError::Magic { .. }, .. }), "{err}");
        std::fs::write(&path, &before[..4096]).unwrap();
        assert!(matches!(OutcomeTable::open(&path, NODE, 64), Err(OutcomeError::Length { len: 4096, .. })));
    }
}
