//! Starting an in-process cluster for a load run: the network models (LAN, WAN) with
//! timings that fit them, the four invalidation policies, the configuration, a
//! throw-away folder for the nodes' files, and waiting until every node is connected
//! and every host holds a directory lease.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cluster::config::{ClusterConfig, Congestion, Invalidation};
use crate::cluster::run::inprocess::{region_config_for, ClusterClock, InProcess};
use crate::fabric::emu::{ModelConfig, PortConfig};
use crate::Error;

/// Queue pairs per host: one for the writer, one for the reader.
pub const QUEUE_PAIRS: u32 = 2;
/// Directory slots per host: the shim's default. Keys that share a slot are
/// invalidated by each other's writes; a larger directory makes that rarer but every
/// whole-directory sweep (a revocation, clearing a dead writer's marks) slower.
pub const DIRECTORY_SLOTS: u32 = 1 << 16;
/// Fewest keys a node's fragment store is sized for (at half load: see
/// [`crate::cluster::protocol::node::store_bytes_for_keys`]).
pub const STORE_KEYS_MIN: usize = 1 << 14;

/// PUTs per second a run is sized for: about what the in-process cluster does on the
/// 2-core machines measured (15-19 K/s). A faster machine writes more keys than its
/// stores were sized for; sized at half load, a store has room for about 1.6 times as
/// many before it refuses a write (at about 80 % of its records in use).
pub const SIZING_PUTS_PER_SECOND: f64 = 15_000.0;

/// The keys to size stores for in a run of `seconds` of load over a stream of
/// `distinct` keys: every key it can write (at most every distinct one), at least
/// [`STORE_KEYS_MIN`]. With 5 nodes and k + m = 5 every node holds a fragment of every
/// key; a node's start allocates its whole store (preallocated file, an index of 64
/// bytes a record), so a run sizes it for what it will write.
pub fn store_keys_for(seconds: f64, distinct: usize) -> usize {
    let reachable = distinct.min((seconds * SIZING_PUTS_PER_SECOND).ceil() as usize);
    reachable.max(STORE_KEYS_MIN)
}

/// Free space kept on `/dev/shm` beyond a run's files before the run goes there: the
/// rest of the machine shares that memory.
const SHM_HEADROOM_BYTES: u64 = 256 << 20;

/// The emulated network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Network {
    /// 5 us one way, 2 us jitter; the cluster file's default timings but a peer is
    /// declared dead after 250 ms of silence, not 50 ms: this emulation steps every node
    /// from one thread, and on a shared machine that thread can be descheduled for
    /// tens of milliseconds, which would make every peer look dead at once.
    Lan,
    /// The LAN model under light load: one PUT in flight per writer, so a PUT's latency
    /// is its round trips and work, not the queue of PUTs ahead of it on the one
    /// stepping thread. Where the policies' latencies are compared.
    LanLight,
    /// 20 ms one way, 1 ms jitter; heartbeat 10 ms, lease 200 ms, dead after 1 s, write
    /// timeout 5 s.
    Wan,
    /// The LAN (its delays, timings and load) with every switch port a bottleneck: a
    /// line rate of [`INCAST_PORT_BYTES_PER_S`] and a buffer of
    /// [`INCAST_PORT_BUFFER_BYTES`]. With RS(3,2) over 5 nodes every node holds a
    /// fragment of every key, so every port is an incast of the four other writers.
    Incast,
    /// Three regions ([`GEO_REGIONS`]): five storage nodes in `store` (0.5 ms one way
    /// inside it), and a cache-only member in each of `cache-a` (40 ms from `store`)
    /// and `cache-b` (90 ms from `store` and from `cache-a`). Only the storage nodes
    /// write, each one PUT every [`GEO_WRITE_INTERVAL_NS`] (an open loop: a far round
    /// trip is 180 ms, so a lease opened at one write has its far marks placed by the
    /// next); every node reads. Heartbeat 20 ms, lease 1 s, dead after 2 s, write
    /// timeout 10 s. Where the predictor's leases pay: a write cannot complete before
    /// every far directory is marked.
    Geo,
}

