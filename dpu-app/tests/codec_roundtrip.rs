//! Property tests of the write path's codecs end to end: seal and stripe in place as
//! a writer does (`cluster/protocol/replicate.rs`), lose fragments, rebuild, open.
//!
//! open(decode(encode(seal(x)))) == x for sizes 0 B to 4 MiB, random RS(k, m)
//! and random loss of up to m fragments, with every striping kernel this CPU runs
//! (`Backend::all_available`) encoding and reconstructing, each kernel's fragments
//! byte-identical to the others'; any single bit flipped in a fragment's payload,
//! its header, or the sealed frame (tag included) is an error, never different
//! plaintext.

use prescient_dpu::seal::{key_hash, open_in_place, Binding, KeyRing, NonceSequence, Sealer, FRAME_OVERHEAD};
use prescient_dpu::stripe::{
    decode_stripe, encode_stripe, fragment, Backend, Fragment, ReedSolomon, StripeId, StripeLayout,
};
use proptest::prelude::*;

const KEY: [u8; 32] = [0x5a; 32];

fn keys() -> KeyRing {
    let mut ring = KeyRing::new();
    ring.insert(1, &KEY).unwrap();
    ring
}

/// Everything a write leaves behind: the arena buffer, the side buffer, and the
/// stripe's shape and key.
struct Written {
    buf: Vec<u8>,
    side: Vec<u8>,
    layout: StripeLayout,
    start: usize,
    key_hash: u64,
}

/// Every striping kernel this CPU runs, fastest first.
fn backends() -> Vec<Backend> {
    Backend::all_available().collect()
}

fn write(value: &[u8], key: &[u8], version: u64, k: usize, m: usize, start: usize) -> Written {
    write_with(Backend::detect(), value, key, version, k, m, start)
}

/// Seals and stripes `value` in place, striping with `backend`'s kernels. Nonces
/// restart at the same point each call, so two writes of one value differ only if the
/// kernels do.
fn write_with(backend: Backend, value: &[u8], key: &[u8], version: u64, k: usize, m: usize, start: usize) -> Written {
    let mut sealer = Sealer::new(keys(), NonceSequence::new(9, 1)).unwrap();
    let rs = ReedSolomon::with_backend(k, m, backend).unwrap();
    let layout = StripeLayout::new(k, m, value.len() + FRAME_OVERHEAD).unwrap();
    let mut buf = vec![0xeeu8; start + layout.data_len()];
    buf[start..start + value.len()].copy_from_slice(value);
    let mut side = vec![0u8; layout.side_len()];
    let key_hash = key_hash(key);
    let binding = Binding { key_hash, version, k: k as u8, m: m as u8, tombstone: false };
    let frame_len = sealer.seal_in_place(&mut buf[start..], value.len(), &binding).unwrap();
    assert_eq!(frame_len, layout.frame_len());
    encode_stripe(&rs, &layout, StripeId { key_hash, version }, &mut buf[start..], &mut side).unwrap();
    Written { buf, side, layout, start, key_hash }
}

impl Written {
    fn fragment(&self, i: usize) -> Fragment<'_> {
        fragment(&self.layout, &self.buf[self.start..], &self.side, i)
    }
}

