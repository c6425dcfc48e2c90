//! The model file: a checked view over bytes, little-endian throughout.
//!
//! ```text
//! header (72 bytes)                     entry record (56 bytes), one per used entry
//!  0..8   magic "PRESCMDL"               0      table: 0 order 1, 1 order 2
//!  8..12  format version (1)             1      heat (1 ..= 15)
//! 12..16  CRC-32 of the whole file,      2..4   total
//!         this field taken as zero       4..8   slot in its table
//! 16..24  memory_bytes                   8..16  tag
//! 24..28  theta (f32 bits)              16..48  4 successor keys
//! 28..32  lease_window_writes           48..56  4 successor counts (u16)
//! 32..34  min_observations
//! 34..36  count_decay_at
//! 36      order2 (0 or 1)
//! 37      history flags: bit 0 last, bit 1 before
//! 38..40  zero
//! 40..48  last key        48..56  key before it
//! 56..60  order-1 sets    60..64  order-2 sets
//! 64..68  entry records   68..72  zero
//! ```
//! Only used entries are written, in table then slot order, so a model's file is a
//! pure function of the model and small when the tables are sparse. Loading checks
//! length, magic, version, checksum, then every field against the crate's limits.

use std::path::Path;

use crate::config::{ModelConfig, HEAT_MAX, SUCCESSOR_SLOTS};
use crate::error::ModelError;
use crate::model::{order2_tag, History, Model};
use crate::table::{Entry, Table};

/// The file's magic bytes.
pub const MAGIC: [u8; 8] = *b"PRESCMDL";
/// The format version this build reads and writes.
pub const FORMAT_VERSION: u32 = 1;

mod field {
    use std::ops::Range;
    pub const MAGIC: Range<usize> = 0..8;
    pub const VERSION: Range<usize> = 8..12;
    pub const CHECKSUM: Range<usize> = 12..16;
    pub const MEMORY_BYTES: Range<usize> = 16..24;
    pub const THETA: Range<usize> = 24..28;
    pub const LEASE_WINDOW: Range<usize> = 28..32;
    pub const MIN_OBSERVATIONS: Range<usize> = 32..34;
    pub const COUNT_DECAY_AT: Range<usize> = 34..36;
    pub const ORDER2: usize = 36;
    pub const HISTORY_FLAGS: usize = 37;
    pub const LAST: Range<usize> = 40..48;
    pub const BEFORE: Range<usize> = 48..56;
    pub const ORDER1_SETS: Range<usize> = 56..60;
    pub const ORDER2_SETS: Range<usize> = 60..64;
    pub const ENTRIES: Range<usize> = 64..68;
    pub const HEADER_END: usize = 72;

    pub mod entry {
        use std::ops::Range;
        pub const TABLE: usize = 0;
        pub const HEAT: usize = 1;
        pub const TOTAL: Range<usize> = 2..4;
        pub const SLOT: Range<usize> = 4..8;
        pub const TAG: Range<usize> = 8..16;
        pub const SUCCESSORS: usize = 16;
        pub const COUNTS: usize = 48;
        pub const LEN: usize = 56;
    }
}

/// Length of the header in bytes.
pub const HEADER_BYTES: usize = field::HEADER_END;
/// Length of one entry record in bytes.
pub const ENTRY_RECORD_BYTES: usize = field::entry::LEN;

const _: () = assert!(field::entry::COUNTS + 2 * SUCCESSOR_SLOTS == field::entry::LEN);
const _: () = assert!(field::entry::SUCCESSORS + 8 * SUCCESSOR_SLOTS == field::entry::COUNTS);

const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

/// CRC-32 (IEEE 802.3, as zlib) of the file with its checksum field read as zero.
fn checksum(bytes: &[u8]) -> u32 {
    let mut c = !0u32;
    for (i, &b) in bytes.iter().enumerate() {
        let b = if field::CHECKSUM.contains(&i) { 0 } else { b };
        c = CRC_TABLE[((c ^ u32::from(b)) & 0xFF) as usize] ^ (c >> 8);
    }
    !c
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], r: std::ops::Range<usize>) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[r]);
    u32::from_le_bytes(a)
}
fn u64_at(b: &[u8], r: std::ops::Range<usize>) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[r]);
    u64::from_le_bytes(a)
}

