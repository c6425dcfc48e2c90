//! The fragment log entry: a checked view over the 64-byte header at the start of every
//! log slot, and the 32-byte outcome records an Outcomes entry carries.
//!
//! A writer fills a slot of a holder's log with one RDMA WRITE: this header, then the
//! payload. The holder trusts nothing of it: [`EntryHeader::new_checked`] checks every field
//! before any length is used, and [`EntryHeader::verify_payload`] the payload checksum.
//! All integers are little-endian.
//!
//! ```text
//!  0..4   magic "PRLE"     4 format (1)     5 kind (1 Fragment, 2 Outcomes)
//!  6      writer node      7 holder node
//!  8..16  seq: position in this writer -> holder log (slot = seq % slots)
//! 16..24  write_seq: the writer's own write number (0 for Outcomes)
//! 24..32  key_hash         32..40 stamp (the write's version << 8 | writer)
//! 40..44  payload_len      44..48 flags (bit 0 tombstone, bit 1 repair)
//! 48..52  payload CRC32C   52..56 writer incarnation
//! 56..60  reserved (0)     60..64 header CRC32C of bytes 0..60
//! ```
//!
//! A Fragment payload is the 40-byte fragment header (`stripe::header`) and the fragment
//! bytes. An Outcomes payload is 1 to [`OUTCOMES_PER_ENTRY_MAX`] outcome records, and its
//! header has write_seq, key_hash, stamp and flags all zero:
//!
//! ```text
//!  0..8 write_seq   8..16 key_hash   16..24 stamp   24 outcome (1 Committed, 2 Aborted)
//! 25..32 zero
//! ```
#![forbid(unsafe_code)]

use super::file::{le32, le64};
use crate::limits::{ENTRY_HEADER_BYTES, OUTCOMES_PER_ENTRY_MAX, OUTCOME_RECORD_BYTES};
use crate::stripe::HEADER_LEN as FRAGMENT_HEADER_LEN;

/// Bytes of an entry header.
pub const HEADER_LEN: usize = ENTRY_HEADER_BYTES;
/// Magic number, the bytes "PRLE" read as a little-endian u32.
pub const MAGIC: u32 = u32::from_le_bytes(*b"PRLE");
/// Entry format this build writes and reads.
pub const FORMAT: u8 = 1;
/// Flag: the write deletes the key.
pub const FLAG_TOMBSTONE: u32 = 1 << 0;
/// Flag: the fragment was rebuilt by a repair, not sent by the write itself.
pub const FLAG_REPAIR: u32 = 1 << 1;
const FLAGS_KNOWN: u32 = FLAG_TOMBSTONE | FLAG_REPAIR;

/// Byte ranges of the entry header fields.
pub mod field {
    use std::ops::Range;
    /// Magic number.
    pub const MAGIC: Range<usize> = 0..4;
    /// Format version.
    pub const FORMAT: usize = 4;
    /// Kind of entry.
    pub const KIND: usize = 5;
    /// Writer node id.
    pub const WRITER: usize = 6;
    /// Holder node id.
    pub const HOLDER: usize = 7;
    /// Position in the writer -> holder log.
    pub const SEQ: Range<usize> = 8..16;
    /// The writer's write number.
    pub const WRITE_SEQ: Range<usize> = 16..24;
    /// Hash of the key.
    pub const KEY_HASH: Range<usize> = 24..32;
    /// Stamp of the write.
    pub const STAMP: Range<usize> = 32..40;
    /// Payload length.
    pub const PAYLOAD_LEN: Range<usize> = 40..44;
    /// Flags.
    pub const FLAGS: Range<usize> = 44..48;
    /// CRC32C of the payload.
    pub const PAYLOAD_CRC: Range<usize> = 48..52;
    /// Writer incarnation.
    pub const INCARNATION: Range<usize> = 52..56;
    /// Reserved, zero.
    pub const RESERVED: Range<usize> = 56..60;
    /// CRC32C of bytes 0..60.
    pub const HEADER_CRC: Range<usize> = 60..64;
}

