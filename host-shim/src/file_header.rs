//! The common header of every cluster file, defined once: `prescient-dpu` writes and
//! checks it for each of its files (fragment logs, the fragment store, the outcome and
//! fate tables, the change-feed log), and the host's feed reader ([`crate::feed`])
//! checks it when it opens a node's change-feed log. Both use this code, so the two
//! sides cannot drift apart.
//!
//! A cluster file starts with a [`FILE_HEADER_PAGE_BYTES`]-byte header page naming what
//! the file is and its geometry. Its first [`COMMON_BYTES`] have one layout for every
//! kind of cluster file (all integers little-endian):
//!
//! ```text
//!  0..8   magic (8 bytes, names the kind of file)
//!  8..12  format (u32, 1)
//! 12      first id (node, or writer of a log)   13  second id (holder of a log, or 0)
//! 14..16  zero
//! 16..    the geometry: `N` u32 parameters
//! 16+4N.. CRC32C of bytes 0..16+4N
//! ..64    zero
//! ```
//!
//! Bytes 64.. of the page belong to the file kind (the log keeps its applied sequence
//! there, the feed log the newest version it overwrote). Whether the ids and geometry
//! are the expected ones is each file kind's own check.
#![forbid(unsafe_code)]

use crate::config::FILE_HEADER_PAGE_BYTES;

/// Format of the header page this build writes and reads.
pub const FORMAT: u32 = 1;
/// Bytes of the common part of the header page.
pub const COMMON_BYTES: usize = 64;

/// Byte ranges of the common header fields.
pub mod field {
    use std::ops::Range;
    /// Magic naming the kind of file.
    pub const MAGIC: Range<usize> = 0..8;
    /// Format version.
    pub const FORMAT: Range<usize> = 8..12;
    /// First id (node, or a log's writer).
    pub const ID0: usize = 12;
    /// Second id (a log's holder, else 0).
    pub const ID1: usize = 13;
    /// Zero.
    pub const ZERO: Range<usize> = 14..16;
    /// First geometry parameter; parameter `i` is at `PARAMS + 4 * i`.
    pub const PARAMS: usize = 16;
}

/// Why a header page is not a valid header of the expected kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// The file is shorter than a header page.
    #[error("it is {len} bytes long, shorter than its {need}-byte header page")]
    Truncated {
        /// Bytes in the file.
        len: usize,
        /// Bytes of a header page.
        need: usize,
    },
    /// The magic is not the expected one: another kind of file.
    #[error("its magic is {found:?}, expected {expected:?}: it is another kind of file")]
    Magic {
        /// Magic found.
        found: [u8; 8],
        /// Magic expected.
        expected: [u8; 8],
    },
    /// A header of a format this build does not read.
    #[error("its header format is {found}; this build reads format {FORMAT}")]
    Format {
        /// Format found.
        found: u32,
    },
    /// The header checksum does not match: the header was damaged.
    #[error("its header checksum is {stored:#010x}, the bytes give {computed:#010x}: the header is damaged")]
    Checksum {
        /// Checksum in the header.
        stored: u32,
        /// Checksum of the bytes.
        computed: u32,
    },
    /// A byte that must be zero is not.
    #[error("its header byte {offset} is {value:#04x}, must be zero: the header is damaged or of a newer format")]
    NonZero {
        /// Offset of the byte.
        offset: usize,
        /// Its value.
        value: u8,
    },
}

/// The common header of a cluster file with `N` geometry parameters: what
/// [`FileHeader::emit`] writes and [`FileHeader::parse`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileHeader<const N: usize> {
    /// The two id bytes.
    pub ids: [u8; 2],
    /// The geometry parameters.
    pub params: [u32; N],
}

impl<const N: usize> FileHeader<N> {
    const CRC_AT: usize = field::PARAMS + 4 * N;
    const FITS: () = assert!(field::PARAMS + 4 * N + 4 <= COMMON_BYTES, "parameters fit the first line");

