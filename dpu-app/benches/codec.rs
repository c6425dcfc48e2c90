//! Single-core throughput of sealing (AES-256-GCM) and striping (Reed-Solomon),
//! each figure next to the best reference implementation measured in the same
//! run, with the ratio.
//!
//! `cargo bench -p prescient-dpu --bench codec --features bench-reference`
//! builds the references from source: OpenSSL 3.6 (`openssl` crate, `vendored`)
//! and ISA-L (`isal-sys`), plus ring as a second AES-GCM figure. Without the
//! feature only our figures print. Run it pinned (`taskset -c 1`) on a quiet
//! machine; each figure is the best of several interleaved rounds, so ours and
//! the reference see the same disturbances.
//!
//! GB/s is 10^9 bytes per second of plaintext (sealing) or of stripe data,
//! k x fragment length (Reed-Solomon). Open and reconstruct are timed as follows:
//! open = (seal + open) - seal, since opening in place consumes the frame;
//! reconstruct rebuilds the first m data fragments from the other k fragments
//! (the worst case: every lost fragment is data) with decode tables cached
//! (ours from its per-pattern cache, ISA-L's computed once before timing).
//! Striping runs every kernel this CPU has (`Backend::all_available`), each
//! next to ISA-L in the same rounds, and prints the CPU flags and why
//! `Backend::detect` picks the one it does.

use std::hint::black_box;
use std::time::{Duration, Instant};

use prescient_dpu::seal::{open_in_place, Binding, KeyRing, NonceSequence, Sealer, FRAME_OVERHEAD};
#[cfg(feature = "bench-isal")]
use prescient_dpu::stripe::gf::Matrix;
use prescient_dpu::stripe::{Backend, ReedSolomon};

/// Many short rounds rather than a few long ones: on a shared machine the best
/// of 40 rounds of 3 ms finds quiet windows that 7 of 30 ms rarely do.
const ROUNDS: usize = 40;
const ROUND_TIME: Duration = Duration::from_millis(3);
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
    let size = size_name(size);
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
    println!("CPU flags: {}", cpu_flags());
    println!("sealing: {}", KeyRing::new().backend().name());
    println!("striping: {}", kernel_pick());
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

/// The CPU features the striping kernels look at, as this CPU reports them.
fn cpu_flags() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        let flags = [
            ("avx2", has!("avx2")),
            ("avx512f", has!("avx512f")),
            ("avx512bw", has!("avx512bw")),
            ("avx512vl", has!("avx512vl")),
            ("avx512vbmi", has!("avx512vbmi")),
            ("gfni", has!("gfni")),
            ("vaes", has!("vaes")),
            ("vpclmulqdq", has!("vpclmulqdq")),
        ];
        flags.iter().map(|(n, on)| format!("{}{n}", if *on { "+" } else { "-" })).collect::<Vec<_>>().join(" ")
    }
    #[cfg(target_arch = "aarch64")]
    return format!("{}neon", if std::arch::is_aarch64_feature_detected!("neon") { "+" } else { "-" });
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    return "none checked".into();
}

/// Which kernel `Backend::detect` picks and why, in one line.
fn kernel_pick() -> String {
    let pick = Backend::detect();
    let order: Vec<&str> = Backend::known_names().collect();
    let skipped: Vec<&str> =
        order.iter().copied().take_while(|&n| n != pick.name()).filter(|&n| Backend::by_name(n).is_none()).collect();
    let needs = if pick.features().is_empty() { "none".to_owned() } else { pick.features().join(" + ") };
    let mut why = format!(
        "detect picks {}: the first of [{}] whose CPU features ({needs}) are all present",
        pick.name(),
        order.join(", ")
    );
    if !skipped.is_empty() {
        why += &format!("; {} lacking", skipped.join(", "));
    }
    why
}

fn bench_rs() {
    let backends: Vec<Backend> = Backend::all_available().collect();
    let pick = Backend::detect();
    println!();
    println!("Reed-Solomon: GB/s of stripe data (k x fragment), ratio to ISA-L in brackets; * = detect's pick");
    println!("reconstruct rebuilds m data fragments from the other k (decode tables cached)");
    println!();
    let mut header = "| operation              |    size | ISA-L GB/s |".to_owned();
    let mut rule = "|---|---:|---:|".to_owned();
    for b in &backends {
        let star = if *b == pick { "*" } else { "" };
        header += &format!(" {:>17} |", format!("{}{star}", b.name()));
        rule += "---:|";
    }
    println!("{header}");
    println!("{rule}");
    for (k, m) in RS_CODES {
        for size in RS_SIZES {
            bench_rs_case(&backends, k, m, size);
        }
    }
}

