//! Why sealing, opening or loading keys failed.

use std::path::PathBuf;

/// A failure of sealing or opening, or of loading what they need at start-up.
/// An open that fails returns no plaintext: the frame's bytes are zeroed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// A key file could not be read.
    #[error("cannot read key file {path}: {source}")]
    KeyFileRead {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A key file that group or others may read.
    #[error(
        "key file {path} has mode {mode:#o}, readable by group or others; refusing to use it: run `chmod 600 {path}`"
    )]
    KeyFilePermissions {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A key folder or key file could not be created.
    #[error("cannot {what} {path}: {source}")]
    KeyCreate {
        /// What was being done.
        what: &'static str,
        /// The folder or file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A key file of the wrong length.
    #[error("key file {path} holds {len} bytes; an AES-256 key file holds exactly 32 raw bytes")]
    KeyFileLength {
        /// The file.
        path: PathBuf,
        /// Its length.
        len: u64,
    },
    /// A key directory entry whose name is not `<id>.key`.
    #[error("key directory entry {path} is not named <decimal key id>.key; rename or remove it")]
    KeyFileName {
        /// The entry.
        path: PathBuf,
    },
    /// Two keys with one id, too many keys, or none.
    #[error("key ring: {reason}")]
    KeyRing {
        /// What is wrong.
        reason: String,
    },
    /// A frame names a key this node does not hold.
    #[error("frame sealed with key id {key_id}, which this key ring does not hold; install that key file")]
    UnknownKey {
        /// The key id in the frame.
        key_id: u32,
    },
    /// The epoch file could not be read or written.
    #[error("epoch file {path}: {source}")]
    EpochIo {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The epoch file exists but is damaged.
    #[error("epoch file {path} is damaged ({reason}); refusing to guess an epoch, since a reused epoch reuses nonces: restore the file or give this node a new node id")]
    EpochCorrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: &'static str,
    },
    /// Every epoch has been used.
    #[error("epoch file {path} is at the last epoch; rotate to a new key and node id")]
    EpochExhausted {
        /// The file.
        path: PathBuf,
    },
    /// The per-epoch nonce counter ran out.
    #[error("node {node} epoch {epoch}: all 2^48 nonces of this epoch are used; restart to bump the epoch")]
    NoncesExhausted {
        /// Node id.
        node: u16,
        /// Epoch.
        epoch: u32,
    },
    /// The buffer cannot hold the frame.
    #[error("sealing {len} bytes needs {need} bytes of buffer, the buffer has {cap}")]
    NoRoom {
        /// Plaintext length.
        len: usize,
        /// Bytes needed.
        need: usize,
        /// Buffer length.
        cap: usize,
    },
    /// A value too large to seal into one frame.
    #[error("value of {len} bytes exceeds the {max}-byte frame limit; store smaller values")]
    TooLarge {
        /// Plaintext length.
        len: usize,
        /// Largest plaintext.
        max: usize,
    },
    /// Bytes too short to be a sealed frame.
    #[error("sealed frame of {len} bytes is shorter than the {min}-byte trailer")]
    FrameTooShort {
        /// Frame length.
        len: usize,
        /// Trailer length.
        min: usize,
    },
    /// The frame does not authenticate: it was damaged, tampered with, or belongs
    /// to another key hash, version or layout.
    #[error("sealed frame of {len} bytes (key id {key_id}) failed authentication: damaged, tampered with, or bound to another key, version or layout")]
    Authentication {
        /// Frame length.
        len: usize,
        /// Key id in the frame.
        key_id: u32,
    },
    /// The crypto library refused an operation it should accept.
    #[error("AES-256-GCM {operation} failed in the crypto library")]
    Crypto {
        /// What was attempted.
        operation: &'static str,
    },
}
