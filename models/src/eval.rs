//! Replays a write trace through a forecaster and the lease rules, and reports
//! precision, recall, leases per write and memory next to the baselines of issue 5:
//! no prediction, last successor, and the plain unbounded order-1 counting model.
//!
//! Two modes: online (learn while predicting, as on the DPU) and split (learn on
//! the first half without leasing, then lease on the second half with learning off).

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::lease::{LeaseStats, LeaseTracker};
use crate::model::Model;
use crate::prediction::Predictions;
use crate::predictor::Predictor;
use crate::threshold::TuningConfig;

/// Something that predicts which keys to lease after each write.
pub trait Forecaster {
    /// Feeds one written key.
    fn observe(&mut self, key: u64);
    /// Turns learning on or off (the stream is still followed).
    fn set_learning(&mut self, learning: bool);
    /// The keys to lease now that `key` (the key last observed) was written.
    fn forecast(&self, key: u64, out: &mut Predictions);
    /// Bytes of state (for unbounded baselines, the payload of their maps).
    fn memory_bytes(&self) -> u64;
}

/// Leases nothing: the floor.
#[derive(Debug, Default)]
pub struct NoPrediction;

impl Forecaster for NoPrediction {
    fn observe(&mut self, _key: u64) {}
    fn set_learning(&mut self, _learning: bool) {}
    fn forecast(&self, _key: u64, _out: &mut Predictions) {}
    fn memory_bytes(&self) -> u64 {
        0
    }
}

/// Leases the key that followed this one last time (unbounded map).
#[derive(Debug, Default)]
pub struct LastSuccessor {
    next: HashMap<u64, u64>,
    last: Option<u64>,
    frozen: bool,
}

impl Forecaster for LastSuccessor {
    fn observe(&mut self, key: u64) {
        if let (Some(last), false) = (self.last, self.frozen) {
            self.next.insert(last, key);
        }
        self.last = Some(key);
    }
    fn set_learning(&mut self, learning: bool) {
        self.frozen = !learning;
    }
    fn forecast(&self, key: u64, out: &mut Predictions) {
        if let Some(&next) = self.next.get(&key).filter(|&&n| n != key) {
            out.push(next, 1.0);
        }
    }
    fn memory_bytes(&self) -> u64 {
        (self.next.len() * 16) as u64
    }
}

/// The plain reference: unbounded order-1 counts; leases B after A when
/// count(A→B)/count(A) >= theta and A was followed at least twice.
#[derive(Debug)]
pub struct PlainOrder1 {
    theta: f64,
    contexts: HashMap<u64, (u32, HashMap<u64, u32>)>,
    transitions: usize,
    last: Option<u64>,
    frozen: bool,
}

impl PlainOrder1 {
    /// The reference at threshold `theta`.
    pub fn new(theta: f32) -> Self {
        Self { theta: f64::from(theta), contexts: HashMap::new(), transitions: 0, last: None, frozen: false }
    }
}

impl Forecaster for PlainOrder1 {
    fn observe(&mut self, key: u64) {
        if let (Some(last), false) = (self.last, self.frozen) {
            let (total, next) = self.contexts.entry(last).or_default();
            *total += 1;
            let count = next.entry(key).or_insert(0);
            if *count == 0 {
                self.transitions += 1;
            }
            *count += 1;
        }
        self.last = Some(key);
    }
    fn set_learning(&mut self, learning: bool) {
        self.frozen = !learning;
    }
    fn forecast(&self, key: u64, out: &mut Predictions) {
        let Some((total, next)) = self.contexts.get(&key) else {
            return;
        };
        if *total < 2 {
            return;
        }
        for (&succ, &count) in next {
            let p = f64::from(count) / f64::from(*total);
            if succ != key && p >= self.theta {
                out.push(succ, p as f32);
            }
        }
    }
    fn memory_bytes(&self) -> u64 {
        (self.contexts.len() * 16 + self.transitions * 12) as u64
    }
}

