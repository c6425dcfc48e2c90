//! Single-core throughput of sealing (AES-256-GCM) and striping (Reed-Solomon),
//! each figure next to the best reference implementation measured in the same
//! run, with the ratio.
//!
//! `cargo bench -p prescient-dpu --bench codec --features bench-reference`
//! builds the references from source: OpenSSL 3.6 (`openssl` crate, `vendored`)
//! and ISA-L (`isal-sys`), plus ring as a second AES-GCM figure. Without the
//! feature only our figures print. Run it pinned (`taskset -c 0`) on a quiet
//! machine; each figure is the best of several interleaved rounds, so ours and
//! the reference see the same disturbances.
//!
//! GB/s is 10^9 bytes per second of plaintext (sealing) or of stripe data,
//! k x fragment length (Reed-Solomon). Open and reconstruct are timed as follows:
//! open = (seal + open) - seal, since opening in place consumes the frame;
//! reconstruct rebuilds the first m data fragments from the other k fragments
//! (the worst case: every lost fragment is data) with decode tables cached
//! (ours from its per-pattern cache, ISA-L's computed once before timing).

use std::hint::black_box;
use std::time::{Duration, Instant};

use prescient_dpu::seal::{open_in_place, Binding, KeyRing, NonceSequence, Sealer, FRAME_OVERHEAD};
#[cfg(feature = "bench-isal")]
use prescient_dpu::stripe::gf::Matrix;
use prescient_dpu::stripe::ReedSolomon;

const ROUNDS: usize = 7;
const ROUND_TIME: Duration = Duration::from_millis(30);
const SEAL_SIZES: [usize; 4] = [64, 4 << 10, 64 << 10, 1 << 20];
const RS_SIZES: [usize; 3] = [4 << 10, 64 << 10, 1 << 20];
const RS_CODES: [(usize, usize); 3] = [(4, 2), (6, 3), (10, 4)];
const KEY: [u8; 32] = [0x42; 32];

/// A 64-byte aligned byte buffer.
struct Aligned {
    raw: Vec<u8>,
    off: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize, seed: u8) -> Self {
        let mut raw: Vec<u8> = (0..len + 64).map(|i| (i as u8).wrapping_mul(167) ^ seed).collect();
        let off = raw.as_mut_ptr().align_offset(64);
        Self { raw, off, len }
    }
    fn get(&self) -> &[u8] {
        &self.raw[self.off..self.off + self.len]
    }
    fn get_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.off..self.off + self.len]
    }
}

/// Seconds per call of `f`: the best of one timed round.
fn round(batch: u64, f: &mut dyn FnMut()) -> f64 {
    let start = Instant::now();
    let mut calls = 0u64;
    while start.elapsed() < ROUND_TIME {
        for _ in 0..batch {
            f();
        }
        calls += batch;
    }
    start.elapsed().as_secs_f64() / calls as f64
}

/// Best seconds per call of each function, rounds interleaved.
fn measure(bytes: usize, fs: &mut [&mut dyn FnMut()]) -> Vec<f64> {
    let batch = (65536 / bytes.max(1)).max(1) as u64;
    let mut best = vec![f64::INFINITY; fs.len()];
    for f in fs.iter_mut() {
        f();
    }
    for _ in 0..ROUNDS {
        for (b, f) in best.iter_mut().zip(fs.iter_mut()) {
            *b = b.min(round(batch, *f));
        }
    }
    best
}

fn gbps(bytes: usize, secs: f64) -> f64 {
    bytes as f64 / secs / 1e9
}

fn row(op: &str, size: usize, ours: f64, reference: Option<f64>, extra: &str) {
    let size = if size >= 1 << 20 {
        format!("{} MiB", size >> 20)
    } else if size >= 1024 {
        format!("{} KiB", size >> 10)
    } else {
        format!("{size} B")
    };
    match reference {
        Some(r) => println!("| {op:<22} | {size:>7} | {ours:>7.2} | {r:>7.2} | {:>5.2}x | {extra}", ours / r),
        None => println!("| {op:<22} | {size:>7} | {ours:>7.2} |     n/a |   n/a | {extra}"),
    }
}

