//! `prescient-dpu bench cluster`: the write path of a 5-node in-process cluster, per
//! network model (LAN, WAN, incast), invalidation policy (`none`, `after-commit`,
//! `speculative`, `speculative+predictive`) and congestion control (none, Swift), each
//! figure next to a reference measured in the same run.
//!
//! Every cell is a fresh cluster (same stream offsets, same seed), stepped from this
//! one thread on the real clock with the load of [`crate::load::driver`]: a writer per
//! node keeping D PUTs of 4 KiB in flight over the OLTP trace's key order (D = 1 on
//! LAN-1, the LAN model under light load; 16 on the LAN; 64 on the WAN), and a reader per node re-reading recently written keys
//! through the cache directory. After a warm-up, a cell measures for its seconds: PUT
//! throughput and latency (host side), invalidation time and stale-read window
//! ([`crate::load::watch`]), the predictor's counters, and the CPU time the process used.
//!
//! The incast model gives every switch port a line rate below what the writers offer
//! it ([`setup::INCAST_PORT_BYTES_PER_S`]); its cells run with and without Swift, and
//! its ports' counters (PFC pauses, paused time, largest queue) are reported.
//!
//! The references: the `none` policy (replication without any invalidation) for the
//! PUT latency of the others, a cell's own p50 for its tail, and sealing plus striping
//! alone on one core - `Sealer::seal_in_place` and `encode_stripe` on 4 KiB values in a
//! tight loop - for the work the cluster does per CPU-second.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use super::report::{table, Row};
use crate::cluster::config::Congestion;
use crate::fabric::emu::PortStats;
use crate::histogram::Histogram;
use crate::load::cpu::{cpu_seconds, Who};
use crate::load::driver::{Driver, HostStats, LoadConfig};
use crate::load::keys::KeyStream;
use crate::load::setup::{self, ClusterSpec, Network, Policy, RunDir};
use crate::load::tally::{self, PredictorCounts};
use crate::load::watch::WatchStats;
use crate::seal::{Binding, KeyRing, NonceSequence, Sealer, FRAME_OVERHEAD};
use crate::stripe::{encode_stripe, ReedSolomon, StripeId, StripeLayout};
use crate::Error;

/// Bytes per value.
pub const VALUE_BYTES: usize = 4096;
/// Nodes of the benchmarked cluster.
pub const NODES: u8 = 5;
/// Seconds per cell with `--quick`.
pub const QUICK_SECONDS: f64 = 1.0;

/// What to run.
#[derive(Clone, Debug)]
pub struct ClusterBench {
    /// Data and parity fragments.
    pub stripe: (u8, u8),
    /// Network models, in order.
    pub networks: Vec<Network>,
    /// Policies, in order.
    pub policies: Vec<Policy>,
    /// Congestion control, in order (None: each network's
    /// [`Network::default_congestion`]).
    pub congestion: Option<Vec<Congestion>>,
    /// Measured seconds per cell (None: 3 on the LAN, 8 on the WAN).
    pub seconds: Option<f64>,
    /// Short cells (1 s, shorter warm-ups): a smoke run.
    pub quick: bool,
    /// The trace whose key order the writers replay (absent: a synthetic stream).
    pub trace: PathBuf,
    /// The predictor model for the predictive policy (None: online learning).
    pub model: Option<PathBuf>,
    /// Seed of the fabric model and the readers.
    pub seed: u64,
}

/// The load of one cell.
fn load_config(network: Network, warmup: f64, seed: u64) -> LoadConfig {
    LoadConfig {
        writer_depth: network.writer_depth(),
        writer_nodes: network.writer_nodes(),
        write_interval_ns: network.write_interval_ns(),
        ramp_ns: (warmup * 0.5e9) as u64,
        value_bytes: VALUE_BYTES,
        readers: true,
        reader_gets_max: match network {
            Network::Lan | Network::LanLight | Network::Incast => 4,
            Network::Wan | Network::Geo => 8,
        },
        reads_per_tick: 1,
        cache_entries: 4096,
        fresh_wait_ns: network.fresh_wait_ns(),
        lookahead: 16,
        watches_max: 16_384,
        watch_timeout_ns: network.watch_timeout_ns(),
        seed,
    }
}

