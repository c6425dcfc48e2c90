//! Reed-Solomon(k, m) over GF(2^8) on equal-length fragments: systematic encode
//! (data fragments are untouched, m parity fragments computed) and reconstruction
//! of any lost fragments from any k survivors.
//!
//! Decode tables depend only on which fragments survive and which are rebuilt;
//! they are cached per such loss pattern (least recently used of
//! [`DECODE_CACHE_ENTRIES`] slots, all allocated with the codec), so a burst of
//! reconstructions after one failure pays the matrix inversion once.

use super::gf::Matrix;
use super::kernel::{self, Backend, Tables};
use super::StripeError;
use crate::limits::{DECODE_CACHE_ENTRIES, FRAGMENTS_MAX};

/// A Reed-Solomon(k, m) codec with its encode tables and decode-table cache.
#[derive(Debug)]
pub struct ReedSolomon {
    k: usize,
    m: usize,
    matrix: Matrix,
    encode_tables: Tables,
    cache: Vec<CacheSlot>,
    /// The slot the last reconstruction used.
    last_slot: usize,
    clock: u64,
}

#[derive(Debug)]
struct CacheSlot {
    /// Sources mask in the low 32 bits, targets mask in the high 32; 0 = empty.
    pattern: u64,
    last_used: u64,
    /// Room for m rows (every target); a pattern fills as many as it rebuilds.
    tables: Tables,
}

impl ReedSolomon {
    /// RS(k, m) with the fastest kernels this CPU runs.
    pub fn new(k: usize, m: usize) -> Result<Self, StripeError> {
        Self::with_backend(k, m, Backend::detect())
    }

    /// RS(k, m) with the given kernels (tests and the benchmark run every
    /// backend of [`Backend::all_available`] through it). Encode tables and every
    /// decode-cache slot are laid out for `backend` here, once.
    pub fn with_backend(k: usize, m: usize, backend: Backend) -> Result<Self, StripeError> {
        if k == 0 || k + m > FRAGMENTS_MAX {
            return Err(StripeError::Shape { k, m, max: FRAGMENTS_MAX });
        }
        let matrix = Matrix::cauchy_systematic(k, m);
        let mut encode_tables = Tables::new(backend, k, m);
        encode_tables.fill(m, |p, j| matrix.get(k + p, j));
        let cache = (0..DECODE_CACHE_ENTRIES)
            .map(|_| CacheSlot { pattern: 0, last_used: 0, tables: Tables::new(backend, k, m) })
            .collect();
        Ok(Self { k, m, matrix, encode_tables, cache, last_slot: 0, clock: 0 })
    }

    /// Data fragments (k).
    pub fn data_fragments(&self) -> usize {
        self.k
    }

    /// Parity fragments (m).
    pub fn parity_fragments(&self) -> usize {
        self.m
    }

    /// The kernels in use.
    pub fn backend(&self) -> Backend {
        self.encode_tables.backend()
    }

