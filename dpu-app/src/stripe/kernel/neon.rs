//! Split tables on 128-bit NEON vectors (`tbl`), four vectors (64 bytes) of
//! every input per step.

use super::{TableKind, STEP_BYTES};
use std::arch::aarch64::*;

const TABLE_BYTES: usize = TableKind::Split.bytes();

/// `R` outputs over `start..end`, 64 bytes per step (four 16-byte lanes).
///
/// # Safety
/// The CPU supports NEON; `outputs.len() == R`; `tables` holds
/// `R * inputs.len()` split tables (32 bytes each); every input and output is at
/// least `end` bytes long and `end - start` is a multiple of 64.
#[target_feature(enable = "neon")]
pub unsafe fn dot<const R: usize>(
    tables: &[u8],
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    start: usize,
    end: usize,
) {
    debug_assert!(outputs.len() == R && tables.len() == R * inputs.len() * TABLE_BYTES);
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
            for (r, acc) in acc.iter_mut().enumerate() {
                // SAFETY: `(r * k + j + 1) * 32 <= R * k * 32 == tables.len()`.
                let (tl, th) = unsafe {
                    let t = tables.as_ptr().add((r * k + j) * TABLE_BYTES);
                    (vld1q_u8(t), vld1q_u8(t.add(16)))
                };
                for ((a, &lo), &hi) in acc.iter_mut().zip(&lo).zip(&hi) {
                    *a = veorq_u8(*a, veorq_u8(vqtbl1q_u8(tl, lo), vqtbl1q_u8(th, hi)));
                }
            }
        }
        for (out, acc) in outputs.iter_mut().zip(&acc) {
            // SAFETY: `off + 64 <= end <= out.len()`, and an output is a `&mut`
            // slice that no input aliases.
            unsafe {
                let p = out.as_mut_ptr().add(off);
                for (l, a) in acc.iter().enumerate() {
                    vst1q_u8(p.add(16 * l), *a);
                }
            }
        }
        off += STEP_BYTES;
    }
}
