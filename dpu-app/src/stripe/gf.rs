//! Arithmetic in GF(2^8) with the polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11d), and
//! the small matrix algebra Reed-Solomon needs: the systematic Cauchy encoding
//! matrix and Gauss-Jordan inversion.
//!
//! The field and the matrix are ISA-L's (`gf_gen_cauchy1_matrix`), so parity bytes
//! are the same as ISA-L's for the same (k, m): the benchmark checks that.

use crate::limits::FRAGMENTS_MAX;

/// 2^i for i in 0..255, and again for 255..510 so that `EXP[log a + log b]` needs no
/// reduction.
const EXP: [u8; 512] = build_exp();
/// log2 of every non-zero element; `LOG[0]` is unused.
const LOG: [u8; 256] = build_log();

const fn build_exp() -> [u8; 512] {
    let mut exp = [0u8; 512];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 512 {
        exp[i] = x as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= 0x11d;
        }
        i += 1;
    }
    exp
}

const fn build_log() -> [u8; 256] {
    let exp = build_exp();
    let mut log = [0u8; 256];
    let mut i = 0;
    while i < 255 {
        log[exp[i] as usize] = i as u8;
        i += 1;
    }
    log
}

/// Product of `a` and `b`.
pub const fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        return 0;
    }
    EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
}

/// Multiplicative inverse of `a`; `a` must not be zero (programmer error).
pub fn inv(a: u8) -> u8 {
    assert!(a != 0, "zero has no inverse in GF(2^8)");
    EXP[255 - LOG[a as usize] as usize]
}

/// The split multiplication table of `c` that the kernels use: bytes 0..16 hold
/// `c * x` for x in 0..16, bytes 16..32 hold `c * (x << 4)`; `c * b` is then
/// `lo[b & 15] ^ hi[b >> 4]`. This is ISA-L's `ec_init_tables` layout.
pub fn split_table(c: u8, out: &mut [u8; 32]) {
    for x in 0..16u8 {
        out[x as usize] = mul(c, x);
        out[16 + x as usize] = mul(c, x << 4);
    }
}

/// The 8x8 bit matrix of multiplication by `c`, as GFNI's `GF2P8AFFINEQB` takes it:
/// byte `7 - i` of the u64 is output bit i's row, whose bit j is bit i of
/// `c * 2^j` (the product's bit i is then the parity of `row_i & x`). One u64 per
/// coefficient is what the GFNI kernels broadcast; the multiply works in any
/// field, because the matrix is just the linear map `x -> c * x` over GF(2).
pub const fn affine_matrix(c: u8) -> u64 {
    let mut matrix = 0u64;
    let mut j = 0;
    while j < 8 {
        let column = mul(c, 1 << j);
        let mut i = 0;
        while i < 8 {
            matrix |= ((column >> i & 1) as u64) << (8 * (7 - i) + j);
            i += 1;
        }
        j += 1;
    }
    matrix
}

/// The coefficient whose [`affine_matrix`] is `matrix`: its product with 1,
/// column 0 of the matrix.
pub const fn affine_coefficient(matrix: u64) -> u8 {
    let mut c = 0u8;
    let mut i = 0;
    while i < 8 {
        c |= ((matrix >> (8 * (7 - i)) & 1) as u8) << i;
        i += 1;
    }
    c
}

/// A dense row-major byte matrix of at most [`FRAGMENTS_MAX`] rows and columns,
/// held inline so that building decode tables never allocates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Matrix {
    rows: usize,
    cols: usize,
    cells: [u8; FRAGMENTS_MAX * FRAGMENTS_MAX],
}

impl Matrix {
    /// An all-zero `rows` x `cols` matrix; panics (programmer error) past
    /// [`FRAGMENTS_MAX`].
    pub fn zero(rows: usize, cols: usize) -> Self {
        assert!(rows <= FRAGMENTS_MAX && cols <= FRAGMENTS_MAX, "matrix of {rows} x {cols} is too large");
        Self { rows, cols, cells: [0; FRAGMENTS_MAX * FRAGMENTS_MAX] }
    }