    /// Computes the m parity fragments of the k `data` fragments.
    ///
    /// Panics (programmer error) unless there are exactly k data and m parity
    /// slices, all of one length.
    pub fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) {
        assert_eq!(data.len(), self.k, "encode needs k data fragments");
        assert_eq!(parity.len(), self.m, "encode needs m parity buffers");
        if self.m == 0 {
            return;
        }
        kernel::dot_prod(&self.encode_tables, data, parity);
    }

    /// Rebuilds the fragments numbered `target_ids` into `targets` from exactly k
    /// surviving fragments `sources` numbered `source_ids` (data fragments are
    /// 0..k, parity k..k+m; both id lists strictly ascending).
    ///
    /// Panics (programmer error) on malformed id lists or unequal lengths.
    pub fn reconstruct(
        &mut self,
        source_ids: &[u8],
        sources: &[&[u8]],
        target_ids: &[u8],
        targets: &mut [&mut [u8]],
    ) -> Result<(), StripeError> {
        if source_ids.len() < self.k {
            return Err(StripeError::TooFewFragments { have: source_ids.len(), need: self.k });
        }
        assert_eq!(source_ids.len(), self.k, "reconstruct takes exactly k sources");
        assert_eq!(sources.len(), self.k, "one source slice per source id");
        assert_eq!(targets.len(), target_ids.len(), "one target slice per target id");
        let n = self.k + self.m;
        let sources_mask = id_mask(source_ids, n);
        let targets_mask = id_mask(target_ids, n);
        assert_eq!(sources_mask & targets_mask, 0, "a fragment cannot be source and target");
        if target_ids.is_empty() {
            return Ok(());
        }
        let pattern = u64::from(sources_mask) | u64::from(targets_mask) << 32;
        let slot = self.decode_slot(pattern, source_ids, target_ids);
        kernel::dot_prod(&self.cache[slot].tables, sources, targets);
        Ok(())
    }

    /// Index of the cache slot holding the decode tables of `pattern`, computing
    /// them into the least recently used slot on a miss.
    fn decode_slot(&mut self, pattern: u64, source_ids: &[u8], target_ids: &[u8]) -> usize {
        self.clock += 1;
        // A burst of reconstructions after one failure repeats one pattern: try
        // the slot used last before scanning.
        if self.cache[self.last_slot].pattern == pattern {
            self.cache[self.last_slot].last_used = self.clock;
            return self.last_slot;
        }
        if let Some(i) = self.cache.iter().position(|s| s.pattern == pattern) {
            self.last_slot = i;
            self.cache[i].last_used = self.clock;
            return i;
        }
        self.fill_slot(pattern, source_ids, target_ids)
    }

    /// Computes the decode tables of `pattern` into the least recently used slot.
    /// Out of line: the matrices it builds take kilobytes of stack that the hit
    /// path should not reserve on every reconstruction.
    #[cold]
    #[inline(never)]
    fn fill_slot(&mut self, pattern: u64, source_ids: &[u8], target_ids: &[u8]) -> usize {
        let victim = (0..self.cache.len()).min_by_key(|&i| self.cache[i].last_used).expect("cache has slots");
        let mut rows = [0usize; FRAGMENTS_MAX];
        for (r, &id) in rows.iter_mut().zip(source_ids) {
            *r = usize::from(id);
        }
        let inverse =
            self.matrix.select_rows(&rows[..self.k]).invert().expect("every k x k submatrix of a Cauchy code inverts");
        for (r, &id) in rows.iter_mut().zip(target_ids) {
            *r = usize::from(id);
        }
        let decode = self.matrix.select_rows(&rows[..target_ids.len()]).mul(&inverse);
        let slot = &mut self.cache[victim];
        slot.tables.fill(target_ids.len(), |r, j| decode.get(r, j));
        slot.pattern = pattern;
        slot.last_used = self.clock;
        self.last_slot = victim;
        victim
    }
}