/// Byte ranges of an outcome record.
pub mod outcome_field {
    use std::ops::Range;
    /// The writer's write number.
    pub const WRITE_SEQ: Range<usize> = 0..8;
    /// Hash of the key.
    pub const KEY_HASH: Range<usize> = 8..16;
    /// Stamp of the write.
    pub const STAMP: Range<usize> = 16..24;
    /// The outcome.
    pub const OUTCOME: usize = 24;
    /// Zero.
    pub const PAD: Range<usize> = 25..32;
}

/// What an entry carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum EntryKind {
    /// One fragment of a write.
    Fragment = 1,
    /// Outcomes of earlier writes (phase 2 notices).
    Outcomes = 2,
}

impl EntryKind {
    /// The kind with wire value `v`.
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::Fragment),
            2 => Some(Self::Outcomes),
            _ => None,
        }
    }
}

/// How a write ended, as a writer announces it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Outcome {
    /// The write committed: its fragments hold the key's newest value.
    Committed = 1,
    /// The write was aborted: its fragments are garbage.
    Aborted = 2,
}

impl Outcome {
    /// The outcome with wire value `v`.
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::Committed),
            2 => Some(Self::Aborted),
            _ => None,
        }
    }
}

/// Why bytes are not a valid log entry. Entries come from another node: every variant is
/// that node's fault (or a slot it has not written yet), never a reason to panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EntryError {
    /// Fewer bytes than an entry header.
    #[error("log entry truncated: {len} bytes, a header is {need}")]
    Truncated {
        /// Bytes given.
        len: usize,
        /// Header length.
        need: usize,
    },
    /// The slot does not start with the entry magic: never written, or overwritten.
    #[error("no log entry here: magic {found:#010x}, expected {expected:#010x}; the writer has not filled this slot")]
    Magic {
        /// Magic found.
        found: u32,
        /// Magic expected.
        expected: u32,
    },
    /// An entry of a format this build does not read.
    #[error("log entry format {found} is not supported (this build reads format {supported}); run the same release on every node")]
    Format {
        /// Format found.
        found: u8,
        /// Format this build reads.
        supported: u8,
    },
    /// The header checksum does not match: a torn or damaged header.
    #[error("log entry header checksum mismatch (stored {stored:#010x}, computed {computed:#010x}): the slot is torn or damaged; the writer must send it again")]
    HeaderChecksum {
        /// Checksum in the header.
        stored: u32,
        /// Checksum of the bytes.
        computed: u32,
    },
    /// An unknown kind.
    #[error(
        "log entry kind {found} is unknown (1 Fragment, 2 Outcomes); the writer runs another release or is broken"
    )]
    Kind {
        /// Kind found.
        found: u8,
    },
    /// A field that must be zero, or a flag this build does not know, is set.
    #[error("log entry field {field} = {value:#x} is invalid: {reason}; the writer runs another release or is broken")]
    Field {
        /// Field name.
        field: &'static str,
        /// Its value.
        value: u64,
        /// Why it is invalid.
        reason: &'static str,
    },
    /// The payload length does not fit the slot or the kind.
    #[error("log entry payload_len {len} is invalid for a {kind:?} entry: {reason} (slot payload capacity {capacity}); the writer is broken or uses another log geometry")]
    PayloadLength {
        /// The entry's kind.
        kind: EntryKind,
        /// Its payload length.
        len: u32,
        /// Payload bytes a slot holds.
        capacity: usize,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// The payload does not match its checksum.
    #[error("log entry payload checksum mismatch (stored {stored:#010x}, computed {computed:#010x}): the payload is torn or damaged; the writer must send it again")]
    PayloadChecksum {
        /// Checksum in the header.
        stored: u32,
        /// Checksum of the payload.
        computed: u32,
    },
    /// An outcome record is malformed.
    #[error("outcome record {index}: {reason}; the writer runs another release or is broken")]
    OutcomeRecord {
        /// Index of the record in its entry.
        index: usize,
        /// What is wrong.
        reason: &'static str,
    },
}