    /// The `(k + m)` x `k` systematic encoding matrix: identity on top, then the
    /// Cauchy rows `1 / (i ^ j)` for i in k..k+m, j in 0..k. Every k x k submatrix
    /// of it is invertible (for k + m <= 256), which is what lets any k fragments
    /// rebuild the data.
    pub fn cauchy_systematic(k: usize, m: usize) -> Self {
        let mut a = Self::zero(k + m, k);
        for i in 0..k {
            a.set(i, i, 1);
        }
        for i in k..k + m {
            for j in 0..k {
                a.set(i, j, inv((i ^ j) as u8));
            }
        }
        a
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Cell (r, c).
    pub fn get(&self, r: usize, c: usize) -> u8 {
        self.cells[r * self.cols + c]
    }

    /// Sets cell (r, c).
    pub fn set(&mut self, r: usize, c: usize, v: u8) {
        self.cells[r * self.cols + c] = v;
    }

    /// The matrix made of `rows` of `self`, in that order.
    pub fn select_rows(&self, rows: &[usize]) -> Self {
        let mut out = Self::zero(rows.len(), self.cols);
        for (i, &r) in rows.iter().enumerate() {
            for c in 0..self.cols {
                out.set(i, c, self.get(r, c));
            }
        }
        out
    }

    /// `self * rhs`.
    pub fn mul(&self, rhs: &Self) -> Self {
        assert_eq!(self.cols, rhs.rows, "matrix shapes do not chain");
        let mut out = Self::zero(self.rows, rhs.cols);
        for r in 0..self.rows {
            for c in 0..rhs.cols {
                let mut acc = 0;
                for i in 0..self.cols {
                    acc ^= mul(self.get(r, i), rhs.get(i, c));
                }
                out.set(r, c, acc);
            }
        }
        out
    }

    /// The inverse of a square matrix, or `None` if it is singular.
    pub fn invert(&self) -> Option<Self> {
        assert_eq!(self.rows, self.cols, "only square matrices invert");
        let n = self.rows;
        let mut a = self.clone();
        let mut b = Self::zero(n, n);
        for i in 0..n {
            b.set(i, i, 1);
        }
        for col in 0..n {
            let pivot = (col..n).find(|&r| a.get(r, col) != 0)?;
            if pivot != col {
                for c in 0..n {
                    let (x, y) = (a.get(col, c), a.get(pivot, c));
                    a.set(col, c, y);
                    a.set(pivot, c, x);
                    let (x, y) = (b.get(col, c), b.get(pivot, c));
                    b.set(col, c, y);
                    b.set(pivot, c, x);
                }
            }
            let scale = inv(a.get(col, col));
            for c in 0..n {
                a.set(col, c, mul(a.get(col, c), scale));
                b.set(col, c, mul(b.get(col, c), scale));
            }
            for r in 0..n {
                let f = a.get(r, col);
                if r == col || f == 0 {
                    continue;
                }
                for c in 0..n {
                    a.set(r, c, a.get(r, c) ^ mul(f, a.get(col, c)));
                    b.set(r, c, b.get(r, c) ^ mul(f, b.get(col, c)));
                }
            }
        }
        Some(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_axioms_hold_for_every_element() {
        for a in 0..=255u8 {
            assert_eq!(mul(a, 1), a);
            assert_eq!(mul(a, 0), 0);
            if a != 0 {
                assert_eq!(mul(a, inv(a)), 1, "a = {a}");
            }
            for b in [1u8, 2, 3, 0x53, 0xca, 0xff] {
                assert_eq!(mul(a, b), mul(b, a));
            }
        }
        // Known products for polynomial 0x11d.
        assert_eq!(mul(2, 0x80), 0x1d);
        assert_eq!(mul(3, 7), 9);
    }

    #[test]
    fn split_table_reproduces_multiplication() {
        let mut t = [0u8; 32];
        for c in [0u8, 1, 2, 0x8e, 0xff] {
            split_table(c, &mut t);
            for b in 0..=255u8 {
                assert_eq!(t[(b & 15) as usize] ^ t[16 + (b >> 4) as usize], mul(c, b));
            }
        }
    }

    /// Applies `matrix` to `x` the way `GF2P8AFFINEQB` does (imm8 = 0), bit by bit.
    fn affine(matrix: u64, x: u8) -> u8 {
        (0..8).fold(0, |acc, i| {
            let row = (matrix >> (8 * (7 - i))) as u8;
            acc | (((row & x).count_ones() & 1) as u8) << i
        })
    }

    #[test]
    fn affine_matrix_reproduces_every_product() {
        for c in 0..=255u8 {
            let matrix = affine_matrix(c);
            assert_eq!(affine_coefficient(matrix), c);
            for x in 0..=255u8 {
                assert_eq!(affine(matrix, x), mul(c, x), "c = {c:#x}, x = {x:#x}");
            }
        }
        // The identity matrix in GFNI's byte order (Intel SDM's 0x0102040810204080).
        assert_eq!(affine_matrix(1), 0x0102_0408_1020_4080);
    }

    #[test]
    fn every_k_by_k_submatrix_of_small_codes_inverts() {
        for (k, m) in [(4usize, 2usize), (3, 3), (2, 4)] {
            let a = Matrix::cauchy_systematic(k, m);
            let n = k + m;
            for mask in 0u32..(1 << n) {
                if mask.count_ones() as usize != k {
                    continue;
                }
                let rows: Vec<usize> = (0..n).filter(|i| mask >> i & 1 == 1).collect();
                let sub = a.select_rows(&rows);
                let inv = sub.invert().expect("Cauchy submatrix must invert");
                let id = sub.mul(&inv);
                for r in 0..k {
                    for c in 0..k {
                        assert_eq!(id.get(r, c), u8::from(r == c));
                    }
                }
            }
        }
    }

    #[test]
    fn singular_matrix_is_reported() {
        let mut a = Matrix::zero(2, 2);
        a.set(0, 0, 3);
        a.set(0, 1, 5);
        a.set(1, 0, 3);
        a.set(1, 1, 5);
        assert!(a.invert().is_none());
    }
}
