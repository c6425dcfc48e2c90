//! A fragment store record: a checked view over one way of a store set, as the node wrote
//! it or as a peer READ it (hostile bytes).
//!
//! All integers are little-endian; `record_bytes` is 104 plus the store's payload_max,
//! rounded up to 64.
//!
//! ```text
//!  0..4 magic "PRSR"   4 format (1)   5 state (0 Empty, 1 Pending, 2 Committed)
//!  6 writer            7 fragment index
//!  8..16 key_hash      16..24 stamp   24..32 write_seq
//! 32..36 fragment_len  36..40 flags (bit 0 tombstone)   40..44 writer incarnation
//! 44..60 reserved (0)  60..64 record CRC32C
//! 64..104 the 40-byte fragment header (stripe::header, with its own checksums)
//! 104..   fragment payload (fragment_len bytes)
//! ```
//!
//! The record CRC covers bytes 0..60 with byte 5 (state) taken as 0, then the fragment
//! header and the payload. So a state change is one single-byte store that never
//! invalidates the checksum, and a record torn by a crash fails it (and counts as empty,
//! never as data). The fragment header is not parsed here: the GET path checks it with
//! `stripe::header` when it decodes.
#![forbid(unsafe_code)]

use super::file::{le32, le64, round_up};
use crate::limits::{
    HEADER_PAGE_BYTES, LINE_BYTES, RECORD_HEADER_BYTES, SET_HEAD_BYTES, STORE_FILE_BYTES_MAX, STORE_PAYLOAD_BYTES_MAX,
    STORE_SETS_MAX, STORE_SET_BYTES_MAX, STORE_WAYS_MAX,
};
use crate::stripe::HEADER_LEN as FRAGMENT_HEADER_LEN;

/// Magic number, the bytes "PRSR" read as a little-endian u32.
pub const MAGIC: u32 = u32::from_le_bytes(*b"PRSR");
/// Record format this build writes and reads.
pub const FORMAT: u8 = 1;
/// Bytes of the record header proper, before the fragment header.
pub const HEAD_LEN: usize = 64;
/// Flag: the write deletes the key.
pub const FLAG_TOMBSTONE: u32 = 1 << 0;

/// Byte ranges of the record fields.
pub mod field {
    use std::ops::Range;
    /// Magic number.
    pub const MAGIC: Range<usize> = 0..4;
    /// Format version.
    pub const FORMAT: usize = 4;
    /// State; outside the checksum.
    pub const STATE: usize = 5;
    /// Writer node id.
    pub const WRITER: usize = 6;
    /// Fragment index.
    pub const FRAGMENT_INDEX: usize = 7;
    /// Hash of the key.
    pub const KEY_HASH: Range<usize> = 8..16;
    /// Stamp of the write.
    pub const STAMP: Range<usize> = 16..24;
    /// The writer's write number.
    pub const WRITE_SEQ: Range<usize> = 24..32;
    /// Bytes of fragment payload.
    pub const FRAGMENT_LEN: Range<usize> = 32..36;
    /// Flags.
    pub const FLAGS: Range<usize> = 36..40;
    /// Writer incarnation.
    pub const INCARNATION: Range<usize> = 40..44;
    /// Reserved, zero.
    pub const RESERVED: Range<usize> = 44..60;
    /// Record checksum.
    pub const RECORD_CRC: Range<usize> = 60..64;
    /// The fragment header.
    pub const FRAGMENT_HEADER: Range<usize> = 64..104;
    /// Start of the fragment payload.
    pub const PAYLOAD: usize = 104;
}

const _: () = assert!(field::PAYLOAD == RECORD_HEADER_BYTES);
const _: () = assert!(field::FRAGMENT_HEADER.end - field::FRAGMENT_HEADER.start == FRAGMENT_HEADER_LEN);
const _: () = assert!(field::STATE < 8, "the state lies in the record's first aligned word");

/// Where a record is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum RecordState {
    /// No record: the way is free.
    Empty = 0,
    /// Persisted, outcome not known yet.
    Pending = 1,
    /// The write committed.
    Committed = 2,
}

impl RecordState {
    /// The state with wire value `v`.
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(Self::Empty),
            1 => Some(Self::Pending),
            2 => Some(Self::Committed),
            _ => None,
        }
    }
}

