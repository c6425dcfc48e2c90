//! The seeded network model: per-attempt latency, loss and partitions.
//!
//! Every decision is a pure function of the seed, the link (source and destination queue
//! pair numbers, which follow from creation order), the packet sequence number, the
//! attempt and the clock, never of thread timing: the same seed and the same program
//! replay the same delays, losses and failures.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::fabric::{FabricError, Result};
use crate::limits::PARTITION_WINDOWS_MAX;

/// A period during which two nodes cannot reach each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionWindow {
    /// One node id.
    pub a: u32,
    /// The other node id.
    pub b: u32,
    /// Start, clock nanoseconds.
    pub from_ns: u64,
    /// End (exclusive), clock nanoseconds.
    pub until_ns: u64,
}

/// The model's parameters.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ModelConfig {
    /// Seed of every random decision.
    pub seed: u64,
    /// Fixed one-way latency, nanoseconds.
    pub latency_ns: u64,
    /// Uniform extra one-way latency in `0..jitter_ns`.
    pub jitter_ns: u64,
    /// Probability that one transmission attempt is lost, parts per million.
    pub loss_ppm: u32,
    /// Scheduled partitions.
    pub partitions: Vec<PartitionWindow>,
}

impl ModelConfig {
    /// No latency, no loss, no partitions: the fastest emulation.
    pub fn ideal() -> Self {
        Self::default()
    }

    /// Adds `count` partition windows of `length_ns` between random pairs of the nodes
    /// `0..nodes`, starting at random times in `0..horizon_ns`, all drawn from the seed.
    pub fn with_random_partitions(mut self, nodes: u32, count: usize, horizon_ns: u64, length_ns: u64) -> Self {
        for i in 0..count as u64 {
            let r = mix(self.seed ^ 0x5041_5254 ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let a = (r % u64::from(nodes.max(1))) as u32;
            let b = ((r >> 20) % u64::from(nodes.max(1))) as u32;
            let from_ns = (r >> 40) % horizon_ns.max(1);
            self.partitions.push(PartitionWindow { a, b, from_ns, until_ns: from_ns + length_ns });
        }
        self
    }

    /// Checks the configuration against `crate::limits`.
    pub fn validate(&self) -> Result<()> {
        if self.partitions.len() > PARTITION_WINDOWS_MAX {
            return Err(FabricError::Limit { what: "partition windows", limit: PARTITION_WINDOWS_MAX });
        }
        if self.loss_ppm > 1_000_000 {
            return Err(FabricError::InvalidRequest("loss_ppm above 1000000"));
        }
        Ok(())
    }
}

/// What happened to one message after all its transport retries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Delivered after `delay_ns` (one way, retransmissions included).
    Delivered {
        /// One-way delay.
        delay_ns: u64,
    },
    /// Every attempt was lost; the requester learns at `after_ns` from now.
    Lost {
        /// Time until the retry budget runs out.
        after_ns: u64,
    },
}

/// Identifies one message for the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message {
    /// Source node id.
    pub src_node: u32,
    /// Destination node id.
    pub dst_node: u32,
    /// Source queue pair number.
    pub src_qpn: u32,
    /// Packet sequence number.
    pub psn: u32,
}

/// The model, with runtime partitions that tests can set and heal.
#[derive(Debug)]
pub struct Model {
    config: ModelConfig,
    ideal: bool,
    cut: Mutex<Vec<(u32, u32)>>,
    any_cut: AtomicBool,
}

impl Model {
    /// A model from a validated configuration.
    pub fn new(config: ModelConfig) -> Result<Self> {
        config.validate()?;
        let ideal =
            config.latency_ns == 0 && config.jitter_ns == 0 && config.loss_ppm == 0 && config.partitions.is_empty();
        Ok(Self { config, ideal, cut: Mutex::new(Vec::new()), any_cut: AtomicBool::new(false) })
    }

    /// The configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// True when decisions depend on the clock (latency, loss, scheduled partitions).
    pub fn needs_clock(&self) -> bool {
        !self.ideal
    }

    /// Cuts the link between nodes `a` and `b` until [`Model::heal`].
    pub fn partition(&self, a: u32, b: u32) {
        let mut cut = self.cut.lock().expect("model lock");
        cut.push((a.min(b), a.max(b)));
        self.any_cut.store(true, Ordering::Release);
    }

    /// Restores the link between `a` and `b`.
    pub fn heal(&self, a: u32, b: u32) {
        let mut cut = self.cut.lock().expect("model lock");
        cut.retain(|&l| l != (a.min(b), a.max(b)));
        self.any_cut.store(!cut.is_empty(), Ordering::Release);
    }

