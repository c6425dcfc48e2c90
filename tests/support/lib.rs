//! Support code shared by Prescient's system tests: finding the `prescient-dpu`
//! binary, unique region paths, a DPU-app child process that is killed on drop,
//! and the entry points of the C client and the C feed follower.
use std::ffi::{c_char, CString};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

extern "C" {
    fn prescient_c_client_run(region_path: *const c_char, ready_path: *const c_char, count: u32) -> i32;
    fn prescient_c_feed_follow(path: *const c_char, cursor: *mut u64, until_position: u64, batch: usize) -> i32;
    fn prescient_c_feed_too_old(path: *const c_char, cursor: u64, dropped: u64) -> i32;
}

/// The write the feed tests append at `position`: (version, key hash, tombstone).
/// Versions rise with positions, with gaps. `tests/c/feed_follower.c` checks the same
/// sequence.
pub fn feed_sequence(position: u64) -> (u64, u64, bool) {
    let version = 3 * position + position % 3;
    let key_hash = position.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (position >> 3);
    (version, key_hash, position % 11 == 0)
}

fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL in path")
}

/// Runs the C follower in `tests/c/feed_follower.c`: opens the feed log at `path`,
/// reads from `*cursor` in batches of `batch` until it took position `until_position`,
/// checking each entry against [`feed_sequence`], and leaves the last version taken in
/// `*cursor`. Returns 0, or the negated line of the failed check.
pub fn run_c_feed_follow(path: &Path, cursor: &mut u64, until_position: u64, batch: usize) -> i32 {
    let path = c_path(path);
    #[allow(unsafe_code)]
    // SAFETY: `path` is a NUL-terminated string and `cursor` a live u64, both for the
    // whole call; the follower only reads the one and writes the other.
    unsafe {
        prescient_c_feed_follow(path.as_ptr(), cursor, until_position, batch)
    }
}

/// Runs the C check that a read of the feed log at `path` from `cursor` is refused
/// with `PRESCIENT_RC_CURSOR_TOO_OLD` naming `dropped`. Returns 0, or the negated line
/// of the failed check.
pub fn run_c_feed_too_old(path: &Path, cursor: u64, dropped: u64) -> i32 {
    let path = c_path(path);
    #[allow(unsafe_code)]
    // SAFETY: `path` is a NUL-terminated string for the whole call, only read.
    unsafe {
        prescient_c_feed_too_old(path.as_ptr(), cursor, dropped)
    }
}

/// Runs the C client in `tests/c/client.c`: creates the region at `region`, touches
/// `ready` once it exists, PUTs `count` values and checks their completions. Returns
/// 0, or the negated line of the failed check.
pub fn run_c_client(region: &Path, ready: &Path, count: u32) -> i32 {
    let region = CString::new(region.as_os_str().as_encoded_bytes()).expect("no NUL in path");
    let ready = CString::new(ready.as_os_str().as_encoded_bytes()).expect("no NUL in path");
    // The client only reads the two strings, which outlive the call.
    #[allow(unsafe_code)]
    // SAFETY: both pointers are valid NUL-terminated strings for the whole call.
    unsafe {
        prescient_c_client_run(region.as_ptr(), ready.as_ptr(), count)
    }
}

/// The `prescient-dpu` binary cargo built next to this test.
pub fn dpu_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/..");
    let bin = dir.join("prescient-dpu");
    assert!(bin.exists(), "{} is missing: run the tests with `cargo test --workspace`, which builds it", bin.display());
    bin
}

/// A unique region path under /dev/shm for `name`, removed on drop with the data
/// folder `prescient-dpu serve` keeps beside it (`<region>.prescient`).
pub struct TempRegion(pub PathBuf);

