//! The fragment log, holder side: one file-backed circular array of slots per writer,
//! which that writer fills by RDMA WRITE and the holder reads, checks and applies.
//!
//! File layout: a 4096-byte header page, then `slots` slots of `slot_bytes` each (a 64-byte
//! entry header and the payload, see [`super::entry`]); `slot_bytes` is 64 plus the payload
//! capacity rounded up to 64. The header page, all integers little-endian:
//!
//! ```text
//!  0..8  magic "PRSCLOG\0"   8..12 format (1)   12 writer   13 holder   14..16 zero
//! 16..20 slots               20..24 slot_bytes  24..28 CRC32C of bytes 0..24
//! 28..64 zero
//! 64..72 applied_seq: every seq below it is applied and its credit returned; stored with
//!        one aligned 8-byte atomic store, outside the checksum, and never moved back
//! ```
//!
//! Invariants: the slots and the header page are two mappings of the file. Only the slots
//! ([`FragmentLog::memory`]) are registered with the fabric, so a writer - another node,
//! possibly hostile - can never reach `applied_seq`. Every entry is copied into the
//! holder's private [`EntryBuf`] before any of it is checked, so a writer that rewrites a
//! slot while the holder reads it gets a checksum error, never a check passed on bytes
//! that then change. Credit flow control keeps the writer from writing seq `s` before the
//! holder applied `s - slots`: a slot is reused only once its entry is applied.
#![forbid(unsafe_code)]

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::entry::{outcome_records, EntryError, EntryHeader, EntryKind, EntryRepr, OutcomeRecordRepr, HEADER_LEN};
use super::file::{self, FileHeader, HeaderError, Opened};
use crate::fabric::{FabricError, Memory};
use crate::limits::{HEADER_PAGE_BYTES, LINE_BYTES, LOG_FILE_BYTES_MAX, LOG_PAYLOAD_BYTES_MAX, LOG_SLOTS_MAX};
use crate::stripe::{FragmentHeader, StripeError, HEADER_LEN as FRAGMENT_HEADER_LEN};

/// Magic of a fragment log file.
pub const MAGIC: &[u8; 8] = b"PRSCLOG\0";

/// Byte ranges of the header page fields specific to the log (the common ones are in
/// [`super::file::field`]).
pub mod field {
    use std::ops::Range;
    /// Number of slots.
    pub const SLOTS: Range<usize> = 16..20;
    /// Bytes per slot.
    pub const SLOT_BYTES: Range<usize> = 20..24;
    /// CRC32C of bytes 0..24.
    pub const CRC: Range<usize> = 24..28;
    /// Every seq below this is applied (aligned u64, atomic).
    pub const APPLIED_SEQ: Range<usize> = 64..72;
}

/// Shape of a fragment log: how many slots, and how large.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogGeometry {
    slots: u32,
    slot_bytes: u32,
}

impl LogGeometry {
    /// A log of `slots` slots each holding a payload of up to `payload_max` bytes (the
    /// slot is 64 header bytes plus that, rounded up to 64).
    pub fn new(slots: u32, payload_max: u32) -> Result<Self, LogError> {
        let bad = |field, value: u64, limit: String| LogError::Geometry { field, value, limit };
        if slots == 0 || slots > LOG_SLOTS_MAX {
            return Err(bad("slots", slots.into(), format!("1 to {LOG_SLOTS_MAX}")));
        }
        if payload_max > LOG_PAYLOAD_BYTES_MAX {
            return Err(bad("payload_max", payload_max.into(), format!("at most {LOG_PAYLOAD_BYTES_MAX} bytes")));
        }
        let slot_bytes = file::round_up(HEADER_LEN as u64 + u64::from(payload_max), LINE_BYTES as u64)
            .expect("payload_max is bounded") as u32;
        let geometry = Self { slots, slot_bytes };
        if geometry.file_bytes() > LOG_FILE_BYTES_MAX {
            return Err(bad(
                "slots x slot_bytes",
                geometry.body_bytes(),
                format!("at most {LOG_FILE_BYTES_MAX} bytes"),
            ));
        }
        Ok(geometry)
    }

    /// Number of slots.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Bytes per slot, header included.
    pub fn slot_bytes(&self) -> u32 {
        self.slot_bytes
    }

    /// Payload bytes one slot holds (at least the `payload_max` asked for).
    pub fn payload_capacity(&self) -> usize {
        self.slot_bytes as usize - HEADER_LEN
    }

    fn body_bytes(&self) -> u64 {
        u64::from(self.slots) * u64::from(self.slot_bytes)
    }

    /// Length of the log file: header page and slots.
    pub fn file_bytes(&self) -> u64 {
        HEADER_PAGE_BYTES as u64 + self.body_bytes()
    }
}

/// Who a log file was made for and its shape: what a mismatch error shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogIdentity {
    /// Writer node.
    pub writer: u8,
    /// Holder node.
    pub holder: u8,
    /// Number of slots.
    pub slots: u32,
    /// Bytes per slot.
    pub slot_bytes: u32,
}

