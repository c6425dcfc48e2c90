//! Sealing: AES-256-GCM encryption of values in place in their arena buffers.
//!
//! A sealed frame is the ciphertext where the plaintext was, followed by a
//! 32-byte trailer (see [`frame`]): the 16-byte tag, the id of the key that
//! sealed it, and the 12-byte nonce. Nonces are unique by construction, never
//! random: node id (16 bits), key epoch (32 bits, bumped and persisted at every
//! start by [`epoch`]) and a per-epoch counter (48 bits). The associated data
//! binds the key hash, the version and the stripe layout, so a frame moved to
//! another key, version or layout fails to open.
//!
//! Backends ([`aead`]): ring's VAES-AVX2 AES-GCM on x86-64 CPUs with VAES and
//! no AVX-512, AWS-LC (aws-lc-rs) everywhere else (AVX-512 VAES or AES-NI on
//! x86-64, ARMv8 AES/PMULL on aarch64); chosen per CPU by measured speed.

pub mod aead;
pub mod binding;
pub mod epoch;
mod error;
pub mod frame;
pub mod keys;
pub mod nonce;
pub mod sealer;

pub use aead::AeadBackend;
pub use binding::{key_hash, Binding};
pub use epoch::bump_epoch;
pub use error::SealError;
pub use frame::{FRAME_OVERHEAD, TAG_LEN};
pub use keys::{KeyId, KeyRing};
pub use nonce::NonceSequence;
pub use sealer::{open_in_place, Sealer};
