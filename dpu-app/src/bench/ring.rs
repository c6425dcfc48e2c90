//! `prescient-dpu bench ring`: the host <-> DPU ring between two real processes,
//! next to `rtrb` (chunked API) and a bounded crossbeam channel between two threads.
//!
//! Every message is 64 bytes, the size of a descriptor. The DPU side is a real
//! `prescient-dpu serve` child process; requests are NOPs, so the figures are the
//! ring's: publish, poll, check each descriptor, complete, reap.
//!
//! With two CPUs or more allowed, every producer (our host, the references' sending
//! threads) runs on the first allowed CPU and every consumer (the DPU app, the
//! receiving threads) on the second, so both sides of each figure always spin on
//! cores of their own. With one CPU allowed the two sides share it and the figures
//! measure time slices, not the ring.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prescient_shim::{Host, HostOptions, QueuePair, RegionConfig, ShimError};

use super::affinity;
use super::report::{table, Percentiles, Row};

/// Bytes per message, the descriptor size.
const MESSAGE_BYTES: usize = 64;
/// A 64-byte message (`[u64; 8]` rather than `[u8; 64]`: rtrb's safe chunk API
/// needs `Default`).
type Message = [u64; MESSAGE_BYTES / 8];
/// Batch size of the batched producers (ours and rtrb's chunks).
const CHUNK: usize = 32;
/// Queue pairs for the several-queue-pair figure.
const QUEUE_PAIRS: u32 = 4;

/// What to run.
#[derive(Clone, Debug)]
pub struct RingBench {
    /// Seconds per throughput figure.
    pub seconds: f64,
    /// Round trips per latency figure.
    pub round_trips: usize,
    /// The `prescient-dpu` binary to start as the DPU side.
    pub dpu_binary: PathBuf,
}

/// The measured figures.
#[derive(Clone, Debug)]
pub struct RingReport {
    /// Rows of the table.
    pub rows: Vec<Row>,
    /// Where the two sides ran.
    pub placement: String,
}

/// The CPU of the producing and of the consuming side, if two are allowed.
#[derive(Clone, Copy, Debug)]
struct Cores {
    producer: usize,
    consumer: usize,
}

impl Cores {
    fn pick() -> Option<Self> {
        match affinity::allowed()[..] {
            [producer, consumer, ..] => Some(Self { producer, consumer }),
            _ => None,
        }
    }
}

/// Pins the calling thread to the consumer's CPU (no CPU: left to the scheduler).
fn consumer_side(cores: Option<Cores>) {
    if let Some(c) = cores {
        let _ = affinity::pin(0, c.consumer);
    }
}

struct DpuChild {
    child: Child,
    path: PathBuf,
}

impl Drop for DpuChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_dir_all(crate::cluster::run::one_node::data_dir_for(&self.path, None));
    }
}

