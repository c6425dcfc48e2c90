//! The fragment header: a checked view over the 40 bytes that precede every
//! fragment on the wire and in a peer's fragment log.
//!
//! All integers are little-endian. The header carries two CRC32C checksums: one of
//! its own first 36 bytes, so that a damaged header is rejected before any of its
//! lengths is trusted, and one of the fragment payload, so that a damaged fragment
//! is caught before it is fed to the decoder.
//!
//! ```text
//!  0..4   magic "PRFG"        16..24 version (u64)       32..36 payload CRC32C
//!  4      format (1)          24..28 frame_len (u32)     36..40 header CRC32C of 0..36
//!  5 k    6 m    7 index      28..32 fragment_len (u32)
//!  8..16  key hash (u64)
//! ```

use super::layout::StripeLayout;
use super::StripeError;

/// Bytes of a fragment header. Defined with the layout, which sizes the side buffer's
/// headers from it; the fields below fill it exactly.
pub use super::layout::HEADER_LEN;
/// Magic number, the bytes "PRFG" read as a little-endian u32.
pub const MAGIC: u32 = u32::from_le_bytes(*b"PRFG");
/// Header format this build writes and reads.
pub const FORMAT: u8 = 1;

/// Byte ranges of the header fields.
pub mod field {
    use std::ops::Range;
    /// Magic number.
    pub const MAGIC: Range<usize> = 0..4;
    /// Format version.
    pub const FORMAT: usize = 4;
    /// Data fragments of the code.
    pub const K: usize = 5;
    /// Parity fragments of the code.
    pub const M: usize = 6;
    /// This fragment's index: data 0..k, parity k..k+m.
    pub const INDEX: usize = 7;
    /// Hash of the key the value belongs to.
    pub const KEY_HASH: Range<usize> = 8..16;
    /// Version of the write.
    pub const VERSION: Range<usize> = 16..24;
    /// Length of the sealed frame the stripe carries.
    pub const FRAME_LEN: Range<usize> = 24..28;
    /// Length of every fragment of the stripe.
    pub const FRAGMENT_LEN: Range<usize> = 28..32;
    /// CRC32C of this fragment's payload.
    pub const PAYLOAD_CRC: Range<usize> = 32..36;
    /// CRC32C of bytes 0..36.
    pub const HEADER_CRC: Range<usize> = 36..40;
}

const _: () = assert!(field::HEADER_CRC.end == HEADER_LEN, "the fields fill the header");

/// A view of a fragment header over `T`'s bytes.
#[derive(Clone, Copy, Debug)]
pub struct FragmentHeader<T: AsRef<[u8]>> {
    buffer: T,
}

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes(b.try_into().expect("field is 4 bytes"))
}

fn le64(b: &[u8]) -> u64 {
    u64::from_le_bytes(b.try_into().expect("field is 8 bytes"))
}

impl<T: AsRef<[u8]>> FragmentHeader<T> {
    /// A view without any check; accessors panic if `buffer` is shorter than
    /// [`HEADER_LEN`]. Use [`Self::new_checked`] for bytes from a peer.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// A view of bytes that came from anywhere: checks length, magic, format,
    /// the header checksum, and that every field is in range and agrees with the
    /// others (see [`Self::check`]).
    pub fn new_checked(buffer: T) -> Result<Self, StripeError> {
        let header = Self::new_unchecked(buffer);
        header.check()?;
        Ok(header)
    }

