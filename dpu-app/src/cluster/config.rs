//! The cluster configuration file: `prescient-dpu serve --config cluster.toml --node N`.
//!
//! One TOML file describes the whole cluster, and every node reads the same file: the
//! erasure code (k data and m parity fragments per write), the commit quorum, where the
//! keys and the predictor model are, the sizes of the logs and stores, the timings of the
//! failure detector, and one `[[node]]` per node with its listeners and its data folder.
//! `--node N` picks this node's entry. An example (the test fixture
//! `cluster.example.toml` next to this file):
//!
//! ```toml
#![doc = include_str!("cluster.example.toml")]
//! ```
//!
//! Relative paths resolve against the folder of the configuration file. Fields of
//! `[cluster]` other than `name`, `k`, `m`, `quorum` and `key_dir` may be left out and
//! then take the values of the example above (no `model`: the predictor learns online).
//!
//! Invariants: a [`ClusterConfig`] returned by [`ClusterConfig::load`] or
//! [`ClusterConfig::parse`] has passed [`ClusterConfig::validate`], and its nodes are in
//! id order (`nodes[i].id == i`). Every check names the file, the field, the value and
//! what is allowed. [`ClusterConfig::cluster_hash`] covers exactly what all nodes must
//! agree on, so that nodes of differently configured clusters refuse each other.

use std::fmt::Display;
use std::net::{SocketAddr, SocketAddrV6};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::cluster::placement::Placement;
pub use crate::cluster::placement::Role;

mod fabric;
mod network;
mod ordering;
pub use fabric::{
    FabricKind, NodeFabric, VerbsDevice, DEFAULT_DEVICE_PORT, DEFAULT_RETRY_COUNT, DEFAULT_RNR_RETRY_COUNT,
};
pub use network::{Congestion, NetworkConfig};
pub use ordering::{Ordering, SequencerConfig, DEFAULT_STAMP_BLOCK};

use crate::limits::{
    FATE_ENTRIES_DEFAULT, FATE_ENTRIES_MAX, FATE_ENTRIES_MIN, FEED_ENTRIES_DEFAULT, FEED_ENTRIES_MAX, FEED_ENTRIES_MIN,
    FRAGMENTS_MAX, HEARTBEAT_US_MIN, LEASE_HEARTBEATS_MIN, LOG_SLOTS_MAX, LOG_SLOTS_MIN, NAME_BYTES_MAX, NODES_MAX,
    NODES_MIN, OUTCOME_ENTRIES_MAX, OUTCOME_ENTRIES_MIN, STORE_BYTES_LIMIT, STORE_BYTES_MIN, TIMING_US_MAX,
    VALUE_BYTES_LIMIT,
};

/// Defaults of the optional `[cluster]` fields (the example's values).
const DEFAULT_INVALIDATION: Invalidation = Invalidation::Speculative;
const DEFAULT_PREDICTIVE: bool = true;
const DEFAULT_VALUE_BYTES_MAX: usize = 8192;
const DEFAULT_STORE_BYTES: usize = 1 << 30;
const DEFAULT_LOG_SLOTS: usize = 256;
const DEFAULT_OUTCOME_ENTRIES: usize = 65536;
const DEFAULT_DURABILITY: Durability = Durability::Process;
const DEFAULT_HEARTBEAT_US: u64 = 1_000;
const DEFAULT_LEASE_US: u64 = 20_000;
const DEFAULT_DEAD_AFTER_US: u64 = 50_000;
const DEFAULT_WRITE_TIMEOUT_US: u64 = 2_000_000;

/// Why a cluster configuration was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read cluster config {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The text is not TOML, has a field of the wrong type, lacks a required field or has
    /// an unknown one.
    #[error("cluster config {origin}: {message}")]
    Syntax {
        /// Where the configuration came from.
        origin: String,
        /// The TOML parser's message (with line, column and field).
        message: String,
    },
    /// A field has a value that is not allowed.
    #[error("cluster config {origin}: {field} = {value}: {allowed}")]
    Invalid {
        /// Where the configuration came from.
        origin: String,
        /// The field, e.g. `cluster.quorum` or `[[node]] id = 2: fabric`.
        field: String,
        /// The value given.
        value: String,
        /// What is allowed, and why.
        allowed: String,
    },
    /// `--node N` names a node the configuration does not have.
    #[error("cluster config {origin}: --node {id} is not a node of cluster {name:?}; its nodes are {ids}")]
    UnknownNode {
        /// Where the configuration came from.
        origin: String,
        /// The cluster's name.
        name: String,
        /// The id asked for.
        id: u32,
        /// The ids there are.
        ids: String,
    },
}

/// How a write invalidates the peers' cached copies of its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Invalidation {
    /// Mark the peers' directory slots Pending while the fragments replicate (`speculative`).
    Speculative,
    /// Invalidate only once the write has committed: one more round trip (`after-commit`).
    AfterCommit,
    /// Never invalidate: caches may serve stale values indefinitely (`none`); a benchmark
    /// reference only, refused unless `allow_unsafe_no_invalidation = true`.
    None,
}

/// Which directory-invalidation policy the node runs (the config's `invalidation`
/// and `predictive`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// When directories are invalidated.
    pub invalidation: Invalidation,
    /// Whether predictor leases pre-invalidate predicted keys.
    pub predictive: bool,
}

impl Invalidation {
    /// The name in the configuration file.
    pub const fn name(self) -> &'static str {
        match self {
            Invalidation::Speculative => "speculative",
            Invalidation::AfterCommit => "after-commit",
            Invalidation::None => "none",
        }
    }

    /// The code in the cluster hash.
    const fn code(self) -> u8 {
        match self {
            Invalidation::Speculative => 1,
            Invalidation::AfterCommit => 2,
            Invalidation::None => 3,
        }
    }
}

/// What a holder's acknowledgement of a fragment promises.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Durability {
    /// The fragment is in the file-backed log's page cache: it survives the process
    /// (`kill -9`), not the machine losing power (`process`).
    Process,
    /// The holder msyncs the fragment before acknowledging: it survives power loss (`sync`).
    Sync,
}

impl Durability {
    /// The name in the configuration file.
    pub const fn name(self) -> &'static str {
        match self {
            Durability::Process => "process",
            Durability::Sync => "sync",
        }
    }
}

/// One node of the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeConfig {
    /// The node id: its writer id in slot words and its node in stamps (0..n-1).
    pub id: u8,
    /// How it reaches the fabric: its emulated NIC's listener (emu over TCP) or its
    /// RDMA device (verbs); the kind is the cluster's [`ClusterConfig::fabric`].
    pub fabric: NodeFabric,
    /// Rendezvous listener (queue pair and region exchange).
    pub control: SocketAddr,
    /// Folder of the fragment logs, the store, the outcome table and the epoch files.
    pub data_dir: PathBuf,
    /// Whether it holds fragments (`role = "storage"`, the default) or is a cache-only
    /// member (`role = "cache"`): see [`crate::cluster::placement`].
    pub role: Role,
}

/// The whole cluster's configuration. Build one with [`ClusterConfig::load`],
/// [`ClusterConfig::parse`] or [`ClusterConfig::in_process`]; after changing fields,
/// [`ClusterConfig::validate`] runs the checks that loading runs.
///
/// ```
/// use prescient_dpu::cluster::config::ClusterConfig;
/// let base = std::env::temp_dir().join(format!("prescient-config-doc-{}", std::process::id()));
/// std::fs::create_dir_all(base.join("keys")).unwrap();
/// let mut config = ClusterConfig::in_process(5, 3, 2, &base);
/// assert_eq!(config.quorum, 4);
/// config.validate().unwrap();
/// config.quorum = 2; // fewer than k holders could not rebuild the value
/// assert!(config.validate().unwrap_err().to_string().contains("cluster.quorum = 2"));
/// # std::fs::remove_dir_all(&base).unwrap();
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterConfig {
    /// Where this configuration came from (the file, for error messages).
    pub origin: String,
    /// The cluster's name, part of the cluster hash.
    pub name: String,
    /// Data fragments per write.
    pub k: usize,
    /// Parity fragments per write.
    pub m: usize,
    /// Holders that must persist a fragment before a write commits.
    pub quorum: usize,
    /// The AES-256 key folder (`<id>.key` files), resolved.
    pub key_dir: PathBuf,
    /// The predictor model file, resolved; `None`: the predictor learns online.
    pub model: Option<PathBuf>,
    /// How writes invalidate cached copies.
    pub invalidation: Invalidation,
    /// Whether predictor leases pre-invalidate predicted keys.
    pub predictive: bool,
    /// Whether the predictor's lease threshold is tuned online from measured cost
    /// (`lease_tuning`); `None`: on exactly when leases run (speculative and
    /// predictive). See [`ClusterConfig::tunes_leases`].
    pub lease_tuning: Option<bool>,
    /// Largest value a PUT may carry, in bytes.
    pub value_bytes_max: usize,
    /// Bytes of each node's fragment store file (allocated when it is created): as many
    /// sets of records as fit.
    pub store_bytes: usize,
    /// Slots of each writer's fragment log on each node (a power of two).
    pub log_slots: usize,
    /// Writes each writer's outcome table tracks (a power of two).
    pub outcome_entries: usize,
    /// Entries of each node's fate ring in sequencer mode (a power of two): how far an
    /// applier that was down may fall behind a writer and still catch up.
    pub fate_entries: usize,
    /// Entries of each node's change feed in sequencer mode (a power of two): how far a
    /// host following it may fall behind, and how far a peer that fell behind may copy
    /// from it.
    pub feed_entries: usize,
    /// What a holder's acknowledgement promises.
    pub durability: Durability,
    /// How often each node reads every peer's heartbeat block.
    pub heartbeat_us: u64,
    /// How long a directory may be trusted without hearing every peer.
    pub lease_us: u64,
    /// Silence after which a peer is declared dead (its marks cleared).
    pub dead_after_us: u64,
    /// A write that has not reached its quorum by then fails.
    pub write_timeout_us: u64,
    /// The queue pairs' transport timeout (a request unanswered this long is sent
    /// again; three times in all, then the link is lost); 0: `dead_after_us / 8`,
    /// between 50 us and 4 ms. Raise it on a loaded machine running the emulated fabric
    /// between processes, where a busy peer answers late but never loses a message.
    pub transport_timeout_us: u64,
    /// Permits `invalidation = "none"`.
    pub allow_unsafe_no_invalidation: bool,
    /// The fabric every node runs on (`emu`, the default, or `verbs`).
    pub fabric: FabricKind,
    /// Transport retries of a queue pair before a request fails and its link is lost.
    pub retry_count: u8,
    /// Receiver-not-ready retries of a queue pair (at most 6: 7 is "forever" on hardware).
    pub rnr_retry_count: u8,
    /// How writes are ordered: per-key hybrid logical clocks, or one sequencer.
    pub ordering: Ordering,
    /// Regions, the delays between them and congestion control (`[network]`).
    pub network: NetworkConfig,
    /// The nodes (in id order once loaded).
    pub nodes: Vec<NodeConfig>,
}

