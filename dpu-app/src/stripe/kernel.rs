//! GF(2^8) dot products over byte slices, the inner loop of Reed-Solomon encode and
//! reconstruct: `out[r][i] = XOR over j of c[r][j] * in[j][i]`.
//!
//! Each coefficient comes as a 32-byte split table (see [`super::gf::split_table`]):
//! a byte is multiplied by two 16-entry table look-ups, one per nibble, which SIMD
//! byte shuffles do 32 (AVX2 `vpshufb`) or 16 (NEON `tbl`) at a time. This is the
//! method of ISA-L's AVX2 kernels. Up to four outputs are computed per pass over
//! the inputs, so each input byte is loaded and split once for four outputs, and
//! work goes in chunks small enough that the inputs stay in L1 between passes.
//!
//! This is the only module of the codecs with `unsafe`: SIMD loads and stores
//! through raw pointers, and calls to functions compiled for a CPU feature.
#![allow(unsafe_code)]

/// Bytes of one coefficient's split table.
pub const TABLE_BYTES: usize = 32;
/// Outputs computed per pass over the inputs.
const GROUP_ROWS_MAX: usize = 4;
/// Bytes of each input processed per group of passes (keeps k inputs in L1).
const CHUNK_BYTES: usize = 2048;
/// SIMD kernels work on multiples of this many bytes; the rest goes the portable way.
const STEP_BYTES: usize = 64;

const _: () = assert!(CHUNK_BYTES % STEP_BYTES == 0);

/// The instruction set the kernels run with. Only [`Backend::detect`] can pick a
/// SIMD one, so a `Backend` value is proof that the CPU has what it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backend(Isa);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Isa {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "aarch64")]
    Neon,
}

impl Backend {
    /// The fastest kernels this CPU runs: AVX2 on x86-64 when present, NEON on
    /// aarch64 (always present there), the portable table code otherwise.
    pub fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            return Self(Isa::Avx2);
        }
        #[cfg(target_arch = "aarch64")]
        if std::arch::is_aarch64_feature_detected!("neon") {
            return Self(Isa::Neon);
        }
        Self(Isa::Portable)
    }

    /// The portable kernels: plain Rust, any CPU; slow (about 1 GB/s), used where
    /// no SIMD kernel exists and to cross-check the SIMD ones in tests.
    pub fn portable() -> Self {
        Self(Isa::Portable)
    }

    /// Name for logs and the benchmark: `avx2`, `neon` or `portable`.
    pub fn name(self) -> &'static str {
        match self.0 {
            Isa::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => "avx2",
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => "neon",
        }
    }
}

/// Computes `outputs[r] = XOR over j of c[r][j] * inputs[j]`, where the split
/// table of `c[r][j]` is `tables[(r * k + j) * 32..][..32]` and k is
/// `inputs.len()`.
///
/// Panics (programmer error) if the shapes disagree: every input and output must
/// have the same length and `tables` exactly `outputs.len() * k * 32` bytes.
pub fn dot_prod(backend: Backend, tables: &[u8], inputs: &[&[u8]], outputs: &mut [&mut [u8]]) {
    let k = inputs.len();
    let rows = outputs.len();
    assert!(k > 0, "a dot product needs at least one input");
    assert_eq!(tables.len(), rows * k * TABLE_BYTES, "tables do not match the shape");
    let len = inputs[0].len();
    assert!(inputs.iter().all(|x| x.len() == len), "inputs differ in length");
    assert!(outputs.iter().all(|x| x.len() == len), "outputs differ from inputs in length");

    let simd_len = if backend.0 == Isa::Portable { 0 } else { len - len % STEP_BYTES };
    let mut start = 0;
    while start < simd_len {
        let end = (start + CHUNK_BYTES).min(simd_len);
        let mut row = 0;
        while row < rows {
            let n = (rows - row).min(GROUP_ROWS_MAX);
            let group_tables = &tables[row * k * TABLE_BYTES..(row + n) * k * TABLE_BYTES];
            let group_outputs = &mut outputs[row..row + n];
            simd_group(backend, group_tables, inputs, group_outputs, start, end);
            row += n;
        }
        start = end;
    }
    if simd_len < len {
        portable(tables, inputs, outputs, simd_len, len);
    }
}

