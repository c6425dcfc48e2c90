//! GFNI on zmm: `vgf2p8affineqb` multiplies 64 bytes by a constant in one
//! instruction, the constant given as an 8x8 bit matrix broadcast to every lane
//! ([`super::super::gf::affine_matrix`]). Four zmm (256 bytes) of every input per
//! step, so each matrix broadcast serves four multiplies; wide stripes larger
//! than L2 prefetch each input a kilobyte ahead.

use super::{TableKind, STEP_BYTES};
use std::arch::x86_64::*;

const MATRIX_BYTES: usize = TableKind::Affine.bytes();
/// How far ahead of the step each input is prefetched into L1, for stripes of
/// at least [`PREFETCH_FROM_BYTES`] over at least [`PREFETCH_INPUTS_MIN`] inputs:
/// with that many streams (plus the outputs) the hardware prefetchers fall behind
/// once a stripe outgrows L2 (RS(10,4) at 1 MiB: 50 -> 65 GB/s; 1024 beat 2048).
/// With fewer inputs or a stripe in L2 they keep up and the prefetches only take
/// load slots (RS(4,2) at 1 MiB -5%, RS(10,4) at 64 KiB up to -20%).
const PREFETCH_BYTES: usize = 1024;
/// Input bytes (k x fragment) from which the kernel prefetches: half of a 1 MiB
/// L2, leaving room for the outputs.
const PREFETCH_FROM_BYTES: usize = 512 << 10;
/// Fewest inputs for which the kernel prefetches (measured: k = 4 lost, k = 6
/// neither gained nor lost, k = 10 gained).
const PREFETCH_INPUTS_MIN: usize = 8;

/// `R` outputs over `start..end`, 256 bytes per step, then at most one step of
/// 128 and one of 64.
///
/// # Safety
/// The CPU supports GFNI, AVX-512F and AVX-512BW; `outputs.len() == R`;
/// `tables` holds `R * inputs.len()` affine matrices (8 bytes each); every input
/// and output is at least `end` bytes long and `end - start` is a multiple of 64.
#[target_feature(enable = "gfni,avx512f,avx512bw")]
pub unsafe fn dot<const R: usize>(
    tables: &[u8],
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    start: usize,
    end: usize,
) {
    debug_assert!(outputs.len() == R && tables.len() == R * inputs.len() * MATRIX_BYTES);
    let mut off = start;
    if inputs.len() >= PREFETCH_INPUTS_MIN && inputs.len() * inputs[0].len() >= PREFETCH_FROM_BYTES {
        while off + 4 * STEP_BYTES <= end {
            // SAFETY: `off + 256 <= end`, and the rest is the caller's contract.
            unsafe { step::<R, 4, true>(tables, inputs, outputs, off) };
            off += 4 * STEP_BYTES;
        }
    } else {
        while off + 4 * STEP_BYTES <= end {
            // SAFETY: as above.
            unsafe { step::<R, 4, false>(tables, inputs, outputs, off) };
            off += 4 * STEP_BYTES;
        }
    }
    if off + 2 * STEP_BYTES <= end {
        // SAFETY: `off + 128 <= end`, and the rest is the caller's contract.
        unsafe { step::<R, 2, false>(tables, inputs, outputs, off) };
        off += 2 * STEP_BYTES;
    }
    if off < end {
        // SAFETY: `end - off == 64` since both ends are 64-byte steps apart.
        unsafe { step::<R, 1, false>(tables, inputs, outputs, off) };
    }
}

/// `R` outputs over `off..off + 64 * V`, prefetching each input
/// [`PREFETCH_BYTES`] ahead if `P`. Inputs go in pairs: the two products of a
/// pair fold into the accumulator with one `vpternlogq` (three-way XOR), so each
/// input costs one affine and half an XOR per vector and output instead of one
/// of each: the loop is bound by those two ports, and this takes a quarter off.
///
/// # Safety
/// As [`dot`], with every input and output at least `off + 64 * V` bytes long.
#[inline]
#[target_feature(enable = "gfni,avx512f,avx512bw")]
unsafe fn step<const R: usize, const V: usize, const P: bool>(
    tables: &[u8],
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    off: usize,
) {
    let k = inputs.len();
    let mut acc = [[_mm512_setzero_si512(); V]; R];
    let mut j = 0;
    while j + 2 <= k {
        // SAFETY: `off + 64 * V <= len` of inputs `j` and `j + 1 < k`.
        let (x, y) = unsafe { (load::<V, P>(inputs[j], off), load::<V, P>(inputs[j + 1], off)) };
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: `(r * k + j + 2) * 8 <= R * k * 8 == tables.len()`.
            let (mx, my) = unsafe { (matrix(tables, r * k + j), matrix(tables, r * k + j + 1)) };
            for ((a, &x), &y) in acc.iter_mut().zip(&x).zip(&y) {
                let px = _mm512_gf2p8affine_epi64_epi8::<0>(x, mx);
                let py = _mm512_gf2p8affine_epi64_epi8::<0>(y, my);
                // 0x96: the truth table of a ^ b ^ c.
                *a = _mm512_ternarylogic_epi64::<0x96>(*a, px, py);
            }
        }
        j += 2;
    }
    if j < k {
        // SAFETY: as above, for the last input of an odd k.
        let x = unsafe { load::<V, P>(inputs[j], off) };
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: `(r * k + j + 1) * 8 <= R * k * 8 == tables.len()`.
            let mx = unsafe { matrix(tables, r * k + j) };
            for (a, &x) in acc.iter_mut().zip(&x) {
                *a = _mm512_xor_si512(*a, _mm512_gf2p8affine_epi64_epi8::<0>(x, mx));
            }
        }
    }
    for (out, acc) in outputs.iter_mut().zip(&acc) {
        for (v, a) in acc.iter().enumerate() {
            // SAFETY: `off + 64 * V <= out.len()`, and an output is a `&mut`
            // slice that no input aliases.
            unsafe { _mm512_storeu_si512(out.as_mut_ptr().add(off + STEP_BYTES * v).cast(), *a) };
        }
    }
}

/// `V` vectors of `input` from `off`, prefetching [`PREFETCH_BYTES`] ahead if `P`.
///
/// # Safety
/// The CPU supports AVX-512F; `off + 64 * V <= input.len()`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn load<const V: usize, const P: bool>(input: &[u8], off: usize) -> [__m512i; V] {
    let mut x = [_mm512_setzero_si512(); V];
    for (v, x) in x.iter_mut().enumerate() {
        // SAFETY: `off + 64 * V <= input.len()` (caller's contract).
        *x = unsafe { _mm512_loadu_si512(input.as_ptr().add(off + STEP_BYTES * v).cast()) };
        if P {
            // A prefetch never faults, and `wrapping_add` keeps the address
            // computation defined past the slice's end.
            let ahead = input.as_ptr().wrapping_add(off + PREFETCH_BYTES + STEP_BYTES * v);
            _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
        }
    }
    x
}

/// The affine matrix number `i` of `tables`, broadcast to every lane.
///
/// # Safety
/// The CPU supports AVX-512F; `(i + 1) * 8 <= tables.len()`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn matrix(tables: &[u8], i: usize) -> __m512i {
    // SAFETY: in bounds by the caller's contract; the read is unaligned.
    let m = unsafe { tables.as_ptr().add(i * MATRIX_BYTES).cast::<i64>().read_unaligned() };
    _mm512_set1_epi64(i64::from_le(m))
}
