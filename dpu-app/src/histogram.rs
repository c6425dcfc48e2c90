//! Latency histograms with fixed memory, and one histogram per stage of the write and
//! read paths.
//!
//! Buckets are log-linear (HDR style): values below 16 ns have a bucket each; above,
//! every power of two `[2^e, 2^(e+1))` is split into 16 linear sub-buckets of width
//! `2^(e-4)`, so a bucket's width is at most 1/16 of any value in it and a reported
//! percentile (the bucket's upper edge) is at most 6.25% above the true one. Values up
//! to `2^40 - 1` ns (about 18 minutes) are tracked this way; larger ones land in one
//! overflow bucket, whose percentiles report the exact maximum.
//!
//! Invariants: the counts live in one array allocated by [`Histogram::new`]; recording,
//! merging and reading never allocate. `count()` is the sum of the bucket counts, and
//! `min <= every recorded value <= max`.

use std::fmt::Write as _;

/// Linear sub-buckets per power of two: the relative error bound is `1 / SUB_BUCKETS`.
pub const SUB_BUCKETS: usize = 16;
/// log2 of [`SUB_BUCKETS`].
const SUB_BUCKET_BITS: u32 = 4;
/// Values below `2^VALUE_BITS` ns are bucketed with the relative error bound.
pub const VALUE_BITS: u32 = 40;
/// Largest value tracked with the error bound (larger values go to the overflow bucket).
pub const TRACKED_MAX_NS: u64 = (1 << VALUE_BITS) - 1;
/// Buckets below the overflow bucket: 16 exact ones for 0..16, then 16 per power of two
/// from `2^4` to `2^(VALUE_BITS - 1)`.
const TRACKED_BUCKETS: usize = SUB_BUCKETS * (VALUE_BITS - SUB_BUCKET_BITS + 1) as usize;
/// Index of the overflow bucket (values above [`TRACKED_MAX_NS`]).
const OVERFLOW: usize = TRACKED_BUCKETS;
/// All buckets of one histogram.
pub const BUCKETS: usize = TRACKED_BUCKETS + 1;

const _: () = assert!(1 << SUB_BUCKET_BITS == SUB_BUCKETS);
const _: () = assert!(VALUE_BITS > SUB_BUCKET_BITS && VALUE_BITS < 64);
// The last tracked value must fall in the last tracked bucket.
const _: () = assert!(bucket_of(TRACKED_MAX_NS) == TRACKED_BUCKETS - 1);
const _: () = assert!(bucket_of(TRACKED_MAX_NS + 1) == OVERFLOW);
// A histogram stays small enough to keep one per stage per thread.
const _: () = assert!(BUCKETS * 8 <= 8 * 1024);

/// The bucket holding `ns`.
const fn bucket_of(ns: u64) -> usize {
    if ns < SUB_BUCKETS as u64 {
        return ns as usize;
    }
    if ns > TRACKED_MAX_NS {
        return OVERFLOW;
    }
    let e = 63 - ns.leading_zeros(); // 2^e <= ns < 2^(e+1), e >= 4
    let shift = e - SUB_BUCKET_BITS;
    // (ns >> shift) is in 16..32: the sub-bucket plus 16, which also skips the exact ones.
    SUB_BUCKETS * shift as usize + (ns >> shift) as usize
}

/// The largest value bucket `index` holds (inclusive).
const fn upper_edge(index: usize) -> u64 {
    if index < 2 * SUB_BUCKETS {
        return index as u64; // width 1 up to 31
    }
    if index >= OVERFLOW {
        return u64::MAX;
    }
    let shift = (index / SUB_BUCKETS) as u32 - 1;
    let lower = ((SUB_BUCKETS + index % SUB_BUCKETS) as u64) << shift;
    lower + (1 << shift) - 1
}

