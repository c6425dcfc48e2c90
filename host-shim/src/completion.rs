//! Completions: the 32-byte little-endian entry the DPU app writes into a completion
//! ring ([`CompletionEntry`]), and the per-request [`Completion`] the host hands its
//! caller.
//!
//! ```text
//!  0 sq_index u32   4 count u16   6 status u16
//!  8 version u64
//! 16 detail u32    20 op u8      21 flags u8    22 reserved u16 (0)
//! 24 cq_index u32  28 reserved u32 (0)
//! ```
//! One entry completes `count` requests (1 to [`COMPLETION_RUN_MAX`]): the submission
//! indices `sq_index .. sq_index + count`, every one with the same outcome (status,
//! op, flags, version, detail). The DPU app coalesces consecutive requests whose
//! outcomes are equal (NOPs, requests refused for the same reason, the failures of a
//! restart) into one entry before it publishes them, so a batch of NOPs costs one
//! entry, not one per request. An entry never carries the caller's tag: the host keeps
//! each request's `user_data` and op itself, by submission index, and a completion
//! from the DPU app can only close requests the host has open (see
//! `crate::submitted`).
//!
//! For a GET that completed `Ok`, `detail` is the value's length and `version` the
//! value's version; the value is at [`crate::config::VALUE_OFFSET`] in the GET's
//! buffer, which the DPU app leaves held by the host (`Host`, same generation) instead
//! of freeing it, whatever the status (the host takes it back with
//! `QueuePair::take_value`). A GET's `flags` may carry [`FLAG_NEWER_PENDING`]: the DPU
//! app saw a newer write of the key still being decided, so the value must not refill
//! the cache (the slot would claim a freshness the value may lose any moment). A PUT's
//! (or DELETE's) `flags` may carry [`FLAG_LEASED`]: the write's key held a predictor
//! lease when the write arrived, so the write found its directory marks already
//! placed. A GET
//! that found a deletion completes `NotFound` with the deletion's version. For
//! `NotDurable`, `detail` is the number of holders the write reached.
//!
//! `cq_index` is the completion ring index the entry was written at: a restarted DPU
//! app uses it with `sq_index` and `count` to find which taken requests its
//! predecessor completed (a slot whose `cq_index` is not the one expected at its
//! position was never written, or is older).

use crate::config::{COMPLETION_BYTES, COMPLETION_RUN_MAX};
use crate::status::Status;

/// Byte ranges of the fields.
pub mod field {
    use std::ops::Range;
    /// Submission index of the first request completed.
    pub const SQ_INDEX: Range<usize> = 0..4;
    /// Requests completed, from `SQ_INDEX` on.
    pub const COUNT: Range<usize> = 4..6;
    /// Status code.
    pub const STATUS: Range<usize> = 6..8;
    /// Version the write was given.
    pub const VERSION: Range<usize> = 8..16;
    /// Error detail (the offending value, truncated), or a GET's value length.
    pub const DETAIL: Range<usize> = 16..20;
    /// Op code of the requests.
    pub const OP: usize = 20;
    /// Flags (see [`super::FLAG_NEWER_PENDING`], [`super::FLAG_LEASED`]).
    pub const FLAGS: usize = 21;
    /// Reserved (0).
    pub const RESERVED0: Range<usize> = 22..24;
    /// Completion ring index the entry was written at.
    pub const CQ_INDEX: Range<usize> = 24..28;
    /// Reserved (0).
    pub const RESERVED1: Range<usize> = 28..32;
}

/// GET completion flag: a newer write of the key was seen still being decided; do not
/// refill the cache from this value (serve it, and ask again next time).
pub const FLAG_NEWER_PENDING: u8 = 1;

/// Write (PUT or DELETE) completion flag: the write's key held a predictor lease when
/// the write arrived, so some of its directory marks were already placed and the write
/// only upgraded them (what the predictor saves; a figure, nothing to act on).
pub const FLAG_LEASED: u8 = 2;

/// One completion ring entry: `count` consecutive requests with one outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompletionEntry {
    /// Submission index of the first request.
    pub sq_index: u32,
    /// Requests completed: `sq_index .. sq_index + count` (1..=[`COMPLETION_RUN_MAX`]).
    pub count: u16,
    /// Outcome.
    pub status: Status,
    /// Op code byte of the requests (0 if refused before decoding).
    pub op: u8,
    /// Flags: [`FLAG_NEWER_PENDING`] on a GET, [`FLAG_LEASED`] on a write.
    pub flags: u8,
    /// Version assigned to a write, or of the value a GET read (0 if none).
    pub version: u64,
    /// For errors, the offending value; for a GET that completed `Ok`, the value's
    /// length.
    pub detail: u32,
    /// Completion ring index the entry was written at (set by the poster).
    pub cq_index: u32,
}

