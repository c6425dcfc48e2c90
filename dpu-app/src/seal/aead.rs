//! The AES-256-GCM implementations, and which one a key uses on this CPU.
//!
//! Chosen by measured speed (benches/codec.rs): on x86-64 with VAES and
//! VPCLMULQDQ but no AVX-512, ring's VAES-AVX2 code runs about twice as fast as
//! AWS-LC, whose x86-64 paths are AVX-512 VAES or AES-NI/AVX; everywhere else
//! (AVX-512 x86-64, where AWS-LC's AVX-512 code leads, older x86-64, and
//! aarch64 with ARMv8 AES/PMULL) AWS-LC through aws-lc-rs. Both produce the
//! same bytes (AES-256-GCM is deterministic), which a test checks.

use super::SealError;

/// One AES-256-GCM key, set up once for the backend this CPU runs best.
pub enum AeadKey {
    /// AWS-LC.
    AwsLc(aws_lc_rs::aead::LessSafeKey),
    /// ring (x86-64 with VAES-AVX2 and no AVX-512).
    #[cfg(target_arch = "x86_64")]
    Ring(Box<ring::aead::LessSafeKey>),
}

/// Which implementation new keys use on this CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AeadBackend {
    /// AWS-LC through aws-lc-rs.
    AwsLc,
    /// ring's VAES-AVX2 code.
    #[cfg(target_arch = "x86_64")]
    Ring,
}

impl AeadBackend {
    /// The faster backend on this CPU.
    pub fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("vaes")
            && std::arch::is_x86_feature_detected!("vpclmulqdq")
            && std::arch::is_x86_feature_detected!("avx2")
            && !std::arch::is_x86_feature_detected!("avx512f")
        {
            return Self::Ring;
        }
        Self::AwsLc
    }

    /// Name for logs and the benchmark.
    pub fn name(self) -> &'static str {
        match self {
            Self::AwsLc => "aws-lc-rs (AWS-LC)",
            #[cfg(target_arch = "x86_64")]
            Self::Ring => "ring (VAES-AVX2)",
        }
    }
}

impl AeadKey {
    /// Sets up `key` for `backend`; fails only if the library refuses the key.
    pub fn new(backend: AeadBackend, key: &[u8; 32]) -> Result<Self, SealError> {
        let refused = || SealError::Crypto { operation: "key setup" };
        Ok(match backend {
            AeadBackend::AwsLc => {
                let k = aws_lc_rs::aead::UnboundKey::new(&aws_lc_rs::aead::AES_256_GCM, key).map_err(|_| refused())?;
                Self::AwsLc(aws_lc_rs::aead::LessSafeKey::new(k))
            }
            #[cfg(target_arch = "x86_64")]
            AeadBackend::Ring => {
                let k = ring::aead::UnboundKey::new(&ring::aead::AES_256_GCM, key).map_err(|_| refused())?;
                Self::Ring(Box::new(ring::aead::LessSafeKey::new(k)))
            }
        })
    }

    /// Encrypts `in_out` in place and returns the tag.
    pub fn seal(&self, nonce: [u8; 12], aad: &[u8], in_out: &mut [u8]) -> Result<[u8; 16], SealError> {
        let refused = || SealError::Crypto { operation: "seal" };
        let mut out = [0u8; 16];
        match self {
            Self::AwsLc(k) => {
                use aws_lc_rs::aead::{Aad, Nonce};
                let tag = k.seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), in_out);
                out.copy_from_slice(tag.map_err(|_| refused())?.as_ref());
            }
            #[cfg(target_arch = "x86_64")]
            Self::Ring(k) => {
                use ring::aead::{Aad, Nonce};
                let tag = k.seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), in_out);
                out.copy_from_slice(tag.map_err(|_| refused())?.as_ref());
            }
        }
        Ok(out)
    }

    /// Authenticates and decrypts `in_out` (ciphertext then 16-byte tag) in
    /// place; returns the plaintext part, or `None` if it does not authenticate.
    pub fn open<'b>(&self, nonce: [u8; 12], aad: &[u8], in_out: &'b mut [u8]) -> Option<&'b mut [u8]> {
        match self {
            Self::AwsLc(k) => {
                use aws_lc_rs::aead::{Aad, Nonce};
                k.open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(aad), in_out).ok()
            }
            #[cfg(target_arch = "x86_64")]
            Self::Ring(k) => {
                use ring::aead::{Aad, Nonce};
                k.open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(aad), in_out).ok()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backends() -> Vec<AeadBackend> {
        #[cfg(target_arch = "x86_64")]
        return vec![AeadBackend::AwsLc, AeadBackend::Ring];
        #[cfg(not(target_arch = "x86_64"))]
        return vec![AeadBackend::AwsLc];
    }

    /// Test case 13 of the GCM specification: zero key, zero IV, no plaintext,
    /// tag 530f8afbc74536b9a963b4f1c4cb738b; and every backend opens what every
    /// other sealed, at sizes that cross the wide-block paths.
    #[test]
    fn backends_agree_on_known_answer_and_each_other() {
        let want = [0x53, 0x0f, 0x8a, 0xfb, 0xc7, 0x45, 0x36, 0xb9, 0xa9, 0x63, 0xb4, 0xf1, 0xc4, 0xcb, 0x73, 0x8b];
        for b in backends() {
            assert_eq!(AeadKey::new(b, &[0; 32]).unwrap().seal([0; 12], &[], &mut []).unwrap(), want, "{}", b.name());
        }
        for len in [0usize, 1, 15, 16, 17, 255, 256, 257, 4099] {
            for s in backends() {
                for o in backends() {
                    let plain: Vec<u8> = (0..len).map(|i| i as u8).collect();
                    let mut buf = plain.clone();
                    let tag = AeadKey::new(s, &[7; 32]).unwrap().seal([1; 12], b"aad", &mut buf).unwrap();
                    buf.extend_from_slice(&tag);
                    let opened = AeadKey::new(o, &[7; 32]).unwrap().open([1; 12], b"aad", &mut buf).unwrap();
                    assert_eq!(opened, &plain[..], "sealed by {}, opened by {}", s.name(), o.name());
                }
            }
        }
    }
}
