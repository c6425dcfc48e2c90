//! `prescient-dpu demo --single-node`: one host region served by a real
//! `prescient-dpu serve` process (no cluster). Creates the region, starts the DPU app
//! on it, drives PUTs from several host threads with values serialised straight into
//! arena buffers, and prints a summary. (This was the README's main command before
//! the cluster existed.)

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prescient_shim::{Host, HostOptions, RegionConfig, ShimError, Sla, Status};

use crate::bench::report::Percentiles;

/// The workload.
#[derive(Clone, Debug)]
pub struct Demo {
    /// Host threads, one queue pair each.
    pub threads: u32,
    /// How long to run.
    pub seconds: f64,
    /// Bytes per value.
    pub value_bytes: usize,
    /// Requests each thread keeps in flight.
    pub depth: u32,
    /// The `prescient-dpu` binary to start as the DPU side.
    pub dpu_binary: PathBuf,
    /// A predictor model for the DPU app (`--model`).
    pub model: Option<PathBuf>,
}

/// A throw-away key folder: one random 32-byte key readable by the owner only.
struct DemoKeys {
    dir: PathBuf,
}

impl DemoKeys {
    fn create() -> std::io::Result<Self> {
        use std::io::Read;
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let dir = std::env::temp_dir().join(format!("prescient-demo-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        let mut key = [0u8; 32];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut key)?;
        let mut file =
            std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(dir.join("1.key"))?;
        std::io::Write::write_all(&mut file, &key)?;
        Ok(Self { dir })
    }
}

impl Drop for DemoKeys {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What one host thread saw.
#[derive(Debug, Default)]
struct ThreadResult {
    ok: u64,
    errors: u64,
    latencies_ns: Vec<u64>,
}

fn drive(host: Arc<Host>, qp: u32, demo: &Demo) -> Result<ThreadResult, ShimError> {
    let mut qp = host.queue_pair(qp)?;
    let ring = host.config().ring_entries as usize;
    let mut started: Vec<Option<Instant>> = vec![None; ring];
    let mut result = ThreadResult { latencies_ns: Vec::with_capacity(1 << 20), ..Default::default() };
    let deadline = Instant::now() + Duration::from_secs_f64(demo.seconds);
    let mut tag = 0u64;
    let mut key = [0u8; 24];
    let depth = demo.depth.min(ring as u32);
    let on_completion =
        |c: prescient_shim::Completion, result: &mut ThreadResult, started: &mut Vec<Option<Instant>>| {
            if let Some(t) = started[c.user_data as usize % ring].take() {
                if result.latencies_ns.len() < result.latencies_ns.capacity() {
                    result.latencies_ns.push(t.elapsed().as_nanos() as u64);
                }
            }
            if c.status == Status::Ok {
                result.ok += 1;
            } else {
                result.errors += 1;
            }
        };
    while Instant::now() < deadline {
        while qp.in_flight() < depth {
            let mut buf = match host.take_buffer() {
                Ok(buf) => buf,
                Err(ShimError::ArenaExhausted { .. }) => break,
                Err(e) => return Err(e),
            };
            let n = demo.value_bytes.min(buf.capacity());
            let value = &mut buf.value_mut()[..n];
            value.fill((tag % 251) as u8);
            value[..8].copy_from_slice(&tag.to_le_bytes());
            // Each thread updates its own 1024 keys in a fixed order (a scan-and-update
            // workload): a pattern the DPU app's predictor can learn.
            let k = format!("user:{}:{:05}", qp.index(), tag % 1024);
            key[..k.len()].copy_from_slice(k.as_bytes());
            started[tag as usize % ring] = Some(Instant::now());
            qp.push_put(&key[..k.len()], buf, n, Sla::Fresh, tag).map_err(|(e, _)| e)?;
            tag += 1;
        }
        qp.flush()?;
        qp.wait(Duration::from_secs(1), |c| on_completion(c, &mut result, &mut started))?;
    }
    while qp.in_flight() > 0 {
        qp.wait(Duration::from_secs(1), |c| on_completion(c, &mut result, &mut started))?;
    }
    Ok(result)
}

/// Runs the demo and returns the summary text.
pub fn run(demo: &Demo) -> Result<String, String> {
    let path = PathBuf::from(format!("/dev/shm/prescient-demo-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let config = RegionConfig {
        queue_pairs: demo.threads,
        ring_entries: 256,
        host_buffers: 256 * demo.threads,
        dpu_buffers: 64,
        buffer_bytes: 8192,
        directory_slots: 65_536,
    };
    let host =
        Host::create(&path, config, HostOptions { pin: false, ..HostOptions::default() }).map_err(|e| e.to_string())?;
    let keys = DemoKeys::create().map_err(|e| format!("cannot make the demo's key folder: {e}"))?;
    let mut child = Command::new(&demo.dpu_binary)
        .args(["serve", "--emulate", "--no-pin", "--stripe", "4+2", "--region"])
        .arg(&path)
        .arg("--key-dir")
        .arg(&keys.dir)
        .arg("--epoch-file")
        .arg(keys.dir.join("epoch"))
        .args(demo.model.iter().flat_map(|m| [std::ffi::OsStr::new("--model"), m.as_os_str()]))
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", demo.dpu_binary.display()))?;
    if let Err(e) = host.wait_for_dpu(Duration::from_secs(10)) {
        let _ = child.kill();
        return Err(format!("the DPU app did not start: {e}"));
    }
    let started = Instant::now();
    let handles: Vec<_> = (0..demo.threads)
        .map(|qp| {
            let host = host.clone();
            let demo = demo.clone();
            std::thread::spawn(move || drive(host, qp, &demo))
        })
        .collect();
    let mut total = ThreadResult::default();
    let mut failure = None;
    for h in handles {
        match h.join().expect("host thread panicked") {
            Ok(r) => {
                total.ok += r.ok;
                total.errors += r.errors;
                total.latencies_ns.extend(r.latencies_ns);
            }
            Err(e) => failure = Some(e.to_string()),
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    // SIGTERM: the DPU app detaches and prints its own summary on stdout.
    let _ = prescient_shim::sys::terminate(child.id());
    let output = child.wait_with_output().map_err(|e| e.to_string())?;
    drop(host);
    let _ = std::fs::remove_file(&path);
    if let Some(e) = failure {
        return Err(e);
    }
    let lat = Percentiles::of(&mut total.latencies_ns);
    let requests = total.ok + total.errors;
    let bytes = total.ok as f64 * demo.value_bytes as f64;
    Ok(format!(
        "Prescient demo: {} host threads -> 1 emulated DPU app (separate process) that stamps, seals (AES-256-GCM)\n\
         and stripes (Reed-Solomon 4+2) every value in place; {} B values, {} in flight per thread\n\
         PUTs completed: {} ok, {} failed in {:.2} s\n\
         throughput:     {:.0} PUT/s, {:.1} MB/s of values handed over without a copy\n\
         latency (submit -> completion): p50 {:.1} us, p99 {:.1} us, p99.9 {:.1} us\n\
         DPU app: {}",
        demo.threads,
        demo.value_bytes,
        demo.depth,
        total.ok,
        total.errors,
        elapsed,
        requests as f64 / elapsed,
        bytes / elapsed / 1e6,
        lat.p50 as f64 / 1e3,
        lat.p99 as f64 / 1e3,
        lat.p999 as f64 / 1e3,
        String::from_utf8_lossy(&output.stdout).trim()
    ))
}
