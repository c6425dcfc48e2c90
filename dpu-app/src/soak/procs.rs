//! The soak's cluster: one `prescient-dpu serve --config` process per node, each
//! serving a host region this process creates and hosts, started, killed with SIGKILL
//! and restarted from their files. Each node logs warnings to its file in the run's
//! folder; `PRESCIENT_NODE_LOG` (a `RUST_LOG` filter, e.g.
//! `info,prescient_dpu::cluster::protocol::peer=debug`) logs more.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prescient_shim::{Host, HostOptions, RegionConfig};

use super::SoakOptions;
use crate::cluster::config::ClusterConfig;

fn io(what: &str, p: &Path, e: std::io::Error) -> String {
    format!("cannot {what} {}: {e}", p.display())
}

/// Region sizes that carry 4 KiB values striped in place, with a DPU buffer per write
/// in flight and a second queue pair for the checker's reads.
fn region_config() -> RegionConfig {
    RegionConfig {
        queue_pairs: 2,
        ring_entries: 256,
        host_buffers: 512,
        dpu_buffers: 72,
        buffer_bytes: 8192,
        directory_slots: 4096,
    }
}

/// The node processes this process runs: every node of a cluster whose file it wrote,
/// or, as one site of a cluster spread over machines, the nodes the site names. Every
/// process is killed on drop, and the folder removed. Indexes (`hosts[i]`, `spawn(i)`)
/// count the nodes run here; [`ProcessCluster::id`] gives a node's id in the cluster.
pub struct ProcessCluster {
    dir: PathBuf,
    config: PathBuf,
    binary: PathBuf,
    /// The cluster id of each node run here.
    ids: Vec<u8>,
    /// Nodes in the whole cluster.
    nodes: usize,
    regions: Vec<PathBuf>,
    /// Each node's host.
    pub hosts: Vec<Arc<Host>>,
    children: Vec<Option<Child>>,
    /// How many times each node was started (names its log files).
    starts: Vec<u32>,
    /// Leave the folder (its node logs) behind when dropped.
    keep_logs: bool,
}

fn free_ports(count: usize) -> Result<Vec<u16>, String> {
    let listeners = (0..count)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("cannot find free loopback ports: {e}"))?;
    listeners.iter().map(|l| l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())).collect()
}

/// The timings of a process cluster's file (microseconds) and any `[cluster]` lines
/// to add (each ending in a newline).
#[derive(Clone, Debug)]
pub struct Tuning {
    /// `heartbeat_us`.
    pub heartbeat_us: u64,
    /// `lease_us`.
    pub lease_us: u64,
    /// `dead_after_us`.
    pub dead_after_us: u64,
    /// `write_timeout_us`.
    pub write_timeout_us: u64,
    /// `transport_timeout_us`.
    pub transport_timeout_us: u64,
    /// More `[cluster]` lines.
    pub extra: String,
}

impl Tuning {
    /// The soak's: a peer dead after 500 ms of silence (a loaded machine's emulated
    /// fabric between processes answers late, never loses).
    pub fn soak() -> Self {
        Self {
            heartbeat_us: 1_000,
            lease_us: 20_000,
            dead_after_us: 500_000,
            write_timeout_us: 3_000_000,
            transport_timeout_us: 50_000,
            extra: String::new(),
        }
    }
}

impl ProcessCluster {
    /// Starts the cluster `opts` asks for: as one site of the cluster file it names
    /// (`opts.site`), or every node of a cluster file and key this writes.
    pub fn start(opts: &SoakOptions) -> Result<Self, String> {
        let mut tuning = Tuning::soak();
        if opts.sequencer {
            tuning.extra.push_str(super::SEQUENCER_LINES);
        }
        Self::start_tuned(opts, &tuning)
    }