impl TempRegion {
    /// A fresh path (any stale file removed).
    pub fn new(name: &str) -> Self {
        let path = PathBuf::from(format!("/dev/shm/prescient-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_dir_all(data_dir_of(&path));
        Self(path)
    }

    /// The data folder a one-node `prescient-dpu serve` keeps for this region.
    pub fn data_dir(&self) -> PathBuf {
        data_dir_of(&self.0)
    }
}

fn data_dir_of(region: &Path) -> PathBuf {
    let mut name = region.as_os_str().to_owned();
    name.push(".prescient");
    PathBuf::from(name)
}

impl Drop for TempRegion {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let _ = std::fs::remove_dir_all(self.data_dir());
    }
}

/// A `prescient-dpu serve` child process, killed on drop. Its stdout and stderr go to
/// files, not pipes: a pipe nobody reads until the end fills up (64 KiB) and then
/// blocks the DPU app in its next log line, which its hosts see as a hang.
pub struct DpuProcess {
    /// The child.
    pub child: Child,
    /// Its stdout and stderr files, removed on drop.
    logs: [PathBuf; 2],
}

impl DpuProcess {
    /// Starts `prescient-dpu serve --emulate --no-pin` on `regions` with `extra` args.
    pub fn serve(regions: &[&Path], extra: &[&str]) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let base = std::env::temp_dir().join(format!("prescient-test-dpu-{}-{n}", std::process::id()));
        let logs = [base.with_extension("out"), base.with_extension("err")];
        let file = |p: &Path| std::fs::File::create(p).unwrap_or_else(|e| panic!("create {}: {e}", p.display()));
        let mut cmd = Command::new(dpu_binary());
        cmd.args(["serve", "--emulate", "--no-pin"]);
        for r in regions {
            cmd.arg("--region").arg(r);
        }
        cmd.args(extra).stdout(file(&logs[0])).stderr(file(&logs[1]));
        Self { child: cmd.spawn().expect("start prescient-dpu"), logs }
    }

    /// Freezes the process with SIGSTOP and returns once it is stopped: whatever it had
    /// taken from a ring stays where it was, and nothing more is taken until
    /// [`DpuProcess::resume`].
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
        let stat = format!("/proc/{}/stat", self.child.id());
        let stopped = wait_until(Duration::from_secs(10), || {
            // The state is the field after the parenthesised command name.
            std::fs::read_to_string(&stat)
                .ok()
                .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('T') || rest.starts_with('t')))
                .unwrap_or(false)
        });
        assert!(stopped, "prescient-dpu did not stop at SIGSTOP");
    }

    /// Lets a paused process run again (SIGCONT).
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, signal: libc::c_int) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("a pid fits pid_t");
        // The child is ours and not reaped yet, so its pid names it.
        #[allow(unsafe_code)]
        // SAFETY: kill reads no memory of ours; it only sends `signal` to `pid`.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0, "cannot signal prescient-dpu: {}", std::io::Error::last_os_error());
    }

    /// Kills the process with SIGKILL (a crash) and reaps it.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// What it wrote so far: (stdout, stderr).
    pub fn output(&self) -> (String, String) {
        let read = |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned();
        (read(&self.logs[0]), read(&self.logs[1]))
    }

    /// The address its metrics listener is on (`--metrics ADDR`; with port 0 the one
    /// it picked), from the line it prints at start; waits up to `limit` for it.
    pub fn metrics_addr(&self, limit: Duration) -> std::net::SocketAddr {
        const PREFIX: &str = "prescient-dpu: metrics on http://";
        let mut found = None;
        wait_until(limit, || {
            found =
                self.output().0.lines().find_map(|l| l.strip_prefix(PREFIX)?.strip_suffix("/metrics")?.parse().ok());
            found.is_some()
        });
        found.unwrap_or_else(|| panic!("prescient-dpu printed no metrics address: {:?}", self.output()))
    }

    /// Waits for it to exit by itself (a DPU app that refused to start).
    pub fn wait(mut self) -> std::process::Output {
        let status = self.child.wait().expect("wait for prescient-dpu");
        let (stdout, stderr) = self.output();
        std::process::Output { status, stdout: stdout.into_bytes(), stderr: stderr.into_bytes() }
    }

    /// Stops it with SIGTERM and returns (exit success, stdout, stderr).
    pub fn stop(mut self) -> (bool, String, String) {
        prescient_shim::sys::terminate(self.child.id()).expect("signal prescient-dpu");
        let status = self.child.wait().expect("wait for prescient-dpu");
        let (stdout, stderr) = self.output();
        (status.success(), stdout, stderr)
    }
}