/// A view of an entry header over `T`'s bytes.
#[derive(Clone, Copy, Debug)]
pub struct EntryHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EntryHeader<T> {
    /// A view without any check; accessors panic if `buffer` is shorter than
    /// [`HEADER_LEN`]. Use [`Self::new_checked`] for bytes from a peer.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// A view of bytes that came from anywhere, for a slot with `payload_capacity` payload
    /// bytes: checks what [`Self::check`] lists.
    pub fn new_checked(buffer: T, payload_capacity: usize) -> Result<Self, EntryError> {
        let header = Self::new_unchecked(buffer);
        header.check(payload_capacity)?;
        Ok(header)
    }

    /// Checks the length, magic, format and header checksum, then that the kind is known,
    /// the reserved bytes are zero, no unknown flag is set, and the payload length fits
    /// `payload_capacity` and the kind: a Fragment carries at least a fragment header; an
    /// Outcomes entry 1 to [`OUTCOMES_PER_ENTRY_MAX`] whole records and zero write_seq,
    /// key_hash, stamp and flags.
    pub fn check(&self, payload_capacity: usize) -> Result<(), EntryError> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(EntryError::Truncated { len: b.len(), need: HEADER_LEN });
        }
        if self.magic() != MAGIC {
            return Err(EntryError::Magic { found: self.magic(), expected: MAGIC });
        }
        if self.format() != FORMAT {
            return Err(EntryError::Format { found: self.format(), supported: FORMAT });
        }
        let computed = crc32c::crc32c(&b[..field::HEADER_CRC.start]);
        if computed != self.header_crc() {
            return Err(EntryError::HeaderChecksum { stored: self.header_crc(), computed });
        }
        let kind = self.kind().ok_or(EntryError::Kind { found: b[field::KIND] })?;
        let reserved = le32(&b[field::RESERVED]);
        if reserved != 0 {
            return Err(EntryError::Field { field: "reserved", value: reserved.into(), reason: "must be zero" });
        }
        if self.flags() & !FLAGS_KNOWN != 0 {
            return Err(EntryError::Field { field: "flags", value: self.flags().into(), reason: "unknown flag bits" });
        }
        let len = self.payload_len();
        let bad_len = |reason| EntryError::PayloadLength { kind, len, capacity: payload_capacity, reason };
        if len as usize > payload_capacity {
            return Err(bad_len("larger than the slot"));
        }
        match kind {
            EntryKind::Fragment => {
                if (len as usize) < FRAGMENT_HEADER_LEN {
                    return Err(bad_len("shorter than a fragment header"));
                }
            }
            EntryKind::Outcomes => {
                if len as usize % OUTCOME_RECORD_BYTES != 0 {
                    return Err(bad_len("not a whole number of 32-byte outcome records"));
                }
                let count = len as usize / OUTCOME_RECORD_BYTES;
                if count == 0 || count > OUTCOMES_PER_ENTRY_MAX {
                    return Err(bad_len("not 1 to OUTCOMES_PER_ENTRY_MAX records"));
                }
                for (name, value) in [
                    ("write_seq", self.write_seq()),
                    ("key_hash", self.key_hash()),
                    ("stamp", self.stamp()),
                    ("flags", self.flags().into()),
                ] {
                    if value != 0 {
                        return Err(EntryError::Field {
                            field: name,
                            value,
                            reason: "must be zero in an Outcomes entry",
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// Checks `payload` (exactly the payload bytes) against the header's checksum.
    pub fn verify_payload(&self, payload: &[u8]) -> Result<(), EntryError> {
        debug_assert_eq!(payload.len(), self.payload_len() as usize);
        let computed = crc32c::crc32c(payload);
        if computed != self.payload_crc() {
            return Err(EntryError::PayloadChecksum { stored: self.payload_crc(), computed });
        }
        Ok(())
    }

    /// Magic number.
    pub fn magic(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::MAGIC])
    }

    /// Format version.
    pub fn format(&self) -> u8 {
        self.buffer.as_ref()[field::FORMAT]
    }

    /// Kind, `None` if unknown.
    pub fn kind(&self) -> Option<EntryKind> {
        EntryKind::from_u8(self.buffer.as_ref()[field::KIND])
    }

    /// Writer node id.
    pub fn writer(&self) -> u8 {
        self.buffer.as_ref()[field::WRITER]
    }

    /// Holder node id.
    pub fn holder(&self) -> u8 {
        self.buffer.as_ref()[field::HOLDER]
    }

    /// Position in the writer -> holder log.
    pub fn seq(&self) -> u64 {
        le64(&self.buffer.as_ref()[field::SEQ])
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

    /// Payload length.
    pub fn payload_len(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::PAYLOAD_LEN])
    }

    /// Flags.
    pub fn flags(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::FLAGS])
    }

    /// Payload checksum.
    pub fn payload_crc(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::PAYLOAD_CRC])
    }

    /// Writer incarnation.
    pub fn incarnation(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::INCARNATION])
    }

    /// Header checksum.
    pub fn header_crc(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::HEADER_CRC])
    }
}

