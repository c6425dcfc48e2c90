//! Histogram benchmark: ours (`prescient_dpu::histogram`, fixed-memory log-linear)
//! against the `hdrhistogram` crate, recording the same values.
//!
//! The values are a million latencies spread log-uniformly from 100 ns to 10 ms (as
//! the stages of a write are), the same for both. `hdrhistogram` runs at 1 significant
//! figure, which gives it 16 linear sub-buckets per power of two: the resolution ours
//! has (1/16, 6.25%), so the two do the same work; and at 3 figures, the setting most
//! users run it at (0.1%). Its range is fixed at 1 ns to 2^40 ns, like ours, so neither
//! resizes while recording. Figures, each best of 5 runs, ours first, then the
//! reference, then ours / reference (below 1: ours is cheaper or smaller):
//!
//! - record: ns per value;
//! - allocations while recording (a counting allocator): the data path allows none;
//! - memory: bytes of counts;
//! - merge: ns to add one full histogram into another;
//! - p99 query: ns to read one quantile;
//! - percentile error: the largest relative error of p50, p90, p99, p99.9 and p99.99
//!   against the exact quantiles of the sorted values.
//!
//!   cargo bench -p prescient-dpu --bench histogram

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use hdrhistogram::Histogram as Hdr;
use prescient_dpu::histogram::{Histogram, BUCKETS, TRACKED_MAX_NS};

/// Counts every allocation, to show what recording allocates.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call goes straight to the system allocator with the caller's layout
// and pointer; the counter is only a side effect.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above, that is from `System`, with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `ptr` came from `System` with `layout`; the caller's contract holds.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const VALUES: usize = 1_000_000;
const RUNS: usize = 5;
const QUANTILES: [f64; 5] = [0.5, 0.9, 0.99, 0.999, 0.9999];

/// Deterministic log-uniform latencies from 100 ns to 10 ms.
fn values() -> Vec<u64> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..VALUES)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let unit = (x >> 11) as f64 / (1u64 << 53) as f64;
            (100.0 * 1e5f64.powf(unit)) as u64
        })
        .collect()
}

/// Best of [`RUNS`] of `f`, in ns per `per` operations.
fn best(per: usize, mut f: impl FnMut()) -> f64 {
    (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_nanos() as f64 / per as f64
        })
        .fold(f64::INFINITY, f64::min)
}

/// Allocations `f` makes.
fn allocations(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    f();
    ALLOCATIONS.load(Ordering::Relaxed) - before
}

fn hdr(sigfig: u8) -> Hdr<u64> {
    Hdr::new_with_bounds(1, TRACKED_MAX_NS, sigfig).expect("valid bounds")
}

/// The exact `q`-quantile by the rank rule both histograms use.
fn exact(sorted: &[u64], q: f64) -> u64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn worst_error(sorted: &[u64], quantile: impl Fn(f64) -> u64) -> f64 {
    QUANTILES
        .iter()
        .map(|&q| {
            let want = exact(sorted, q) as f64;
            (quantile(q) as f64 - want).abs() / want
        })
        .fold(0.0, f64::max)
}

struct Figures {
    record_ns: f64,
    record_allocations: u64,
    memory_bytes: f64,
    merge_ns: f64,
    query_ns: f64,
    error: f64,
}

fn ours(values: &[u64], sorted: &[u64]) -> Figures {
    let mut h = Histogram::new();
    let record_ns = best(values.len(), || {
        h.clear();
        for &v in values {
            h.record(black_box(v));
        }
    });
    let record_allocations = allocations(|| values.iter().for_each(|&v| h.record(v)));
    h.clear();
    values.iter().for_each(|&v| h.record(v));
    let mut into = Histogram::new();
    let merge_ns = best(100, || {
        for _ in 0..100 {
            into.merge(black_box(&h));
        }
    });
    let query_ns = best(10_000, || {
        for _ in 0..10_000 {
            black_box(black_box(&h).percentile(0.99));
        }
    });
    Figures {
        record_ns,
        record_allocations,
        memory_bytes: (BUCKETS * 8) as f64,
        merge_ns,
        query_ns,
        error: worst_error(sorted, |q| h.percentile(q)),
    }
}

fn reference(values: &[u64], sorted: &[u64], sigfig: u8) -> Figures {
    let mut h = hdr(sigfig);
    let record_ns = best(values.len(), || {
        h.reset();
        for &v in values {
            h.saturating_record(black_box(v));
        }
    });
    let record_allocations = allocations(|| values.iter().for_each(|&v| h.saturating_record(v)));
    h.reset();
    values.iter().for_each(|&v| h.saturating_record(v));
    let mut into = hdr(sigfig);
    let merge_ns = best(100, || {
        for _ in 0..100 {
            into.add(black_box(&h)).expect("same bounds");
        }
    });
    let query_ns = best(10_000, || {
        for _ in 0..10_000 {
            black_box(black_box(&h).value_at_quantile(0.99));
        }
    });
    // `value_at_quantile` reports the highest value equivalent to the bucket's, as
    // ours reports the bucket's upper edge: both err upwards.
    Figures {
        record_ns,
        record_allocations,
        memory_bytes: (h.distinct_values() * 8) as f64,
        merge_ns,
        query_ns,
        error: worst_error(sorted, |q| h.value_at_quantile(q)),
    }
}

fn main() {
    let values = values();
    let mut sorted = values.clone();
    sorted.sort_unstable();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("model name")?.split_once(':').map(|(_, m)| m.trim().to_owned()))
        })
        .unwrap_or_else(|| "unknown CPU".into());
    println!("histogram bench: {VALUES} log-uniform values 100 ns..10 ms, best of {RUNS} runs, on {cpu}");
    let ours = ours(&values, &sorted);
    for sigfig in [1u8, 3] {
        let theirs = reference(&values, &sorted, sigfig);
        println!("\nours vs hdrhistogram (crate 7) at {sigfig} significant figure(s):");
        println!("{:<34} {:>12} {:>14} {:>8}", "figure", "ours", "hdrhistogram", "ratio");
        let row = |what: &str, a: f64, b: f64, digits: usize| {
            let ratio = if b > 0.0 { format!("{:.2}x", a / b) } else { "-".into() };
            println!("{what:<34} {a:>12.digits$} {b:>14.digits$} {ratio:>8}");
        };
        row("record, ns/value", ours.record_ns, theirs.record_ns, 2);
        row("allocations while recording 1M", ours.record_allocations as f64, theirs.record_allocations as f64, 0);
        row("memory of the counts, bytes", ours.memory_bytes, theirs.memory_bytes, 0);
        row("merge one into another, ns", ours.merge_ns, theirs.merge_ns, 0);
        row("p99 query, ns", ours.query_ns, theirs.query_ns, 0);
        row("worst percentile error, %", 100.0 * ours.error, 100.0 * theirs.error, 3);
    }
}
