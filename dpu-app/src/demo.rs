//! `prescient-dpu demo`: the README's main job. Starts an emulated cluster of 5 nodes
//! in this process (RS(3,2), quorum 4, speculative invalidation with predictor leases,
//! the LAN network model, the real clock), replays the OLTP trace's write stream from
//! every node's host (8-byte keys, 4 KiB values; a synthetic YCSB-like stream where the
//! trace is absent) with a reader on every node going through the cache directory and
//! GET, and prints what happened: throughput, latencies per stage, the predictor,
//! invalidation timing, the readers' cache, bytes moved and faults.
//!
//! The load is [`crate::load::driver`]'s, as in `prescient-dpu bench cluster`.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use crate::bench::cluster::us;
use crate::histogram::Histogram;
use crate::load::driver::{Driver, LoadConfig};
use crate::load::keys::KeyStream;
use crate::load::setup::{self, ClusterSpec, Network, Policy, RunDir};
use crate::load::tally::{self, PredictorCounts};
use crate::Error;

/// Bytes per value.
pub const VALUE_BYTES: usize = 4096;
/// Nodes.
pub const NODES: u8 = 5;
/// Data and parity fragments.
pub const STRIPE: (u8, u8) = (3, 2);

/// The cluster demo's settings.
#[derive(Clone, Debug)]
pub struct ClusterDemo {
    /// Seconds of load.
    pub seconds: f64,
    /// The trace whose write stream the hosts replay (absent: a synthetic stream).
    pub trace: PathBuf,
    /// The predictor model (None, or absent, or a synthetic stream: online learning).
    pub model: Option<PathBuf>,
    /// Seed of the fabric model and the readers.
    pub seed: u64,
}

fn pct(h: &Histogram, q: f64) -> String {
    if h.count() == 0 {
        "-".into()
    } else {
        us(h.percentile(q) as f64)
    }
}

/// The first and the last full window of the run side by side, as ratios: whether
/// throughput and tail latency hold as the logs, stores and tables wrap.
fn steady(h: &crate::load::driver::HostStats) -> String {
    let full = h.windows.len();
    let (Some(first), Some(last)) = (h.windows.first(), h.windows.last()) else { return String::new() };
    if full < 2 || first.puts_ok == 0 {
        return String::new();
    }
    let secs = h.window_ns as f64 / 1e9;
    let p99 = |w: &crate::load::driver::Window| w.put_latency.percentile(0.99) as f64;
    let mut s = format!(
        "over time ({full} full windows of {secs:.0} s): first window {:.0} PUT/s, p99 {} us, {} failed; last {:.0} PUT/s, p99 {} us, {} failed: PUT/s {:.2}x, p99 {:.2}x of the first\n",
        first.puts_ok as f64 / secs,
        pct(&first.put_latency, 0.99),
        first.puts_failed,
        last.puts_ok as f64 / secs,
        pct(&last.put_latency, 0.99),
        last.puts_failed,
        last.puts_ok as f64 / first.puts_ok as f64,
        if p99(first) > 0.0 { p99(last) / p99(first) } else { 0.0 },
    );
    let rates: Vec<String> = h.windows.iter().map(|w| format!("{:.0}", w.puts_ok as f64 / secs)).collect();
    s.push_str(&format!("  PUT/s per window: {}\n", rates.join(" ")));
    s
}

