//! The lease threshold chosen from cost: a pure, deterministic controller fed what
//! every threshold level's leases did (from [`crate::ledger`]) and what a hit saves
//! and a false positive costs, returning the threshold to lease at.
//!
//! At each decision (one per [`TuningConfig::epoch_writes`] writes) the counts join
//! a window that decays by [`TuningConfig::decay`] at every decision (older epochs
//! weigh less, so a stream that changes is followed; the window's effective length
//! is `1 / (1 - decay)` epochs, long enough that sampling noise at a level near the
//! minimum does not move the threshold). A level is *admissible* when its window holds at least
//! [`TuningConfig::min_closed`] ended leases and its precision is at least
//! [`TuningConfig::precision_min`]; its *net benefit* is `hits * hit_saved -
//! false_positives * false_positive_cost`. The target is the admissible level of
//! the largest net benefit (the higher threshold on a tie); with none admissible,
//! the ceiling. The threshold moves at most one level per decision toward the target,
//! and only past two bands (hysteresis): down only when the next level down clears
//! the minimum precision by [`TuningConfig::precision_margin`] and its net benefit
//! beats the current level's by [`TuningConfig::gain_min`]; up at once when the
//! current level falls below the minimum, else only for that same gain. So a level that is
//! just admissible is kept, not left and re-entered.
//!
//! ```
//! use prescient_models::threshold::{Costs, ThresholdController, TuningConfig};
//! use prescient_models::ledger::LedgerCounts;
//! let mut c = ThresholdController::new(TuningConfig::default())?;
//! let start = c.threshold();
//! // An epoch in which nothing was leased leaves the threshold where it is.
//! assert_eq!(c.decide(&LedgerCounts::default(), Costs::PRIOR), start);
//! # Ok::<(), prescient_models::ModelError>(())
//! ```

use crate::config::THRESHOLD_LEVELS;
use crate::error::ModelError;
use crate::ledger::{level_theta, LedgerCounts};

/// How the tuner decides: one setting for every trace and cluster.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TuningConfig {
    /// Writes between two decisions.
    pub epoch_writes: u32,
    /// Lowest precision a chosen level may have.
    pub precision_min: f64,
    /// Precision above the minimum a lower level needs before the threshold moves
    /// down to it.
    pub precision_margin: f64,
    /// Share by which a level's net benefit must beat the current level's for the
    /// threshold to move toward it (unless the current level is inadmissible).
    pub gain_min: f64,
    /// Ended leases a level's window needs before its precision is trusted.
    pub min_closed: u32,
    /// Weight the window keeps of what came before, at each decision, in [0, 1).
    pub decay: f64,
    /// Level the threshold starts at.
    pub start_level: usize,
}

impl Default for TuningConfig {
    /// The setting used on every trace and every node.
    fn default() -> Self {
        Self {
            epoch_writes: 1024,
            precision_min: 0.95,
            precision_margin: 0.01,
            gain_min: 0.02,
            min_closed: 64,
            decay: 0.875,
            // 0.75: the fixed theta chosen in issue 5.
            start_level: 5,
        }
    }
}

impl TuningConfig {
    /// Checks every field.
    pub fn validate(&self) -> Result<(), ModelError> {
        let bad = |field: &'static str, value: String, expected: &'static str| {
            Err(ModelError::InvalidConfig { field, value, expected })
        };
        if !(64..=1 << 20).contains(&self.epoch_writes) {
            return bad("epoch_writes", self.epoch_writes.to_string(), "64 ..= 1048576");
        }
        if !(self.precision_min > 0.0 && self.precision_min < 1.0) {
            return bad("precision_min", self.precision_min.to_string(), "in (0, 1)");
        }
        if !(self.precision_margin >= 0.0 && self.precision_min + self.precision_margin < 1.0) {
            return bad("precision_margin", self.precision_margin.to_string(), ">= 0 and below 1 - precision_min");
        }
        if !(self.gain_min >= 0.0 && self.gain_min.is_finite()) {
            return bad("gain_min", self.gain_min.to_string(), "a finite share >= 0");
        }
        if !(0.0..1.0).contains(&self.decay) {
            return bad("decay", self.decay.to_string(), "in [0, 1)");
        }
        if self.min_closed == 0 {
            return bad("min_closed", "0".into(), "at least 1");
        }
        if self.start_level >= THRESHOLD_LEVELS {
            return bad("start_level", self.start_level.to_string(), "below THRESHOLD_LEVELS (11)");
        }
        Ok(())
    }
}