/// The crate's bounded model at a threshold.
#[derive(Debug)]
pub struct ModelForecaster {
    /// The model.
    pub model: Model,
    theta: f32,
}

impl ModelForecaster {
    /// A fresh model of `config`, predicting at `config.theta`.
    pub fn new(config: ModelConfig) -> Result<Self, ModelError> {
        Ok(Self { model: Model::new(config)?, theta: config.theta })
    }
}

impl Forecaster for ModelForecaster {
    fn observe(&mut self, key: u64) {
        self.model.observe(key);
    }
    fn set_learning(&mut self, learning: bool) {
        self.model.set_learning(learning);
    }
    fn forecast(&self, key: u64, out: &mut Predictions) {
        *out = self.model.predict_at(key, self.theta);
    }
    fn memory_bytes(&self) -> u64 {
        self.model.memory_bytes()
    }
}

/// How a trace is replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Learn and lease over the whole trace.
    Online,
    /// Learn on the first half, lease on the second with learning off.
    Split,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Online => "online",
            Mode::Split => "train-half/test-half",
        }
    }
}

/// Replays `keys` through `f` with leases of `window_writes` writes.
pub fn replay(keys: &[u64], f: &mut dyn Forecaster, window_writes: u32, mode: Mode) -> Result<LeaseStats, ModelError> {
    let mut leases = LeaseTracker::new(window_writes)?;
    let test = match mode {
        Mode::Online => keys,
        Mode::Split => {
            let (train, test) = keys.split_at(keys.len() / 2);
            for &k in train {
                f.observe(k);
            }
            f.set_learning(false);
            test
        }
    };
    let mut out = Predictions::new();
    for &k in test {
        leases.on_write(k, |_| {});
        f.observe(k);
        out.clear();
        f.forecast(k, &mut out);
        for p in &out {
            leases.open(p.key);
        }
    }
    Ok(leases.stats())
}

/// One line of the evaluation table.
#[derive(Debug, Clone)]
pub struct Row {
    /// Trace name.
    pub trace: String,
    /// Replay mode.
    pub mode: Mode,
    /// Predictor name.
    pub predictor: &'static str,
    /// Threshold (None for baselines without one).
    pub theta: Option<f32>,
    /// Lease counters.
    pub stats: LeaseStats,
    /// Bytes of predictor state.
    pub memory_bytes: u64,
}

/// Predictors the evaluation runs.
pub const PREDICTORS: [&str; 5] = ["none", "last-successor", "plain-order1", "model-order1", "model"];

/// Evaluates every predictor at every theta on one trace, in both modes.
/// `config` gives the model's memory, window and decay; its theta is swept.
pub fn evaluate(trace: &str, keys: &[u64], config: ModelConfig, thetas: &[f32]) -> Result<Vec<Row>, ModelError> {
    let mut rows = Vec::new();
    for mode in [Mode::Online, Mode::Split] {
        let mut run = |predictor: &'static str, theta: Option<f32>, f: &mut dyn Forecaster| -> Result<(), ModelError> {
            let stats = replay(keys, f, config.lease_window_writes, mode)?;
            rows.push(Row { trace: trace.to_string(), mode, predictor, theta, stats, memory_bytes: f.memory_bytes() });
            Ok(())
        };
        run("none", None, &mut NoPrediction)?;
        run("last-successor", None, &mut LastSuccessor::default())?;
        for &theta in thetas {
            run("plain-order1", Some(theta), &mut PlainOrder1::new(theta))?;
            let c = ModelConfig { theta, order2: false, ..config };
            run("model-order1", Some(theta), &mut ModelForecaster::new(c)?)?;
            let c = ModelConfig { theta, ..config };
            run("model", Some(theta), &mut ModelForecaster::new(c)?)?;
        }
    }
    Ok(rows)
}

