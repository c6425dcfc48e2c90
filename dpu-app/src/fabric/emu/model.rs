//! The seeded network model: per-attempt latency, loss and partitions; optionally
//! regions with a latency matrix ([`Topology`]) and switch ports with a line rate and a
//! bounded buffer ([`PortConfig`]).
//!
//! Every delay, loss and failure is a pure function of the seed, the link (source and
//! destination queue pair numbers, which follow from creation order), the packet
//! sequence number, the attempt and the clock, never of thread timing: the same seed
//! and the same program replay the same delays, losses and failures. Queueing at a port
//! depends in addition on the order the messages toward it are posted in, which one
//! thread stepping a manual clock (the simulator, the incast test) fixes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::port::{Port, PortConfig, PortStats};
use super::topology::{PathDelay, Topology, HOPS_INSIDE_REGION};
use crate::fabric::{FabricError, PathSignal, Result};
use crate::limits::{NETWORK_NODES_MAX, PARTITION_WINDOWS_MAX};

/// Bytes a message carries on the wire besides its payload (RoCEv2 headers, CRC):
/// what an acknowledgement or an atomic's request costs a port.
pub const WIRE_HEADER_BYTES: u64 = 64;

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
    /// Regions and the delay between them; a node it places takes its path's delay
    /// and jitter instead of `latency_ns` and `jitter_ns`.
    pub topology: Option<Topology>,
    /// Every switch port toward a node (node ids below [`NETWORK_NODES_MAX`]): requests
    /// queue there; their responses take the line rate's serialisation.
    pub ports: Option<PortConfig>,
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
        if let Some(ports) = &self.ports {
            ports.validate()?;
        }
        Ok(())
    }
}

/// What happened to one message after all its transport retries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Delivered after `delay_ns` (one way, retransmissions, queueing and pauses
    /// included); its response takes `back_ns`.
    Delivered {
        /// One-way delay.
        delay_ns: u64,
        /// The response's one-way delay.
        back_ns: u64,
        /// What the sender learns of the trip.
        signal: PathSignal,
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
    /// Bytes of the request on the wire (payload and [`WIRE_HEADER_BYTES`]).
    pub bytes: u64,
    /// Bytes of its response on the wire.
    pub response_bytes: u64,
}

/// The model, with runtime partitions that tests can set and heal.
#[derive(Debug)]
pub struct Model {
    config: ModelConfig,
    ideal: bool,
    cut: Mutex<Vec<(u32, u32)>>,
    any_cut: AtomicBool,
    /// One egress port per node id, allocated at start when ports are modelled.
    ports: Mutex<Vec<Port>>,
}

impl Model {
    /// A model from a validated configuration.
    pub fn new(config: ModelConfig) -> Result<Self> {
        config.validate()?;
        let ideal = config.latency_ns == 0
            && config.jitter_ns == 0
            && config.loss_ppm == 0
            && config.partitions.is_empty()
            && config.topology.is_none()
            && config.ports.is_none();
        let ports = if config.ports.is_some() { vec![Port::default(); NETWORK_NODES_MAX] } else { Vec::new() };
        Ok(Self {
            config,
            ideal,
            cut: Mutex::new(Vec::new()),
            any_cut: AtomicBool::new(false),
            ports: Mutex::new(ports),
        })
    }

    /// What the switch port toward `node` has seen; `None` without ports or for a node
    /// past [`NETWORK_NODES_MAX`].
    pub fn port_stats(&self, node: u32) -> Option<PortStats> {
        self.ports.lock().expect("model lock").get(node as usize).map(Port::stats)
    }

    /// Switch hops between two nodes.
    pub fn hops(&self, src: u32, dst: u32) -> u8 {
        self.config.topology.as_ref().map_or(HOPS_INSIDE_REGION, |t| t.hops(src, dst))
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

    /// Whether the link between `a` and `b` is cut at `at_ns` (by [`Model::partition`]
    /// or a scheduled window).
    pub fn partitioned(&self, a: u32, b: u32, at_ns: u64) -> bool {
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
            return Fate::Delivered { delay_ns: 0, back_ns: 0, signal: PathSignal::default() };
        }
        let c = &self.config;
        let path = c.topology.as_ref().and_then(|t| t.path(msg.src_node, msg.dst_node));
        let legacy = path.is_none() && c.ports.is_none();
        let path = path.unwrap_or(PathDelay { one_way_ns: c.latency_ns, jitter_ns: c.jitter_ns });
        for attempt in 0..=u64::from(retries) {
            let at_ns = now_ns + attempt * timeout_ns;
            let r = mix(c.seed
                ^ u64::from(msg.src_qpn) << 40
                ^ u64::from(msg.dst_node) << 20
                ^ u64::from(msg.psn)
                ^ attempt << 60);
            let lost = self.partitioned(msg.src_node, msg.dst_node, at_ns) || (r % 1_000_000) < u64::from(c.loss_ppm);
            if !lost {
                let draw = |bits: u32| if path.jitter_ns == 0 { 0 } else { (r >> bits) % path.jitter_ns };
                let retry_ns = attempt * timeout_ns;
                let there_ns = path.one_way_ns + draw(20);
                if legacy {
                    // The single-latency model: the response takes the same delay.
                    let delay_ns = retry_ns + there_ns;
                    return Fate::Delivered { delay_ns, back_ns: delay_ns, signal: PathSignal::default() };
                }
                return self.trip(msg, now_ns, retry_ns, there_ns, path.one_way_ns + draw(40));
            }
        }
        Fate::Lost { after_ns: (u64::from(retries) + 1) * timeout_ns }
    }
}