/// The file as written, before any check beyond TOML types.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    cluster: RawCluster,
    network: Option<network::RawNetwork>,
    #[serde(default)]
    node: Vec<RawNode>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    name: String,
    k: i64,
    m: i64,
    quorum: i64,
    key_dir: String,
    model: Option<String>,
    invalidation: Option<String>,
    predictive: Option<bool>,
    lease_tuning: Option<bool>,
    value_bytes_max: Option<i64>,
    store_bytes: Option<i64>,
    log_slots: Option<i64>,
    outcome_entries: Option<i64>,
    fate_entries: Option<i64>,
    feed_entries: Option<i64>,
    durability: Option<String>,
    heartbeat_us: Option<i64>,
    lease_us: Option<i64>,
    dead_after_us: Option<i64>,
    write_timeout_us: Option<i64>,
    transport_timeout_us: Option<i64>,
    allow_unsafe_no_invalidation: Option<bool>,
    fabric: Option<String>,
    retry_count: Option<i64>,
    rnr_retry_count: Option<i64>,
    ordering: Option<String>,
    sequencer: Option<i64>,
    shadows: Option<Vec<i64>>,
    stamp_block: Option<i64>,
    fence_after_us: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNode {
    id: i64,
    fabric: Option<String>,
    device: Option<String>,
    device_port: Option<i64>,
    gid_index: Option<i64>,
    control: String,
    data_dir: String,
    region: Option<String>,
    role: Option<String>,
}

