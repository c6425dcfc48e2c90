//! Seal and open in place.

use std::path::Path;

use super::binding::Binding;
use super::epoch::bump_epoch;
use super::frame::{field, FRAME_OVERHEAD, TAG_LEN};
use super::keys::{KeyId, KeyRing};
use super::nonce::{NonceSequence, NONCE_LEN};
use super::SealError;
use crate::limits::FRAME_LEN_MAX;

/// Seals values with the ring's current key and this node's nonce sequence.
#[derive(Debug)]
pub struct Sealer {
    keys: KeyRing,
    key_id: KeyId,
    nonces: NonceSequence,
}

impl Sealer {
    /// A sealer over `keys` (which must hold at least one key) and `nonces`.
    pub fn new(keys: KeyRing, nonces: NonceSequence) -> Result<Self, SealError> {
        let key_id = keys.current().ok_or_else(|| SealError::KeyRing { reason: "no key to seal with".into() })?.0;
        Ok(Self { keys, key_id, nonces })
    }

    /// What a node does at start-up: loads the keys of `key_dir`, bumps the epoch
    /// in `epoch_file`, and seals as `node` in the new epoch.
    pub fn start(key_dir: &Path, epoch_file: &Path, node: u16) -> Result<Self, SealError> {
        let keys = KeyRing::load_dir(key_dir)?;
        let epoch = bump_epoch(epoch_file)?;
        Self::new(keys, NonceSequence::new(node, epoch))
    }

    /// The key ring (to open frames with [`open_in_place`]).
    pub fn keys(&self) -> &KeyRing {
        &self.keys
    }

    /// Id of the key new frames are sealed with.
    pub fn key_id(&self) -> KeyId {
        self.key_id
    }

    /// Seals the `len`-byte value at the start of `buf` in place: afterwards
    /// `buf[..len + 32]` is the sealed frame. Returns the frame length.
    pub fn seal_in_place(&mut self, buf: &mut [u8], len: usize, binding: &Binding) -> Result<usize, SealError> {
        let frame_len = len + FRAME_OVERHEAD;
        if frame_len > FRAME_LEN_MAX {
            return Err(SealError::TooLarge { len, max: FRAME_LEN_MAX - FRAME_OVERHEAD });
        }
        if buf.len() < frame_len {
            return Err(SealError::NoRoom { len, need: frame_len, cap: buf.len() });
        }
        let nonce = self.nonces.advance()?;
        let key = self.keys.get(self.key_id).expect("the current key is in the ring");
        let aad = binding.aad(frame_len as u32);
        let (text, trailer) = buf[..frame_len].split_at_mut(len);
        let tag = key.seal(nonce, &aad, text)?;
        trailer[field::TAG].copy_from_slice(&tag);
        trailer[field::KEY_ID].copy_from_slice(&self.key_id.to_le_bytes());
        trailer[field::NONCE].copy_from_slice(&nonce);
        Ok(frame_len)
    }
}