impl fmt::Display for LogIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "writer {} / holder {} / {} slots of {} bytes", self.writer, self.holder, self.slots, self.slot_bytes)
    }
}

/// What failed in a fragment log, with the file or entry and what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// A geometry parameter is out of range.
    #[error("fragment log {field} = {value} is out of range: must be {limit}; fix the cluster config")]
    Geometry {
        /// The parameter.
        field: &'static str,
        /// The value given.
        value: u64,
        /// What is allowed.
        limit: String,
    },
    /// Opening, creating or reading the log file failed.
    #[error("cannot {action} fragment log {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not a fragment log of this format.
    #[error("{path} is not a fragment log this build reads: {source}; remove it or point the config at another file")]
    NotALog {
        /// The file.
        path: PathBuf,
        /// What is wrong with its header page.
        source: HeaderError,
    },
    /// The file is a log for another writer, holder or geometry.
    #[error("fragment log {path} was made for {found}, but this node opens it for {expected}; remove it or fix the cluster config")]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// What the file says.
        found: LogIdentity,
        /// What the caller asked for.
        expected: LogIdentity,
    },
    /// The file is not as long as its header says.
    #[error(
        "fragment log {path} is {len} bytes, its header says {expected}: the file was truncated or extended; remove it"
    )]
    Length {
        /// The file.
        path: PathBuf,
        /// Its length.
        len: u64,
        /// The length its geometry needs.
        expected: u64,
    },
    /// Mapping or reaching the log memory failed.
    #[error("fragment log {path}: {source}")]
    Memory {
        /// The file.
        path: PathBuf,
        /// The fabric memory error.
        source: FabricError,
    },
    /// An entry buffer is smaller than this log's slots.
    #[error(
        "entry buffer of {len} bytes is smaller than a {need}-byte slot; make it with EntryBuf::new(log.geometry())"
    )]
    Buffer {
        /// Buffer length.
        len: usize,
        /// Slot length.
        need: usize,
    },
    /// The slot holds no valid entry: its header or payload failed a check.
    #[error("entry {seq} from writer {writer}: {source}")]
    Entry {
        /// The seq that was read.
        seq: u64,
        /// The log's writer.
        writer: u8,
        /// What is wrong.
        source: EntryError,
    },
    /// The slot holds a valid entry of another seq: an old one not yet overwritten (the
    /// writer has not written `expected` yet), or one replayed out of place.
    #[error("slot for seq {expected} holds entry seq {found} (stale or replayed); the writer has not written seq {expected} there")]
    WrongSeq {
        /// The seq that was read.
        expected: u64,
        /// The seq in the slot.
        found: u64,
    },
    /// The entry names another writer or holder than this log's.
    #[error("entry {seq} says writer {writer} -> holder {holder}, but this log is writer {expected_writer} -> holder {expected_holder}; the writer is misconfigured or hostile")]
    WrongNode {
        /// The seq that was read.
        seq: u64,
        /// Writer in the entry.
        writer: u8,
        /// Holder in the entry.
        holder: u8,
        /// This log's writer.
        expected_writer: u8,
        /// This log's holder.
        expected_holder: u8,
    },
    /// The entry is not of the kind the caller asked it as.
    #[error("entry {seq} is a {found:?} entry, not a {wanted:?} entry")]
    Kind {
        /// The entry's seq.
        seq: u64,
        /// Its kind.
        found: EntryKind,
        /// The kind asked for.
        wanted: EntryKind,
    },
    /// A Fragment entry's fragment header is invalid or disagrees with the entry.
    #[error("entry {seq} carries a bad fragment: {source}; the writer is broken or hostile")]
    Fragment {
        /// The entry's seq.
        seq: u64,
        /// What is wrong.
        source: StripeError,
    },
    /// A holder reports more entries applied than the writer sent, or fewer than the
    /// writer's window allows: its log or its reports are broken.
    #[error("holder reports applied seq {applied}, but the writer's next seq is {next_seq} with a {slots}-slot window; the holder's log is broken or was replaced: fence the holder")]
    Credits {
        /// The writer's next seq.
        next_seq: u64,
        /// What the holder reports applied.
        applied: u64,
        /// Slots of the log.
        slots: u32,
    },
}

/// A buffer as large as one slot, private to the holder: entries are copied here before
/// they are checked. Allocated once, at start-up.
pub struct EntryBuf {
    bytes: Box<[u8]>,
}

impl EntryBuf {
    /// A buffer for the slots of logs of `geometry`.
    pub fn new(geometry: LogGeometry) -> Self {
        Self { bytes: vec![0u8; geometry.slot_bytes as usize].into_boxed_slice() }
    }
}

/// A valid entry, checked in the holder's private buffer.
#[derive(Clone, Copy, Debug)]
pub struct EntryRef<'b> {
    repr: EntryRepr,
    payload: &'b [u8],
}

