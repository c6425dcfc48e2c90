//! The Prometheus text exposition format, version 0.0.4: what `serve --metrics`
//! answers on `GET /metrics`.
//!
//! A page is a list of metric families, each a `# HELP` and a `# TYPE` line followed by
//! its samples, `name{label="value",...} value`. Counters end in `_total`; a histogram
//! `NAME` is the series `NAME_bucket{le="..."}` (cumulative, the last `le="+Inf"`),
//! `NAME_sum` and `NAME_count`. Latencies are in seconds, the format's base unit.
//!
//! Invariants the writer keeps (checked by the tests here and, independently of this
//! code, by the parser of `tests/metrics.rs`): every family is announced once, before
//! its samples and after the previous family's; names are `[a-zA-Z_:][a-zA-Z0-9_:]*`;
//! label values are escaped (`\\`, `\"`, `\n`); histogram buckets never decrease and
//! `+Inf` equals `_count`. A broken invariant is a programmer error and panics.
//!
//! Our [`Histogram`] keeps log-linear buckets (each at most 1/16 of its values wide);
//! an exposed bucket `le = b` counts the buckets whose values are all at most `b` (a
//! bucket's values are also at most the histogram's exact maximum). A value within
//! 6.25% below `b` whose bucket straddles `b` is counted from the next bound on: the
//! exposed counts are never above the true ones and at most one of our buckets below.
//!
//! ```
//! use prescient_dpu::exposition::{Exposition, Kind};
//! let mut page = Exposition::new();
//! page.family("prescient_requests_total", Kind::Counter, "Requests completed.");
//! page.sample("prescient_requests_total", &[("op", "put"), ("status", "ok")], 3u64);
//! assert_eq!(
//!     page.finish(),
//!     concat!(
//!         "# HELP prescient_requests_total Requests completed.\n",
//!         "# TYPE prescient_requests_total counter\n",
//!         "prescient_requests_total{op=\"put\",status=\"ok\"} 3\n",
//!     )
//! );
//! ```
#![forbid(unsafe_code)]

use std::fmt::Write as _;

use crate::histogram::Histogram;

/// The `Content-Type` of a page.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Upper bounds of the exposed latency buckets, in ns: 1-2-5 steps from 100 ns to
/// 10 s (a seal takes about a microsecond, a WAN write tens of milliseconds).
pub const LATENCY_BOUNDS_NS: [u64; 25] = {
    let mut out = [0u64; 25];
    let mut i = 0;
    let mut decade = 100u64;
    while i < 24 {
        out[i] = decade;
        out[i + 1] = 2 * decade;
        out[i + 2] = 5 * decade;
        decade *= 10;
        i += 3;
    }
    out[24] = decade;
    out
};

const _: () = assert!(LATENCY_BOUNDS_NS[0] == 100 && LATENCY_BOUNDS_NS[24] == 10_000_000_000);

/// A metric family's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (a name ending in `_total`).
    Counter,
    /// Goes up and down.
    Gauge,
    /// Cumulative buckets, sum and count.
    Histogram,
}

impl Kind {
    const fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A page being written.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
    /// Every family announced so far; the last is the one samples may go to.
    families: Vec<(String, Kind)>,
}

impl Exposition {
    /// An empty page.
    pub fn new() -> Self {
        Self::default()
    }