/// Opens the sealed `frame` in place under `binding` and returns the plaintext
/// (the first `frame.len() - 32` bytes of `frame`).
///
/// Any damage to ciphertext, tag, key id or nonce, or a binding other than the
/// one sealed with, is an error; the frame's bytes are then zeroed, so no
/// unauthenticated plaintext is left anywhere.
pub fn open_in_place<'b>(keys: &KeyRing, frame: &'b mut [u8], binding: &Binding) -> Result<&'b mut [u8], SealError> {
    let frame_len = frame.len();
    if frame_len < FRAME_OVERHEAD {
        return Err(SealError::FrameTooShort { len: frame_len, min: FRAME_OVERHEAD });
    }
    if frame_len > FRAME_LEN_MAX {
        return Err(SealError::TooLarge { len: frame_len - FRAME_OVERHEAD, max: FRAME_LEN_MAX - FRAME_OVERHEAD });
    }
    let len = frame_len - FRAME_OVERHEAD;
    let trailer = &frame[len..];
    let key_id = KeyId::from_le_bytes(trailer[field::KEY_ID].try_into().expect("4 bytes"));
    let nonce: [u8; NONCE_LEN] = trailer[field::NONCE].try_into().expect("12 bytes");
    let key = keys.get(key_id).ok_or(SealError::UnknownKey { key_id })?;
    let aad = binding.aad(frame_len as u32);
    // Ciphertext and tag are contiguous: open them as one.
    let sealed = &mut frame[..len + TAG_LEN];
    let ok = key.open(nonce, &aad, sealed).is_some();
    if !ok {
        frame.fill(0);
        return Err(SealError::Authentication { len: frame_len, key_id });
    }
    Ok(&mut frame[..len])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealer() -> Sealer {
        let mut keys = KeyRing::new();
        keys.insert(1, &[0x11; 32]).unwrap();
        Sealer::new(keys, NonceSequence::new(3, 9)).unwrap()
    }

    const B: Binding = Binding { key_hash: 5, version: 6, k: 4, m: 2, tombstone: false };

    #[test]
    fn seal_then_open_restores_the_value_and_trailer_names_key_and_nonce() {
        let mut s = sealer();
        let mut buf = vec![0u8; 100];
        buf[..50].copy_from_slice(&[0x42; 50]);
        let n = s.seal_in_place(&mut buf, 50, &B).unwrap();
        assert_eq!(n, 82);
        assert_ne!(&buf[..50], &[0x42; 50][..], "ciphertext differs from plaintext");
        assert_eq!(&buf[66..70], &1u32.to_le_bytes());
        assert_eq!(&buf[70..82], &[3, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let plain = open_in_place(s.keys(), &mut buf[..n], &B).unwrap();
        assert_eq!(plain, &[0x42; 50][..]);
    }

    #[test]
    fn nonces_never_repeat_within_a_sealer() {
        let mut s = sealer();
        let mut a = [0u8; 40];
        let mut b = [0u8; 40];
        s.seal_in_place(&mut a, 8, &B).unwrap();
        s.seal_in_place(&mut b, 8, &B).unwrap();
        assert_ne!(a[28..40], b[28..40]);
        assert_ne!(a[..8], b[..8], "same plaintext, different nonce, different ciphertext");
    }

    #[test]
    fn wrong_binding_tamper_and_unknown_key_fail_and_zero_the_frame() {
        let mut s = sealer();
        let mut buf = [7u8; 64];
        let n = s.seal_in_place(&mut buf, 32, &B).unwrap();
        for other in
            [Binding { key_hash: 6, ..B }, Binding { version: 7, ..B }, Binding { k: 6, ..B }, Binding { m: 3, ..B }]
        {
            let mut copy = buf;
            let err = open_in_place(s.keys(), &mut copy[..n], &other).unwrap_err();
            assert!(matches!(err, SealError::Authentication { key_id: 1, .. }), "{err}");
            assert!(copy[..n].iter().all(|&b| b == 0), "frame zeroed after failure");
        }
        let mut copy = buf;
        copy[48] ^= 2; // key id 1 -> 3
        assert!(matches!(open_in_place(s.keys(), &mut copy[..n], &B), Err(SealError::UnknownKey { key_id: 3 })));
        let mut short = [0u8; 31];
        assert!(matches!(open_in_place(s.keys(), &mut short, &B), Err(SealError::FrameTooShort { .. })));
        let mut small = [0u8; 40];
        assert!(matches!(s.seal_in_place(&mut small, 9, &B), Err(SealError::NoRoom { need: 41, .. })));
    }

    #[test]
    fn rotation_seals_with_newest_and_opens_older() {
        let mut old = sealer();
        let mut buf = [9u8; 64];
        let n = old.seal_in_place(&mut buf, 16, &B).unwrap();
        let mut keys = KeyRing::new();
        keys.insert(1, &[0x11; 32]).unwrap();
        keys.insert(2, &[0x22; 32]).unwrap();
        let mut new = Sealer::new(keys, NonceSequence::new(3, 10)).unwrap();
        assert_eq!(new.key_id(), 2);
        assert_eq!(open_in_place(new.keys(), &mut buf[..n], &B).unwrap(), &[9u8; 16][..]);
        let mut fresh = [1u8; 64];
        let n = new.seal_in_place(&mut fresh, 16, &B).unwrap();
        assert_eq!(&fresh[32..36], &2u32.to_le_bytes());
        assert!(matches!(open_in_place(old.keys(), &mut fresh[..n], &B), Err(SealError::UnknownKey { key_id: 2 })));
    }

    #[test]
    fn start_bumps_the_epoch_into_the_nonce() {
        let dir = std::env::temp_dir().join(format!("prescient-sealer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("keys")).unwrap();
        let key = dir.join("keys/4.key");
        std::fs::write(&key, [4u8; 32]).unwrap();
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        let epoch = dir.join("epoch");
        for want in 1u32..=2 {
            let mut s = Sealer::start(&dir.join("keys"), &epoch, 77).unwrap();
            let mut buf = [0u8; 40];
            s.seal_in_place(&mut buf, 8, &B).unwrap();
            assert_eq!(&buf[28..30], &77u16.to_le_bytes());
            assert_eq!(&buf[30..34], &want.to_le_bytes(), "restart {want} uses a fresh epoch");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