/// The decoded fields of an entry header, what [`EntryRepr::emit`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryRepr {
    /// What the entry carries.
    pub kind: EntryKind,
    /// Writer node id.
    pub writer: u8,
    /// Holder node id.
    pub holder: u8,
    /// Position in the writer -> holder log.
    pub seq: u64,
    /// The writer's write number (0 for Outcomes).
    pub write_seq: u64,
    /// Hash of the key (0 for Outcomes).
    pub key_hash: u64,
    /// Stamp of the write (0 for Outcomes).
    pub stamp: u64,
    /// Payload length.
    pub payload_len: u32,
    /// The write deletes the key.
    pub tombstone: bool,
    /// The fragment comes from a repair.
    pub repair: bool,
    /// CRC32C of the payload ([`payload_crc`]).
    pub payload_crc: u32,
    /// Writer incarnation.
    pub incarnation: u32,
}

impl EntryRepr {
    /// Reads a header, checking it for a slot with `payload_capacity` payload bytes.
    pub fn parse<T: AsRef<[u8]>>(header: &EntryHeader<T>, payload_capacity: usize) -> Result<Self, EntryError> {
        header.check(payload_capacity)?;
        Ok(Self {
            kind: header.kind().expect("checked"),
            writer: header.writer(),
            holder: header.holder(),
            seq: header.seq(),
            write_seq: header.write_seq(),
            key_hash: header.key_hash(),
            stamp: header.stamp(),
            payload_len: header.payload_len(),
            tombstone: header.flags() & FLAG_TOMBSTONE != 0,
            repair: header.flags() & FLAG_REPAIR != 0,
            payload_crc: header.payload_crc(),
            incarnation: header.incarnation(),
        })
    }

    /// Writes the header, checksum included, into the first [`HEADER_LEN`] bytes of
    /// `buffer`; panics (programmer error) if it is shorter.
    pub fn emit(&self, buffer: &mut [u8]) {
        let b: &mut [u8; HEADER_LEN] = (&mut buffer[..HEADER_LEN]).try_into().expect("HEADER_LEN bytes");
        self.emit_into(b);
    }

