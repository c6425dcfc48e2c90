//! The write stream the hosts replay: the OLTP trace's key order, or a seeded
//! YCSB-like stream where the trace is absent.
//!
//! Keys are `u64`s written as 8 little-endian bytes: an 8-byte key is its own
//! directory key id (`directory::key_id`), so the trace's block numbers are exactly
//! what the shipped OLTP model was trained on and predicts. Each node's writer reads
//! the stream from its own offset (node `i` of `n` at `i * len / n`, wrapping), so the
//! nodes write mostly different keys in the trace's order.
//!
//! The synthetic stream is YCSB's scrambled Zipfian (theta 0.99) over
//! [`SYNTHETIC_KEYS`] keys, drawn once from a seed; each node writes its own copy of
//! the key space (keys `node * SYNTHETIC_KEYS ..`), as separate tenants would, so hot
//! keys do not collide across nodes. It has no order a predictor can learn.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use prescient_models::trace::{read_trace, TraceFormat};

use crate::sim::rng::Rng;
use crate::Error;

/// Keys of the synthetic stream's key space (per node).
pub const SYNTHETIC_KEYS: u64 = 1_000_000;
/// Writes in the synthetic stream before it repeats.
pub const SYNTHETIC_WRITES: usize = 1 << 20;
/// YCSB's Zipfian constant.
pub const ZIPF_THETA: f64 = 0.99;

/// Where a stream's keys came from.
#[derive(Clone, Debug, PartialEq)]
pub enum Origin {
    /// A trace file.
    Trace {
        /// The file.
        path: PathBuf,
    },
    /// The synthetic YCSB-like stream.
    Synthetic {
        /// Why the trace was not used.
        why: String,
        /// The seed it was drawn from.
        seed: u64,
    },
}

/// A write stream shared by every node's writer.
#[derive(Clone, Debug)]
pub struct KeyStream {
    keys: Arc<[u64]>,
    origin: Origin,
    distinct: usize,
}

impl KeyStream {
    /// The trace at `path`, or the synthetic stream from `seed` if there is no file
    /// there (an unreadable or malformed file is an error, not a fallback).
    pub fn trace_or_synthetic(path: &Path, seed: u64) -> Result<Self, Error> {
        match std::fs::metadata(path) {
            Ok(_) => Self::from_trace(path),
            Err(e) => Ok(Self::synthetic(seed, format!("no trace at {} ({e})", path.display()))),
        }
    }

    /// The writes of the ARC `.lis` (or `.lis.zst`) trace at `path`.
    pub fn from_trace(path: &Path) -> Result<Self, Error> {
        let keys = read_trace(path, TraceFormat::from_path(path))
            .map_err(|source| Error::Trace { path: path.to_owned(), source })?;
        if keys.is_empty() {
            return Err(Error::Option {
                option: "trace",
                value: path.display().to_string(),
                allowed: "a trace with at least one write".into(),
            });
        }
        let distinct = count_distinct(&keys);
        Ok(Self { keys: keys.into(), origin: Origin::Trace { path: path.to_owned() }, distinct })
    }

    /// The synthetic stream drawn from `seed`; `why` says why the trace was not used.
    pub fn synthetic(seed: u64, why: String) -> Self {
        let zipf = Zipfian::new(SYNTHETIC_KEYS, ZIPF_THETA);
        let mut rng = Rng::new(seed);
        let keys: Vec<u64> = (0..SYNTHETIC_WRITES).map(|_| scramble(zipf.next(&mut rng)) % SYNTHETIC_KEYS).collect();
        let distinct = count_distinct(&keys);
        Self { keys: keys.into(), origin: Origin::Synthetic { why, seed }, distinct }
    }

    /// Where the keys came from.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// Whether this is a trace (the shipped models apply) rather than the synthetic stream.
    pub fn is_trace(&self) -> bool {
        matches!(self.origin, Origin::Trace { .. })
    }

    /// Writes in the stream.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the stream is empty (never: both constructors refuse that).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Distinct keys in the stream.
    pub fn distinct(&self) -> usize {
        self.distinct
    }

    /// One line saying what the stream is.
    pub fn describe(&self) -> String {
        match &self.origin {
            Origin::Trace { path } => format!(
                "trace {} ({} writes, {} distinct keys), 8-byte little-endian block numbers as keys",
                path.display(),
                self.len(),
                self.distinct
            ),
            Origin::Synthetic { why, seed } => format!(
                "synthetic YCSB-like stream (scrambled Zipfian {ZIPF_THETA} over {SYNTHETIC_KEYS} keys per node, seed {seed}, {} writes, {} distinct keys) because {why}",
                self.len(),
                self.distinct
            ),
        }
    }

    /// Node `node`'s cursor in a cluster of `nodes`.
    pub fn cursor(&self, node: u8, nodes: u8) -> Cursor {
        let len = self.keys.len();
        let start = len * usize::from(node) / usize::from(nodes.max(1));
        let base = if self.is_trace() { 0 } else { u64::from(node) * SYNTHETIC_KEYS };
        Cursor { keys: Arc::clone(&self.keys), pos: start, base }
    }
}