impl Model {
    /// A delivered message's trip through the port toward its destination: it reaches
    /// the port after `there_ns` of propagation (and `retry_ns` of lost attempts before
    /// it), and its response takes `back_ns` of propagation plus its serialisation at
    /// the line rate.
    ///
    /// The port takes messages in the order they are posted, so it is asked about each
    /// as arriving after its first attempt's propagation: a retransmission admitted at
    /// its real arrival, milliseconds ahead, would hold the port's schedule there and
    /// queue every message posted after it behind a future. A retransmitted message's
    /// queueing is thus its first attempt's; arrivals out of order by the jitter see at
    /// most the jitter of extra backlog.
    fn trip(&self, msg: Message, now_ns: u64, retry_ns: u64, there_ns: u64, back_ns: u64) -> Fate {
        let hops = self.hops(msg.src_node, msg.dst_node);
        let Some(cfg) = &self.config.ports else {
            let delay_ns = retry_ns + there_ns;
            let signal = PathSignal { rtt_ns: delay_ns + back_ns, hops, ..PathSignal::default() };
            return Fate::Delivered { delay_ns, back_ns, signal };
        };
        let response_ns = cfg.serialise_ns(msg.response_bytes);
        let back_ns = back_ns + response_ns;
        let mut ports = self.ports.lock().expect("model lock");
        let Some(port) = ports.get_mut(msg.dst_node as usize) else {
            let delay_ns = retry_ns + there_ns;
            let signal = PathSignal {
                rtt_ns: delay_ns + back_ns,
                hops,
                serialise_ns: response_ns,
                line_bytes_per_s: cfg.bytes_per_s,
                ..PathSignal::default()
            };
            return Fate::Delivered { delay_ns, back_ns, signal };
        };
        let a = port.admit(cfg, now_ns + there_ns, msg.bytes);
        let delay_ns = retry_ns + a.depart_ns - now_ns;
        let signal = PathSignal {
            rtt_ns: delay_ns + back_ns,
            queue_ns: a.queue_ns + a.paused_ns,
            ecn: a.marked,
            hops,
            serialise_ns: cfg.serialise_ns(msg.bytes) + response_ns,
            line_bytes_per_s: cfg.bytes_per_s,
        };
        Fate::Delivered { delay_ns, back_ns, signal }
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
        Message {
            src_node: 0,
            dst_node: 1,
            src_qpn: 3,
            psn,
            bytes: WIRE_HEADER_BYTES,
            response_bytes: WIRE_HEADER_BYTES,
        }
    }

