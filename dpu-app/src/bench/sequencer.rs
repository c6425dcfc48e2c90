//! `prescient-dpu bench sequencer`: what `ordering = "sequencer"` costs and how fast
//! it fails over, each figure next to a reference measured in the same run.
//!
//! - PUT latency (LAN-1: one PUT in flight per writer) and throughput (LAN: 16 in
//!   flight) of the 5-node in-process cluster with the sequencer, next to the same
//!   cluster with HLC versions, the cells alternating (HLC, sequencer, HLC, sequencer)
//!   so that drift of a shared machine falls on both; target: sequencer p50 within
//!   1.2x of HLC.
//! - Failover in the simulator on the LAN model (5 us one way, 2 us jitter, manual
//!   clock, so the figures are protocol time, not this machine's): the sequencer is
//!   crashed, then timed until a newer epoch is claimed (its first stamps can be
//!   fetched) and until a host's first write of that epoch completes; then it restarts
//!   and the next failover begins. Heartbeat 100 us, dead after 500 us (the failure
//!   detection bound is the reference); target p99 within 1 ms.
//! - The same in the process cluster: five `prescient-dpu serve --config` processes,
//!   the sequencer SIGKILLed, the new epoch read from the nodes' leader-word files and
//!   a host's completions; heartbeat 1 ms, dead after 25 ms; target p99 within 50 ms.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::report::{table, Percentiles, Row};
use crate::cluster::config::{ClusterConfig, Ordering, SequencerConfig};
use crate::cluster::hlc::HlcFloor;
use crate::cluster::run::inprocess::{region_config_for, ClusterClock, InProcess};
use crate::cluster::sequence::{epoch_of, LeaderWord};
use crate::load::driver::{Driver, HostStats, LoadConfig};
use crate::load::keys::KeyStream;
use crate::load::setup::{self, ClusterSpec, Network, Policy, RunDir};
use crate::soak::procs::{ProcessCluster, Tuning};
use crate::soak::SoakOptions;
use crate::Error;

/// What to run.
#[derive(Clone, Debug)]
pub struct SequencerBench {
    /// Measured seconds per PUT cell.
    pub seconds: f64,
    /// Failovers in the simulator.
    pub sim_failovers: u32,
    /// Failovers in the process cluster.
    pub process_failovers: u32,
    /// The trace whose key order the writers replay (absent: a synthetic stream).
    pub trace: PathBuf,
    /// Seed of the fabric models and the readers.
    pub seed: u64,
    /// The `prescient-dpu` binary the process cluster runs.
    pub dpu_binary: PathBuf,
}

/// The sequencer settings every part uses: node 0 first, shadows 1 and 2.
fn sequencer(stamp_block: u32) -> Ordering {
    Ordering::Sequencer(SequencerConfig { sequencer: 0, shadows: vec![1, 2], stamp_block, fence_after_us: 0 })
}

/// One PUT cell.
struct PutCell {
    network: Network,
    sequenced: bool,
    host: HostStats,
    seconds: f64,
    /// Sequencer mode: stamps taken, FETCH_ADDs, holes (whole run).
    counted: [u64; 3],
}