/// What a hit saves and a false positive costs, in one unit (nanoseconds as
/// measured, or round trips in a model): only their ratio matters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Costs {
    /// What a write that found its key leased did not wait for.
    pub hit_saved: f64,
    /// What a lease rolled back unused cost: its CAS rounds, and readers that
    /// waited on its mark.
    pub false_positive: f64,
}

impl Costs {
    /// Before anything is measured, in round trips: a hit saves the marking round
    /// trip; a false positive costs two (its mark and its rollback).
    pub const PRIOR: Costs = Costs { hit_saved: 1.0, false_positive: 2.0 };
}

/// A window of counts per level, halved at each decision.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Window {
    hits: f64,
    expired: f64,
}

impl Window {
    fn closed(&self) -> f64 {
        self.hits + self.expired
    }
    fn precision(&self) -> f64 {
        if self.closed() > 0.0 {
            self.hits / self.closed()
        } else {
            0.0
        }
    }
    fn net(&self, costs: Costs) -> f64 {
        self.hits * costs.hit_saved - self.expired * costs.false_positive
    }
}

/// Where the threshold stands and why it last moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Move {
    /// Stayed.
    Held,
    /// One level down: a lower threshold pays more and keeps precision.
    Down,
    /// One level up: the current level's precision fell below the minimum.
    UpForPrecision,
    /// One level up: a higher threshold pays more.
    UpForCost,
}

/// The controller. See the module documentation.
#[derive(Debug, Clone)]
pub struct ThresholdController {
    config: TuningConfig,
    level: usize,
    window: [Window; THRESHOLD_LEVELS],
    decisions: u64,
    moves: [u64; 4],
    last: Move,
}

impl ThresholdController {
    /// A controller at `config.start_level`.
    pub fn new(config: TuningConfig) -> Result<Self, ModelError> {
        config.validate()?;
        Ok(Self {
            config,
            level: config.start_level,
            window: [Window::default(); THRESHOLD_LEVELS],
            decisions: 0,
            moves: [0; 4],
            last: Move::Held,
        })
    }

    /// Its configuration.
    pub fn config(&self) -> &TuningConfig {
        &self.config
    }

    /// The threshold to lease at now.
    pub fn threshold(&self) -> f32 {
        level_theta(self.level)
    }

    /// The level of [`ThresholdController::threshold`].
    pub fn level(&self) -> usize {
        self.level
    }

    /// Decisions taken, and how many of them moved down, up for precision, up for cost.
    pub fn decisions(&self) -> (u64, u64, u64, u64) {
        (self.decisions, self.moves[1], self.moves[2], self.moves[3])
    }

    /// How the last decision moved.
    pub fn last_move(&self) -> Move {
        self.last
    }

    /// The windowed precision of `level` (0 when nothing ended there).
    pub fn precision_at(&self, level: usize) -> f64 {
        self.window[level].precision()
    }

    fn admissible(&self, level: usize, margin: f64) -> bool {
        let w = &self.window[level];
        w.closed() >= f64::from(self.config.min_closed) && w.precision() >= self.config.precision_min + margin
    }