impl Drop for DpuProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for log in &self.logs {
            let _ = std::fs::remove_file(log);
        }
    }
}

/// Polls `cond` every millisecond until it holds or `limit` passes.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    cond()
}

/// Host options for tests: no mlock (CI runners may have a small memlock limit).
pub fn host_options() -> prescient_shim::HostOptions {
    prescient_shim::HostOptions { pin: false, ..Default::default() }
}

/// Waits until a live DPU app serves the host's region.
pub fn wait_served(host: &prescient_shim::Host) -> bool {
    host.wait_for_dpu(Duration::from_secs(20)).is_ok()
}

/// Creates a region with `config`, starts a DPU app on it with `extra` args and waits
/// until it serves.
pub fn host_and_dpu(
    name: &str,
    config: prescient_shim::RegionConfig,
    extra: &[&str],
) -> (TempRegion, std::sync::Arc<prescient_shim::Host>, DpuProcess) {
    let region = TempRegion::new(name);
    let host = prescient_shim::Host::create(&region.0, config, host_options()).expect("create region");
    let dpu = DpuProcess::serve(&[&region.0], extra);
    assert!(wait_served(&host), "the DPU app did not start serving");
    (region, host, dpu)
}

/// A cluster of `prescient-dpu serve --config` processes, one per node, each serving
/// a host region this test process creates and hosts. Killed on drop.
pub struct ClusterProcs {
    /// The folder holding the config, keys and the nodes' data.
    pub dir: PathBuf,
    /// The cluster file.
    pub config: PathBuf,
    /// Each node's host region.
    pub regions: Vec<TempRegion>,
    /// Each node's host.
    pub hosts: Vec<std::sync::Arc<prescient_shim::Host>>,
    /// Each node's DPU app, while it runs.
    pub dpus: Vec<Option<DpuProcess>>,
    /// Arguments every node's `serve` gets besides its config, node and region.
    pub extra: Vec<String>,
}

/// A one-queue-pair region of 16 slots and 4 KiB buffers, no directory: what the
/// single-host tests (host death, attach and regions) need.
pub fn small_region_config() -> prescient_shim::RegionConfig {
    prescient_shim::RegionConfig {
        queue_pairs: 1,
        ring_entries: 16,
        host_buffers: 16,
        dpu_buffers: 2,
        buffer_bytes: 4096,
        directory_slots: 0,
    }
}

/// Region sizes that carry 4 KiB values striped RS(3, 2) in place.
pub fn cluster_region_config() -> prescient_shim::RegionConfig {
    prescient_shim::RegionConfig {
        queue_pairs: 2,
        ring_entries: 256,
        host_buffers: 512,
        dpu_buffers: 72,
        buffer_bytes: 8192,
        directory_slots: 4096,
    }
}

/// The fabric the cluster tests run their nodes on: `PRESCIENT_TEST_FABRIC=emu` (the
/// default: the emulated NIC over loopback TCP) or `verbs` (every node on the RDMA
/// device `RDMA_TEST_DEVICE`, default `rxe0`, with GID index `RDMA_TEST_GID_INDEX` if
/// set; `prescient-dpu` must then be a build with `--features verbs`, as
/// `ci/softroce.sh` runs them inside its Soft-RoCE VM).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TestFabric {
    /// The emulated NIC over loopback TCP.
    Emu,
    /// An RDMA device: its name and GID index.
    Verbs {
        /// The device, as `ibv_devices` lists it.
        device: String,
        /// Its GID table entry (`None`: prescient-dpu picks a RoCEv2 IPv4 one).
        gid_index: Option<u8>,
    },
}