    /// Writes the header into the first [`COMMON_BYTES`] of `page`, zero-filling the rest of
    /// that line; panics (programmer error) if `page` is shorter.
    pub fn emit(&self, magic: &[u8; 8], page: &mut [u8]) {
        let () = Self::FITS;
        let b = &mut page[..COMMON_BYTES];
        b.fill(0);
        b[field::MAGIC].copy_from_slice(magic);
        b[field::FORMAT].copy_from_slice(&FORMAT.to_le_bytes());
        b[field::ID0] = self.ids[0];
        b[field::ID1] = self.ids[1];
        for (i, p) in self.params.iter().enumerate() {
            b[field::PARAMS + 4 * i..field::PARAMS + 4 * i + 4].copy_from_slice(&p.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b[..Self::CRC_AT]);
        b[Self::CRC_AT..Self::CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    }

    /// Reads and checks a header page from a file: its length, then the common part
    /// ([`FileHeader::parse_common`]). Whether the ids and geometry are the expected ones
    /// is the caller's check.
    pub fn parse(magic: &[u8; 8], page: &[u8]) -> Result<Self, HeaderError> {
        if page.len() < FILE_HEADER_PAGE_BYTES {
            return Err(HeaderError::Truncated { len: page.len(), need: FILE_HEADER_PAGE_BYTES });
        }
        Self::parse_common(magic, page[..COMMON_BYTES].try_into().expect("a header page holds the common part"))
    }

    /// Checks the common part of a header page (its first [`COMMON_BYTES`]): magic, format,
    /// checksum and zero bytes. For a reader that checked the file's length itself and
    /// copies out only this part (the host's feed reader loads it a word at a time from a
    /// mapping another process writes).
    pub fn parse_common(magic: &[u8; 8], common: &[u8; COMMON_BYTES]) -> Result<Self, HeaderError> {
        let () = Self::FITS;
        let found: [u8; 8] = common[field::MAGIC].try_into().expect("field is 8 bytes");
        if &found != magic {
            return Err(HeaderError::Magic { found, expected: *magic });
        }
        let format = le32(&common[field::FORMAT]);
        if format != FORMAT {
            return Err(HeaderError::Format { found: format });
        }
        let stored = le32(&common[Self::CRC_AT..Self::CRC_AT + 4]);
        let computed = crc32c::crc32c(&common[..Self::CRC_AT]);
        if stored != computed {
            return Err(HeaderError::Checksum { stored, computed });
        }
        let mut zero = field::ZERO.chain(Self::CRC_AT + 4..COMMON_BYTES);
        if let Some(offset) = zero.find(|&i| common[i] != 0) {
            return Err(HeaderError::NonZero { offset, value: common[offset] });
        }
        let mut params = [0u32; N];
        for (i, p) in params.iter_mut().enumerate() {
            *p = le32(&common[field::PARAMS + 4 * i..field::PARAMS + 4 * i + 4]);
        }
        Ok(Self { ids: [common[field::ID0], common[field::ID1]], params })
    }
}

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes(b.try_into().expect("field is 4 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAGIC: &[u8; 8] = b"PRSCTEST";

    /// The exact bytes before the checksum of a header with ids (3, 1) and parameters
    /// (64, 4160); the checksum (CRC32C of these 24 bytes) follows, then zeros.
    const GOLDEN: [u8; 24] = [
        b'P', b'R', b'S', b'C', b'T', b'E', b'S', b'T', // magic
        1, 0, 0, 0, // format
        3, 1, 0, 0, // ids, zero
        0x40, 0, 0, 0, // 64
        0x40, 0x10, 0, 0, // 4160
    ];

    fn golden() -> [u8; FILE_HEADER_PAGE_BYTES] {
        let mut page = [0u8; FILE_HEADER_PAGE_BYTES];
        page[..24].copy_from_slice(&GOLDEN);
        let crc = crc32c::crc32c(&GOLDEN);
        page[24..28].copy_from_slice(&crc.to_le_bytes());
        page
    }

    #[test]
    fn emit_writes_the_golden_bytes_and_parse_reads_them() {
        let header = FileHeader { ids: [3, 1], params: [64, 4160] };
        let mut page = [0xffu8; FILE_HEADER_PAGE_BYTES];
        header.emit(MAGIC, &mut page);
        assert_eq!(page[..COMMON_BYTES], golden()[..COMMON_BYTES]);
        assert_eq!(FileHeader::<2>::parse(MAGIC, &golden()).unwrap(), header);
        let common: [u8; COMMON_BYTES] = golden()[..COMMON_BYTES].try_into().unwrap();
        assert_eq!(FileHeader::<2>::parse_common(MAGIC, &common).unwrap(), header);
    }

    #[test]
    fn damaged_headers_are_refused_with_the_matching_error() {
        let g = golden();
        assert!(matches!(FileHeader::<2>::parse(MAGIC, &g[..100]), Err(HeaderError::Truncated { len: 100, .. })));
        assert!(matches!(FileHeader::<2>::parse(b"PRSCOTHR", &g), Err(HeaderError::Magic { .. })));
        let mut b = g;
        b[8] = 2;
        assert_eq!(FileHeader::<2>::parse(MAGIC, &b), Err(HeaderError::Format { found: 2 }));
        for offset in 12..28 {
            let mut b = g;
            b[offset] ^= 0x01;
            assert!(matches!(FileHeader::<2>::parse(MAGIC, &b), Err(HeaderError::Checksum { .. })), "byte {offset}");
        }
        let mut b = g;
        b[40] = 7;
        assert_eq!(FileHeader::<2>::parse(MAGIC, &b), Err(HeaderError::NonZero { offset: 40, value: 7 }));
        // Bytes past the common line belong to the file kind.
        let mut b = g;
        b[64] = 7;
        assert!(FileHeader::<2>::parse(MAGIC, &b).is_ok());
    }
}