fn start_dpu(bench: &RingBench, cores: Option<Cores>) -> Result<(Arc<Host>, DpuChild), String> {
    let path = PathBuf::from(format!("/dev/shm/prescient-bench-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let config = RegionConfig {
        queue_pairs: QUEUE_PAIRS,
        ring_entries: 1024,
        host_buffers: 64,
        // NOPs only: the fewest a node serves a region with.
        dpu_buffers: 2,
        buffer_bytes: 4096,
        directory_slots: 0,
    };
    let host =
        Host::create(&path, config, HostOptions { pin: false, ..HostOptions::default() }).map_err(|e| e.to_string())?;
    let child = Command::new(&bench.dpu_binary)
        .args(["serve", "--emulate", "--no-pin", "--region"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bench.dpu_binary.display()))?;
    let child = DpuChild { child, path };
    if let Some(c) = cores {
        affinity::pin(child.child.id(), c.consumer)
            .map_err(|e| format!("cannot pin the DPU app to CPU {}: {e}", c.consumer))?;
    }
    host.wait_for_dpu(Duration::from_secs(10)).map_err(|e| format!("the DPU app did not start: {e}"))?;
    Ok((host, child))
}

/// Pushes NOPs in chunks on every queue pair round-robin for `seconds`; returns
/// completions per second.
fn ours_throughput(qps: &mut [QueuePair], seconds: f64) -> Result<f64, ShimError> {
    let start = Instant::now();
    let mut completed = 0u64;
    let mut tag = 0u64;
    let budget = Duration::from_secs_f64(seconds);
    while start.elapsed() < budget {
        for _ in 0..64 {
            for qp in qps.iter_mut() {
                for _ in 0..CHUNK {
                    if qp.push_nop(tag).is_err() {
                        break;
                    }
                    tag += 1;
                }
                qp.flush()?;
                completed += qp.poll(|_| ())? as u64;
            }
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    for qp in qps.iter_mut() {
        while qp.in_flight() > 0 {
            qp.wait(Duration::from_secs(1), |_| ())?;
        }
    }
    Ok(completed as f64 / elapsed)
}

fn ours_round_trip(qp: &mut QueuePair, round_trips: usize) -> Result<Percentiles, ShimError> {
    let mut samples = Vec::with_capacity(round_trips);
    for i in 0..round_trips {
        let t = Instant::now();
        qp.push_nop(i as u64)?;
        qp.flush()?;
        while qp.poll(|_| ())? == 0 {
            std::hint::spin_loop();
        }
        samples.push(t.elapsed().as_nanos() as u64);
    }
    Ok(Percentiles::of(&mut samples))
}

fn rtrb_throughput(seconds: f64, cores: Option<Cores>) -> f64 {
    let (mut tx, mut rx) = rtrb::RingBuffer::<Message>::new(1024);
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let consumer = std::thread::spawn(move || {
        consumer_side(cores);
        let mut received = 0u64;
        let mut sink = 0u64;
        while !flag.load(Ordering::Relaxed) {
            let n = rx.slots().min(CHUNK);
            if n == 0 {
                std::hint::spin_loop();
                continue;
            }
            let chunk = rx.read_chunk(n).expect("n <= slots");
            let (a, b) = chunk.as_slices();
            for m in a.iter().chain(b) {
                sink ^= m[0];
            }
            chunk.commit_all();
            received += n as u64;
        }
        std::hint::black_box(sink);
        received
    });
    let start = Instant::now();
    let budget = Duration::from_secs_f64(seconds);
    let message: Message = [7; MESSAGE_BYTES / 8];
    while start.elapsed() < budget {
        for _ in 0..256 {
            let n = tx.slots().min(CHUNK);
            if n == 0 {
                std::hint::spin_loop();
                continue;
            }
            let mut chunk = tx.write_chunk(n).expect("n <= slots");
            let (a, b) = chunk.as_mut_slices();
            for slot in a.iter_mut().chain(b.iter_mut()) {
                *slot = message;
            }
            chunk.commit_all();
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    consumer.join().expect("consumer thread") as f64 / elapsed
}

fn rtrb_round_trip(round_trips: usize, cores: Option<Cores>) -> Percentiles {
    let (mut ping_tx, mut ping_rx) = rtrb::RingBuffer::<Message>::new(16);
    let (mut pong_tx, mut pong_rx) = rtrb::RingBuffer::<Message>::new(16);
    let echo = std::thread::spawn(move || {
        consumer_side(cores);
        for _ in 0..round_trips {
            let m = loop {
                if let Ok(m) = ping_rx.pop() {
                    break m;
                }
                std::hint::spin_loop();
            };
            while pong_tx.push(m).is_err() {
                std::hint::spin_loop();
            }
        }
    });
    let mut samples = Vec::with_capacity(round_trips);
    for i in 0..round_trips {
        let t = Instant::now();
        let mut m: Message = [0; MESSAGE_BYTES / 8];
        m[0] = i as u64;
        while ping_tx.push(m).is_err() {
            std::hint::spin_loop();
        }
        loop {
            if pong_rx.pop().is_ok() {
                break;
            }
            std::hint::spin_loop();
        }
        samples.push(t.elapsed().as_nanos() as u64);
    }
    echo.join().expect("echo thread");
    Percentiles::of(&mut samples)
}

fn crossbeam_throughput(seconds: f64, cores: Option<Cores>) -> f64 {
    let (tx, rx) = crossbeam_channel::bounded::<Message>(1024);
    let consumer = std::thread::spawn(move || {
        consumer_side(cores);
        let mut received = 0u64;
        let mut sink = 0u64;
        while let Ok(m) = rx.recv() {
            sink ^= m[0];
            received += 1;
        }
        std::hint::black_box(sink);
        received
    });
    let start = Instant::now();
    let budget = Duration::from_secs_f64(seconds);
    let message: Message = [7; MESSAGE_BYTES / 8];
    while start.elapsed() < budget {
        for _ in 0..1024 {
            tx.send(message).expect("consumer alive");
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    drop(tx);
    consumer.join().expect("consumer thread") as f64 / elapsed
}

fn crossbeam_round_trip(round_trips: usize, cores: Option<Cores>) -> Percentiles {
    let (ping_tx, ping_rx) = crossbeam_channel::bounded::<Message>(1);
    let (pong_tx, pong_rx) = crossbeam_channel::bounded::<Message>(1);
    let echo = std::thread::spawn(move || {
        consumer_side(cores);
        while let Ok(m) = ping_rx.recv() {
            if pong_tx.send(m).is_err() {
                break;
            }
        }
    });
    let mut samples = Vec::with_capacity(round_trips);
    for _ in 0..round_trips {
        let t = Instant::now();
        ping_tx.send([1; MESSAGE_BYTES / 8]).expect("echo alive");
        pong_rx.recv().expect("echo alive");
        samples.push(t.elapsed().as_nanos() as u64);
    }
    drop(ping_tx);
    echo.join().expect("echo thread");
    Percentiles::of(&mut samples)
}

/// Runs every measurement.
pub fn run(bench: &RingBench) -> Result<RingReport, String> {
    let cores = Cores::pick();
    let placement = match cores {
        Some(c) => {
            affinity::pin(0, c.producer).map_err(|e| format!("cannot pin to CPU {}: {e}", c.producer))?;
            format!("producers on CPU {}, consumers on CPU {}", c.producer, c.consumer)
        }
        None => "one CPU allowed: both sides share it (time slices, not the ring)".to_string(),
    };
    let (host, _child) = start_dpu(bench, cores)?;
    let mut qps: Vec<QueuePair> =
        (0..QUEUE_PAIRS).map(|i| host.queue_pair(i)).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
    // Warm up both processes' caches and the DPU's spin loop.
    ours_throughput(&mut qps[..1], 0.2).map_err(|e| e.to_string())?;
    let one = ours_throughput(&mut qps[..1], bench.seconds).map_err(|e| e.to_string())?;
    let several = ours_throughput(&mut qps, bench.seconds).map_err(|e| e.to_string())?;
    let ours_rtt = ours_round_trip(&mut qps[0], bench.round_trips).map_err(|e| e.to_string())?;
    let rtrb_rate = rtrb_throughput(bench.seconds, cores);
    let rtrb_rtt = rtrb_round_trip(bench.round_trips, cores);
    let cb_rate = crossbeam_throughput(bench.seconds, cores);
    let cb_rtt = crossbeam_round_trip(bench.round_trips, cores);
    let row = |what: &str, ours: f64, reference: &str, theirs: f64, unit, higher_is_better| Row {
        what: what.into(),
        ours,
        reference: reference.into(),
        theirs,
        unit,
        higher_is_better,
    };
    let rows = vec![
        row(
            "descriptors/s, 1 queue pair (2 processes)",
            one,
            "rtrb chunks of 32 (2 threads)",
            rtrb_rate,
            "ops/s",
            true,
        ),
        row("descriptors/s, 1 queue pair (2 processes)", one, "crossbeam bounded (2 threads)", cb_rate, "ops/s", true),
        row(
            &format!("descriptors/s, {QUEUE_PAIRS} queue pairs, 1 host thread"),
            several,
            "rtrb chunks of 32 (2 threads)",
            rtrb_rate,
            "ops/s",
            true,
        ),
        row("round trip p50", ours_rtt.p50 as f64, "rtrb ping-pong p50", rtrb_rtt.p50 as f64, "ns", false),
        row("round trip p99", ours_rtt.p99 as f64, "rtrb ping-pong p99", rtrb_rtt.p99 as f64, "ns", false),
        row("round trip p99.9", ours_rtt.p999 as f64, "rtrb ping-pong p99.9", rtrb_rtt.p999 as f64, "ns", false),
        row("round trip p50", ours_rtt.p50 as f64, "crossbeam ping-pong p50", cb_rtt.p50 as f64, "ns", false),
        row("round trip p99", ours_rtt.p99 as f64, "crossbeam ping-pong p99", cb_rtt.p99 as f64, "ns", false),
        row("round trip p99.9", ours_rtt.p999 as f64, "crossbeam ping-pong p99.9", cb_rtt.p999 as f64, "ns", false),
    ];
    Ok(RingReport { rows, placement })
}

impl RingReport {
    /// The table.
    pub fn render(&self) -> String {
        format!("{}\n{}", self.placement, table(&self.rows))
    }
}