/// Runs the demo and returns its summary.
pub fn run(demo: &ClusterDemo) -> Result<String, Error> {
    if !(demo.seconds.is_finite() && demo.seconds > 0.0 && demo.seconds <= 3600.0) {
        return Err(Error::Option {
            option: "--seconds",
            value: demo.seconds.to_string(),
            allowed: "more than 0 and at most 3600".into(),
        });
    }
    let stream = KeyStream::trace_or_synthetic(&demo.trace, demo.seed)?;
    let model_file = demo.model.clone().filter(|p| stream.is_trace() && p.is_file());
    let network = Network::Lan;
    let spec = ClusterSpec {
        nodes: NODES,
        k: STRIPE.0,
        m: STRIPE.1,
        network,
        policy: Policy::SpeculativePredictive,
        model_file: model_file.clone(),
        value_bytes: VALUE_BYTES,
        seed: demo.seed,
        congestion: crate::cluster::config::Congestion::None,
        store_keys: setup::store_keys_for(demo.seconds, stream.distinct()),
    };
    let dir = RunDir::create("demo", spec.files_bytes()?)?;
    let started = Instant::now();
    let mut cluster = setup::start(&spec, &dir)?;
    let ready_s = started.elapsed().as_secs_f64();
    let config = LoadConfig {
        writer_depth: network.writer_depth(),
        writer_nodes: network.writer_nodes(),
        write_interval_ns: network.write_interval_ns(),
        ramp_ns: 100_000_000,
        value_bytes: VALUE_BYTES,
        readers: true,
        reader_gets_max: 4,
        reads_per_tick: 1,
        cache_entries: 4096,
        fresh_wait_ns: network.fresh_wait_ns(),
        lookahead: 16,
        watches_max: 16_384,
        watch_timeout_ns: network.watch_timeout_ns(),
        seed: demo.seed,
    };
    let mut driver = Driver::new(&cluster, &stream, config)?;
    // Windows of a tenth of the run (1 s to 60 s): the first against the last says
    // whether the cluster holds its pace as its logs, stores and tables wrap.
    let window_ns = ((demo.seconds / 10.0).clamp(1.0, 60.0) * 1e9) as u64;
    let windows = ((demo.seconds * 1e9) as u64 / window_ns) as usize;
    driver.track_windows(window_ns, windows);
    driver.count_from_now();
    let predictor_before = PredictorCounts::of(&cluster);
    let faults_at_start = tally::faults(&cluster);
    let t = Instant::now();
    driver.run_for(&mut cluster, demo.seconds, true)?;
    let seconds = t.elapsed().as_secs_f64();
    let h = &driver.stats;
    let w = &driver.watches.stats;
    let predictor = PredictorCounts::of(&cluster).since(predictor_before);
    let stages = tally::stage_times(&cluster);
    let (gather, get_total) = tally::get_times(&cluster);

    let mut s = String::new();
    let _ = writeln!(
        s,
        "Prescient demo: {NODES} nodes in one process on the emulated fabric (LAN model: 5 us one way, 2 us jitter; real clock),\n\
         RS({},{}) with quorum {}, speculative invalidation with predictor leases, {VALUE_BYTES}-byte values",
        STRIPE.0,
        STRIPE.1,
        spec.quorum()
    );
    let _ = writeln!(s, "write stream: {}", stream.describe());
    let _ = writeln!(
        s,
        "predictor: {}",
        model_file
            .as_ref()
            .map_or("every node learns online".to_string(), |p| format!("{} at every node", p.display()))
    );
    let _ = writeln!(
        s,
        "each node's host: a writer with {} PUTs in flight, a reader re-reading keys the other nodes wrote (directory check, Fresh GET on a miss, refill)",
        network.writer_depth()
    );
    let _ = writeln!(s, "ran {seconds:.2} s of load after {ready_s:.2} s starting and connecting\n");

    let _ = writeln!(
        s,
        "throughput:  {:.0} PUT/s ({:.1} MB/s of values), {} failed; {:.0} GETs/s",
        h.puts_ok as f64 / seconds,
        h.puts_ok as f64 * VALUE_BYTES as f64 / seconds / 1e6,
        h.puts_failed,
        (h.gets_ok + h.gets_not_found + h.gets_failed) as f64 / seconds
    );
    let _ = writeln!(
        s,
        "PUT latency (host, submission -> completion): p50 {} us, p99 {} us, p99.9 {} us, max {} us",
        pct(&h.put_latency, 0.5),
        pct(&h.put_latency, 0.99),
        pct(&h.put_latency, 0.999),
        pct(&h.put_latency, 1.0)
    );
    let _ = write!(s, "{}", steady(h));
    let _ = writeln!(
        s,
        "\nper stage on the writers' DPU apps (all nodes merged, whole run; replicate and invalidate both run from the end of\n\
         encode; decide ends when m + 1 holders have the decision and the marks are committed; commit is recorded in that poll):"
    );
    for line in stages.render().lines().filter(|l| !l.starts_with("get ")) {
        let _ = writeln!(s, "  {line}");
    }
    let _ = writeln!(
        s,
        "\nGETs: {} ok, {} not found, {} failed; host p50 {} us, p99 {} us; on the DPU: gather p50 {} us, total p50 {} us, p99 {} us",
        h.gets_ok,
        h.gets_not_found,
        h.gets_failed,
        pct(&h.get_latency, 0.5),
        pct(&h.get_latency, 0.99),
        pct(&gather, 0.5),
        pct(&get_total, 0.5),
        pct(&get_total, 0.99)
    );
    let _ = writeln!(
        s,
        "readers: {} reads, {:.1}% served from the cache, {} refills, {} waited on a Pending slot ({} gave up), {} stale cache hits",
        h.reads,
        if h.reads == 0 { 0.0 } else { 100.0 * h.cache_hits as f64 / h.reads as f64 },
        h.refills,
        h.waited,
        h.wait_timeouts,
        h.stale_hits
    );
    let _ = writeln!(
        s,
        "predictor: {} hits, {} leases marked, {} rolled back unused (false positives), {} timed out, {} not marked for lack of room",
        predictor.hits, predictor.leases, predictor.rolled_back, predictor.timed_out, predictor.dropped
    );
    let counted = w.counted();
    if counted > 0 {
        let _ = writeln!(
            s,
            "invalidation (submission -> every remote slot left its Valid word): {} writes with {:.2} Valid remote slots each; p50 {} us, p99 {} us; {} before the PUT (leases); {} never",
            counted,
            w.valid_slots as f64 / counted as f64,
            us(w.invalidation_quantile(0.5) as f64),
            us(w.invalidation_quantile(0.99) as f64),
            w.before.count(),
            w.never
        );
        let n = w.window.count();
        let _ = writeln!(
            s,
            "stale-read window (last remote slot left Valid - commit point, at least 0): p50 {} us, p99 {} us, {:.1}% of {} writes above 0",
            pct(&w.window, 0.5),
            pct(&w.window, 0.99),
            if n == 0 { 0.0 } else { 100.0 * w.window_positive as f64 / n as f64 },
            n
        );
    } else {
        let _ = writeln!(
            s,
            "invalidation: no write found a remote slot Valid at submission ({} watched, {} never invalidated); run longer",
            w.no_valid_slot, w.never
        );
    }
    let _ = writeln!(s, "{}", tally::stores_line(&cluster));
    let _ = write!(s, "bytes moved (log entries out / in, whole run):");
    for (node, out, inn) in tally::bytes_per_node(&cluster) {
        let _ = write!(s, " node {node} {:.1} / {:.1} MB;", out as f64 / 1e6, inn as f64 / 1e6);
    }
    let faults = tally::faults(&cluster);
    let _ = writeln!(
        s,
        "\nfaults during the load: {}; while the nodes started one after another: {}",
        tally::faults_line(&tally::faults_since(&faults, &faults_at_start)),
        tally::faults_line(&faults_at_start)
    );
    drop(driver);
    drop(cluster);
    drop(dir);
    Ok(s)
}
