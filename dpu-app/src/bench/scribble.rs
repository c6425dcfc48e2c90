//! `prescient-dpu bench scribble`: one DPU-app process serving an honest host A and
//! a hostile host B that scribbles over its whole region, against the same run with B
//! idle. Prints A's longest gap between completions and its p99.9 latency under
//! attack next to the reference, as ratios, and the DPU app's log bytes per minute.
//!
//! Both phases run against the same DPU-app process with the same CPU load: in the
//! reference phase the scribbler's thread runs the same random walk into a private
//! buffer instead of B's region, so the ratio measures the attack, not the extra
//! thread. The phases alternate in windows of [`WINDOW_SECONDS`], so a burst of load
//! from elsewhere on the machine falls on both alike. A's every completion is checked exactly once, with its own user data;
//! anything else is an error. The system test `tests/hostile_host.rs` runs this for
//! a few seconds and bounds the ratios, the DPU app's memory and its log volume.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prescient_shim::config::DESCRIPTOR_BYTES;
use prescient_shim::descriptor::{ArenaShape, Descriptor, OpCode};
use prescient_shim::layout::{header, qp};
use prescient_shim::{Host, HostOptions, QueuePair, ReadSla, RegionConfig, Request, Status};

use super::report::{table, Percentiles, Row};
use crate::sim::rng::Rng;

/// What to run.
#[derive(Clone, Debug)]
pub struct ScribbleBench {
    /// Seconds of each phase (in alternating windows of [`WINDOW_SECONDS`]).
    pub seconds: f64,
    /// Seed of the scribbler.
    pub seed: u64,
    /// The `prescient-dpu` binary to serve with.
    pub dpu_binary: PathBuf,
}

/// What host A saw in one phase, and what the DPU app did meanwhile.
#[derive(Clone, Debug, Default)]
pub struct Phase {
    /// A's requests completed (each exactly once, Ok, with its own user data).
    pub completions: u64,
    /// A's longest time without a completion while it had requests in flight, ns.
    pub longest_gap_ns: u64,
    /// A's request latencies, submission to completion.
    pub latency: Percentiles,
    /// Scribbler steps made (writes into B's region, or the reference's private ones).
    pub scribbles: u64,
    /// B re-attached as a new host generation.
    pub reattaches: u64,
    /// Bytes the DPU app wrote to stderr during the phase.
    pub log_bytes: u64,
    /// The DPU app's resident memory at the end of the phase, KiB.
    pub rss_kib: u64,
    /// The phase's length, s.
    pub seconds: f64,
}

/// Both phases.
#[derive(Clone, Debug)]
pub struct ScribbleReport {
    /// B idle (its scribbler writing into a private buffer).
    pub reference: Phase,
    /// B scribbling over its region.
    pub attack: Phase,
    /// The DPU app's resident memory once both hosts were served, KiB.
    pub rss_kib_start: u64,
    /// The DPU app's serve summary (stdout at SIGTERM).
    pub dpu_summary: String,
    /// Whether the DPU app exited successfully at SIGTERM.
    pub dpu_exit_ok: bool,
}

impl ScribbleReport {
    /// Log bytes per minute under attack.
    pub fn log_bytes_per_minute(&self) -> f64 {
        self.attack.log_bytes as f64 * 60.0 / self.attack.seconds.max(1e-9)
    }

    /// The table: A under attack next to A without it.
    pub fn render(&self) -> String {
        let (a, r) = (&self.attack, &self.reference);
        let reference = "A with B idle (same run)".to_string();
        let row = |what: &str, ours: f64, theirs: f64, unit, higher_is_better| Row {
            what: what.into(),
            ours,
            reference: reference.clone(),
            theirs,
            unit,
            higher_is_better,
        };
        let rows = [
            row("A's longest gap, B scribbling", a.longest_gap_ns as f64, r.longest_gap_ns as f64, "ns", false),
            row("A's p99.9 latency, B scribbling", a.latency.p999 as f64, r.latency.p999 as f64, "ns", false),
            row("A's p99 latency, B scribbling", a.latency.p99 as f64, r.latency.p99 as f64, "ns", false),
            row(
                "A's completions/s, B scribbling",
                a.completions as f64 / a.seconds,
                r.completions as f64 / r.seconds,
                "ops/s",
                true,
            ),
        ];
        format!(
            "{}log: {} bytes in {:.1} s under attack ({:.0} bytes/min), {} bytes in the reference\n\
             memory: DPU app VmRSS {} KiB at start, {} KiB after the reference, {} KiB after the attack\n\
             scribbler: {} steps over B's region, {} re-attaches\n\
             DPU app summary:\n{}\n",
            table(&rows),
            a.log_bytes,
            a.seconds,
            self.log_bytes_per_minute(),
            r.log_bytes,
            self.rss_kib_start,
            r.rss_kib,
            a.rss_kib,
            a.scribbles,
            a.reattaches,
            self.dpu_summary.trim_end()
        )
    }
}

