//! The crate's one error type: what failed, with what input, and what to do.

use std::path::PathBuf;

/// Everything that can go wrong when building, loading or saving a model, or
/// reading a trace.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// A configuration field is out of range.
    #[error("invalid model configuration: {field} = {value}, expected {expected}")]
    InvalidConfig {
        /// The offending field.
        field: &'static str,
        /// Its value as given.
        value: String,
        /// The accepted range.
        expected: &'static str,
    },
    /// A model file is shorter than its header or than the length its header states.
    #[error("model file truncated: {needed} bytes needed, {actual} present; re-save or re-copy the file")]
    Truncated {
        /// Bytes the file must have.
        needed: usize,
        /// Bytes it has.
        actual: usize,
    },
    /// The bytes are not a Prescient model file.
    #[error("not a Prescient model file (magic {found:02x?}); pass a file written by `prescient-model train`")]
    BadMagic {
        /// The first eight bytes found.
        found: [u8; 8],
    },
    /// A model file of a format version this build cannot read.
    #[error("model file format version {found} is not supported (this build reads version {supported}); retrain with this build")]
    UnsupportedVersion {
        /// Version in the file.
        found: u32,
        /// Version this build reads and writes.
        supported: u32,
    },
    /// The checksum over the file does not match: it was corrupted.
    #[error("model file corrupted: checksum {found:#010x} stored, {computed:#010x} computed; re-copy or retrain it")]
    ChecksumMismatch {
        /// Checksum stored in the header.
        found: u32,
        /// Checksum of the bytes present.
        computed: u32,
    },
    /// A model file whose checksum is right but whose contents are inconsistent.
    #[error("model file inconsistent: {what}; it was not written by this crate, retrain it")]
    Malformed {
        /// What is wrong.
        what: String,
    },
    /// Reading or writing a file failed.
    #[error("cannot {action} {path}: {source}")]
    Io {
        /// "read" or "write".
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A trace line could not be parsed.
    #[error("trace {path} line {line}: {what}")]
    TraceParse {
        /// The trace file.
        path: PathBuf,
        /// One-based line number.
        line: usize,
        /// What is wrong with the line.
        what: String,
    },
    /// A compressed trace could not be decompressed.
    #[error("trace {path}: zstd decoding failed: {what}")]
    TraceDecode {
        /// The trace file.
        path: PathBuf,
        /// The decoder's message.
        what: String,
    },
}