fn main() {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    println!("codec benchmark, single core, {cpu}");
    println!(
        "sealing: {}; striping kernels: {}",
        KeyRing::new().backend().name(),
        ReedSolomon::new(4, 2).unwrap().backend().name()
    );
    println!("reference: {}", reference_names());
    println!();
    println!("| operation              |    size | ours GB/s | ref GB/s | ratio | notes");
    println!("|---|---:|---:|---:|---:|---|");
    bench_seal();
    bench_rs();
}

fn reference_names() -> String {
    #[allow(unused_mut)] // pushed to only with reference features
    let mut names: Vec<String> = Vec::new();
    #[cfg(feature = "bench-openssl")]
    names.push(format!("{} built from source (AES-GCM)", openssl::version::version()));
    #[cfg(all(feature = "bench-ring", target_arch = "x86_64"))]
    names.push("ring 0.17 (AES-GCM, second figure)".into());
    #[cfg(feature = "bench-isal")]
    names.push("ISA-L 2.31 built from source by isal-sys (Reed-Solomon)".into());
    if names.is_empty() {
        "none built (run with --features bench-reference)".into()
    } else {
        names.join(", ")
    }
}

fn bench_seal() {
    let mut keys = KeyRing::new();
    keys.insert(1, &KEY).unwrap();
    let open_keys = {
        let mut k = KeyRing::new();
        k.insert(1, &KEY).unwrap();
        k
    };
    let mut sealer = Sealer::new(keys, NonceSequence::new(1, 1)).unwrap();
    let binding = Binding { key_hash: 7, version: 9, k: 4, m: 2, tombstone: false };
    for size in SEAL_SIZES {
        let mut buf = Aligned::new(size + FRAME_OVERHEAD, 1);
        let mut ours_seal = || {
            black_box(sealer.seal_in_place(buf.get_mut(), size, &binding).unwrap());
        };
        let mut buf2 = Aligned::new(size + FRAME_OVERHEAD, 2);
        let mut sealer2 = Sealer::new(
            {
                let mut k = KeyRing::new();
                k.insert(1, &KEY).unwrap();
                k
            },
            NonceSequence::new(2, 1),
        )
        .unwrap();
        let mut ours_pair = || {
            let n = sealer2.seal_in_place(buf2.get_mut(), size, &binding).unwrap();
            black_box(open_in_place(&open_keys, &mut buf2.get_mut()[..n], &binding).unwrap());
        };
        let t = reference_seal(size, &mut ours_seal, &mut ours_pair);
        let open = |pair: f64, seal: f64| gbps(size, pair - seal);
        row("AES-256-GCM seal", size, gbps(size, t.ours.0), t.reference.map(|r| gbps(size, r.0)), &t.extra_seal);
        row("AES-256-GCM open", size, open(t.ours.1, t.ours.0), t.reference.map(|r| open(r.1, r.0)), &t.extra_open);
    }
}

/// Best seconds per seal and per seal+open, ours and the reference's.
struct SealTimes {
    ours: (f64, f64),
    reference: Option<(f64, f64)>,
    extra_seal: String,
    extra_open: String,
}

type Timed<'a> = (&'static str, Box<dyn FnMut() + 'a>, Box<dyn FnMut() + 'a>);

// Pushes depend on features, so no `vec![]` literal.
#[allow(clippy::vec_init_then_push)]
fn reference_seal(size: usize, seal: &mut dyn FnMut(), pair: &mut dyn FnMut()) -> SealTimes {
    let mut refs: Vec<Timed<'_>> = Vec::new();
    #[cfg(feature = "bench-openssl")]
    refs.push(openssl_aead(size));
    #[cfg(all(feature = "bench-ring", target_arch = "x86_64"))]
    refs.push(ring_aead(size));
    refs.push(aws_lc_aead(size));
    let mut fs: Vec<&mut dyn FnMut()> = vec![seal, pair];
    for (_, s, p) in refs.iter_mut() {
        fs.push(s.as_mut());
        fs.push(p.as_mut());
    }
    let t = measure(size, &mut fs);
    let names: Vec<&str> = refs.iter().map(|r| r.0).collect();
    let mut times =
        SealTimes { ours: (t[0], t[1]), reference: None, extra_seal: String::new(), extra_open: String::new() };
    if let Some(first) = names.first() {
        times.reference = Some((t[2], t[3]));
        times.extra_seal = format!("ref: {first}");
        times.extra_open = format!("ref: {first}");
    }
    for (i, name) in names.iter().enumerate().skip(1) {
        let (s, p) = (t[2 + 2 * i], t[3 + 2 * i]);
        times.extra_seal += &format!("; {name} {:.2} GB/s", gbps(size, s));
        times.extra_open += &format!("; {name} {:.2} GB/s", gbps(size, p - s));
    }
    times
}