/// One pass of up to four outputs over `start..end` of every input.
fn simd_group(backend: Backend, tables: &[u8], inputs: &[&[u8]], outputs: &mut [&mut [u8]], start: usize, end: usize) {
    debug_assert!((end - start) % STEP_BYTES == 0 && end <= inputs[0].len());
    match backend.0 {
        Isa::Portable => portable(tables, inputs, outputs, start, end),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Backend` holds `Avx2` only if `detect` saw AVX2 on this CPU;
        // `dot_prod` checked that tables, inputs and outputs have matching shapes
        // and `start..end` is a multiple of 64 within every input and output.
        Isa::Avx2 => unsafe {
            match outputs.len() {
                1 => avx2::dot::<1>(tables, inputs, outputs, start, end),
                2 => avx2::dot::<2>(tables, inputs, outputs, start, end),
                3 => avx2::dot::<3>(tables, inputs, outputs, start, end),
                _ => avx2::dot::<4>(tables, inputs, outputs, start, end),
            }
        },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: a `Backend` holds `Neon` only if `detect` saw NEON on this CPU;
        // shapes and range are checked as for AVX2 above.
        Isa::Neon => unsafe {
            match outputs.len() {
                1 => neon::dot::<1>(tables, inputs, outputs, start, end),
                2 => neon::dot::<2>(tables, inputs, outputs, start, end),
                3 => neon::dot::<3>(tables, inputs, outputs, start, end),
                _ => neon::dot::<4>(tables, inputs, outputs, start, end),
            }
        },
    }
}

/// The portable kernel over `start..end`: two table look-ups per byte.
fn portable(tables: &[u8], inputs: &[&[u8]], outputs: &mut [&mut [u8]], start: usize, end: usize) {
    let k = inputs.len();
    for (r, out) in outputs.iter_mut().enumerate() {
        let out = &mut out[start..end];
        out.fill(0);
        for (j, input) in inputs.iter().enumerate() {
            let t = &tables[(r * k + j) * TABLE_BYTES..][..TABLE_BYTES];
            let (lo, hi) = t.split_at(16);
            for (o, &x) in out.iter_mut().zip(&input[start..end]) {
                *o ^= lo[usize::from(x & 15)] ^ hi[usize::from(x >> 4)];
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{STEP_BYTES, TABLE_BYTES};
    use std::arch::x86_64::*;

    /// `R` outputs over `start..end`, 64 bytes per step.
    ///
    /// # Safety
    /// The CPU supports AVX2; `outputs.len() == R`; `tables` holds
    /// `R * inputs.len() * 32` bytes; every input and output is at least `end`
    /// bytes long and `end - start` is a multiple of 64.
    #[target_feature(enable = "avx2")]
    pub unsafe fn dot<const R: usize>(
        tables: &[u8],
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
        start: usize,
        end: usize,
    ) {
        let k = inputs.len();
        let mask = _mm256_set1_epi8(0x0f);
        let mut off = start;
        while off < end {
            let mut acc0 = [_mm256_setzero_si256(); R];
            let mut acc1 = [_mm256_setzero_si256(); R];
            for (j, input) in inputs.iter().enumerate() {
                // SAFETY: `off + 64 <= end <= input.len()` (caller's contract).
                let (x0, x1) = unsafe {
                    let p = input.as_ptr().add(off);
                    (_mm256_loadu_si256(p.cast()), _mm256_loadu_si256(p.add(32).cast()))
                };
                let lo0 = _mm256_and_si256(x0, mask);
                let hi0 = _mm256_and_si256(_mm256_srli_epi64::<4>(x0), mask);
                let lo1 = _mm256_and_si256(x1, mask);
                let hi1 = _mm256_and_si256(_mm256_srli_epi64::<4>(x1), mask);
                for r in 0..R {
                    // SAFETY: `(r * k + j + 1) * 32 <= R * k * 32 == tables.len()`.
                    let (tl, th) = unsafe {
                        let t = tables.as_ptr().add((r * k + j) * TABLE_BYTES);
                        (
                            _mm256_broadcastsi128_si256(_mm_loadu_si128(t.cast())),
                            _mm256_broadcastsi128_si256(_mm_loadu_si128(t.add(16).cast())),
                        )
                    };
                    let p0 = _mm256_xor_si256(_mm256_shuffle_epi8(tl, lo0), _mm256_shuffle_epi8(th, hi0));
                    let p1 = _mm256_xor_si256(_mm256_shuffle_epi8(tl, lo1), _mm256_shuffle_epi8(th, hi1));
                    acc0[r] = _mm256_xor_si256(acc0[r], p0);
                    acc1[r] = _mm256_xor_si256(acc1[r], p1);
                }
            }
            for r in 0..R {
                // SAFETY: `off + 64 <= end <= outputs[r].len()`, and an output is
                // a `&mut` slice that no input aliases.
                unsafe {
                    let p = outputs[r].as_mut_ptr().add(off);
                    _mm256_storeu_si256(p.cast(), acc0[r]);
                    _mm256_storeu_si256(p.add(32).cast(), acc1[r]);
                }
            }
            off += STEP_BYTES;
        }
    }
}

#[cfg(target_arch = "aarch64")]
mod neon {
    use super::{STEP_BYTES, TABLE_BYTES};
    use std::arch::aarch64::*;

    /// `R` outputs over `start..end`, 64 bytes per step (four 16-byte lanes).
    ///
    /// # Safety
    /// The CPU supports NEON; `outputs.len() == R`; `tables` holds
    /// `R * inputs.len() * 32` bytes; every input and output is at least `end`
    /// bytes long and `end - start` is a multiple of 64.
    #[target_feature(enable = "neon")]
    pub unsafe fn dot<const R: usize>(
        tables: &[u8],
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
        start: usize,
        end: usize,
    ) {
        let k = inputs.len();
        let mask = vdupq_n_u8(0x0f);
        let mut off = start;
        while off < end {
            let mut acc = [[vdupq_n_u8(0); 4]; R];
            for (j, input) in inputs.iter().enumerate() {
                // SAFETY: `off + 64 <= end <= input.len()` (caller's contract).
                let x = unsafe {
                    let p = input.as_ptr().add(off);
                    [vld1q_u8(p), vld1q_u8(p.add(16)), vld1q_u8(p.add(32)), vld1q_u8(p.add(48))]
                };
                let lo = x.map(|v| vandq_u8(v, mask));
                let hi = x.map(|v| vshrq_n_u8::<4>(v));
                for r in 0..R {
                    // SAFETY: `(r * k + j + 1) * 32 <= R * k * 32 == tables.len()`.
                    let (tl, th) = unsafe {
                        let t = tables.as_ptr().add((r * k + j) * TABLE_BYTES);
                        (vld1q_u8(t), vld1q_u8(t.add(16)))
                    };
                    for l in 0..4 {
                        let p = veorq_u8(vqtbl1q_u8(tl, lo[l]), vqtbl1q_u8(th, hi[l]));
                        acc[r][l] = veorq_u8(acc[r][l], p);
                    }
                }
            }
            for r in 0..R {
                // SAFETY: `off + 64 <= end <= outputs[r].len()`, and an output is
                // a `&mut` slice that no input aliases.
                unsafe {
                    let p = outputs[r].as_mut_ptr().add(off);
                    for l in 0..4 {
                        vst1q_u8(p.add(16 * l), acc[r][l]);
                    }
                }
            }
            off += STEP_BYTES;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::gf;
    use super::*;

    fn tables_for(coefs: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8; coefs.len() * TABLE_BYTES];
        for (c, t) in coefs.iter().zip(out.chunks_exact_mut(TABLE_BYTES)) {
            gf::split_table(*c, t.try_into().unwrap());
        }
        out
    }

    /// The detected SIMD kernel agrees with a byte-by-byte reference for every
    /// group size, odd lengths (portable tail) and lengths across chunk ends.
    #[test]
    fn simd_and_portable_agree_with_the_definition() {
        let mut seed = 0x9e37_79b9_u32;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed as u8
        };
        for (k, rows) in [(1usize, 1usize), (3, 2), (4, 4), (10, 4), (6, 6), (5, 7)] {
            for len in [0usize, 1, 63, 64, 65, 200, 2048, 2048 + 64 + 7, 5000] {
                let inputs: Vec<Vec<u8>> = (0..k).map(|_| (0..len).map(|_| next()).collect()).collect();
                let coefs: Vec<u8> = (0..rows * k).map(|_| next()).collect();
                let tables = tables_for(&coefs);
                let want: Vec<Vec<u8>> = (0..rows)
                    .map(|r| {
                        (0..len).map(|i| (0..k).fold(0, |a, j| a ^ gf::mul(coefs[r * k + j], inputs[j][i]))).collect()
                    })
                    .collect();
                let refs: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
                for backend in [Backend::detect(), Backend::portable()] {
                    let mut outs = vec![vec![0xa5u8; len]; rows];
                    let mut out_refs: Vec<&mut [u8]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
                    dot_prod(backend, &tables, &refs, &mut out_refs);
                    assert_eq!(outs, want, "backend {} k {k} rows {rows} len {len}", backend.name());
                }
            }
        }
    }

    #[test]
    fn detect_picks_simd_where_the_cpu_has_it() {
        #[cfg(target_arch = "x86_64")]
        assert_eq!(Backend::detect().name() == "avx2", std::arch::is_x86_feature_detected!("avx2"));
        #[cfg(target_arch = "aarch64")]
        assert_eq!(Backend::detect().name(), "neon");
    }
}