    /// Announces family `name` with its `help`; its samples follow, before the next
    /// family. Panics on a bad or repeated name, or a counter not ending in `_total`.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        assert!(valid_name(name), "metric name {name:?}");
        assert!(kind != Kind::Counter || name.ends_with("_total"), "counter {name} must end in _total");
        assert!(self.families.iter().all(|(n, _)| n != name), "family {name} announced twice");
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {}", kind.name());
        self.families.push((name.to_owned(), kind));
    }

    /// One counter or gauge sample of the family announced last, which must be `name`.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Value) {
        self.check_current(name, &[Kind::Counter, Kind::Gauge]);
        self.line(name, "", labels, None, value);
    }

    /// The series of histogram `name` (announced last) from `h`, whose values are ns,
    /// exposed in seconds with the upper bounds `bounds_ns` (increasing) and `+Inf`.
    pub fn histogram(&mut self, name: &str, labels: &[(&str, &str)], h: &Histogram, bounds_ns: &[u64]) {
        self.check_current(name, &[Kind::Histogram]);
        assert!(bounds_ns.windows(2).all(|w| w[0] < w[1]), "bounds increase");
        let mut buckets = h.buckets().map(|(edge, n)| (edge.min(h.max()), n)).peekable();
        let mut below = 0u64;
        for &bound in bounds_ns {
            while let Some((_, n)) = buckets.next_if(|&(edge, _)| edge <= bound) {
                below = below.saturating_add(n);
            }
            let le = seconds(bound);
            self.line(name, "_bucket", labels, Some(&le), below);
        }
        self.line(name, "_bucket", labels, Some("+Inf"), h.count());
        self.line(name, "_sum", labels, None, h.sum() as f64 / 1e9);
        self.line(name, "_count", labels, None, h.count());
    }

    /// The page.
    pub fn finish(self) -> String {
        self.out
    }

    fn check_current(&self, name: &str, kinds: &[Kind]) {
        let current = self.families.last();
        assert!(
            current.is_some_and(|(n, k)| n == name && kinds.contains(k)),
            "sample of {name} outside its family (current: {current:?})"
        );
    }

    fn line(&mut self, name: &str, suffix: &str, labels: &[(&str, &str)], le: Option<&str>, value: impl Value) {
        self.out.push_str(name);
        self.out.push_str(suffix);
        let all = labels.iter().copied().chain(le.map(|le| ("le", le)));
        for (i, (key, text)) in all.enumerate() {
            assert!(valid_label(key), "label name {key:?}");
            self.out.push(if i == 0 { '{' } else { ',' });
            self.out.push_str(key);
            self.out.push_str("=\"");
            for c in text.chars() {
                match c {
                    '\\' => self.out.push_str("\\\\"),
                    '"' => self.out.push_str("\\\""),
                    '\n' => self.out.push_str("\\n"),
                    c => self.out.push(c),
                }
            }
            self.out.push('"');
        }
        if !labels.is_empty() || le.is_some() {
            self.out.push('}');
        }
        self.out.push(' ');
        value.write_to(&mut self.out);
        self.out.push('\n');
    }
}

/// A sample's value: counts exactly as integers, other figures as floats.
pub trait Value {
    /// Appends the value as the format spells it.
    fn write_to(&self, out: &mut String);
}

impl Value for u64 {
    fn write_to(&self, out: &mut String) {
        let _ = write!(out, "{self}");
    }
}

impl Value for f64 {
    fn write_to(&self, out: &mut String) {
        out.push_str(&number(*self));
    }
}

/// `ns` as seconds, the shortest text that reads back as the same f64.
fn seconds(ns: u64) -> String {
    number(ns as f64 / 1e9)
}