/// A checked fragment: its header (already checked with `stripe::header`) and bytes.
#[derive(Clone, Copy, Debug)]
pub struct FragmentRef<'b> {
    /// The 40-byte fragment header.
    pub header: FragmentHeader<&'b [u8]>,
    /// The fragment bytes (`header.fragment_len()` of them).
    pub payload: &'b [u8],
}

impl<'b> EntryRef<'b> {
    /// The entry's header fields.
    pub fn repr(&self) -> &EntryRepr {
        &self.repr
    }

    /// The entry's seq.
    pub fn seq(&self) -> u64 {
        self.repr.seq
    }

    /// The payload, checked against its checksum.
    pub fn payload(&self) -> &'b [u8] {
        self.payload
    }

    /// The fragment of a Fragment entry: its header checked with `stripe::header`, its
    /// length agreeing with the entry's payload length and its key hash with the entry's.
    /// The fragment's own payload checksum is left to the reader that decodes it (the entry
    /// checksum already covers the bytes in transit).
    pub fn fragment(&self) -> Result<FragmentRef<'b>, LogError> {
        let seq = self.repr.seq;
        if self.repr.kind != EntryKind::Fragment {
            return Err(LogError::Kind { seq, found: self.repr.kind, wanted: EntryKind::Fragment });
        }
        let (head, payload) = self.payload.split_at(FRAGMENT_HEADER_LEN);
        let header = FragmentHeader::new_checked(head).map_err(|source| LogError::Fragment { seq, source })?;
        let mismatch =
            |field, value: u64, reason| LogError::Fragment { seq, source: StripeError::Field { field, value, reason } };
        if header.fragment_len() != payload.len() {
            return Err(mismatch(
                "fragment_len",
                header.fragment_len() as u64,
                "does not match the entry's payload_len",
            ));
        }
        if header.key_hash() != self.repr.key_hash {
            return Err(mismatch("key_hash", header.key_hash(), "does not match the entry's key_hash"));
        }
        Ok(FragmentRef { header, payload })
    }

    /// The outcome records of an Outcomes entry, each checked.
    pub fn outcomes(&self) -> Result<impl Iterator<Item = Result<OutcomeRecordRepr, EntryError>> + 'b, LogError> {
        if self.repr.kind != EntryKind::Outcomes {
            return Err(LogError::Kind { seq: self.repr.seq, found: self.repr.kind, wanted: EntryKind::Outcomes });
        }
        Ok(outcome_records(self.payload))
    }
}

/// What [`FragmentLog::replay`] did.
#[derive(Debug)]
pub struct Replay {
    /// Entries applied.
    pub entries: u64,
    /// The first seq not applied: `applied_seq` afterwards.
    pub next_seq: u64,
    /// Why the walk stopped at `next_seq` (a stale entry, an empty or torn slot); `None`
    /// when it stopped after a whole lap of the log.
    pub stop: Option<LogError>,
}

/// One writer's fragment log on its holder.
pub struct FragmentLog {
    path: PathBuf,
    identity: LogIdentity,
    geometry: LogGeometry,
    /// The header page: `applied_seq` lives here, out of the writer's reach.
    header: Memory,
    /// The slots: the memory the writer writes into.
    slots: Arc<Memory>,
}

impl fmt::Debug for FragmentLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FragmentLog").field("path", &self.path).field("identity", &self.identity).finish()
    }
}

impl FragmentLog {
    /// Opens the log at `path` that `writer` fills for `holder`, or creates it (sparse) if
    /// there is none. An existing file must be a log for exactly this writer, holder and
    /// geometry; it is never reset.
    pub fn open(path: &Path, writer: u8, holder: u8, slots: u32, payload_max: u32) -> Result<Self, LogError> {
        let geometry = LogGeometry::new(slots, payload_max)?;
        let expected = LogIdentity { writer, holder, slots, slot_bytes: geometry.slot_bytes };
        let mut page = vec![0u8; HEADER_PAGE_BYTES];
        FileHeader { ids: [writer, holder], params: [slots, geometry.slot_bytes] }.emit(MAGIC, &mut page);
        let io = |e: file::FileIoError| LogError::Io { action: e.action, path: path.to_owned(), source: e.source };
        let file = match file::open_or_create(path, &page, geometry.file_bytes()).map_err(io)? {
            Opened::Created(file) => file,
            Opened::Existing { file, page, len } => {
                let found = FileHeader::<2>::parse(MAGIC, &page)
                    .map_err(|source| LogError::NotALog { path: path.to_owned(), source })?;
                let found = LogIdentity {
                    writer: found.ids[0],
                    holder: found.ids[1],
                    slots: found.params[0],
                    slot_bytes: found.params[1],
                };
                if found != expected {
                    return Err(LogError::Mismatch { path: path.to_owned(), found, expected });
                }
                if len != geometry.file_bytes() {
                    return Err(LogError::Length { path: path.to_owned(), len, expected: geometry.file_bytes() });
                }
                file
            }
        };
        let memory = |source| LogError::Memory { path: path.to_owned(), source };
        let header = Memory::map_file(&file, 0, HEADER_PAGE_BYTES).map_err(memory)?;
        let body = Memory::map_file(&file, HEADER_PAGE_BYTES as u64, geometry.body_bytes() as usize).map_err(memory)?;
        Ok(Self { path: path.to_owned(), identity: expected, geometry, header, slots: Arc::new(body) })
    }

