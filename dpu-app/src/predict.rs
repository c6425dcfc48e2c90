//! The predicting stage: feeds every written key to the Markov predictor and keeps its
//! pre-invalidation leases (DESIGN.md, step 2).
//!
//! A write that finds its key leased is a hit; a lease that expires unused is a false
//! positive. Here the leases are counted; the write path turns each opened lease into
//! a remote `Pending` mark and each expiry into a rollback.

use prescient_models::{Predictor, WriteOutcome};

use crate::pipeline::{Request, Stage, StageError};
use crate::seal::key_hash;

/// Runs the predictor on every request's key.
#[derive(Debug)]
pub struct PredictStage {
    predictor: Predictor,
    rollbacks: u64,
}

impl PredictStage {
    /// A stage driving `predictor` (e.g. from `Predictor::from_model(Model::load(path)?)`).
    pub fn new(predictor: Predictor) -> Self {
        Self { predictor, rollbacks: 0 }
    }
}

impl Stage for PredictStage {
    fn name(&self) -> &'static str {
        "predict"
    }

    fn run(&mut self, req: &mut Request<'_>) -> Result<(), StageError> {
        let hash = key_hash(req.key);
        req.codec.key_hash = hash;
        let rollbacks = &mut self.rollbacks;
        let report = self.predictor.on_write(hash, |_expired| *rollbacks += 1);
        let _hit = report.outcome == WriteOutcome::Hit;
        Ok(())
    }

    fn summary(&self) -> Option<String> {
        let s = self.predictor.stats();
        Some(format!(
            "predictor: {} writes, {} leases opened, {} hits (precision {:.3}, recall {:.3}), {} expired unused (rollbacks)",
            s.writes,
            s.opened,
            s.hits,
            s.precision(),
            s.recall(),
            self.rollbacks
        ))
    }
}
