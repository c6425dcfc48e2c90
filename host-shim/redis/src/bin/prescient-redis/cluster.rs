//! A cluster of Redis servers on this machine, each loading the Prescient module on
//! its own region and served by its own `prescient-dpu serve --config` process (the
//! emulated fabric between processes, over loopback TCP). Everything lives in one
//! folder: the cluster file, the key folder, each node's data, pid and log files.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::resp;

/// How long a Redis waits for its DPU app's heartbeat before it fails commands with
/// `-UNAVAILABLE`. Longer than the shim's 500 ms default: on a small machine shared by
/// every node's Redis and DPU app (2 cores here), a heartbeat thread can wait that long
/// for a core. A DPU app that died is still noticed this fast.
const DPU_TIMEOUT_MS: u64 = 2_000;
/// How long a DPU app waits for its Redis's heartbeat before it declares the host hung
/// and reclaims its buffers (dropping its requests). A Redis that exits is noticed at
/// once by its pid, so this bounds only a hung one; the 1 s default was tripped by a
/// starved heartbeat thread under load, losing a GET in flight.
const HOST_TIMEOUT_MS: u64 = 10_000;

/// What `cluster start` builds.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Nodes (Redis servers).
    pub nodes: usize,
    /// Data fragments per value.
    pub k: usize,
    /// Parity fragments per value.
    pub m: usize,
    /// Holders that must persist a fragment before a write commits.
    pub quorum: usize,
    /// Redis port of node 0; node i listens on `port + i` (0: any free ports).
    pub port: u16,
    /// Largest value a SET may carry.
    pub value_bytes_max: usize,
    /// Each node's fragment store, in bytes.
    pub store_bytes: usize,
}

/// The programs a cluster runs.
#[derive(Debug, Clone)]
pub struct Tools {
    /// `prescient-dpu`.
    pub dpu: PathBuf,
    /// `libprescient_redis.so`.
    pub module: PathBuf,
}

impl Tools {
    /// The `prescient-dpu` and module built beside this binary, unless given.
    pub fn find(dpu: Option<PathBuf>, module: Option<PathBuf>) -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find this program's path: {e}"))?;
        let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
        let dpu = dpu.unwrap_or_else(|| dir.join("prescient-dpu"));
        let module = module.unwrap_or_else(|| {
            let beside = dir.join("libprescient_redis.so");
            if beside.exists() {
                beside
            } else {
                dir.join("deps/libprescient_redis.so")
            }
        });
        for (what, path, build) in [
            ("prescient-dpu", &dpu, "cargo build --release -p prescient-dpu"),
            ("the module", &module, "cargo build --release -p prescient-redis"),
        ] {
            if !path.exists() {
                return Err(format!(
                    "{what} is not at {}: build it with `{build}`, or name it with --dpu/--module",
                    path.display()
                ));
            }
        }
        Ok(Self { dpu, module })
    }
}

/// One node's files.
#[derive(Debug, Clone)]
pub struct Node {
    /// Its id.
    pub id: usize,
    /// Its Redis port.
    pub port: u16,
    /// Its region file.
    pub region: PathBuf,
}

/// The folder's nodes file: one `id port region` line per node.
fn nodes_file(dir: &Path) -> PathBuf {
    dir.join("nodes")
}

/// The nodes of the cluster in `dir`.
pub fn nodes(dir: &Path) -> Result<Vec<Node>, String> {
    let text = std::fs::read_to_string(nodes_file(dir)).map_err(|e| {
        format!(
            "{}: {e}; start a cluster there first (`prescient-redis cluster start --dir {}`)",
            nodes_file(dir).display(),
            dir.display()
        )
    })?;
    text.lines()
        .map(|l| {
            let mut f = l.split_whitespace();
            let bad = || format!("{}: bad line {l:?}", nodes_file(dir).display());
            Ok(Node {
                id: f.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?,
                port: f.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?,
                region: f.next().map(PathBuf::from).ok_or_else(bad)?,
            })
        })
        .collect()
}

/// `count` ports free on 127.0.0.1 now.
pub fn free_ports(count: usize) -> Result<Vec<u16>, String> {
    let listeners = (0..count)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("cannot find free ports: {e}"))?;
    listeners.iter().map(|l| l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())).collect()
}

