//! GFNI on ymm (VEX-encoded `vgf2p8affineqb`): the GFNI method for CPUs with GFNI
//! and AVX2 but no AVX-512, 64 bytes (two ymm) of every input per step.

use super::{TableKind, STEP_BYTES};
use std::arch::x86_64::*;

const MATRIX_BYTES: usize = TableKind::Affine.bytes();

/// `R` outputs over `start..end`, 64 bytes per step.
///
/// # Safety
/// The CPU supports GFNI, AVX and AVX2; `outputs.len() == R`; `tables` holds
/// `R * inputs.len()` affine matrices (8 bytes each); every input and output is
/// at least `end` bytes long and `end - start` is a multiple of 64.
#[target_feature(enable = "gfni,avx,avx2")]
pub unsafe fn dot<const R: usize>(
    tables: &[u8],
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    start: usize,
    end: usize,
) {
    debug_assert!(outputs.len() == R && tables.len() == R * inputs.len() * MATRIX_BYTES);
    let k = inputs.len();
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
            for r in 0..R {
                // SAFETY: `(r * k + j + 1) * 8 <= R * k * 8 == tables.len()`; the
                // read is unaligned.
                let matrix = unsafe { tables.as_ptr().add((r * k + j) * MATRIX_BYTES).cast::<i64>().read_unaligned() };
                let matrix = _mm256_set1_epi64x(i64::from_le(matrix));
                acc0[r] = _mm256_xor_si256(acc0[r], _mm256_gf2p8affine_epi64_epi8::<0>(x0, matrix));
                acc1[r] = _mm256_xor_si256(acc1[r], _mm256_gf2p8affine_epi64_epi8::<0>(x1, matrix));
            }
        }
        for r in 0..R {
            // SAFETY: `off + 64 <= end <= outputs[r].len()`, and an output is a
            // `&mut` slice that no input aliases.
            unsafe {
                let p = outputs[r].as_mut_ptr().add(off);
                _mm256_storeu_si256(p.cast(), acc0[r]);
                _mm256_storeu_si256(p.add(32).cast(), acc1[r]);
            }
        }
        off += STEP_BYTES;
    }
}
