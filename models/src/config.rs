//! Every limit of the predictor in one place, and the run-time configuration that is
//! checked against them once, at construction.
//!
//! The model never grows after construction: its tables are sized here from the
//! memory budget, and the lease tracker from the lease window.

use crate::error::ModelError;

/// Successor slots kept per context: enough to find every successor whose share
/// clears a threshold above 1/(slots+1), and one context fills one small record.
pub const SUCCESSOR_SLOTS: usize = 4;
/// Ways per set of a context table: a new context evicts the coldest of these.
pub const TABLE_WAYS: usize = 4;
/// Contexts consulted per prediction: the order-1 context (the key just written)
/// and the order-2 context (the key before it and the key just written).
pub const CONTEXT_ORDERS: usize = 2;
/// Most predictions one call returns: every successor slot of every context.
pub const PREDICTIONS_MAX: usize = SUCCESSOR_SLOTS * CONTEXT_ORDERS;
/// Longest lease window, in writes.
pub const LEASE_WINDOW_WRITES_MAX: u32 = 64;

/// A lease window of `window_writes` writes, checked against 1 ..=
/// [`LEASE_WINDOW_WRITES_MAX`] (the lease tracker's and the tuner's ledger's check).
pub(crate) fn lease_window(window_writes: u32) -> Result<u64, ModelError> {
    if !(1..=LEASE_WINDOW_WRITES_MAX).contains(&window_writes) {
        return Err(ModelError::InvalidConfig {
            field: "lease_window_writes",
            value: window_writes.to_string(),
            expected: "1 ..= 64",
        });
    }
    Ok(u64::from(window_writes))
}
/// Most leases open at once: each write opens at most `PREDICTIONS_MAX` leases and
/// each lasts at most `LEASE_WINDOW_WRITES_MAX` writes.
pub const LEASES_OPEN_MAX: usize = PREDICTIONS_MAX * LEASE_WINDOW_WRITES_MAX as usize;
/// Smallest memory budget: one set of each table.
pub const MEMORY_BYTES_MIN: u64 = 4 * 1024;
/// Largest memory budget (1 GiB): beyond it the slot index no longer fits a `u32`.
pub const MEMORY_BYTES_MAX: u64 = 1 << 30;
/// Largest value of the per-context occurrence count before all counts of the
/// context are halved (the decay that lets an old habit give way to a new one).
pub const COUNT_DECAY_AT_MAX: u16 = u16::MAX / 2;
/// Heat of a context entry: raised when the context recurs, lowered when a new
/// context misses in its set; the coldest way is the one replaced.
pub const HEAT_MAX: u8 = 15;

/// The lowest lease threshold the tuner may choose. At or above one half, a context
/// predicts at most one successor (shares sum to one), so a write opens at most one
/// lease per context order and the tuner's shadow leases stay within
/// [`LEASES_OPEN_MAX`].
pub const THRESHOLD_FLOOR: f32 = 0.5;
/// Distance between two thresholds the tuner considers: also its largest move per
/// decision.
pub const THRESHOLD_STEP: f32 = 0.05;
/// Thresholds the tuner considers: `THRESHOLD_FLOOR + i * THRESHOLD_STEP` for `i` in
/// `0..THRESHOLD_LEVELS`, the last one 1.0 (only a successor that always followed).
pub const THRESHOLD_LEVELS: usize = 11;
/// Observations the tuned threshold's score counts as gone elsewhere: a successor
/// seen `c` times in `n` scores `c / (n + SCORE_UNSEEN)`, so a context seen twice
/// scores at most 2/3 and the top level (1.0) is never reached: leasing off.
pub const SCORE_UNSEEN: u16 = 1;