    /// Writes the header, checksum included, into `b`.
    pub fn emit_into(&self, b: &mut [u8; HEADER_LEN]) {
        let flags = if self.tombstone { FLAG_TOMBSTONE } else { 0 } | if self.repair { FLAG_REPAIR } else { 0 };
        b[field::MAGIC].copy_from_slice(&MAGIC.to_le_bytes());
        b[field::FORMAT] = FORMAT;
        b[field::KIND] = self.kind as u8;
        b[field::WRITER] = self.writer;
        b[field::HOLDER] = self.holder;
        b[field::SEQ].copy_from_slice(&self.seq.to_le_bytes());
        b[field::WRITE_SEQ].copy_from_slice(&self.write_seq.to_le_bytes());
        b[field::KEY_HASH].copy_from_slice(&self.key_hash.to_le_bytes());
        b[field::STAMP].copy_from_slice(&self.stamp.to_le_bytes());
        b[field::PAYLOAD_LEN].copy_from_slice(&self.payload_len.to_le_bytes());
        b[field::FLAGS].copy_from_slice(&flags.to_le_bytes());
        b[field::PAYLOAD_CRC].copy_from_slice(&self.payload_crc.to_le_bytes());
        b[field::INCARNATION].copy_from_slice(&self.incarnation.to_le_bytes());
        b[field::RESERVED].fill(0);
        let crc = crc32c::crc32c(&b[..field::HEADER_CRC.start]);
        b[field::HEADER_CRC].copy_from_slice(&crc.to_le_bytes());
    }
}

/// The payload checksum of a payload that lies in several buffers, in order (for a
/// Fragment: the fragment header, then the fragment bytes, which the writer keeps apart).
pub fn payload_crc(parts: &[&[u8]]) -> u32 {
    parts.iter().fold(0, |crc, part| crc32c::crc32c_append(crc, part))
}

/// A view of one outcome record over `T`'s bytes.
#[derive(Clone, Copy, Debug)]
pub struct OutcomeRecord<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> OutcomeRecord<T> {
    /// A view without any check; accessors panic if `buffer` is shorter than
    /// [`OUTCOME_RECORD_BYTES`]. Use [`Self::new_checked`] for bytes from a peer.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// A view of bytes that came from anywhere: checks the length, that the outcome is
    /// known and the padding zero. `index` (the record's place in its entry) only names it
    /// in errors.
    pub fn new_checked(buffer: T, index: usize) -> Result<Self, EntryError> {
        let b = buffer.as_ref();
        if b.len() < OUTCOME_RECORD_BYTES {
            return Err(EntryError::OutcomeRecord { index, reason: "shorter than 32 bytes" });
        }
        if Outcome::from_u8(b[outcome_field::OUTCOME]).is_none() {
            return Err(EntryError::OutcomeRecord {
                index,
                reason: "outcome is neither 1 (Committed) nor 2 (Aborted)",
            });
        }
        if b[outcome_field::PAD].iter().any(|&x| x != 0) {
            return Err(EntryError::OutcomeRecord { index, reason: "padding bytes 25..32 are not zero" });
        }
        Ok(Self { buffer })
    }

    /// The writer's write number.
    pub fn write_seq(&self) -> u64 {
        le64(&self.buffer.as_ref()[outcome_field::WRITE_SEQ])
    }

    /// Hash of the key.
    pub fn key_hash(&self) -> u64 {
        le64(&self.buffer.as_ref()[outcome_field::KEY_HASH])
    }

    /// Stamp of the write.
    pub fn stamp(&self) -> u64 {
        le64(&self.buffer.as_ref()[outcome_field::STAMP])
    }

    /// The outcome, `None` if unknown (only on an unchecked view).
    pub fn outcome(&self) -> Option<Outcome> {
        Outcome::from_u8(self.buffer.as_ref()[outcome_field::OUTCOME])
    }
}

/// The decoded fields of an outcome record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutcomeRecordRepr {
    /// The writer's write number.
    pub write_seq: u64,
    /// Hash of the key.
    pub key_hash: u64,
    /// Stamp of the write.
    pub stamp: u64,
    /// How the write ended.
    pub outcome: Outcome,
}