    /// The slots, to register with the fabric for REMOTE_WRITE by the writer. Offsets into
    /// it are [`Self::slot_offset`]; the header page is not part of it.
    pub fn memory(&self) -> &Arc<Memory> {
        &self.slots
    }

    /// The log's shape.
    pub fn geometry(&self) -> LogGeometry {
        self.geometry
    }

    /// The log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The writer that fills this log.
    pub fn writer(&self) -> u8 {
        self.identity.writer
    }

    /// The holder that reads it.
    pub fn holder(&self) -> u8 {
        self.identity.holder
    }

    /// Offset in [`Self::memory`] of the slot of `seq`: where the writer puts the entry
    /// header.
    pub fn slot_offset(&self, seq: u64) -> usize {
        slot_offset(self.geometry, seq)
    }

    /// Offset in [`Self::memory`] where the writer puts the payload of entry `seq`, right
    /// after its header.
    pub fn payload_offset(&self, seq: u64) -> usize {
        self.slot_offset(seq) + HEADER_LEN
    }

    /// Copies the slot of `seq` into `buf`, then checks it: a valid header for this log's
    /// slot capacity, with exactly this seq, writer and holder, and a payload that matches
    /// its checksum. The entry returned lies in `buf`: the writer can change the slot now
    /// without changing what was checked.
    pub fn read_entry<'b>(&self, seq: u64, buf: &'b mut EntryBuf) -> Result<EntryRef<'b>, LogError> {
        let need = self.geometry.slot_bytes as usize;
        if buf.bytes.len() < need {
            return Err(LogError::Buffer { len: buf.bytes.len(), need });
        }
        let writer = self.identity.writer;
        let entry_err = |source| LogError::Entry { seq, writer, source };
        let offset = self.slot_offset(seq);
        let (head, rest) = buf.bytes.split_at_mut(HEADER_LEN);
        self.read_slot(offset, head)?;
        let header = EntryHeader::new_checked(&*head, self.geometry.payload_capacity()).map_err(entry_err)?;
        if header.seq() != seq {
            return Err(LogError::WrongSeq { expected: seq, found: header.seq() });
        }
        if header.writer() != writer || header.holder() != self.identity.holder {
            return Err(LogError::WrongNode {
                seq,
                writer: header.writer(),
                holder: header.holder(),
                expected_writer: writer,
                expected_holder: self.identity.holder,
            });
        }
        let repr = EntryRepr::parse(&header, self.geometry.payload_capacity()).map_err(entry_err)?;
        let payload = &mut rest[..repr.payload_len as usize];
        self.read_slot(offset + HEADER_LEN, payload)?;
        header.verify_payload(payload).map_err(entry_err)?;
        Ok(EntryRef { repr, payload })
    }

    fn read_slot(&self, offset: usize, dst: &mut [u8]) -> Result<(), LogError> {
        self.slots.read(offset, dst).map_err(|source| LogError::Memory { path: self.path.clone(), source })
    }

    /// Every seq below this is applied and its credit returned.
    pub fn applied_seq(&self) -> u64 {
        self.header.load_u64(field::APPLIED_SEQ.start).expect("the header page holds the aligned word")
    }

    /// Records that `seq` (and, by the log's order, everything before it) is applied:
    /// `applied_seq` becomes `seq + 1` unless it is already higher. Never moves back.
    pub fn mark_applied(&self, seq: u64) {
        let new = seq.saturating_add(1);
        let at = field::APPLIED_SEQ.start;
        let mut current = self.applied_seq();
        // Each failed swap means another thread raised the word; stop once it is >= new.
        while current < new {
            let seen = self.header.compare_swap(at, current, new).expect("the header page holds the aligned word");
            if seen == current {
                break;
            }
            current = seen;
        }
    }

    /// After a restart: applies, through `apply`, the entries written before the crash but
    /// not yet applied. Walks seq from `applied_seq` upward while the slot holds a valid
    /// entry with exactly that seq, marking each applied once `apply` returns `Ok`; stops
    /// at the first slot that does not (reported in [`Replay::stop`]), after `slots`
    /// entries, or at the first error of `apply`, which it returns.
    pub fn replay<E>(
        &self,
        buf: &mut EntryBuf,
        mut apply: impl FnMut(EntryRef<'_>) -> Result<(), E>,
    ) -> Result<Replay, E> {
        let start = self.applied_seq();
        for i in 0..u64::from(self.geometry.slots) {
            let seq = start + i;
            match self.read_entry(seq, buf) {
                Ok(entry) => {
                    apply(entry)?;
                    self.mark_applied(seq);
                }
                Err(stop) => return Ok(Replay { entries: i, next_seq: seq, stop: Some(stop) }),
            }
        }
        let entries = u64::from(self.geometry.slots);
        Ok(Replay { entries, next_seq: start + entries, stop: None })
    }
}