/// Shape of a fragment store: `sets` sets of `ways` records, each record holding up to
/// `payload_max` fragment bytes, each set led by a [`SET_HEAD_BYTES`]-byte set head.
///
/// A key has a home set ([`Self::home_of`]) and a spill set ([`Self::spill_of`]): its
/// records go home while the home set has room, else to the spill set, and the home
/// set's head counts how many of its keys' records lie in spill sets, so a reader knows
/// when one READ of the home set is not enough.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreGeometry {
    sets: u32,
    ways: u32,
    record_bytes: u32,
    payload_max: u32,
}

/// A store geometry parameter out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("fragment store {field} = {value} is out of range: must be {limit}; fix store_bytes or the payload size (value_bytes_max, k) in the cluster config")]
pub struct GeometryError {
    /// The parameter.
    pub field: &'static str,
    /// The value given (or derived).
    pub value: u64,
    /// What is allowed.
    pub limit: String,
}

impl StoreGeometry {
    /// A store of `sets` sets of `ways` records of up to `payload_max` fragment bytes,
    /// checked against the limits in [`crate::limits`].
    pub fn new(sets: u32, ways: u32, payload_max: u32) -> Result<Self, GeometryError> {
        let bad = |field, value: u64, limit: String| GeometryError { field, value, limit };
        if sets == 0 || sets > STORE_SETS_MAX {
            return Err(bad("sets", sets.into(), format!("1 to {STORE_SETS_MAX}")));
        }
        if ways == 0 || ways > STORE_WAYS_MAX {
            return Err(bad("ways", ways.into(), format!("1 to {STORE_WAYS_MAX}")));
        }
        if payload_max > STORE_PAYLOAD_BYTES_MAX {
            return Err(bad("payload_max", payload_max.into(), format!("at most {STORE_PAYLOAD_BYTES_MAX} bytes")));
        }
        let record_bytes = round_up(RECORD_HEADER_BYTES as u64 + u64::from(payload_max), LINE_BYTES as u64)
            .expect("payload_max is bounded") as u32;
        let geometry = Self { sets, ways, record_bytes, payload_max };
        if geometry.set_bytes() > STORE_SET_BYTES_MAX {
            let limit =
                format!("at most {STORE_SET_BYTES_MAX} bytes (one RDMA READ); use fewer ways or smaller values");
            return Err(bad("ways x record_bytes", geometry.set_bytes() as u64, limit));
        }
        if geometry.file_bytes() > STORE_FILE_BYTES_MAX {
            return Err(bad("file bytes", geometry.file_bytes(), format!("at most {STORE_FILE_BYTES_MAX}")));
        }
        Ok(geometry)
    }

    /// The largest store whose file fits in `store_bytes`: as many sets of `ways` records
    /// as fit after the header page.
    pub fn for_bytes(store_bytes: u64, ways: u32, payload_max: u32) -> Result<Self, GeometryError> {
        let one = Self::new(1, ways, payload_max)?;
        let sets = store_bytes.saturating_sub(HEADER_PAGE_BYTES as u64) / one.set_bytes() as u64;
        if sets == 0 {
            let limit = format!("at least {} bytes (one set of {ways} records)", one.file_bytes());
            return Err(GeometryError { field: "store_bytes", value: store_bytes, limit });
        }
        let max = STORE_SETS_MAX as u64 * one.set_bytes() as u64 + HEADER_PAGE_BYTES as u64;
        let sets = u32::try_from(sets).ok().filter(|&s| s <= STORE_SETS_MAX).ok_or_else(|| GeometryError {
            field: "store_bytes",
            value: store_bytes,
            limit: format!("at most {max} bytes ({STORE_SETS_MAX} sets) for this payload size"),
        })?;
        Self::new(sets, ways, payload_max)
    }

    /// The home set of a key: `key_hash % sets`. Key hashes are SHA-256 prefixes, uniform
    /// in every bit, so the remainder picks sets as well as any mixer would.
    pub fn home_of(&self, key_hash: u64) -> u32 {
        (key_hash % u64::from(self.sets)) as u32
    }

    /// The spill set of a key: another set, picked by the hash's high half (independent of
    /// the low bits that pick the home set). None in a store of one set.
    pub fn spill_of(&self, key_hash: u64) -> Option<u32> {
        let sets = u64::from(self.sets);
        (sets > 1).then(|| {
            let home = key_hash % sets;
            ((home + 1 + (key_hash >> 32) % (sets - 1)) % sets) as u32
        })
    }

    /// Offset of way `way`'s record within a set's bytes (after the set head).
    pub fn record_in_set(&self, way: usize) -> usize {
        SET_HEAD_BYTES + way * self.record_bytes as usize
    }