    /// Checks what [`Self::new_checked`] promises.
    pub fn check(&self) -> Result<(), StripeError> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(StripeError::Truncated { len: b.len(), need: HEADER_LEN });
        }
        if self.magic() != MAGIC {
            return Err(StripeError::Magic { found: self.magic(), expected: MAGIC });
        }
        if self.format() != FORMAT {
            return Err(StripeError::Format { found: self.format(), supported: FORMAT });
        }
        let computed = crc32c::crc32c(&b[..field::HEADER_CRC.start]);
        if computed != self.header_crc() {
            return Err(StripeError::HeaderChecksum { stored: self.header_crc(), computed });
        }
        let layout = StripeLayout::new(self.k(), self.m(), self.frame_len()).map_err(|e| match e {
            StripeError::FrameTooLarge { .. } => StripeError::Field {
                field: "frame_len",
                value: self.frame_len() as u64,
                reason: "larger than any stripe",
            },
            _ => StripeError::Field { field: "k", value: self.k() as u64, reason: "k and m out of range" },
        })?;
        if self.index() >= layout.fragments() {
            return Err(StripeError::Field { field: "index", value: self.index() as u64, reason: "not below k + m" });
        }
        if self.fragment_len() != layout.fragment_len() {
            return Err(StripeError::Field {
                field: "fragment_len",
                value: self.fragment_len() as u64,
                reason: "does not match frame_len and k",
            });
        }
        Ok(())
    }

    /// The underlying bytes.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Magic number.
    pub fn magic(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::MAGIC])
    }

    /// Format version.
    pub fn format(&self) -> u8 {
        self.buffer.as_ref()[field::FORMAT]
    }

    /// Data fragments of the code.
    pub fn k(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::K])
    }

    /// Parity fragments of the code.
    pub fn m(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::M])
    }

    /// This fragment's index.
    pub fn index(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::INDEX])
    }

    /// Hash of the value's key.
    pub fn key_hash(&self) -> u64 {
        le64(&self.buffer.as_ref()[field::KEY_HASH])
    }

    /// Version of the write.
    pub fn version(&self) -> u64 {
        le64(&self.buffer.as_ref()[field::VERSION])
    }

    /// Sealed frame length.
    pub fn frame_len(&self) -> usize {
        le32(&self.buffer.as_ref()[field::FRAME_LEN]) as usize
    }

    /// Fragment length.
    pub fn fragment_len(&self) -> usize {
        le32(&self.buffer.as_ref()[field::FRAGMENT_LEN]) as usize
    }

    /// Payload checksum.
    pub fn payload_crc(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::PAYLOAD_CRC])
    }

    /// Header checksum.
    pub fn header_crc(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::HEADER_CRC])
    }

    /// The stripe layout the header describes (valid once checked).
    pub fn layout(&self) -> Result<StripeLayout, StripeError> {
        StripeLayout::new(self.k(), self.m(), self.frame_len())
    }

    /// Checks `payload` against the header's length and checksum.
    pub fn verify_payload(&self, payload: &[u8]) -> Result<(), StripeError> {
        let index = self.index() as u8;
        if payload.len() != self.fragment_len() {
            return Err(StripeError::PayloadLength { index, len: payload.len(), expected: self.fragment_len() });
        }
        let computed = crc32c::crc32c(payload);
        if computed != self.payload_crc() {
            return Err(StripeError::PayloadChecksum { index, stored: self.payload_crc(), computed });
        }
        Ok(())
    }
}

/// The decoded fields of a fragment header, what [`HeaderRepr::emit`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderRepr {
    /// Stripe shape.
    pub layout: StripeLayout,
    /// Fragment index, below `layout.fragments()`.
    pub index: u8,
    /// Hash of the value's key.
    pub key_hash: u64,
    /// Version of the write.
    pub version: u64,
    /// CRC32C of the fragment payload.
    pub payload_crc: u32,
}

impl HeaderRepr {
    /// Reads a checked header.
    pub fn parse<T: AsRef<[u8]>>(header: &FragmentHeader<T>) -> Result<Self, StripeError> {
        header.check()?;
        Ok(Self {
            layout: header.layout()?,
            index: header.index() as u8,
            key_hash: header.key_hash(),
            version: header.version(),
            payload_crc: header.payload_crc(),
        })
    }