/// A latency histogram in nanoseconds with a fixed bucket array.
///
/// An empty histogram reports 0 for every statistic; check [`Histogram::count`].
///
/// ```
/// use prescient_dpu::histogram::Histogram;
/// let mut h = Histogram::new();
/// for ns in 1..=1000 {
///     h.record(ns);
/// }
/// let p50 = h.percentile(0.5);
/// assert!((500..=500 + 500 / 16).contains(&p50));
/// assert_eq!(h.percentile(1.0), 1000);
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Histogram {
    counts: Box<[u64; BUCKETS]>,
    count: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Histogram {
    /// An empty histogram; the only allocation it ever makes.
    pub fn new() -> Self {
        Self { counts: Box::new([0; BUCKETS]), count: 0, sum: 0, min: u64::MAX, max: 0 }
    }

    /// Records one value of `ns` nanoseconds.
    pub fn record(&mut self, ns: u64) {
        self.record_n(ns, 1);
    }

    /// Records `n` values of `ns` nanoseconds each.
    pub fn record_n(&mut self, ns: u64, n: u64) {
        if n == 0 {
            return;
        }
        let bucket = &mut self.counts[bucket_of(ns)];
        *bucket = bucket.saturating_add(n);
        self.count = self.count.saturating_add(n);
        self.sum = self.sum.saturating_add(u128::from(ns) * u128::from(n));
        self.min = self.min.min(ns);
        self.max = self.max.max(ns);
    }

    /// Adds every value recorded in `other`, as if it had been recorded here.
    pub fn merge(&mut self, other: &Histogram) {
        for (ours, theirs) in self.counts.iter_mut().zip(other.counts.iter()) {
            *ours = ours.saturating_add(*theirs);
        }
        self.count = self.count.saturating_add(other.count);
        self.sum = self.sum.saturating_add(other.sum);
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The smallest value recorded, exactly (0 if none).
    pub fn min(&self) -> u64 {
        if self.count == 0 {
            0
        } else {
            self.min
        }
    }

    /// The largest value recorded, exactly (0 if none).
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The mean of the recorded values, exactly up to f64 rounding (0 if none).
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }

    /// The `q`-quantile (`q` in 0..=1, clamped; NaN counts as 0): the upper edge of the
    /// bucket holding the value of rank `ceil(q * count)`, capped by the maximum. It is
    /// never below the true quantile and at most 6.25% above it (0 if empty).
    pub fn percentile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let q = if q.is_nan() { 0.0 } else { q.clamp(0.0, 1.0) };
        // f64 holds counts up to 2^53 exactly; beyond, the rank is off by far less than a
        // bucket's share of the values.
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0u64;
        for (index, &n) in self.counts.iter().enumerate() {
            seen = seen.saturating_add(n);
            if seen >= rank {
                return upper_edge(index).min(self.max);
            }
        }
        self.max // unreachable while count is the sum of the buckets
    }

    /// The sum of the recorded values in ns, exactly (saturating at `u128::MAX`).
    pub fn sum(&self) -> u128 {
        self.sum
    }

    /// `(upper edge, count)` of every bucket holding a value, in increasing order: every
    /// value counted there is at most the edge and above the previous bucket's edge. The
    /// overflow bucket's edge is `u64::MAX`.
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        (self.counts.iter().enumerate()).filter(|(_, &n)| n > 0).map(|(index, &n)| (upper_edge(index), n))
    }

    /// Makes this histogram equal to `other` without allocating (`clone_from` of the
    /// derived `Clone` would allocate a new array).
    pub fn copy_from(&mut self, other: &Histogram) {
        self.counts.copy_from_slice(&other.counts[..]);
        self.count = other.count;
        self.sum = other.sum;
        self.min = other.min;
        self.max = other.max;
    }

    /// Forgets every value; keeps the array.
    pub fn clear(&mut self) {
        self.counts.fill(0);
        self.count = 0;
        self.sum = 0;
        self.min = u64::MAX;
        self.max = 0;
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("count", &self.count)
            .field("min", &self.min())
            .field("p50", &self.percentile(0.5))
            .field("p99", &self.percentile(0.99))
            .field("max", &self.max)
            .finish()
    }
}

/// The stages of a PUT on the writer's DPU, in path order, and the whole write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WriteStage {
    /// Feeding the key to the predictor and granting leases.
    Predict,
    /// Stamping the version.
    Sequence,
    /// AES-256-GCM in place.
    Seal,
    /// Reed-Solomon parity.
    Encode,
    /// Posting the fragments until the quorum's acknowledgements.
    Replicate,
    /// Marking the peers' directory slots Pending.
    Invalidate,
    /// Persisting the outcome on the writer.
    Decide,
    /// Moving the marks to the committed version.
    Commit,
    /// Posting the completion on the host's ring.
    Complete,
    /// The whole write, from taking the descriptor to posting its completion.
    Total,
}

impl WriteStage {
    /// Every write stage, in path order.
    pub const ALL: [WriteStage; 10] = [
        WriteStage::Predict,
        WriteStage::Sequence,
        WriteStage::Seal,
        WriteStage::Encode,
        WriteStage::Replicate,
        WriteStage::Invalidate,
        WriteStage::Decide,
        WriteStage::Commit,
        WriteStage::Complete,
        WriteStage::Total,
    ];

