//! The completion entry: 32 little-endian bytes the DPU app writes for each request.
//!
//! ```text
//!  0 user_data u64   8 status u16   10 op u8   11 flags u8   12 sq_index u32
//! 16 version u64    24 detail u32  28 cq_index u32
//! ```
//! For a GET that completed `Ok`, `detail` is the value's length and `version` the
//! value's version; the value is at [`crate::config::VALUE_OFFSET`] in the GET's
//! buffer, which the DPU app leaves held by the host (`Host`, same generation) instead
//! of freeing it, whatever the status (the host takes it back with
//! `QueuePair::take_value`). A GET's `flags` may carry [`FLAG_NEWER_PENDING`]: the DPU
//! app saw a newer write of the key still being decided, so the value must not refill
//! the cache (the slot would claim a freshness the value may lose any moment). A GET
//! that found a deletion completes `NotFound` with the deletion's version. For
//! `NotDurable`, `detail` is the number of holders the write reached.
//!
//! `sq_index` is the free-running submission index of the request and `cq_index` the
//! completion ring index the entry was written at: a restarted DPU app uses both to
//! find which taken requests its predecessor completed (a slot whose `cq_index` is not
//! the one expected at its position was never written, or is older).

use crate::config::COMPLETION_BYTES;
use crate::status::Status;

/// Byte ranges of the fields.
pub mod field {
    use std::ops::Range;
    /// Caller's tag.
    pub const USER_DATA: Range<usize> = 0..8;
    /// Status code.
    pub const STATUS: Range<usize> = 8..10;
    /// Op code of the request.
    pub const OP: usize = 10;
    /// Flags (see [`super::FLAG_NEWER_PENDING`]).
    pub const FLAGS: usize = 11;
    /// Submission index.
    pub const SQ_INDEX: Range<usize> = 12..16;
    /// Version the write was given.
    pub const VERSION: Range<usize> = 16..24;
    /// Error detail (the offending value, truncated).
    pub const DETAIL: Range<usize> = 24..28;
    /// Completion ring index the entry was written at.
    pub const CQ_INDEX: Range<usize> = 28..32;
}

/// GET completion flag: a newer write of the key was seen still being decided; do not
/// refill the cache from this value (serve it, and ask again next time).
pub const FLAG_NEWER_PENDING: u8 = 1;

/// A completion's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The request's tag.
    pub user_data: u64,
    /// Outcome.
    pub status: Status,
    /// Op code byte of the request (0 if the request was refused before decoding).
    pub op: u8,
    /// Flags ([`FLAG_NEWER_PENDING`]); 0 for anything but a GET.
    pub flags: u8,
    /// The request's free-running submission index.
    pub sq_index: u32,
    /// Version assigned to a write, or of the value a GET read (0 if none).
    pub version: u64,
    /// For errors, the offending value; for a GET that completed `Ok`, the value's
    /// length.
    pub detail: u32,
    /// Completion ring index the entry was written at (set by the poster).
    pub cq_index: u32,
}

impl Completion {
    /// Writes the completion's bytes.
    pub fn emit(&self, out: &mut [u8; COMPLETION_BYTES]) {
        *out = [0; COMPLETION_BYTES];
        out[field::USER_DATA].copy_from_slice(&self.user_data.to_le_bytes());
        out[field::STATUS].copy_from_slice(&(self.status as u16).to_le_bytes());
        out[field::OP] = self.op;
        out[field::FLAGS] = self.flags;
        out[field::SQ_INDEX].copy_from_slice(&self.sq_index.to_le_bytes());
        out[field::VERSION].copy_from_slice(&self.version.to_le_bytes());
        out[field::DETAIL].copy_from_slice(&self.detail.to_le_bytes());
        out[field::CQ_INDEX].copy_from_slice(&self.cq_index.to_le_bytes());
    }

    /// Whether a GET's value may refill the cache (no newer write was seen pending).
    pub fn may_refill(&self) -> bool {
        self.flags & FLAG_NEWER_PENDING == 0
    }

    /// Parses a completion (unknown status codes decode to [`Status::Unknown`]).
    pub fn parse(b: &[u8; COMPLETION_BYTES]) -> Self {
        let u32_at = |r: std::ops::Range<usize>| u32::from_le_bytes(b[r].try_into().expect("4 bytes"));
        let u64_at = |r: std::ops::Range<usize>| u64::from_le_bytes(b[r].try_into().expect("8 bytes"));
        Self {
            user_data: u64_at(field::USER_DATA),
            status: Status::from_u16(u16::from_le_bytes(b[field::STATUS].try_into().expect("2 bytes"))),
            op: b[field::OP],
            flags: b[field::FLAGS],
            sq_index: u32_at(field::SQ_INDEX),
            version: u64_at(field::VERSION),
            detail: u32_at(field::DETAIL),
            cq_index: u32_at(field::CQ_INDEX),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]

        /// Any 32 bytes (a hostile or newer DPU app): parsing never panics, and a
        /// parsed completion survives emit and parse again unchanged.
        #[test]
        fn random_bytes_never_panic_and_parse_is_stable(
            raw in proptest::collection::vec(proptest::prelude::any::<u8>(), COMPLETION_BYTES),
        ) {
            let b: [u8; COMPLETION_BYTES] = raw.try_into().expect("32 bytes");
            let c = Completion::parse(&b);
            let mut again = [0u8; COMPLETION_BYTES];
            c.emit(&mut again);
            proptest::prop_assert_eq!(Completion::parse(&again), c);
            let _ = c.may_refill();
        }
    }

    #[test]
    fn golden_bytes_round_trip() {
        let c = Completion {
            user_data: 0x0102_0304_0506_0708,
            status: Status::BadOffset,
            op: 1,
            flags: 1,
            sq_index: 0x1000_0001,
            version: 9,
            detail: 0xabcd,
            cq_index: 3,
        };
        let mut b = [0u8; 32];
        c.emit(&mut b);
        assert_eq!(
            b,
            [8, 7, 6, 5, 4, 3, 2, 1, 5, 0, 1, 1, 1, 0, 0, 0x10, 9, 0, 0, 0, 0, 0, 0, 0, 0xcd, 0xab, 0, 0, 3, 0, 0, 0]
        );
        assert_eq!(Completion::parse(&b), c);
    }
}