/// The geo model's regions, in matrix order.
pub const GEO_REGIONS: [&str; 3] = ["store", "cache-a", "cache-b"];
/// The geo model's one-way delays between [`GEO_REGIONS`], microseconds.
pub const GEO_LATENCY_US: [[u64; 3]; 3] = [[500, 40_000, 90_000], [40_000, 500, 90_000], [90_000, 90_000, 500]];
/// The geo model's jitter bounds between [`GEO_REGIONS`], microseconds.
pub const GEO_JITTER_US: [[u64; 3]; 3] = [[50, 1_000, 1_000], [1_000, 50, 1_000], [1_000, 1_000, 50]];
/// Storage nodes of the geo model, all in `store`; node ids after them are its
/// cache-only members, one per cache region.
pub const GEO_STORAGE_NODES: u8 = 5;
/// How often each geo writer submits a PUT: above the farthest round trip (2 x 90 ms
/// plus jitter), so a lease opened at a write can be placed before the next.
pub const GEO_WRITE_INTERVAL_NS: u64 = 200_000_000;

/// The line rate of every switch port on [`Network::Incast`], bytes per second (128
/// Mbit/s): about half of what the writers offer a port with no bottleneck on the
/// 2-core machine measured (`bench cluster --networks incast --congestion none --quick`
/// with the ports at 1 GB/s: 33-39 MB/s of wire bytes a port at 20-27 K PUTs/s, the
/// machine shared with another build), so each port is an incast at about 2x its rate.
/// Almost all of it is fragment WRITEs: the readers' requests are small (their GETs'
/// store-set READs come back as responses, which take the line rate's serialisation
/// but no room in the port's queue), so the readers stay on, as on the LAN, and the
/// cache figures stay comparable. A faster machine steps the cluster faster and
/// oversubscribes the ports more; the figure is fixed so that runs compare.
pub const INCAST_PORT_BYTES_PER_S: u64 = 16_000_000;

/// The buffer of every switch port on [`Network::Incast`]: 24 fragments of a 4 KiB
/// value's RS(3,2) stripe, less than the 64 that four writers of 16 PUTs each can have
/// in flight toward one port, so that without congestion control the port pauses
/// senders (PFC) instead of only queueing.
pub const INCAST_PORT_BUFFER_BYTES: u64 = 32 << 10;

impl Network {
    /// Every model, in report order.
    pub const ALL: [Network; 5] = [Network::LanLight, Network::Lan, Network::Wan, Network::Incast, Network::Geo];