/// The pid in pid file `file`.
pub fn pid_of(file: &Path) -> Option<u32> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

fn alive(pid: u32) -> bool {
    prescient_shim::host::process_alive(pid)
}

fn io<'a>(what: &'a str, path: &'a Path) -> impl FnOnce(std::io::Error) -> String + 'a {
    move |e| format!("cannot {what} {}: {e}", path.display())
}

/// Starts a fresh cluster in `dir` (its previous contents are removed) and waits
/// until every node reaches every other.
pub fn start(dir: &Path, spec: &Spec, tools: &Tools) -> Result<Vec<Node>, String> {
    if let Ok(old) = nodes(dir) {
        if old.iter().any(|n| pid_of(&dir.join(format!("redis{}.pid", n.id))).is_some_and(alive)) {
            return Err(format!(
                "a cluster runs in {} already: `prescient-redis cluster stop --dir {}` first",
                dir.display(),
                dir.display()
            ));
        }
    }
    for attempt in 1..=START_ATTEMPTS {
        match start_once(dir, spec, tools) {
            Ok(nodes) => return Ok(nodes),
            Err(e) if attempt < START_ATTEMPTS && port_taken(dir, spec.port == 0) => {
                let _ = stop(dir);
                eprintln!("prescient-redis: {e}: a port found free was taken before a node bound it; starting again on new ports");
            }
            Err(e) => return Err(format!("{e}{}", log_tails(dir))),
        }
    }
    unreachable!("the last attempt returns")
}

/// Starts that may be made when a node could not bind its port: the ports are found
/// free, but another process (a parallel test, another cluster starting) may bind one
/// before this cluster's node does.
const START_ATTEMPTS: usize = 3;

/// Whether a node's log in `dir` says a port this start chose was taken: a DPU app's
/// (its ports are always chosen), or a Redis's if its ports were too (`redis_chosen`; a
/// port the user named is the user's to free).
fn port_taken(dir: &Path, redis_chosen: bool) -> bool {
    logs(dir)
        .filter(|(name, _)| redis_chosen || name.starts_with("dpu"))
        .any(|(_, text)| text.contains("Address already in use") || text.contains("os error 98"))
}

/// The logs of the nodes in `dir`: (file name, text).
fn logs(dir: &Path) -> impl Iterator<Item = (String, String)> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.path()).collect();
    entries.sort();
    entries.into_iter().filter(|p| p.extension().is_some_and(|x| x == "log")).filter_map(|p| {
        let name = p.file_name()?.to_string_lossy().into_owned();
        Some((name, std::fs::read_to_string(&p).ok()?))
    })
}

/// The last lines of every node's log in `dir`, for an error (the folder may be gone
/// by the time someone reads it).
fn log_tails(dir: &Path) -> String {
    let mut out = String::new();
    for (name, text) in logs(dir) {
        let lines: Vec<&str> = text.lines().collect();
        let _ = write!(out, "\n{name}, last lines:");
        for l in &lines[lines.len().saturating_sub(4)..] {
            let _ = write!(out, "\n  {l}");
        }
    }
    out
}