    /// The stage's name in reports.
    pub const fn name(self) -> &'static str {
        match self {
            WriteStage::Predict => "predict",
            WriteStage::Sequence => "sequence",
            WriteStage::Seal => "seal",
            WriteStage::Encode => "encode",
            WriteStage::Replicate => "replicate",
            WriteStage::Invalidate => "invalidate",
            WriteStage::Decide => "decide",
            WriteStage::Commit => "commit",
            WriteStage::Complete => "complete",
            WriteStage::Total => "total",
        }
    }
}

/// The stages of a GET that rebuilds a value from fragments, and the whole read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReadStage {
    /// Reading k fragments from their holders.
    Gather,
    /// Reed-Solomon decoding (a no-op when the data fragments arrived).
    Decode,
    /// AES-256-GCM open in place.
    Open,
    /// The whole read.
    Total,
}

impl ReadStage {
    /// Every read stage, in path order.
    pub const ALL: [ReadStage; 4] = [ReadStage::Gather, ReadStage::Decode, ReadStage::Open, ReadStage::Total];

    /// The stage's name in reports.
    pub const fn name(self) -> &'static str {
        match self {
            ReadStage::Gather => "gather",
            ReadStage::Decode => "decode",
            ReadStage::Open => "open",
            ReadStage::Total => "total",
        }
    }
}

// `ALL` lists each variant once, at its discriminant, so `stage as usize` indexes it.
const _: () = {
    let mut i = 0;
    while i < WriteStage::ALL.len() {
        assert!(WriteStage::ALL[i] as usize == i);
        i += 1;
    }
    let mut i = 0;
    while i < ReadStage::ALL.len() {
        assert!(ReadStage::ALL[i] as usize == i);
        i += 1;
    }
};

/// One histogram per write stage and per read stage.
///
/// ```
/// use prescient_dpu::histogram::{StageTimes, WriteStage};
/// let mut times = StageTimes::new();
/// times.record_write(WriteStage::Seal, 1_250);
/// assert_eq!(times.write(WriteStage::Seal).count(), 1);
/// assert!(times.render().contains("seal"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageTimes {
    write: [Histogram; WriteStage::ALL.len()],
    read: [Histogram; ReadStage::ALL.len()],
}

impl StageTimes {
    /// Empty histograms for every stage (all allocation happens here).
    pub fn new() -> Self {
        Self { write: std::array::from_fn(|_| Histogram::new()), read: std::array::from_fn(|_| Histogram::new()) }
    }

    /// Records that `stage` of one PUT took `ns` nanoseconds.
    pub fn record_write(&mut self, stage: WriteStage, ns: u64) {
        self.write[stage as usize].record(ns);
    }

    /// Records that `stage` of one GET took `ns` nanoseconds.
    pub fn record_read(&mut self, stage: ReadStage, ns: u64) {
        self.read[stage as usize].record(ns);
    }

    /// The histogram of a write stage.
    pub fn write(&self, stage: WriteStage) -> &Histogram {
        &self.write[stage as usize]
    }

    /// The histogram of a read stage.
    pub fn read(&self, stage: ReadStage) -> &Histogram {
        &self.read[stage as usize]
    }

    /// Adds every value of `other` (e.g. another thread's times).
    pub fn merge(&mut self, other: &StageTimes) {
        for (ours, theirs) in self.write.iter_mut().zip(&other.write) {
            ours.merge(theirs);
        }
        for (ours, theirs) in self.read.iter_mut().zip(&other.read) {
            ours.merge(theirs);
        }
    }

    /// Makes these times equal to `other`'s without allocating.
    pub fn copy_from(&mut self, other: &StageTimes) {
        for (ours, theirs) in self.write.iter_mut().zip(&other.write).chain(self.read.iter_mut().zip(&other.read)) {
            ours.copy_from(theirs);
        }
    }

    /// Forgets every value.
    pub fn clear(&mut self) {
        self.write.iter_mut().chain(self.read.iter_mut()).for_each(Histogram::clear);
    }

    /// A table with one row per stage: count, p50, p99, p99.9 and max in microseconds
    /// (three significant digits, as the buckets are good to 6.25% anyway). PUT rows first, then
    /// GET rows; a stage with no values shows dashes.
    pub fn render(&self) -> String {
        let mut out = format!(
            "{:<16} {:>12} {:>10} {:>10} {:>10} {:>10}\n",
            "stage", "count", "p50 us", "p99 us", "p99.9 us", "max us"
        );
        let rows = WriteStage::ALL
            .iter()
            .map(|&s| ("put", s.name(), self.write(s)))
            .chain(ReadStage::ALL.iter().map(|&s| ("get", s.name(), self.read(s))));
        for (op, name, h) in rows {
            let label = format!("{op} {name}");
            if h.count() == 0 {
                let _ = writeln!(out, "{label:<16} {:>12} {:>10} {:>10} {:>10} {:>10}", 0, "-", "-", "-", "-");
                continue;
            }
            let _ = writeln!(
                out,
                "{label:<16} {:>12} {:>10} {:>10} {:>10} {:>10}",
                h.count(),
                micros(h.percentile(0.5)),
                micros(h.percentile(0.99)),
                micros(h.percentile(0.999)),
                micros(h.max()),
            );
        }
        out
    }
}

