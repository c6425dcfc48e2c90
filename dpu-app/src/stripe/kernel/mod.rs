//! GF(2^8) dot products over byte slices, the inner loop of Reed-Solomon encode and
//! reconstruct: `out[r][i] = XOR over j of c[r][j] * in[j][i]`.
//!
//! Two methods, each at the widest vectors the CPU has ([`Backend`] picks one at
//! start-up from CPUID):
//! - GFNI (`vgf2p8affineqb`, `gfni_avx512.rs` on zmm, `gfni_avx2.rs` on ymm): each
//!   coefficient is an 8x8 bit matrix (8 bytes, [`super::gf::affine_matrix`]) and
//!   one instruction multiplies a whole vector by it. ISA-L's `*_gfni` method.
//! - Split tables (`vpshufb` in `avx512.rs` and `avx2.rs`, `tbl` in `neon.rs`,
//!   plain look-ups in `portable.rs`): each coefficient is two 16-entry nibble tables
//!   (32 bytes, [`super::gf::split_table`]). ISA-L's AVX2 method.
//!
//! The tables a kernel reads are built for its backend ([`Tables`]), so a codec
//! fills them once (encode) or per loss pattern (decode) into memory allocated
//! with it. Up to [`GROUP_ROWS_MAX`] outputs are computed per pass over the inputs,
//! so each input vector is loaded once for all of them (ISA-L's
//! `gf_Nvect_dot_prod`), and work goes in chunks of [`CHUNK_BYTES`] per input, so
//! the inputs stay in L1 between the passes of a code with more parity rows. A tail
//! shorter than 64 bytes (fragments never have one: they are 64-byte multiples) is
//! staged through a zeroed stack buffer so the same SIMD kernel computes it.
//!
//! This is the only module of the codecs with `unsafe`: SIMD loads and stores
//! through raw pointers, and calls to functions compiled for a CPU feature.
#![allow(unsafe_code)]

mod backend;
mod portable;
mod tables;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod gfni_avx2;
#[cfg(target_arch = "x86_64")]
mod gfni_avx512;
#[cfg(target_arch = "aarch64")]
mod neon;

use crate::limits::FRAGMENTS_MAX;
use backend::Isa;
pub use backend::{Backend, TableKind};
pub use tables::Tables;

/// Outputs computed per pass over the inputs.
pub const GROUP_ROWS_MAX: usize = 4;
/// Bytes of each input processed per group of passes (keeps k inputs in L1).
pub const CHUNK_BYTES: usize = 2048;
/// SIMD kernels work on multiples of this many bytes; a shorter tail is staged.
const STEP_BYTES: usize = 64;

const _: () = assert!(CHUNK_BYTES % STEP_BYTES == 0);
const _: () = assert!(GROUP_ROWS_MAX >= 1 && GROUP_ROWS_MAX <= FRAGMENTS_MAX);

/// Computes `outputs[r] = XOR over j of c[r][j] * inputs[j]` with the
/// coefficients `tables` was filled with, on the backend it was built for.
///
/// Panics (programmer error) if the shapes disagree: `inputs.len()` must be the
/// tables' k, `outputs.len()` their rows in use, and every input and output the
/// same length.
pub fn dot_prod(tables: &Tables, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) {
    let k = inputs.len();
    assert_eq!(k, tables.inputs(), "{k} inputs for tables of {}", tables.inputs());
    assert_eq!(outputs.len(), tables.outputs(), "{} outputs for tables of {}", outputs.len(), tables.outputs());
    let len = inputs[0].len();
    assert!(inputs.iter().all(|x| x.len() == len), "inputs differ in length");
    assert!(outputs.iter().all(|x| x.len() == len), "outputs differ from inputs in length");
    let backend = tables.backend();
    if backend.0 == Isa::Portable {
        portable::dot(tables.bytes(), inputs, outputs, 0, len);
        return;
    }
    let simd_len = len - len % STEP_BYTES;
    chunks(backend, tables.bytes(), inputs, outputs, 0, simd_len);
    if simd_len < len {
        tail(backend, tables.bytes(), inputs, outputs, simd_len);
    }
}

/// `start..end` (64-byte multiples, checked shapes) in L1-sized chunks, up to
/// [`GROUP_ROWS_MAX`] outputs per pass.
fn chunks(backend: Backend, tables: &[u8], inputs: &[&[u8]], outputs: &mut [&mut [u8]], start: usize, end: usize) {
    let row_bytes = inputs.len() * backend.table_kind().bytes();
    let rows = outputs.len();
    let mut from = start;
    while from < end {
        let to = (from + CHUNK_BYTES).min(end);
        let mut row = 0;
        while row < rows {
            let n = (rows - row).min(GROUP_ROWS_MAX);
            let group_tables = &tables[row * row_bytes..(row + n) * row_bytes];
            simd_group(backend, group_tables, inputs, &mut outputs[row..row + n], from, to);
            row += n;
        }
        from = to;
    }
}