/// Host A's region: one queue pair, small rings.
fn honest_config() -> RegionConfig {
    RegionConfig {
        queue_pairs: 1,
        ring_entries: 64,
        host_buffers: 128,
        dpu_buffers: 16,
        buffer_bytes: 4096,
        directory_slots: 0,
    }
}

/// Host B's region: several queue pairs to flood and fence.
fn hostile_config() -> RegionConfig {
    RegionConfig {
        queue_pairs: 8,
        ring_entries: 256,
        host_buffers: 256,
        dpu_buffers: 16,
        buffer_bytes: 4096,
        directory_slots: 0,
    }
}

/// A's requests in flight.
const DEPTH: usize = 16;

/// Each phase is run in windows of this many seconds, alternating with the other.
pub const WINDOW_SECONDS: f64 = 0.25;

/// How long A waits for a silent DPU app before its calls fail.
const A_DPU_TIMEOUT: Duration = Duration::from_secs(10);

/// A seeded scribbler over a host's whole region: random bytes anywhere, ring index
/// words, malicious descriptors published on its rings, liveness words, and
/// re-attaching as a new host generation.
pub struct Scribbler {
    host: Arc<Host>,
    path: PathBuf,
    rng: Rng,
    /// Steps made.
    pub steps: u64,
    /// Re-attaches made.
    pub reattaches: u64,
}

impl Scribbler {
    /// A scribbler over `host`'s region (at `path`), seeded with `seed`.
    pub fn new(host: Arc<Host>, path: &Path, seed: u64) -> Self {
        Self { host, path: path.into(), rng: Rng::new(seed), steps: 0, reattaches: 0 }
    }

