//! The online Markov model of the write stream.
//!
//! Two bounded context tables learn what follows what: order 1 (the key just
//! written) and, if configured, order 2 (the two last keys). A successor is predicted
//! when its share of a context's observations reaches theta and the context has
//! been seen at least `min_observations` times; the two orders are blended by union,
//! so a context that order 1 finds ambiguous can still be decided by order 2. The key
//! just written is never predicted: its own write already invalidates it.
//!
//! Invariants: the tables are allocated at construction and never grow, so
//! [`Model::memory_bytes`] never exceeds the configured budget; `observe` and
//! `predict` do not allocate; the model is a pure function of its configuration and
//! the keys observed (same input, same bytes).

use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::prediction::Predictions;
use crate::table::Table;

/// The order-2 context tag of `before` followed by `last`.
pub(crate) fn order2_tag(before: u64, last: u64) -> u64 {
    let h = before.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(31) ^ last;
    h.wrapping_mul(0xD6E8_FEB8_6659_FD93) ^ (h >> 32)
}

/// What the model remembers of the recent stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct History {
    /// The last key observed.
    pub last: Option<u64>,
    /// The key observed before it.
    pub before: Option<u64>,
    /// Slot of `last`'s order-1 context (where its successor will be counted).
    pub slot1: Option<usize>,
    /// Slot of the order-2 context (`before`, `last`).
    pub slot2: Option<usize>,
}

/// The predictor's model. See the module documentation.
///
/// ```
/// use prescient_models::{Model, ModelConfig};
/// let mut model = Model::new(ModelConfig { memory_bytes: 64 << 10, ..ModelConfig::default() })?;
/// for _ in 0..4 {
///     model.observe(1);
///     model.observe(2);
/// }
/// model.observe(1);
/// let next: Vec<u64> = model.predict(1).iter().map(|p| p.key).collect();
/// assert_eq!(next, [2]);
/// # Ok::<(), prescient_models::ModelError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    pub(crate) config: ModelConfig,
    pub(crate) order1: Table,
    pub(crate) order2: Table,
    pub(crate) history: History,
    pub(crate) learning: bool,
}

impl Model {
    /// A model with empty tables sized to `config.memory_bytes`: half for each order
    /// when order 2 is on, all for order 1 otherwise.
    pub fn new(config: ModelConfig) -> Result<Self, ModelError> {
        config.validate()?;
        let (order1, order2) = if config.order2 {
            (Table::with_budget(config.memory_bytes / 2), Table::with_budget(config.memory_bytes / 2))
        } else {
            // A one-set order-2 table that is never used, counted like the rest.
            let unused = Table::with_sets(1);
            (Table::with_budget(config.memory_bytes - unused.memory_bytes()), unused)
        };
        let model = Self { config, order1, order2, history: History::default(), learning: true };
        assert!(model.memory_bytes() <= config.memory_bytes, "tables sized past the budget");
        Ok(model)
    }

    /// The configuration the model was built with.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Bytes the model's tables occupy; fixed at construction, within the budget.
    pub fn memory_bytes(&self) -> u64 {
        self.order1.memory_bytes() + self.order2.memory_bytes()
    }

    /// Turns learning on or off. A model that does not learn still follows the
    /// stream (its order-2 context) but changes no count: evaluation on held-out data.
    pub fn set_learning(&mut self, learning: bool) {
        self.learning = learning;
    }

    /// Feeds one written key to the model.
    pub fn observe(&mut self, key: u64) {
        let h = self.history;
        let decay_at = self.config.count_decay_at;
        if self.learning {
            if let (Some(slot), Some(last)) = (h.slot1, h.last) {
                self.order1.record(slot, last, key, decay_at);
            }
            if let (Some(slot), Some(last), Some(before)) = (h.slot2, h.last, h.before) {
                self.order2.record(slot, order2_tag(before, last), key, decay_at);
            }
        }
        let with_order2 = self.config.order2 && h.last.is_some();
        let tag2 = h.last.map(|last| order2_tag(last, key));
        let (slot1, slot2) = if self.learning {
            (Some(self.order1.touch(key)), tag2.filter(|_| with_order2).map(|t| self.order2.touch(t)))
        } else {
            (self.order1.find(key), tag2.filter(|_| with_order2).and_then(|t| self.order2.find(t)))
        };
        self.history = History { last: Some(key), before: h.last, slot1, slot2 };
    }

    /// The successors of `key` whose probability reaches the configured theta.
    ///
    /// When `key` is the key just observed, both its contexts are consulted without a
    /// table probe; otherwise the order-2 context is (last key observed, `key`), as if
    /// `key` were written now. `key` itself is never predicted.
    pub fn predict(&self, key: u64) -> Predictions {
        self.predict_at(key, self.config.theta)
    }

    /// [`Model::predict`] with another threshold (the evaluation's theta sweep).
    pub fn predict_at(&self, key: u64, theta: f32) -> Predictions {
        self.predict_scored(key, theta, 0)
    }