    #[test]
    fn same_seed_same_fates_different_seed_different_fates() {
        let cfg =
            |seed| ModelConfig { seed, latency_ns: 1_000, jitter_ns: 500, loss_ppm: 200_000, ..ModelConfig::ideal() };
        let a = Model::new(cfg(7)).unwrap();
        let b = Model::new(cfg(7)).unwrap();
        let c = Model::new(cfg(8)).unwrap();
        let fa: Vec<_> = (0..200).map(|p| a.transmit(msg(p), 0, 3, 10_000)).collect();
        let fb: Vec<_> = (0..200).map(|p| b.transmit(msg(p), 0, 3, 10_000)).collect();
        let fc: Vec<_> = (0..200).map(|p| c.transmit(msg(p), 0, 3, 10_000)).collect();
        assert_eq!(fa, fb);
        assert_ne!(fa, fc);
        assert!(
            fa.iter().any(|f| matches!(f, Fate::Delivered { delay_ns, .. } if *delay_ns >= 10_000)),
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
        let delivered = |delay_ns| Fate::Delivered { delay_ns, back_ns: delay_ns, signal: PathSignal::default() };
        assert_eq!(m.transmit(msg(0), 0, 1, 10), delivered(0));
        assert_eq!(m.transmit(msg(0), 150, 1, 10), Fate::Lost { after_ns: 20 });
        assert_eq!(m.transmit(msg(0), 190, 1, 10), delivered(10), "the retry lands after the window");
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

    fn geo() -> Topology {
        let d = |one_way_ns| PathDelay { one_way_ns, jitter_ns: 100 };
        let m = vec![vec![d(500), d(40_000)], vec![d(40_000), d(500)]];
        Topology::new(
            vec!["store".into(), "cache".into()],
            m,
            vec![super::super::RegionId(0); 2].into_iter().chain([super::super::RegionId(1)]).collect(),
        )
        .unwrap()
    }

    fn to(src_node: u32, dst_node: u32, psn: u32, bytes: u64) -> Message {
        Message { src_node, dst_node, src_qpn: src_node, psn, bytes, response_bytes: WIRE_HEADER_BYTES }
    }

    #[test]
    fn regions_set_each_path_s_delay_and_hops() {
        let m = Model::new(ModelConfig { seed: 3, topology: Some(geo()), ..ModelConfig::ideal() }).unwrap();
        assert!(m.needs_clock());
        let Fate::Delivered { delay_ns, back_ns, signal } = m.transmit(to(0, 1, 0, 100), 0, 1, 1_000_000) else {
            panic!("no loss configured")
        };
        assert!((500..600).contains(&delay_ns) && (500..600).contains(&back_ns), "{delay_ns} {back_ns}");
        assert_eq!((signal.rtt_ns, signal.hops), (delay_ns + back_ns, HOPS_INSIDE_REGION));
        let Fate::Delivered { delay_ns, signal, .. } = m.transmit(to(2, 0, 0, 100), 0, 1, 1_000_000) else {
            panic!("no loss configured")
        };
        assert!((40_000..40_100).contains(&delay_ns), "{delay_ns}");
        assert_eq!(signal.hops, super::super::HOPS_BETWEEN_REGIONS);
    }

    /// Four senders each post a 4 KiB message toward node 4 every `gap_ns`; returns the
    /// queueing delay of every message and the port's stats.
    fn incast(seed: u64, gap_ns: u64) -> (Vec<u64>, PortStats) {
        let ports = PortConfig { bytes_per_s: 1_000_000_000, buffer_bytes: 64 << 10, ecn_bytes: 16 << 10 };
        let m = Model::new(ModelConfig {
            seed,
            latency_ns: 1_000,
            jitter_ns: 500,
            ports: Some(ports),
            ..ModelConfig::ideal()
        })
        .unwrap();
        let mut queued = Vec::new();
        for i in 0..200u32 {
            for src in 0..4 {
                let now = u64::from(i) * gap_ns;
                match m.transmit(to(src, 4, i, 4_096 + WIRE_HEADER_BYTES), now, 1, 1_000_000) {
                    Fate::Delivered { signal, .. } => queued.push(signal.queue_ns),
                    Fate::Lost { .. } => panic!("no loss configured"),
                }
            }
        }
        (queued, m.port_stats(4).unwrap())
    }

    #[test]
    fn a_port_under_its_rate_does_not_queue_and_over_it_pauses_its_senders() {
        // 4 x 4 KiB every 32 us is half the port's 1 byte/ns: the burst of each round
        // drains before the next.
        let (q, s) = incast(1, 32_768);
        assert!(q.iter().all(|&ns| ns < 20_000), "{:?}", q.iter().max());
        assert_eq!(s.pauses, 0);
        // Every 8 us is twice the rate: the queue fills to the buffer and stays there.
        let (q, s) = incast(1, 8_192);
        assert!(s.pauses > 0 && s.paused_ns > 0, "{s:?}");
        assert!(s.queue_bytes_max <= 64 << 10, "bounded by the buffer: {s:?}");
        assert!(q.last().unwrap() > &50_000, "the last ones wait for a full buffer");
        assert!(s.marks > 0);
        assert_eq!(incast(1, 8_192), incast(1, 8_192), "the seed replays");
    }

    #[test]
    fn between_processes_ports_are_refused() {
        let ports = PortConfig { bytes_per_s: 1_000_000_000, buffer_bytes: 64 << 10, ecn_bytes: 16 << 10 };
        let model = ModelConfig { ports: Some(ports), ..ModelConfig::ideal() };
        let clock = std::sync::Arc::new(super::super::SystemClock::new());
        let e = super::super::EmuNode::tcp(0, "127.0.0.1:0".parse().unwrap(), model, clock).unwrap_err();
        assert!(e.to_string().contains("ports"), "{e}");
    }
}
