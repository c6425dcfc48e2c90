//! Incast: several writers WRITE to one holder through the switch port toward it, at
//! more than the port's rate, with and without Swift on each writer's queue pair.
//!
//! Everything runs on the emulated fabric in process, stepped on a manual clock from
//! one thread, so every figure is modelled time and a seed replays exactly: the test
//! in `tests/incast.rs` asserts on it and `bench incast` prints it. Each writer's demand
//! arrives open-loop (its share of `offered` times the port's rate); it posts 4 KiB
//! WRITEs while its window allows (Swift), or while its send queue has room (no
//! congestion control: `depth_without_cc` outstanding, what a NIC's queue allows).
//! After the measured span demand stops and the run continues until every request has
//! completed and the port is idle, so a queue that fills is seen to drain.

use std::sync::Arc;

use super::report::{table, Percentiles, Row};
use crate::fabric::conformance::{self, Side};
use crate::fabric::emu::{Clock, EmuNode, ManualClock, ModelConfig, Network, PortConfig, PortStats, WIRE_HEADER_BYTES};
use crate::fabric::swift::{Swift, SwiftConfig};
use crate::fabric::{Completion, CompletionQueue, Op, QpOptions};

/// What to run.
#[derive(Clone, Debug)]
pub struct IncastOptions {
    /// Seed of the network model.
    pub seed: u64,
    /// Writers sharing the holder's port.
    pub writers: u32,
    /// The port's line rate, bytes per second.
    pub port_bytes_per_s: u64,
    /// The port's buffer, bytes.
    pub buffer_bytes: u64,
    /// Bytes of each WRITE's payload.
    pub message_bytes: u32,
    /// Demand, as a multiple of the port's rate.
    pub offered: f64,
    /// One-way delay to the holder, nanoseconds.
    pub latency_ns: u64,
    /// Uniform extra one-way delay in `0..jitter_ns` (without it the writers fall into
    /// lockstep with the port, a pattern no real fabric holds).
    pub jitter_ns: u64,
    /// Time before measuring, nanoseconds.
    pub warmup_ns: u64,
    /// Measured time, nanoseconds.
    pub measure_ns: u64,
    /// Clock step, nanoseconds.
    pub step_ns: u64,
    /// Swift on every writer (`None`: no congestion control).
    pub swift: Option<SwiftConfig>,
    /// Requests outstanding per writer without congestion control.
    pub depth_without_cc: u32,
}

impl IncastOptions {
    /// Four writers at twice a 10 Gbit/s port (1.25 GB/s) with a 256 KiB buffer, 4 KiB
    /// WRITEs, 2-3 us one way, 5 ms of warm-up and 50 ms measured, with Swift.
    pub fn four_to_one(seed: u64) -> Self {
        Self {
            seed,
            writers: 4,
            port_bytes_per_s: 1_250_000_000,
            buffer_bytes: 256 << 10,
            message_bytes: 4_096,
            offered: 2.0,
            latency_ns: 2_000,
            jitter_ns: 1_000,
            warmup_ns: 5_000_000,
            measure_ns: 50_000_000,
            step_ns: 250,
            swift: Some(SwiftConfig::DATACENTER),
            depth_without_cc: 64,
        }
    }
}

/// What a run measured (the measured span only, except where said).
#[derive(Clone, Debug)]
pub struct IncastReport {
    /// Wire bytes each writer got acknowledged.
    pub writer_bytes: Vec<u64>,
    /// Acknowledged wire bytes over what the port can carry in the span.
    pub utilisation: f64,
    /// Largest and smallest writer's bytes over the fair share (a quarter each for four).
    pub share_max: f64,
    /// See `share_max`.
    pub share_min: f64,
    /// Queueing delay (switch queue and pause) per request, nanoseconds.
    pub queue: Percentiles,
    /// Fabric round trip per request (post to completion on the model), nanoseconds.
    pub rtt: Percentiles,
    /// The port over the measured span: pauses, paused time, marks, messages.
    pub port: PortStats,
    /// The port's largest backlog over the whole run, bytes.
    pub queue_bytes_max: u64,
    /// The port's buffer, bytes.
    pub buffer_bytes: u64,
    /// The writers' windows at the end of the span (empty without congestion control).
    pub windows: Vec<f64>,
    /// Modelled time from the end of demand until every request completed.
    pub drain_ns: u64,
    /// Requests that did not complete successfully (should be none).
    pub failed: u64,
}

