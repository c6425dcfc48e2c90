//! Split tables on ymm (AVX2 `vpshufb`), ISA-L's AVX2 method: each input byte is
//! split into nibbles once per pass and looked up in two 16-entry tables per
//! output.

use super::{TableKind, STEP_BYTES};
use std::arch::x86_64::*;

const TABLE_BYTES: usize = TableKind::Split.bytes();

/// `R` outputs over `start..end`, 64 bytes per step.
///
/// # Safety
/// The CPU supports AVX2; `outputs.len() == R`; `tables` holds
/// `R * inputs.len()` split tables (32 bytes each); every input and output is at
/// least `end` bytes long and `end - start` is a multiple of 64.
#[target_feature(enable = "avx2")]
pub unsafe fn dot<const R: usize>(
    tables: &[u8],
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    start: usize,
    end: usize,
) {
    debug_assert!(outputs.len() == R && tables.len() == R * inputs.len() * TABLE_BYTES);
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