/// AWS-LC through our own key type, whichever backend this CPU picked, so the
/// table shows both candidates of [`prescient_dpu::seal::aead`].
fn aws_lc_aead<'a>(size: usize) -> Timed<'a> {
    use prescient_dpu::seal::aead::{AeadBackend, AeadKey};
    const IV: [u8; 12] = [3; 12];
    const AAD: [u8; 24] = [5; 24];
    let (k1, k2) = (AeadKey::new(AeadBackend::AwsLc, &KEY).unwrap(), AeadKey::new(AeadBackend::AwsLc, &KEY).unwrap());
    let mut buf = Aligned::new(size, 7);
    let mut buf2 = Aligned::new(size + 16, 8);
    let seal = move || {
        black_box(k1.seal(IV, &AAD, buf.get_mut()).unwrap());
    };
    let pair = move || {
        let b = buf2.get_mut();
        let tag = k2.seal(IV, &AAD, &mut b[..size]).unwrap();
        b[size..].copy_from_slice(&tag);
        black_box(k2.open(IV, &AAD, b).unwrap());
    };
    ("aws-lc-rs", Box::new(seal), Box::new(pair))
}

#[cfg(feature = "bench-openssl")]
fn openssl_aead<'a>(size: usize) -> Timed<'a> {
    use openssl::cipher::Cipher;
    use openssl::cipher_ctx::CipherCtx;
    const IV: [u8; 12] = [3; 12];
    const AAD: [u8; 24] = [5; 24];
    fn seal_into(enc: &mut CipherCtx, buf: &mut [u8], tag: &mut [u8; 16]) {
        enc.encrypt_init(None, None, Some(&IV)).unwrap();
        enc.cipher_update(&AAD, None).unwrap();
        let n = buf.len();
        enc.cipher_update_inplace(buf, n).unwrap();
        enc.cipher_final(&mut []).unwrap();
        enc.tag(tag).unwrap();
    }
    let new_ctx = |encrypt: bool| {
        let mut c = CipherCtx::new().unwrap();
        if encrypt {
            c.encrypt_init(Some(Cipher::aes_256_gcm()), Some(&KEY), None).unwrap();
        } else {
            c.decrypt_init(Some(Cipher::aes_256_gcm()), Some(&KEY), None).unwrap();
        }
        c
    };
    let (mut enc, mut enc2, mut dec) = (new_ctx(true), new_ctx(true), new_ctx(false));
    let (mut buf, mut buf2) = (Aligned::new(size, 3), Aligned::new(size, 4));
    let (mut tag, mut tag2) = ([0u8; 16], [0u8; 16]);
    let seal = move || seal_into(&mut enc, buf.get_mut(), &mut tag);
    let pair = move || {
        seal_into(&mut enc2, buf2.get_mut(), &mut tag2);
        dec.decrypt_init(None, None, Some(&IV)).unwrap();
        dec.set_tag(&tag2).unwrap();
        dec.cipher_update(&AAD, None).unwrap();
        dec.cipher_update_inplace(buf2.get_mut(), size).unwrap();
        dec.cipher_final(&mut []).expect("OpenSSL tag verifies");
    };
    let name = openssl::version::version();
    (name, Box::new(seal), Box::new(pair))
}

#[cfg(all(feature = "bench-ring", target_arch = "x86_64"))]
fn ring_aead<'a>(size: usize) -> Timed<'a> {
    use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
    const IV: [u8; 12] = [3; 12];
    const AAD: [u8; 24] = [5; 24];
    let key = || LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &KEY).unwrap());
    let (k1, k2) = (key(), key());
    let mut buf = Aligned::new(size, 5);
    let mut buf2 = Aligned::new(size + 16, 6);
    let seal = move || {
        let tag =
            k1.seal_in_place_separate_tag(Nonce::assume_unique_for_key(IV), Aad::from(&AAD), buf.get_mut()).unwrap();
        black_box(tag.as_ref());
    };
    let pair = move || {
        let b = buf2.get_mut();
        let tag =
            k2.seal_in_place_separate_tag(Nonce::assume_unique_for_key(IV), Aad::from(&AAD), &mut b[..size]).unwrap();
        b[size..].copy_from_slice(tag.as_ref());
        black_box(k2.open_in_place(Nonce::assume_unique_for_key(IV), Aad::from(&AAD), b).unwrap());
    };
    ("ring 0.17", Box::new(seal), Box::new(pair))
}