    /// Number of sets.
    pub fn sets(&self) -> u32 {
        self.sets
    }

    /// Records per set.
    pub fn ways(&self) -> u32 {
        self.ways
    }

    /// Bytes per record.
    pub fn record_bytes(&self) -> u32 {
        self.record_bytes
    }

    /// Most fragment bytes one record holds.
    pub fn payload_max(&self) -> u32 {
        self.payload_max
    }

    /// Bytes per set, its head included: what a peer READs to fetch a key's records.
    pub fn set_bytes(&self) -> usize {
        SET_HEAD_BYTES + self.ways as usize * self.record_bytes as usize
    }

    /// Bytes of all sets.
    pub fn body_bytes(&self) -> u64 {
        u64::from(self.sets) * self.set_bytes() as u64
    }

    /// Length of the store file: header page and sets.
    pub fn file_bytes(&self) -> u64 {
        HEADER_PAGE_BYTES as u64 + self.body_bytes()
    }
}

/// Why bytes are not a valid record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// Fewer bytes than the record needs.
    #[error("store record truncated: {len} bytes, it needs {need}; fetch the whole set")]
    Truncated {
        /// Bytes given.
        len: usize,
        /// Bytes needed.
        need: usize,
    },
    /// Not a record: never written, or overwritten by something else.
    #[error("not a store record: magic {found:#010x}, expected {expected:#010x}")]
    Magic {
        /// Magic found.
        found: u32,
        /// Magic expected.
        expected: u32,
    },
    /// A record of a format this build does not read.
    #[error("store record format {found} is not supported (this build reads format {supported}); run the same release on every node")]
    Format {
        /// Format found.
        found: u8,
        /// Format this build reads.
        supported: u8,
    },
    /// An unknown state.
    #[error("store record state {found} is unknown (0 Empty, 1 Pending, 2 Committed): the record is damaged")]
    State {
        /// State found.
        found: u8,
    },
    /// A field holds a value no valid record has.
    #[error("store record field {field} = {value:#x} is invalid: {reason}")]
    Field {
        /// Field name.
        field: &'static str,
        /// Its value.
        value: u64,
        /// Why it is invalid.
        reason: &'static str,
    },
    /// The record checksum does not match: torn by a crash, damaged, or read while it was
    /// being written.
    #[error("store record checksum mismatch (stored {stored:#010x}, computed {computed:#010x}): torn, damaged or changing; read it again or use another fragment")]
    Checksum {
        /// Checksum in the record.
        stored: u32,
        /// Checksum of the bytes.
        computed: u32,
    },
}

/// A view of a store record over `T`'s bytes.
#[derive(Clone, Copy, Debug)]
pub struct RecordView<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> RecordView<T> {
    /// A view without any check; accessors panic if `buffer` is shorter than the record.
    /// Use [`Self::new_checked`] for bytes from a peer.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// The key hash the bytes claim, unchecked (`None` if too short to hold one): lets a
    /// scan of a set skip other keys' records before paying for their checksums. Check
    /// a record that matches with [`Self::new_checked`] before using anything in it.
    pub fn claimed_key_hash(buffer: &[u8]) -> Option<u64> {
        buffer.get(field::KEY_HASH).map(le64)
    }

    /// A view of bytes that came from anywhere, for a store whose records hold at most
    /// `payload_max` payload bytes: checks what [`Self::check`] lists.
    pub fn new_checked(buffer: T, payload_max: u32) -> Result<Self, RecordError> {
        let view = Self::new_unchecked(buffer);
        view.check(payload_max)?;
        Ok(view)
    }

