//! A whole cluster in one process: every node's DPU app on the in-process emulated
//! fabric, every node's host region a real shared-memory file, stepped from one
//! thread (`step`, deterministic on a manual clock: the simulator) or run one thread
//! per node (`run_threads`). Nodes can be crashed (their process state dropped, as a
//! kill -9 would, files left as they are) and restarted from their files, and links
//! cut and healed.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prescient_shim::{Host, HostOptions, RegionConfig};

use super::rendezvous::{LocalBoard, Mailbox};
use crate::cluster::config::ClusterConfig;
use crate::cluster::protocol::node::{Node, NodeSetup, Now};
use crate::fabric::emu::{Clock, EmuNode, ManualClock, ModelConfig, Network};
use crate::stripe::StripeLayout;
use crate::Error;

/// CLOCK_MONOTONIC, the clock hosts read their directory lease against.
#[derive(Debug, Default)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    fn now_ns(&self) -> u64 {
        prescient_shim::sys::monotonic_ns()
    }
}

/// The time source of a cluster: the real clocks, or a manual clock that only moves
/// when told to (wall time then follows it from a fixed base).
#[derive(Clone, Debug)]
pub enum ClusterClock {
    /// CLOCK_MONOTONIC and the system's wall clock.
    Real,
    /// A manual clock; wall microseconds are `base_us + now / 1000`.
    Manual {
        /// The clock.
        clock: Arc<ManualClock>,
        /// Wall time at manual time 0.
        base_us: u64,
    },
}

/// How often the real clock's wall time is read from the system; in between it is
/// the monotonic clock plus the offset last read, so a serving loop reads one clock a
/// round instead of two. Both clocks run at the same rate, so the estimate is off only
/// by what NTP slews or steps in a millisecond, which the HLC tolerates as it does any
/// clock error.
const WALL_RESAMPLE_NS: u64 = 1_000_000;

/// The monotonic time of the last wall-clock read (0: never) and the wall clock's
/// lead over the monotonic clock then, in microseconds. Process-wide: one machine has
/// one pair of clocks, whatever number of nodes it runs.
static WALL_SAMPLED_NS: AtomicU64 = AtomicU64::new(0);
static WALL_LEAD_US: AtomicU64 = AtomicU64::new(0);

/// The wall clock in microseconds since the epoch at monotonic time `mono_ns`.
fn wall_us_at(mono_ns: u64) -> u64 {
    // Acquire: pairs with the Release below, so the lead read after it is at least
    // the one stored with this sample (never the 0 of a process that has none yet).
    let sampled = WALL_SAMPLED_NS.load(Ordering::Acquire);
    if sampled == 0 || mono_ns.wrapping_sub(sampled) >= WALL_RESAMPLE_NS {
        let wall_us =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
        WALL_LEAD_US.store(wall_us.wrapping_sub(mono_ns / 1_000), Ordering::Relaxed);
        WALL_SAMPLED_NS.store(mono_ns.max(1), Ordering::Release);
        return wall_us;
    }
    (mono_ns / 1_000).wrapping_add(WALL_LEAD_US.load(Ordering::Relaxed))
}

impl ClusterClock {
    /// A manual clock starting at `start_ns` (so timers that wait for "some time
    /// since 0" behave like a fresh boot would).
    pub fn manual(start_ns: u64) -> Self {
        let clock = Arc::new(ManualClock::new());
        clock.advance(start_ns);
        Self::Manual { clock, base_us: 1_700_000_000_000_000 }
    }

    /// The clock the emulated fabric runs on.
    pub fn fabric_clock(&self) -> Arc<dyn Clock> {
        match self {
            Self::Real => Arc::new(MonotonicClock),
            Self::Manual { clock, .. } => Arc::clone(clock) as Arc<dyn Clock>,
        }
    }

    /// The time now.
    pub fn now(&self) -> Now {
        match self {
            Self::Real => {
                let mono_ns = prescient_shim::sys::monotonic_ns();
                Now { mono_ns, wall_us: wall_us_at(mono_ns) }
            }
            Self::Manual { clock, base_us } => {
                let ns = clock.now_ns();
                Now { mono_ns: ns, wall_us: base_us + ns / 1_000 }
            }
        }
    }

    /// Moves a manual clock forward (no-op for the real clocks).
    pub fn advance(&self, ns: u64) {
        if let Self::Manual { clock, .. } = self {
            clock.advance(ns);
        }
    }
}