    /// One decision: the epoch's counts per level and the costs as measured now.
    /// Returns the threshold to lease at until the next decision.
    pub fn decide(&mut self, epoch: &LedgerCounts, costs: Costs) -> f32 {
        assert!(
            costs.hit_saved.is_finite()
                && costs.false_positive.is_finite()
                && costs.hit_saved >= 0.0
                && costs.false_positive >= 0.0,
            "costs are measured durations: {costs:?}"
        );
        for (w, c) in self.window.iter_mut().zip(&epoch.levels) {
            w.hits = w.hits * self.config.decay + c.hits as f64;
            w.expired = w.expired * self.config.decay + c.expired as f64;
        }
        self.decisions += 1;
        let current = self.level;
        let net_now = self.window[current].net(costs);
        let gain = |net: f64| net - net_now > self.config.gain_min * net_now.abs().max(f64::MIN_POSITIVE);
        // Highest net benefit among admissible levels; the higher threshold on a tie.
        let target = (0..THRESHOLD_LEVELS)
            .rev()
            .filter(|&l| self.admissible(l, 0.0))
            .fold(None, |best: Option<usize>, l| match best {
                Some(b) if self.window[b].net(costs) >= self.window[l].net(costs) => Some(b),
                _ => Some(l),
            })
            .unwrap_or(THRESHOLD_LEVELS - 1);
        let current_trusted = self.window[current].closed() >= f64::from(self.config.min_closed);
        let below_min = current_trusted && self.window[current].precision() < self.config.precision_min;
        let step = if below_min && current + 1 < THRESHOLD_LEVELS {
            Move::UpForPrecision
        } else if target < current
            && self.admissible(current - 1, self.config.precision_margin)
            && gain(self.window[current - 1].net(costs))
        {
            Move::Down
        } else if target > current && !below_min && current_trusted && gain(self.window[current + 1].net(costs)) {
            Move::UpForCost
        } else {
            Move::Held
        };
        match step {
            Move::Down => self.level -= 1,
            Move::UpForPrecision | Move::UpForCost => self.level += 1,
            Move::Held => {}
        }
        self.moves[step as usize] += 1;
        self.last = step;
        self.threshold()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::LevelCounts;

    /// A deterministic generator (SplitMix64).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        fn chance(&mut self, p: f64) -> bool {
            (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
        }
    }

    /// A synthetic stream: each epoch, `per_band[b]` predictions fall in band `b`
    /// (probabilities between level b's threshold and the next), each hit with
    /// probability `hit_rate(b)`. A level counts every prediction at or above it.
    fn epoch(rng: &mut Rng, per_band: u64, hit_rate: &dyn Fn(usize) -> f64) -> LedgerCounts {
        let mut out = LedgerCounts::default();
        for band in 0..THRESHOLD_LEVELS {
            for _ in 0..per_band {
                let hit = rng.chance(hit_rate(band));
                for c in &mut out.levels[..=band] {
                    c.opened += 1;
                    if hit {
                        c.hits += 1;
                    } else {
                        c.expired += 1;
                    }
                }
            }
        }
        out
    }

    /// The best admissible level of the stream's expected counts.
    fn optimum(hit_rate: &dyn Fn(usize) -> f64, costs: Costs, precision_min: f64) -> usize {
        let mut best = (THRESHOLD_LEVELS - 1, f64::MIN);
        for level in (0..THRESHOLD_LEVELS).rev() {
            let hits: f64 = (level..THRESHOLD_LEVELS).map(hit_rate).sum();
            let all = (THRESHOLD_LEVELS - level) as f64;
            let net = hits * costs.hit_saved - (all - hits) * costs.false_positive;
            if hits / all >= precision_min && net > best.1 {
                best = (level, net);
            }
        }
        best.0
    }

    fn run(
        c: &mut ThresholdController,
        rng: &mut Rng,
        epochs: usize,
        hit_rate: &dyn Fn(usize) -> f64,
        costs: Costs,
    ) -> Vec<usize> {
        (0..epochs)
            .map(|_| {
                c.decide(&epoch(rng, 40, hit_rate), costs);
                c.level()
            })
            .collect()
    }

    /// Precision rises with the band: 0.81 at the floor, +0.02 per level.
    fn clean(band: usize) -> f64 {
        (0.81 + 0.02 * band as f64).min(1.0)
    }