fn slot_offset(geometry: LogGeometry, seq: u64) -> usize {
    // Below slots * slot_bytes, which fits the mapping.
    (seq % u64::from(geometry.slots)) as usize * geometry.slot_bytes as usize
}

/// Writer side: how many more entries the writer may send to a holder whose log has `slots`
/// slots, when its next seq is `next_seq` and the holder reports `applied_seq` applied.
/// A holder reporting more applied than was sent, or fewer than the writer's window allows
/// (its log went back), is an error: fence it.
pub fn credits(next_seq: u64, applied_seq: u64, slots: u32) -> Result<u64, LogError> {
    let err = || LogError::Credits { next_seq, applied: applied_seq, slots };
    let in_flight = next_seq.checked_sub(applied_seq).ok_or_else(err)?;
    u64::from(slots).checked_sub(in_flight).ok_or_else(err)
}

#[cfg(test)]
mod tests {
    use super::super::entry::{payload_crc, EntryKind, Outcome, OutcomeRecordRepr};
    use super::super::file::testing::TempDir;
    use super::*;
    use crate::stripe::{HeaderRepr, StripeLayout};
    use proptest::prelude::*;

    const WRITER: u8 = 3;
    const HOLDER: u8 = 1;

    fn open(dir: &TempDir, slots: u32, payload_max: u32) -> FragmentLog {
        FragmentLog::open(&dir.file("log"), WRITER, HOLDER, slots, payload_max).unwrap()
    }

    /// A valid Fragment payload: a fragment header for `key_hash` and `fragment_len` bytes.
    fn fragment_payload(key_hash: u64, fill: u8) -> Vec<u8> {
        let layout = StripeLayout::new(2, 1, 200).unwrap();
        let fragment = vec![fill; layout.fragment_len()];
        let mut payload = vec![0u8; FRAGMENT_HEADER_LEN];
        HeaderRepr { layout, index: 1, key_hash, version: 42, payload_crc: crc32c::crc32c(&fragment) }
            .emit(&mut payload);
        payload.extend_from_slice(&fragment);
        payload
    }

    fn repr(seq: u64, payload: &[u8]) -> EntryRepr {
        EntryRepr {
            kind: EntryKind::Fragment,
            writer: WRITER,
            holder: HOLDER,
            seq,
            write_seq: seq + 100,
            key_hash: 0xabcd,
            stamp: (seq << 8) | u64::from(WRITER),
            payload_len: payload.len() as u32,
            tombstone: false,
            repair: false,
            payload_crc: payload_crc(&[payload]),
            incarnation: 1,
        }
    }

    /// What a writer does: the header and the payload into the slot of `r.seq`.
    fn write(log: &FragmentLog, r: &EntryRepr, payload: &[u8]) {
        let mut head = [0u8; HEADER_LEN];
        r.emit_into(&mut head);
        log.memory().write(log.slot_offset(r.seq), &head).unwrap();
        log.memory().write(log.payload_offset(r.seq), payload).unwrap();
    }

    fn write_fragment(log: &FragmentLog, seq: u64) -> Vec<u8> {
        let payload = fragment_payload(0xabcd, seq as u8);
        write(log, &repr(seq, &payload), &payload);
        payload
    }

    #[test]
    fn geometry_rounds_slots_to_lines_and_checks_limits() {
        let g = LogGeometry::new(64, 4096).unwrap();
        assert_eq!((g.slots(), g.slot_bytes(), g.payload_capacity()), (64, 4160, 4096));
        assert_eq!(g.file_bytes(), 4096 + 64 * 4160);
        assert_eq!(LogGeometry::new(1, 1).unwrap().slot_bytes(), 128);
        assert_eq!(LogGeometry::new(1, 0).unwrap().payload_capacity(), 0);
        assert!(matches!(LogGeometry::new(0, 64), Err(LogError::Geometry { field: "slots", .. })));
        assert!(matches!(LogGeometry::new(LOG_SLOTS_MAX + 1, 64), Err(LogError::Geometry { field: "slots", .. })));
        let err = LogGeometry::new(1, LOG_PAYLOAD_BYTES_MAX + 1).unwrap_err();
        assert!(matches!(err, LogError::Geometry { field: "payload_max", .. }));
        assert!(LogGeometry::new(LOG_SLOTS_MAX, LOG_PAYLOAD_BYTES_MAX).is_err(), "256 GiB is past the file limit");
    }

