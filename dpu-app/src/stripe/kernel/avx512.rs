//! Split tables on zmm (AVX-512BW `vpshufb`): the AVX2 method at twice the
//! width, two zmm (128 bytes) of every input per step so that each table
//! broadcast serves two shuffles of each nibble; the two products fold into the
//! accumulator with one `vpternlogq`.

use super::{TableKind, STEP_BYTES};
use std::arch::x86_64::*;

const TABLE_BYTES: usize = TableKind::Split.bytes();

/// `R` outputs over `start..end`, 128 bytes per step and a last step of 64.
///
/// # Safety
/// The CPU supports AVX-512F and AVX-512BW; `outputs.len() == R`; `tables`
/// holds `R * inputs.len()` split tables (32 bytes each); every input and output
/// is at least `end` bytes long and `end - start` is a multiple of 64.
#[target_feature(enable = "avx512f,avx512bw")]
pub unsafe fn dot<const R: usize>(
    tables: &[u8],
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    start: usize,
    end: usize,
) {
    debug_assert!(outputs.len() == R && tables.len() == R * inputs.len() * TABLE_BYTES);
    let mut off = start;
    while off + 2 * STEP_BYTES <= end {
        // SAFETY: `off + 128 <= end`, and the rest is the caller's contract.
        unsafe { step::<R, 2>(tables, inputs, outputs, off) };
        off += 2 * STEP_BYTES;
    }
    if off < end {
        // SAFETY: `end - off == 64` since both ends are 64-byte steps apart.
        unsafe { step::<R, 1>(tables, inputs, outputs, off) };
    }
}

/// `R` outputs over `off..off + 64 * V`.
///
/// # Safety
/// As [`dot`], with every input and output at least `off + 64 * V` bytes long.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn step<const R: usize, const V: usize>(tables: &[u8], inputs: &[&[u8]], outputs: &mut [&mut [u8]], off: usize) {
    let k = inputs.len();
    let mask = _mm512_set1_epi8(0x0f);
    let mut acc = [[_mm512_setzero_si512(); V]; R];
    for (j, input) in inputs.iter().enumerate() {
        let mut lo = [_mm512_setzero_si512(); V];
        let mut hi = [_mm512_setzero_si512(); V];
        for v in 0..V {
            // SAFETY: `off + 64 * V <= input.len()` (caller's contract).
            let x = unsafe { _mm512_loadu_si512(input.as_ptr().add(off + STEP_BYTES * v).cast()) };
            lo[v] = _mm512_and_si512(x, mask);
            hi[v] = _mm512_and_si512(_mm512_srli_epi64::<4>(x), mask);
        }
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: `(r * k + j + 1) * 32 <= R * k * 32 == tables.len()`.
            let (tl, th) = unsafe {
                let t = tables.as_ptr().add((r * k + j) * TABLE_BYTES);
                (
                    _mm512_broadcast_i32x4(_mm_loadu_si128(t.cast())),
                    _mm512_broadcast_i32x4(_mm_loadu_si128(t.add(16).cast())),
                )
            };
            for ((a, &lo), &hi) in acc.iter_mut().zip(&lo).zip(&hi) {
                // 0x96: a ^ b ^ c, one instruction for the two XORs.
                *a = _mm512_ternarylogic_epi64::<0x96>(*a, _mm512_shuffle_epi8(tl, lo), _mm512_shuffle_epi8(th, hi));
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