/// Why an entry's bytes were refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BadEntry {
    /// `count` is 0 or above [`COMPLETION_RUN_MAX`].
    #[error("completion entry count {0} is outside 1..={COMPLETION_RUN_MAX}")]
    Count(u16),
    /// A reserved byte is not zero.
    #[error("completion entry reserved bytes are not zero")]
    Reserved,
}

fn u32_at(b: &[u8; COMPLETION_BYTES], r: std::ops::Range<usize>) -> u32 {
    u32::from_le_bytes(b[r].try_into().expect("4 bytes"))
}
fn u16_at(b: &[u8; COMPLETION_BYTES], r: std::ops::Range<usize>) -> u16 {
    u16::from_le_bytes(b[r].try_into().expect("2 bytes"))
}

impl CompletionEntry {
    /// An entry completing the one request `sq_index` (the poster sets `cq_index`).
    pub fn one(sq_index: u32, status: Status, op: u8) -> Self {
        Self { sq_index, count: 1, status, op, flags: 0, version: 0, detail: 0, cq_index: 0 }
    }

    /// Whether `next` completes the request right after this entry's last one with
    /// the same outcome, so that this entry can cover it too (up to
    /// [`COMPLETION_RUN_MAX`] requests).
    pub fn extends_to(&self, next: &Self) -> bool {
        u32::from(self.count) < COMPLETION_RUN_MAX
            && next.count == 1
            && next.sq_index == self.sq_index.wrapping_add(self.count.into())
            && (next.status, next.op, next.flags, next.version, next.detail)
                == (self.status, self.op, self.flags, self.version, self.detail)
    }

    /// Writes the entry's bytes.
    pub fn emit(&self, out: &mut [u8; COMPLETION_BYTES]) {
        out[field::SQ_INDEX].copy_from_slice(&self.sq_index.to_le_bytes());
        out[field::COUNT].copy_from_slice(&self.count.to_le_bytes());
        out[field::STATUS].copy_from_slice(&(self.status as u16).to_le_bytes());
        out[field::VERSION].copy_from_slice(&self.version.to_le_bytes());
        out[field::DETAIL].copy_from_slice(&self.detail.to_le_bytes());
        out[field::OP] = self.op;
        out[field::FLAGS] = self.flags;
        out[field::RESERVED0].fill(0);
        out[field::CQ_INDEX].copy_from_slice(&self.cq_index.to_le_bytes());
        out[field::RESERVED1].fill(0);
    }

    /// Parses bytes that came from the DPU app (a private copy): a count outside
    /// 1..=[`COMPLETION_RUN_MAX`] or a reserved byte that is not 0 is refused; unknown
    /// status codes decode to [`Status::Unknown`]. Whether the requests it names are
    /// open is for the host's table to say.
    pub fn parse_checked(b: &[u8; COMPLETION_BYTES]) -> Result<Self, BadEntry> {
        let count = u16_at(b, field::COUNT);
        if count == 0 || u32::from(count) > COMPLETION_RUN_MAX {
            return Err(BadEntry::Count(count));
        }
        if u16_at(b, field::RESERVED0) != 0 || u32_at(b, field::RESERVED1) != 0 {
            return Err(BadEntry::Reserved);
        }
        Ok(Self {
            sq_index: u32_at(b, field::SQ_INDEX),
            count,
            status: Status::from_u16(u16_at(b, field::STATUS)),
            version: u64::from_le_bytes(b[field::VERSION].try_into().expect("8 bytes")),
            detail: u32_at(b, field::DETAIL),
            op: b[field::OP],
            flags: b[field::FLAGS],
            cq_index: u32_at(b, field::CQ_INDEX),
        })
    }
}

/// One request's completion, as the host hands it to its caller: the entry's outcome
/// with the request's own submission index, and the tag and op the host recorded
/// when it submitted the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The request's tag (the host's own record, never read from the DPU app).
    pub user_data: u64,
    /// Outcome.
    pub status: Status,
    /// Op code byte of the request (the host's own record).
    pub op: u8,
    /// Flags: [`FLAG_NEWER_PENDING`] on a GET, [`FLAG_LEASED`] on a write.
    pub flags: u8,
    /// The request's free-running submission index.
    pub sq_index: u32,
    /// Version assigned to a write, or of the value a GET read (0 if none).
    pub version: u64,
    /// For errors, the offending value; for a GET that completed `Ok`, the value's
    /// length.
    pub detail: u32,
    /// Completion ring index of the entry that completed it.
    pub cq_index: u32,
}

impl Completion {
    /// Whether a GET's value may refill the cache (no newer write was seen pending).
    pub fn may_refill(&self) -> bool {
        self.flags & FLAG_NEWER_PENDING == 0
    }