fn put_cell(network: Network, sequenced: bool, seconds: f64, stream: &KeyStream, seed: u64) -> Result<PutCell, Error> {
    let warmup = network.warmup_seconds();
    let spec = ClusterSpec {
        nodes: 5,
        k: 3,
        m: 2,
        network,
        policy: Policy::Speculative,
        model_file: None,
        value_bytes: 4096,
        seed,
        congestion: crate::cluster::config::Congestion::None,
        store_keys: setup::store_keys_for(warmup + seconds, stream.distinct()),
    };
    let name = format!("bench-seq-{}-{}", network.name(), if sequenced { "seq" } else { "hlc" });
    let ordering = if sequenced { sequencer(16) } else { Ordering::Hlc };
    let dir = RunDir::create(&name, spec.files_bytes_ordered(ordering.clone())?)?;
    let mut config = spec.config(dir.path())?;
    config.ordering = ordering;
    let mut cluster = setup::start_configured(&spec, config, &dir)?;
    let load = LoadConfig {
        writer_depth: network.writer_depth(),
        writer_nodes: network.writer_nodes(),
        write_interval_ns: network.write_interval_ns(),
        ramp_ns: (warmup * 0.5e9) as u64,
        value_bytes: 4096,
        readers: false,
        reader_gets_max: 4,
        reads_per_tick: 1,
        cache_entries: 4096,
        fresh_wait_ns: network.fresh_wait_ns(),
        lookahead: 16,
        watches_max: 1024,
        watch_timeout_ns: network.watch_timeout_ns(),
        seed,
    };
    let mut driver = Driver::new(&cluster, stream, load)?;
    driver.run_for(&mut cluster, warmup, true)?;
    driver.count_from_now();
    let t = Instant::now();
    driver.run_for(&mut cluster, seconds, true)?;
    let seconds = t.elapsed().as_secs_f64();
    let counted = cluster
        .nodes()
        .filter_map(|n| n.sequencer_stats())
        .fold([0u64; 3], |[s, f, h], x| [s + x.stamps, f + x.fetches, h + x.holes]);
    Ok(PutCell { network, sequenced, host: driver.stats.clone(), seconds, counted })
}

/// Failover times: sequencer lost to a newer epoch claimed, and to its first write.
#[derive(Default)]
struct Failovers {
    to_claim: Vec<u64>,
    to_write: Vec<u64>,
}

/// The simulator's failovers on the LAN model (manual clock).
fn sim_failovers(count: u32, seed: u64) -> Result<(Failovers, u64), Error> {
    let dir = RunDir::create("bench-seq-sim", 1 << 30)?;
    let mut c = ClusterConfig::in_process(5, 3, 2, dir.path());
    c.quorum = 4;
    c.key_dir = dir.path().join("keys");
    c.value_bytes_max = 1024;
    c.store_bytes = crate::cluster::protocol::node::store_bytes_for_keys(&c, 1024)?;
    c.log_slots = 64;
    c.outcome_entries = crate::limits::OUTCOME_ENTRIES_MIN as usize;
    c.predictive = false;
    (c.heartbeat_us, c.lease_us, c.dead_after_us, c.write_timeout_us) = (100, 400, 500, 20_000);
    c.ordering = sequencer(4);
    c.validate()?;
    let dead_after_ns = c.dead_after_us * 1_000;
    let region = region_config_for(&c, 1, 256);
    let clock = ClusterClock::manual(1_000_000_000);
    let mut cluster =
        InProcess::start(Arc::new(c), clock, Network::Lan.model(seed), region, &dir.path().join("regions"))?;
    const TICK_NS: u64 = 2_000;
    const LIMIT_NS: u64 = 2_000_000_000;
    let stuck = |what: &str| Error::Bench(format!("sequencer failover in the simulator: {what} within 2 s"));
    let settled = |c: &InProcess| -> Option<LeaderWord> {
        let (word, _) = c.node(0)?.sequencer_state()?;
        let all = (0..5u8).all(|i| {
            c.node(i).is_some_and(|n| {
                n.sequencer_state() == Some((word, i == word.sequencer)) && (0..5).all(|j| j == i || n.peer_up(j))
            })
        });
        (all && word.is_set()).then_some(word)
    };
    if !cluster.run_until(TICK_NS, LIMIT_NS, |c| settled(c).is_some()) {
        return Err(stuck("no first sequencer"));
    }
    let mut qps: Vec<_> = (0..5u8)
        .map(|i| cluster.host(i).queue_pair(0).map_err(|source| Error::Host { node: i, source }))
        .collect::<Result<_, _>>()?;
    let mut out = Failovers::default();
    let mut key = 0u32;
    for _ in 0..count {
        let word = settled(&cluster).ok_or_else(|| stuck("no settled sequencer"))?;
        // A writer on another node keeps one PUT in flight throughout.
        let w = (word.sequencer + 3) % 5;
        let host = Arc::clone(cluster.host(w));
        let lost_at = cluster.now().mono_ns;
        cluster.crash(word.sequencer);
        let (mut claimed, mut wrote, mut in_flight) = (None, None, false);
        let qp = &mut qps[w as usize];
        let done = cluster.run_until(TICK_NS, LIMIT_NS, |c| {
            let now = c.now().mono_ns;
            if claimed.is_none()
                && c.nodes().any(|n| n.sequencer_state().is_some_and(|(x, leading)| leading && x.epoch > word.epoch))
            {
                claimed = Some(now - lost_at);
            }
            let _ = qp.poll(|done| {
                in_flight = false;
                if done.status == prescient_shim::Status::Ok && epoch_of(done.version >> 8) > word.epoch {
                    wrote.get_or_insert(now - lost_at);
                }
            });
            if !in_flight {
                if let Ok(mut buf) = host.take_buffer() {
                    key += 1;
                    let k = format!("failover-{}", key % 64);
                    buf.value_mut()[..100].fill(key as u8);
                    in_flight = qp.submit(prescient_shim::Request::put(k.as_bytes(), buf, 100)).is_ok();
                }
            }
            claimed.is_some() && wrote.is_some()
        });
        if !done {
            return Err(stuck("no new sequencer and write"));
        }
        out.to_claim.extend(claimed);
        out.to_write.extend(wrote);
        // Drain the writer, bring the crashed node back, and let the cluster settle.
        let _ = cluster.run_until(TICK_NS, LIMIT_NS, |_| {
            let _ = qp.poll(|_| in_flight = false);
            !in_flight
        });
        cluster.restart(word.sequencer)?;
        if !cluster.run_until(TICK_NS, LIMIT_NS, |c| settled(c).is_some()) {
            return Err(stuck("no settling after a restart"));
        }
    }
    Ok((out, dead_after_ns))
}