    /// Checks the length, magic, format, state (0..=2), that no unknown flag or reserved
    /// byte is set, that the fragment index is below `FRAGMENTS_MAX`, that fragment_len is at most `payload_max` and within the bytes, and the
    /// record checksum (recomputed).
    pub fn check(&self, payload_max: u32) -> Result<(), RecordError> {
        let b = self.buffer.as_ref();
        if b.len() < RECORD_HEADER_BYTES {
            return Err(RecordError::Truncated { len: b.len(), need: RECORD_HEADER_BYTES });
        }
        if self.magic() != MAGIC {
            return Err(RecordError::Magic { found: self.magic(), expected: MAGIC });
        }
        if self.format() != FORMAT {
            return Err(RecordError::Format { found: self.format(), supported: FORMAT });
        }
        if RecordState::from_u8(b[field::STATE]).is_none() {
            return Err(RecordError::State { found: b[field::STATE] });
        }
        if self.flags() & !FLAG_TOMBSTONE != 0 {
            return Err(RecordError::Field { field: "flags", value: self.flags().into(), reason: "unknown flag bits" });
        }
        if let Some(&value) = b[field::RESERVED].iter().find(|&&x| x != 0) {
            return Err(RecordError::Field { field: "reserved", value: value.into(), reason: "must be zero" });
        }
        if usize::from(self.fragment_index()) >= crate::limits::FRAGMENTS_MAX {
            return Err(RecordError::Field {
                field: "fragment_index",
                value: self.fragment_index().into(),
                reason: "beyond the most fragments a stripe has",
            });
        }
        let len = self.fragment_len();
        if len > payload_max {
            return Err(RecordError::Field {
                field: "fragment_len",
                value: len.into(),
                reason: "larger than the store's payload_max",
            });
        }
        let need = RECORD_HEADER_BYTES + len as usize;
        if b.len() < need {
            return Err(RecordError::Truncated { len: b.len(), need });
        }
        let computed = record_crc(&b[..HEAD_LEN], &b[field::FRAGMENT_HEADER], &b[field::PAYLOAD..need]);
        if computed != self.record_crc() {
            return Err(RecordError::Checksum { stored: self.record_crc(), computed });
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

    /// State; `Empty` for an unknown value on an unchecked view.
    pub fn state(&self) -> RecordState {
        RecordState::from_u8(self.buffer.as_ref()[field::STATE]).unwrap_or(RecordState::Empty)
    }

    /// Writer node id.
    pub fn writer(&self) -> u8 {
        self.buffer.as_ref()[field::WRITER]
    }

    /// Fragment index.
    pub fn fragment_index(&self) -> u8 {
        self.buffer.as_ref()[field::FRAGMENT_INDEX]
    }

    /// Hash of the key.
    pub fn key_hash(&self) -> u64 {
        le64(&self.buffer.as_ref()[field::KEY_HASH])
    }

    /// Stamp of the write.
    pub fn stamp(&self) -> u64 {
        le64(&self.buffer.as_ref()[field::STAMP])
    }

    /// The writer's write number.
    pub fn write_seq(&self) -> u64 {
        le64(&self.buffer.as_ref()[field::WRITE_SEQ])
    }

    /// Bytes of fragment payload.
    pub fn fragment_len(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::FRAGMENT_LEN])
    }

    /// Flags.
    pub fn flags(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::FLAGS])
    }

    /// The write deletes the key.
    pub fn tombstone(&self) -> bool {
        self.flags() & FLAG_TOMBSTONE != 0
    }

    /// Writer incarnation.
    pub fn incarnation(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::INCARNATION])
    }

    /// Record checksum.
    pub fn record_crc(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::RECORD_CRC])
    }

    /// The 40 bytes of the fragment header (not parsed here).
    pub fn fragment_header(&self) -> &[u8] {
        &self.buffer.as_ref()[field::FRAGMENT_HEADER]
    }

    /// The fragment payload.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..field::PAYLOAD + self.fragment_len() as usize]
    }
}

/// The record checksum: CRC32C of `head` (the first 64 bytes; its bytes 0..60 with byte 5
/// taken as 0), then of the fragment header and the payload.
pub fn record_crc(head: &[u8], fragment_header: &[u8], payload: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&head[..field::STATE]);
    let crc = crc32c::crc32c_append(crc, &[0]);
    let crc = crc32c::crc32c_append(crc, &head[field::STATE + 1..field::RECORD_CRC.start]);
    let crc = crc32c::crc32c_append(crc, fragment_header);
    crc32c::crc32c_append(crc, payload)
}

/// The decoded fields of a record (its state apart), what [`RecordRepr::emit`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordRepr {
    /// Writer node id.
    pub writer: u8,
    /// Fragment index.
    pub fragment_index: u8,
    /// Hash of the key.
    pub key_hash: u64,
    /// Stamp of the write (version << 8 | writer).
    pub stamp: u64,
    /// The writer's write number.
    pub write_seq: u64,
    /// Bytes of fragment payload.
    pub fragment_len: u32,
    /// The write deletes the key.
    pub tombstone: bool,
    /// Writer incarnation.
    pub incarnation: u32,
}

