//! The portable kernel: two split-table look-ups per byte, any CPU. It is also the
//! reference the SIMD kernels are tested against.

use super::TableKind;

const TABLE_BYTES: usize = TableKind::Split.bytes();

/// `outputs[r][start..end] = XOR over j of c[r][j] * inputs[j][start..end]`, with
/// the split table of `c[r][j]` at `tables[(r * k + j) * 32..][..32]`.
///
/// Panics (through slice indexing) if the shapes disagree.
pub fn dot(tables: &[u8], inputs: &[&[u8]], outputs: &mut [&mut [u8]], start: usize, end: usize) {
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