/// A sample value: integers without a fraction, others as Rust prints them (the
/// shortest text that round-trips), infinities and NaN as the format spells them.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn valid_label(name: &str) -> bool {
    valid_name(name) && !name.contains(':') && !name.starts_with("__")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_and_gauges_with_and_without_labels() {
        let mut page = Exposition::new();
        page.family("prescient_peers_up", Kind::Gauge, "Peers connected.");
        page.sample("prescient_peers_up", &[], 4u64);
        page.family("prescient_bytes_total", Kind::Counter, "Bytes.\nWith a \\ in it.");
        page.sample("prescient_bytes_total", &[("peer", "1"), ("direction", "out")], 12_345_678_901u64);
        page.sample("prescient_bytes_total", &[("region", "/dev/shm/a \"b\"\\c\nd")], 0.5);
        assert_eq!(
            page.finish(),
            "# HELP prescient_peers_up Peers connected.\n\
             # TYPE prescient_peers_up gauge\n\
             prescient_peers_up 4\n\
             # HELP prescient_bytes_total Bytes.\\nWith a \\\\ in it.\n\
             # TYPE prescient_bytes_total counter\n\
             prescient_bytes_total{peer=\"1\",direction=\"out\"} 12345678901\n\
             prescient_bytes_total{region=\"/dev/shm/a \\\"b\\\"\\\\c\\nd\"} 0.5\n"
        );
    }

    #[test]
    fn a_histogram_is_cumulative_in_seconds_and_ends_in_inf_equal_to_count() {
        let mut h = Histogram::new();
        h.record_n(150, 2); // 150 ns: below 200 ns
        h.record(1_000); // at a bound, but its bucket [992, 1023] straddles it: counted from 2 us
        h.record(3_000_000); // 3 ms
        h.record(u64::MAX); // overflow: only in +Inf
        let mut page = Exposition::new();
        page.family("lat_seconds", Kind::Histogram, "Latency.");
        page.histogram("lat_seconds", &[("stage", "seal")], &h, &[100, 200, 1_000, 2_000, 5_000_000]);
        let text = page.finish();
        let want = "# HELP lat_seconds Latency.\n\
             # TYPE lat_seconds histogram\n\
             lat_seconds_bucket{stage=\"seal\",le=\"0.0000001\"} 0\n\
             lat_seconds_bucket{stage=\"seal\",le=\"0.0000002\"} 2\n\
             lat_seconds_bucket{stage=\"seal\",le=\"0.000001\"} 2\n\
             lat_seconds_bucket{stage=\"seal\",le=\"0.000002\"} 3\n\
             lat_seconds_bucket{stage=\"seal\",le=\"0.005\"} 4\n\
             lat_seconds_bucket{stage=\"seal\",le=\"+Inf\"} 5\n";
        assert!(text.starts_with(want), "{text}");
        // The sum is exact (the overflow value included), in seconds.
        let sum = (300u128 + 1_000 + 3_000_000 + u128::from(u64::MAX)) as f64 / 1e9;
        assert!(text.contains(&format!("lat_seconds_sum{{stage=\"seal\"}} {sum}\n")), "{text}");
        assert!(text.ends_with("lat_seconds_count{stage=\"seal\"} 5\n"), "{text}");
    }

    #[test]
    fn a_point_mass_lands_at_its_bound_through_the_exact_max() {
        // 1000 ns sits in the bucket [992, 1023]; the maximum caps its edge at 1000.
        let mut h = Histogram::new();
        h.record_n(1_000, 10);
        let mut page = Exposition::new();
        page.family("x_seconds", Kind::Histogram, "x");
        page.histogram("x_seconds", &[], &h, &[999, 1_000]);
        let text = page.finish();
        assert!(text.contains("x_seconds_bucket{le=\"0.000000999\"} 0\n"), "{text}");
        assert!(text.contains("x_seconds_bucket{le=\"0.000001\"} 10\n"), "{text}");
        assert!(text.contains("x_seconds_sum 0.00001\n") && text.contains("x_seconds_count 10\n"), "{text}");
    }

    #[test]
    fn an_empty_histogram_has_every_series_at_zero() {
        let mut page = Exposition::new();
        page.family("e_seconds", Kind::Histogram, "e");
        page.histogram("e_seconds", &[("node", "0")], &Histogram::new(), &LATENCY_BOUNDS_NS);
        let text = page.finish();
        let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(samples.len(), LATENCY_BOUNDS_NS.len() + 3);
        assert!(samples.iter().all(|l| l.ends_with(" 0")), "{text}");
        assert!(text.contains("e_seconds_bucket{node=\"0\",le=\"10\"} 0\n"), "{text}");
    }

    #[test]
    fn the_latency_bounds_step_1_2_5() {
        assert_eq!(LATENCY_BOUNDS_NS[..4], [100, 200, 500, 1_000]);
        assert!(LATENCY_BOUNDS_NS.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(seconds(LATENCY_BOUNDS_NS[24]), "10");
    }

    #[test]
    fn numbers_read_back_as_the_same_value() {
        for v in [0.0, 1.0, 0.5, 1e-7, 123_456.789, 2e20, f64::MAX] {
            assert_eq!(number(v).parse::<f64>().unwrap(), v, "{}", number(v));
        }
        assert_eq!((number(f64::INFINITY), number(f64::NAN)), ("+Inf".into(), "NaN".into()));
    }

    #[test]
    #[should_panic(expected = "must end in _total")]
    fn a_counter_without_total_is_a_programmer_error() {
        Exposition::new().family("prescient_requests", Kind::Counter, "x");
    }

    #[test]
    #[should_panic(expected = "outside its family")]
    fn a_sample_outside_its_family_is_a_programmer_error() {
        let mut page = Exposition::new();
        page.family("a_total", Kind::Counter, "a");
        page.family("b_total", Kind::Counter, "b");
        page.sample("a_total", &[], 1u64);
    }

    #[test]
    #[should_panic(expected = "announced twice")]
    fn a_family_announced_twice_is_a_programmer_error() {
        let mut page = Exposition::new();
        page.family("a_total", Kind::Counter, "a");
        page.family("a_total", Kind::Counter, "a");
    }
}