/// One (network, policy, congestion control) cell.
#[derive(Clone, Debug)]
pub struct Cell {
    /// The network model.
    pub network: Network,
    /// The policy.
    pub policy: Policy,
    /// Congestion control on every node.
    pub congestion: Congestion,
    /// Measured wall seconds.
    pub seconds: f64,
    /// CPU seconds the process used while measuring.
    pub cpu_seconds: f64,
    /// What the hosts saw while measuring.
    pub host: HostStats,
    /// The invalidation watches, while measuring.
    pub watch: WatchStats,
    /// The predictor, while measuring.
    pub predictor: PredictorCounts,
    /// The lowest and highest tuned lease threshold over the nodes at the end (None:
    /// no node tunes one).
    pub thresholds: Option<(f32, f32)>,
    /// Fault counters, while measuring.
    pub faults: Vec<(&'static str, u64)>,
    /// Directory jobs on peers, their CAS rounds, and those that stayed contended,
    /// while measuring (all nodes).
    pub cas: [u64; 3],
    /// The switch ports toward the nodes while measuring, summed (None: the network
    /// models none); its `queue_bytes_max` is the largest over the whole run.
    pub ports: Option<PortStats>,
    /// Requests the congestion windows held back and their decreases on delay, while
    /// measuring (all nodes and peers).
    pub paced: [u64; 2],
}

/// The switch ports' counters summed over the nodes, the largest queue the largest
/// (None: the network models no ports).
fn port_counts(cluster: &crate::cluster::run::inprocess::InProcess) -> Option<PortStats> {
    let model = cluster.network().model();
    (0..u32::from(NODES)).filter_map(|i| model.port_stats(i)).reduce(|a, b| PortStats {
        messages: a.messages + b.messages,
        bytes: a.bytes + b.bytes,
        queue_ns_total: a.queue_ns_total + b.queue_ns_total,
        queue_bytes_max: a.queue_bytes_max.max(b.queue_bytes_max),
        pauses: a.pauses + b.pauses,
        paused_ns: a.paused_ns + b.paused_ns,
        marks: a.marks + b.marks,
    })
}

/// What the ports did between `before` and `after`, the largest queue `after`'s.
fn ports_since(after: Option<PortStats>, before: Option<PortStats>) -> Option<PortStats> {
    Some(after?.since(&before.unwrap_or_default()))
}

/// Requests held by the nodes' congestion windows and the windows' decreases.
fn paced_counts(cluster: &crate::cluster::run::inprocess::InProcess) -> [u64; 2] {
    cluster.nodes().flat_map(|n| n.pacing()).fold([0; 2], |[h, d], (_, p, _)| [h + p.held, d + p.swift.decreases])
}

fn cas_counts(cluster: &crate::cluster::run::inprocess::InProcess) -> [u64; 3] {
    cluster.nodes().fold([0; 3], |[j, r, c], n| {
        let s = n.stats();
        [j + s.cas_jobs, r + s.cas_rounds, c + s.cas_contended]
    })
}

impl Cell {
    /// PUT completions per second, cluster-wide.
    pub fn puts_per_second(&self) -> f64 {
        self.host.puts_ok as f64 / self.seconds.max(1e-9)
    }

