//! The predictor as the DPU app uses it: one call per write that reports whether the
//! write found a lease, learns from it, and opens leases on the keys predicted next.

use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::lease::{Lease, LeaseStats, LeaseTracker, OpenOutcome, WriteOutcome};
use crate::model::Model;
use crate::prediction::Predictions;

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
}

impl Predictor {
    /// A fresh model and an empty lease tracker.
    pub fn new(config: ModelConfig) -> Result<Self, ModelError> {
        Self::from_model(Model::new(config)?)
    }

    /// A trained model (e.g. loaded from a file) with an empty lease tracker.
    pub fn from_model(model: Model) -> Result<Self, ModelError> {
        let leases = LeaseTracker::new(model.config().lease_window_writes)?;
        Ok(Self { model, leases })
    }

    /// One write of `key`. Expired leases are handed to `expired` (roll them back).
    pub fn on_write(&mut self, key: u64, expired: impl FnMut(Lease)) -> WriteReport {
        let outcome = self.leases.on_write(key, expired);
        self.model.observe(key);
        let mut opened = Predictions::new();
        for p in &self.model.predict(key) {
            if self.leases.open(p.key) == OpenOutcome::Opened {
                opened.push(p.key, p.probability);
            }
        }
        WriteReport { outcome, opened }
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