    /// The exact first 72 bytes of the header page of a log for writer 3, holder 1, 64
    /// slots of 4160 bytes, after seq 0..=4 were applied.
    #[test]
    fn header_page_has_the_golden_bytes() {
        let dir = TempDir::new("log-golden");
        let log = open(&dir, 64, 4096);
        log.mark_applied(4);
        drop(log);
        let bytes = std::fs::read(dir.file("log")).unwrap();
        let mut golden = [0u8; 72];
        golden[..24].copy_from_slice(&[
            b'P', b'R', b'S', b'C', b'L', b'O', b'G', 0, // magic
            1, 0, 0, 0, // format
            3, 1, 0, 0, // writer, holder, zero
            64, 0, 0, 0, // slots
            0x40, 0x10, 0, 0, // slot_bytes 4160
        ]);
        let crc = crc32c::crc32c(&golden[..24]);
        golden[24..28].copy_from_slice(&crc.to_le_bytes());
        golden[64] = 5; // applied_seq
        assert_eq!(bytes[..72], golden);
        assert_eq!(bytes.len(), 4096 + 64 * 4160);
    }

    #[test]
    fn reads_back_what_the_writer_wrote() {
        let dir = TempDir::new("log-read");
        let log = open(&dir, 8, 1024);
        let mut buf = EntryBuf::new(log.geometry());
        for seq in [0, 1, 7, 8, 9 + 8 * 1000] {
            let payload = write_fragment(&log, seq);
            let entry = log.read_entry(seq, &mut buf).unwrap();
            assert_eq!(entry.seq(), seq);
            assert_eq!(*entry.repr(), repr(seq, &payload));
            assert_eq!(entry.payload(), &payload[..]);
            let fragment = entry.fragment().unwrap();
            assert_eq!(fragment.header.index(), 1);
            assert_eq!(fragment.payload, &payload[FRAGMENT_HEADER_LEN..]);
            assert!(matches!(entry.outcomes(), Err(LogError::Kind { wanted: EntryKind::Outcomes, .. })));
        }
        assert_eq!(log.slot_offset(9), log.slot_offset(1));
        assert_eq!(log.payload_offset(3), 3 * 1088 + 64);
    }

    #[test]
    fn outcomes_entries_read_back_as_records() {
        let dir = TempDir::new("log-outcomes");
        let log = open(&dir, 4, 256);
        let records = [
            OutcomeRecordRepr { write_seq: 5, key_hash: 1, stamp: 0x503, outcome: Outcome::Committed },
            OutcomeRecordRepr { write_seq: 6, key_hash: 2, stamp: 0x603, outcome: Outcome::Aborted },
        ];
        let mut payload = vec![0u8; 64];
        records[0].emit(&mut payload[..32]);
        records[1].emit(&mut payload[32..]);
        let r = EntryRepr { kind: EntryKind::Outcomes, write_seq: 0, key_hash: 0, stamp: 0, ..repr(2, &payload) };
        write(&log, &r, &payload);
        let mut buf = EntryBuf::new(log.geometry());
        let entry = log.read_entry(2, &mut buf).unwrap();
        let read: Vec<_> = entry.outcomes().unwrap().collect::<Result<_, _>>().unwrap();
        assert_eq!(read, records);
        assert!(matches!(entry.fragment(), Err(LogError::Kind { wanted: EntryKind::Fragment, .. })));
    }

    #[test]
    fn bad_entries_give_distinct_errors() {
        let dir = TempDir::new("log-bad");
        let log = open(&dir, 4, 1024);
        let mut buf = EntryBuf::new(log.geometry());
        // Never written: the sparse file reads as zeros.
        let err = log.read_entry(0, &mut buf).unwrap_err();
        assert!(matches!(err, LogError::Entry { seq: 0, source: EntryError::Magic { .. }, .. }), "{err}");
        // A stale entry from the previous lap.
        write_fragment(&log, 1);
        assert!(matches!(log.read_entry(5, &mut buf), Err(LogError::WrongSeq { expected: 5, found: 1 })));
        // An entry for another holder, and one from another writer.
        let payload = fragment_payload(0xabcd, 0);
        write(&log, &EntryRepr { holder: 2, ..repr(2, &payload) }, &payload);
        assert!(matches!(log.read_entry(2, &mut buf), Err(LogError::WrongNode { holder: 2, expected_holder: 1, .. })));
        write(&log, &EntryRepr { writer: 4, ..repr(2, &payload) }, &payload);
        assert!(matches!(log.read_entry(2, &mut buf), Err(LogError::WrongNode { writer: 4, expected_writer: 3, .. })));
        // A torn header and a torn payload.
        write_fragment(&log, 3);
        log.memory().write(log.slot_offset(3) + 20, &[0xee]).unwrap();
        let err = log.read_entry(3, &mut buf).unwrap_err();
        assert!(matches!(err, LogError::Entry { source: EntryError::HeaderChecksum { .. }, .. }), "{err}");
        write_fragment(&log, 3);
        log.memory().write(log.payload_offset(3) + 100, &[0xee]).unwrap();
        let err = log.read_entry(3, &mut buf).unwrap_err();
        assert!(matches!(err, LogError::Entry { source: EntryError::PayloadChecksum { .. }, .. }), "{err}");
        // A payload longer than the slot.
        let r = EntryRepr { payload_len: 1025, ..repr(3, &payload) };
        write(&log, &r, &payload);
        let err = log.read_entry(3, &mut buf).unwrap_err();
        assert!(matches!(err, LogError::Entry { source: EntryError::PayloadLength { len: 1025, .. }, .. }), "{err}");
        // A buffer made for another geometry.
        let mut small = EntryBuf::new(LogGeometry::new(4, 64).unwrap());
        assert!(matches!(log.read_entry(1, &mut small), Err(LogError::Buffer { len: 128, need: 1088 })));
    }