    /// Writes the header, checksum included, into the first [`HEADER_LEN`] bytes
    /// of `buffer`; panics (programmer error) if it is shorter.
    pub fn emit(&self, buffer: &mut [u8]) {
        let b = &mut buffer[..HEADER_LEN];
        b[field::MAGIC].copy_from_slice(&MAGIC.to_le_bytes());
        b[field::FORMAT] = FORMAT;
        b[field::K] = self.layout.k() as u8;
        b[field::M] = self.layout.m() as u8;
        b[field::INDEX] = self.index;
        b[field::KEY_HASH].copy_from_slice(&self.key_hash.to_le_bytes());
        b[field::VERSION].copy_from_slice(&self.version.to_le_bytes());
        b[field::FRAME_LEN].copy_from_slice(&(self.layout.frame_len() as u32).to_le_bytes());
        b[field::FRAGMENT_LEN].copy_from_slice(&(self.layout.fragment_len() as u32).to_le_bytes());
        b[field::PAYLOAD_CRC].copy_from_slice(&self.payload_crc.to_le_bytes());
        let crc = crc32c::crc32c(&b[..field::HEADER_CRC.start]);
        b[field::HEADER_CRC].copy_from_slice(&crc.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repr() -> HeaderRepr {
        HeaderRepr {
            layout: StripeLayout::new(4, 2, 1000).unwrap(),
            index: 5,
            key_hash: 0x0123_4567_89ab_cdef,
            version: 42,
            payload_crc: 0xdead_beef,
        }
    }

    /// The exact bytes of one header, fixed forever for format 1. The header
    /// checksum is CRC32C (Castagnoli) of bytes 0..36.
    const GOLDEN: [u8; HEADER_LEN] = [
        b'P', b'R', b'F', b'G', 1, 4, 2, 5, // magic, format, k, m, index
        0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01, // key hash
        42, 0, 0, 0, 0, 0, 0, 0, // version
        0xe8, 0x03, 0, 0, // frame_len 1000
        0x00, 0x01, 0, 0, // fragment_len 256
        0xef, 0xbe, 0xad, 0xde, // payload crc
        0x00, 0x00, 0x00, 0x00, // header crc, patched below
    ];

    fn golden() -> [u8; HEADER_LEN] {
        let mut g = GOLDEN;
        let crc = crc32c::crc32c(&g[..36]);
        g[36..].copy_from_slice(&crc.to_le_bytes());
        g
    }

    #[test]
    fn emit_writes_the_golden_bytes() {
        let mut buf = [0u8; HEADER_LEN];
        repr().emit(&mut buf);
        assert_eq!(buf, golden());
    }

    #[test]
    fn golden_header_crc_is_the_castagnoli_checksum() {
        // CRC32C check value from RFC 3720 B.4: 32 bytes of zeros.
        assert_eq!(crc32c::crc32c(&[0u8; 32]), 0x8a91_36aa);
        let g = golden();
        assert_eq!(u32::from_le_bytes(g[36..40].try_into().unwrap()), crc32c::crc32c(&GOLDEN[..36]));
    }

    #[test]
    fn parse_reads_the_golden_bytes() {
        let g = golden();
        let h = FragmentHeader::new_checked(&g[..]).unwrap();
        assert_eq!(HeaderRepr::parse(&h).unwrap(), repr());
        assert_eq!((h.k(), h.m(), h.index(), h.fragment_len()), (4, 2, 5, 256));
    }

    #[test]
    fn every_single_bit_flip_is_rejected() {
        let g = golden();
        for bit in 0..HEADER_LEN * 8 {
            let mut b = g;
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(FragmentHeader::new_checked(&b[..]).is_err(), "bit {bit} flipped still parses");
        }
    }

    #[test]
    fn malformed_headers_give_the_matching_error() {
        let g = golden();
        assert_eq!(
            FragmentHeader::new_checked(&g[..39]).unwrap_err(),
            StripeError::Truncated { len: 39, need: HEADER_LEN }
        );
        let mut b = g;
        b[0] = b'X';
        assert!(matches!(FragmentHeader::new_checked(&b[..]), Err(StripeError::Magic { .. })));
        let mut b = g;
        b[4] = 2;
        assert!(matches!(FragmentHeader::new_checked(&b[..]), Err(StripeError::Format { found: 2, .. })));
        // Fields that are wrong but carry a correct header checksum.
        let reseal = |mut b: [u8; HEADER_LEN]| {
            let crc = crc32c::crc32c(&b[..36]);
            b[36..].copy_from_slice(&crc.to_le_bytes());
            b
        };
        let mut b = g;
        b[field::INDEX] = 6;
        let err = FragmentHeader::new_checked(&reseal(b)[..]).unwrap_err();
        assert!(matches!(err, StripeError::Field { field: "index", .. }), "{err}");
        let mut b = g;
        b[field::FRAGMENT_LEN.start] = 0x40;
        let err = FragmentHeader::new_checked(&reseal(b)[..]).unwrap_err();
        assert!(matches!(err, StripeError::Field { field: "fragment_len", .. }), "{err}");
        let mut b = g;
        b[field::K] = 0;
        let err = FragmentHeader::new_checked(&reseal(b)[..]).unwrap_err();
        assert!(matches!(err, StripeError::Field { field: "k", .. }), "{err}");
    }

    #[test]
    fn payload_is_checked_for_length_and_checksum() {
        let payload = vec![7u8; 256];
        let mut r = repr();
        r.payload_crc = crc32c::crc32c(&payload);
        let mut buf = [0u8; HEADER_LEN];
        r.emit(&mut buf);
        let h = FragmentHeader::new_checked(&buf[..]).unwrap();
        h.verify_payload(&payload).unwrap();
        assert!(matches!(h.verify_payload(&payload[..255]), Err(StripeError::PayloadLength { .. })));
        let mut bad = payload.clone();
        bad[100] ^= 0x10;
        assert!(matches!(h.verify_payload(&bad), Err(StripeError::PayloadChecksum { index: 5, .. })));
    }
}