struct Writer {
    side: Side<EmuNode>,
    swift: Option<Swift>,
    in_flight: u32,
    backlog: u64,
    next_demand_ns: u64,
    bytes: u64,
}

/// Runs the incast.
pub fn run(o: &IncastOptions) -> Result<IncastReport, String> {
    let ports =
        PortConfig { bytes_per_s: o.port_bytes_per_s, buffer_bytes: o.buffer_bytes, ecn_bytes: o.buffer_bytes / 4 };
    let clock = Arc::new(ManualClock::new());
    let model = ModelConfig {
        seed: o.seed,
        latency_ns: o.latency_ns,
        jitter_ns: o.jitter_ns,
        ports: Some(ports),
        ..ModelConfig::ideal()
    };
    let net = Network::new(model, clock.clone()).map_err(|e| e.to_string())?;
    let holder = Arc::new(net.node().map_err(|e| e.to_string())?);
    let depth = o.depth_without_cc.max(o.swift.map_or(0, |s| s.max_window.ceil() as u32));
    let opts = QpOptions { send_depth: depth as usize, timeout_us: 100_000, ..conformance::options() };
    let wire = u64::from(o.message_bytes) + WIRE_HEADER_BYTES;
    let gap_ns = (wire as f64 * 1e9 * f64::from(o.writers) / (o.offered * o.port_bytes_per_s as f64)) as u64;
    let mut writers = Vec::with_capacity(o.writers as usize);
    for i in 0..o.writers {
        let node = Arc::new(net.node().map_err(|e| e.to_string())?);
        let (side, holder_side) = conformance::connect(node, Arc::clone(&holder), opts);
        // The holder's side of each connection lives as long as the writer's.
        writers.push((
            Writer {
                side,
                swift: o.swift.map(|cfg| Swift::new(cfg, 2 * (o.latency_ns + o.jitter_ns))),
                in_flight: 0,
                backlog: 0,
                next_demand_ns: gap_ns * u64::from(i) / u64::from(o.writers),
                bytes: 0,
            },
            holder_side,
        ));
    }
    let holder_id = holder.id();
    let (measure_from, demand_until) = (o.warmup_ns, o.warmup_ns + o.measure_ns);
    let mut out: Vec<Completion> = Vec::with_capacity(depth as usize);
    let (mut queue, mut rtt) = (Vec::new(), Vec::new());
    let mut port_at_start: Option<PortStats> = None;
    let mut windows = Vec::new();
    let mut failed = 0;
    let drain_limit_ns = demand_until + 1_000_000_000;
    loop {
        let now = clock.now_ns();
        if now >= measure_from && port_at_start.is_none() {
            port_at_start = Some(net.model().port_stats(holder_id).unwrap_or_default());
        }
        if now >= demand_until && windows.is_empty() {
            windows = writers.iter().filter_map(|(w, _)| w.swift.as_ref().map(Swift::window)).collect();
        }
        net.progress();
        for (w, holder_side) in writers.iter_mut() {
            out.clear();
            w.side.cq.poll(&mut out, depth as usize).map_err(|e| e.to_string())?;
            for c in out.drain(..) {
                w.in_flight -= 1;
                if !c.is_ok() {
                    failed += 1;
                    if let Some(s) = w.swift.as_mut() {
                        s.on_retransmit(now);
                    }
                    continue;
                }
                if let Some(s) = w.swift.as_mut() {
                    s.on_ack(now, c.path);
                }
                let posted = c.wr_id;
                if posted >= measure_from && posted < demand_until {
                    w.bytes += wire;
                    queue.push(c.path.queue_ns);
                    rtt.push(c.path.rtt_ns);
                }
            }
            while now < demand_until && w.next_demand_ns <= now {
                w.backlog += 1;
                w.next_demand_ns += gap_ns;
            }
            while w.backlog > 0 {
                let allowed = match &w.swift {
                    Some(s) => s.may_send(now, w.in_flight),
                    None => w.in_flight < o.depth_without_cc,
                };
                if !allowed {
                    break;
                }
                let remote = holder_side.remote().at(0);
                w.side.post(now, Op::Write { remote, imm: None }, 0, o.message_bytes as usize);
                w.in_flight += 1;
                w.backlog -= 1;
                if let Some(s) = w.swift.as_mut() {
                    s.on_send(now);
                }
            }
        }
        if now >= demand_until && writers.iter().all(|(w, _)| w.in_flight == 0) {
            break;
        }
        if now >= drain_limit_ns {
            return Err(format!("incast: requests still outstanding a second after demand stopped (at {now} ns)"));
        }
        clock.advance(o.step_ns);
    }
    let drain_ns = clock.now_ns() - demand_until;
    let port_end = net.model().port_stats(holder_id).unwrap_or_default();
    let port_at_start = port_at_start.unwrap_or_default();
    let port = port_end.since(&port_at_start);
    let writer_bytes: Vec<u64> = writers.iter().map(|(w, _)| w.bytes).collect();
    let total: u64 = writer_bytes.iter().sum();
    let capacity = o.port_bytes_per_s as f64 * o.measure_ns as f64 / 1e9;
    let fair = total as f64 / f64::from(o.writers);
    let share = |b: &u64| *b as f64 / fair;
    Ok(IncastReport {
        utilisation: total as f64 / capacity,
        share_max: writer_bytes.iter().map(share).fold(0.0, f64::max),
        share_min: writer_bytes.iter().map(share).fold(f64::INFINITY, f64::min),
        writer_bytes,
        queue: Percentiles::of(&mut queue),
        rtt: Percentiles::of(&mut rtt),
        port,
        queue_bytes_max: port_end.queue_bytes_max,
        buffer_bytes: o.buffer_bytes,
        windows,
        drain_ns,
        failed,
    })
}