/// The region sizes a host of this cluster needs: buffers that carry the largest
/// value striped in place, one DPU buffer per write in flight.
pub fn region_config_for(config: &ClusterConfig, queue_pairs: u32, directory_slots: u32) -> RegionConfig {
    let (k, m) = (config.k, config.m);
    let frame = config.value_bytes_max + crate::seal::FRAME_OVERHEAD;
    let layout = StripeLayout::new(k, m, frame).expect("the configuration was validated");
    let need = (prescient_shim::config::VALUE_OFFSET + layout.data_len()).max(layout.side_len());
    let buffer_bytes = need.next_multiple_of(4096).max(prescient_shim::config::BUFFER_BYTES_MIN as usize) as u32;
    RegionConfig {
        queue_pairs,
        ring_entries: 256,
        host_buffers: 256 * queue_pairs,
        dpu_buffers: crate::limits::WRITES_MAX + 8,
        buffer_bytes,
        directory_slots,
    }
}

/// A cluster in one process.
pub struct InProcess {
    config: Arc<ClusterConfig>,
    clock: ClusterClock,
    network: Network,
    fabrics: Vec<Option<Arc<EmuNode>>>,
    nodes: Vec<Option<Node<EmuNode>>>,
    mailboxes: Vec<Option<Box<dyn Mailbox>>>,
    hosts: Vec<Arc<Host>>,
    regions: Vec<PathBuf>,
    paused: Vec<bool>,
}

impl std::fmt::Debug for InProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcess").field("nodes", &self.nodes.len()).finish()
    }
}

impl InProcess {
    /// Creates one host region per node (under `region_dir`, with `region`'s sizes)
    /// and starts every node on an emulated network with `model` (placed in the cluster
    /// file's regions when `model` has no topology of its own); node `i` sits at place
    /// `i` of the model, through its restarts.
    pub fn start(
        config: Arc<ClusterConfig>,
        clock: ClusterClock,
        model: ModelConfig,
        region: RegionConfig,
        region_dir: &Path,
    ) -> Result<Self, Error> {
        let n = config.nodes.len();
        // The cluster file's regions, unless the caller's model places the nodes itself.
        let model = ModelConfig { topology: model.topology.or_else(|| config.network.topology.clone()), ..model };
        let network = Network::new(model, clock.fabric_clock()).map_err(Error::Fabric)?;
        std::fs::create_dir_all(region_dir).map_err(|source| Error::Io {
            what: "create the region folder",
            path: region_dir.into(),
            source,
        })?;
        let mut hosts = Vec::with_capacity(n);
        let mut regions = Vec::with_capacity(n);
        for id in 0..n {
            let path = region_dir.join(format!("region-{id}"));
            let _ = std::fs::remove_file(&path);
            // The hosts here are this process: a DPU timeout of an hour, so a slow
            // simulated clock never makes a host give up on its DPU app.
            let options = HostOptions { pin: false, dpu_timeout: Duration::from_secs(3600) };
            let host = Host::create(&path, region, options)
                .map_err(|e| Error::Region { path: path.clone(), why: e.to_string() })?;
            hosts.push(host);
            regions.push(path);
        }
        // Hellos cross the emulated network's cuts no more than its packets do.
        let net = network.clone();
        let reachable = Arc::new(move |a: u8, b: u8| net.reachable(u32::from(a), u32::from(b)));
        let mailboxes =
            LocalBoard::with_links(n, reachable).into_iter().map(|m| Some(Box::new(m) as Box<dyn Mailbox>)).collect();
        let mut cluster = Self {
            config,
            clock,
            network,
            fabrics: (0..n).map(|_| None).collect(),
            nodes: (0..n).map(|_| None).collect(),
            mailboxes,
            hosts,
            regions,
            paused: vec![false; n],
        };
        for id in 0..n as u8 {
            cluster.restart(id)?;
        }
        Ok(cluster)
    }

    /// The configuration.
    pub fn config(&self) -> &Arc<ClusterConfig> {
        &self.config
    }

    /// Nodes in the cluster.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the cluster has no node (never: a cluster has at least two).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The clock.
    pub fn clock(&self) -> &ClusterClock {
        &self.clock
    }

    /// The time now.
    pub fn now(&self) -> Now {
        self.clock.now()
    }

    /// Node `id`'s host (the KV store's handle on its region).
    pub fn host(&self, id: u8) -> &Arc<Host> {
        &self.hosts[id as usize]
    }

    /// Node `id`, if it is running.
    pub fn node(&self, id: u8) -> Option<&Node<EmuNode>> {
        self.nodes[id as usize].as_ref()
    }

    /// Whether node `id` is running.
    pub fn is_up(&self, id: u8) -> bool {
        self.nodes[id as usize].is_some()
    }

    /// Polls every running node once at the current time; true if any did work.
    pub fn step(&mut self) -> bool {
        let now = self.clock.now();
        let mut busy = false;
        for (node, paused) in self.nodes.iter_mut().zip(&self.paused) {
            if let (Some(node), false) = (node, paused) {
                busy |= node.poll(now);
            }
        }
        // Deliveries due by now happen even if no requester polled.
        self.network.progress();
        busy
    }

    /// Stops (or resumes) polling node `id`: a stalled DPU app, alive but doing
    /// nothing (its NIC still answers one-sided operations).
    pub fn pause(&mut self, id: u8, paused: bool) {
        self.paused[id as usize] = paused;
    }