/// The last `len - from < 64` bytes, through zero-padded copies on the stack so
/// the SIMD kernels never read or write past a slice. Out of line: its 4 KiB of
/// stack would otherwise be probed and reserved on every call of `dot_prod`.
#[cold]
#[inline(never)]
fn tail(backend: Backend, tables: &[u8], inputs: &[&[u8]], outputs: &mut [&mut [u8]], from: usize) {
    let n = inputs[0].len() - from;
    debug_assert!(n < STEP_BYTES);
    let mut staged_in = [[0u8; STEP_BYTES]; FRAGMENTS_MAX];
    for (staged, input) in staged_in.iter_mut().zip(inputs) {
        staged[..n].copy_from_slice(&input[from..]);
    }
    let mut staged_out = [[0u8; STEP_BYTES]; FRAGMENTS_MAX];
    {
        let ins = staged_in.each_ref().map(|b| b.as_slice());
        let mut outs = staged_out.each_mut().map(|b| b.as_mut_slice());
        chunks(backend, tables, &ins[..inputs.len()], &mut outs[..outputs.len()], 0, STEP_BYTES);
    }
    for (out, staged) in outputs.iter_mut().zip(&staged_out) {
        out[from..].copy_from_slice(&staged[..n]);
    }
}

/// Calls `kernel::<R>(args)` for R = `rows` in 1..=4 (the group sizes).
macro_rules! by_rows {
    ($($kernel:ident)::+, $rows:expr, $($arg:expr),* $(,)?) => {
        match $rows {
            1 => $($kernel)::+::<1>($($arg),*),
            2 => $($kernel)::+::<2>($($arg),*),
            3 => $($kernel)::+::<3>($($arg),*),
            _ => $($kernel)::+::<4>($($arg),*),
        }
    };
}
const _: () = assert!(GROUP_ROWS_MAX == 4, "by_rows! instantiates group sizes 1..=4");