fn bench_rs() {
    for (k, m) in RS_CODES {
        for size in RS_SIZES {
            let f = size.div_ceil(k).next_multiple_of(64);
            let data_bytes = k * f;
            let data: Vec<Aligned> = (0..k).map(|i| Aligned::new(f, i as u8)).collect();
            let mut parity: Vec<Aligned> = (0..m).map(|i| Aligned::new(f, 100 + i as u8)).collect();
            let rs = ReedSolomon::new(k, m).unwrap();
            {
                let d: Vec<&[u8]> = data.iter().map(Aligned::get).collect();
                let mut p: Vec<&mut [u8]> = parity.iter_mut().map(Aligned::get_mut).collect();
                rs.encode(&d, &mut p);
            }
            // Encode: k data fragments in, m parity out.
            let mut enc_parity: Vec<Aligned> = (0..m).map(|i| Aligned::new(f, 200 + i as u8)).collect();
            let d: Vec<&[u8]> = data.iter().map(Aligned::get).collect();
            let mut p: Vec<&mut [u8]> = enc_parity.iter_mut().map(Aligned::get_mut).collect();
            let mut ours_encode = || rs.encode(&d, black_box(&mut p));
            // Reconstruct: lose data fragments 0..m, rebuild from m..k+m.
            let source_ids: Vec<u8> = (m..k + m).map(|i| i as u8).collect();
            let target_ids: Vec<u8> = (0..m).map(|i| i as u8).collect();
            let sources: Vec<&[u8]> =
                (m..k + m).map(|i| if i < k { data[i].get() } else { parity[i - k].get() }).collect();
            let mut rebuilt: Vec<Aligned> = (0..m).map(|i| Aligned::new(f, 50 + i as u8)).collect();
            let mut rs2 = ReedSolomon::new(k, m).unwrap();
            let mut t: Vec<&mut [u8]> = rebuilt.iter_mut().map(Aligned::get_mut).collect();
            let mut ours_rebuild = || rs2.reconstruct(&source_ids, &sources, &target_ids, black_box(&mut t)).unwrap();
            let times = reference_rs(k, m, f, &data, &parity, &mut ours_encode, &mut ours_rebuild);
            for (i, r) in rebuilt.iter().enumerate() {
                assert!(r.get() == data[i].get(), "our reconstruct rebuilt fragment {i} wrong");
            }
            for (a, b) in enc_parity.iter().zip(&parity) {
                assert!(a.get() == b.get(), "encode is not deterministic");
            }
            let code = format!("RS({k},{m}) encode");
            row(&code, size, gbps(data_bytes, times.0 .0), times.1.map(|r| gbps(data_bytes, r.0)), "");
            let code = format!("RS({k},{m}) reconstruct");
            row(
                &code,
                size,
                gbps(data_bytes, times.0 .1),
                times.1.map(|r| gbps(data_bytes, r.1)),
                &format!("{m} data fragments lost"),
            );
        }
    }
}

type RsTimes = ((f64, f64), Option<(f64, f64)>);

#[cfg(not(feature = "bench-isal"))]
fn reference_rs(
    k: usize,
    _m: usize,
    f: usize,
    _data: &[Aligned],
    _parity: &[Aligned],
    encode: &mut dyn FnMut(),
    rebuild: &mut dyn FnMut(),
) -> RsTimes {
    let t = measure(k * f, &mut [encode, rebuild]);
    ((t[0], t[1]), None)
}

#[cfg(feature = "bench-isal")]
mod isal {
    // Links the static ISA-L that isal-sys builds; its Rust bindings cover only
    // igzip, so the erasure-code entry points are declared here (isa-l's
    // include/erasure_code.h).
    use isal_sys as _;
    extern "C" {
        pub fn ec_init_tables(k: i32, rows: i32, a: *const u8, gftbls: *mut u8);
        pub fn ec_encode_data(
            len: i32,
            k: i32,
            rows: i32,
            gftbls: *const u8,
            data: *const *const u8,
            coding: *const *mut u8,
        );
        pub fn gf_gen_cauchy1_matrix(a: *mut u8, m: i32, k: i32);
    }
}

