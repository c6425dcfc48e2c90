//! Support code shared by Prescient's system tests: finding the `prescient-dpu`
//! binary, unique region paths, a DPU-app child process that is killed on drop,
//! and the C client's entry point.
use std::ffi::{c_char, CString};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

extern "C" {
    fn prescient_c_client_run(region_path: *const c_char, ready_path: *const c_char, count: u32) -> i32;
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

/// A unique region path under /dev/shm for `name`, removed on drop.
pub struct TempRegion(pub PathBuf);

impl TempRegion {
    /// A fresh path (any stale file removed).
    pub fn new(name: &str) -> Self {
        let path = PathBuf::from(format!("/dev/shm/prescient-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        Self(path)
    }
}

impl Drop for TempRegion {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A `prescient-dpu serve` child process, killed on drop.
pub struct DpuProcess {
    /// The child.
    pub child: Child,
}

impl DpuProcess {
    /// Starts `prescient-dpu serve --emulate --no-pin` on `regions` with `extra` args.
    pub fn serve(regions: &[&Path], extra: &[&str]) -> Self {
        let mut cmd = Command::new(dpu_binary());
        cmd.args(["serve", "--emulate", "--no-pin"]);
        for r in regions {
            cmd.arg("--region").arg(r);
        }
        cmd.args(extra).stdout(Stdio::piped()).stderr(Stdio::piped());
        Self { child: cmd.spawn().expect("start prescient-dpu") }
    }

    /// Kills the process with SIGKILL (a crash) and reaps it.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops it with SIGTERM and returns (exit success, stdout, stderr).
    pub fn stop(mut self) -> (bool, String, String) {
        prescient_shim::sys::terminate(self.child.id()).expect("signal prescient-dpu");
        let child = std::mem::replace(&mut self.child, Command::new("true").spawn().expect("spawn true"));
        let out = child.wait_with_output().expect("wait for prescient-dpu");
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
    }
}

impl Drop for DpuProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