/// One pass of up to [`GROUP_ROWS_MAX`] outputs over `start..end` of every input.
fn simd_group(backend: Backend, tables: &[u8], inputs: &[&[u8]], outputs: &mut [&mut [u8]], start: usize, end: usize) {
    debug_assert!((end - start) % STEP_BYTES == 0 && end <= inputs[0].len());
    debug_assert!(tables.len() == outputs.len() * inputs.len() * backend.table_kind().bytes());
    // Every SIMD arm relies on the same facts, named in its SAFETY comment as
    // "the group contract": `dot_prod` checked that inputs and outputs share one
    // length and that the tables are this backend's (`Tables` is built for one
    // backend, and the debug assertion above checks `outputs.len() * k` tables of
    // its kind); `start..end` is a multiple of 64 within that length.
    match backend.0 {
        Isa::Portable => portable::dot(tables, inputs, outputs, start, end),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `GfniAvx512` exists only where `backend.rs` saw GFNI, AVX-512F
        // and AVX-512BW; the rest is the group contract.
        Isa::GfniAvx512 => unsafe { by_rows!(gfni_avx512::dot, outputs.len(), tables, inputs, outputs, start, end) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `GfniAvx2` exists only where `backend.rs` saw GFNI, AVX and
        // AVX2; the rest is the group contract.
        Isa::GfniAvx2 => unsafe { by_rows!(gfni_avx2::dot, outputs.len(), tables, inputs, outputs, start, end) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Avx512` exists only where `backend.rs` saw AVX-512F and
        // AVX-512BW; the rest is the group contract.
        Isa::Avx512 => unsafe { by_rows!(avx512::dot, outputs.len(), tables, inputs, outputs, start, end) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Avx2` exists only where `backend.rs` saw AVX2; the rest is the
        // group contract.
        Isa::Avx2 => unsafe { by_rows!(avx2::dot, outputs.len(), tables, inputs, outputs, start, end) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: `Neon` exists only where `backend.rs` saw NEON; the rest is the
        // group contract.
        Isa::Neon => unsafe { by_rows!(neon::dot, outputs.len(), tables, inputs, outputs, start, end) },
    }
}

#[cfg(test)]
mod tests {
    use super::super::gf;
    use super::*;

    fn tables_for(backend: Backend, k: usize, rows: usize, coefs: &[u8]) -> Tables {
        let mut t = Tables::new(backend, k, rows);
        t.fill(rows, |r, j| coefs[r * k + j]);
        t
    }

    /// Prints the backends this build knows but this CPU lacks, so a test run
    /// says which kernels it did not check.
    fn note_skipped(test: &str) {
        for name in Backend::known_names() {
            if Backend::by_name(name).is_none() {
                println!("{test}: skipping kernel {name}: this CPU lacks its features");
            }
        }
    }

    /// Every kernel this CPU runs agrees with a byte-by-byte reference for every
    /// group size, odd lengths (staged tail), lengths across chunk ends, and rows
    /// past one group; all-zero and all-one coefficients included.
    #[test]
    fn every_kernel_agrees_with_the_definition() {
        note_skipped("every_kernel_agrees_with_the_definition");
        let mut seed = 0x9e37_79b9_u32;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed as u8
        };
        let shapes = [(1usize, 1usize), (3, 2), (4, 4), (10, 4), (6, 6), (5, 7), (2, 9), (16, 3), (24, 8), (32, 1)];
        for (k, rows) in shapes {
            for len in [1usize, 63, 64, 65, 127, 128, 192, 200, 2048, 2048 + 64 + 7, 5000] {
                let inputs: Vec<Vec<u8>> = (0..k).map(|_| (0..len).map(|_| next()).collect()).collect();
                let mut coefs: Vec<u8> = (0..rows * k).map(|_| next()).collect();
                coefs[0] = 0;
                *coefs.last_mut().unwrap() = 1;
                let want: Vec<Vec<u8>> = (0..rows)
                    .map(|r| {
                        (0..len).map(|i| (0..k).fold(0, |a, j| a ^ gf::mul(coefs[r * k + j], inputs[j][i]))).collect()
                    })
                    .collect();
                let refs: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
                for backend in Backend::all_available() {
                    let tables = tables_for(backend, k, rows, &coefs);
                    let mut outs = vec![vec![0xa5u8; len]; rows];
                    let mut out_refs: Vec<&mut [u8]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
                    dot_prod(&tables, &refs, &mut out_refs);
                    assert_eq!(outs, want, "backend {} k {k} rows {rows} len {len}", backend.name());
                }
            }
        }
    }

    /// Kernels must not touch bytes of a longer buffer past the slices they get:
    /// the slices here end inside larger allocations whose rest is a canary.
    #[test]
    fn kernels_stay_inside_their_slices() {
        note_skipped("kernels_stay_inside_their_slices");
        let (k, rows) = (3, 2);
        for backend in Backend::all_available() {
            for len in [64usize, 100, 130, 256] {
                let inputs: Vec<Vec<u8>> = (0..k).map(|j| (0..len + 64).map(|i| (i * 7 + j) as u8).collect()).collect();
                let refs: Vec<&[u8]> = inputs.iter().map(|x| &x[..len]).collect();
                let tables = tables_for(backend, k, rows, &[2, 3, 4, 5, 6, 7]);
                let mut outs = vec![vec![0xeeu8; len + 64]; rows];
                let mut out_refs: Vec<&mut [u8]> = outs.iter_mut().map(|o| &mut o[..len]).collect();
                dot_prod(&tables, &refs, &mut out_refs);
                for o in &outs {
                    assert!(o[len..].iter().all(|&b| b == 0xee), "backend {} wrote past len {len}", backend.name());
                }
            }
        }
    }

    #[test]
    fn detect_picks_the_first_available_and_portable_is_last() {
        let all: Vec<Backend> = Backend::all_available().collect();
        assert_eq!(all[0], Backend::detect());
        assert_eq!(*all.last().unwrap(), Backend::portable());
        for b in &all {
            assert_eq!(Backend::by_name(b.name()), Some(*b));
        }
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let gfni512 = has!("gfni") && has!("avx512f") && has!("avx512bw");
            assert_eq!(Backend::detect().name() == "gfni-avx512", gfni512);
            assert_eq!(Backend::by_name("avx2").is_some(), has!("avx2"));
            assert_eq!(Backend::by_name("avx512").is_some(), has!("avx512f") && has!("avx512bw"));
            assert_eq!(Backend::by_name("gfni-avx2").is_some(), has!("gfni") && has!("avx2"));
        }
        #[cfg(target_arch = "aarch64")]
        assert_eq!(Backend::detect().name(), "neon");
    }

    #[test]
    fn tables_hold_the_format_of_their_backend() {
        for backend in Backend::all_available() {
            let mut t = Tables::new(backend, 2, 3);
            assert_eq!(t.bytes().len(), 0, "no rows in use before fill");
            t.fill(1, |_, j| [0x53, 0xca][j]);
            let b = t.bytes();
            match backend.table_kind() {
                TableKind::Split => {
                    let mut want = [0u8; 32];
                    gf::split_table(0xca, &mut want);
                    assert_eq!(&b[32..64], &want);
                }
                TableKind::Affine => assert_eq!(b[8..16], gf::affine_matrix(0xca).to_le_bytes()),
            }
            assert_eq!(b.len(), 2 * backend.table_kind().bytes());
        }
    }
}