/// Rebuilds and opens from the given fragments; `Err` carries the message.
fn read(frags: &[Fragment<'_>], k: usize, m: usize, key: &[u8]) -> Result<Vec<u8>, String> {
    read_with(Backend::detect(), frags, k, m, key)
}

/// [`read`], reconstructing with `backend`'s kernels.
fn read_with(backend: Backend, frags: &[Fragment<'_>], k: usize, m: usize, key: &[u8]) -> Result<Vec<u8>, String> {
    let mut rs = ReedSolomon::with_backend(k, m, backend).unwrap();
    let mut out = vec![0u8; StripeLayout::new(k, m, 0).unwrap().data_len().max(frags[0].payload.len() * k)];
    let (layout, id) = decode_stripe(&mut rs, frags, &mut out).map_err(|e| e.to_string())?;
    if id.key_hash != key_hash(key) {
        return Err("fragments of another key".into());
    }
    let binding = Binding { key_hash: id.key_hash, version: id.version, k: k as u8, m: m as u8, tombstone: false };
    let plain = open_in_place(&keys(), &mut out[..layout.frame_len()], &binding).map_err(|e| e.to_string())?;
    Ok(plain.to_vec())
}

fn shape() -> impl Strategy<Value = (usize, usize)> {
    prop_oneof![
        Just((4usize, 2usize)),
        Just((6, 3)),
        Just((10, 4)),
        (1usize..=16).prop_flat_map(|k| (Just(k), 0..=(32 - k).min(8))),
    ]
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![4 => 0usize..300, 3 => 0usize..70_000, 1 => 0usize..=4 << 20]
}

/// Drops `lost` distinct fragments chosen by `seed` out of n.
fn survivors(n: usize, lost: usize, seed: u64) -> Vec<usize> {
    let mut ids: Vec<usize> = (0..n).collect();
    let mut s = seed | 1;
    for i in (1..n).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ids.swap(i, (s % (i as u64 + 1)) as usize);
    }
    ids.truncate(n - lost);
    ids
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn any_k_fragments_open_to_the_value(
        (k, m) in shape(),
        len in size(),
        fill in any::<u8>(),
        lost_frac in 0.0f64..=1.0,
        seed in any::<u64>(),
        start in 0usize..100,
        version in any::<u64>(),
    ) {
        let value: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31) ^ fill).collect();
        let lost = (lost_frac * m as f64) as usize;
        let ids = survivors(k + m, lost, seed);
        // Every kernel loses all m fragments too, and the lost ones include data
        // whenever k > 0, so each kernel reconstructs in every case with m > 0.
        let all_lost = survivors(k + m, m, seed.rotate_left(17));
        let all = backends();
        let first = write_with(all[0], &value, b"user:42", version, k, m, start);
        for (i, &backend) in all.iter().enumerate() {
            let w = write_with(backend, &value, b"user:42", version, k, m, start);
            prop_assert!(w.buf == first.buf && w.side == first.side, "{} encodes differently", backend.name());
            // Decode with another kernel than the one that encoded, in turn.
            let reader = all[(i + 1) % all.len()];
            for ids in [&ids, &all_lost] {
                let frags: Vec<Fragment<'_>> = ids.iter().map(|&i| w.fragment(i)).collect();
                let got = read_with(reader, &frags, k, m, b"user:42");
                prop_assert_eq!(got.as_deref(), Ok(&value[..]), "encoded {}, rebuilt {}", backend.name(), reader.name());
            }
        }
        if lost == m && m > 0 {
            let frags: Vec<Fragment<'_>> = ids.iter().map(|&i| first.fragment(i)).collect();
            let fewer = &frags[..frags.len() - 1];
            prop_assert!(read(fewer, k, m, b"user:42").unwrap_err().contains("cannot rebuild"));
        }
    }

    #[test]
    fn any_single_bit_flip_is_an_error(
        (k, m) in shape(),
        len in prop_oneof![0usize..200, 0usize..20_000],
        seed in any::<u64>(),
        lost_frac in 0.0f64..=1.0,
        which in 0usize..32,
        bit in any::<usize>(),
        in_header in any::<bool>(),
        kernel in any::<usize>(),
    ) {
        let value: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
        let all = backends();
        let backend = all[kernel % all.len()];
        let w = write_with(backend, &value, b"k", 3, k, m, 0);
        let ids = survivors(k + m, (lost_frac * m as f64) as usize, seed);
        let victim = which % ids.len();
        let mut headers: Vec<Vec<u8>> = ids.iter().map(|&i| w.fragment(i).header.to_vec()).collect();
        let mut payloads: Vec<Vec<u8>> = ids.iter().map(|&i| w.fragment(i).payload.to_vec()).collect();
        let target = if in_header { &mut headers[victim] } else { &mut payloads[victim] };
        let bit = bit % (target.len() * 8);
        target[bit / 8] ^= 1 << (bit % 8);
        let frags: Vec<Fragment<'_>> =
            headers.iter().zip(&payloads).map(|(h, p)| Fragment { header: h, payload: p }).collect();
        prop_assert!(read_with(backend, &frags, k, m, b"k").is_err(), "kernel {}", backend.name());
    }

    /// A flip in the sealed frame before striping (ciphertext, tag, key id or
    /// nonce) survives the checksums, since they are computed after it; GCM must
    /// catch it.
    #[test]
    fn a_frame_flipped_before_striping_fails_to_open(len in 0usize..5000, bit in any::<usize>()) {
        let value = vec![0x33u8; len];
        let (k, m) = (4, 2);
        let mut sealer = Sealer::new(keys(), NonceSequence::new(1, 1)).unwrap();
        let layout = StripeLayout::new(k, m, len + FRAME_OVERHEAD).unwrap();
        let mut buf = vec![0u8; layout.data_len()];
        buf[..len].copy_from_slice(&value);
        let binding = Binding { key_hash: prescient_dpu::seal::key_hash(b"k"), version: 1, k: 4, m: 2, tombstone: false };
        let n = sealer.seal_in_place(&mut buf, len, &binding).unwrap();
        let bit = bit % (n * 8);
        buf[bit / 8] ^= 1 << (bit % 8);
        let rs = ReedSolomon::new(k, m).unwrap();
        let mut side = vec![0u8; layout.side_len()];
        let id = prescient_dpu::stripe::StripeId { key_hash: binding.key_hash, version: 1 };
        prescient_dpu::stripe::encode_stripe(&rs, &layout, id, &mut buf, &mut side).unwrap();
        let frags: Vec<Fragment<'_>> = (1..6).map(|i| fragment(&layout, &buf, &side, i)).collect();
        let err = read(&frags, k, m, b"k").unwrap_err();
        prop_assert!(err.contains("authentication") || err.contains("key id"), "{}", err);
    }
}

#[test]
fn fragments_moved_to_another_key_or_version_fail() {
    let value = vec![1u8; 1000];
    let a = write(&value, b"a", 5, 4, 2, 0);
    let b = write(&value, b"a", 6, 4, 2, 0);
    // Same key, other version: headers disagree.
    let mixed = [a.fragment(0), a.fragment(1), b.fragment(2), a.fragment(3)];
    assert!(read(&mixed, 4, 2, b"a").unwrap_err().contains("version"));
    // Whole stripe relabelled with another version, checksums recomputed: the
    // frame's binding catches it.
    let relabelled: Vec<Vec<u8>> = (0..4)
        .map(|i| {
            let mut h = a.fragment(i).header.to_vec();
            h[16..24].copy_from_slice(&6u64.to_le_bytes());
            let crc = crc32c(&h[..36]);
            h[36..40].copy_from_slice(&crc.to_le_bytes());
            h
        })
        .collect();
    let frags: Vec<Fragment<'_>> =
        (0..4).map(|i| Fragment { header: &relabelled[i], payload: a.fragment(i).payload }).collect();
    assert!(read(&frags, 4, 2, b"a").unwrap_err().contains("authentication"));
    assert_ne!(a.key_hash, 0);
}

/// CRC32C (Castagnoli), bitwise, so the test does not trust the crate it checks.
fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0x82f6_3b78 } else { crc >> 1 };
        }
    }
    !crc
}