/// One writer's position in the stream.
#[derive(Clone, Debug)]
pub struct Cursor {
    keys: Arc<[u64]>,
    pos: usize,
    base: u64,
}

impl Cursor {
    /// The key `ahead` writes from the current one (0: the next to write).
    pub fn peek(&self, ahead: usize) -> u64 {
        self.base + self.keys[(self.pos + ahead) % self.keys.len()]
    }

    /// Moves to the following write.
    pub fn advance(&mut self) {
        self.pos = (self.pos + 1) % self.keys.len();
    }
}

/// The 8 bytes of key `id` (little-endian: the key is its own directory id).
pub fn key_bytes(id: u64) -> [u8; 8] {
    id.to_le_bytes()
}

fn count_distinct(keys: &[u64]) -> usize {
    let mut sorted = keys.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    sorted.len()
}

/// SplitMix64's finaliser: spreads the Zipfian ranks over the key space (YCSB scrambles
/// with FNV for the same reason).
fn scramble(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// YCSB's Zipfian generator (Gray et al., "Quickly generating billion-record synthetic
/// databases"): rank 0 is the hottest.
#[derive(Clone, Debug)]
struct Zipfian {
    items: u64,
    theta: f64,
    zeta_n: f64,
    alpha: f64,
    eta: f64,
}

impl Zipfian {
    fn new(items: u64, theta: f64) -> Self {
        let zeta = |n: u64| (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zeta_n = zeta(items);
        let zeta_2 = zeta(2);
        let alpha = 1.0 / (1.0 - theta);
        let eta = (1.0 - (2.0 / items as f64).powf(1.0 - theta)) / (1.0 - zeta_2 / zeta_n);
        Self { items, theta, zeta_n, alpha, eta }
    }

    fn next(&self, rng: &mut Rng) -> u64 {
        let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let uz = u * self.zeta_n;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1;
        }
        ((self.items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64).min(self.items - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_of_eight_bytes_is_its_own_directory_id() {
        for id in [0u64, 1, 0x0102_0304_0506_0708, u64::MAX] {
            assert_eq!(prescient_shim::directory::key_id(&key_bytes(id)), id);
        }
        assert_eq!(key_bytes(0x0102), [2, 1, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn the_zipfian_ranks_are_skewed_towards_the_hottest() {
        let z = Zipfian::new(1000, ZIPF_THETA);
        let mut rng = Rng::new(3);
        let mut counts = vec![0u32; 1000];
        for _ in 0..100_000 {
            counts[z.next(&mut rng) as usize] += 1;
        }
        // Rank 0 takes about 1 / zeta(1000, 0.99) = 13% of the draws; ranks fall off.
        assert!((11_000..16_000).contains(&counts[0]), "rank 0 drawn {} times", counts[0]);
        assert!(counts[0] > counts[1] && counts[1] > counts[9] && counts[9] > counts[999]);
    }

    #[test]
    fn a_missing_trace_falls_back_to_a_seeded_synthetic_stream_and_says_why() {
        let missing = Path::new("/nonexistent/prescient/OLTP.lis.zst");
        let a = KeyStream::trace_or_synthetic(missing, 5).unwrap();
        let b = KeyStream::trace_or_synthetic(missing, 5).unwrap();
        assert!(!a.is_trace());
        assert!(a.describe().contains("/nonexistent/prescient/OLTP.lis.zst"), "{}", a.describe());
        let (ca, cb) = (a.cursor(0, 5), b.cursor(0, 5));
        assert!((0..100).all(|i| ca.peek(i) == cb.peek(i)), "a seed replays");
        // Nodes write separate key spaces.
        let c3 = a.cursor(3, 5);
        assert!((0..100).all(|i| (3 * SYNTHETIC_KEYS..4 * SYNTHETIC_KEYS).contains(&c3.peek(i))));
        assert!(a.distinct() > 1000);
    }

    #[test]
    fn a_trace_is_read_in_order_and_each_node_starts_at_its_share() {
        let dir = std::env::temp_dir().join(format!("prescient-load-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.lis");
        let text: String = (0..10u64).map(|i| format!("{} 1 0 {i}\n", 100 + i % 7)).collect();
        std::fs::write(&path, text).unwrap();
        let s = KeyStream::trace_or_synthetic(&path, 0).unwrap();
        assert!(s.is_trace());
        assert_eq!((s.len(), s.distinct()), (10, 7));
        let mut c = s.cursor(0, 2);
        assert_eq!((c.peek(0), c.peek(1)), (100, 101));
        c.advance();
        assert_eq!(c.peek(0), 101);
        let c1 = s.cursor(1, 2);
        assert_eq!(c1.peek(0), 105, "node 1 of 2 starts at write 5");
        assert_eq!(c1.peek(5), 100, "the stream wraps");
        // A malformed trace is an error, not a silent fallback.
        std::fs::write(&path, "not a number\n").unwrap();
        let err = KeyStream::trace_or_synthetic(&path, 0).unwrap_err();
        let err = crate::error::Report(&err).to_string();
        assert!(err.contains("t.lis") && err.contains("line 1"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