impl OutcomeRecordRepr {
    /// Reads a record; `index` names it in errors.
    pub fn parse<T: AsRef<[u8]>>(record: &OutcomeRecord<T>, index: usize) -> Result<Self, EntryError> {
        let outcome = record.outcome().ok_or(EntryError::OutcomeRecord { index, reason: "unknown outcome" })?;
        Ok(Self { write_seq: record.write_seq(), key_hash: record.key_hash(), stamp: record.stamp(), outcome })
    }

    /// Writes the record into the first [`OUTCOME_RECORD_BYTES`] of `buffer`; panics
    /// (programmer error) if it is shorter.
    pub fn emit(&self, buffer: &mut [u8]) {
        let b = &mut buffer[..OUTCOME_RECORD_BYTES];
        b[outcome_field::WRITE_SEQ].copy_from_slice(&self.write_seq.to_le_bytes());
        b[outcome_field::KEY_HASH].copy_from_slice(&self.key_hash.to_le_bytes());
        b[outcome_field::STAMP].copy_from_slice(&self.stamp.to_le_bytes());
        b[outcome_field::OUTCOME] = self.outcome as u8;
        b[outcome_field::PAD].fill(0);
    }
}

/// The records of an Outcomes payload, each checked; a trailing partial record is an error.
pub fn outcome_records(payload: &[u8]) -> impl Iterator<Item = Result<OutcomeRecordRepr, EntryError>> + '_ {
    payload.chunks(OUTCOME_RECORD_BYTES).enumerate().map(|(index, chunk)| {
        let record = OutcomeRecord::new_checked(chunk, index)?;
        OutcomeRecordRepr::parse(&record, index)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPACITY: usize = 4096;

    fn repr() -> EntryRepr {
        EntryRepr {
            kind: EntryKind::Fragment,
            writer: 3,
            holder: 1,
            seq: 0x0102,
            write_seq: 77,
            key_hash: 0x0123_4567_89ab_cdef,
            stamp: (42 << 8) | 3,
            payload_len: 40 + 256,
            tombstone: false,
            repair: true,
            payload_crc: 0xdead_beef,
            incarnation: 5,
        }
    }

    /// The exact bytes of one Fragment entry header before its checksum, fixed forever for
    /// format 1. The header checksum is CRC32C (Castagnoli) of these 60 bytes.
    const GOLDEN: [u8; 60] = [
        b'P', b'R', b'L', b'E', 1, 1, 3, 1, // magic, format, kind Fragment, writer, holder
        0x02, 0x01, 0, 0, 0, 0, 0, 0, // seq
        77, 0, 0, 0, 0, 0, 0, 0, // write_seq
        0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01, // key hash
        0x03, 42, 0, 0, 0, 0, 0, 0, // stamp 42 << 8 | 3
        0x28, 0x01, 0, 0, // payload_len 296
        0x02, 0, 0, 0, // flags: repair
        0xef, 0xbe, 0xad, 0xde, // payload crc
        5, 0, 0, 0, // incarnation
        0, 0, 0, 0, // reserved
    ];

    fn golden() -> [u8; HEADER_LEN] {
        let mut g = [0u8; HEADER_LEN];
        g[..60].copy_from_slice(&GOLDEN);
        let crc = crc32c::crc32c(&GOLDEN);
        g[60..].copy_from_slice(&crc.to_le_bytes());
        g
    }

    fn reseal(mut b: [u8; HEADER_LEN]) -> [u8; HEADER_LEN] {
        let crc = crc32c::crc32c(&b[..60]);
        b[60..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    #[test]
    fn emit_writes_the_golden_bytes() {
        let mut buf = [0xffu8; HEADER_LEN];
        repr().emit_into(&mut buf);
        assert_eq!(buf, golden());
        let mut long = [0u8; 100];
        repr().emit(&mut long);
        assert_eq!(long[..HEADER_LEN], golden());
    }

    #[test]
    fn parse_reads_the_golden_bytes() {
        let g = golden();
        let h = EntryHeader::new_checked(&g[..], CAPACITY).unwrap();
        assert_eq!(EntryRepr::parse(&h, CAPACITY).unwrap(), repr());
    }

    #[test]
    fn every_single_bit_flip_is_rejected() {
        let g = golden();
        for bit in 0..HEADER_LEN * 8 {
            let mut b = g;
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(EntryHeader::new_checked(&b[..], CAPACITY).is_err(), "bit {bit} flipped still parses");
        }
    }

    #[test]
    fn malformed_headers_give_the_matching_error() {
        let g = golden();
        let check = |b: &[u8]| EntryHeader::new_checked(b, CAPACITY).unwrap_err();
        assert_eq!(check(&g[..63]), EntryError::Truncated { len: 63, need: HEADER_LEN });
        let mut b = g;
        b[0] = b'X';
        assert!(matches!(check(&b), EntryError::Magic { .. }));
        let mut b = g;
        b[field::FORMAT] = 2;
        assert!(matches!(check(&b), EntryError::Format { found: 2, .. }));
        let mut b = g;
        b[field::SEQ.start] ^= 1;
        assert!(matches!(check(&b), EntryError::HeaderChecksum { .. }));
        // Fields that are wrong but carry a correct header checksum.
        let mut b = g;
        b[field::KIND] = 3;
        assert_eq!(check(&reseal(b)), EntryError::Kind { found: 3 });
        let mut b = g;
        b[field::RESERVED.start + 2] = 1;
        assert!(matches!(check(&reseal(b)), EntryError::Field { field: "reserved", .. }));
        let mut b = g;
        b[field::FLAGS.start] = 0x04;
        assert!(matches!(check(&reseal(b)), EntryError::Field { field: "flags", value: 4, .. }));
        let with_len = |kind: u8, len: u32| {
            let mut b = g;
            b[field::KIND] = kind;
            b[field::PAYLOAD_LEN].copy_from_slice(&len.to_le_bytes());
            reseal(b)
        };
        assert!(matches!(check(&with_len(1, CAPACITY as u32 + 1)), EntryError::PayloadLength { .. }));
        assert!(EntryHeader::new_checked(&with_len(1, CAPACITY as u32)[..], CAPACITY).is_ok());
        assert!(matches!(check(&with_len(1, 39)), EntryError::PayloadLength { kind: EntryKind::Fragment, .. }));
        assert!(EntryHeader::new_checked(&with_len(1, 40)[..], CAPACITY).is_ok(), "an empty fragment");
    }

    #[test]
    fn outcomes_entries_must_be_whole_records_with_zero_write_fields() {
        let outcomes = EntryRepr {
            kind: EntryKind::Outcomes,
            write_seq: 0,
            key_hash: 0,
            stamp: 0,
            tombstone: false,
            repair: false,
            payload_len: 64,
            ..repr()
        };
        let emit = |r: EntryRepr| {
            let mut b = [0u8; HEADER_LEN];
            r.emit_into(&mut b);
            b
        };
        let b = emit(outcomes);
        let h = EntryHeader::new_checked(&b[..], CAPACITY).unwrap();
        assert_eq!(EntryRepr::parse(&h, CAPACITY).unwrap(), outcomes);
        for len in [0, 48, 33, (OUTCOMES_PER_ENTRY_MAX as u32 + 1) * 32] {
            let err = EntryHeader::new_checked(emit(EntryRepr { payload_len: len, ..outcomes }), 1 << 20).unwrap_err();
            assert!(matches!(err, EntryError::PayloadLength { kind: EntryKind::Outcomes, .. }), "len {len}: {err}");
        }
        let max = EntryRepr { payload_len: OUTCOMES_PER_ENTRY_MAX as u32 * 32, ..outcomes };
        assert!(EntryHeader::new_checked(emit(max), 1 << 20).is_ok());
        for (r, name) in [
            (EntryRepr { write_seq: 1, ..outcomes }, "write_seq"),
            (EntryRepr { key_hash: 1, ..outcomes }, "key_hash"),
            (EntryRepr { stamp: 1, ..outcomes }, "stamp"),
            (EntryRepr { tombstone: true, ..outcomes }, "flags"),
        ] {
            let err = EntryHeader::new_checked(emit(r), CAPACITY).unwrap_err();
            assert!(matches!(err, EntryError::Field { field, .. } if field == name), "{err}");
        }
    }

    #[test]
    fn payload_checksum_covers_the_parts_in_order() {
        let (head, body) = (&[1u8; 40][..], &[2u8; 300][..]);
        let whole: Vec<u8> = head.iter().chain(body).copied().collect();
        assert_eq!(payload_crc(&[head, body]), crc32c::crc32c(&whole));
        assert_eq!(payload_crc(&[]), crc32c::crc32c(&[]));
        let mut b = [0u8; HEADER_LEN];
        EntryRepr { payload_len: whole.len() as u32, payload_crc: payload_crc(&[head, body]), ..repr() }
            .emit_into(&mut b);
        let h = EntryHeader::new_checked(&b[..], CAPACITY).unwrap();
        h.verify_payload(&whole).unwrap();
        let mut bad = whole.clone();
        bad[200] ^= 0x80;
        assert!(matches!(h.verify_payload(&bad), Err(EntryError::PayloadChecksum { .. })));
    }

    /// The exact bytes of one outcome record, fixed forever for format 1.
    const GOLDEN_OUTCOME: [u8; OUTCOME_RECORD_BYTES] = [
        9, 0, 0, 0, 0, 0, 0, 0, // write_seq
        0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01, // key hash
        0x03, 42, 0, 0, 0, 0, 0, 0, // stamp
        2, 0, 0, 0, 0, 0, 0, 0, // Aborted, zero
    ];

    #[test]
    fn outcome_records_round_trip_through_the_golden_bytes() {
        let r = OutcomeRecordRepr {
            write_seq: 9,
            key_hash: 0x0123_4567_89ab_cdef,
            stamp: (42 << 8) | 3,
            outcome: Outcome::Aborted,
        };
        let mut b = [0xffu8; OUTCOME_RECORD_BYTES];
        r.emit(&mut b);
        assert_eq!(b, GOLDEN_OUTCOME);
        let view = OutcomeRecord::new_checked(&b[..], 0).unwrap();
        assert_eq!(OutcomeRecordRepr::parse(&view, 0).unwrap(), r);

        let mut payload = GOLDEN_OUTCOME.to_vec();
        payload.extend_from_slice(&GOLDEN_OUTCOME);
        payload[32 + outcome_field::OUTCOME] = 1;
        let all: Vec<_> = outcome_records(&payload).collect::<Result<_, _>>().unwrap();
        assert_eq!(all, [r, OutcomeRecordRepr { outcome: Outcome::Committed, ..r }]);
    }

    #[test]
    fn malformed_outcome_records_name_their_index() {
        let mut payload = [GOLDEN_OUTCOME, GOLDEN_OUTCOME, GOLDEN_OUTCOME].concat();
        payload[32 + outcome_field::OUTCOME] = 3;
        payload[64 + 31] = 1;
        let results: Vec<_> = outcome_records(&payload).collect();
        assert!(results[0].is_ok());
        assert!(matches!(results[1], Err(EntryError::OutcomeRecord { index: 1, .. })));
        assert!(matches!(results[2], Err(EntryError::OutcomeRecord { index: 2, .. })));
        let short: Vec<_> = outcome_records(&GOLDEN_OUTCOME[..20]).collect();
        assert!(matches!(short[..], [Err(EntryError::OutcomeRecord { index: 0, .. })]));
    }
}