    /// One hostile step.
    pub fn step(&mut self) {
        self.steps += 1;
        let region = self.host.region().clone();
        let layout = *region.layout();
        let config = layout.config;
        let roll = self.rng.below(1000);
        let qp_base = layout.qp(self.rng.below(config.queue_pairs.into()) as u32);
        let near = |rng: &mut Rng, v: u32| {
            v.wrapping_add(rng.below(2 * u64::from(config.ring_entries)) as u32).wrapping_sub(config.ring_entries)
        };
        match roll {
            // Random bytes anywhere in the region (header, rings, arena, buffers).
            0..=99 => {
                let len = 1 + self.rng.below(64) as usize;
                let at = self.rng.below((layout.region_bytes - len) as u64) as usize & !3;
                let bytes: Vec<u8> = (0..len).map(|_| self.rng.next_u64() as u8).collect();
                region.write_bytes(at, &bytes);
            }
            // A ring index or queue word: random, or near where it stands.
            100..=119 => {
                let words = [
                    qp::SQ_TAIL,
                    qp::SQ_HEAD,
                    qp::CQ_TAIL,
                    qp::CQ_HEAD,
                    qp::SQ_TAKEN,
                    qp::FENCE_REASON,
                    qp::CQ_DOORBELL,
                    qp::HOST_WAITING,
                ];
                let word = region.u32_at(qp_base + words[self.rng.below(words.len() as u64) as usize]);
                let v = if self.rng.below(2) == 0 {
                    self.rng.next_u64() as u32
                } else {
                    near(&mut self.rng, word.load(Ordering::Relaxed))
                };
                word.store(v, Ordering::Release);
            }
            // Malicious descriptors, published: floods of NOPs, PUTs naming any
            // buffer (some marked Submitted so they are accepted), random bytes.
            120..=969 => {
                let entries = config.ring_entries;
                let sq = qp_base + qp::ENTRIES;
                let tail = region.u32_at(qp_base + qp::SQ_TAIL).load(Ordering::Relaxed);
                let head = region.u32_at(qp_base + qp::SQ_HEAD).load(Ordering::Acquire);
                let room = entries.saturating_sub(tail.wrapping_sub(head)).min(entries);
                let n = 1 + self.rng.below(u64::from(room.max(1))) as u32;
                let shape = ArenaShape { host_buffers: config.host_buffers, buffer_bytes: config.buffer_bytes };
                for i in 0..n {
                    let index = tail.wrapping_add(i);
                    let bytes = self.descriptor(&shape, index);
                    if bytes[0] == OpCode::Put as u8 && self.rng.below(2) == 0 {
                        let buffer = (self.rng.below(config.host_buffers.into())) as u32;
                        let gen = u32::from_le_bytes(bytes[20..24].try_into().expect("4 bytes"));
                        let word = prescient_shim::arena::word(gen, prescient_shim::arena::BufferState::Submitted);
                        region.u32_at(layout.buffer_state(buffer)).store(word, Ordering::Release);
                    }
                    region.write_bytes(sq + (index & (entries - 1)) as usize * DESCRIPTOR_BYTES, &bytes);
                }
                region.u32_at(qp_base + qp::SQ_TAIL).store(tail.wrapping_add(n), Ordering::Release);
                // Mostly consume the completions too, as a flooder that wants its
                // floods served would (a full completion ring stops them).
                if self.rng.below(4) != 0 {
                    let cq_tail = region.u32_at(qp_base + qp::CQ_TAIL).load(Ordering::Acquire);
                    region.u32_at(qp_base + qp::CQ_HEAD).store(cq_tail, Ordering::Release);
                }
                region.u32_at(header::DPU_DOORBELL).fetch_add(1, Ordering::Release);
                prescient_shim::sys::wake_all(region.u32_at(header::DPU_DOORBELL));
            }
            // Liveness and identity words, the host's and the DPU app's.
            970..=989 => {
                let pick = self.rng.below(8);
                let v = self.rng.next_u64();
                match pick {
                    0 => region.u64_at(header::HOST_HEARTBEAT).store(v, Ordering::Release),
                    1 => region
                        .u32_at(header::HOST_PID)
                        .store([0, 1, std::process::id(), v as u32][(v % 4) as usize], Ordering::Release),
                    2 => {
                        region.u32_at(header::HOST_GENERATION).fetch_add(1, Ordering::AcqRel);
                    }
                    3 => region.u64_at(header::DPU_HEARTBEAT).store(v, Ordering::Release),
                    4 => region.u32_at(header::DPU_PID).store(v as u32, Ordering::Release),
                    5 => region.u32_at(header::DPU_SERVED_GENERATION).store(v as u32, Ordering::Release),
                    6 => region.u32_at(header::DPU_EPOCH).store(v as u32, Ordering::Release),
                    _ => region.u32_at(header::DPU_SLEEPING).store(v as u32, Ordering::Release),
                }
            }
            // Re-attach as a new host generation, one step in 20,000 (an attach waits
            // for the DPU app's acknowledgement); the header may be scribbled: then
            // the attach fails and B keeps its old mapping.
            _ if self.rng.below(20) != 0 => {}
            _ => {
                if let Ok(host) = Host::attach(&self.path, HostOptions { pin: false, ..HostOptions::default() }) {
                    // Dropping the old handle clears the pid word it shares with the
                    // new one: claim it again, or B would look dead at once.
                    self.host = host;
                    self.host.region().u32_at(header::HOST_PID).store(std::process::id(), Ordering::Release);
                    self.reattaches += 1;
                }
            }
        }
    }

    /// A descriptor for ring index `index`: well-formed or not, by chance.
    fn descriptor(&mut self, shape: &ArenaShape, index: u32) -> [u8; DESCRIPTOR_BYTES] {
        let mut b = [0u8; DESCRIPTOR_BYTES];
        let kind = self.rng.below(4);
        if kind == 0 {
            b.iter_mut().for_each(|x| *x = self.rng.next_u64() as u8);
            return b;
        }
        let op = [OpCode::Nop, OpCode::Put, OpCode::Delete, OpCode::Get][self.rng.below(4) as usize];
        let buffer = self.rng.below(u64::from(shape.host_buffers) + 2) as u32;
        let d = Descriptor {
            op,
            sla: ReadSla::Stale,
            key_len: if op == OpCode::Nop { 0 } else { 1 + self.rng.below(300) as u16 },
            value_offset: if op == OpCode::Nop { 0 } else { shape.value_offset(buffer) },
            value_len: if op == OpCode::Put { self.rng.below(shape.value_bytes_max() as u64 + 64) as u32 } else { 0 },
            buffer_gen: self.rng.below(4) as u32,
            user_data: u64::from(index),
        };
        d.emit(&mut b);
        if kind == 1 {
            let at = self.rng.below(DESCRIPTOR_BYTES as u64) as usize;
            b[at] ^= 1 << self.rng.below(8);
        }
        b
    }
}