impl TestFabric {
    /// What the environment asks for.
    ///
    /// # Panics
    /// On a value these variables cannot have, saying which.
    pub fn from_env() -> Self {
        match std::env::var("PRESCIENT_TEST_FABRIC").as_deref() {
            Err(_) | Ok("emu") | Ok("") => TestFabric::Emu,
            Ok("verbs") => TestFabric::Verbs {
                device: std::env::var("RDMA_TEST_DEVICE").unwrap_or_else(|_| "rxe0".to_owned()),
                gid_index: std::env::var("RDMA_TEST_GID_INDEX").ok().map(|g| {
                    g.parse().unwrap_or_else(|_| panic!("RDMA_TEST_GID_INDEX={g:?} is not a GID index (0-255)"))
                }),
            },
            Ok(other) => panic!("PRESCIENT_TEST_FABRIC={other:?}: set it to \"emu\" or \"verbs\", or leave it unset"),
        }
    }

    /// The `[cluster]` line choosing this fabric.
    fn cluster_line(&self) -> &'static str {
        match self {
            TestFabric::Emu => "fabric = \"emu\"\n",
            TestFabric::Verbs { .. } => "fabric = \"verbs\"\n",
        }
    }

    /// A `[[node]]`'s fabric lines: its listener on `port` (emu) or its device (verbs).
    fn node_lines(&self, port: u16) -> String {
        match self {
            TestFabric::Emu => format!("fabric = \"127.0.0.1:{port}\"\n"),
            TestFabric::Verbs { device, gid_index: None } => format!("device = \"{device}\"\n"),
            TestFabric::Verbs { device, gid_index: Some(g) } => format!("device = \"{device}\"\ngid_index = {g}\n"),
        }
    }
}

fn free_ports(count: usize) -> Vec<u16> {
    let listeners: Vec<_> =
        (0..count).map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port")).collect();
    listeners.iter().map(|l| l.local_addr().expect("bound").port()).collect()
}

impl ClusterProcs {
    /// Writes the cluster file for `nodes` nodes of RS(k, m) with `quorum`, creates the
    /// regions and starts every node.
    pub fn start(name: &str, nodes: usize, k: usize, m: usize, quorum: usize) -> Self {
        Self::start_with(name, nodes, k, m, quorum, &[])
    }

    /// [`ClusterProcs::start`], every node's `serve` also given `extra`.
    pub fn start_with(name: &str, nodes: usize, k: usize, m: usize, quorum: usize, extra: &[&str]) -> Self {
        Self::start_configured(name, nodes, k, m, quorum, "", extra)
    }