    /// The name in options and reports.
    pub const fn name(self) -> &'static str {
        match self {
            Network::Lan => "LAN",
            Network::LanLight => "LAN-1",
            Network::Wan => "WAN",
            Network::Geo => "geo",
            Network::Incast => "incast",
        }
    }

    /// The congestion control a bench cell runs with unless told: none on the models
    /// without a bottleneck (Swift would have nothing to do), both on the incast and
    /// the geo model (its far paths are where a window matters).
    pub const fn default_congestion(self) -> &'static [Congestion] {
        match self {
            Network::Incast | Network::Geo => &[Congestion::None, Congestion::Swift],
            _ => &[Congestion::None],
        }
    }

    /// Nodes of a cluster on this model: 5, or on the geo model its 5 storage nodes and
    /// one cache-only member per cache region.
    pub const fn nodes(self) -> u8 {
        match self {
            Network::Geo => GEO_STORAGE_NODES + GEO_REGIONS.len() as u8 - 1,
            _ => 5,
        }
    }

    /// The nodes that write (a bit mask of node ids): every node, or on the geo model
    /// the storage nodes only.
    pub const fn writer_nodes(self) -> u32 {
        match self {
            Network::Geo => (1 << GEO_STORAGE_NODES) - 1,
            _ => u32::MAX,
        }
    }

    /// Nanoseconds between one writer's PUTs (0: as fast as its depth allows).
    pub const fn write_interval_ns(self) -> u64 {
        match self {
            Network::Geo => GEO_WRITE_INTERVAL_NS,
            _ => 0,
        }
    }

    /// The regions of the nodes and the delays between them (`None`: one latency for
    /// every link, [`Self::model`]'s).
    pub fn network_config(self, seed: u64) -> crate::cluster::config::NetworkConfig {
        use crate::cluster::config::{Congestion, NetworkConfig};
        use crate::fabric::emu::{PathDelay, RegionId, Topology};
        let Network::Geo = self else { return NetworkConfig { seed, ..NetworkConfig::default() } };
        let delay = (0..GEO_REGIONS.len())
            .map(|a| {
                (0..GEO_REGIONS.len())
                    .map(|b| PathDelay {
                        one_way_ns: GEO_LATENCY_US[a][b] * 1_000,
                        jitter_ns: GEO_JITTER_US[a][b] * 1_000,
                    })
                    .collect()
            })
            .collect();
        let regions = (0..self.nodes()).map(|i| RegionId(i.saturating_sub(GEO_STORAGE_NODES - 1))).collect();
        let topology = Topology::new(GEO_REGIONS.iter().map(|r| r.to_string()).collect(), delay, regions)
            .expect("the geo model's constants are a valid topology (a unit test builds it)");
        NetworkConfig { topology: Some(topology), congestion: Congestion::None, seed }
    }

    /// Whether this is the LAN latency model (under either load).
    pub const fn is_lan(self) -> bool {
        matches!(self, Network::Lan | Network::LanLight)
    }

    /// The model named `name` (`lan-1`, `lan`, `wan` or `incast`, any case).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|n| n.name().eq_ignore_ascii_case(name.trim()))
    }

    /// A comma-separated list of models (the `--networks` option).
    pub fn parse_list(text: &str) -> Result<Vec<Self>, String> {
        text.split(',')
            .map(|name| {
                Self::parse(name).ok_or_else(|| {
                    format!(
                        "--networks: unknown network model {name:?}; use lan-1, lan, wan, incast or geo (comma-separated)"
                    )
                })
            })
            .collect()
    }

    /// The fabric model.
    pub fn model(self, seed: u64) -> ModelConfig {
        let (latency_ns, jitter_ns) = match self {
            Network::Lan | Network::LanLight | Network::Incast => (5_000, 2_000),
            Network::Wan => (20_000_000, 1_000_000),
            // Each node's delays are its regions' (`network_config`).
            Network::Geo => (0, 0),
        };
        let ports = (self == Network::Incast).then_some(PortConfig {
            bytes_per_s: INCAST_PORT_BYTES_PER_S,
            buffer_bytes: INCAST_PORT_BUFFER_BYTES,
            ecn_bytes: INCAST_PORT_BUFFER_BYTES / 4,
        });
        ModelConfig { seed, latency_ns, jitter_ns, ports, ..ModelConfig::ideal() }
    }

    /// (heartbeat, lease, dead after, write timeout) in microseconds.
    pub const fn timings_us(self) -> (u64, u64, u64, u64) {
        match self {
            Network::Lan | Network::LanLight | Network::Incast => (1_000, 20_000, 250_000, 2_000_000),
            Network::Wan => (10_000, 200_000, 1_000_000, 5_000_000),
            Network::Geo => (20_000, 1_000_000, 2_000_000, 10_000_000),
        }
    }

    /// PUTs each writer keeps in flight.
    pub const fn writer_depth(self) -> u32 {
        match self {
            Network::Lan | Network::Incast => 16,
            Network::LanLight => 1,
            Network::Wan => 64,
            // Open loop: a far round trip (180 ms) is below the write interval, so one
            // or two in flight; the rest is room for a slow moment.
            Network::Geo => 8,
        }
    }

    /// Default measured seconds per benchmark cell.
    pub const fn cell_seconds(self) -> f64 {
        match self {
            Network::Lan | Network::LanLight | Network::Incast => 3.0,
            Network::Wan => 8.0,
            // 5 writers at 5 PUTs/s: 500 PUTs a cell.
            Network::Geo => 20.0,
        }
    }

    /// Seconds of load before measuring (caches fill, leases settle, the predictor
    /// sees the stream).
    pub const fn warmup_seconds(self) -> f64 {
        match self {
            Network::Lan | Network::LanLight | Network::Incast => 0.5,
            Network::Wan => 1.5,
            Network::Geo => 3.0,
        }
    }

    /// How long a reader waits for a Pending slot before asking the DPU app.
    pub const fn fresh_wait_ns(self) -> u64 {
        match self {
            Network::Lan | Network::LanLight | Network::Incast => 1_000_000,
            Network::Wan => 200_000_000,
            Network::Geo => 400_000_000,
        }
    }

    /// After how long a watched write that is still not invalidated counts as never.
    pub const fn watch_timeout_ns(self) -> u64 {
        match self {
            Network::Lan | Network::LanLight | Network::Incast => 20_000_000,
            Network::Wan => 1_000_000_000,
            Network::Geo => 2_000_000_000,
        }
    }

    /// Longest wait for the nodes to connect and grant leases.
    const fn ready_timeout(self) -> Duration {
        match self {
            Network::Lan | Network::LanLight | Network::Incast => Duration::from_secs(20),
            Network::Wan | Network::Geo => Duration::from_secs(60),
        }
    }
}