/// The process cluster's failovers.
fn process_failovers(count: u32, binary: &std::path::Path) -> Result<(Failovers, u64), Error> {
    let opts = SoakOptions {
        seconds: 0.0,
        nodes: 5,
        m: 2,
        kill_every: Duration::from_secs(1),
        down_for: Duration::from_secs(1),
        keys: 256,
        depth: 1,
        seed: 1,
        dpu_binary: binary.to_owned(),
        settle: Duration::from_secs(10),
        verbs: None,
        site: None,
        // `start_tuned` writes the tuning's lines below as they are: sequencer order
        // with the default rings (not the soak's small ones), and no feed check here.
        sequencer: false,
    };
    let tuning = Tuning {
        heartbeat_us: 1_000,
        lease_us: 10_000,
        dead_after_us: 25_000,
        write_timeout_us: 2_000_000,
        transport_timeout_us: 5_000,
        extra: "ordering = \"sequencer\"\nsequencer = 0\nshadows = [1, 2]\nstamp_block = 16\n".to_owned(),
    };
    let dead_after_ns = tuning.dead_after_us * 1_000;
    let bench = |what: String| Error::Bench(format!("sequencer failover in the process cluster: {what}"));
    let mut c = ProcessCluster::start_tuned(&opts, &tuning).map_err(bench)?;
    // The word each running node persisted last (it persists every word it adopts).
    let word_of = |c: &ProcessCluster, i: usize| {
        HlcFloor::open(&c.data_dir(i).join("leader-word")).ok().map(|f| LeaderWord::unpack(f.floor()))
    };
    let newest = |c: &ProcessCluster| (0..5).filter(|&i| c.is_running(i)).filter_map(|i| word_of(c, i)).max();
    let mut qps: Vec<_> = (0..5u8)
        .map(|i| c.hosts[usize::from(i)].queue_pair(0).map_err(|source| Error::Host { node: i, source }))
        .collect::<Result<_, _>>()?;
    let mut out = Failovers::default();
    let mut key = 0u32;
    for round in 0..count {
        if !c.wait_connected(Duration::from_secs(30)) {
            return Err(bench(format!("round {round}: the nodes did not connect{}", c.log_tails())));
        }
        // Settled: every node persisted one word, its sequencer's.
        let deadline = Instant::now() + Duration::from_secs(30);
        let word = loop {
            let words: Vec<_> = (0..5).map(|i| word_of(&c, i)).collect();
            match words[0] {
                Some(w) if w.is_set() && words.iter().all(|x| *x == Some(w)) => break w,
                _ if Instant::now() > deadline => {
                    return Err(bench(format!("round {round}: no sequencer all nodes agree on ({words:?})")))
                }
                _ => std::thread::sleep(Duration::from_millis(5)),
            }
        };
        let w = usize::from((word.sequencer + 3) % 5);
        let host = Arc::clone(&c.hosts[w]);
        let lost_at = Instant::now();
        c.kill9(usize::from(word.sequencer));
        let (mut claimed, mut wrote, mut in_flight) = (None, None, false);
        let deadline = lost_at + Duration::from_secs(30);
        while claimed.is_none() || wrote.is_none() {
            if Instant::now() > deadline {
                return Err(bench(format!("round {round}: no new sequencer and write in 30 s{}", c.log_tails())));
            }
            if claimed.is_none() && newest(&c).is_some_and(|x| x.epoch > word.epoch) {
                claimed = Some(lost_at.elapsed().as_nanos() as u64);
            }
            let qp = &mut qps[w];
            if !in_flight {
                if let Ok(mut buf) = host.take_buffer() {
                    key += 1;
                    let k = format!("failover-{}", key % 64);
                    buf.value_mut()[..100].fill(key as u8);
                    in_flight = qp.submit(prescient_shim::Request::put(k.as_bytes(), buf, 100)).is_ok();
                }
            }
            let _ = qp.wait(Duration::from_micros(200), |done| {
                in_flight = false;
                if done.status == prescient_shim::Status::Ok && epoch_of(done.version >> 8) > word.epoch {
                    wrote.get_or_insert(lost_at.elapsed().as_nanos() as u64);
                }
            });
        }
        out.to_claim.extend(claimed);
        out.to_write.extend(wrote);
        while in_flight {
            if qps[w].wait(Duration::from_secs(5), |_| in_flight = false).is_err() {
                break;
            }
        }
        c.spawn(usize::from(word.sequencer)).map_err(bench)?;
    }
    Ok((out, dead_after_ns))
}