#[cfg(feature = "bench-isal")]
fn reference_rs(
    k: usize,
    m: usize,
    f: usize,
    data: &[Aligned],
    parity: &[Aligned],
    encode: &mut dyn FnMut(),
    rebuild: &mut dyn FnMut(),
) -> RsTimes {
    // ISA-L's encode tables from its own Cauchy matrix.
    let mut a = vec![0u8; (k + m) * k];
    let mut enc_tables = vec![0u8; 32 * k * m];
    // SAFETY: `a` holds (k + m) * k bytes and `enc_tables` 32 * k * m, the sizes
    // gf_gen_cauchy1_matrix and ec_init_tables write for these arguments.
    unsafe {
        isal::gf_gen_cauchy1_matrix(a.as_mut_ptr(), (k + m) as i32, k as i32);
        isal::ec_init_tables(k as i32, m as i32, a[k * k..].as_ptr(), enc_tables.as_mut_ptr());
    }
    let ours = Matrix::cauchy_systematic(k, m);
    for r in 0..k + m {
        for c in 0..k {
            assert_eq!(a[r * k + c], ours.get(r, c), "ISA-L and our encoding matrices differ");
        }
    }
    let data_ptrs: Vec<*const u8> = data.iter().map(|d| d.get().as_ptr()).collect();
    let mut isal_parity: Vec<Aligned> = (0..m).map(|i| Aligned::new(f, 77 + i as u8)).collect();
    let parity_ptrs: Vec<*mut u8> = isal_parity.iter_mut().map(|p| p.get_mut().as_mut_ptr()).collect();
    let mut isal_encode = || {
        // SAFETY: k data pointers and m parity pointers to distinct buffers of
        // f bytes each; tables of 32 * k * m bytes from ec_init_tables.
        unsafe {
            isal::ec_encode_data(
                f as i32,
                k as i32,
                m as i32,
                enc_tables.as_ptr(),
                data_ptrs.as_ptr(),
                parity_ptrs.as_ptr(),
            );
        }
    };

    // Decode tables for the same loss as ours, computed once.
    let sources: Vec<usize> = (m..k + m).collect();
    let targets: Vec<usize> = (0..m).collect();
    let decode = ours.select_rows(&targets).mul(&ours.select_rows(&sources).invert().unwrap());
    let mut dec_matrix = vec![0u8; m * k];
    for r in 0..m {
        for c in 0..k {
            dec_matrix[r * k + c] = decode.get(r, c);
        }
    }
    let mut dec_tables = vec![0u8; 32 * k * m];
    // SAFETY: dec_matrix holds m rows of k bytes, dec_tables 32 * k * m bytes.
    unsafe { isal::ec_init_tables(k as i32, m as i32, dec_matrix.as_ptr(), dec_tables.as_mut_ptr()) };
    let src_ptrs: Vec<*const u8> =
        sources.iter().map(|&i| if i < k { data[i].get().as_ptr() } else { parity[i - k].get().as_ptr() }).collect();
    let mut isal_rebuilt: Vec<Aligned> = (0..m).map(|i| Aligned::new(f, 33 + i as u8)).collect();
    let out_ptrs: Vec<*mut u8> = isal_rebuilt.iter_mut().map(|p| p.get_mut().as_mut_ptr()).collect();
    let mut isal_rebuild = || {
        // SAFETY: k source pointers and m output pointers to distinct buffers of
        // f bytes each; tables of 32 * k * m bytes from ec_init_tables.
        unsafe {
            isal::ec_encode_data(
                f as i32,
                k as i32,
                m as i32,
                dec_tables.as_ptr(),
                src_ptrs.as_ptr(),
                out_ptrs.as_ptr(),
            );
        }
    };
    let t = measure(k * f, &mut [encode, &mut isal_encode, rebuild, &mut isal_rebuild]);
    for (a, b) in isal_parity.iter().zip(parity) {
        assert!(a.get() == b.get(), "ISA-L parity differs from ours");
    }
    for (i, r) in isal_rebuilt.iter().enumerate() {
        assert!(r.get() == data[i].get(), "ISA-L rebuilt fragment {i} wrong");
    }
    ((t[0], t[2]), Some((t[1], t[3])))
}