    #[test]
    fn converges_to_the_known_optimum_from_either_side() {
        for (costs, name) in [(Costs::PRIOR, "prior"), (Costs { hit_saved: 1.0, false_positive: 40.0 }, "costly")] {
            let want = optimum(&clean, costs, 0.95);
            for start_level in [0, THRESHOLD_LEVELS - 1] {
                let mut c = ThresholdController::new(TuningConfig { start_level, ..TuningConfig::default() }).unwrap();
                let levels = run(&mut c, &mut Rng(7), 60, &clean, costs);
                let settled = &levels[30..];
                assert!(
                    settled.iter().all(|&l| l.abs_diff(want) <= 1),
                    "{name} from {start_level}: optimum {want}, settled at {settled:?}"
                );
                assert!(c.precision_at(c.level()) >= 0.95, "{name}: {}", c.precision_at(c.level()));
            }
        }
        // The two cost settings have different optima: cost moves the choice.
        assert!(
            optimum(&clean, Costs { hit_saved: 1.0, false_positive: 40.0 }, 0.95) > optimum(&clean, Costs::PRIOR, 0.95)
        );
    }

    #[test]
    fn keeps_precision_when_the_stream_gets_noisier() {
        let mut c = ThresholdController::new(TuningConfig::default()).unwrap();
        let mut rng = Rng(11);
        run(&mut c, &mut rng, 40, &clean, Costs::PRIOR);
        let before = c.level();
        // Successors grow less decisive: precision falls in every band but the top.
        let noisy = |band: usize| (0.60 + 0.04 * band as f64).min(1.0);
        let levels = run(&mut c, &mut rng, 60, &noisy, Costs::PRIOR);
        assert!(c.level() > before, "the threshold rose: {before} -> {levels:?}");
        let true_precision =
            |level: usize| (level..THRESHOLD_LEVELS).map(noisy).sum::<f64>() / (THRESHOLD_LEVELS - level) as f64;
        for &l in &levels[30..] {
            assert!(true_precision(l) >= 0.95, "level {l}: expected precision {:.3}", true_precision(l));
        }
    }

    #[test]
    fn does_not_oscillate_on_a_steady_stream() {
        // Bands 4 and up are good, below them much worse: level 4 is just admissible.
        let edge = |band: usize| if band >= 4 { 0.965 } else { 0.5 };
        let mut c = ThresholdController::new(TuningConfig::default()).unwrap();
        let levels = run(&mut c, &mut Rng(3), 200, &edge, Costs::PRIOR);
        let reversals =
            levels[20..].windows(3).filter(|w| (w[1] as i64 - w[0] as i64) * (w[2] as i64 - w[1] as i64) < 0).count();
        let moves = levels[20..].windows(2).filter(|w| w[0] != w[1]).count();
        assert!(reversals == 0 && moves <= 2, "levels {:?}", &levels[20..]);
    }

    #[test]
    fn holds_without_evidence_and_steps_one_level() {
        let mut c = ThresholdController::new(TuningConfig::default()).unwrap();
        let start = c.level();
        for _ in 0..10 {
            c.decide(&LedgerCounts::default(), Costs::PRIOR);
        }
        assert_eq!(c.level(), start);
        // A perfect floor: the threshold walks down one level per decision.
        let mut all = LedgerCounts::default();
        for (level, c) in all.levels.iter_mut().enumerate() {
            let n = 100 * (THRESHOLD_LEVELS - level) as u64;
            *c = LevelCounts { opened: n, hits: n, expired: 0 };
        }
        for i in 1..=start {
            c.decide(&all, Costs::PRIOR);
            assert_eq!(c.level(), start - i);
        }
        assert_eq!(c.decisions().1, start as u64);
    }

    #[test]
    fn bad_settings_are_named() {
        let base = TuningConfig::default();
        for (config, field) in [
            (TuningConfig { epoch_writes: 1, ..base }, "epoch_writes"),
            (TuningConfig { precision_min: 1.0, ..base }, "precision_min"),
            (TuningConfig { precision_margin: -0.1, ..base }, "precision_margin"),
            (TuningConfig { gain_min: f64::NAN, ..base }, "gain_min"),
            (TuningConfig { min_closed: 0, ..base }, "min_closed"),
            (TuningConfig { decay: 1.0, ..base }, "decay"),
            (TuningConfig { start_level: THRESHOLD_LEVELS, ..base }, "start_level"),
        ] {
            match ThresholdController::new(config) {
                Err(ModelError::InvalidConfig { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }
}