/// One attempt of [`start`].
fn start_once(dir: &Path, spec: &Spec, tools: &Tools) -> Result<Vec<Node>, String> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir.join("keys")).map_err(io("create", dir))?;
    let dir = dir.canonicalize().map_err(io("resolve", dir))?;
    write_key(&dir.join("keys/1.key"))?;
    let ports = free_ports(3 * spec.nodes)?;
    let mut toml = format!(
        "# Written by `prescient-redis cluster start`.\n[cluster]\nname = \"redis\"\nk = {}\nm = {}\nquorum = {}\n\
         key_dir = \"keys\"\ninvalidation = \"speculative\"\npredictive = false\nvalue_bytes_max = {}\n\
         store_bytes = {}\nlog_slots = 256\noutcome_entries = 65536\nheartbeat_us = 1000\nlease_us = 20000\n\
         dead_after_us = 500000\nwrite_timeout_us = 3000000\ntransport_timeout_us = 50000\n",
        spec.k, spec.m, spec.quorum, spec.value_bytes_max, spec.store_bytes
    );
    let tag = std::process::id();
    let mut nodes = Vec::new();
    let mut list = String::new();
    for i in 0..spec.nodes {
        let _ = write!(
            toml,
            "\n[[node]]\nid = {i}\nfabric = \"127.0.0.1:{}\"\ncontrol = \"127.0.0.1:{}\"\ndata_dir = \"node{i}\"\n",
            ports[2 * i],
            ports[2 * i + 1]
        );
        let node = Node {
            id: i,
            port: if spec.port == 0 { ports[2 * spec.nodes + i] } else { spec.port + i as u16 },
            region: PathBuf::from(format!("/dev/shm/prescient-redis-{tag}-{i}")),
        };
        let _ = writeln!(list, "{} {} {}", node.id, node.port, node.region.display());
        nodes.push(node);
    }
    std::fs::write(dir.join("cluster.toml"), toml).map_err(io("write", &dir))?;
    std::fs::write(nodes_file(&dir), list).map_err(io("write", &dir))?;
    for node in &nodes {
        std::fs::create_dir_all(dir.join(format!("node{}", node.id))).map_err(io("create", &dir))?;
        start_redis(&dir, node, tools, spec.value_bytes_max)?;
    }
    for node in &nodes {
        start_dpu(&dir, node, tools)?;
    }
    wait_ready(&dir, &nodes, Duration::from_secs(60))?;
    Ok(nodes)
}

fn write_key(path: &Path) -> Result<(), String> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut key = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut key))
        .map_err(io("read", Path::new("/dev/urandom")))?;
    let mut f =
        std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(io("create", path))?;
    std::io::Write::write_all(&mut f, &key).map_err(io("write", path))
}

/// Starts node `node`'s Redis server (daemonized), which creates its region.
fn start_redis(dir: &Path, node: &Node, tools: &Tools, value_bytes_max: usize) -> Result<(), String> {
    let _ = std::fs::remove_file(&node.region);
    // Buffers carry the value sealed (header and tag) with room to spare: the next
    // power of two above the value, at least 8 KiB.
    let buffer_bytes = (value_bytes_max + 1024).next_power_of_two().max(8192);
    let id = node.id;
    let status = Command::new("redis-server")
        .args(["--port", &node.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir.join(format!("node{id}")))
        .args(["--daemonize", "yes"])
        .arg("--pidfile")
        .arg(dir.join(format!("redis{id}.pid")))
        .arg("--logfile")
        .arg(dir.join(format!("redis{id}.log")))
        .arg("--loadmodule")
        .arg(&tools.module)
        .arg(format!("region={}", node.region.display()))
        .arg(format!("buffer_bytes={buffer_bytes}"))
        .arg(format!("dpu_timeout_ms={DPU_TIMEOUT_MS}"))
        .stdout(Stdio::null())
        .status()
        .map_err(|e| {
            format!("cannot run redis-server: {e}; install it (`apt-get install redis-server redis-tools`)")
        })?;
    if !status.success() {
        return Err(format!(
            "redis-server for node {id} failed ({status}); see {}",
            dir.join(format!("redis{id}.log")).display()
        ));
    }
    let ok = wait(Duration::from_secs(20), || node.region.exists() && resp::stats(node.port).is_ok());
    if !ok {
        return Err(format!(
            "node {id}'s Redis did not come up on port {}; see {}",
            node.port,
            dir.join(format!("redis{id}.log")).display()
        ));
    }
    Ok(())
}

/// Starts (or restarts) node `node`'s DPU app on its region, in its own process
/// group so a Ctrl-C of the terminal that started it does not stop it.
pub fn start_dpu(dir: &Path, node: &Node, tools: &Tools) -> Result<(), String> {
    use std::os::unix::process::CommandExt as _;
    let id = node.id;
    let log_path = dir.join(format!("dpu{id}.log"));
    let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path).map_err(io("open", &log_path))?;
    let err = log.try_clone().map_err(io("open", &log_path))?;
    let child = Command::new(&tools.dpu)
        .args(["serve", "--emulate", "--no-pin", "--host-timeout-ms", &HOST_TIMEOUT_MS.to_string(), "--config"])
        .arg(dir.join("cluster.toml"))
        .args(["--node", &id.to_string(), "--region"])
        .arg(&node.region)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", tools.dpu.display()))?;
    std::fs::write(dir.join(format!("dpu{id}.pid")), child.id().to_string()).map_err(io("write", dir))?;
    Ok(())
}