    fn partitioned(&self, a: u32, b: u32, at_ns: u64) -> bool {
        let key = (a.min(b), a.max(b));
        if self.any_cut.load(Ordering::Acquire) && self.cut.lock().expect("model lock").contains(&key) {
            return true;
        }
        self.config
            .partitions
            .iter()
            .any(|w| (w.a.min(w.b), w.a.max(w.b)) == key && w.from_ns <= at_ns && at_ns < w.until_ns)
    }

    /// The fate of `msg` sent at `now_ns` with `retries` retransmissions of `timeout_ns`.
    pub fn transmit(&self, msg: Message, now_ns: u64, retries: u8, timeout_ns: u64) -> Fate {
        if self.ideal && !self.any_cut.load(Ordering::Acquire) {
            return Fate::Delivered { delay_ns: 0 };
        }
        let c = &self.config;
        for attempt in 0..=u64::from(retries) {
            let at_ns = now_ns + attempt * timeout_ns;
            let r = mix(c.seed
                ^ u64::from(msg.src_qpn) << 40
                ^ u64::from(msg.dst_node) << 20
                ^ u64::from(msg.psn)
                ^ attempt << 60);
            let lost = self.partitioned(msg.src_node, msg.dst_node, at_ns) || (r % 1_000_000) < u64::from(c.loss_ppm);
            if !lost {
                let jitter = if c.jitter_ns == 0 { 0 } else { (r >> 20) % c.jitter_ns };
                return Fate::Delivered { delay_ns: attempt * timeout_ns + c.latency_ns + jitter };
            }
        }
        Fate::Lost { after_ns: (u64::from(retries) + 1) * timeout_ns }
    }
}

/// SplitMix64 finaliser: a well-mixed 64-bit hash.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(psn: u32) -> Message {
        Message { src_node: 0, dst_node: 1, src_qpn: 3, psn }
    }

    #[test]
    fn same_seed_same_fates_different_seed_different_fates() {
        let cfg = |seed| ModelConfig { seed, latency_ns: 1_000, jitter_ns: 500, loss_ppm: 200_000, partitions: vec![] };
        let a = Model::new(cfg(7)).unwrap();
        let b = Model::new(cfg(7)).unwrap();
        let c = Model::new(cfg(8)).unwrap();
        let fa: Vec<_> = (0..200).map(|p| a.transmit(msg(p), 0, 3, 10_000)).collect();
        let fb: Vec<_> = (0..200).map(|p| b.transmit(msg(p), 0, 3, 10_000)).collect();
        let fc: Vec<_> = (0..200).map(|p| c.transmit(msg(p), 0, 3, 10_000)).collect();
        assert_eq!(fa, fb);
        assert_ne!(fa, fc);
        assert!(
            fa.iter().any(|f| matches!(f, Fate::Delivered { delay_ns } if *delay_ns >= 10_000)),
            "some retransmissions"
        );
    }

    #[test]
    fn partitions_lose_every_attempt_and_heal() {
        let m = Model::new(ModelConfig {
            partitions: vec![PartitionWindow { a: 1, b: 0, from_ns: 100, until_ns: 200 }],
            ..ModelConfig::ideal()
        })
        .unwrap();
        assert_eq!(m.transmit(msg(0), 0, 1, 10), Fate::Delivered { delay_ns: 0 });
        assert_eq!(m.transmit(msg(0), 150, 1, 10), Fate::Lost { after_ns: 20 });
        assert_eq!(
            m.transmit(msg(0), 190, 1, 10),
            Fate::Delivered { delay_ns: 10 },
            "the retry lands after the window"
        );
        m.partition(0, 1);
        assert!(matches!(m.transmit(msg(1), 500, 2, 10), Fate::Lost { .. }));
        m.heal(1, 0);
        assert!(matches!(m.transmit(msg(1), 500, 2, 10), Fate::Delivered { .. }));
    }

    #[test]
    fn random_partitions_come_from_the_seed() {
        let a = ModelConfig { seed: 1, ..ModelConfig::ideal() }.with_random_partitions(4, 5, 1_000_000, 1_000);
        let b = ModelConfig { seed: 1, ..ModelConfig::ideal() }.with_random_partitions(4, 5, 1_000_000, 1_000);
        assert_eq!(a, b);
        assert_eq!(a.partitions.len(), 5);
        assert!(ModelConfig { loss_ppm: 2_000_000, ..ModelConfig::ideal() }.validate().is_err());
    }
}
