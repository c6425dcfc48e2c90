//! The immediate a holder acknowledges a log entry with: [`ACK_FLAG`], a status in
//! bits 24..31 and the entry's sequence in bits 0..24. The holder sends it, the writer
//! reads it.

/// Set in the immediate of an acknowledgement (entries' immediates are sequence
/// numbers below 2^31).
pub const ACK_FLAG: u32 = 1 << 31;
/// Acknowledgement status: persisted.
pub const ACK_OK: u32 = 0;
/// Acknowledgement status: the entry was malformed or inconsistent, and skipped.
pub const ACK_REFUSED: u32 = 1;
/// Acknowledgement status: the store has no room for the fragment.
pub const ACK_FULL: u32 = 2;
/// Acknowledgement status: the holder has fenced the writer (`fence.rs`) and the
/// entry touched a write it keeps frozen: a fragment of it was refused, or (an outcome
/// entry) the rollback of one it holds was not taken (the rest of the entry was). It
/// does not say which: a writer whose notice carried several rollbacks sends each
/// again alone (`replicate.rs`, [`read_answer`](super::replicate::read_answer)), and
/// counts this holder as lacking the fragment of each answered `ACK_OK`; one answered
/// `ACK_FENCED` alone is frozen there, and the order decides it (`holders_rule.rs`).
pub const ACK_FENCED: u32 = 3;