impl ClusterConfig {
    /// Reads and checks the configuration file at `path`; relative paths in it resolve
    /// against its folder.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
        let base_dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        Self::parse_from(&text, base_dir, path.display().to_string())
    }

    /// Parses and checks configuration `text`; relative paths resolve against `base_dir`.
    pub fn parse(text: &str, base_dir: &Path) -> Result<Self, ConfigError> {
        Self::parse_from(text, base_dir, format!("text (relative paths from {})", base_dir.display()))
    }

    fn parse_from(text: &str, base_dir: &Path, origin: String) -> Result<Self, ConfigError> {
        let raw: RawFile =
            toml::from_str(text).map_err(|e| ConfigError::Syntax { origin: origin.clone(), message: e.to_string() })?;
        let mut config = Self::from_raw(raw, base_dir, origin)?;
        config.validate()?;
        config.nodes.sort_by_key(|n| n.id);
        Ok(config)
    }

    /// Converts the file's types into ours; range rules are left to `validate`.
    fn from_raw(raw: RawFile, base_dir: &Path, origin: String) -> Result<Self, ConfigError> {
        let o = origin.as_str();
        let c = raw.cluster;
        let count = |field: &str, v: i64| usize::try_from(v).map_err(|_| negative(o, field, v));
        let micros = |field: &str, v: Option<i64>, default: u64| match v {
            None => Ok(default),
            Some(v) => u64::try_from(v).map_err(|_| negative(o, field, v)),
        };
        let sized = |field: &str, v: Option<i64>, default: usize| v.map_or(Ok(default), |v| count(field, v));
        let invalidation = match c.invalidation.as_deref() {
            None => DEFAULT_INVALIDATION,
            Some("speculative") => Invalidation::Speculative,
            Some("after-commit") => Invalidation::AfterCommit,
            Some("none") => Invalidation::None,
            Some(other) => {
                return Err(invalid(
                    o,
                    "cluster.invalidation",
                    format!("{other:?}"),
                    "must be \"speculative\", \"after-commit\" or \"none\"",
                ));
            }
        };
        let durability = match c.durability.as_deref() {
            None => DEFAULT_DURABILITY,
            Some("process") => Durability::Process,
            Some("sync") => Durability::Sync,
            Some(other) => {
                return Err(invalid(
                    o,
                    "cluster.durability",
                    format!("{other:?}"),
                    "must be \"process\" (a fragment survives kill -9) or \"sync\" (msync before acknowledging: survives power loss)",
                ));
            }
        };
        let kind = fabric::parse_kind(c.fabric.as_deref())
            .map_err(|(value, allowed)| invalid(o, "cluster.fabric", value, allowed))?;
        let retry = |field: &str, v: Option<i64>, default: u8, (max, what): (u8, &str)| {
            fabric::retry(v, default, max, what).map_err(|(value, allowed)| invalid(o, field, value, allowed))
        };
        let retry_count = retry("cluster.retry_count", c.retry_count, DEFAULT_RETRY_COUNT, fabric::RETRY_COUNT_RULE)?;
        let rnr_retry_count =
            retry("cluster.rnr_retry_count", c.rnr_retry_count, DEFAULT_RNR_RETRY_COUNT, fabric::RNR_RETRY_COUNT_RULE)?;
        let ordering = ordering::parse(&ordering::RawOrdering {
            ordering: c.ordering.as_deref(),
            sequencer: c.sequencer,
            shadows: c.shadows.as_deref(),
            stamp_block: c.stamp_block,
            fence_after_us: c.fence_after_us,
        })
        .map_err(|(field, value, allowed)| invalid(o, field, value, allowed))?;
        let mut nodes = Vec::with_capacity(raw.node.len());
        for (position, n) in raw.node.iter().enumerate() {
            let field = |name: &str| format!("[[node]] #{} {name}", position + 1);
            let id = u8::try_from(n.id).map_err(|_| {
                invalid(
                    o,
                    field("id"),
                    n.id,
                    format!("node ids are 0..n-1 for the n [[node]] entries, at most {}", NODES_MAX - 1),
                )
            })?;
            let address = |name: &str, text: &str| {
                text.parse::<SocketAddr>().map_err(|_| {
                    invalid(
                        o,
                        format!("[[node]] id = {id}: {name}"),
                        format!("{text:?}"),
                        "must be an IP address and port such as \"127.0.0.1:7100\" or \"[::1]:7100\" (host names are not resolved)",
                    )
                })
            };
            let node_fabric = fabric::node_fabric(
                kind,
                &fabric::RawNodeFabric {
                    fabric: n.fabric.as_deref(),
                    device: n.device.as_deref(),
                    device_port: n.device_port,
                    gid_index: n.gid_index,
                },
            )
            .map_err(|(name, value, allowed)| invalid(o, format!("[[node]] id = {id}: {name}"), value, allowed))?;
            let role = match n.role.as_deref() {
                None => Role::Storage,
                Some(name) => Role::parse(name).ok_or_else(|| {
                    invalid(
                        o,
                        format!("[[node]] id = {id}: role"),
                        format!("{name:?}"),
                        "must be \"storage\" (holds fragments; the default) or \"cache\" (a cache-only member: holds none, its directory is invalidated, its GETs read from the storage nodes)",
                    )
                })?,
            };
            nodes.push(NodeConfig {
                id,
                fabric: node_fabric,
                control: address("control", &n.control)?,
                data_dir: resolve(base_dir, &n.data_dir),
                role,
            });
        }
        let mut node_regions: Vec<(u8, Option<String>)> =
            nodes.iter().zip(&raw.node).map(|(n, r)| (n.id, r.region.clone())).collect();
        node_regions.sort_by_key(|(id, _)| *id);
        let network = network::parse(raw.network, &node_regions)
            .map_err(|(field, value, allowed)| invalid(o, field, value, allowed))?;
        Ok(Self {
            origin: origin.clone(),
            name: c.name,
            k: count("cluster.k", c.k)?,
            m: count("cluster.m", c.m)?,
            quorum: count("cluster.quorum", c.quorum)?,
            key_dir: resolve(base_dir, &c.key_dir),
            model: c.model.as_deref().map(|m| resolve(base_dir, m)),
            invalidation,
            predictive: c.predictive.unwrap_or(DEFAULT_PREDICTIVE),
            lease_tuning: c.lease_tuning,
            value_bytes_max: sized("cluster.value_bytes_max", c.value_bytes_max, DEFAULT_VALUE_BYTES_MAX)?,
            store_bytes: sized("cluster.store_bytes", c.store_bytes, DEFAULT_STORE_BYTES)?,
            log_slots: sized("cluster.log_slots", c.log_slots, DEFAULT_LOG_SLOTS)?,
            outcome_entries: sized("cluster.outcome_entries", c.outcome_entries, DEFAULT_OUTCOME_ENTRIES)?,
            fate_entries: sized("cluster.fate_entries", c.fate_entries, FATE_ENTRIES_DEFAULT as usize)?,
            feed_entries: sized("cluster.feed_entries", c.feed_entries, FEED_ENTRIES_DEFAULT as usize)?,
            durability,
            heartbeat_us: micros("cluster.heartbeat_us", c.heartbeat_us, DEFAULT_HEARTBEAT_US)?,
            lease_us: micros("cluster.lease_us", c.lease_us, DEFAULT_LEASE_US)?,
            dead_after_us: micros("cluster.dead_after_us", c.dead_after_us, DEFAULT_DEAD_AFTER_US)?,
            write_timeout_us: micros("cluster.write_timeout_us", c.write_timeout_us, DEFAULT_WRITE_TIMEOUT_US)?,
            transport_timeout_us: micros("cluster.transport_timeout_us", c.transport_timeout_us, 0)?,
            allow_unsafe_no_invalidation: c.allow_unsafe_no_invalidation.unwrap_or(false),
            fabric: kind,
            retry_count,
            rnr_retry_count,
            ordering,
            network,
            nodes,
        })
    }

    /// A cluster of `nodes` nodes on one machine with Reed-Solomon(`k`, `m`) and every
    /// other field at its default: name `in-process`, quorum `max(k + 1, m + 1)` capped
    /// at `k + m` (a committed write survives the loss of one holder where the code
    /// allows), keys in `base_dir/keys`, node `i` on `127.0.0.1:7100 + i` (fabric) and
    /// `127.0.0.1:7200 + i` (control) with its data in `base_dir/node<i>`. Not checked:
    /// change fields as needed, then call [`ClusterConfig::validate`].
    pub fn in_process(nodes: usize, k: usize, m: usize, base_dir: &Path) -> Self {
        let port = |base: u16, i: usize| base.saturating_add(u16::try_from(i).unwrap_or(u16::MAX));
        Self {
            origin: format!("in-process cluster in {}", base_dir.display()),
            name: "in-process".to_owned(),
            k,
            m,
            quorum: (k + 1).max(m + 1).min(k + m),
            key_dir: base_dir.join("keys"),
            model: None,
            invalidation: DEFAULT_INVALIDATION,
            predictive: DEFAULT_PREDICTIVE,
            lease_tuning: None,
            value_bytes_max: DEFAULT_VALUE_BYTES_MAX,
            store_bytes: DEFAULT_STORE_BYTES,
            log_slots: DEFAULT_LOG_SLOTS,
            outcome_entries: DEFAULT_OUTCOME_ENTRIES,
            fate_entries: FATE_ENTRIES_DEFAULT as usize,
            feed_entries: FEED_ENTRIES_DEFAULT as usize,
            durability: DEFAULT_DURABILITY,
            heartbeat_us: DEFAULT_HEARTBEAT_US,
            lease_us: DEFAULT_LEASE_US,
            dead_after_us: DEFAULT_DEAD_AFTER_US,
            write_timeout_us: DEFAULT_WRITE_TIMEOUT_US,
            transport_timeout_us: 0,
            allow_unsafe_no_invalidation: false,
            fabric: FabricKind::Emu,
            retry_count: DEFAULT_RETRY_COUNT,
            rnr_retry_count: DEFAULT_RNR_RETRY_COUNT,
            ordering: Ordering::Hlc,
            network: NetworkConfig::default(),
            nodes: (0..nodes)
                .map(|i| NodeConfig {
                    id: u8::try_from(i).unwrap_or(u8::MAX),
                    fabric: NodeFabric::Emu(SocketAddr::from(([127, 0, 0, 1], port(7100, i)))),
                    control: SocketAddr::from(([127, 0, 0, 1], port(7200, i))),
                    data_dir: base_dir.join(format!("node{i}")),
                    role: Role::Storage,
                })
                .collect(),
        }
    }

    /// The one-node cluster that `prescient-dpu serve` runs for a region given without
    /// `--config`: RS(1, 0) with quorum 1 (the node is the one holder of every value,
    /// durable in its own files), its files in `data_dir`, sealing with the keys of
    /// `key_dir`, the predictor of `model` pre-invalidating predicted keys (no model: no
    /// predictor), values of at most `value_bytes_max` bytes, a store of `store_bytes`,
    /// the host shim's heartbeat period, and an outcome table of 4096 writes (a write
    /// settles as it is decided, with no holder to wait for; at most
    /// [`crate::limits::WRITES_MAX`] are in flight). Its listener addresses are placeholders:
    /// a one-node cluster runs on the in-process fabric and has no peer to meet.
    /// Not checked: call [`ClusterConfig::validate`].
    pub fn single_node(
        data_dir: PathBuf,
        key_dir: PathBuf,
        model: Option<PathBuf>,
        value_bytes_max: usize,
        store_bytes: usize,
    ) -> Self {
        let mut config = Self::in_process(1, 1, 0, &data_dir);
        config.origin = format!("one-node cluster in {}", data_dir.display());
        config.name = "one-node".to_owned();
        config.quorum = 1;
        config.key_dir = key_dir;
        config.predictive = model.is_some();
        config.model = model;
        config.value_bytes_max = value_bytes_max;
        config.store_bytes = store_bytes;
        config.outcome_entries = 4 * OUTCOME_ENTRIES_MIN as usize;
        config.heartbeat_us = prescient_shim::config::HEARTBEAT_PERIOD_US;
        config.lease_us = config.lease_us.max(LEASE_HEARTBEATS_MIN * config.heartbeat_us);
        config.dead_after_us = config.dead_after_us.max(config.lease_us + 1);
        config.nodes[0].data_dir = data_dir;
        config
    }

    /// Whether predictor leases run: speculative invalidation with `predictive`.
    pub fn leases_run(&self) -> bool {
        self.invalidation == Invalidation::Speculative && self.predictive
    }

    /// Whether the node tunes its lease threshold from measured cost: as
    /// `lease_tuning` says, by default whenever leases run.
    pub fn tunes_leases(&self) -> bool {
        self.lease_tuning.unwrap_or_else(|| self.leases_run())
    }

    /// Runs every check of loading: the first rule broken is the error.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check_code()?;
        self.check_nodes()?;
        self.check_paths()?;
        self.check_sizes()?;
        self.check_timings()?;
        self.check_ordering()
    }

    /// The sequencer's node, shadows and stamp block, and that every write quorum
    /// meets every claim's majority.
    fn check_ordering(&self) -> Result<(), ConfigError> {
        match &self.ordering {
            Ordering::Hlc => Ok(()),
            Ordering::Sequencer(s) => ordering::check(s, self.nodes.len(), self.quorum, self.dead_after_us)
                .map_err(|(field, value, allowed)| self.invalid(field, value, allowed)),
        }
    }

    /// The storage nodes and the holders of each key on them (every node a storage
    /// node unless some `[[node]]` says `role = "cache"`).
    pub fn placement(&self) -> Placement {
        let mut roles = [Role::Storage; crate::limits::NODES_MAX];
        for node in &self.nodes {
            if let Some(role) = roles.get_mut(usize::from(node.id)) {
                *role = node.role;
            }
        }
        Placement::new(&roles[..self.nodes.len().clamp(1, roles.len())])
            .unwrap_or_else(|| Placement::all_storage(self.nodes.len()))
    }

    fn invalid(&self, field: impl Into<String>, value: impl Display, allowed: impl Into<String>) -> ConfigError {
        invalid(&self.origin, field, value, allowed)
    }

    /// Checks that `value` of `field` is a power of two from `min` to `max`; the error
    /// says so, followed by `note`.
    fn power_of_two(&self, field: &str, value: usize, min: u32, max: u32, note: &str) -> Result<(), ConfigError> {
        if value.is_power_of_two() && (min as usize..=max as usize).contains(&value) {
            return Ok(());
        }
        Err(self.invalid(field, value, format!("must be a power of two from {min} to {max} {note}")))
    }

    /// Name, node count, k, m and quorum.
    fn check_code(&self) -> Result<(), ConfigError> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= NAME_BYTES_MAX
            && self.name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !name_ok {
            return Err(self.invalid(
                "cluster.name",
                format!("{:?}", self.name),
                format!("must be 1 to {NAME_BYTES_MAX} characters of A-Z a-z 0-9 - _ ."),
            ));
        }
        let n = self.nodes.len();
        if !(NODES_MIN..=NODES_MAX).contains(&n) {
            return Err(self.invalid(
                "[[node]] entries",
                n,
                format!("a cluster has {NODES_MIN} to {NODES_MAX} nodes (node ids are the slot word's 6-bit writer field); add one [[node]] per node"),
            ));
        }
        let (k, m) = (self.k, self.m);
        if k < 1 {
            return Err(self.invalid("cluster.k", k, "must be at least 1 data fragment"));
        }
        // One node has nowhere to put parity: its code is RS(1, 0) (k + m <= n below).
        if m < 1 && n > 1 {
            return Err(self.invalid("cluster.m", m, "must be at least 1 parity fragment, or a lost node loses data"));
        }
        if k + m > FRAGMENTS_MAX {
            return Err(self.invalid(
                "cluster.k + cluster.m",
                format!("{k} + {m} = {}", k + m),
                format!("at most {FRAGMENTS_MAX} fragments per stripe; lower k or m"),
            ));
        }
        let storage = self.nodes.iter().filter(|node| node.role == Role::Storage).count();
        if k + m > storage {
            let cache = n - storage;
            return Err(self.invalid(
                "cluster.k + cluster.m",
                format!("{k} + {m} = {}", k + m),
                if cache == 0 {
                    format!("each fragment goes to its own node, and there are {n} [[node]] entries: lower k or m, or add nodes")
                } else {
                    format!("each fragment goes to its own storage node, and {storage} of the {n} [[node]] entries store ({cache} {} role = \"cache\"): lower k or m, or add storage nodes", if cache == 1 { "is" } else { "are" })
                },
            ));
        }
        let low = k.max(m + 1);
        if self.quorum < low || self.quorum > k + m {
            return Err(self.invalid(
                "cluster.quorum",
                self.quorum,
                format!(
                    "must be between max(k, m + 1) = {low} and k + m = {}: at least k = {k} holders must persist a fragment so the value can be rebuilt, at least m + 1 = {} so that any reader with at most m = {m} nodes down still meets a node that persisted the decision, and there are only k + m holders",
                    k + m,
                    m + 1
                ),
            ));
        }
        Ok(())
    }

    /// Ids, addresses and data folders of the nodes.
    fn check_nodes(&self) -> Result<(), ConfigError> {
        let n = self.nodes.len();
        let mut seen = [false; NODES_MAX];
        for (position, node) in self.nodes.iter().enumerate() {
            let id = usize::from(node.id);
            if id >= n {
                return Err(self.invalid(
                    format!("[[node]] #{} id", position + 1),
                    node.id,
                    format!("node ids are exactly 0..{} for the {n} [[node]] entries", n - 1),
                ));
            }
            if std::mem::replace(&mut seen[id], true) {
                return Err(self.invalid(
                    format!("[[node]] #{} id", position + 1),
                    node.id,
                    "is the id of an earlier [[node]] too; each node has its own id",
                ));
            }
        }
        for node in &self.nodes {
            if node.fabric.kind() != self.fabric {
                return Err(self.invalid(
                    format!("[[node]] id = {}: fabric", node.id),
                    format!("{}", node.fabric),
                    format!(
                        "is not on cluster.fabric = {:?}: every node of a cluster runs on the same fabric",
                        self.fabric.name()
                    ),
                ));
            }
        }
        if self.retry_count > crate::limits::RETRY_COUNT_MAX {
            return Err(self.invalid("cluster.retry_count", self.retry_count, fabric::RETRY_COUNT_RULE.1));
        }
        if self.rnr_retry_count > crate::limits::RNR_RETRY_COUNT_MAX {
            return Err(self.invalid("cluster.rnr_retry_count", self.rnr_retry_count, fabric::RNR_RETRY_COUNT_RULE.1));
        }
        let addresses: Vec<(String, SocketAddr)> = self
            .nodes
            .iter()
            .flat_map(|node| {
                let listener = node.fabric.emu_listener().map(|a| (format!("[[node]] id = {}: fabric", node.id), a));
                listener.into_iter().chain([(format!("[[node]] id = {}: control", node.id), node.control)])
            })
            .collect();
        for (i, (field, address)) in addresses.iter().enumerate() {
            if address.port() == 0 {
                return Err(self.invalid(
                    field.as_str(),
                    format!("\"{address}\""),
                    "needs a port other than 0: peers connect to the address written here",
                ));
            }
            if let Some((other, _)) = addresses[..i].iter().find(|(_, a)| a == address) {
                return Err(self.invalid(
                    field.as_str(),
                    format!("\"{address}\""),
                    format!("is also {other}; every listener needs its own address"),
                ));
            }
        }
        for (i, node) in self.nodes.iter().enumerate() {
            let field = format!("[[node]] id = {}: data_dir", node.id);
            if node.data_dir.as_os_str().is_empty() {
                return Err(self.invalid(field, "\"\"", "must name a folder"));
            }
            if let Some(other) = self.nodes[..i].iter().find(|o| o.data_dir == node.data_dir) {
                return Err(self.invalid(
                    field,
                    format!("{:?}", node.data_dir),
                    format!(
                        "is also the data_dir of node {}; each node keeps its logs and store in its own folder",
                        other.id
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The key folder and the model file exist.
    fn check_paths(&self) -> Result<(), ConfigError> {
        let key_dir = format!("{:?}", self.key_dir);
        match std::fs::metadata(&self.key_dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(self.invalid(
                    "cluster.key_dir",
                    key_dir,
                    "is not a folder; name the folder that holds the <id>.key files",
                ))
            }
            Err(e) => {
                return Err(self.invalid(
                    "cluster.key_dir",
                    key_dir,
                    format!("cannot be opened ({e}); name an existing folder that holds the <id>.key files (32 bytes, mode 600)"),
                ));
            }
        }
        if let Some(model) = &self.model {
            let value = format!("{model:?}");
            match std::fs::metadata(model) {
                Ok(meta) if meta.is_file() => {}
                Ok(_) => {
                    return Err(self.invalid("cluster.model", value, "is not a file; name a predictor model file"))
                }
                Err(e) => {
                    return Err(self.invalid(
                        "cluster.model",
                        value,
                        format!(
                            "cannot be opened ({e}); name an existing model file, or leave model out to learn online"
                        ),
                    ));
                }
            }
        }
        if self.invalidation == Invalidation::None && !self.allow_unsafe_no_invalidation {
            return Err(self.invalid(
                "cluster.invalidation",
                "\"none\"",
                "lets caches serve stale values forever and is a benchmark reference only; use \"speculative\" or \"after-commit\", or set allow_unsafe_no_invalidation = true to measure it",
            ));
        }
        if self.lease_tuning == Some(true) && !self.leases_run() {
            return Err(self.invalid(
                "cluster.lease_tuning",
                "true",
                "tunes the threshold of predictor leases, which run only with invalidation = \"speculative\" and predictive = true; set those, or leave lease_tuning out",
            ));
        }
        Ok(())
    }

    /// Sizes of values, stores, logs and outcome tables.
    fn check_sizes(&self) -> Result<(), ConfigError> {
        if !(1..=VALUE_BYTES_LIMIT).contains(&self.value_bytes_max) {
            return Err(self.invalid(
                "cluster.value_bytes_max",
                self.value_bytes_max,
                format!("must be 1 to {VALUE_BYTES_LIMIT} (64 MiB); logs and stores are sized from it"),
            ));
        }
        if !(STORE_BYTES_MIN..=STORE_BYTES_LIMIT).contains(&self.store_bytes) {
            return Err(self.invalid(
                "cluster.store_bytes",
                self.store_bytes,
                format!("must be {STORE_BYTES_MIN} (16 KiB) to {STORE_BYTES_LIMIT} (1 TiB)"),
            ));
        }
        self.power_of_two(
            "cluster.log_slots",
            self.log_slots,
            LOG_SLOTS_MIN,
            LOG_SLOTS_MAX,
            "(slot = sequence % slots)",
        )?;
        self.power_of_two(
            "cluster.outcome_entries",
            self.outcome_entries,
            OUTCOME_ENTRIES_MIN,
            OUTCOME_ENTRIES_MAX,
            "(2^20)",
        )?;
        self.power_of_two("cluster.fate_entries", self.fate_entries, FATE_ENTRIES_MIN, FATE_ENTRIES_MAX, "(2^24)")?;
        self.power_of_two("cluster.feed_entries", self.feed_entries, FEED_ENTRIES_MIN, FEED_ENTRIES_MAX, "(2^24)")?;
        Ok(())
    }

    /// The failure detector's timings and how they relate.
    fn check_timings(&self) -> Result<(), ConfigError> {
        for (field, value) in [
            ("cluster.heartbeat_us", self.heartbeat_us),
            ("cluster.lease_us", self.lease_us),
            ("cluster.dead_after_us", self.dead_after_us),
            ("cluster.write_timeout_us", self.write_timeout_us),
            ("cluster.transport_timeout_us", self.transport_timeout_us),
        ] {
            if value > TIMING_US_MAX {
                return Err(self.invalid(
                    field,
                    value,
                    format!("must be at most {TIMING_US_MAX} (one hour); timings are in microseconds"),
                ));
            }
        }
        if self.heartbeat_us < HEARTBEAT_US_MIN {
            return Err(self.invalid(
                "cluster.heartbeat_us",
                self.heartbeat_us,
                format!("must be at least {HEARTBEAT_US_MIN}: reading every peer's heartbeat more often spends the fabric and the cores on liveness instead of writes"),
            ));
        }
        let lease_min = LEASE_HEARTBEATS_MIN * self.heartbeat_us;
        if self.lease_us < lease_min {
            return Err(self.invalid(
                "cluster.lease_us",
                self.lease_us,
                format!("must be at least {LEASE_HEARTBEATS_MIN} * heartbeat_us = {lease_min}: a lease must outlast several heartbeat reads, or one late read drops every reader's directory lease"),
            ));
        }
        if self.dead_after_us <= self.lease_us {
            return Err(self.invalid(
                "cluster.dead_after_us",
                self.dead_after_us,
                format!("must be more than lease_us = {}: a peer's marks may be cleared only after any lease it held has run out, so a node cut off from the others has stopped trusting its directory before they act as if it were gone", self.lease_us),
            ));
        }
        if self.transport_timeout_us >= self.dead_after_us {
            return Err(self.invalid(
                "cluster.transport_timeout_us",
                self.transport_timeout_us,
                format!("must be less than dead_after_us = {} (or 0 for the default): a request must be able to time out and be sent again before its peer is declared dead", self.dead_after_us),
            ));
        }
        if self.write_timeout_us <= self.dead_after_us {
            return Err(self.invalid(
                "cluster.write_timeout_us",
                self.write_timeout_us,
                format!("must be more than dead_after_us = {}: a write must outwait the failure detector, so that a holder that died is declared dead and the write goes on with the others instead of failing", self.dead_after_us),
            ));
        }
        Ok(())
    }

    /// The node with id `id` (`--node N`); an id not in the configuration is an error
    /// listing the ids there are.
    pub fn node(&self, id: u32) -> Result<&NodeConfig, ConfigError> {
        self.nodes.iter().find(|n| u32::from(n.id) == id).ok_or_else(|| {
            let mut ids: Vec<u8> = self.nodes.iter().map(|n| n.id).collect();
            ids.sort_unstable();
            ConfigError::UnknownNode {
                origin: self.origin.clone(),
                name: self.name.clone(),
                id,
                ids: ids.iter().map(u8::to_string).collect::<Vec<_>>().join(", "),
            }
        })
    }

    /// A stable hash of what all nodes must agree on: the first 8 bytes (little-endian)
    /// of SHA-256 over a canonical encoding of the name, k, m, quorum, every node's id
    /// and addresses (in id order), value_bytes_max, store_bytes, log_slots,
    /// invalidation and the four timings. Folders, the model and per-node choices
    /// (predictive, durability, outcome_entries, a verbs node's device, port and GID
    /// index, the retry counts) are left out: they may differ between nodes of one
    /// cluster.
    ///
    /// The encoding: `b"prescient-cluster-v2"`, then the name as u32 LE length and
    /// bytes, k, m, quorum and the node count as u32 LE, per node its id (u8), its
    /// fabric (on emu its listener's address, on verbs the byte 0x52) and its control
    /// address (an address is its family byte 4 or 6, the octets, the port
    /// as u16 LE, for IPv6 the scope id as u32 LE), then value_bytes_max, store_bytes,
    /// log_slots as u64 LE, the invalidation code (u8: 1 speculative, 2 after-commit,
    /// 3 none), and heartbeat_us, lease_us, dead_after_us, write_timeout_us as u64 LE;
    /// with `ordering = "sequencer"` then `b"sequencer"`, the sequencer, the number of
    /// shadows and the shadows (u8 each). `stamp_block` may differ between nodes.
    pub fn cluster_hash(&self) -> u64 {
        let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
        let u32_le = |v: usize| u32::try_from(v).unwrap_or(u32::MAX).to_le_bytes();
        ctx.update(b"prescient-cluster-v2");
        ctx.update(&u32_le(self.name.len()));
        ctx.update(self.name.as_bytes());
        for v in [self.k, self.m, self.quorum, self.nodes.len()] {
            ctx.update(&u32_le(v));
        }
        let mut order: Vec<&NodeConfig> = self.nodes.iter().collect();
        order.sort_by_key(|n| n.id);
        for node in order {
            ctx.update(&[node.id]);
            if node.role == Role::Cache {
                // Only for cache-only members, so a cluster of storage nodes hashes as
                // it always did.
                ctx.update(b"cache");
            }
            let fabric = match &node.fabric {
                NodeFabric::Emu(a) => Some(*a),
                NodeFabric::Verbs(_) => {
                    ctx.update(&[HASH_VERBS_NODE]);
                    None
                }
            };
            for address in fabric.into_iter().chain([node.control]) {
                match address {
                    SocketAddr::V4(a) => {
                        ctx.update(&[4]);
                        ctx.update(&a.ip().octets());
                        ctx.update(&a.port().to_le_bytes());
                    }
                    SocketAddr::V6(a) => hash_v6(&mut ctx, &a),
                }
            }
        }
        for v in [self.value_bytes_max, self.store_bytes, self.log_slots] {
            ctx.update(&(v as u64).to_le_bytes());
        }
        ctx.update(&[self.invalidation.code()]);
        for v in [self.heartbeat_us, self.lease_us, self.dead_after_us, self.write_timeout_us] {
            ctx.update(&v.to_le_bytes());
        }
        if let Ordering::Sequencer(s) = &self.ordering {
            // Only in sequencer mode, so an HLC cluster's hash is what it always was.
            ctx.update(b"sequencer");
            ctx.update(&[s.sequencer, s.shadows.len() as u8]);
            ctx.update(&s.shadows);
        }
        let digest = ctx.finish();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest.as_ref()[..8]);
        u64::from_le_bytes(first)
    }
}

/// Stands for a verbs node's fabric in the cluster hash, where an emu node has its
/// listener's address (whose family byte is 4 or 6): an emu and a verbs cluster that
/// agree on everything else still refuse each other.
const HASH_VERBS_NODE: u8 = 0x52;

fn hash_v6(ctx: &mut aws_lc_rs::digest::Context, a: &SocketAddrV6) {
    ctx.update(&[6]);
    ctx.update(&a.ip().octets());
    ctx.update(&a.port().to_le_bytes());
    ctx.update(&a.scope_id().to_le_bytes());
}

fn invalid(origin: &str, field: impl Into<String>, value: impl Display, allowed: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        origin: origin.to_owned(),
        field: field.into(),
        value: value.to_string(),
        allowed: allowed.into(),
    }
}

fn negative(origin: &str, field: &str, value: i64) -> ConfigError {
    invalid(origin, field, value, "must not be negative")
}

/// `path` as written, or under `base_dir` if relative.
fn resolve(base_dir: &Path, path: &str) -> PathBuf {
    if path.is_empty() {
        PathBuf::new() // refused by validate, not turned into base_dir itself
    } else {
        base_dir.join(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("cluster.example.toml");

    /// A folder laid out for the example: `conf/` (the file and its `keys/`), and the
    /// model at `models/shipped/OLTP.model` beside it.
    struct Fixture {
        root: PathBuf,
        conf: PathBuf,
    }

    impl Fixture {
        fn new(name: &str) -> Self {
            let root = std::env::temp_dir().join(format!("prescient-config-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            let conf = root.join("conf");
            std::fs::create_dir_all(conf.join("keys")).unwrap();
            std::fs::create_dir_all(root.join("models/shipped")).unwrap();
            std::fs::write(root.join("models/shipped/OLTP.model"), b"model").unwrap();
            Self { root, conf }
        }

        fn parse(&self, text: &str) -> Result<ClusterConfig, ConfigError> {
            ClusterConfig::parse(text, &self.conf)
        }

        /// The error of the example with `from` replaced by `to`.
        fn error_with(&self, from: &str, to: &str) -> String {
            assert!(EXAMPLE.contains(from), "{from:?} is not in the example");
            let text = EXAMPLE.replacen(from, to, 1);
            match self.parse(&text) {
                Ok(_) => panic!("accepted with {from:?} -> {to:?}"),
                Err(e) => e.to_string(),
            }
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    fn assert_names(err: &str, parts: &[&str]) {
        for part in parts {
            assert!(err.contains(part), "{err:?} does not say {part:?}");
        }
    }

    #[test]
    fn the_example_parses() {
        let fx = Fixture::new("example");
        let c = fx.parse(EXAMPLE).unwrap();
        assert_eq!((c.name.as_str(), c.k, c.m, c.quorum), ("demo", 3, 2, 4));
        assert_eq!(c.key_dir, fx.conf.join("keys"));
        assert_eq!(c.model.as_deref(), Some(fx.conf.join("../models/shipped/OLTP.model").as_path()));
        assert_eq!(
            (c.invalidation, c.predictive, c.durability),
            (Invalidation::Speculative, true, Durability::Process)
        );
        assert_eq!((c.value_bytes_max, c.store_bytes, c.log_slots, c.outcome_entries), (8192, 1 << 30, 256, 65536));
        assert_eq!((c.heartbeat_us, c.lease_us, c.dead_after_us, c.write_timeout_us), (1000, 20000, 50000, 2000000));
        assert!(!c.allow_unsafe_no_invalidation);
        assert_eq!(c.nodes.len(), 5);
        for (i, node) in c.nodes.iter().enumerate() {
            assert_eq!(usize::from(node.id), i);
            assert_eq!(node.fabric, NodeFabric::Emu(format!("127.0.0.1:{}", 7100 + i).parse().unwrap()));
            assert_eq!(node.control, format!("127.0.0.1:{}", 7200 + i).parse().unwrap());
            assert_eq!(node.data_dir, fx.conf.join(format!("data/node{i}")));
        }
        c.validate().unwrap();
    }

    #[test]
    fn load_resolves_paths_against_the_files_folder_and_names_the_file() {
        let fx = Fixture::new("load");
        let path = fx.conf.join("cluster.toml");
        std::fs::write(&path, EXAMPLE).unwrap();
        let c = ClusterConfig::load(&path).unwrap();
        assert_eq!(c.key_dir, fx.conf.join("keys"));
        assert_eq!(c.nodes[3].data_dir, fx.conf.join("data/node3"));
        assert_eq!(c, ClusterConfig { origin: c.origin.clone(), ..fx.parse(EXAMPLE).unwrap() });
        std::fs::write(&path, EXAMPLE.replace("quorum = 4", "quorum = 6")).unwrap();
        let err = ClusterConfig::load(&path).unwrap_err().to_string();
        assert_names(&err, &[&path.display().to_string(), "cluster.quorum = 6"]);
        let missing = fx.conf.join("absent.toml");
        let err = ClusterConfig::load(&missing).unwrap_err();
        assert!(matches!(err, ConfigError::Read { .. }));
        assert_names(&err.to_string(), &["absent.toml"]);
    }

    #[test]
    fn network_places_each_node_in_its_region_or_names_what_is_wrong() {
        let fx = Fixture::new("network");
        let with = |network: &str, last_region: &str| {
            let placed = (0..5).fold(EXAMPLE.to_owned(), |t, i| {
                let region = if i == 4 { last_region } else { "store" };
                t.replace(&format!("id = {i}\n"), &format!("id = {i}\nregion = \"{region}\"\n"))
            });
            let (head, nodes) = placed.split_once("[[node]]").unwrap();
            fx.parse(&format!("{head}{network}\n[[node]]{nodes}"))
        };
        let net = "[network]\ncongestion_control = \"swift\"\nregions = [\"store\", \"far\"]\n\
                   latency_us = [[500, 90000], [90000, 500]]\n";
        let c = with(net, "far").unwrap();
        assert_eq!(c.network.congestion, Congestion::Swift);
        assert_eq!((c.network.base_rtt_ns(0, 1), c.network.base_rtt_ns(1, 4)), (1_000_000, 180_000_000));
        let err = with(net, "mars").unwrap_err().to_string();
        assert_names(&err, &["[[node]] id = 4: region = \"mars\"", "network.regions"]);
        let err = with(&net.replace("[90000, 500]]", "[90001, 500]]"), "far").unwrap_err().to_string();
        assert_names(&err, &["network.latency_us", "symmetric"]);
    }

    #[test]
    fn a_node_may_be_a_cache_only_member_and_the_code_must_fit_the_storage_nodes() {
        let fx = Fixture::new("roles");
        let cache_4 = EXAMPLE.replace("id = 4\n", "id = 4\nrole = \"cache\"\n");
        assert_ne!(cache_4, EXAMPLE);
        let err = fx.parse(&cache_4).unwrap_err().to_string();
        assert_names(&err, &["cluster.k + cluster.m = 3 + 2", "4 of the 5 [[node]] entries store", "role = \"cache\""]);
        let c = fx.parse(&cache_4.replace("k = 3 ", "k = 2 ")).unwrap();
        assert_eq!((c.nodes[4].role, c.nodes[0].role), (Role::Cache, Role::Storage));
        assert_eq!(c.placement().storage(), &[0, 1, 2, 3]);
        let all = fx.parse(&EXAMPLE.replace("k = 3 ", "k = 2 ")).unwrap();
        assert_ne!(c.cluster_hash(), all.cluster_hash(), "a member's role is part of the cluster's identity");
        assert_eq!(all.placement(), crate::cluster::placement::Placement::all_storage(5));
        let err = fx.parse(&EXAMPLE.replace("id = 2\n", "id = 2\nrole = \"mirror\"\n")).unwrap_err().to_string();
        assert_names(&err, &["[[node]] id = 2: role = \"mirror\"", "\"storage\"", "\"cache\""]);
    }

    #[test]
    fn nodes_are_in_id_order_whatever_the_file_order() {
        let fx = Fixture::new("order");
        let (head, nodes) = EXAMPLE.split_once("[[node]]").unwrap();
        let mut entries: Vec<&str> = nodes.split("[[node]]").collect();
        entries.reverse();
        let text = format!("{head}[[node]]{}", entries.join("[[node]]"));
        let c = fx.parse(&text).unwrap();
        assert!(c.nodes.iter().enumerate().all(|(i, n)| usize::from(n.id) == i));
        assert_eq!(c.cluster_hash(), fx.parse(EXAMPLE).unwrap().cluster_hash());
    }

    #[test]
    fn optional_fields_take_the_example_values() {
        let fx = Fixture::new("defaults");
        let required =
            ["name", "k ", "m ", "quorum", "key_dir", "[[node]]", "id ", "fabric", "control", "data_dir", "[cluster]"];
        let text: String = EXAMPLE
            .lines()
            .filter(|l| l.is_empty() || required.iter().any(|r| l.starts_with(r)))
            .map(|l| format!("{l}\n"))
            .collect();
        let c = fx.parse(&text).unwrap();
        let full = fx.parse(EXAMPLE).unwrap();
        assert_eq!(c.model, None);
        assert_eq!(c, ClusterConfig { model: None, origin: c.origin.clone(), ..full });
    }

    #[test]
    fn lease_tuning_follows_the_policy_and_is_refused_without_leases() {
        let fx = Fixture::new("tuning");
        let c = fx.parse(EXAMPLE).unwrap();
        assert_eq!((c.lease_tuning, c.tunes_leases()), (None, true), "on by default where leases run");
        let set = |v: &str| EXAMPLE.replace("# lease_tuning = false", &format!("lease_tuning = {v}"));
        assert!(!fx.parse(&set("false")).unwrap().tunes_leases());
        let after_commit = |text: String| text.replace("\"speculative\"", "\"after-commit\"");
        assert!(!fx.parse(&after_commit(EXAMPLE.into())).unwrap().tunes_leases(), "no leases, nothing to tune");
        let err = fx.parse(&after_commit(set("true"))).unwrap_err().to_string();
        assert_names(&err, &["cluster.lease_tuning = true", "speculative", "predictive = true"]);
        let err = fx.parse(&set("true").replace("predictive = true", "predictive = false")).unwrap_err().to_string();
        assert_names(&err, &["cluster.lease_tuning = true"]);
        let err = fx.parse(&set("1")).unwrap_err().to_string();
        assert_names(&err, &["lease_tuning"]);
    }

    #[test]
    fn unknown_fields_and_wrong_types_are_refused() {
        let fx = Fixture::new("syntax");
        let err = fx.error_with("k = 3 ", "kk = 3\nk = 3 ");
        assert_names(&err, &["unknown field", "kk"]);
        let err = fx.error_with("data_dir = \"data/node0\"", "data_dir = \"data/node0\"\nweight = 2");
        assert_names(&err, &["unknown field", "weight"]);
        let err = fx.error_with("[cluster]", "[clusterr]");
        assert_names(&err, &["clusterr"]);
        let err = fx.error_with("k = 3 ", "k = \"three\" ");
        assert_names(&err, &["line 3", "k = \"three\"", "expected i64"]);
        let err = fx.error_with("name = \"demo\"", "");
        assert_names(&err, &["missing field", "name"]);
    }

    #[test]
    fn the_code_rules_name_their_field() {
        let fx = Fixture::new("code");
        assert_names(&fx.error_with("name = \"demo\"", "name = \"\""), &["cluster.name = \"\"", "1 to 64"]);
        assert_names(&fx.error_with("name = \"demo\"", "name = \"de mo\""), &["cluster.name = \"de mo\""]);
        assert_names(&fx.error_with("k = 3 ", "k = 0 "), &["cluster.k = 0", "at least 1"]);
        assert_names(&fx.error_with("k = 3 ", "k = -3 "), &["cluster.k = -3", "negative"]);
        assert_names(&fx.error_with("m = 2 ", "m = 0 "), &["cluster.m = 0", "at least 1"]);
        assert_names(&fx.error_with("m = 2 ", "m = 3 "), &["cluster.k + cluster.m = 3 + 3 = 6", "5 [[node]] entries"]);
        let err = fx.error_with("quorum = 4 ", "quorum = 2 ");
        assert_names(&err, &["cluster.quorum = 2", "max(k, m + 1) = 3", "k + m = 5", "at most m = 2 nodes down"]);
        assert_names(&fx.error_with("quorum = 4 ", "quorum = 6 "), &["cluster.quorum = 6", "between"]);
        // m + 1 can be the binding lower bound: k = 1, m = 3 needs a quorum of 4.
        let err = fx.error_with("k = 3 ", "k = 1 ");
        assert_names(&err, &["cluster.quorum = 4", "k + m = 3"]);
        let mut c = fx.parse(EXAMPLE).unwrap();
        (c.k, c.m, c.quorum) = (1, 3, 3);
        assert_names(&c.validate().unwrap_err().to_string(), &["cluster.quorum = 3", "max(k, m + 1) = 4"]);
        c.quorum = 4;
        c.validate().unwrap();
        // More fragments than a stripe carries, with enough nodes.
        let mut c = ClusterConfig::in_process(32, 30, 3, &fx.conf);
        c.quorum = 31;
        assert_names(&c.validate().unwrap_err().to_string(), &["cluster.k + cluster.m = 30 + 3 = 33", "at most 32"]);
    }

    #[test]
    fn the_node_rules_name_their_field() {
        let fx = Fixture::new("nodes");
        let mut c = ClusterConfig::in_process(0, 1, 1, &fx.conf);
        assert_names(&c.validate().unwrap_err().to_string(), &["[[node]] entries = 0", "1 to 32"]);
        c = ClusterConfig::in_process(33, 3, 2, &fx.conf);
        assert_names(&c.validate().unwrap_err().to_string(), &["[[node]] entries = 33", "6-bit writer"]);
        assert_names(&fx.error_with("id = 4", "id = 5"), &["[[node]] #5 id = 5", "exactly 0..4"]);
        assert_names(&fx.error_with("id = 4", "id = 2"), &["[[node]] #5 id = 2", "earlier [[node]]"]);
        assert_names(&fx.error_with("id = 4", "id = -1"), &["[[node]] #5 id = -1", "0..n-1"]);
        assert_names(&fx.error_with("id = 4", "id = 300"), &["[[node]] #5 id = 300"]);
        let err = fx.error_with("\"127.0.0.1:7103\"", "\"localhost:7103\"");
        assert_names(&err, &["[[node]] id = 3: fabric = \"localhost:7103\"", "IP address and port"]);
        let err = fx.error_with("\"127.0.0.1:7203\"", "\"127.0.0.1\"");
        assert_names(&err, &["[[node]] id = 3: control = \"127.0.0.1\""]);
        let err = fx.error_with("\"127.0.0.1:7203\"", "\"127.0.0.1:7101\"");
        assert_names(&err, &["[[node]] id = 3: control = \"127.0.0.1:7101\"", "also [[node]] id = 1: fabric"]);
        let err = fx.error_with("\"127.0.0.1:7104\"", "\"127.0.0.1:7204\"");
        assert_names(&err, &["[[node]] id = 4: control = \"127.0.0.1:7204\"", "also [[node]] id = 4: fabric"]);
        let err = fx.error_with("\"127.0.0.1:7104\"", "\"[::1]:0\"");
        assert_names(&err, &["[[node]] id = 4: fabric = \"[::1]:0\"", "port other than 0"]);
        let err = fx.error_with("\"data/node4\"", "\"data/./node1\"");
        assert_names(&err, &["[[node]] id = 4: data_dir", "node1", "data_dir of node 1"]);
        let err = fx.error_with("\"data/node4\"", "\"\"");
        assert_names(&err, &["[[node]] id = 4: data_dir = \"\""]);
        assert_names(&fx.error_with("data_dir = \"data/node4\"", ""), &["missing field", "data_dir"]);
    }

    #[test]
    fn the_path_rules_name_their_field() {
        let fx = Fixture::new("paths");
        let err = fx.error_with("\"keys\"", "\"no-keys\"");
        assert_names(&err, &["cluster.key_dir = ", "no-keys", "existing folder"]);
        std::fs::write(fx.conf.join("a-file"), b"").unwrap();
        assert_names(&fx.error_with("\"keys\"", "\"a-file\""), &["cluster.key_dir = ", "a-file", "not a folder"]);
        let err = fx.error_with("\"../models/shipped/OLTP.model\"", "\"../models/shipped/KV.model\"");
        assert_names(&err, &["cluster.model = ", "KV.model", "existing model file"]);
        assert_names(
            &fx.error_with("\"../models/shipped/OLTP.model\"", "\"keys\""),
            &["cluster.model = ", "not a file"],
        );
        // Absolute paths stay as written.
        let keys = fx.conf.join("keys").display().to_string();
        let c = fx.parse(&EXAMPLE.replace("\"keys\"", &format!("{keys:?}"))).unwrap();
        assert_eq!(c.key_dir, fx.conf.join("keys"));
    }

    #[test]
    fn the_mode_rules_name_their_field() {
        let fx = Fixture::new("modes");
        let err = fx.error_with("\"speculative\"", "\"none\"");
        assert_names(&err, &["cluster.invalidation = \"none\"", "allow_unsafe_no_invalidation = true"]);
        let text = EXAMPLE
            .replace("\"speculative\"", "\"none\"")
            .replace("allow_unsafe_no_invalidation = false", "allow_unsafe_no_invalidation = true");
        assert_eq!(fx.parse(&text).unwrap().invalidation, Invalidation::None);
        let text = EXAMPLE.replace("\"speculative\"", "\"after-commit\"").replace("\"process\"", "\"sync\"");
        let c = fx.parse(&text).unwrap();
        assert_eq!((c.invalidation, c.durability), (Invalidation::AfterCommit, Durability::Sync));
        assert_names(
            &fx.error_with("\"speculative\"", "\"eager\""),
            &["cluster.invalidation = \"eager\"", "after-commit"],
        );
        assert_names(&fx.error_with("\"process\"", "\"fsync\""), &["cluster.durability = \"fsync\"", "\"sync\""]);
    }

    #[test]
    fn the_size_rules_name_their_field() {
        let fx = Fixture::new("sizes");
        let cases: [(&str, &str, &[&str]); 14] = [
            ("value_bytes_max = 8192", "value_bytes_max = 0", &["cluster.value_bytes_max = 0", "64 MiB"]),
            ("value_bytes_max = 8192", "value_bytes_max = 67108865", &["cluster.value_bytes_max = 67108865"]),
            ("store_bytes = 1073741824", "store_bytes = 16383", &["cluster.store_bytes = 16383", "16 KiB"]),
            (
                "store_bytes = 1073741824",
                "store_bytes = 1099511627777",
                &["cluster.store_bytes = 1099511627777", "1 TiB"],
            ),
            ("log_slots = 256", "log_slots = 4", &["cluster.log_slots = 4", "power of two from 8 to 65536"]),
            ("log_slots = 256", "log_slots = 300", &["cluster.log_slots = 300"]),
            ("log_slots = 256", "log_slots = 131072", &["cluster.log_slots = 131072"]),
            ("outcome_entries = 65536", "outcome_entries = 512", &["cluster.outcome_entries = 512", "from 1024"]),
            ("fate_entries = 65536", "fate_entries = 4", &["cluster.fate_entries = 4", "from 8"]),
            ("fate_entries = 65536", "fate_entries = 100", &["cluster.fate_entries = 100", "power of two"]),
            ("feed_entries = 65536", "feed_entries = 4", &["cluster.feed_entries = 4", "from 8"]),
            ("feed_entries = 65536", "feed_entries = 100", &["cluster.feed_entries = 100", "power of two"]),
            ("outcome_entries = 65536", "outcome_entries = 65535", &["cluster.outcome_entries = 65535"]),
            ("outcome_entries = 65536", "outcome_entries = 2097152", &["cluster.outcome_entries = 2097152", "2^20"]),
        ];
        for (from, to, parts) in cases {
            assert_names(&fx.error_with(from, to), parts);
        }
        // The edges are allowed.
        let text = EXAMPLE
            .replace("value_bytes_max = 8192", "value_bytes_max = 67108864")
            .replace("store_bytes = 1073741824", "store_bytes = 16384")
            .replace("log_slots = 256", "log_slots = 8")
            .replace("outcome_entries = 65536", "outcome_entries = 1048576");
        fx.parse(&text).unwrap();
    }

    #[test]
    fn the_timing_rules_name_their_field_and_say_why() {
        let fx = Fixture::new("timings");
        let cases: [(&str, &str, &[&str]); 7] = [
            (
                "transport_timeout_us = 0",
                "transport_timeout_us = 50000",
                &["cluster.transport_timeout_us = 50000", "dead_after_us = 50000", "sent again"],
            ),
            ("heartbeat_us = 1000", "heartbeat_us = 99", &["cluster.heartbeat_us = 99", "at least 100"]),
            (
                "lease_us = 20000",
                "lease_us = 3999",
                &["cluster.lease_us = 3999", "4 * heartbeat_us = 4000", "late read"],
            ),
            (
                "dead_after_us = 50000",
                "dead_after_us = 20000",
                &["cluster.dead_after_us = 20000", "lease_us = 20000", "stopped trusting"],
            ),
            (
                "write_timeout_us = 2000000",
                "write_timeout_us = 50000",
                &["cluster.write_timeout_us = 50000", "dead_after_us = 50000", "failure detector"],
            ),
            (
                "write_timeout_us = 2000000",
                "write_timeout_us = 3600000001",
                &["cluster.write_timeout_us = 3600000001", "one hour"],
            ),
            ("lease_us = 20000", "lease_us = -1", &["cluster.lease_us = -1", "negative"]),
        ];
        for (from, to, parts) in cases {
            assert_names(&fx.error_with(from, to), parts);
        }
        let text = EXAMPLE
            .replace("heartbeat_us = 1000", "heartbeat_us = 100")
            .replace("lease_us = 20000", "lease_us = 400")
            .replace("dead_after_us = 50000", "dead_after_us = 401")
            .replace("write_timeout_us = 2000000", "write_timeout_us = 402");
        fx.parse(&text).unwrap();
    }

    #[test]
    fn an_unknown_node_lists_the_ids_there_are() {
        let fx = Fixture::new("node");
        let c = fx.parse(EXAMPLE).unwrap();
        assert_eq!(c.node(3).unwrap().fabric, NodeFabric::Emu("127.0.0.1:7103".parse().unwrap()));
        let err = c.node(5).unwrap_err().to_string();
        assert_names(&err, &["--node 5", "\"demo\"", "0, 1, 2, 3, 4"]);
        assert!(c.node(u32::MAX).is_err());
    }

    #[test]
    fn one_node_is_the_degenerate_cluster_rs_1_0_with_quorum_1() {
        let fx = Fixture::new("one-node");
        let c = ClusterConfig::single_node(fx.root.join("data"), fx.conf.join("keys"), None, 3712, 1 << 24);
        c.validate().unwrap();
        assert_eq!((c.nodes.len(), c.k, c.m, c.quorum, c.predictive), (1, 1, 0, 1, false));
        assert_eq!(c.nodes[0].data_dir, fx.root.join("data"));
        assert_eq!(c.heartbeat_us, prescient_shim::config::HEARTBEAT_PERIOD_US);
        // Parity needs a second node; and with two nodes, m = 0 loses data with one.
        let mut c = ClusterConfig::in_process(1, 1, 1, &fx.conf);
        assert_names(&c.validate().unwrap_err().to_string(), &["cluster.k + cluster.m = 1 + 1 = 2", "1 [[node]]"]);
        c = ClusterConfig::in_process(2, 1, 0, &fx.conf);
        c.quorum = 1;
        assert_names(&c.validate().unwrap_err().to_string(), &["cluster.m = 0", "at least 1 parity"]);
    }

    #[test]
    fn the_in_process_builder_is_valid_and_runs_the_same_checks() {
        let fx = Fixture::new("builder");
        for (n, k, m, quorum) in [(2, 1, 1, 2), (5, 3, 2, 4), (8, 4, 4, 5), (32, 16, 16, 17), (4, 1, 3, 4)] {
            let c = ClusterConfig::in_process(n, k, m, &fx.conf);
            assert_eq!(c.quorum, quorum, "({k}, {m})");
            c.validate().unwrap_or_else(|e| panic!("({n}, {k}, {m}): {e}"));
        }
        let mut c = ClusterConfig::in_process(5, 3, 2, &fx.conf);
        c.nodes[2].control = c.nodes[0].control;
        assert_names(&c.validate().unwrap_err().to_string(), &["in-process cluster", "[[node]] id = 2: control"]);
        let mut c = ClusterConfig::in_process(5, 3, 2, &fx.root.join("elsewhere"));
        assert_names(&c.validate().unwrap_err().to_string(), &["cluster.key_dir"]);
        c.key_dir = fx.conf.join("keys");
        c.validate().unwrap();
    }

    #[test]
    fn the_cluster_hash_covers_what_nodes_share_and_only_that() {
        let fx = Fixture::new("hash");
        let base = fx.parse(EXAMPLE).unwrap();
        // Pinned: computed from the documented encoding by an independent script; a
        // change here means nodes of two builds would refuse each other.
        assert_eq!(base.cluster_hash(), 0xb8da_9018_88bb_9271);
        let hash = |f: &dyn Fn(&mut ClusterConfig)| {
            let mut c = base.clone();
            f(&mut c);
            c.cluster_hash()
        };
        let same: [&dyn Fn(&mut ClusterConfig); 9] = [
            &|c| c.origin = "elsewhere".into(),
            &|c| c.key_dir = "/other/keys".into(),
            &|c| c.model = None,
            &|c| c.nodes[1].data_dir = "/other/data".into(),
            &|c| c.predictive = false,
            &|c| c.durability = Durability::Sync,
            &|c| c.outcome_entries = 1024,
            &|c| c.retry_count = 7,
            &|c| c.rnr_retry_count = 0,
        ];
        for change in same {
            assert_eq!(hash(change), base.cluster_hash());
        }
        let different: [&dyn Fn(&mut ClusterConfig); 14] = [
            &|c| c.name = "demo2".into(),
            &|c| c.k = 2,
            &|c| c.m = 3,
            &|c| c.quorum = 5,
            &|c| c.nodes[4].fabric = NodeFabric::Emu("127.0.0.1:7999".parse().unwrap()),
            &|c| c.nodes[0].control = "[::1]:7200".parse().unwrap(),
            &|c| c.nodes.truncate(4),
            &|c| c.value_bytes_max = 4096,
            &|c| c.store_bytes = 1 << 14,
            &|c| c.log_slots = 512,
            &|c| c.invalidation = Invalidation::AfterCommit,
            &|c| c.heartbeat_us = 999,
            &|c| c.dead_after_us = 50_001,
            &|c| c.write_timeout_us = 1_999_999,
        ];
        let mut seen = vec![base.cluster_hash()];
        for change in different {
            let h = hash(change);
            assert!(!seen.contains(&h), "a change left the hash at {h:#x}");
            seen.push(h);
        }
        assert_ne!(hash(&|c| c.lease_us = 20_001), base.cluster_hash());
        // Swapping two nodes' addresses is a different cluster.
        assert_ne!(
            hash(&|c| {
                let fabric = c.nodes[0].fabric.clone();
                c.nodes[0].fabric = c.nodes[1].fabric.clone();
                c.nodes[1].fabric = fabric;
            }),
            base.cluster_hash()
        );
    }

    /// The example turned into a verbs cluster: each node's listener replaced by `device`.
    fn verbs_example(device: impl Fn(usize) -> String) -> String {
        let mut text = EXAMPLE.replacen("fabric = \"emu\"", "fabric = \"verbs\"", 1);
        for i in 0..5 {
            let line = format!("fabric = \"127.0.0.1:{}\"", 7100 + i);
            let start = text.find(&line).unwrap();
            let end = start + text[start..].find('\n').unwrap();
            text.replace_range(start..end, &device(i));
        }
        text
    }

    #[test]
    fn a_verbs_cluster_names_each_nodes_device() {
        let fx = Fixture::new("verbs");
        let c = fx.parse(&verbs_example(|i| format!("device = \"mlx5_{i}\"\ndevice_port = 1\ngid_index = 3"))).unwrap();
        assert_eq!(c.fabric, FabricKind::Verbs);
        for (i, node) in c.nodes.iter().enumerate() {
            let device = VerbsDevice { name: format!("mlx5_{i}"), port: 1, gid_index: Some(3) };
            assert_eq!(node.fabric, NodeFabric::Verbs(device));
        }
        // Port and GID index may be left out: port 1, a RoCEv2 IPv4 GID chosen at start.
        let c = fx.parse(&verbs_example(|_| "device = \"rxe0\"".to_owned())).unwrap();
        let device = VerbsDevice { name: "rxe0".to_owned(), port: DEFAULT_DEVICE_PORT, gid_index: None };
        assert_eq!(c.nodes[2].fabric, NodeFabric::Verbs(device));
        // The default is emu, and the example says nothing else.
        assert_eq!(fx.parse(EXAMPLE).unwrap().fabric, FabricKind::Emu);
        // Everything else equal, an emu and a verbs cluster refuse each other; the
        // device names are each node's own.
        let other = fx.parse(&verbs_example(|_| "device = \"rxe1\"".to_owned())).unwrap();
        assert_eq!(c.cluster_hash(), other.cluster_hash());
        assert_ne!(c.cluster_hash(), fx.parse(EXAMPLE).unwrap().cluster_hash());
    }

    #[test]
    fn the_fabric_fields_are_checked_against_the_kind() {
        let fx = Fixture::new("verbs-errors");
        let err = fx.error_with("fabric = \"emu\"", "fabric = \"ib\"");
        assert_names(&err, &["cluster.fabric = \"ib\"", "\"emu\"", "\"verbs\""]);
        // An emu node with a device, or without a listener.
        let err = fx.error_with("data_dir = \"data/node1\"", "data_dir = \"data/node1\"\ndevice = \"rxe0\"");
        assert_names(&err, &["[[node]] id = 1: device", "fabric = \"verbs\""]);
        let err = fx.error_with("fabric = \"127.0.0.1:7102\"", "");
        assert_names(&err, &["[[node]] id = 2: fabric = (missing)", "listener"]);
        // A verbs node without a device, or with a listener.
        let text = verbs_example(|i| if i == 3 { String::new() } else { "device = \"rxe0\"".to_owned() });
        assert_names(
            &fx.parse(&text).unwrap_err().to_string(),
            &["[[node]] id = 3: device = (missing)", "ibv_devices"],
        );
        let text = verbs_example(|i| {
            if i == 4 {
                "device = \"rxe0\"\nfabric = \"127.0.0.1:7104\"".to_owned()
            } else {
                "device = \"rxe0\"".to_owned()
            }
        });
        assert_names(
            &fx.parse(&text).unwrap_err().to_string(),
            &["[[node]] id = 4: fabric = \"127.0.0.1:7104\"", "remove it"],
        );
        let text = verbs_example(|i| format!("device = \"rxe0\"\ndevice_port = {}", if i == 0 { 0 } else { 1 }));
        assert_names(&fx.parse(&text).unwrap_err().to_string(), &["[[node]] id = 0: device_port = 0", "from 1"]);
        let text = verbs_example(|i| format!("device = \"rxe0\"\ngid_index = {}", if i == 1 { 300 } else { 1 }));
        assert_names(&fx.parse(&text).unwrap_err().to_string(), &["[[node]] id = 1: gid_index = 300", "GID table"]);
        let text = verbs_example(|i| if i == 2 { "device = \"\"".to_owned() } else { "device = \"rxe0\"".to_owned() });
        assert_names(&fx.parse(&text).unwrap_err().to_string(), &["[[node]] id = 2: device = \"\""]);
        // A configuration built in code whose nodes are not on the cluster's fabric.
        let mut c = fx.parse(EXAMPLE).unwrap();
        c.fabric = FabricKind::Verbs;
        assert_names(&c.validate().unwrap_err().to_string(), &["[[node]] id = 0: fabric", "same fabric"]);
    }

    #[test]
    fn retry_counts_default_and_are_bounded() {
        let fx = Fixture::new("retries");
        let c = fx.parse(EXAMPLE).unwrap();
        assert_eq!((c.retry_count, c.rnr_retry_count), (DEFAULT_RETRY_COUNT, DEFAULT_RNR_RETRY_COUNT));
        let text = EXAMPLE.replacen("retry_count = 2 ", "retry_count = 7 ", 1).replacen(
            "rnr_retry_count = 3",
            "rnr_retry_count = 6",
            1,
        );
        let c = fx.parse(&text).unwrap();
        assert_eq!((c.retry_count, c.rnr_retry_count), (7, 6));
        let err = fx.error_with("retry_count = 2 ", "retry_count = 8 ");
        assert_names(&err, &["cluster.retry_count = 8", "0 to 7"]);
        let err = fx.error_with("rnr_retry_count = 3", "rnr_retry_count = 7");
        assert_names(&err, &["cluster.rnr_retry_count = 7", "0 to 6", "forever"]);
        let err = fx.error_with("rnr_retry_count = 3", "rnr_retry_count = -1");
        assert_names(&err, &["cluster.rnr_retry_count = -1"]);
    }
}