/// Bit mask of `ids`; panics (programmer error) unless they ascend strictly
/// below `n`.
fn id_mask(ids: &[u8], n: usize) -> u32 {
    let mut mask = 0u32;
    let mut prev: Option<u8> = None;
    for &id in ids {
        assert!(usize::from(id) < n, "fragment id {id} out of range for {n} fragments");
        assert!(prev.is_none_or(|p| p < id), "fragment ids must ascend");
        prev = Some(id);
        mask |= 1 << id;
    }
    mask
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_masks_of_valid_lists_and_the_rule_a_bad_one_breaks() {
        assert_eq!(id_mask(&[], 6), 0);
        assert_eq!(id_mask(&[0, 2, 5], 6), 0b100101);
        assert_eq!(id_mask(&[31], 32), 1 << 31);
        let broke = |ids: &'static [u8], n: usize| {
            let e = std::panic::catch_unwind(|| id_mask(ids, n)).expect_err("a bad list panics");
            e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap()
        };
        assert!(broke(&[1, 1], 6).contains("ascend"));
        assert!(broke(&[2, 1], 6).contains("ascend"));
        assert!(broke(&[0, 6], 6).contains("out of range"));
        assert!(broke(&[40], 32).contains("out of range"));
    }

    fn stripe(k: usize, m: usize, len: usize, seed: u8) -> Vec<Vec<u8>> {
        let mut frags: Vec<Vec<u8>> =
            (0..k).map(|i| (0..len).map(|b| (b * 31 + i * 7) as u8 ^ seed).collect()).collect();
        frags.extend((0..m).map(|_| vec![0u8; len]));
        frags
    }

    fn encode(rs: &ReedSolomon, frags: &mut [Vec<u8>]) {
        let (data, parity) = frags.split_at_mut(rs.data_fragments());
        let data: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let mut parity: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
        rs.encode(&data, &mut parity);
    }

    #[test]
    fn every_loss_pattern_of_rs_4_2_rebuilds_every_fragment() {
        let (k, m) = (4, 2);
        for backend in Backend::all_available() {
            let mut rs = ReedSolomon::with_backend(k, m, backend).unwrap();
            let mut frags = stripe(k, m, 192, 5);
            encode(&rs, &mut frags);
            for mask in 0u32..1 << (k + m) {
                if mask.count_ones() as usize != k {
                    continue;
                }
                let ids: Vec<u8> = (0..(k + m) as u8).filter(|i| mask >> i & 1 == 1).collect();
                let lost: Vec<u8> = (0..(k + m) as u8).filter(|i| mask >> i & 1 == 0).collect();
                let sources: Vec<&[u8]> = ids.iter().map(|&i| frags[usize::from(i)].as_slice()).collect();
                let mut rebuilt = vec![vec![0u8; 192]; lost.len()];
                let mut targets: Vec<&mut [u8]> = rebuilt.iter_mut().map(Vec::as_mut_slice).collect();
                rs.reconstruct(&ids, &sources, &lost, &mut targets).unwrap();
                for (id, bytes) in lost.iter().zip(&rebuilt) {
                    assert_eq!(bytes, &frags[usize::from(*id)], "mask {mask:#b} fragment {id}");
                }
            }
        }
    }

    #[test]
    fn cache_is_reused_and_evicts_least_recently_used() {
        let mut rs = ReedSolomon::new(10, 4).unwrap();
        let mut frags = stripe(10, 4, 64, 1);
        encode(&rs, &mut frags);
        let run = |rs: &mut ReedSolomon, lost: &[u8]| {
            let ids: Vec<u8> = (0..14u8).filter(|i| !lost.contains(i)).take(10).collect();
            let sources: Vec<&[u8]> = ids.iter().map(|&i| frags[usize::from(i)].as_slice()).collect();
            let mut out = vec![vec![0u8; 64]; lost.len()];
            let mut targets: Vec<&mut [u8]> = out.iter_mut().map(Vec::as_mut_slice).collect();
            rs.reconstruct(&ids, &sources, lost, &mut targets).unwrap();
            for (id, bytes) in lost.iter().zip(&out) {
                assert_eq!(bytes, &frags[usize::from(*id)], "lost {lost:?}");
            }
        };
        run(&mut rs, &[3]);
        let first = rs.cache.iter().position(|s| s.pattern != 0).unwrap();
        run(&mut rs, &[3]);
        assert_eq!(rs.cache.iter().filter(|s| s.pattern != 0).count(), 1, "a repeated pattern hits");
        // More patterns than slots: every answer stays right while slots recycle.
        for round in 0..2 {
            for a in 0..13u8 {
                run(&mut rs, &[a]);
                run(&mut rs, &[a, a + 1]);
            }
            assert!(rs.cache.iter().all(|s| s.pattern != 0), "round {round}: all slots in use");
        }
        let _ = first;
        // Least recently used goes first: fill all 16 slots, touch the oldest,
        // add one more; the second oldest is the one evicted.
        let mut rs = ReedSolomon::new(10, 4).unwrap();
        let patterns: Vec<Vec<u8>> = (0..14u8).map(|a| vec![a]).chain([vec![0, 1], vec![1, 2], vec![2, 3]]).collect();
        for p in &patterns[..16] {
            run(&mut rs, p);
        }
        run(&mut rs, &patterns[0]);
        run(&mut rs, &patterns[16]);
        let cached = |rs: &ReedSolomon, lost: &[u8]| {
            let mask = lost.iter().fold(0u64, |m, &i| m | 1 << i) << 32;
            rs.cache.iter().any(|s| s.pattern >> 32 << 32 == mask)
        };
        assert!(cached(&rs, &patterns[0]) && cached(&rs, &patterns[16]));
        assert!(!cached(&rs, &patterns[1]), "least recently used pattern evicted");
    }

    #[test]
    fn bad_shapes_and_too_few_sources_are_errors() {
        assert!(matches!(ReedSolomon::new(0, 2), Err(StripeError::Shape { .. })));
        assert!(matches!(ReedSolomon::new(30, 3), Err(StripeError::Shape { .. })));
        assert!(ReedSolomon::new(31, 1).is_ok());
        let mut rs = ReedSolomon::new(4, 2).unwrap();
        let src = [0u8; 64];
        let mut out = [0u8; 64];
        let err = rs.reconstruct(&[0, 1, 2], &[&src, &src, &src], &[3], &mut [&mut out]).unwrap_err();
        assert_eq!(err, StripeError::TooFewFragments { have: 3, need: 4 });
    }
}