impl RecordRepr {
    /// Reads a record's fields, checking it for a store of `payload_max`.
    pub fn parse<T: AsRef<[u8]>>(view: &RecordView<T>, payload_max: u32) -> Result<Self, RecordError> {
        view.check(payload_max)?;
        Ok(Self {
            writer: view.writer(),
            fragment_index: view.fragment_index(),
            key_hash: view.key_hash(),
            stamp: view.stamp(),
            write_seq: view.write_seq(),
            fragment_len: view.fragment_len(),
            tombstone: view.tombstone(),
            incarnation: view.incarnation(),
        })
    }

    /// Writes the first 64 bytes of the record into `head`: the fields, `state`, and the
    /// checksum over them and the `fragment_header` and `payload` the record will hold.
    /// Panics (programmer error) if `fragment_header` is not 40 bytes or `payload` is not
    /// `fragment_len` bytes.
    pub fn emit(&self, state: RecordState, head: &mut [u8; HEAD_LEN], fragment_header: &[u8], payload: &[u8]) {
        assert_eq!(fragment_header.len(), FRAGMENT_HEADER_LEN, "a fragment header is 40 bytes");
        assert_eq!(payload.len(), self.fragment_len as usize, "the payload is fragment_len bytes");
        head[field::MAGIC].copy_from_slice(&MAGIC.to_le_bytes());
        head[field::FORMAT] = FORMAT;
        head[field::STATE] = state as u8;
        head[field::WRITER] = self.writer;
        head[field::FRAGMENT_INDEX] = self.fragment_index;
        head[field::KEY_HASH].copy_from_slice(&self.key_hash.to_le_bytes());
        head[field::STAMP].copy_from_slice(&self.stamp.to_le_bytes());
        head[field::WRITE_SEQ].copy_from_slice(&self.write_seq.to_le_bytes());
        head[field::FRAGMENT_LEN].copy_from_slice(&self.fragment_len.to_le_bytes());
        let flags = if self.tombstone { FLAG_TOMBSTONE } else { 0 };
        head[field::FLAGS].copy_from_slice(&flags.to_le_bytes());
        head[field::INCARNATION].copy_from_slice(&self.incarnation.to_le_bytes());
        head[field::RESERVED].fill(0);
        let crc = record_crc(&head[..], fragment_header, payload);
        head[field::RECORD_CRC].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Per-key counters in a set head (bytes `4..64`).
pub const SPILL_SLOTS: usize = SET_HEAD_BYTES - 4;

/// The set-head counter a key's spilled records are counted in: bits the home and spill
/// choices hardly use, so keys of one set spread over the counters.
pub fn spill_slot(key_hash: u64) -> usize {
    ((key_hash >> 48) % SPILL_SLOTS as u64) as usize
}

/// Records of the set's keys that lie in their spill sets, as the set head says: bytes
/// `0..4` of a set are that count (little-endian u32), bytes `4..64` the same records
/// counted per [`spill_slot`] (u8 each; one that reached 255 stays there until the store
/// is reopened).
pub fn set_spilled(set: &[u8]) -> u32 {
    set.get(..4).map_or(0, le32)
}

/// Whether a reader must READ the key's spill set too: the home set's counter for the
/// key's slot is not zero. From a peer these are hostile bytes: a wrong counter only
/// costs a reader a second READ, or hides records that the lying peer holds anyway.
pub fn key_may_have_spilled(set: &[u8], key_hash: u64) -> bool {
    set.get(4 + spill_slot(key_hash)).is_some_and(|&c| c != 0)
}

/// The records of one set, copied from the local store or READ from a peer (`bytes` should
/// be `geometry.set_bytes()` long): each non-empty way as a checked view or an error. Empty
/// ways (state byte 0) are skipped; a damaged, torn or missing way is an error, never data,
/// and never a panic.
pub fn parse_set<'a>(
    bytes: &'a [u8],
    geometry: &StoreGeometry,
) -> impl Iterator<Item = Result<RecordView<&'a [u8]>, RecordError>> + 'a {
    let record_bytes = geometry.record_bytes() as usize;
    let payload_max = geometry.payload_max();
    let g = *geometry;
    (0..geometry.ways() as usize).filter_map(move |way| {
        let start = g.record_in_set(way);
        let Some(record) = bytes.get(start..start + record_bytes) else {
            return Some(Err(RecordError::Truncated { len: bytes.len().saturating_sub(start), need: record_bytes }));
        };
        if record[field::STATE] == RecordState::Empty as u8 {
            return None;
        }
        Some(RecordView::new_checked(record, payload_max))
    })
}

/// Where a reader finds a key's records on one node: the copy of its home set and, when
/// that set's head said some of its keys spilled, the copy of its spill set (READ before
/// the home set, so a record the holder dropped from one was replaced by a newer one the
/// reader sees in the other).
#[derive(Clone, Copy, Debug)]
pub struct KeySets<'a> {
    /// The home set's bytes.
    pub home: &'a [u8],
    /// The spill set's bytes, when they were read.
    pub spill: Option<&'a [u8]>,
}