/// Runs the bench and renders its report.
pub fn run(bench: &SequencerBench) -> Result<String, Error> {
    let started = Instant::now();
    let stream = KeyStream::trace_or_synthetic(&bench.trace, bench.seed)?;
    let mut cells = Vec::new();
    for network in [Network::LanLight, Network::Lan] {
        for _half in 0..2 {
            for sequenced in [false, true] {
                cells.push(put_cell(network, sequenced, bench.seconds / 2.0, &stream, bench.seed)?);
            }
        }
    }
    let (sim, sim_bound) = sim_failovers(bench.sim_failovers, bench.seed)?;
    let (procs, proc_bound) = process_failovers(bench.process_failovers, &bench.dpu_binary)?;

    let merged = |network: Network, sequenced: bool| {
        let mut h = crate::histogram::Histogram::new();
        let (mut puts, mut seconds, mut failed) = (0u64, 0f64, 0u64);
        for c in cells.iter().filter(|c| c.network == network && c.sequenced == sequenced) {
            h.merge(&c.host.put_latency);
            puts += c.host.puts_ok;
            failed += c.host.puts_failed;
            seconds += c.seconds;
        }
        (h, puts as f64 / seconds.max(1e-9), failed)
    };
    let mut rows = Vec::new();
    let mut notes = String::new();
    for network in [Network::LanLight, Network::Lan] {
        let (seq, seq_rate, seq_failed) = merged(network, true);
        let (hlc, hlc_rate, hlc_failed) = merged(network, false);
        let name = network.name();
        for (q, label) in [(0.5, "p50"), (0.99, "p99")] {
            rows.push(Row {
                what: format!("{name} sequencer PUT {label}"),
                ours: seq.percentile(q) as f64 / 1e3,
                reference: format!("HLC {label}"),
                theirs: hlc.percentile(q) as f64 / 1e3,
                unit: "us",
                higher_is_better: false,
            });
        }
        rows.push(Row {
            what: format!("{name} sequencer PUTs per second"),
            ours: seq_rate,
            reference: "HLC".into(),
            theirs: hlc_rate,
            unit: "/s",
            higher_is_better: true,
        });
        let [stamps, fetches, holes] = cells
            .iter()
            .filter(|c| c.network == network && c.sequenced)
            .fold([0u64; 3], |a, c| [a[0] + c.counted[0], a[1] + c.counted[1], a[2] + c.counted[2]]);
        notes.push_str(&format!(
            "{name}: {} sequencer PUTs, {} failed ({stamps} stamps, {fetches} FETCH_ADDs, {holes} holes); {} HLC PUTs, {} failed\n",
            seq.count(),
            seq_failed,
            hlc.count(),
            hlc_failed
        ));
    }
    let mut failover_rows = |what: &str, f: &mut Failovers, bound: u64| {
        for (samples, label) in [(&mut f.to_claim, "to a new sequencer"), (&mut f.to_write, "to its first write")] {
            let p = Percentiles::of(samples);
            for (v, q) in [(p.p50, "p50"), (p.p99, "p99")] {
                rows.push(Row {
                    what: format!("{what} failover {label} {q}"),
                    ours: v as f64 / 1e3,
                    reference: "dead_after (detection)".into(),
                    theirs: bound as f64 / 1e3,
                    unit: "us",
                    higher_is_better: false,
                });
            }
        }
    };
    let (mut sim, mut procs) = (sim, procs);
    let (sim_n, proc_n) = (sim.to_claim.len(), procs.to_claim.len());
    failover_rows("sim LAN", &mut sim, sim_bound);
    failover_rows("process", &mut procs, proc_bound);
    let p99 = |v: &mut Vec<u64>| Percentiles::of(v).p99;
    let verdict = |ok: bool| if ok { "met" } else { "missed" };
    let seq_p50 = merged(Network::LanLight, true).0.percentile(0.5) as f64;
    let hlc_p50 = merged(Network::LanLight, false).0.percentile(0.5) as f64;
    let ratio = seq_p50 / hlc_p50.max(1.0);
    Ok(format!(
        "prescient-dpu bench sequencer: 5 nodes, RS(3,2), 4 KiB PUTs ({}), {:.1} s per ordering per load in two \
         alternating halves; {sim_n} failovers in the simulator (LAN model, manual clock), {proc_n} in the process \
         cluster; {:.0} s in all\n{notes}{}\ntargets: LAN-1 sequencer PUT p50 <= 1.2x HLC: {ratio:.2}x, {}; \
         failover p99 to the first write <= 1 ms in the simulator: {:.0} us, {}; <= 50 ms in the process cluster: \
         {:.1} ms, {}\n",
        stream.describe(),
        bench.seconds,
        started.elapsed().as_secs_f64(),
        table(&rows),
        verdict(ratio <= 1.2),
        p99(&mut sim.to_write) as f64 / 1e3,
        verdict(p99(&mut sim.to_write) <= 1_000_000),
        p99(&mut procs.to_write) as f64 / 1e6,
        verdict(p99(&mut procs.to_write) <= 50_000_000),
    ))
}