/// The recall of the plain reference at theta 0.9 in the same trace and mode.
pub fn reference_recall(rows: &[Row], trace: &str, mode: Mode) -> Option<f64> {
    rows.iter()
        .find(|r| r.trace == trace && r.mode == mode && r.predictor == "plain-order1" && r.theta == Some(0.9))
        .map(|r| r.stats.recall())
}

/// The rows as a text table, grouped by trace and mode.
pub fn format_table(rows: &[Row]) -> String {
    let mut s = String::new();
    let mut group = None;
    for r in rows {
        if group != Some((&r.trace, r.mode)) {
            group = Some((&r.trace, r.mode));
            let _ = writeln!(s, "\n{} ({})", r.trace, r.mode.name());
            let _ = writeln!(
                s,
                "{:<15} {:>5} {:>9} {:>7} {:>8} {:>11} {:>10}",
                "predictor", "theta", "precision", "recall", "leases/w", "recall/ref", "memory KiB"
            );
        }
        let reference = reference_recall(rows, &r.trace, r.mode).unwrap_or(0.0);
        let vs = if reference > 0.0 { format!("{:.2}x", r.stats.recall() / reference) } else { "-".into() };
        let _ = writeln!(
            s,
            "{:<15} {:>5} {:>9.4} {:>7.4} {:>8.4} {:>11} {:>10}",
            r.predictor,
            r.theta.map_or("-".into(), |t| format!("{t:.2}")),
            r.stats.precision(),
            r.stats.recall(),
            r.stats.leases_per_write(),
            vs,
            r.memory_bytes.div_ceil(1024),
        );
    }
    s
}

/// One trace replayed online through the predictor three ways in one run: at the
/// model's fixed theta, at the tuner's floor, and with the threshold tuned online.
#[derive(Debug, Clone)]
pub struct TunedRow {
    /// Trace name.
    pub trace: String,
    /// The fixed theta (the model's).
    pub fixed_theta: f32,
    /// Lease counters at the fixed theta.
    pub fixed: LeaseStats,
    /// Lease counters at the floor threshold (every lease the tuner could open).
    pub floor: LeaseStats,
    /// Lease counters with the tuned threshold.
    pub tuned: LeaseStats,
    /// The threshold at the end of the trace.
    pub threshold_end: f32,
    /// The lowest and highest threshold it leased at.
    pub threshold_range: (f32, f32),
    /// The threshold averaged over writes.
    pub threshold_mean: f64,
    /// Decisions, moves down, moves up for precision, moves up for cost.
    pub decisions: (u64, u64, u64, u64),
}

impl TunedRow {
    /// Share of the floor's hits the tuned threshold kept.
    pub fn share_of_floor_hits(&self) -> f64 {
        if self.floor.hits == 0 {
            0.0
        } else {
            self.tuned.hits as f64 / self.floor.hits as f64
        }
    }
}

/// Replays `keys` online through a predictor of `config` with the threshold tuned by
/// `tuning` (costs: the prior, since a trace has no fabric to measure), next to the
/// same predictor at `config.theta` and at the floor.
pub fn evaluate_tuned(
    trace: &str,
    keys: &[u64],
    config: ModelConfig,
    tuning: TuningConfig,
) -> Result<TunedRow, ModelError> {
    let fixed = replay_predictor(keys, Predictor::new(config)?);
    let floor =
        replay_predictor(keys, Predictor::new(ModelConfig { theta: crate::config::THRESHOLD_FLOOR, ..config })?);
    let mut p = Predictor::new(config)?.tuned(tuning)?;
    let (mut low, mut high, mut sum) = (f32::MAX, f32::MIN, 0.0f64);
    for &k in keys {
        let t = p.threshold();
        low = low.min(t);
        high = high.max(t);
        sum += f64::from(t);
        p.on_write(k, |_| {});
    }
    let tuner = p.tuner().expect("tuned");
    Ok(TunedRow {
        trace: trace.to_string(),
        fixed_theta: config.theta,
        fixed,
        floor,
        tuned: p.stats(),
        threshold_end: p.threshold(),
        threshold_range: (low, high),
        threshold_mean: sum / keys.len().max(1) as f64,
        decisions: tuner.controller().decisions(),
    })
}