    /// [`ProcessCluster::start`] with `tuning`'s timings and lines in the file it
    /// writes (a site's cluster file is taken as it is).
    pub fn start_tuned(opts: &SoakOptions, tuning: &Tuning) -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!("prescient-soak-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| io("create", &dir, e))?;
        let (config, ids, nodes) = match &opts.site {
            Some(site) => {
                let cluster = ClusterConfig::load(&site.config).map_err(|e| e.to_string())?;
                (site.config.clone(), site.here.clone(), cluster.nodes.len())
            }
            None => {
                let n = opts.nodes as usize;
                (Self::write_cluster_file(opts, tuning, &dir)?, (0..n as u8).collect(), n)
            }
        };
        let mut regions = Vec::new();
        let mut hosts = Vec::new();
        for &id in &ids {
            let path = std::path::Path::new("/dev/shm").join(format!("prescient-soak-{}-{id}", std::process::id()));
            let _ = std::fs::remove_file(&path);
            let options = HostOptions { pin: false, dpu_timeout: Duration::from_secs(2) };
            let host = Host::create(&path, region_config(), options).map_err(|e| e.to_string())?;
            regions.push(path);
            hosts.push(host);
        }
        let here = ids.len();
        let mut c = Self {
            dir,
            config,
            binary: opts.dpu_binary.clone(),
            ids,
            nodes,
            regions,
            hosts,
            children: (0..here).map(|_| None).collect(),
            starts: vec![0; here],
            keep_logs: opts.site.is_some(),
        };
        for i in 0..here {
            c.spawn(i)?;
        }
        Ok(c)
    }

    /// The folder of the node logs (`node<ID>-<START>.log`).
    pub fn log_dir(&self) -> &Path {
        &self.dir
    }

    /// Keeps the folder (node logs, data folders) when the cluster is dropped: a run
    /// that found a problem leaves it for whoever looks into it.
    pub fn keep_logs(&mut self) {
        self.keep_logs = true;
    }

    /// The cluster id of the node run here at index `i`.
    pub fn id(&self, i: usize) -> u8 {
        self.ids[i]
    }

    /// Nodes in the whole cluster (those of other sites included).
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// Writes a cluster file of `opts.nodes` nodes on loopback, and its key, into `dir`.
    fn write_cluster_file(opts: &SoakOptions, tuning: &Tuning, dir: &Path) -> Result<PathBuf, String> {
        let n = opts.nodes as usize;
        std::fs::create_dir_all(dir.join("keys")).map_err(|e| io("create", dir, e))?;
        let key = dir.join("keys/1.key");
        std::fs::write(&key, [0x42u8; 32]).map_err(|e| io("write", &key, e))?;
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .map_err(|e| io("chmod", &key, e))?;
        let ports = free_ports(2 * n)?;
        // Every node holds a fragment of every key of every writer: room for twice them
        // at half load
        // (versions in flight).
        let (k, m) = (n - opts.m as usize, opts.m as usize);
        let sizing = crate::cluster::config::ClusterConfig {
            value_bytes_max: 4096,
            ..crate::cluster::config::ClusterConfig::in_process(n, k, m, dir)
        };
        let store_bytes =
            crate::cluster::protocol::node::store_bytes_for_keys(&sizing, 2 * u64::from(opts.keys) * n as u64)
                .map_err(|e| format!("cannot size the stores: {e}"))?;
        let mut toml = format!(
            "[cluster]\nname = \"soak\"\nk = {k}\nm = {m}\nquorum = {q}\nkey_dir = \"keys\"\n\
             invalidation = \"speculative\"\npredictive = false\nvalue_bytes_max = 4096\nstore_bytes = {store_bytes}\n\
             log_slots = 128\noutcome_entries = 65536\nheartbeat_us = {}\nlease_us = {}\n\
             dead_after_us = {}\nwrite_timeout_us = {}\ntransport_timeout_us = {}\n{}",
            tuning.heartbeat_us,
            tuning.lease_us,
            tuning.dead_after_us,
            tuning.write_timeout_us,
            tuning.transport_timeout_us,
            tuning.extra,
            k = n - opts.m as usize,
            m = opts.m,
            q = opts.quorum(),
        );
        if opts.verbs.is_some() {
            toml.push_str("fabric = \"verbs\"\n");
        }
        for (i, p) in ports.chunks(2).enumerate() {
            let fabric = match &opts.verbs {
                None => format!("fabric = \"127.0.0.1:{}\"\n", p[0]),
                Some(d) => {
                    let gid = d.gid_index.map(|g| format!("gid_index = {g}\n")).unwrap_or_default();
                    format!("device = \"{}\"\ndevice_port = {}\n{gid}", d.name, d.port)
                }
            };
            toml.push_str(&format!(
                "\n[[node]]\nid = {i}\n{fabric}control = \"127.0.0.1:{}\"\ndata_dir = \"node{i}\"\n",
                p[1]
            ));
        }
        let config = dir.join("cluster.toml");
        std::fs::write(&config, toml).map_err(|e| io("write", &config, e))?;
        Ok(config)
    }