    #[test]
    fn bad_fragments_in_valid_entries_are_refused() {
        let dir = TempDir::new("log-bad-fragment");
        let log = open(&dir, 4, 1024);
        let mut buf = EntryBuf::new(log.geometry());
        let mut payload = fragment_payload(0xabcd, 1);
        payload[0] = b'X';
        write(&log, &repr(0, &payload), &payload);
        let err = log.read_entry(0, &mut buf).unwrap().fragment().unwrap_err();
        assert!(matches!(err, LogError::Fragment { source: StripeError::Magic { .. }, .. }), "{err}");
        let payload = fragment_payload(0xabcd, 1);
        write(&log, &EntryRepr { key_hash: 0x9999, ..repr(1, &payload) }, &payload);
        let err = log.read_entry(1, &mut buf).unwrap().fragment().unwrap_err();
        assert!(matches!(err, LogError::Fragment { source: StripeError::Field { field: "key_hash", .. }, .. }));
        let short = &payload[..payload.len() - 64];
        write(&log, &repr(2, short), short);
        let err = log.read_entry(2, &mut buf).unwrap().fragment().unwrap_err();
        assert!(matches!(err, LogError::Fragment { source: StripeError::Field { field: "fragment_len", .. }, .. }));
    }

    #[test]
    fn the_checked_entry_is_the_private_copy() {
        let dir = TempDir::new("log-private");
        let log = open(&dir, 4, 1024);
        let mut buf = EntryBuf::new(log.geometry());
        let payload = write_fragment(&log, 0);
        let entry = log.read_entry(0, &mut buf).unwrap();
        // The writer rewrites the slot after the check: what was checked does not change.
        log.memory().write(0, &[0u8; 1088]).unwrap();
        assert_eq!(entry.payload(), &payload[..]);
        assert_eq!(entry.repr().seq, 0);
    }

    #[test]
    fn applied_seq_only_moves_forward_and_survives_reopening() {
        let dir = TempDir::new("log-applied");
        let log = open(&dir, 4, 64);
        assert_eq!(log.applied_seq(), 0);
        log.mark_applied(0);
        assert_eq!(log.applied_seq(), 1);
        log.mark_applied(9);
        log.mark_applied(3);
        assert_eq!(log.applied_seq(), 10);
        log.mark_applied(u64::MAX);
        assert_eq!(log.applied_seq(), u64::MAX);
        drop(log);
        let log = open(&dir, 4, 64);
        assert_eq!(log.applied_seq(), u64::MAX);
        // The slots a writer reaches do not cover the header page.
        assert_eq!(log.memory().len(), 4 * 128);
    }

