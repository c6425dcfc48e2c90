//! Why striping or reconstruction failed.

/// A failure of Reed-Solomon striping, of a fragment header check, or of a
/// reconstruction. No variant ever comes with output bytes: a caller that gets an
/// error has nothing it could mistake for data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StripeError {
    /// The code parameters are out of range.
    #[error("Reed-Solomon({k}, {m}) is not supported: need 1 <= k, k + m <= {max}; pick a smaller code")]
    Shape {
        /// Data fragments asked for.
        k: usize,
        /// Parity fragments asked for.
        m: usize,
        /// Largest k + m.
        max: usize,
    },
    /// A sealed frame is larger than a stripe may carry.
    #[error("sealed frame of {len} bytes exceeds the {max}-byte stripe limit; store smaller values")]
    FrameTooLarge {
        /// Frame length.
        len: usize,
        /// Limit.
        max: usize,
    },
    /// A buffer handed in is too small for what the stripe needs.
    #[error("{what} buffer of {len} bytes is too small: the stripe needs {need} bytes")]
    BufferTooSmall {
        /// Which buffer.
        what: &'static str,
        /// Its length.
        len: usize,
        /// Length needed.
        need: usize,
    },
    /// Bytes too short to hold a fragment header.
    #[error("fragment header truncated: {len} bytes, a header is {need}")]
    Truncated {
        /// Bytes given.
        len: usize,
        /// Header length.
        need: usize,
    },
    /// The bytes do not start with the fragment magic.
    #[error("not a fragment header: magic {found:#010x}, expected {expected:#010x}")]
    Magic {
        /// Magic found.
        found: u32,
        /// Magic expected.
        expected: u32,
    },
    /// A header of a format this build does not read.
    #[error(
        "fragment header format {found} is not supported (this build reads format {supported}); upgrade the reader"
    )]
    Format {
        /// Format found.
        found: u8,
        /// Format this build reads.
        supported: u8,
    },
    /// The header's own checksum does not match: the header was damaged.
    #[error("fragment header checksum mismatch (stored {stored:#010x}, computed {computed:#010x}): header damaged, fetch this fragment again or use another")]
    HeaderChecksum {
        /// Checksum in the header.
        stored: u32,
        /// Checksum of the bytes.
        computed: u32,
    },
    /// A header field holds a value no valid header has.
    #[error("fragment header field {field} = {value} is invalid: {reason}")]
    Field {
        /// Field name.
        field: &'static str,
        /// Its value.
        value: u64,
        /// Why it is invalid.
        reason: &'static str,
    },
    /// Fragments of one stripe disagree, or disagree with the decoder's code.
    #[error("fragment {index} is inconsistent with the stripe: its {field} is {found}, expected {expected}; it belongs to another write or code")]
    Inconsistent {
        /// Fragment index (from its header).
        index: u8,
        /// Field that differs.
        field: &'static str,
        /// Value in this fragment.
        found: u64,
        /// Value of the stripe.
        expected: u64,
    },
    /// Two fragments claim the same index.
    #[error("fragment {index} was given twice; pass each fragment once")]
    Duplicate {
        /// Fragment index.
        index: u8,
    },
    /// A fragment's payload does not have the length its header states.
    #[error("fragment {index} payload is {len} bytes, its header says {expected}")]
    PayloadLength {
        /// Fragment index.
        index: u8,
        /// Payload length.
        len: usize,
        /// Length in the header.
        expected: usize,
    },
    /// A fragment's payload does not match its checksum: it was damaged.
    #[error("fragment {index} payload checksum mismatch (stored {stored:#010x}, computed {computed:#010x}): fragment damaged, fetch it again or use another")]
    PayloadChecksum {
        /// Fragment index.
        index: u8,
        /// Checksum in the header.
        stored: u32,
        /// Checksum of the payload.
        computed: u32,
    },
    /// Fewer fragments than the code needs.
    #[error("{have} fragments cannot rebuild a Reed-Solomon stripe that needs {need}; fetch more fragments")]
    TooFewFragments {
        /// Usable fragments given.
        have: usize,
        /// Data fragments of the code (k).
        need: usize,
    },
}