/// Where node `node`'s copy of a key's home set (`spill` false) or spill set lies in a
/// buffer that holds, per node, the home set and then the spill set, `set_bytes` each:
/// how GETs and repairs gather them.
pub fn gathered_range(node: usize, spill: bool, set_bytes: usize) -> std::ops::Range<usize> {
    let at = (2 * node + usize::from(spill)) * set_bytes;
    at..at + set_bytes
}

impl<'a> KeySets<'a> {
    /// Node `node`'s sets in a buffer laid out by [`gathered_range`]; the spill set only
    /// `with_spill`.
    pub fn gathered(buf: &'a [u8], node: usize, set_bytes: usize, with_spill: bool) -> Self {
        Self {
            home: &buf[gathered_range(node, false, set_bytes)],
            spill: with_spill.then(|| &buf[gathered_range(node, true, set_bytes)]),
        }
    }

    /// Way indices to visit: the home set's, then the spill set's (`ways..2 * ways`).
    pub fn ways(&self, geometry: &StoreGeometry) -> usize {
        geometry.ways() as usize * if self.spill.is_some() { 2 } else { 1 }
    }

    /// The bytes of way `way` (home set below `ways`, spill set above), or None past the
    /// end of what was read.
    pub fn record(&self, geometry: &StoreGeometry, way: usize) -> Option<&'a [u8]> {
        let ways = geometry.ways() as usize;
        let (set, way) = if way < ways { (self.home, way) } else { (self.spill?, way - ways) };
        let start = geometry.record_in_set(way);
        set.get(start..start + geometry.record_bytes() as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn repr() -> RecordRepr {
        RecordRepr {
            writer: 3,
            fragment_index: 2,
            key_hash: 0x0123_4567_89ab_cdef,
            stamp: (42 << 8) | 3,
            write_seq: 77,
            fragment_len: 64,
            tombstone: true,
            incarnation: 5,
        }
    }

    const FRAGMENT_HEADER: [u8; 40] = [0xa5; 40];
    const PAYLOAD: [u8; 64] = [0x3c; 64];

    /// The exact first 60 bytes of one Pending record, fixed forever for format 1. The
    /// checksum follows: CRC32C of these bytes with byte 5 as 0, then of the fragment
    /// header and payload.
    const GOLDEN: [u8; 60] = [
        b'P', b'R', b'S', b'R', 1, 1, 3, 2, // magic, format, state Pending, writer, index
        0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01, // key hash
        0x03, 42, 0, 0, 0, 0, 0, 0, // stamp
        77, 0, 0, 0, 0, 0, 0, 0, // write_seq
        64, 0, 0, 0, // fragment_len
        1, 0, 0, 0, // flags: tombstone
        5, 0, 0, 0, // incarnation
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // reserved
    ];

    fn golden_record() -> Vec<u8> {
        let mut covered = GOLDEN;
        covered[field::STATE] = 0;
        let mut all = covered.to_vec();
        all.extend_from_slice(&FRAGMENT_HEADER);
        all.extend_from_slice(&PAYLOAD);
        let crc = crc32c::crc32c(&all);
        let mut record = GOLDEN.to_vec();
        record.extend_from_slice(&crc.to_le_bytes());
        record.extend_from_slice(&FRAGMENT_HEADER);
        record.extend_from_slice(&PAYLOAD);
        record
    }

    #[test]
    fn emit_writes_the_golden_bytes() {
        let mut head = [0xffu8; HEAD_LEN];
        repr().emit(RecordState::Pending, &mut head, &FRAGMENT_HEADER, &PAYLOAD);
        assert_eq!(head[..], golden_record()[..HEAD_LEN]);
    }

    #[test]
    fn parse_reads_the_golden_bytes() {
        let record = golden_record();
        let view = RecordView::new_checked(&record[..], 64).unwrap();
        assert_eq!(RecordRepr::parse(&view, 64).unwrap(), repr());
        assert_eq!(view.state(), RecordState::Pending);
        assert_eq!(view.fragment_header(), FRAGMENT_HEADER);
        assert_eq!(view.payload(), PAYLOAD);
    }

    #[test]
    fn state_changes_keep_the_checksum_and_every_other_byte_is_covered() {
        let record = golden_record();
        for state in [RecordState::Empty, RecordState::Committed] {
            let mut b = record.clone();
            b[field::STATE] = state as u8;
            assert_eq!(RecordView::new_checked(&b[..], 64).unwrap().state(), state);
        }
        for i in (0..record.len()).filter(|&i| i != field::STATE) {
            for bit in 0..8 {
                let mut b = record.clone();
                b[i] ^= 1 << bit;
                assert!(RecordView::new_checked(&b[..], 64).is_err(), "byte {i} bit {bit} flipped still parses");
            }
        }
    }

    #[test]
    fn malformed_records_give_the_matching_error() {
        let record = golden_record();
        let check = |b: &[u8]| RecordView::new_checked(b, 64).unwrap_err();
        assert_eq!(check(&record[..103]), RecordError::Truncated { len: 103, need: 104 });
        assert_eq!(check(&record[..150]), RecordError::Truncated { len: 150, need: 168 });
        assert!(matches!(check(&[0u8; 168]), RecordError::Magic { .. }));
        let mut b = record.clone();
        b[field::FORMAT] = 9;
        assert!(matches!(check(&b), RecordError::Format { found: 9, .. }));
        let mut b = record.clone();
        b[field::STATE] = 3;
        assert_eq!(check(&b), RecordError::State { found: 3 });
        assert!(matches!(
            RecordView::new_checked(&record[..], 63),
            Err(RecordError::Field { field: "fragment_len", .. })
        ));
        // Fields that are wrong with a correct checksum.
        let reseal = |mut b: Vec<u8>| {
            let crc = record_crc(&b[..64], &b[64..104], &b[104..168]);
            b[60..64].copy_from_slice(&crc.to_le_bytes());
            b
        };
        let mut b = record.clone();
        b[field::FLAGS.start] = 3;
        assert!(matches!(check(&reseal(b)), RecordError::Field { field: "flags", .. }));
        let mut b = record.clone();
        b[field::RESERVED.start + 3] = 1;
        assert!(matches!(check(&reseal(b)), RecordError::Field { field: "reserved", .. }));
        // A hostile peer's fragment index past any stripe (found by the store_set fuzz
        // target: it once reached a shift by 200 in the GET's choice).
        let mut b = record.clone();
        b[field::FRAGMENT_INDEX] = 200;
        assert!(matches!(check(&reseal(b)), RecordError::Field { field: "fragment_index", value: 200, .. }));
        let mut b = record.clone();
        b[field::PAYLOAD] ^= 1;
        assert!(matches!(check(&b), RecordError::Checksum { .. }));
    }

    fn geometry() -> StoreGeometry {
        StoreGeometry::new(1, 4, 64).unwrap()
    }

    #[test]
    fn geometry_is_sized_by_bytes_and_checked() {
        let g = StoreGeometry::new(1024, 4, 4096).unwrap();
        assert_eq!((g.record_bytes(), g.set_bytes()), (4224, 64 + 4 * 4224));
        assert_eq!(g.file_bytes(), 4096 + 1024 * (64 + 4 * 4224));
        assert_eq!(StoreGeometry::new(1, 1, 0).unwrap().record_bytes(), 128);
        // As many sets as fit, any count.
        let set = 64 + 4 * 192;
        assert_eq!(StoreGeometry::for_bytes(4096 + 1000 * set, 4, 64).unwrap().sets(), 1000);
        assert_eq!(StoreGeometry::for_bytes(4096 + 1000 * set + set - 1, 4, 64).unwrap().sets(), 1000);
        assert_eq!(StoreGeometry::for_bytes(4096 + set, 4, 64).unwrap().sets(), 1);
        let field = |r: Result<StoreGeometry, GeometryError>| r.unwrap_err().field;
        assert_eq!(field(StoreGeometry::for_bytes(4096 + set - 1, 4, 64)), "store_bytes");
        assert_eq!(field(StoreGeometry::for_bytes(u64::MAX, 4, 64)), "store_bytes");
        assert_eq!(field(StoreGeometry::new(0, 4, 64)), "sets");
        assert_eq!(field(StoreGeometry::new(STORE_SETS_MAX + 1, 4, 64)), "sets");
        assert_eq!(field(StoreGeometry::new(1, 0, 64)), "ways");
        assert_eq!(field(StoreGeometry::new(1, 17, 64)), "ways");
        assert_eq!(field(StoreGeometry::new(1, 1, STORE_PAYLOAD_BYTES_MAX + 1)), "payload_max");
        assert_eq!(field(StoreGeometry::new(1, 2, STORE_PAYLOAD_BYTES_MAX)), "ways x record_bytes");
        assert_eq!(field(StoreGeometry::new(STORE_SETS_MAX, 16, 1 << 16)), "file bytes");
        assert_eq!(field(StoreGeometry::for_bytes(1 << 30, 0, 64)), "ways");
        assert!(StoreGeometry::new(1, 1, STORE_PAYLOAD_BYTES_MAX - 64).is_ok(), "one way holds a large fragment");
    }

    #[test]
    fn a_key_spills_to_another_set_picked_by_the_high_half_of_its_hash() {
        let g = StoreGeometry::new(1000, 4, 64).unwrap();
        assert_eq!(StoreGeometry::new(1, 4, 64).unwrap().spill_of(12345), None);
        let mut spills = vec![0u32; 1000];
        for i in 0..100_000u64 {
            let key_hash = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let (home, spill) = (g.home_of(key_hash), g.spill_of(key_hash).unwrap());
            assert!(home < 1000 && spill < 1000 && spill != home);
            spills[spill as usize] += 1;
        }
        // Spread over every set (100 a set on average).
        assert!(spills.iter().all(|&n| (40..200).contains(&n)), "{:?}", spills.iter().min());
        // The set head: a count, and per-slot counters a reader checks.
        let mut set = vec![0u8; g.set_bytes()];
        assert_eq!(set_spilled(&set), 0);
        assert!(!key_may_have_spilled(&set, 7 << 48));
        set[..4].copy_from_slice(&3u32.to_le_bytes());
        set[4 + spill_slot(7 << 48)] = 3;
        assert_eq!(set_spilled(&set), 3);
        assert!(key_may_have_spilled(&set, 7 << 48));
        assert!(!key_may_have_spilled(&set, 8 << 48));
        assert!(!key_may_have_spilled(&set[..3], 7 << 48), "a short READ says nothing");
    }

    #[test]
    fn parse_set_skips_empty_ways_and_reports_bad_ones() {
        let g = geometry();
        let mut set = vec![0u8; g.set_bytes()];
        let way = |w: usize| g.record_in_set(w);
        set[way(0)..way(0) + 168].copy_from_slice(&golden_record());
        set[way(2)..way(2) + 168].copy_from_slice(&golden_record());
        set[way(2) + 110] ^= 1; // torn payload
        set[way(3) + field::STATE] = 1; // a state byte on a way never written
        set[..8].fill(0xff); // the set head is not a record
        let results: Vec<_> = parse_set(&set, &g).collect();
        assert_eq!(results.len(), 3, "way 1 is empty");
        assert_eq!(results[0].as_ref().unwrap().key_hash(), repr().key_hash);
        assert!(matches!(results[1], Err(RecordError::Checksum { .. })));
        assert!(matches!(results[2], Err(RecordError::Magic { .. })));
        // A short read: the missing ways are errors, not data.
        let results: Vec<_> = parse_set(&set[..way(1) + 10], &g).collect();
        assert!(results[0].is_ok());
        assert_eq!(results.len(), 4);
        assert!(results[1..].iter().all(|r| matches!(r, Err(RecordError::Truncated { .. }))));
    }

    proptest! {
        #[test]
        fn parse_set_never_panics_on_random_bytes(
            bytes in proptest::collection::vec(any::<u8>(), 0..1000),
            stamp_magic in any::<bool>(),
        ) {
            let g = geometry();
            let mut bytes = bytes;
            if stamp_magic {
                // Make ways look like records so the checks past the magic run too.
                for way in 0..g.ways() as usize {
                    let at = g.record_in_set(way);
                    if let Some(b) = bytes.get_mut(at..at + 5) {
                        b.copy_from_slice(&[b'P', b'R', b'S', b'R', 1]);
                    }
                }
            }
            for view in parse_set(&bytes, &g).flatten() {
                prop_assert!(view.payload().len() <= 64);
                prop_assert!(view.state() != RecordState::Empty);
            }
        }
    }
}