fn malformed(what: impl Into<String>) -> ModelError {
    ModelError::Malformed { what: what.into() }
}

impl Model {
    /// The model as file bytes (see the module documentation of `format`).
    pub fn to_bytes(&self) -> Vec<u8> {
        let used = |t: &Table| (0..t.slots()).filter(|&s| t.entry(s).heat != 0).count();
        let count = used(&self.order1) + used(&self.order2);
        let mut b = vec![0u8; HEADER_BYTES + count * ENTRY_RECORD_BYTES];
        let c = &self.config;
        b[field::MAGIC].copy_from_slice(&MAGIC);
        b[field::VERSION].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[field::MEMORY_BYTES].copy_from_slice(&c.memory_bytes.to_le_bytes());
        b[field::THETA].copy_from_slice(&c.theta.to_bits().to_le_bytes());
        b[field::LEASE_WINDOW].copy_from_slice(&c.lease_window_writes.to_le_bytes());
        b[field::MIN_OBSERVATIONS].copy_from_slice(&c.min_observations.to_le_bytes());
        b[field::COUNT_DECAY_AT].copy_from_slice(&c.count_decay_at.to_le_bytes());
        b[field::ORDER2] = u8::from(c.order2);
        let h = &self.history;
        b[field::HISTORY_FLAGS] = u8::from(h.last.is_some()) | (u8::from(h.before.is_some()) << 1);
        b[field::LAST].copy_from_slice(&h.last.unwrap_or(0).to_le_bytes());
        b[field::BEFORE].copy_from_slice(&h.before.unwrap_or(0).to_le_bytes());
        b[field::ORDER1_SETS].copy_from_slice(&(self.order1.sets() as u32).to_le_bytes());
        b[field::ORDER2_SETS].copy_from_slice(&(self.order2.sets() as u32).to_le_bytes());
        b[field::ENTRIES].copy_from_slice(&(count as u32).to_le_bytes());
        let mut at = HEADER_BYTES;
        for (table_id, table) in [(0u8, &self.order1), (1u8, &self.order2)] {
            for (slot, e) in (0..table.slots()).map(|s| (s, table.entry(s))).filter(|(_, e)| e.heat != 0) {
                let r = &mut b[at..at + ENTRY_RECORD_BYTES];
                r[field::entry::TABLE] = table_id;
                r[field::entry::HEAT] = e.heat;
                r[field::entry::TOTAL].copy_from_slice(&e.total.to_le_bytes());
                r[field::entry::SLOT].copy_from_slice(&(slot as u32).to_le_bytes());
                r[field::entry::TAG].copy_from_slice(&e.tag.to_le_bytes());
                for i in 0..SUCCESSOR_SLOTS {
                    let s = field::entry::SUCCESSORS + 8 * i;
                    r[s..s + 8].copy_from_slice(&e.successors[i].to_le_bytes());
                    let k = field::entry::COUNTS + 2 * i;
                    r[k..k + 2].copy_from_slice(&e.counts[i].to_le_bytes());
                }
                at += ENTRY_RECORD_BYTES;
            }
        }
        let sum = checksum(&b);
        b[field::CHECKSUM].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// A model from file bytes, every field checked.
    pub fn from_bytes(b: &[u8]) -> Result<Self, ModelError> {
        if b.len() < HEADER_BYTES {
            return Err(ModelError::Truncated { needed: HEADER_BYTES, actual: b.len() });
        }
        let mut magic = [0u8; 8];
        magic.copy_from_slice(&b[field::MAGIC]);
        if magic != MAGIC {
            return Err(ModelError::BadMagic { found: magic });
        }
        let version = u32_at(b, field::VERSION);
        if version != FORMAT_VERSION {
            return Err(ModelError::UnsupportedVersion { found: version, supported: FORMAT_VERSION });
        }
        let count = u32_at(b, field::ENTRIES) as usize;
        let needed = count
            .checked_mul(ENTRY_RECORD_BYTES)
            .and_then(|n| n.checked_add(HEADER_BYTES))
            .ok_or_else(|| malformed(format!("entry count {count} overflows")))?;
        if b.len() < needed {
            return Err(ModelError::Truncated { needed, actual: b.len() });
        }
        let (found, computed) = (u32_at(b, field::CHECKSUM), checksum(b));
        if found != computed {
            return Err(ModelError::ChecksumMismatch { found, computed });
        }
        if b.len() != needed {
            return Err(malformed(format!("{} bytes after the last of {count} entries", b.len() - needed)));
        }
        let order2 = match b[field::ORDER2] {
            0 => false,
            1 => true,
            x => return Err(malformed(format!("order2 flag {x}, expected 0 or 1"))),
        };
        let config = ModelConfig {
            memory_bytes: u64_at(b, field::MEMORY_BYTES),
            theta: f32::from_bits(u32_at(b, field::THETA)),
            lease_window_writes: u32_at(b, field::LEASE_WINDOW),
            min_observations: u16_at(b, field::MIN_OBSERVATIONS.start),
            count_decay_at: u16_at(b, field::COUNT_DECAY_AT.start),
            order2,
        };
        let mut model = Model::new(config)?;
        for (name, range, table) in
            [("order-1", field::ORDER1_SETS, &model.order1), ("order-2", field::ORDER2_SETS, &model.order2)]
        {
            let sets = u32_at(b, range) as usize;
            if sets != table.sets() {
                return Err(malformed(format!("{name} table has {sets} sets, its budget gives {}", table.sets())));
            }
        }
        for n in 0..count {
            let r = &b[HEADER_BYTES + n * ENTRY_RECORD_BYTES..][..ENTRY_RECORD_BYTES];
            let mut e = Entry {
                tag: u64_at(r, field::entry::TAG),
                heat: r[field::entry::HEAT],
                total: u16_at(r, field::entry::TOTAL.start),
                ..Entry::default()
            };
            for i in 0..SUCCESSOR_SLOTS {
                let s = field::entry::SUCCESSORS + 8 * i;
                e.successors[i] = u64_at(r, s..s + 8);
                e.counts[i] = u16_at(r, field::entry::COUNTS + 2 * i);
            }
            let sum: u32 = e.counts.iter().map(|&c| u32::from(c)).sum();
            if e.heat == 0 || e.heat > HEAT_MAX || sum > u32::from(e.total) || e.total >= config.count_decay_at {
                return Err(malformed(format!("entry {n}: heat {}, total {}, counts {:?}", e.heat, e.total, e.counts)));
            }
            let slot = u32_at(r, field::entry::SLOT) as usize;
            let table = match r[field::entry::TABLE] {
                0 => &mut model.order1,
                1 => &mut model.order2,
                x => return Err(malformed(format!("entry {n}: table {x}, expected 0 or 1"))),
            };
            if slot < table.slots() && table.entry(slot).heat != 0 {
                return Err(malformed(format!("entry {n}: slot {slot} given twice")));
            }
            table.place(slot, e).ok_or_else(|| malformed(format!("entry {n}: slot {slot} wrong for its tag")))?;
        }
        let flags = b[field::HISTORY_FLAGS];
        let last = (flags & 1 != 0).then(|| u64_at(b, field::LAST));
        let before = (flags & 2 != 0).then(|| u64_at(b, field::BEFORE));
        if flags > 3 || (before.is_some() && last.is_none()) {
            return Err(malformed(format!("history flags {flags:#x}")));
        }
        let slot1 = last.and_then(|l| model.order1.find(l));
        let slot2 = match (before, last) {
            (Some(bf), Some(l)) if order2 => model.order2.find(order2_tag(bf, l)),
            _ => None,
        };
        model.history = History { last, before, slot1, slot2 };
        Ok(model)
    }

    /// Writes the model to `path`.
    pub fn save(&self, path: &Path) -> Result<(), ModelError> {
        std::fs::write(path, self.to_bytes()).map_err(|source| ModelError::Io {
            action: "write",
            path: path.to_path_buf(),
            source,
        })
    }

    /// Reads a model from `path`.
    pub fn load(path: &Path) -> Result<Self, ModelError> {
        let bytes = std::fs::read(path).map_err(|source| ModelError::Io {
            action: "read",
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_bytes(&bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn trained() -> Model {
        let mut m = Model::new(ModelConfig { memory_bytes: 8 << 10, ..ModelConfig::default() }).unwrap();
        for k in [1u64, 2, 3, 1, 2, 3, 1, 2] {
            m.observe(k);
        }
        m
    }

    #[test]
    fn crc_matches_zlib() {
        // The standard check value of CRC-32/ISO-HDLC (the input is shorter than the
        // checksum field's offset, so nothing is zeroed).
        let mut data = *b"123456789";
        assert_eq!(checksum(&data), 0xCBF4_3926);
        data[0] = b'0';
        assert_ne!(checksum(&data), 0xCBF4_3926);
    }

    #[test]
    fn golden_header() {
        let m = Model::new(ModelConfig { memory_bytes: 8 << 10, ..ModelConfig::default() }).unwrap();
        let b = m.to_bytes();
        assert_eq!(b.len(), HEADER_BYTES);
        let golden: [u8; 40] = [
            b'P', b'R', b'E', b'S', b'C', b'M', b'D', b'L', // magic
            1, 0, 0, 0, // version
            b[12], b[13], b[14], b[15], // checksum, checked below
            0, 0x20, 0, 0, 0, 0, 0, 0, // memory 8192
            0, 0, 0x40, 0x3F, // theta 0.75
            8, 0, 0, 0, // window
            2, 0, // min observations
            0, 1, // decay at 256
            1, 0, 0, 0, // order2, flags, zero
        ];
        assert_eq!(&b[..40], &golden);
        assert_eq!(&b[56..64], &[16, 0, 0, 0, 16, 0, 0, 0], "16 sets of 4 x 56-byte entries per 4 KiB");
        assert_eq!(u32_at(&b, field::CHECKSUM), checksum(&b));
    }

    #[test]
    fn round_trip_is_exact() {
        let m = trained();
        let b = m.to_bytes();
        let back = Model::from_bytes(&b).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.to_bytes(), b);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let b = trained().to_bytes();
        for len in 0..b.len() {
            let err = Model::from_bytes(&b[..len]).unwrap_err();
            assert!(
                matches!(err, ModelError::Truncated { .. } | ModelError::ChecksumMismatch { .. }),
                "len {len}: {err}"
            );
        }
    }

    #[test]
    fn bad_magic_and_version() {
        let mut b = trained().to_bytes();
        b[0] = b'X';
        assert!(matches!(Model::from_bytes(&b), Err(ModelError::BadMagic { .. })));
        let mut b = trained().to_bytes();
        b[8] = 2;
        assert!(matches!(Model::from_bytes(&b), Err(ModelError::UnsupportedVersion { found: 2, .. })));
    }

    #[test]
    fn valid_checksum_over_bad_fields_is_malformed() {
        let mut b = trained().to_bytes();
        b[field::ORDER2] = 7;
        let sum = checksum(&b);
        b[field::CHECKSUM].copy_from_slice(&sum.to_le_bytes());
        assert!(matches!(Model::from_bytes(&b), Err(ModelError::Malformed { .. })));
        let mut b = trained().to_bytes();
        b[field::THETA].copy_from_slice(&2.0f32.to_bits().to_le_bytes());
        let sum = checksum(&b);
        b[field::CHECKSUM].copy_from_slice(&sum.to_le_bytes());
        assert!(matches!(Model::from_bytes(&b), Err(ModelError::InvalidConfig { field: "theta", .. })));
    }

    #[test]
    fn save_and_load_a_file() {
        let dir = std::env::temp_dir().join(format!("prescient-models-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.model");
        let m = trained();
        m.save(&path).unwrap();
        assert_eq!(Model::load(&path).unwrap(), m);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(Model::load(&path), Err(ModelError::Io { action: "read", .. })));
    }

    proptest! {
        #[test]
        fn any_single_byte_flip_is_caught(pos in 0usize..10_000, bit in 0u8..8) {
            let mut b = trained().to_bytes();
            let pos = pos % b.len();
            b[pos] ^= 1 << bit;
            prop_assert!(Model::from_bytes(&b).is_err());
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = Model::from_bytes(&bytes);
        }
    }
}