    /// PUT completions per CPU-second.
    pub fn puts_per_cpu_second(&self) -> f64 {
        self.host.puts_ok as f64 / self.cpu_seconds.max(1e-9)
    }
}

/// Sealing and striping alone.
#[derive(Clone, Debug)]
pub struct CodecFigure {
    /// Values sealed and striped per CPU-second.
    pub values_per_cpu_second: f64,
    /// The AES-256-GCM backend.
    pub aead: &'static str,
    /// The Reed-Solomon kernel.
    pub rs: &'static str,
}

/// Everything the run measured.
#[derive(Clone, Debug)]
pub struct ClusterReport {
    /// The bench's settings.
    pub bench: ClusterBench,
    /// What the writers replayed.
    pub stream: String,
    /// The predictor model used, or how it learned.
    pub model: String,
    /// /proc/loadavg at the start.
    pub load_average: String,
    /// Sealing and striping alone.
    pub codec: CodecFigure,
    /// The cells, in run order.
    pub cells: Vec<Cell>,
    /// Wall seconds of the whole run.
    pub total_seconds: f64,
}

/// Measures sealing and striping of `value_bytes` values with RS(`k`, `m`) on this
/// thread for about `seconds` of CPU time.
pub fn seal_and_stripe(k: u8, m: u8, value_bytes: usize, seconds: f64) -> Result<CodecFigure, Error> {
    let mut keys = KeyRing::new();
    keys.insert(1, &[0x5c; 32])?;
    let aead = keys.backend().name();
    let mut sealer = Sealer::new(keys, NonceSequence::new(0, 1))?;
    let rs = ReedSolomon::new(k.into(), m.into())?;
    let layout = StripeLayout::new(k.into(), m.into(), value_bytes + FRAME_OVERHEAD)?;
    let mut data = vec![0x3a_u8; layout.data_len().max(value_bytes + FRAME_OVERHEAD)];
    let mut side = vec![0u8; layout.side_len()];
    let start = cpu_seconds(Who::Thread);
    let mut done = 0u64;
    loop {
        for _ in 0..64 {
            let binding = Binding { key_hash: done, version: done, k, m, tombstone: false };
            sealer.seal_in_place(&mut data, value_bytes, &binding)?;
            encode_stripe(&rs, &layout, StripeId { key_hash: done, version: done }, &mut data, &mut side)?;
            done += 1;
        }
        let used = cpu_seconds(Who::Thread) - start;
        if used >= seconds {
            return Ok(CodecFigure { values_per_cpu_second: done as f64 / used, aead, rs: rs.backend().name() });
        }
    }
}

/// Runs every cell of `bench`.
pub fn run(bench: &ClusterBench) -> Result<ClusterReport, Error> {
    if let Some(seconds) = bench.seconds.filter(|s| !(s.is_finite() && *s > 0.0 && *s <= 600.0)) {
        return Err(Error::Option {
            option: "--seconds",
            value: seconds.to_string(),
            allowed: "more than 0 and at most 600 per cell".into(),
        });
    }
    let started = Instant::now();
    let (k, m) = bench.stripe;
    let load_average = std::fs::read_to_string("/proc/loadavg")
        .map_or_else(|_| "unknown".into(), |s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "));
    let stream = KeyStream::trace_or_synthetic(&bench.trace, bench.seed)?;
    // The shipped models were trained on the traces; the synthetic stream learns online.
    let model_file = bench.model.clone().filter(|p| stream.is_trace() && p.is_file());
    let model = match &model_file {
        Some(p) => format!("{} (loaded at every node's start)", p.display()),
        None => "none loaded: every node's predictor learns online".into(),
    };
    let codec = seal_and_stripe(k, m, VALUE_BYTES, if bench.quick { 0.2 } else { 1.0 })?;
    let mut cells = Vec::new();
    for &network in &bench.networks {
        let congestion = bench.congestion.as_deref().unwrap_or(network.default_congestion());
        for &policy in &bench.policies {
            for &congestion in congestion {
                let (warmup, seconds) = match (bench.quick, bench.seconds) {
                    (true, s) => (network.warmup_seconds() / 2.0, s.unwrap_or(QUICK_SECONDS)),
                    (false, s) => (network.warmup_seconds(), s.unwrap_or(network.cell_seconds())),
                };
                let spec = ClusterSpec {
                    nodes: network.nodes(),
                    k,
                    m,
                    network,
                    policy,
                    model_file: model_file.clone(),
                    value_bytes: VALUE_BYTES,
                    seed: bench.seed,
                    congestion,
                    store_keys: setup::store_keys_for(warmup + seconds, stream.distinct()),
                };
                cells.push(run_cell(&spec, &stream, warmup, seconds, bench.seed)?);
            }
        }
    }
    Ok(ClusterReport {
        bench: bench.clone(),
        stream: stream.describe(),
        model,
        load_average,
        codec,
        cells,
        total_seconds: started.elapsed().as_secs_f64(),
    })
}

fn run_cell(spec: &ClusterSpec, stream: &KeyStream, warmup: f64, seconds: f64, seed: u64) -> Result<Cell, Error> {
    let name =
        format!("bench-{}-{}-{}", spec.network.name(), spec.policy.name().replace('+', "-"), spec.congestion.name());
    let dir = RunDir::create(&name, spec.files_bytes()?)?;
    let mut cluster = setup::start(spec, &dir)?;
    let mut driver = Driver::new(&cluster, stream, load_config(spec.network, warmup, seed))?;
    driver.run_for(&mut cluster, warmup, true)?;
    driver.count_from_now();
    let predictor = PredictorCounts::of(&cluster);
    let faults = tally::faults(&cluster);
    let cas = cas_counts(&cluster);
    let (ports, paced) = (port_counts(&cluster), paced_counts(&cluster));
    let (cpu, t) = (cpu_seconds(Who::Process), Instant::now());
    driver.run_for(&mut cluster, seconds, true)?;
    let (cpu_seconds, seconds) = (cpu_seconds(Who::Process) - cpu, t.elapsed().as_secs_f64());
    let cell = Cell {
        network: spec.network,
        policy: spec.policy,
        congestion: spec.congestion,
        seconds,
        cpu_seconds,
        host: driver.stats.clone(),
        watch: driver.watches.stats.clone(),
        predictor: PredictorCounts::of(&cluster).since(predictor),
        thresholds: tally::lease_thresholds(&cluster),
        faults: tally::faults_since(&tally::faults(&cluster), &faults),
        cas: {
            let now = cas_counts(&cluster);
            [now[0] - cas[0], now[1] - cas[1], now[2] - cas[2]]
        },
        ports: ports_since(port_counts(&cluster), ports),
        paced: {
            let now = paced_counts(&cluster);
            [now[0] - paced[0], now[1] - paced[1]]
        },
    };
    drop(driver);
    drop(cluster);
    drop(dir);
    Ok(cell)
}

/// The columns that name a cell in every table: network, policy, congestion control.
const LABEL_HEADER: &str = "net    policy                  cc   ";

/// A cell's name in the columns of [`LABEL_HEADER`].
fn label(c: &Cell) -> String {
    format!("{:<6} {:<23} {:<5}", c.network.name(), c.policy.name(), c.congestion.name())
}

/// Microseconds with three significant digits.
pub fn us(ns: f64) -> String {
    let us = ns / 1e3;
    let a = us.abs();
    if a < 10.0 {
        format!("{us:.2}")
    } else if a < 100.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.0}")
    }
}