/// Runs the incast with Swift and without (same seed and load) and prints each figure
/// next to its reference from the same run: the port's capacity, the fair share, the
/// run's own p50, the buffer, and the other run.
pub fn render(o: &IncastOptions) -> Result<String, String> {
    let cc = run(o)?;
    let raw = run(&IncastOptions { swift: None, ..o.clone() })?;
    let mut rows = Vec::new();
    let row = |what: String, ours: f64, reference: &str, theirs: f64, unit: &'static str, higher: bool| Row {
        what,
        ours,
        reference: reference.into(),
        theirs,
        unit,
        higher_is_better: higher,
    };
    for (name, r) in [("swift", &cc), ("no CC", &raw)] {
        rows.push(row(format!("{name}: acknowledged bytes"), r.utilisation, "the port's capacity", 1.0, "x", true));
        rows.push(row(format!("{name}: smallest writer's share"), r.share_min, "fair share", 1.0, "x", true));
        rows.push(row(format!("{name}: largest writer's share"), r.share_max, "fair share", 1.0, "x", false));
        rows.push(row(
            format!("{name}: round trip p99.9"),
            r.rtt.p999 as f64,
            "own p50",
            r.rtt.p50 as f64,
            "ns",
            false,
        ));
        rows.push(row(
            format!("{name}: largest queue"),
            r.queue_bytes_max as f64,
            "the buffer",
            r.buffer_bytes as f64,
            "bytes",
            false,
        ));
    }
    rows.push(row("swift: round trip p50".into(), cc.rtt.p50 as f64, "no CC p50", raw.rtt.p50 as f64, "ns", false));
    let pauses = |r: &IncastReport| {
        format!("{} of {} messages, {:.1} ms paused", r.port.pauses, r.port.messages, r.port.paused_ns as f64 / 1e6)
    };
    Ok(format!(
        "{}PFC pauses: swift {}; no CC {}\nswift windows at the end: {:?}\n",
        table(&rows),
        pauses(&cc),
        pauses(&raw),
        cc.windows.iter().map(|w| (w * 100.0).round() / 100.0).collect::<Vec<_>>()
    ))
}