    /// Whether a write's key held a predictor lease when it arrived
    /// ([`FLAG_LEASED`]).
    pub fn leased(&self) -> bool {
        self.flags & FLAG_LEASED != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]

        /// Any 32 bytes (a hostile or newer DPU app): parsing never panics; what it
        /// accepts names 1..=COMPLETION_RUN_MAX requests and survives emit and parse
        /// again unchanged.
        #[test]
        fn random_bytes_never_panic_and_what_is_accepted_is_stable(
            raw in proptest::collection::vec(proptest::prelude::any::<u8>(), COMPLETION_BYTES),
            count in 0u16..80,
            zero_reserved in proptest::prelude::any::<bool>(),
        ) {
            let mut b: [u8; COMPLETION_BYTES] = raw.try_into().expect("32 bytes");
            // Steer half the cases past the checks, so the accepted side runs too.
            if zero_reserved {
                b[field::COUNT].copy_from_slice(&count.to_le_bytes());
                b[field::RESERVED0].fill(0);
                b[field::RESERVED1].fill(0);
            }
            match CompletionEntry::parse_checked(&b) {
                Ok(e) => {
                    proptest::prop_assert!(e.count >= 1 && u32::from(e.count) <= COMPLETION_RUN_MAX);
                    let mut again = [0u8; COMPLETION_BYTES];
                    e.emit(&mut again);
                    proptest::prop_assert_eq!(CompletionEntry::parse_checked(&again), Ok(e));
                }
                Err(BadEntry::Count(c)) => proptest::prop_assert!(c == 0 || u32::from(c) > COMPLETION_RUN_MAX),
                Err(BadEntry::Reserved) => {}
            }
        }
    }

    fn entry() -> CompletionEntry {
        CompletionEntry {
            sq_index: 0x1000_0001,
            count: 3,
            status: Status::BadOffset,
            op: 1,
            flags: 1,
            version: 9,
            detail: 0xabcd,
            cq_index: 3,
        }
    }

    #[test]
    fn golden_bytes_round_trip() {
        let mut b = [0xffu8; 32];
        entry().emit(&mut b);
        assert_eq!(
            b,
            [
                1, 0, 0, 0x10, 3, 0, 5, 0, // sq_index, count, status
                9, 0, 0, 0, 0, 0, 0, 0, // version
                0xcd, 0xab, 0, 0, 1, 1, 0, 0, // detail, op, flags, reserved
                3, 0, 0, 0, 0, 0, 0, 0, // cq_index, reserved
            ]
        );
        assert_eq!(CompletionEntry::parse_checked(&b), Ok(entry()));
    }

    #[test]
    fn counts_and_reserved_bytes_are_checked() {
        let mut b = [0u8; 32];
        entry().emit(&mut b);
        for (count, ok) in
            [(0u16, false), (1, true), (COMPLETION_RUN_MAX as u16, true), (COMPLETION_RUN_MAX as u16 + 1, false)]
        {
            let mut c = b;
            c[field::COUNT].copy_from_slice(&count.to_le_bytes());
            assert_eq!(CompletionEntry::parse_checked(&c).is_ok(), ok, "count {count}");
        }
        for at in [22, 23, 28, 31] {
            let mut c = b;
            c[at] = 1;
            assert_eq!(CompletionEntry::parse_checked(&c), Err(BadEntry::Reserved), "byte {at}");
        }
    }

    #[test]
    fn only_the_next_request_with_the_same_outcome_extends_an_entry() {
        let run = CompletionEntry { count: 1, ..entry() };
        let next = CompletionEntry { sq_index: run.sq_index + 1, ..run };
        assert!(run.extends_to(&next));
        assert!(!run.extends_to(&CompletionEntry { sq_index: run.sq_index + 2, ..next }), "a gap");
        assert!(!run.extends_to(&run), "the same request");
        assert!(!run.extends_to(&CompletionEntry { version: 10, ..next }), "another version");
        assert!(!run.extends_to(&CompletionEntry { status: Status::Ok, ..next }), "another status");
        assert!(!run.extends_to(&CompletionEntry { count: 2, ..next }), "only single requests are added");
        let full = CompletionEntry { count: COMPLETION_RUN_MAX as u16, ..run };
        let after = CompletionEntry { sq_index: full.sq_index.wrapping_add(COMPLETION_RUN_MAX), ..next };
        assert!(!full.extends_to(&after), "at most COMPLETION_RUN_MAX requests");
        let wrap = CompletionEntry { sq_index: u32::MAX, ..run };
        assert!(wrap.extends_to(&CompletionEntry { sq_index: 0, ..next }), "indices wrap");
    }
}
