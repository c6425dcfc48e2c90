//! Percentiles and the ratio table every benchmark prints.

/// Latency percentiles of a sample, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Percentiles {
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Samples.
    pub count: usize,
}

impl Percentiles {
    /// Percentiles of `samples` (sorted in place).
    pub fn of(samples: &mut [u64]) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        samples.sort_unstable();
        let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
        Self { p50: at(0.50), p99: at(0.99), p999: at(0.999), count: samples.len() }
    }
}

/// One row: a figure, its reference, and which way is better.
#[derive(Clone, Debug)]
pub struct Row {
    /// What is measured.
    pub what: String,
    /// Our figure.
    pub ours: f64,
    /// The reference's name.
    pub reference: String,
    /// The reference's figure.
    pub theirs: f64,
    /// Unit.
    pub unit: &'static str,
    /// Whether a higher figure is better (throughput) or lower (latency).
    pub higher_is_better: bool,
}

impl Row {
    /// `ours / theirs`, the way the targets are stated (throughput: >1 is faster;
    /// latency: >1 is slower).
    pub fn ratio(&self) -> f64 {
        if self.theirs == 0.0 {
            f64::NAN
        } else {
            self.ours / self.theirs
        }
    }
}

/// Formats rows as a table.
pub fn table(rows: &[Row]) -> String {
    let mut out =
        format!("{:<44} {:>14} {:>14}  {:<28} {:>7}\n", "measure", "ours", "reference", "reference is", "ratio");
    for r in rows {
        out.push_str(&format!(
            "{:<44} {:>14} {:>14}  {:<28} {:>6.2}x{}\n",
            r.what,
            human(r.ours, r.unit),
            human(r.theirs, r.unit),
            r.reference,
            r.ratio(),
            if r.higher_is_better { "" } else { " (lower is better)" }
        ));
    }
    out
}

fn human(v: f64, unit: &str) -> String {
    match unit {
        "ops/s" if v >= 1e6 => format!("{:.1} M/s", v / 1e6),
        "ops/s" => format!("{:.0} /s", v),
        "ns" if v >= 1e6 => format!("{:.2} ms", v / 1e6),
        "ns" if v >= 1e3 => format!("{:.2} us", v / 1e3),
        "ns" => format!("{v:.0} ns"),
        "bytes" => format!("{:.1} KiB", v / 1024.0),
        _ => format!("{v:.3} {unit}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_the_right_ranks() {
        let mut s: Vec<u64> = (1..=1000).rev().collect();
        let p = Percentiles::of(&mut s);
        assert_eq!((p.p50, p.p99, p.p999, p.count), (501, 991, 1000, 1000));
    }
}