/// How writes invalidate the readers' caches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// No invalidation at all: the reference (`allow_unsafe_no_invalidation`).
    None,
    /// Invalidate once the write has committed.
    AfterCommit,
    /// Pending marks in the replication round trip.
    Speculative,
    /// Speculative, plus predictor leases.
    SpeculativePredictive,
}

impl Policy {
    /// All four, in report order.
    pub const ALL: [Policy; 4] =
        [Policy::None, Policy::AfterCommit, Policy::Speculative, Policy::SpeculativePredictive];

    /// The name in options and reports.
    pub const fn name(self) -> &'static str {
        match self {
            Policy::None => "none",
            Policy::AfterCommit => "after-commit",
            Policy::Speculative => "speculative",
            Policy::SpeculativePredictive => "speculative+predictive",
        }
    }

    /// The policy named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name.trim())
    }

    /// A comma-separated list of policies (the `--policies` option).
    pub fn parse_list(text: &str) -> Result<Vec<Self>, String> {
        text.split(',')
            .map(|name| {
                Self::parse(name).ok_or_else(|| {
                    format!("--policies: unknown policy {name:?}; use none, after-commit, speculative, speculative+predictive")
                })
            })
            .collect()
    }

    /// The configuration's invalidation mode.
    pub const fn invalidation(self) -> Invalidation {
        match self {
            Policy::None => Invalidation::None,
            Policy::AfterCommit => Invalidation::AfterCommit,
            Policy::Speculative | Policy::SpeculativePredictive => Invalidation::Speculative,
        }
    }

    /// Whether predictor leases are on.
    pub const fn predictive(self) -> bool {
        matches!(self, Policy::SpeculativePredictive)
    }
}

/// What cluster to start.
#[derive(Clone, Debug)]
pub struct ClusterSpec {
    /// Nodes.
    pub nodes: u8,
    /// Data fragments.
    pub k: u8,
    /// Parity fragments.
    pub m: u8,
    /// The network model.
    pub network: Network,
    /// The invalidation policy.
    pub policy: Policy,
    /// The predictor model file for the predictive policy (None: online learning).
    pub model_file: Option<PathBuf>,
    /// Largest value, bytes.
    pub value_bytes: usize,
    /// The fabric model's seed.
    pub seed: u64,
    /// Congestion control on every node.
    pub congestion: Congestion,
    /// Keys each node's store is sized for ([`store_keys_for`]), at half load.
    pub store_keys: usize,
}