    /// The data folder of the node run here at index `i`, in a cluster file this
    /// wrote (a site's file names its own folders).
    pub fn data_dir(&self, i: usize) -> PathBuf {
        self.dir.join(format!("node{}", self.ids[i]))
    }

    /// Whether node `i`'s DPU app runs.
    pub fn is_running(&self, i: usize) -> bool {
        self.children[i].is_some()
    }

    fn log_path(&self, i: usize, start: u32) -> PathBuf {
        self.dir.join(format!("node{}-{start}.log", self.ids[i]))
    }

    /// Starts node `i`'s DPU app (again, from its files).
    pub fn spawn(&mut self, i: usize) -> Result<(), String> {
        if self.children[i].is_some() {
            return Ok(());
        }
        self.starts[i] += 1;
        let log = self.log_path(i, self.starts[i]);
        let file = File::create(&log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let err = file.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new(&self.binary)
            .args(["serve", "--emulate", "--no-pin", "--region"])
            .arg(&self.regions[i])
            .arg("--config")
            .arg(&self.config)
            .args(["--node", &self.ids[i].to_string()])
            .env("RUST_LOG", node_log_filter())
            .stdout(file)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.binary.display()))?;
        self.children[i] = Some(child);
        Ok(())
    }

    /// Kills node `i`'s DPU app with SIGKILL (a crash) and reaps it.
    pub fn kill9(&mut self, i: usize) {
        if let Some(mut c) = self.children[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops every node with SIGTERM (a clean stop) and waits for them.
    pub fn stop_all(&mut self) {
        for c in self.children.iter_mut() {
            if let Some(mut c) = c.take() {
                let _ = prescient_shim::sys::terminate(c.id());
                let deadline = Instant::now() + Duration::from_secs(10);
                while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
                    std::thread::sleep(Duration::from_millis(10));
                }
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }

    /// Waits until every node running here reaches every other running one (every
    /// node of another site counts as running) and, with all of them running, every
    /// directory lease is valid.
    pub fn wait_connected(&self, limit: Duration) -> bool {
        let all = u32::MAX >> (32 - self.nodes);
        let stopped =
            (0..self.ids.len()).filter(|&i| self.children[i].is_none()).fold(0u32, |m, i| m | 1 << self.ids[i]);
        let running = all & !stopped;
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            let now = prescient_shim::sys::monotonic_ns();
            let ok = (0..self.ids.len()).filter(|&i| self.children[i].is_some()).all(|i| {
                self.hosts[i].cluster_peers_up() & running == running
                    && (running != all || self.hosts[i].lease_valid(now))
            });
            if ok {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// The last lines each node's current log holds, for an error message.
    pub fn log_tails(&self) -> String {
        let mut s = String::new();
        for i in 0..self.hosts.len() {
            let text = std::fs::read_to_string(self.log_path(i, self.starts[i])).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(5).collect();
            s.push_str(&format!("\n--- node {}:", self.ids[i]));
            for l in tail.iter().rev() {
                s.push_str(&format!("\n{l}"));
            }
        }
        s
    }
}

impl Drop for ProcessCluster {
    fn drop(&mut self) {
        for i in 0..self.children.len() {
            self.kill9(i);
        }
        for r in &self.regions {
            let _ = std::fs::remove_file(r);
        }
        // A site's folder holds only its nodes' logs, which a run across machines is
        // read by afterwards; the folder of a cluster this wrote holds its files too.
        if !self.keep_logs {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The log filter the nodes run with: `PRESCIENT_NODE_LOG`, or warnings.
fn node_log_filter() -> String {
    std::env::var("PRESCIENT_NODE_LOG").unwrap_or_else(|_| "warn".into())
}