    #[test]
    fn reopening_validates_and_never_resets() {
        let dir = TempDir::new("log-reopen");
        let path = dir.file("log");
        let log = open(&dir, 64, 4096);
        write_fragment(&log, 5);
        log.mark_applied(2);
        drop(log);
        let before = std::fs::read(&path).unwrap();

        let err = FragmentLog::open(&path, 2, HOLDER, 64, 4096).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, LogError::Mismatch { .. }));
        assert!(text.contains("was made for writer 3 / holder 1 / 64 slots"), "{text}");
        assert!(text.contains("remove it or fix the cluster config") && text.contains(&path.display().to_string()));
        assert!(matches!(FragmentLog::open(&path, WRITER, 2, 64, 4096), Err(LogError::Mismatch { .. })));
        assert!(matches!(FragmentLog::open(&path, WRITER, HOLDER, 32, 4096), Err(LogError::Mismatch { .. })));
        assert!(matches!(FragmentLog::open(&path, WRITER, HOLDER, 64, 8192), Err(LogError::Mismatch { .. })));
        // A payload_max that rounds to the same slot is the same geometry.
        assert!(FragmentLog::open(&path, WRITER, HOLDER, 64, 4090).is_ok());
        assert_eq!(std::fs::read(&path).unwrap(), before, "failed opens leave the file alone");

        let log = open(&dir, 64, 4096);
        assert_eq!(log.applied_seq(), 3);
        let mut buf = EntryBuf::new(log.geometry());
        assert!(log.read_entry(5, &mut buf).is_ok(), "entries survive reopening");
        drop(log);

        // A damaged header page, another kind of file, a truncated file.
        let mut damaged = before.clone();
        damaged[16] ^= 1;
        std::fs::write(&path, &damaged).unwrap();
        let err = FragmentLog::open(&path, WRITER, HOLDER, 64, 4096).unwrap_err();
        assert!(matches!(err, LogError::NotALog { source: HeaderError::Checksum { .. }, .. }), "{err}");
        std::fs::write(&path, b"PRSCSTOR not a log").unwrap();
        let err = FragmentLog::open(&path, WRITER, HOLDER, 64, 4096).unwrap_err();
        assert!(matches!(err, LogError::NotALog { source: HeaderError::Truncated { .. }, .. }), "{err}");
        std::fs::write(&path, &before[..4096 + 100]).unwrap();
        let err = FragmentLog::open(&path, WRITER, HOLDER, 64, 4096).unwrap_err();
        assert!(matches!(err, LogError::Length { len: 4196, .. }), "{err}");
        assert_eq!(std::fs::read(&path).unwrap().len(), 4196, "never resized");
    }

    #[test]
    fn replay_applies_what_was_written_but_not_applied() {
        let dir = TempDir::new("log-replay");
        let log = open(&dir, 4, 1024);
        for seq in 0..6 {
            write_fragment(&log, seq);
        }
        // 0 and 1 were applied before the crash; 2..6 were written (4 and 5 over 0 and 1).
        log.mark_applied(1);
        drop(log);
        let log = open(&dir, 4, 1024);
        let mut buf = EntryBuf::new(log.geometry());
        let mut seen = Vec::new();
        let replay = log
            .replay(&mut buf, |e| {
                seen.push(e.seq());
                Ok::<_, LogError>(())
            })
            .unwrap();
        assert_eq!(seen, [2, 3, 4, 5]);
        assert_eq!((replay.entries, replay.next_seq), (4, 6));
        assert!(replay.stop.is_none(), "a whole lap of the log");
        assert_eq!(log.applied_seq(), 6);

        // Nothing new: the slot of 6 holds seq 2, a stale entry.
        let replay = log.replay(&mut buf, |_| Ok::<_, LogError>(())).unwrap();
        assert_eq!((replay.entries, replay.next_seq), (0, 6));
        assert!(matches!(replay.stop, Some(LogError::WrongSeq { expected: 6, found: 2 })));

        // A torn entry stops the walk; an error of the applier stops it without marking.
        write_fragment(&log, 6);
        write_fragment(&log, 7);
        log.memory().write(log.payload_offset(7), &[0x55]).unwrap();
        let replay = log.replay(&mut buf, |_| Ok::<_, LogError>(())).unwrap();
        assert_eq!((replay.entries, replay.next_seq), (1, 7));
        assert!(matches!(replay.stop, Some(LogError::Entry { source: EntryError::PayloadChecksum { .. }, .. })));
        write_fragment(&log, 7);
        let err = log.replay(&mut buf, |e| Err(e.seq())).unwrap_err();
        assert_eq!(err, 7);
        assert_eq!(log.applied_seq(), 7);
    }

    #[test]
    fn credits_follow_the_holder_and_refuse_impossible_reports() {
        assert_eq!(credits(0, 0, 64).unwrap(), 64);
        assert_eq!(credits(10, 0, 64).unwrap(), 54);
        assert_eq!(credits(74, 10, 64).unwrap(), 0);
        assert_eq!(credits(100, 100, 64).unwrap(), 64);
        assert!(matches!(credits(10, 11, 64), Err(LogError::Credits { next_seq: 10, applied: 11, slots: 64 })));
        assert!(matches!(credits(75, 10, 64), Err(LogError::Credits { .. })));
    }

    proptest! {
        /// A hostile writer fills a slot with anything: reading it never panics, and a
        /// header that passes describes a payload inside the slot.
        #[test]
        fn read_entry_never_panics_on_hostile_slots(
            bytes in proptest::collection::vec(any::<u8>(), 0..1088),
            valid_head in any::<bool>(),
            payload_len in 0u32..2000,
        ) {
            let dir = TempDir::new("log-hostile");
            let log = open(&dir, 2, 1024);
            log.memory().write(log.slot_offset(1), &bytes).unwrap();
            if valid_head {
                let r = EntryRepr { payload_len, payload_crc: 0, ..repr(1, &[]) };
                let mut head = [0u8; HEADER_LEN];
                r.emit_into(&mut head);
                log.memory().write(log.slot_offset(1), &head).unwrap();
            }
            let mut buf = EntryBuf::new(log.geometry());
            if let Ok(entry) = log.read_entry(1, &mut buf) {
                prop_assert!(entry.payload().len() <= 1024);
                let _ = entry.fragment();
                if let Ok(records) = entry.outcomes() {
                    for _ in records {}
                }
            }
        }
    }
}
