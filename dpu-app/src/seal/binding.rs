//! What a sealed frame is bound to: the associated data of AES-GCM.
//!
//! Binding the hash of the value's key, the write's version and the stripe layout
//! means a frame (or its fragments) copied under another key, replayed as another
//! version, or reassembled with another layout fails authentication.

/// Bytes of the associated data.
pub const AAD_LEN: usize = 24;
/// Format of the associated data; changes if its content ever changes.
const AAD_FORMAT: u8 = 1;

/// The fields a frame is bound to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    /// Hash of the value's key ([`key_hash`]).
    pub key_hash: u64,
    /// Version of the write.
    pub version: u64,
    /// Data fragments of the stripe that will carry the frame.
    pub k: u8,
    /// Parity fragments of that stripe.
    pub m: u8,
    /// The write is a DELETE: its frame carries no value, only the fact of deletion
    /// (bound, so a holder cannot turn a value into a deletion or back).
    pub tombstone: bool,
}

impl Binding {
    /// The associated data for a frame of `frame_len` bytes: format, k, m, flags
    /// (bit 0: tombstone), frame length (u32), key hash (u64), version (u64),
    /// little-endian.
    pub fn aad(&self, frame_len: u32) -> [u8; AAD_LEN] {
        let mut a = [0u8; AAD_LEN];
        a[0] = AAD_FORMAT;
        a[1] = self.k;
        a[2] = self.m;
        a[3] = u8::from(self.tombstone);
        a[4..8].copy_from_slice(&frame_len.to_le_bytes());
        a[8..16].copy_from_slice(&self.key_hash.to_le_bytes());
        a[16..24].copy_from_slice(&self.version.to_le_bytes());
        a
    }
}

/// The 64-bit hash of a key that headers and associated data carry: the first
/// eight bytes of its SHA-256, little-endian. Stable across nodes and builds.
pub fn key_hash(key: &[u8]) -> u64 {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, key);
    u64::from_le_bytes(digest.as_ref()[..8].try_into().expect("SHA-256 has 32 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aad_golden_bytes() {
        let b = Binding { key_hash: 0x1122_3344_5566_7788, version: 3, k: 4, m: 2, tombstone: false };
        assert_eq!(
            b.aad(0x0102),
            [1, 4, 2, 0, 2, 1, 0, 0, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 3, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(Binding { tombstone: true, ..b }.aad(0x0102)[3], 1);
    }

    #[test]
    fn key_hash_is_sha256_prefix() {
        // SHA-256("abc") = ba7816bf 8f01cfea ...
        assert_eq!(key_hash(b"abc"), u64::from_le_bytes([0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea]));
        assert_ne!(key_hash(b"a"), key_hash(b"b"));
    }
}
