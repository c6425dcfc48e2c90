//! The sealed frame: ciphertext in place of the plaintext, then a 32-byte trailer.
//!
//! ```text
//!  0..n        ciphertext (n = plaintext length)
//!  n..n+16     GCM tag
//!  n+16..n+20  key id (u32 LE)
//!  n+20..n+32  nonce: node id (u16 LE), epoch (u32 LE), counter (48-bit LE)
//! ```
//!
//! A trailer rather than a header, so that sealing needs room only after the
//! value and never moves it.

use super::nonce::NONCE_LEN;

/// Bytes of the GCM tag.
pub const TAG_LEN: usize = 16;
/// Bytes a sealed frame adds to its plaintext.
pub const FRAME_OVERHEAD: usize = TAG_LEN + 4 + NONCE_LEN;

const _: () = assert!(FRAME_OVERHEAD == 32);

/// Byte ranges of the trailer, relative to the trailer's start (the frame's
/// length minus [`FRAME_OVERHEAD`]).
pub mod field {
    use std::ops::Range;
    /// GCM tag.
    pub const TAG: Range<usize> = 0..16;
    /// Key id.
    pub const KEY_ID: Range<usize> = 16..20;
    /// Nonce.
    pub const NONCE: Range<usize> = 20..32;
}
