//! The tuned predictor's bookkeeping: the ledger of what every threshold level would
//! have done, the controller that picks one, and the costs the caller measures
//! (averaged), driven one write at a time.

use crate::config::{ModelConfig, THRESHOLD_LEVELS};
use crate::error::ModelError;
use crate::ledger::{LedgerCounts, OutcomeLedger};
use crate::threshold::{Costs, ThresholdController, TuningConfig};

/// Weight of a new sample in a measured cost's running average.
const COST_SAMPLE_WEIGHT: f64 = 1.0 / 64.0;

/// A running average of a measured cost, empty until its first sample.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Average(Option<f64>);

impl Average {
    fn add(&mut self, sample: f64) {
        self.0 = Some(match self.0 {
            None => sample,
            Some(a) => a + (sample - a) * COST_SAMPLE_WEIGHT,
        });
    }
}

/// Ledger, controller and measured costs.
#[derive(Debug, Clone)]
pub struct Tuner {
    ledger: OutcomeLedger,
    controller: ThresholdController,
    hit_saved_ns: Average,
    false_positive_ns: Average,
    totals: LedgerCounts,
}

impl Tuner {
    /// A tuner for leases of `model.lease_window_writes`, deciding per `tuning`.
    pub fn new(model: &ModelConfig, tuning: TuningConfig) -> Result<Self, ModelError> {
        Ok(Self {
            ledger: OutcomeLedger::new(model.lease_window_writes)?,
            controller: ThresholdController::new(tuning)?,
            hit_saved_ns: Average::default(),
            false_positive_ns: Average::default(),
            totals: LedgerCounts::default(),
        })
    }

    /// One write of `key`, before its predictions: a decision every
    /// `epoch_writes` writes.
    pub(crate) fn on_write(&mut self, key: u64) {
        self.ledger.on_write(key);
        if self.ledger.writes() % u64::from(self.controller.config().epoch_writes) == 0 {
            let epoch = self.ledger.take();
            for (t, e) in self.totals.levels.iter_mut().zip(&epoch.levels) {
                t.opened += e.opened;
                t.hits += e.hits;
                t.expired += e.expired;
            }
            self.totals.dropped += epoch.dropped;
            let costs = self.costs();
            self.controller.decide(&epoch, costs);
        }
    }

    /// A prediction of `key` after the write just seen (whatever its probability).
    pub(crate) fn predicted(&mut self, key: u64, probability: f32) {
        self.ledger.predicted(key, probability);
    }

    /// The threshold to lease at now.
    pub fn threshold(&self) -> f32 {
        self.controller.threshold()
    }

    /// The controller (its level, decisions and windowed precision).
    pub fn controller(&self) -> &ThresholdController {
        &self.controller
    }

    /// A write took a lease: what it saved (e.g. the lease's marking round trip).
    pub fn measured_hit(&mut self, saved_ns: u64) {
        self.hit_saved_ns.add(saved_ns as f64);
    }

    /// A lease was rolled back unused: what it cost (its CAS rounds' time, and the
    /// readers that waited on its mark).
    pub fn measured_false_positive(&mut self, cost_ns: u64) {
        self.false_positive_ns.add(cost_ns as f64);
    }

    /// The costs the controller uses: the measured averages; a kind not measured
    /// yet stands in the prior's ratio to the other; neither measured, the prior.
    pub fn costs(&self) -> Costs {
        let p = Costs::PRIOR;
        match (self.hit_saved_ns.0, self.false_positive_ns.0) {
            (Some(h), Some(f)) => Costs { hit_saved: h, false_positive: f },
            (Some(h), None) => Costs { hit_saved: h, false_positive: h * p.false_positive / p.hit_saved },
            (None, Some(f)) => Costs { hit_saved: f * p.hit_saved / p.false_positive, false_positive: f },
            (None, None) => p,
        }
    }

    /// The averages measured so far, in nanoseconds: what a hit saved and what a false
    /// positive cost (`None` until the first of each kind).
    pub fn measured_costs_ns(&self) -> (Option<f64>, Option<f64>) {
        (self.hit_saved_ns.0, self.false_positive_ns.0)
    }

    /// Every level's counts over the decided epochs (the current epoch not yet in).
    pub fn totals(&self) -> &LedgerCounts {
        &self.totals
    }

    /// Levels considered.
    pub fn levels(&self) -> usize {
        THRESHOLD_LEVELS
    }
}