impl Default for StageTimes {
    fn default() -> Self {
        Self::new()
    }
}

/// `ns` in microseconds with three significant digits (all integer digits above 1 ms).
fn micros(ns: u64) -> String {
    let us = ns as f64 / 1e3;
    if us < 1.0 {
        format!("{us:.3}")
    } else if us < 10.0 {
        format!("{us:.2}")
    } else if us < 100.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exact `q`-quantile of sorted values, by the same rank rule.
    fn exact(sorted: &[u64], q: f64) -> u64 {
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    }

    fn assert_within_bucket(h: &Histogram, sorted: &[u64], q: f64) {
        let want = exact(sorted, q);
        let got = h.percentile(q);
        assert!(got >= want, "q {q}: {got} below the true {want}");
        assert!(got - want <= want / SUB_BUCKETS as u64, "q {q}: {got} more than 6.25% above the true {want}");
    }

    #[test]
    fn buckets_tile_the_values_and_bound_the_error() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(15), 15);
        assert_eq!(bucket_of(16), 16);
        assert_eq!(bucket_of(31), 31);
        assert_eq!((bucket_of(32), bucket_of(33), bucket_of(34)), (32, 32, 33));
        assert_eq!(upper_edge(32), 33);
        // Every bucket starts right after the previous one ends and holds only its values.
        let mut next = 0u64;
        for index in 0..TRACKED_BUCKETS {
            let upper = upper_edge(index);
            assert_eq!(bucket_of(next), index, "lower edge {next}");
            assert_eq!(bucket_of(upper), index, "upper edge {upper}");
            assert!(upper - next <= next / SUB_BUCKETS as u64, "bucket {index} [{next}, {upper}] too wide");
            next = upper + 1;
        }
        assert_eq!(next, TRACKED_MAX_NS + 1);
        assert_eq!(bucket_of(u64::MAX), OVERFLOW);
        assert_eq!(upper_edge(OVERFLOW), u64::MAX);
    }

    #[test]
    fn percentiles_of_a_uniform_distribution_are_within_the_bucket_error() {
        let values: Vec<u64> = (1..=100_000).collect();
        let mut h = Histogram::new();
        values.iter().for_each(|&v| h.record(v));
        for q in [0.0, 0.001, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 1.0] {
            assert_within_bucket(&h, &values, q);
        }
        assert_eq!((h.count(), h.min(), h.max()), (100_000, 1, 100_000));
        assert_eq!(h.mean(), 50_000.5);
        assert_eq!(h.percentile(1.0), 100_000);
    }

    #[test]
    fn percentiles_of_a_heavy_tailed_distribution_are_within_the_bucket_error() {
        // A deterministic log-uniform spread from 100 ns to 10 s, like real latencies.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut values: Vec<u64> = (0..50_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let unit = (x >> 11) as f64 / (1u64 << 53) as f64;
                (100.0 * 1e8f64.powf(unit)) as u64
            })
            .collect();
        let mut h = Histogram::new();
        values.iter().for_each(|&v| h.record(v));
        values.sort_unstable();
        for q in [0.01, 0.5, 0.9, 0.99, 0.999, 0.9999] {
            assert_within_bucket(&h, &values, q);
        }
        assert_eq!(h.min(), values[0]);
        assert_eq!(h.max(), *values.last().unwrap());
    }

    #[test]
    fn a_point_mass_reports_its_value_capped_by_the_max() {
        let mut h = Histogram::new();
        h.record_n(1_000_003, 1_000);
        // The bucket's upper edge is above the value; the cap by max makes it exact.
        assert!(upper_edge(bucket_of(1_000_003)) > 1_000_003);
        assert_eq!(h.percentile(0.5), 1_000_003);
        assert_eq!(h.count(), 1_000);
        assert_eq!(h.mean(), 1_000_003.0);
    }

    #[test]
    fn merging_equals_recording_both() {
        let (mut a, mut b, mut both) = (Histogram::new(), Histogram::new(), Histogram::new());
        for v in (0..20_000u64).map(|i| i * i % 7_919_993) {
            a.record(v);
            both.record(v);
        }
        for v in (0..5_000u64).map(|i| 3 + i * 1_013) {
            b.record_n(v, 3);
            both.record_n(v, 3);
        }
        a.merge(&b);
        assert_eq!(a, both);
        for q in [0.0, 0.5, 0.99, 0.999, 1.0] {
            assert_eq!(a.percentile(q), both.percentile(q));
        }
        let mut copy = Histogram::new();
        copy.record(7);
        copy.copy_from(&both);
        assert_eq!(copy, both);
        let edges: Vec<(u64, u64)> = both.buckets().collect();
        assert_eq!(edges.iter().map(|&(_, n)| n).sum::<u64>(), both.count());
        assert!(edges.windows(2).all(|w| w[0].0 < w[1].0), "edges increase");
        assert_eq!(
            both.sum(),
            (0..20_000u128).map(|i| i * i % 7_919_993).sum::<u128>()
                + 3 * (0..5_000u128).map(|i| 3 + i * 1_013).sum::<u128>()
        );
        // Merging an empty histogram changes nothing, in either direction.
        let mut empty = Histogram::new();
        a.merge(&Histogram::new());
        assert_eq!(a, both);
        empty.merge(&both);
        assert_eq!(empty, both);
    }

    #[test]
    fn extreme_values_are_counted_and_reported_exactly_at_the_ends() {
        let mut h = Histogram::new();
        assert_eq!((h.count(), h.min(), h.max(), h.mean(), h.percentile(0.5)), (0, 0, 0, 0.0, 0));
        h.record(0);
        h.record(u64::MAX);
        h.record(TRACKED_MAX_NS + 1);
        assert_eq!((h.count(), h.min(), h.max()), (3, 0, u64::MAX));
        assert_eq!(h.percentile(0.0), 0);
        assert_eq!(h.percentile(1.0), u64::MAX);
        // The overflow bucket reports the exact max, never a made-up edge below it.
        assert_eq!(h.percentile(0.5), u64::MAX);
        assert_eq!(h.percentile(f64::NAN), 0);
        assert_eq!(h.percentile(7.0), u64::MAX);
        let mean = h.mean();
        assert!(mean > 6.1e18 && mean < 6.2e18, "mean {mean}");
        h.record_n(5, u64::MAX);
        assert_eq!(h.count(), u64::MAX, "counts saturate instead of wrapping");
        h.clear();
        assert_eq!((h.count(), h.min(), h.max(), h.percentile(0.99)), (0, 0, 0, 0));
        h.record_n(7, 0);
        assert_eq!(h.count(), 0);
    }

    #[test]
    fn stage_times_render_one_row_per_stage() {
        let mut times = StageTimes::new();
        for i in 1..=1_000u64 {
            times.record_write(WriteStage::Seal, 1_000 + i);
            times.record_write(WriteStage::Total, 20_000 + i * 10);
        }
        times.record_read(ReadStage::Gather, 123_456_789);
        let table = times.render();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 1 + WriteStage::ALL.len() + ReadStage::ALL.len());
        assert!(lines[0].starts_with("stage") && lines[0].contains("p99.9 us"));
        let seal = lines.iter().find(|l| l.starts_with("put seal")).unwrap();
        let cols: Vec<&str> = seal.split_whitespace().collect();
        assert_eq!(cols[2], "1000", "count");
        let p50: f64 = cols[3].parse().unwrap();
        assert!((1.50..=1.60).contains(&p50), "p50 {p50}");
        assert_eq!(cols[6], "2.00", "max in us");
        let gather = lines.iter().find(|l| l.starts_with("get gather")).unwrap();
        assert!(gather.ends_with(" 123457"), "{gather}");
        let predict = lines.iter().find(|l| l.starts_with("put predict")).unwrap();
        assert_eq!(predict.split_whitespace().collect::<Vec<_>>()[2..], ["0", "-", "-", "-", "-"]);

        let mut other = StageTimes::new();
        other.record_write(WriteStage::Seal, 5);
        times.merge(&other);
        assert_eq!(times.write(WriteStage::Seal).count(), 1_001);
        assert_eq!(times.write(WriteStage::Seal).min(), 5);
        times.clear();
        assert_eq!(times, StageTimes::new());
    }

    #[test]
    fn microseconds_keep_three_significant_digits() {
        assert_eq!(micros(651), "0.651");
        assert_eq!(micros(6_512), "6.51");
        assert_eq!(micros(65_120), "65.1");
        assert_eq!(micros(651_200), "651");
        assert_eq!(micros(6_512_000), "6512");
    }
}