    /// The successors of `key` whose *evidence-weighted share* `count / (total +
    /// unseen)` reaches `theta`: the share as if `unseen` more observations had gone
    /// to other successors. With `unseen = 1`, a successor that followed every one of
    /// `n` observations scores `n / (n + 1)`, so a high threshold asks for evidence as
    /// well as a high share (the tuned threshold's score; see `crate::threshold`).
    pub fn predict_scored(&self, key: u64, theta: f32, unseen: u16) -> Predictions {
        let mut out = Predictions::new();
        let h = &self.history;
        let (slot1, ctx2) = if h.last == Some(key) {
            (h.slot1, h.before.map(|b| (h.slot2, order2_tag(b, key))))
        } else {
            (self.order1.find(key), h.last.map(|l| (None, order2_tag(l, key))))
        };
        if let Some(slot) = slot1 {
            self.push_confident(&self.order1, slot, key, key, (theta, unseen), &mut out);
        }
        if self.config.order2 {
            if let Some((slot, tag)) = ctx2 {
                let slot = slot.or_else(|| self.order2.find(tag));
                if let Some(slot) = slot {
                    self.push_confident(&self.order2, slot, tag, key, (theta, unseen), &mut out);
                }
            }
        }
        out
    }

    /// Pushes the successors of the context `tag` in `slot` that reach `theta`, if the
    /// context has the evidence; never `key` itself.
    fn push_confident(&self, table: &Table, slot: usize, tag: u64, key: u64, at: (f32, u16), out: &mut Predictions) {
        let (theta, unseen) = at;
        let total = match table.total(slot, tag) {
            Some(total) if total >= self.config.min_observations => f32::from(total) + f32::from(unseen),
            _ => return,
        };
        let e = table.successors(slot);
        for (&succ, &count) in e.keys.iter().zip(&e.counts) {
            let p = f32::from(count) / total;
            if count != 0 && succ != key && p >= theta {
                out.push(succ, p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn small(order2: bool) -> ModelConfig {
        ModelConfig { memory_bytes: 16 << 10, order2, ..ModelConfig::default() }
    }

    #[test]
    fn needs_min_observations() {
        let mut m = Model::new(small(false)).unwrap();
        m.observe(1);
        m.observe(2);
        m.observe(1);
        assert!(m.predict(1).is_empty(), "one observation of context 1 is not enough");
        m.observe(2);
        m.observe(1);
        assert_eq!(m.predict(1).as_slice()[0].key, 2);
    }

    #[test]
    fn never_predicts_the_key_itself() {
        let mut m = Model::new(small(true)).unwrap();
        for _ in 0..10 {
            m.observe(3);
        }
        assert!(m.predict(3).is_empty());
    }

    #[test]
    fn order2_decides_what_order1_cannot() {
        // After 5, key 1 is followed by 2; after 6, key 1 is followed by 3.
        let mut m = Model::new(small(true)).unwrap();
        for _ in 0..5 {
            for k in [5, 1, 2, 6, 1, 3] {
                m.observe(k);
            }
        }
        m.observe(5);
        m.observe(1);
        let p = m.predict(1);
        assert_eq!(p.len(), 1);
        assert_eq!(p.as_slice()[0].key, 2);
        let mut only1 = Model::new(small(false)).unwrap();
        for _ in 0..5 {
            for k in [5, 1, 2, 6, 1, 3] {
                only1.observe(k);
            }
        }
        only1.observe(1);
        assert!(only1.predict(1).is_empty());
    }

    #[test]
    fn frozen_model_does_not_change_counts() {
        let mut m = Model::new(small(true)).unwrap();
        for k in [1, 2, 1, 2, 1, 2] {
            m.observe(k);
        }
        let before = (m.order1.clone(), m.order2.clone());
        m.set_learning(false);
        for k in [1, 3, 1, 3, 7, 8] {
            m.observe(k);
        }
        assert_eq!((m.order1.clone(), m.order2.clone()), before);
    }

    #[test]
    fn memory_stays_in_budget_with_a_million_distinct_keys() {
        let config = ModelConfig { memory_bytes: 1 << 20, ..ModelConfig::default() };
        let mut m = Model::new(config).unwrap();
        let start = m.memory_bytes();
        assert!(start <= config.memory_bytes);
        let mut x = 0x1234_5678_u64;
        for i in 0..1_000_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            m.observe(x ^ i);
        }
        assert_eq!(m.memory_bytes(), start);
        assert!(m.memory_bytes() <= config.memory_bytes);
        assert_eq!(m.order1.slots() * crate::table::ENTRY_BYTES, m.order1.memory_bytes() as usize);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        #[test]
        fn same_input_same_model(keys in proptest::collection::vec(0u64..64, 0..400)) {
            let mut a = Model::new(small(true)).unwrap();
            let mut b = Model::new(small(true)).unwrap();
            for &k in &keys { a.observe(k); }
            for &k in &keys { b.observe(k); }
            prop_assert_eq!(a.to_bytes(), b.to_bytes());
        }

        #[test]
        fn adversarial_streams_stay_in_budget(
            keys in proptest::collection::vec(any::<u64>(), 0..2000),
            colliding in proptest::collection::vec(0u64..8, 0..2000),
        ) {
            // Random keys, and keys that are multiples of a large power of two (all
            // landing in few sets under a weak hash).
            let config = ModelConfig { memory_bytes: 8 << 10, ..ModelConfig::default() };
            let mut m = Model::new(config).unwrap();
            let start = m.memory_bytes();
            for (&k, &c) in keys.iter().zip(colliding.iter().chain(std::iter::repeat(&0))) {
                m.observe(k);
                m.observe(c << 40);
                let p = m.predict(k);
                prop_assert!(p.iter().all(|x| x.probability >= config.theta && x.key != k));
            }
            prop_assert_eq!(m.memory_bytes(), start);
            prop_assert!(m.memory_bytes() <= config.memory_bytes);
        }
    }
}
