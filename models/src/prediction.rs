//! The result of one prediction: a few successors and their probabilities, held
//! inline so that predicting never allocates.

use crate::config::PREDICTIONS_MAX;

/// One predicted successor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prediction {
    /// The key predicted to be written soon.
    pub key: u64,
    /// The model's estimate of the probability that it is written next.
    pub probability: f32,
}

/// Up to [`PREDICTIONS_MAX`] predictions, distinct keys, in the order found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Predictions {
    items: [Prediction; PREDICTIONS_MAX],
    len: usize,
}

impl Default for Predictions {
    fn default() -> Self {
        Self { items: [Prediction { key: 0, probability: 0.0 }; PREDICTIONS_MAX], len: 0 }
    }
}

impl Predictions {
    /// No predictions.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `key`, or raises its probability if it is already there. Beyond
    /// [`PREDICTIONS_MAX`] distinct keys the least probable one gives way.
    pub fn push(&mut self, key: u64, probability: f32) {
        if let Some(p) = self.items[..self.len].iter_mut().find(|p| p.key == key) {
            p.probability = p.probability.max(probability);
            return;
        }
        if self.len < PREDICTIONS_MAX {
            self.items[self.len] = Prediction { key, probability };
            self.len += 1;
            return;
        }
        let weakest =
            (0..self.len).min_by(|&a, &b| self.items[a].probability.total_cmp(&self.items[b].probability)).unwrap_or(0);
        if self.items[weakest].probability < probability {
            self.items[weakest] = Prediction { key, probability };
        }
    }

    /// Removes every prediction.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// The predictions as a slice.
    pub fn as_slice(&self) -> &[Prediction] {
        &self.items[..self.len]
    }

    /// Iterates over the predictions.
    pub fn iter(&self) -> std::slice::Iter<'_, Prediction> {
        self.as_slice().iter()
    }

    /// Number of predictions.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<'a> IntoIterator for &'a Predictions {
    type Item = &'a Prediction;
    type IntoIter = std::slice::Iter<'a, Prediction>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_keep_the_higher_probability() {
        let mut p = Predictions::new();
        p.push(5, 0.5);
        p.push(5, 0.9);
        p.push(5, 0.7);
        assert_eq!(p.as_slice(), &[Prediction { key: 5, probability: 0.9 }]);
    }

    #[test]
    fn overflow_drops_the_weakest() {
        let mut p = Predictions::new();
        for k in 0..PREDICTIONS_MAX as u64 {
            p.push(k, 0.5 + k as f32 / 100.0);
        }
        p.push(100, 0.99);
        assert_eq!(p.len(), PREDICTIONS_MAX);
        assert!(p.iter().any(|x| x.key == 100));
        assert!(!p.iter().any(|x| x.key == 0));
    }
}