const _: () = assert!(PREDICTIONS_MAX <= 16, "predictions are returned inline");
const _: () = assert!(THRESHOLD_FLOOR >= 0.5, "one successor per context at the floor");
const _: () = assert!(
    (THRESHOLD_FLOOR + (THRESHOLD_LEVELS - 1) as f32 * THRESHOLD_STEP - 1.0)
        * (THRESHOLD_FLOOR + (THRESHOLD_LEVELS - 1) as f32 * THRESHOLD_STEP - 1.0)
        < 1e-9,
    "the top level is 1.0"
);
const _: () = assert!(TABLE_WAYS.is_power_of_two());
const _: () = assert!(MEMORY_BYTES_MIN < MEMORY_BYTES_MAX);
const _: () = assert!(MEMORY_BYTES_MAX / 32 <= u32::MAX as u64, "slot index is a u32");

/// How the predictor is built and when it opens a lease.
///
/// ```
/// use prescient_models::ModelConfig;
/// let config = ModelConfig { memory_bytes: 1 << 20, ..ModelConfig::default() };
/// assert!(config.validate().is_ok());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelConfig {
    /// Memory budget of the model's tables in bytes; the model never exceeds it.
    pub memory_bytes: u64,
    /// Probability a successor must reach to be predicted (and leased), in (0, 1].
    pub theta: f32,
    /// How many writes a lease stays open waiting for its write.
    pub lease_window_writes: u32,
    /// A context predicts nothing until it has been seen this many times.
    pub min_observations: u16,
    /// When a context's occurrence count reaches this, all its counts are halved.
    pub count_decay_at: u16,
    /// Whether order-2 contexts (the two last keys) are kept and consulted beside
    /// order-1 contexts. Without them the whole budget goes to order 1.
    pub order2: bool,
}

impl Default for ModelConfig {
    /// The operating point chosen by the evaluation on the shared traces (see the
    /// crate README in the closing note of issue 5).
    fn default() -> Self {
        Self {
            memory_bytes: 1 << 20,
            theta: 0.75,
            lease_window_writes: 8,
            min_observations: 2,
            count_decay_at: 256,
            order2: true,
        }
    }
}

impl ModelConfig {
    /// Checks every field against the crate's limits.
    pub fn validate(&self) -> Result<(), ModelError> {
        let bad = |field: &'static str, value: String, expected: &'static str| {
            Err(ModelError::InvalidConfig { field, value, expected })
        };
        if !(MEMORY_BYTES_MIN..=MEMORY_BYTES_MAX).contains(&self.memory_bytes) {
            return bad("memory_bytes", self.memory_bytes.to_string(), "4 KiB ..= 1 GiB");
        }
        if !(self.theta > 0.0 && self.theta <= 1.0) {
            return bad("theta", self.theta.to_string(), "a probability in (0, 1]");
        }
        if !(1..=LEASE_WINDOW_WRITES_MAX).contains(&self.lease_window_writes) {
            return bad("lease_window_writes", self.lease_window_writes.to_string(), "1 ..= 64");
        }
        if self.min_observations == 0 {
            return bad("min_observations", "0".into(), "at least 1");
        }
        if !(2..=COUNT_DECAY_AT_MAX).contains(&self.count_decay_at) || self.count_decay_at < self.min_observations {
            return bad("count_decay_at", self.count_decay_at.to_string(), "2 ..= 32767 and at least min_observations");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        ModelConfig::default().validate().unwrap();
    }

    #[test]
    fn each_bad_field_is_named() {
        let base = ModelConfig::default();
        let cases = [
            (ModelConfig { memory_bytes: 1, ..base }, "memory_bytes"),
            (ModelConfig { theta: 0.0, ..base }, "theta"),
            (ModelConfig { theta: f32::NAN, ..base }, "theta"),
            (ModelConfig { theta: 1.5, ..base }, "theta"),
            (ModelConfig { lease_window_writes: 0, ..base }, "lease_window_writes"),
            (ModelConfig { lease_window_writes: 65, ..base }, "lease_window_writes"),
            (ModelConfig { min_observations: 0, ..base }, "min_observations"),
            (ModelConfig { count_decay_at: 1, ..base }, "count_decay_at"),
        ];
        for (config, field) in cases {
            match config.validate() {
                Err(ModelError::InvalidConfig { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: expected InvalidConfig, got {other:?}"),
            }
        }
    }
}