/// The reference phase's stand-in: the same random walk, into a private buffer.
fn burn(rng: &mut Rng, scratch: &mut [u8]) {
    for _ in 0..32 {
        let at = rng.below(scratch.len() as u64) as usize;
        scratch[at] = rng.next_u64() as u8;
    }
}

struct DpuChild {
    child: Child,
    paths: Vec<PathBuf>,
}

impl Drop for DpuChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for p in &self.paths {
            let _ = std::fs::remove_file(p);
            let _ = std::fs::remove_dir_all(crate::cluster::run::one_node::data_dir_for(p, None));
        }
    }
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

impl Phase {
    /// Adds a window's figures to this phase's (`samples`: all latencies so far).
    fn add(&mut self, window: &Phase, samples: &mut [u64]) {
        self.completions += window.completions;
        self.longest_gap_ns = self.longest_gap_ns.max(window.longest_gap_ns);
        self.scribbles += window.scribbles;
        self.reattaches = window.reattaches;
        self.log_bytes += window.log_bytes;
        self.rss_kib = window.rss_kib;
        self.seconds += window.seconds;
        self.latency = Percentiles::of(samples);
    }
}

/// Runs A for `seconds` with `DEPTH` PUTs in flight, each checked exactly once;
/// appends its latencies to `latencies`.
fn honest(
    host: &Host,
    qp: &mut QueuePair,
    seconds: f64,
    next_tag: &mut u64,
    latencies: &mut Vec<u64>,
) -> Result<Phase, String> {
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(seconds);
    let mut open: HashMap<u64, Instant> = HashMap::with_capacity(DEPTH * 2);
    let mut last = started;
    let mut longest_gap_ns = 0u64;
    let mut completions = 0u64;
    let mut bad: Option<String> = None;
    while Instant::now() < until || !open.is_empty() {
        while open.len() < DEPTH && Instant::now() < until {
            let mut buf = host.take_buffer().map_err(|e| format!("host A: take a buffer: {e}"))?;
            let tag = *next_tag;
            *next_tag += 1;
            buf.value_mut()[..8].copy_from_slice(&tag.to_le_bytes());
            let key = format!("a-{}", tag % 1024);
            qp.push(Request::put(key.as_bytes(), buf, 8).user_data(tag))
                .map_err(|(e, _)| format!("host A: PUT: {e}"))?;
            open.insert(tag, Instant::now());
        }
        qp.flush().map_err(|e| format!("host A: flush: {e}"))?;
        qp.wait(A_DPU_TIMEOUT, |c| {
            let now = Instant::now();
            match open.remove(&c.user_data) {
                Some(at) if c.status == Status::Ok => {
                    latencies.push(now.duration_since(at).as_nanos() as u64);
                    longest_gap_ns = longest_gap_ns.max(now.duration_since(last).as_nanos() as u64);
                    last = now;
                    completions += 1;
                }
                Some(_) => bad = Some(format!("host A: request {} completed {}", c.user_data, c.status)),
                None => bad = Some(format!("host A: completion for unknown or finished request {}", c.user_data)),
            }
        })
        .map_err(|e| format!("host A: wait: {e}"))?;
        if let Some(bad) = bad.take() {
            return Err(bad);
        }
    }
    Ok(Phase { completions, longest_gap_ns, seconds: started.elapsed().as_secs_f64(), ..Phase::default() })
}

