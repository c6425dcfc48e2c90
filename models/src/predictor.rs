//! The predictor as the DPU app uses it: one call per write that reports whether the
//! write found a lease, learns from it, and opens leases on the keys predicted next.

use crate::config::{ModelConfig, SCORE_UNSEEN, THRESHOLD_FLOOR};
use crate::error::ModelError;
use crate::lease::{Lease, LeaseStats, LeaseTracker, OpenOutcome, WriteOutcome};
use crate::model::Model;
use crate::prediction::Predictions;
use crate::threshold::TuningConfig;
use crate::tuner::Tuner;

/// What one write did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WriteReport {
    /// Whether the write found its key leased.
    pub outcome: WriteOutcome,
    /// Keys newly leased after this write, with their probabilities: the caller
    /// marks each `Pending` on its peers. Refreshed leases are not listed.
    pub opened: Predictions,
}

/// A [`Model`] and a [`LeaseTracker`] driven together.
///
/// ```
/// use prescient_models::{ModelConfig, Predictor, WriteOutcome};
/// let mut p = Predictor::new(ModelConfig { memory_bytes: 64 << 10, ..ModelConfig::default() })?;
/// let mut rollbacks = Vec::new();
/// let mut hits = 0;
/// for _ in 0..10 {
///     for key in [10, 20, 30] {
///         if p.on_write(key, |lease| rollbacks.push(lease.key)).outcome == WriteOutcome::Hit {
///             hits += 1;
///         }
///     }
/// }
/// assert!(hits >= 20);
/// # Ok::<(), prescient_models::ModelError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Predictor {
    model: Model,
    leases: LeaseTracker,
    tuner: Option<Tuner>,
}

impl Predictor {
    /// A fresh model and an empty lease tracker.
    pub fn new(config: ModelConfig) -> Result<Self, ModelError> {
        Self::from_model(Model::new(config)?)
    }

    /// A trained model (e.g. loaded from a file) with an empty lease tracker.
    pub fn from_model(model: Model) -> Result<Self, ModelError> {
        let leases = LeaseTracker::new(model.config().lease_window_writes)?;
        Ok(Self { model, leases, tuner: None })
    }

    /// Leases at a threshold tuned online from cost (see [`crate::threshold`])
    /// instead of the model's fixed theta.
    pub fn tuned(mut self, tuning: TuningConfig) -> Result<Self, ModelError> {
        self.tuner = Some(Tuner::new(self.model.config(), tuning)?);
        Ok(self)
    }

    /// One write of `key`. Expired leases are handed to `expired` (roll them back).
    pub fn on_write(&mut self, key: u64, expired: impl FnMut(Lease)) -> WriteReport {
        let outcome = self.leases.on_write(key, expired);
        self.model.observe(key);
        let mut opened = Predictions::new();
        let predictions = match self.tuner.as_mut() {
            None => self.model.predict(key),
            Some(t) => {
                t.on_write(key);
                // Every prediction down to the floor feeds the ledger; those at the
                // tuned threshold are leased.
                let all = self.model.predict_scored(key, THRESHOLD_FLOOR, SCORE_UNSEEN);
                for p in &all {
                    t.predicted(p.key, p.probability);
                }
                all
            }
        };
        let threshold = self.threshold();
        for p in predictions.iter().filter(|p| p.probability >= threshold) {
            if self.leases.open(p.key) == OpenOutcome::Opened {
                opened.push(p.key, p.probability);
            }
        }
        WriteReport { outcome, opened }
    }

    /// The threshold leases are opened at now: the tuned one, or the model's theta.
    pub fn threshold(&self) -> f32 {
        self.tuner.as_ref().map_or(self.model.config().theta, Tuner::threshold)
    }

    /// The tuner, when the threshold is tuned.
    pub fn tuner(&self) -> Option<&Tuner> {
        self.tuner.as_ref()
    }

    /// The tuner, to report measured costs to it.
    pub fn tuner_mut(&mut self) -> Option<&mut Tuner> {
        self.tuner.as_mut()
    }

    /// The model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The lease tracker.
    pub fn leases(&self) -> &LeaseTracker {
        &self.leases
    }

    /// Lease counters so far.
    pub fn stats(&self) -> LeaseStats {
        self.leases.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A walk around a ring of 50 keys: from an even key to the next always, from
    /// an odd key to the next 70 % of the time, else one further (the next is
    /// skipped). A threshold at or below 0.7 leases the odd keys' successors too.
    fn skipping_walk(writes: usize) -> Vec<u64> {
        let mut x = 1u64;
        let mut key = 0u64;
        (0..writes)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let skip = key % 2 == 1 && (x >> 33) % 10 < 3;
                key = (key + 1 + u64::from(skip)) % 50;
                key
            })
            .collect()
    }

    fn run(mut p: Predictor, keys: &[u64]) -> Predictor {
        for &k in keys {
            p.on_write(k, |_| {});
        }
        p
    }

    #[test]
    fn the_tuned_threshold_keeps_precision_where_a_low_fixed_one_does_not() {
        let keys = skipping_walk(60_000);
        let config = ModelConfig { memory_bytes: 256 << 10, theta: 0.5, ..ModelConfig::default() };
        let fixed = run(Predictor::new(config).unwrap(), &keys);
        let tuned = run(Predictor::new(config).unwrap().tuned(TuningConfig::default()).unwrap(), &keys);
        let (f, t) = (fixed.stats(), tuned.stats());
        assert!(f.precision() < 0.95, "the fixed low threshold is not precise enough: {f:?}");
        assert!(t.precision() >= 0.95, "tuned: {t:?}, threshold {}", tuned.threshold());
        assert!(t.recall() > 0.4, "tuned still leases the even keys' successors: {t:?}");
        let (decisions, ..) = tuned.tuner().unwrap().controller().decisions();
        assert_eq!(decisions, keys.len() as u64 / u64::from(TuningConfig::default().epoch_writes));
    }

    #[test]
    fn untuned_leases_at_the_model_theta() {
        let keys = skipping_walk(5_000);
        let config = ModelConfig { memory_bytes: 64 << 10, ..ModelConfig::default() };
        let p = run(Predictor::new(config).unwrap(), &keys);
        assert_eq!(p.threshold(), config.theta);
        assert!(p.tuner().is_none());
    }
}