/// One code at one stripe size: every kernel and ISA-L, encode and reconstruct,
/// all timed in the same interleaved rounds.
fn bench_rs_case(backends: &[Backend], k: usize, m: usize, size: usize) {
    let f = size.div_ceil(k).next_multiple_of(64);
    let data_bytes = k * f;
    let data: Vec<Aligned> = (0..k).map(|i| Aligned::new(f, i as u8)).collect();
    let mut parity: Vec<Aligned> = (0..m).map(|i| Aligned::new(f, 100 + i as u8)).collect();
    {
        let d: Vec<&[u8]> = data.iter().map(Aligned::get).collect();
        let mut p: Vec<&mut [u8]> = parity.iter_mut().map(Aligned::get_mut).collect();
        ReedSolomon::with_backend(k, m, Backend::portable()).unwrap().encode(&d, &mut p);
    }
    // Reconstruct: lose data fragments 0..m, rebuild them from m..k+m.
    let source_ids: Vec<u8> = (m..k + m).map(|i| i as u8).collect();
    let target_ids: Vec<u8> = (0..m).map(|i| i as u8).collect();
    let sources: Vec<&[u8]> = (m..k + m).map(|i| if i < k { data[i].get() } else { parity[i - k].get() }).collect();
    let d: Vec<&[u8]> = data.iter().map(Aligned::get).collect();

    struct Ours {
        enc: ReedSolomon,
        dec: ReedSolomon,
        parity: Vec<Aligned>,
        rebuilt: Vec<Aligned>,
    }
    let mut ours: Vec<Ours> = backends
        .iter()
        .map(|&b| Ours {
            enc: ReedSolomon::with_backend(k, m, b).unwrap(),
            dec: ReedSolomon::with_backend(k, m, b).unwrap(),
            parity: (0..m).map(|i| Aligned::new(f, 200 + i as u8)).collect(),
            rebuilt: (0..m).map(|i| Aligned::new(f, 50 + i as u8)).collect(),
        })
        .collect();
    let mut isal = IsalRs::new(k, m, f, &data, &parity);
    {
        let mut encodes: Vec<Box<dyn FnMut() + '_>> = Vec::new();
        let mut rebuilds: Vec<Box<dyn FnMut() + '_>> = Vec::new();
        for o in ours.iter_mut() {
            let (enc, dec) = (&o.enc, &mut o.dec);
            let mut p: Vec<&mut [u8]> = o.parity.iter_mut().map(Aligned::get_mut).collect();
            let mut t: Vec<&mut [u8]> = o.rebuilt.iter_mut().map(Aligned::get_mut).collect();
            let (d, sources, source_ids, target_ids) = (&d, &sources, &source_ids, &target_ids);
            encodes.push(Box::new(move || enc.encode(d, black_box(&mut p))));
            rebuilds
                .push(Box::new(move || dec.reconstruct(source_ids, sources, target_ids, black_box(&mut t)).unwrap()));
        }
        let mut fs: Vec<&mut dyn FnMut()> = Vec::new();
        if let Some(isal) = isal.as_mut() {
            let (e, r) = isal.closures();
            fs.push(e);
            fs.push(r);
        }
        for (e, r) in encodes.iter_mut().zip(rebuilds.iter_mut()) {
            fs.push(e.as_mut());
            fs.push(r.as_mut());
        }
        let t = measure(data_bytes, &mut fs);
        let reference = isal.as_ref().map(|_| (t[0], t[1]));
        let ours_t = &t[if reference.is_some() { 2 } else { 0 }..];
        for (op, i) in [("encode", 0), ("reconstruct", 1)] {
            let mut line = format!("| {:<22} | {:>7} |", format!("RS({k},{m}) {op}"), size_name(size));
            let r = reference.map(|r| if i == 0 { r.0 } else { r.1 });
            match r {
                Some(r) => line += &format!(" {:>10.2} |", gbps(data_bytes, r)),
                None => line += "        n/a |",
            }
            for pair in ours_t.chunks_exact(2) {
                let g = gbps(data_bytes, pair[i]);
                match r {
                    Some(r) => line += &format!(" {g:>7.2} ({:>5.2}x) |", g / gbps(data_bytes, r)),
                    None => line += &format!(" {g:>17.2} |"),
                }
            }
            println!("{line}");
        }
    }
    for o in &ours {
        let name = o.enc.backend().name();
        for (a, b) in o.parity.iter().zip(&parity) {
            assert!(a.get() == b.get(), "{name} parity differs from the portable kernel's");
        }
        for (i, r) in o.rebuilt.iter().enumerate() {
            assert!(r.get() == data[i].get(), "{name} rebuilt fragment {i} wrong");
        }
    }
    if let Some(isal) = &isal {
        isal.check(&data, &parity);
    }
}