fn replay_predictor(keys: &[u64], mut p: Predictor) -> LeaseStats {
    for &k in keys {
        p.on_write(k, |_| {});
    }
    p.stats()
}

/// The tuned row as text, each figure next to the fixed theta's of the same run.
pub fn format_tuned(r: &TunedRow) -> String {
    let (d, down, up_p, up_c) = r.decisions;
    let line = |name: String, s: &LeaseStats, share: String| {
        format!("{name:<22} {:>9.4} {:>7.4} {:>8.4} {:>9}\n", s.precision(), s.recall(), s.leases_per_write(), share)
    };
    let share = |s: &LeaseStats| {
        if r.floor.hits == 0 {
            "-".to_string()
        } else {
            format!("{:.3}", s.hits as f64 / r.floor.hits as f64)
        }
    };
    let mut out = format!(
        "\n{} (online, threshold tuned from cost)\n{:<22} {:>9} {:>7} {:>8} {:>9}\n",
        r.trace, "lease threshold", "precision", "recall", "leases/w", "of floor"
    );
    out += &line(format!("tuned, ends {:.2}", r.threshold_end), &r.tuned, share(&r.tuned));
    out += &line(format!("fixed {:.2}", r.fixed_theta), &r.fixed, share(&r.fixed));
    out += &line(format!("floor {:.2}", crate::config::THRESHOLD_FLOOR), &r.floor, share(&r.floor));
    let ratio = |a: f64, b: f64| if b > 0.0 { format!("{:.2}x", a / b) } else { "-".into() };
    let _ = writeln!(
        out,
        "tuned vs fixed {:.2} (same run): precision {}, recall {}; threshold mean {:.3}, range {:.2}-{:.2}; {d} decisions: {down} down, {up_p} up for precision, {up_c} up for cost",
        r.fixed_theta,
        ratio(r.tuned.precision(), r.fixed.precision()),
        ratio(r.tuned.recall(), r.fixed.recall()),
        r.threshold_mean,
        r.threshold_range.0,
        r.threshold_range.1,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cycle_is_predicted_perfectly_after_warm_up() {
        let keys: Vec<u64> = (0..3000).map(|i| i % 10).collect();
        let config = ModelConfig { memory_bytes: 64 << 10, theta: 0.9, ..ModelConfig::default() };
        let s = replay(&keys, &mut ModelForecaster::new(config).unwrap(), 8, Mode::Online).unwrap();
        assert!(s.precision() > 0.99 && s.recall() > 0.98, "{s:?}");
        let s = replay(&keys, &mut PlainOrder1::new(0.9), 8, Mode::Split).unwrap();
        assert_eq!(s.writes, 1500);
        assert!(s.precision() > 0.99 && s.recall() > 0.99, "{s:?}");
        let s = replay(&keys, &mut NoPrediction, 8, Mode::Online).unwrap();
        assert_eq!((s.opened, s.hits), (0, 0));
    }

    #[test]
    fn random_keys_get_no_confident_leases() {
        let mut x = 7u64;
        let keys: Vec<u64> = (0..5000)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (x >> 33) % 1000
            })
            .collect();
        let config = ModelConfig { memory_bytes: 256 << 10, theta: 0.9, ..ModelConfig::default() };
        let s = replay(&keys, &mut ModelForecaster::new(config).unwrap(), 8, Mode::Online).unwrap();
        assert!(s.leases_per_write() < 0.01, "{s:?}");
        let last = replay(&keys, &mut LastSuccessor::default(), 8, Mode::Online).unwrap();
        assert!(last.precision() < 0.05, "{last:?}");
    }
}