    /// [`ClusterProcs::start_with`], with `cluster_lines` (TOML lines, each ending in a
    /// newline) added to the file's `[cluster]` table.
    pub fn start_configured(
        name: &str,
        nodes: usize,
        k: usize,
        m: usize,
        quorum: usize,
        cluster_lines: &str,
        extra: &[&str],
    ) -> Self {
        let dir = std::env::temp_dir().join(format!("prescient-cluster-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("keys")).expect("make the test folder");
        let key = dir.join("keys/1.key");
        std::fs::write(&key, [0x42u8; 32]).expect("write a key");
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod 600");
        let ports = free_ports(2 * nodes);
        let mut toml = format!(
            "[cluster]\nname = \"{name}\"\nk = {k}\nm = {m}\nquorum = {quorum}\nkey_dir = \"keys\"\n\
             invalidation = \"speculative\"\npredictive = false\nvalue_bytes_max = 4096\nstore_bytes = 16777216\n\
             log_slots = 128\noutcome_entries = 8192\nheartbeat_us = 1000\nlease_us = 20000\n\
             dead_after_us = 500000\nwrite_timeout_us = 3000000\ntransport_timeout_us = 50000\n"
        );
        toml.push_str(cluster_lines);
        let fabric = TestFabric::from_env();
        toml.push_str(fabric.cluster_line());
        for i in 0..nodes {
            toml.push_str(&format!(
                "\n[[node]]\nid = {i}\n{}control = \"127.0.0.1:{}\"\ndata_dir = \"node{i}\"\n",
                fabric.node_lines(ports[2 * i]),
                ports[2 * i + 1]
            ));
        }
        let config = dir.join("cluster.toml");
        std::fs::write(&config, toml).expect("write the cluster file");
        let mut regions = Vec::new();
        let mut hosts = Vec::new();
        for i in 0..nodes {
            let region = TempRegion::new(&format!("{name}-{i}"));
            // A DPU timeout long enough that a loaded CI machine never trips it by
            // accident, short enough for the test that kills a DPU app on purpose.
            let options = prescient_shim::HostOptions { pin: false, dpu_timeout: Duration::from_secs(2) };
            let host =
                prescient_shim::Host::create(&region.0, cluster_region_config(), options).expect("create region");
            regions.push(region);
            hosts.push(host);
        }
        let extra = extra.iter().map(|a| a.to_string()).collect();
        let mut c = Self { dir, config, regions, hosts, dpus: (0..nodes).map(|_| None).collect(), extra };
        for i in 0..nodes {
            c.spawn(i);
        }
        c
    }

    /// Starts node `i`'s DPU app (again).
    pub fn spawn(&mut self, i: usize) {
        assert!(self.dpus[i].is_none(), "node {i} runs already");
        let node = i.to_string();
        let config = self.config.to_string_lossy().into_owned();
        let mut args = vec!["--config", &config, "--node", &node];
        args.extend(self.extra.iter().map(String::as_str));
        self.dpus[i] = Some(DpuProcess::serve(&[&self.regions[i].0], &args));
    }

    /// Node `i`'s DPU app, if it runs (to freeze and resume it).
    pub fn dpu(&self, i: usize) -> Option<&DpuProcess> {
        self.dpus[i].as_ref()
    }

    /// Kills node `i`'s DPU app with SIGKILL.
    pub fn kill9(&mut self, i: usize) {
        if let Some(mut p) = self.dpus[i].take() {
            p.kill9();
        }
    }

    /// Stops node `i`'s DPU app with SIGTERM; returns (success, stdout, stderr).
    pub fn stop(&mut self, i: usize) -> (bool, String, String) {
        self.dpus[i].take().expect("node runs").stop()
    }

    /// Waits until every running node reaches every other running node (the peers
    /// mask its DPU app publishes in the region) and, with all of them running, every
    /// directory lease is valid.
    pub fn wait_connected(&self, limit: Duration) -> bool {
        let running = (0..self.hosts.len()).filter(|&i| self.dpus[i].is_some()).fold(0u32, |m, i| m | 1 << i);
        wait_until(limit, || {
            let now = prescient_shim::sys::monotonic_ns();
            (0..self.hosts.len()).filter(|&i| self.dpus[i].is_some()).all(|i| {
                let reach = self.hosts[i].cluster_peers_up();
                reach & running == running
                    && (running.count_ones() as usize != self.hosts.len() || self.hosts[i].lease_valid(now))
            })
        })
    }

    /// The folder of node `i`'s files.
    pub fn data_dir(&self, i: usize) -> PathBuf {
        self.dir.join(format!("node{i}"))
    }
}

impl Drop for ClusterProcs {
    fn drop(&mut self) {
        // A failed test shows what every node logged: the first thing to read.
        let failed = std::thread::panicking();
        for (i, p) in self.dpus.iter_mut().enumerate() {
            if let Some(mut p) = p.take() {
                p.kill9();
                if failed {
                    let (_, err) = p.output();
                    let tail: Vec<&str> = err.lines().rev().take(40).collect();
                    eprintln!("--- node {i}'s DPU app, last {} lines of stderr:", tail.len());
                    tail.iter().rev().for_each(|l| eprintln!("{l}"));
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