fn size_name(size: usize) -> String {
    if size >= 1 << 20 {
        format!("{} MiB", size >> 20)
    } else if size >= 1024 {
        format!("{} KiB", size >> 10)
    } else {
        format!("{size} B")
    }
}

/// No ISA-L in this build: no reference column.
#[cfg(not(feature = "bench-isal"))]
struct IsalRs;

#[cfg(not(feature = "bench-isal"))]
impl IsalRs {
    fn new(_k: usize, _m: usize, _f: usize, _data: &[Aligned], _parity: &[Aligned]) -> Option<Self> {
        None
    }
    fn closures(&mut self) -> (&mut dyn FnMut(), &mut dyn FnMut()) {
        unreachable!("never built without bench-isal")
    }
    fn check(&self, _data: &[Aligned], _parity: &[Aligned]) {}
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

/// ISA-L's encode and reconstruct of the same stripe, with its own tables and
/// output buffers (its dispatcher picks its kernel for this CPU).
#[cfg(feature = "bench-isal")]
struct IsalRs {
    k: usize,
    m: usize,
    f: usize,
    enc_tables: Vec<u8>,
    dec_tables: Vec<u8>,
    data_ptrs: Vec<*const u8>,
    src_ptrs: Vec<*const u8>,
    parity: Vec<Aligned>,
    rebuilt: Vec<Aligned>,
    encode_fn: Option<Box<dyn FnMut()>>,
    rebuild_fn: Option<Box<dyn FnMut()>>,
}

#[cfg(feature = "bench-isal")]
impl IsalRs {
    fn new(k: usize, m: usize, f: usize, data: &[Aligned], parity: &[Aligned]) -> Option<Self> {
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
        let src_ptrs = sources
            .iter()
            .map(|&i| if i < k { data[i].get().as_ptr() } else { parity[i - k].get().as_ptr() })
            .collect();
        Some(Self {
            k,
            m,
            f,
            enc_tables,
            dec_tables,
            data_ptrs: data.iter().map(|d| d.get().as_ptr()).collect(),
            src_ptrs,
            parity: (0..m).map(|i| Aligned::new(f, 77 + i as u8)).collect(),
            rebuilt: (0..m).map(|i| Aligned::new(f, 33 + i as u8)).collect(),
            encode_fn: None,
            rebuild_fn: None,
        })
    }

    /// The timed calls: `ec_encode_data` with the encode tables over the data,
    /// and with the decode tables over the survivors.
    fn closures(&mut self) -> (&mut dyn FnMut(), &mut dyn FnMut()) {
        let (k, m, f) = (self.k as i32, self.m as i32, self.f as i32);
        let call = |tables: *const u8, ins: *const *const u8, outs: Vec<*mut u8>| {
            move || {
                // SAFETY: k input pointers and m output pointers to distinct buffers
                // of f bytes each that outlive the closure (owned by the bench case
                // and `self`); tables of 32 * k * m bytes from ec_init_tables.
                unsafe { isal::ec_encode_data(f, k, m, tables, ins, outs.as_ptr()) }
            }
        };
        let parity = self.parity.iter_mut().map(|p| p.get_mut().as_mut_ptr()).collect();
        let rebuilt = self.rebuilt.iter_mut().map(|p| p.get_mut().as_mut_ptr()).collect();
        self.encode_fn = Some(Box::new(call(self.enc_tables.as_ptr(), self.data_ptrs.as_ptr(), parity)));
        self.rebuild_fn = Some(Box::new(call(self.dec_tables.as_ptr(), self.src_ptrs.as_ptr(), rebuilt)));
        (self.encode_fn.as_mut().unwrap().as_mut(), self.rebuild_fn.as_mut().unwrap().as_mut())
    }

    fn check(&self, data: &[Aligned], parity: &[Aligned]) {
        for (a, b) in self.parity.iter().zip(parity) {
            assert!(a.get() == b.get(), "ISA-L parity differs from ours");
        }
        for (i, r) in self.rebuilt.iter().enumerate() {
            assert!(r.get() == data[i].get(), "ISA-L rebuilt fragment {i} wrong");
        }
    }
}