impl ClusterSpec {
    /// The commit quorum: k + m - 1 (a write survives one slow holder).
    pub fn quorum(&self) -> usize {
        usize::from(self.k) + usize::from(self.m) - 1
    }

    /// The cluster configuration, with the nodes' files under `dir`.
    pub fn config(&self, dir: &Path) -> Result<ClusterConfig, Error> {
        let c = self.config_unchecked(dir);
        c.validate()?;
        Ok(c)
    }

    /// The configuration before it is checked (its folders need not exist yet).
    fn config_unchecked(&self, dir: &Path) -> ClusterConfig {
        let mut c = ClusterConfig::in_process(self.nodes.into(), self.k.into(), self.m.into(), dir);
        c.quorum = self.quorum().max(usize::from(self.k)).max(usize::from(self.m) + 1);
        c.key_dir = dir.join("keys");
        c.value_bytes_max = self.value_bytes;
        c.store_bytes = crate::cluster::protocol::node::store_bytes_for_keys(&c, self.store_keys as u64)
            .unwrap_or(crate::limits::STORE_BYTES_LIMIT);
        c.invalidation = self.policy.invalidation();
        c.predictive = self.policy.predictive();
        c.allow_unsafe_no_invalidation = self.policy == Policy::None;
        c.model = if self.policy.predictive() { self.model_file.clone() } else { None };
        c.network = self.network.network_config(self.seed);
        if self.network == Network::Geo {
            for node in c.nodes.iter_mut().skip(GEO_STORAGE_NODES.into()) {
                node.role = crate::cluster::config::Role::Cache;
            }
        }
        c.network.congestion = self.congestion;
        let (heartbeat_us, lease_us, dead_after_us, write_timeout_us) = self.network.timings_us();
        (c.heartbeat_us, c.lease_us, c.dead_after_us, c.write_timeout_us) =
            (heartbeat_us, lease_us, dead_after_us, write_timeout_us);
        c
    }

    /// Bytes of the files a run of this cluster creates: every node's store, logs and
    /// outcome table, and every host's shared region.
    pub fn files_bytes(&self) -> Result<u64, Error> {
        self.files_bytes_ordered(crate::cluster::config::Ordering::Hlc)
    }

    /// [`Self::files_bytes`] of the cluster run with `ordering` (sequencer mode adds
    /// every node's fate ring, change feed and stamp ledger).
    pub fn files_bytes_ordered(&self, ordering: crate::cluster::config::Ordering) -> Result<u64, Error> {
        let mut config = self.config_unchecked(Path::new("/nonexistent"));
        config.ordering = ordering;
        let node = crate::cluster::files_bytes(&config)?;
        let region = region_config_for(&config, QUEUE_PAIRS, DIRECTORY_SLOTS);
        // Every host's region has this layout; node 0's is named for the error.
        let region = prescient_shim::layout::Layout::new(region)
            .map_err(|source| Error::Host { node: 0, source })?
            .region_bytes as u64;
        Ok(u64::from(self.nodes) * (node + region))
    }
}

/// A folder for one run's files (keys, node data, host regions), removed when dropped.
/// Under `/dev/shm` where it exists and has room, so the nodes' logs and stores stay in
/// memory; in the temporary folder otherwise (a container's small `/dev/shm`).
#[derive(Debug)]
pub struct RunDir {
    path: PathBuf,
}