fn pct(h: &Histogram, q: f64) -> String {
    if h.count() == 0 {
        "-".into()
    } else {
        us(h.percentile(q) as f64)
    }
}

impl ClusterReport {
    fn cell(&self, network: Network, policy: Policy, congestion: Congestion) -> Option<&Cell> {
        self.cells.iter().find(|c| c.network == network && c.policy == policy && c.congestion == congestion)
    }

    /// The geo model's rows: the leased PUTs against the in-region quorum round trip
    /// (the `none` cell, which marks no directory), speculation alone against it, and
    /// speculation with leases against speculation alone, with what leases cost readers.
    fn geo_targets(&self, rows: &mut Vec<Row>) {
        let q = |h: &Histogram, p: f64| h.percentile(p) as f64;
        for congestion in Congestion::ALL {
            let cc = if congestion == Congestion::None { String::new() } else { format!(" {}", congestion.name()) };
            let cell = |p| self.cell(Network::Geo, p, congestion).filter(|c| c.host.put_latency.count() > 0);
            let (Some(none), Some(spec)) = (cell(Policy::None), cell(Policy::Speculative)) else { continue };
            let quorum_rtt = q(&none.host.put_latency, 0.5);
            let row = |what: String, ours: f64, reference: &str, theirs: f64, unit: &'static str| Row {
                what,
                ours,
                reference: reference.into(),
                theirs,
                unit,
                higher_is_better: false,
            };
            rows.push(row(
                format!("geo speculative{cc} PUT p50 (expected: the far round trip)"),
                q(&spec.host.put_latency, 0.5),
                "none PUT p50 (in-region quorum)",
                quorum_rtt,
                "ns",
            ));
            let Some(pred) = cell(Policy::SpeculativePredictive) else { continue };
            let leased = &pred.host.put_latency_leased;
            let p = pred.predictor;
            let share = 100.0 * leased.count() as f64 / pred.host.put_latency.count().max(1) as f64;
            let precision = if p.leases == 0 { 0.0 } else { 100.0 * p.hits as f64 / p.leases as f64 };
            if leased.count() > 0 {
                rows.push(row(
                    format!("geo spec+pred{cc} leased PUT p50 (target <= 1.10x; {} PUTs leased)", leased.count()),
                    q(leased, 0.5),
                    "none PUT p50 (in-region quorum)",
                    quorum_rtt,
                    "ns",
                ));
            }
            for (name, at) in [("p50", 0.5), ("p99.9", 0.999)] {
                rows.push(row(
                    format!("geo spec+pred{cc} PUT {name} (below 1x by the hit rate: {share:.1}% leased, precision {precision:.1}%)"),
                    q(&pred.host.put_latency, at),
                    &format!("speculative PUT {name}"),
                    q(&spec.host.put_latency, at),
                    "ns",
                ));
            }
            rows.push(row(
                format!(
                    "geo spec+pred{cc} reads that waited on a Pending mark with no write in flight ({} vs {}; mean wait shown)",
                    pred.host.pending_without_write, spec.host.pending_without_write
                ),
                pred.host.pending_without_write_wait.mean(),
                "speculative's (no leases)",
                spec.host.pending_without_write_wait.mean(),
                "ns",
            ));
        }
    }

    /// The ratio rows: each of our figures next to its reference from this run.
    pub fn targets(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        self.geo_targets(&mut rows);
        let p50 = |c: &Cell| c.host.put_latency.percentile(0.5) as f64;
        // A row names its congestion control only where it is on.
        let cc = |c: Congestion| if c == Congestion::None { String::new() } else { format!(" {}", c.name()) };
        for (network, congestion) in Network::ALL
            .into_iter()
            .filter(|&n| n != Network::Incast && n != Network::Geo)
            .flat_map(|n| Congestion::ALL.map(|c| (n, c)))
        {
            let Some(none) = self.cell(network, Policy::None, congestion).filter(|c| c.host.put_latency.count() > 0)
            else {
                continue;
            };
            for (policy, target) in [
                (Policy::Speculative, "target <= 1.10x"),
                (Policy::SpeculativePredictive, "target <= 1.10x"),
                (Policy::AfterCommit, "expected: a visible extra round trip"),
            ] {
                // Loaded, the LAN's latency is CPU time on the one stepping thread (each
                // CAS a policy adds is work there), not round trips: shown, not judged.
                let target = if network == Network::Lan && policy != Policy::AfterCommit {
                    "loaded: CPU-bound, judged on LAN-1"
                } else {
                    target
                };
                if let Some(c) = self.cell(network, policy, congestion).filter(|c| c.host.put_latency.count() > 0) {
                    rows.push(Row {
                        what: format!("{} {}{} PUT p50 ({target})", network.name(), policy.name(), cc(congestion)),
                        ours: p50(c),
                        reference: "none PUT p50".into(),
                        theirs: p50(none),
                        unit: "ns",
                        higher_is_better: false,
                    });
                }
            }
        }
        for c in self.cells.iter().filter(|c| c.network.is_lan() && c.host.put_latency.count() > 0) {
            rows.push(Row {
                what: format!(
                    "{} {}{} PUT p99.9 (target <= 2x p50)",
                    c.network.name(),
                    c.policy.name(),
                    cc(c.congestion)
                ),
                ours: c.host.put_latency.percentile(0.999) as f64,
                reference: "its own PUT p50".into(),
                theirs: p50(c),
                unit: "ns",
                higher_is_better: false,
            });
        }
        for c in self.cells.iter().filter(|c| c.network == Network::Lan && c.host.puts_ok > 0) {
            rows.push(Row {
                what: format!("LAN {}{} PUTs per CPU-second (target >= 0.5x)", c.policy.name(), cc(c.congestion)),
                ours: c.puts_per_cpu_second(),
                reference: "seal + stripe alone, 1 core".into(),
                theirs: self.codec.values_per_cpu_second,
                unit: "ops/s",
                higher_is_better: true,
            });
        }
        // The incast: with Swift, the tail against the median and the rate against no
        // control; without, what the queues do to the tail (the pauses are in the
        // ports table).
        for c in self.cells.iter().filter(|c| c.network == Network::Incast && c.host.put_latency.count() > 0) {
            let swift = c.congestion == Congestion::Swift;
            rows.push(Row {
                what: format!(
                    "incast {} {} PUT p99.9 ({})",
                    c.policy.name(),
                    c.congestion.name(),
                    if swift { "target <= 2x p50" } else { "no control: shown" }
                ),
                ours: c.host.put_latency.percentile(0.999) as f64,
                reference: "its own PUT p50".into(),
                theirs: p50(c),
                unit: "ns",
                higher_is_better: false,
            });
            let uncontrolled = self.cell(Network::Incast, c.policy, Congestion::None).filter(|n| n.host.puts_ok > 0);
            if let (true, Some(none)) = (swift, uncontrolled) {
                rows.push(Row {
                    what: format!("incast {} swift PUTs/s (no collapse: target >= 0.9x)", c.policy.name()),
                    ours: c.puts_per_second(),
                    reference: "same policy, no control".into(),
                    theirs: none.puts_per_second(),
                    unit: "ops/s",
                    higher_is_better: true,
                });
            }
        }
        rows
    }

    /// The switch ports table (empty when no cell's network models ports).
    fn render_ports(&self, s: &mut String) {
        if self.cells.iter().all(|c| c.ports.is_none()) {
            return;
        }
        let _ = writeln!(
            s,
            "\nSwitch ports toward the {NODES} nodes (while measuring, summed; port rate {:.1} MB/s, buffer {} KiB each): \
             MB/s a port admitted (wire bytes), load that over what it can carry; queue us the mean wait a message;\n\
             pauses the messages whose sender was paused (PFC) and paused ms their pauses summed; q max over the whole run;\n\
             held and decreases are the Swift windows' (requests held back, decreases on delay)",
            setup::INCAST_PORT_BYTES_PER_S as f64 / 1e6,
            setup::INCAST_PORT_BUFFER_BYTES >> 10
        );
        let _ = writeln!(
            s,
            "{} {:>8} {:>7} {:>9} {:>8} {:>10} {:>9} {:>10} {:>9} {:>9} {:>10}",
            LABEL_HEADER,
            "MB/s",
            "load",
            "queue us",
            "pauses",
            "paused ms",
            "ECN %",
            "q max KiB",
            "buf KiB",
            "held",
            "decreases"
        );
        for c in &self.cells {
            let Some(p) = c.ports else { continue };
            let capacity = setup::INCAST_PORT_BYTES_PER_S as f64 * c.seconds * f64::from(NODES);
            let _ = writeln!(
                s,
                "{} {:>8.2} {:>6.2}x {:>9} {:>8} {:>10.1} {:>8.1}% {:>10.1} {:>9} {:>9} {:>10}",
                label(c),
                p.bytes as f64 / (c.seconds * f64::from(NODES) * 1e6),
                p.bytes as f64 / capacity,
                us(p.queue_ns_total as f64 / p.messages.max(1) as f64),
                p.pauses,
                p.paused_ns as f64 / 1e6,
                100.0 * p.marks as f64 / p.messages.max(1) as f64,
                p.queue_bytes_max as f64 / 1024.0,
                setup::INCAST_PORT_BUFFER_BYTES >> 10,
                c.paced[0],
                c.paced[1]
            );
        }
    }

    /// The report as text.
    pub fn render(&self) -> String {
        let (k, m) = self.bench.stripe;
        let quorum = usize::from(k) + usize::from(m) - 1;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "prescient-dpu bench cluster: {NODES} nodes in one process (emulated fabric, real clock, stepped from one thread), RS({k},{m}), quorum {quorum}, {VALUE_BYTES}-byte values"
        );
        let _ = writeln!(s, "write stream: {}", self.stream);
        let _ = writeln!(s, "predictor model (speculative+predictive only): {}", self.model);
        let _ = writeln!(
            s,
            "load per node: one writer (D PUTs in flight: {} on LAN-1, {} on the LAN and the incast, {} on the WAN), one reader re-reading keys the other nodes wrote (directory check, Fresh GET on a miss, refill)",
            Network::LanLight.writer_depth(),
            Network::Lan.writer_depth(),
            Network::Wan.writer_depth()
        );
        let _ = writeln!(s, "load average at start: {}; whole run {:.1} s", self.load_average, self.total_seconds);
        let _ = writeln!(
            s,
            "seal + stripe alone, 1 core: {:.0} values/s per CPU-second ({:.2} GB/s of values; AES-256-GCM {}, Reed-Solomon {})\n",
            self.codec.values_per_cpu_second,
            self.codec.values_per_cpu_second * VALUE_BYTES as f64 / 1e9,
            self.codec.aead,
            self.codec.rs
        );

        let _ = writeln!(s, "PUTs (host side, submission to completion)");
        let _ = writeln!(
            s,
            "{} {:>7} {:>9} {:>9} {:>9} {:>9} {:>8} {:>10} {:>7} {:>7} {:>8}",
            LABEL_HEADER,
            "secs",
            "PUT/s",
            "p50 us",
            "p99 us",
            "p99.9 us",
            "CPU s",
            "PUT/CPU-s",
            "failed",
            "skipped",
            "tick us"
        );
        for c in &self.cells {
            let h = &c.host.put_latency;
            let _ = writeln!(
                s,
                "{} {:>7.2} {:>9.0} {:>9} {:>9} {:>9} {:>8.2} {:>10.0} {:>7} {:>7} {:>8.1}",
                label(c),
                c.seconds,
                c.puts_per_second(),
                pct(h, 0.5),
                pct(h, 0.99),
                pct(h, 0.999),
                c.cpu_seconds,
                c.puts_per_cpu_second(),
                c.host.puts_failed,
                c.host.skipped,
                c.seconds * 1e6 / c.host.ticks.max(1) as f64
            );
        }

        let _ = writeln!(
            s,
            "(tick us: mean time of one step of the whole cluster - every node polls once, the fabric delivers what is due.\n\
             A message costs at least one tick, so under the LAN's load latency is the CPU time of the ticks a PUT waits for,\n\
             behind the other PUTs in flight, not the 5 us network; LAN-1 keeps one PUT in flight per writer, so its latency is\n\
             the PUT's own round trips and work; on the WAN model ticks are short and the 20 ms delay dominates.)"
        );
        let _ = writeln!(
            s,
            "\nInvalidation: PUT submission -> every remote slot left the Valid word it held at submission (negative: before the PUT)"
        );
        let _ = writeln!(
            s,
            "{} {:>8} {:>10} {:>9} {:>9} {:>10} {:>10} {:>9} {:>10} {:>9} {:>10} {:>9}",
            LABEL_HEADER,
            "counted",
            "slots/PUT",
            "p50 us",
            "p99 us",
            "before PUT",
            "after done",
            "never",
            "no Valid",
            "unwatched",
            "CAS jobs",
            "rounds/job"
        );
        for c in &self.cells {
            let w = &c.watch;
            let n = w.counted();
            let (p50, p99) = if n == 0 {
                ("-".to_string(), "-".to_string())
            } else {
                (us(w.invalidation_quantile(0.5) as f64), us(w.invalidation_quantile(0.99) as f64))
            };
            let _ = writeln!(
                s,
                "{} {:>8} {:>10.2} {:>9} {:>9} {:>10} {:>10} {:>9} {:>10} {:>9} {:>10} {:>9.2}",
                label(c),
                n,
                if n == 0 { 0.0 } else { w.valid_slots as f64 / n as f64 },
                p50,
                p99,
                w.before.count(),
                w.after_completion,
                w.never,
                w.no_valid_slot,
                w.unwatched,
                c.cas[0],
                if c.cas[0] == 0 { 0.0 } else { c.cas[1] as f64 / c.cas[0] as f64 }
            );
        }

        let _ = writeln!(s, "\nStale-read window: max(0, last remote slot left Valid - the write's commit point)");
        let _ = writeln!(
            s,
            "{} {:>8} {:>9} {:>9} {:>9} {:>10} {:>14}",
            LABEL_HEADER, "counted", "p50 us", "p99 us", "max us", "share > 0", "stale hits"
        );
        for c in &self.cells {
            let w = &c.watch;
            if w.counted() == 0 && w.never > 0 {
                let _ = writeln!(
                    s,
                    "{} never invalidated: {} watched writes left their slots Valid for {:.0} ms and more; {} stale cache hits",
                    label(c),
                    w.never,
                    c.network.watch_timeout_ns() as f64 / 1e6,
                    c.host.stale_hits
                );
                continue;
            }
            let n = w.window.count();
            let _ = writeln!(
                s,
                "{} {:>8} {:>9} {:>9} {:>9} {:>9.1}% {:>14}",
                label(c),
                n,
                pct(&w.window, 0.5),
                pct(&w.window, 0.99),
                if n == 0 { "-".into() } else { us(w.window.max() as f64) },
                if n == 0 { 0.0 } else { 100.0 * w.window_positive as f64 / n as f64 },
                c.host.stale_hits
            );
        }

        let _ = writeln!(
            s,
            "\nReaders and predictor (while measuring; predictor counters summed over the nodes; leased: PUTs whose key held\n\
             a lease with a mark placed when they arrived (FLAG_LEASED), their share and PUT p50 next to the other PUTs')"
        );
        let _ = writeln!(
            s,
            "{} {:>8} {:>7} {:>7} {:>9} {:>9} {:>7} {:>8} {:>8} {:>9} {:>9} {:>8} {:>10} {:>10}",
            LABEL_HEADER,
            "reads",
            "hit %",
            "GETs",
            "GET p50",
            "GET p99",
            "hits",
            "leases",
            "unused",
            "lease ok%",
            "threshold",
            "leased%",
            "leased p50",
            "others p50"
        );
        for c in &self.cells {
            let h = &c.host;
            let gets = h.gets_ok + h.gets_not_found + h.gets_failed;
            let p = c.predictor;
            let _ = writeln!(
                s,
                "{} {:>8} {:>6.1}% {:>7} {:>9} {:>9} {:>7} {:>8} {:>8} {:>8.1}% {:>9} {:>7.1}% {:>10} {:>10}",
                label(c),
                h.reads,
                if h.reads == 0 { 0.0 } else { 100.0 * h.cache_hits as f64 / h.reads as f64 },
                gets,
                pct(&h.get_latency, 0.5),
                pct(&h.get_latency, 0.99),
                p.hits,
                p.leases,
                p.rolled_back,
                if p.leases == 0 { 0.0 } else { 100.0 * p.hits as f64 / p.leases as f64 },
                match c.thresholds {
                    None => "-".to_string(),
                    Some((low, high)) if low == high => format!("{low:.2}"),
                    Some((low, high)) => format!("{low:.2}-{high:.2}"),
                },
                if h.put_latency.count() == 0 {
                    0.0
                } else {
                    100.0 * h.put_latency_leased.count() as f64 / h.put_latency.count() as f64
                },
                pct(&h.put_latency_leased, 0.5),
                pct(&h.put_latency_unleased, 0.5)
            );
        }
        let faulty: Vec<String> = self
            .cells
            .iter()
            .filter(|c| c.faults.iter().any(|(_, n)| *n > 0))
            .map(|c| format!("  {}: {}", label(c).trim_end(), tally::faults_line(&c.faults)))
            .collect();
        if faulty.is_empty() {
            let _ = writeln!(s, "faults while measuring: none in any cell");
        } else {
            let _ = writeln!(s, "faults while measuring:\n{}", faulty.join("\n"));
        }

        self.render_ports(&mut s);

        let _ = writeln!(s, "\nTargets, as ratios of figures measured in this run");
        s.push_str(&table(&self.targets()));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealing_and_striping_alone_measures_a_positive_rate() {
        let f = seal_and_stripe(3, 2, VALUE_BYTES, 0.01).unwrap();
        assert!(f.values_per_cpu_second > 0.0);
        assert!(!f.aead.is_empty() && !f.rs.is_empty());
        // A code the stripe cannot carry is an error, not a panic.
        assert!(seal_and_stripe(30, 30, VALUE_BYTES, 0.01).is_err());
    }

    #[test]
    fn microseconds_keep_three_digits_and_their_sign() {
        assert_eq!(us(1_234.0), "1.23");
        assert_eq!(us(-56_789.0), "-56.8");
        assert_eq!(us(2_000_000.0), "2000");
    }
}
