//! The coefficient tables of one dot product, in the format of the backend that
//! will run it, allocated once and refilled in place (decode tables are rebuilt
//! per loss pattern without allocating).

use super::super::gf;
use super::backend::{Backend, TableKind};
use crate::limits::FRAGMENTS_MAX;

/// Tables for `rows x k` coefficients (`rows <= rows_max`) laid out for one
/// [`Backend`]: coefficient (r, j) is bytes `(r * k + j) * kind.bytes()..` of
/// [`Tables::bytes`]. Only [`super::dot_prod`] with the same backend reads them,
/// so a split table is never run through a GFNI kernel or the other way round.
#[derive(Clone, Debug)]
pub struct Tables {
    backend: Backend,
    k: usize,
    rows: usize,
    rows_max: usize,
    bytes: Vec<u8>,
}

impl Tables {
    /// Room for up to `rows_max` rows of `k` coefficients for `backend`, all rows
    /// zero and none in use. Panics (programmer error) unless
    /// `1 <= k <= FRAGMENTS_MAX` and `rows_max <= FRAGMENTS_MAX`.
    pub fn new(backend: Backend, k: usize, rows_max: usize) -> Self {
        assert!((1..=FRAGMENTS_MAX).contains(&k), "{k} inputs: a dot product takes 1..={FRAGMENTS_MAX}");
        assert!(rows_max <= FRAGMENTS_MAX, "{rows_max} outputs: a dot product makes at most {FRAGMENTS_MAX}");
        let bytes = vec![0u8; rows_max * k * backend.table_kind().bytes()];
        Self { backend, k, rows: 0, rows_max, bytes }
    }

    /// Sets the first `rows` rows to `coef(r, j)` and makes them the rows in use.
    /// Panics (programmer error) past `rows_max`.
    pub fn fill(&mut self, rows: usize, mut coef: impl FnMut(usize, usize) -> u8) {
        assert!(rows <= self.rows_max, "{rows} rows do not fit tables of {}", self.rows_max);
        let kind = self.backend.table_kind();
        let k = self.k;
        for (i, t) in self.bytes.chunks_exact_mut(kind.bytes()).take(rows * k).enumerate() {
            let c = coef(i / k, i % k);
            match kind {
                TableKind::Split => gf::split_table(c, t.try_into().expect("split tables are 32 bytes")),
                TableKind::Affine => t.copy_from_slice(&gf::affine_matrix(c).to_le_bytes()),
            }
        }
        self.rows = rows;
    }

    /// The backend these tables are laid out for.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Inputs per output (k).
    pub fn inputs(&self) -> usize {
        self.k
    }

    /// Outputs in use (rows set by the last [`Tables::fill`]).
    pub fn outputs(&self) -> usize {
        self.rows
    }

    /// The tables of the rows in use, `outputs() * inputs() * kind.bytes()` bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes[..self.rows * self.k * self.backend.table_kind().bytes()]
    }
}