impl RunDir {
    /// A fresh folder named after `name` and this process, with a key folder holding
    /// one random key readable by the owner only, on a filesystem with `bytes` free if
    /// `/dev/shm` is not one.
    pub fn create(name: &str, bytes: u64) -> Result<Self, Error> {
        let shm = Path::new("/dev/shm");
        let roomy = |p: &Path| {
            crate::cluster::format::preallocate::free_bytes(p)
                .is_ok_and(|free| free >= bytes.saturating_add(SHM_HEADROOM_BYTES))
        };
        let base = if shm.is_dir() && roomy(shm) { shm.to_path_buf() } else { std::env::temp_dir() };
        let path = base.join(format!("prescient-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        let keys = path.join("keys");
        let dir = Self { path };
        crate::seal::keys::create_key_dir(&keys)?;
        Ok(dir)
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Starts the cluster of `spec` with its files in `dir` on the real clock and steps it
/// until every node is connected to every other and every host holds a directory lease.
pub fn start(spec: &ClusterSpec, dir: &RunDir) -> Result<InProcess, Error> {
    start_configured(spec, spec.config(dir.path())?, dir)
}

/// [`start`] with `config` (made by `spec.config` and changed by the caller).
pub fn start_configured(spec: &ClusterSpec, config: ClusterConfig, dir: &RunDir) -> Result<InProcess, Error> {
    config.validate()?;
    let region = region_config_for(&config, QUEUE_PAIRS, DIRECTORY_SLOTS);
    let mut cluster = InProcess::start(
        Arc::new(config),
        ClusterClock::Real,
        spec.network.model(spec.seed),
        region,
        &dir.path().join("regions"),
    )?;
    let deadline = Instant::now() + spec.network.ready_timeout();
    let n = spec.nodes;
    let connected =
        |c: &InProcess| (0..n).all(|i| (0..n).all(|j| i == j || c.node(i).is_some_and(|node| node.peer_up(j))));
    while !connected(&cluster) {
        if Instant::now() >= deadline {
            return Err(Error::NotConnected {
                seconds: spec.network.ready_timeout().as_secs(),
                network: spec.network.name(),
            });
        }
        if !cluster.step() {
            std::thread::yield_now();
        }
    }
    loop {
        let now = prescient_shim::sys::monotonic_ns();
        let Some(waiting) = (0..n).find(|&i| !cluster.host(i).lease_valid(now)) else { break };
        if Instant::now() >= deadline {
            return Err(Error::NoLease { node: waiting, seconds: spec.network.ready_timeout().as_secs() });
        }
        if !cluster.step() {
            std::thread::yield_now();
        }
    }
    Ok(cluster)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spec of 4 KiB values, seed 1, no model file.
    fn spec(nodes: u8, (k, m): (u8, u8), network: Network, policy: Policy, store_keys: usize) -> ClusterSpec {
        ClusterSpec {
            nodes,
            k,
            m,
            network,
            policy,
            model_file: None,
            value_bytes: 4096,
            seed: 1,
            congestion: Congestion::None,
            store_keys,
        }
    }

    #[test]
    fn stores_have_room_for_the_keys_a_run_can_write() {
        assert_eq!(store_keys_for(0.5, 186_880), STORE_KEYS_MIN);
        // A LAN bench cell: 3.5 s writes at most 52,500 of the trace's keys.
        assert_eq!(store_keys_for(3.5, 186_880), 52_500);
        // A long demo writes every key.
        assert_eq!(store_keys_for(600.0, 186_880), 186_880);
        // At half load: 2 records a key, 16 ways a set.
        let spec = spec(5, (3, 2), Network::Lan, Policy::Speculative, 52_500);
        let config = spec.config_unchecked(Path::new("/nonexistent"));
        let store = crate::cluster::protocol::node::store_geometry(&config).unwrap();
        assert_eq!(u64::from(store.sets()), (2 * 52_500u64).div_ceil(16));
    }

    #[test]
    fn every_policy_and_network_makes_a_valid_configuration() {
        let dir = RunDir::create("setup-test", 0).unwrap();
        for network in Network::ALL {
            for policy in Policy::ALL {
                let spec = spec(5, (3, 2), network, policy, 1 << 17);
                let c = spec.config(dir.path()).unwrap_or_else(|e| panic!("{network:?} {policy:?}: {e}"));
                assert_eq!((c.quorum, c.invalidation, c.predictive), (4, policy.invalidation(), policy.predictive()));
                assert_eq!(Policy::parse(policy.name()), Some(policy));
                assert_eq!(Network::parse(network.name()), Some(network));
                assert_eq!(network.model(1).ports.is_some(), network == Network::Incast);
            }
        }
        let swift =
            ClusterSpec { congestion: Congestion::Swift, ..spec(5, (3, 2), Network::Incast, Policy::None, 1 << 17) };
        assert_eq!(swift.config(dir.path()).unwrap().network.congestion, Congestion::Swift);
        let spec = spec(5, (4, 1), Network::Lan, Policy::Speculative, STORE_KEYS_MIN);
        assert_eq!(spec.config(dir.path()).unwrap().quorum, 4);
        assert_eq!(Policy::parse("eager"), None);
        assert_eq!(
            Policy::parse_list("none, speculative+predictive").unwrap(),
            [Policy::None, Policy::SpeculativePredictive]
        );
        assert!(Policy::parse_list("none,eager").unwrap_err().contains("\"eager\""));
        assert_eq!(Network::parse_list("wan,LAN").unwrap(), [Network::Wan, Network::Lan]);
        assert_eq!(Network::parse_list("lan-1").unwrap(), [Network::LanLight]);
        assert!(Network::parse_list("moon").unwrap_err().contains("moon"));
        let key = dir.path().join("keys/1.key");
        assert_eq!(std::fs::read(&key).unwrap().len(), 32);
        let path = dir.path().to_owned();
        drop(dir);
        assert!(!path.exists(), "the folder goes with the run");
    }

    /// Bytes the files under `dir` take or may take.
    fn count_blocks(dir: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let meta = e.metadata().unwrap();
                if meta.is_dir() {
                    count_blocks(&e.path())
                } else {
                    // A host region is sparse until the host's buffers are touched;
                    // it may take all of its length.
                    (meta.blocks() * 512).max(meta.len())
                }
            })
            .sum()
    }

    #[test]
    fn a_run_fits_the_space_it_asks_for_and_skips_a_full_shm() {
        let spec = spec(3, (2, 1), Network::Lan, Policy::Speculative, 1 << 10);
        let need = spec.files_bytes().unwrap();
        let dir = RunDir::create("setup-space", need).unwrap();
        let cluster = start(&spec, &dir).unwrap();
        let used = count_blocks(dir.path());
        drop(cluster);
        // The estimate covers the files, and not by much more (the keys and a node's
        // small state files are left out): it is what picks the filesystem.
        assert!(used <= need + (64 << 10) && need <= used, "asked for {need} bytes, the files take {used}");
        // In sequencer mode each node also keeps a fate ring, a change feed and a
        // stamp ledger, which the estimate of its configuration counts.
        let ordering = crate::cluster::config::Ordering::Sequencer(crate::cluster::config::SequencerConfig {
            sequencer: 0,
            shadows: vec![1],
            stamp_block: 16,
            fence_after_us: 0,
        });
        let need = spec.files_bytes_ordered(ordering.clone()).unwrap();
        let dir = RunDir::create("setup-space-seq", need).unwrap();
        let mut config = spec.config(dir.path()).unwrap();
        config.ordering = ordering;
        let cluster = start_configured(&spec, config, &dir).unwrap();
        let used = count_blocks(dir.path());
        drop(cluster);
        assert!(
            used <= need + (64 << 10) && need <= used,
            "sequencer mode: asked for {need} bytes, the files take {used}"
        );
        let huge = RunDir::create("setup-huge", u64::MAX).unwrap();
        assert!(huge.path().starts_with(std::env::temp_dir()), "{} is on /dev/shm", huge.path().display());
    }
}