/// Waits until every running node's DPU app answers, reaches every other node and
/// holds its directory lease.
pub fn wait_ready(dir: &Path, nodes: &[Node], limit: Duration) -> Result<(), String> {
    let all = (1u64 << nodes.len()) - 1;
    let ready = |n: &Node| {
        resp::stats(n.port).is_ok_and(|s| {
            let get = |name: &str| s.iter().find(|(k, _)| k == name).map_or(0, |(_, v)| *v);
            get("dpu_responding") == 1 && get("peers_up") & all == all && get("lease_valid") == 1
        })
    };
    if wait(limit, || nodes.iter().all(ready)) {
        return Ok(());
    }
    let late: Vec<String> = nodes.iter().filter(|n| !ready(n)).map(|n| n.id.to_string()).collect();
    Err(format!(
        "nodes {} did not connect within {limit:?}; see {}/dpu<N>.log and redis<N>.log",
        late.join(", "),
        dir.display()
    ))
}

/// Waits up to `limit` for `cond`, polling every 50 ms; a last look after the limit.
pub fn wait(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    cond()
}

/// Stops every node of the cluster in `dir` (Redis by SHUTDOWN NOSAVE, the DPU apps by
/// SIGTERM, which print their summaries into their logs) and removes the regions.
/// Returns each DPU app's summary.
pub fn stop(dir: &Path) -> Result<String, String> {
    let nodes = nodes(dir)?;
    for n in &nodes {
        if let Ok(mut c) = resp::Conn::open(n.port) {
            let _ = c.send(&[b"SHUTDOWN", b"NOSAVE"]);
            let _ = c.read();
        }
    }
    let mut pids = Vec::new();
    for n in &nodes {
        if let Some(pid) = pid_of(&dir.join(format!("dpu{}.pid", n.id))).filter(|&p| alive(p)) {
            let _ = prescient_shim::sys::terminate(pid);
            pids.push(pid);
        }
    }
    let stopped = wait(Duration::from_secs(20), || {
        pids.iter().all(|&p| !alive(p))
            && nodes.iter().all(|n| !pid_of(&dir.join(format!("redis{}.pid", n.id))).is_some_and(alive))
    });
    let mut out = String::new();
    for n in &nodes {
        let _ = std::fs::remove_file(&n.region);
        let log = std::fs::read_to_string(dir.join(format!("dpu{}.log", n.id))).unwrap_or_default();
        let summary: Vec<&str> = log.lines().rev().take_while(|l| !l.contains("INFO") && !l.contains("WARN")).collect();
        let _ = writeln!(out, "node {} (port {}):", n.id, n.port);
        for l in summary.into_iter().rev() {
            let _ = writeln!(out, "  {l}");
        }
    }
    if !stopped {
        return Err(format!("{out}some processes did not stop within 20 s; their pids are in {}", dir.display()));
    }
    Ok(out)
}

/// One line per node: port, whether Redis and the DPU app run, and the module's
/// counters.
pub fn status(dir: &Path) -> Result<String, String> {
    let mut out = String::new();
    for n in nodes(dir)? {
        let redis = pid_of(&dir.join(format!("redis{}.pid", n.id))).is_some_and(alive);
        let dpu = pid_of(&dir.join(format!("dpu{}.pid", n.id))).is_some_and(alive);
        let stats = resp::stats(n.port)
            .map(|s| s.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|e| format!("({e})"));
        let _ = writeln!(out, "node {} port {} redis {} dpu {}: {stats}", n.id, n.port, up(redis), up(dpu));
    }
    Ok(out)
}

fn up(b: bool) -> &'static str {
    if b {
        "up"
    } else {
        "down"
    }
}