    /// Kills node `id` as a crash would: its fabric node stops answering, its process
    /// state is dropped without any cleanup, its files stay as they are.
    pub fn crash(&mut self, id: u8) {
        if let Some(fabric) = self.fabrics[id as usize].take() {
            fabric.kill();
        }
        if let Some(node) = self.nodes[id as usize].take() {
            self.mailboxes[id as usize] = Some(node.into_mailbox());
        }
    }

    /// Kills node `id` as a power loss would, as far as the sequencer's vote goes: a
    /// crash ([`InProcess::crash`]), and its control block keeps only the leader word
    /// the node persisted with fsync (a claimant's CAS that landed after is gone, as
    /// the page cache is). Every other file stays as it is.
    pub fn lose_power(&mut self, id: u8) -> Result<(), Error> {
        self.crash(id);
        let dir = &self.config.node(u32::from(id)).map_err(Error::Config)?.data_dir;
        let persisted = crate::cluster::hlc::HlcFloor::open(&dir.join("leader-word")).map_err(Error::Hlc)?.floor();
        crate::cluster::format::control::keep_persisted_leader(&dir.join("control.prctl"), persisted)
            .map_err(|source| Error::Io { what: "rewrite the leader word in", path: dir.join("control.prctl"), source })
    }

    /// Starts node `id` (again) from its files, on a fresh fabric node.
    pub fn restart(&mut self, id: u8) -> Result<(), Error> {
        assert!(self.nodes[id as usize].is_none(), "node {id} is running");
        // At the node's place: its region and switch port survive its restarts.
        let fabric = Arc::new(self.network.node_at(u32::from(id)).map_err(Error::Fabric)?);
        let mailbox = self.mailboxes[id as usize].take().expect("a parked mailbox");
        let setup = NodeSetup {
            config: Arc::clone(&self.config),
            id,
            fabric: Arc::clone(&fabric),
            region: self.regions[id as usize].clone(),
            pin: false,
            host_timeout: Duration::from_secs(3600),
            mailbox,
            now: self.clock.now(),
        };
        let node = Node::start(setup)?;
        self.fabrics[id as usize] = Some(fabric);
        self.nodes[id as usize] = Some(node);
        Ok(())
    }

    /// Cuts the link between nodes `a` and `b` (their fabric and the hellos between
    /// them), through their restarts, until
    /// [`InProcess::heal`] (the model cuts places, and node `i` sits at place `i`).
    pub fn partition(&self, a: u8, b: u8) {
        self.network.model().partition(u32::from(a), u32::from(b));
    }

    /// Restores the link between `a` and `b`.
    pub fn heal(&self, a: u8, b: u8) {
        self.network.model().heal(u32::from(a), u32::from(b));
    }

    /// Steps (advancing a manual clock by `tick_ns` each time) until `done` holds or
    /// `limit_ns` of cluster time passed; true if `done` held.
    pub fn run_until(&mut self, tick_ns: u64, limit_ns: u64, mut done: impl FnMut(&mut Self) -> bool) -> bool {
        let start = self.now().mono_ns;
        loop {
            if done(self) {
                return true;
            }
            if self.now().mono_ns >= start + limit_ns {
                return false;
            }
            let busy = self.step();
            match self.clock {
                ClusterClock::Manual { .. } => self.clock.advance(tick_ns),
                ClusterClock::Real if !busy => std::thread::yield_now(),
                ClusterClock::Real => {}
            }
        }
    }

    /// Runs every node on its own thread until `stop` is set, then hands the nodes back.
    pub fn run_threads(&mut self, stop: &AtomicBool) {
        let clock = self.clock.clone();
        std::thread::scope(|scope| {
            for node in self.nodes.iter_mut().flatten() {
                let clock = clock.clone();
                scope.spawn(move || {
                    let mut idle = 0u32;
                    while !stop.load(Ordering::Relaxed) {
                        if node.poll(clock.now()) {
                            idle = 0;
                        } else {
                            idle += 1;
                            if idle > 64 {
                                std::thread::sleep(Duration::from_micros(50));
                            } else {
                                std::hint::spin_loop();
                            }
                        }
                    }
                });
            }
        });
    }

    /// The emulated network (its model's ports, partitions).
    pub fn network(&self) -> &Network {
        &self.network
    }

    /// Every running node.
    pub fn nodes(&self) -> impl Iterator<Item = &Node<EmuNode>> {
        self.nodes.iter().flatten()
    }

    /// The region file of node `id`.
    pub fn region_path(&self, id: u8) -> &Path {
        &self.regions[id as usize]
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        for id in 0..self.nodes.len() {
            if let Some(node) = self.nodes[id].take() {
                node.detach();
            }
        }
        for path in &self.regions {
            let _ = std::fs::remove_file(path);
        }
    }
}