/// Runs both phases; an error if A lost, duplicated or failed a request.
pub fn run(bench: &ScribbleBench) -> Result<ScribbleReport, String> {
    let base = format!("/dev/shm/prescient-scribble-{}-{}", std::process::id(), bench.seed);
    let (a_path, b_path) = (PathBuf::from(format!("{base}-a")), PathBuf::from(format!("{base}-b")));
    let (out_path, err_path) = (
        std::env::temp_dir().join(format!("prescient-scribble-{}.out", std::process::id())),
        std::env::temp_dir().join(format!("prescient-scribble-{}.err", std::process::id())),
    );
    for p in [&a_path, &b_path] {
        let _ = std::fs::remove_file(p);
    }
    let options = HostOptions { pin: false, ..HostOptions::default() };
    // A waits out a silent DPU app far longer than a KV store would: a stall is then
    // measured as A's longest gap instead of ending the run.
    let patient = HostOptions { dpu_timeout: A_DPU_TIMEOUT, ..options };
    let a = Host::create(&a_path, honest_config(), patient).map_err(|e| format!("host A: {e}"))?;
    let b = Host::create(&b_path, hostile_config(), options).map_err(|e| format!("host B: {e}"))?;
    let file = |p: &Path| std::fs::File::create(p).map_err(|e| format!("create {}: {e}", p.display()));
    let child = Command::new(&bench.dpu_binary)
        .args(["serve", "--emulate", "--no-pin", "--region"])
        .arg(&a_path)
        .arg("--region")
        .arg(&b_path)
        // A's values are 8 bytes: small records keep the stores (and the DPU app's
        // resident memory, which the test bounds) small whatever B writes.
        .args(["--value-bytes-max", "64", "--store-bytes", "4194304"])
        .stdin(Stdio::null())
        .stdout(file(&out_path)?)
        .stderr(file(&err_path)?)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bench.dpu_binary.display()))?;
    let mut dpu = DpuChild { child, paths: vec![a_path.clone(), b_path.clone(), out_path.clone(), err_path.clone()] };
    let pid = dpu.child.id();
    for (name, host) in [("A", &a), ("B", &b)] {
        host.wait_for_dpu(Duration::from_secs(20))
            .map_err(|e| format!("the DPU app did not serve host {name}: {e}"))?;
    }
    let mut qp = a.queue_pair(0).map_err(|e| e.to_string())?;
    let mut tag = 1u64;
    let rss_kib_start = rss_kib(pid);

    let mut scribbler = Scribbler::new(b.clone(), &b_path, bench.seed);
    let (mut rng, mut scratch) = (Rng::new(bench.seed), vec![0u8; 1 << 20]);
    let mut window = |attack: bool, qp: &mut QueuePair, tag: &mut u64, latencies: &mut Vec<u64>| {
        let stop = AtomicBool::new(false);
        let log_before = file_len(&err_path);
        let (mut phase, scribbled) = std::thread::scope(|s| {
            let (scribbler, rng, scratch, stop) = (&mut scribbler, &mut rng, &mut scratch, &stop);
            let thread = s.spawn(move || {
                let before = scribbler.steps;
                while !stop.load(Ordering::Relaxed) {
                    if attack {
                        scribbler.step();
                    } else {
                        burn(rng, scratch);
                        scribbler.steps += 1;
                    }
                }
                let steps = scribbler.steps - before;
                scribbler.steps = before + if attack { steps } else { 0 };
                (steps, scribbler.reattaches)
            });
            let phase = honest(&a, qp, bench.seconds.min(WINDOW_SECONDS), tag, latencies);
            stop.store(true, Ordering::Relaxed);
            (phase, thread.join().expect("the scribbler does not panic"))
        });
        if let Ok(p) = phase.as_mut() {
            (p.scribbles, p.reattaches) = scribbled;
            p.log_bytes = file_len(&err_path) - log_before;
            p.rss_kib = rss_kib(pid);
        }
        phase
    };
    let explain = |phase: &str, e: String| {
        let log = std::fs::read_to_string(&err_path).unwrap_or_default();
        // Every line about A, then the last lines of all.
        let a_name = a_path.display().to_string();
        let about_a = log.lines().filter(|l| l.contains(&a_name)).take(8);
        let tail: Vec<&str> = log.lines().rev().take(12).chain(about_a).collect();
        let alive = prescient_shim::host::process_alive(pid);
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!(
            "{phase}: {e} (DPU app {}; its last log lines:\n{})",
            if alive { "alive" } else { "gone" },
            tail.join("\n")
        )
    };
    let windows = (bench.seconds / WINDOW_SECONDS).ceil().max(1.0) as u32;
    let (mut reference, mut attack) = (Phase::default(), Phase::default());
    let (mut reference_samples, mut attack_samples) = (Vec::new(), Vec::new());
    for _ in 0..windows {
        let w = window(false, &mut qp, &mut tag, &mut reference_samples).map_err(|e| explain("reference", e))?;
        reference.add(&w, &mut reference_samples);
        let w = window(true, &mut qp, &mut tag, &mut attack_samples).map_err(|e| explain("attack", e))?;
        attack.add(&w, &mut attack_samples);
    }
    prescient_shim::sys::terminate(pid).map_err(|e| format!("stop the DPU app: {e}"))?;
    let status = dpu.child.wait().map_err(|e| format!("wait for the DPU app: {e}"))?;
    let dpu_summary = std::fs::read_to_string(&out_path).unwrap_or_default();
    Ok(ScribbleReport { reference, attack, rss_kib_start, dpu_summary, dpu_exit_ok: status.success() })
}
