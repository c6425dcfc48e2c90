//! Deterministic simulation of a whole cluster: the in-process cluster on a manual
//! clock over the seeded emulated fabric, random workloads from every node's KV store,
//! random crashes, restarts, message delays and losses, and partitions - all drawn from
//! one seed, so a seed replays exactly - checking after every step:
//!
//! - no slot word of any directory ever moves to a lower version (so no late
//!   speculative mark overwrites a newer version);
//! - no Pending mark of a dead writer outlives the bound (`dead_after` + two heartbeats);
//! - every read returns a value intact and traceable to a write of its key, never one
//!   that was rolled back, and a `Fresh` read never returns a version older than a
//!   write that committed before the read began (cached reads included);
//! - liveness: no write is refused `Overloaded` (the simulated load, a few writes in
//!   flight per node, is far below every table's size, so a refusal for room is a
//!   leak), and every write submitted to a DPU app that has run since completes within
//!   twice the write timeout plus the failure-detection bound;
//! - at the end, with every node restarted and every link healed, every committed write
//!   (its newest version per key) is readable with a Fresh GET from any node, and
//!   again with `m` nodes stopped.
//!
//! Tables are small so that long runs wrap them many times: each node's outcome table
//! has 1024 entries (a default run of 3000 steps, 15 ms simulated, stays inside it; a
//! run of 200,000 steps, one simulated second and about 17,000 writes a node, wraps it
//! more than ten times) and every fragment log 64 slots.
//!
//! With `sequencer` set, the cluster orders writes with `ordering = "sequencer"`, and
//! the faults and invariants of [`sequencer`] are added.
//!
//! A failing seed reports the command that replays it.

pub mod campaign;
pub mod client;
pub mod oracle;
pub mod rng;
pub mod sequencer;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering as MemOrdering};
use std::sync::Arc;

use prescient_shim::directory::{self, SlotState, SlotWord};

use crate::cluster::config::{ClusterConfig, Congestion, Invalidation, NetworkConfig, Ordering, SequencerConfig};
use crate::cluster::run::inprocess::{region_config_for, ClusterClock, InProcess};
use crate::fabric::emu::{ModelConfig, PathDelay, PortConfig, Topology};
use crate::histogram::Histogram;
use client::{key_bytes, Client};
use oracle::Oracle;
use rng::Rng;
use sequencer::SequencerWatch;

/// What to simulate.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// The seed of everything.
    pub seed: u64,
    /// Nodes.
    pub nodes: u8,
    /// Data fragments.
    pub k: u8,
    /// Parity fragments.
    pub m: u8,
    /// Holders that must persist a fragment.
    pub quorum: u8,
    /// Scheduler steps.
    pub steps: u32,
    /// Keys the workload touches (few, so writes collide).
    pub keys: u32,
    /// Crashes, restarts and partitions (off: only delays and losses).
    pub faults: bool,
    /// Predictor leases pre-invalidate predicted keys (an online model).
    pub predictive: bool,
    /// Order writes by a sequencer (node 0, shadows 1 and 2), with the sequencer's
    /// faults and invariants.
    pub sequencer: bool,
    /// Switch ports of 10 Gbit/s with 64 KiB buffers in the model, and Swift on every
    /// node's peers (off: the delay model alone, no congestion control).
    pub swift: bool,
    /// The last this-many nodes are cache-only members (`role = "cache"`): they hold
    /// no fragments, their directories are invalidated, they write and read through the
    /// storage nodes, and they crash and are cut off like any other node.
    pub cache_members: u8,
    /// Where the nodes' files go (a fresh folder per run is made inside).
    pub dir: PathBuf,
}

impl SimOptions {
    /// Defaults for `seed`: 5 nodes, RS(3, 2), quorum 4, 3000 steps, 12 keys, faults on.
    pub fn new(seed: u64, dir: PathBuf) -> Self {
        Self {
            seed,
            nodes: 5,
            k: 3,
            m: 2,
            quorum: 4,
            steps: 3000,
            keys: 12,
            faults: true,
            predictive: false,
            sequencer: false,
            swift: false,
            cache_members: 0,
            dir,
        }
    }

    /// The mode the run exercises, for a campaign's closing line: the ordering, then
    /// what rides on it.
    pub fn mode_name(&self) -> String {
        let mut mode = String::from(if self.sequencer { "sequencer" } else { "HLC" });
        for (on, what) in [
            (self.predictive, " predictive"),
            (self.swift, " swift"),
            (self.cache_members > 0, " cache-members"),
            (!self.faults, " no-faults"),
        ] {
            if on {
                mode.push_str(what);
            }
        }
        mode
    }

    /// The command that replays this run.
    pub fn replay_command(&self) -> String {
        format!(
            "cargo run --release -p prescient-dpu -- sim --seed {} --steps {} --nodes {} --k {} --m {} --quorum {} --keys {}{}",
            self.seed,
            self.steps,
            self.nodes,
            self.k,
            self.m,
            self.quorum,
            self.keys,
            if self.faults { "" } else { " --no-faults" },
        ) + if self.predictive { " --predictive" } else { "" }
            + if self.sequencer { " --sequencer" } else { "" }
            + if self.swift { " --swift" } else { "" }
            + &if self.cache_members > 0 { format!(" --cache-members {}", self.cache_members) } else { String::new() }
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct SimReport {
    /// Steps run.
    pub steps: u32,
    /// Writes issued, committed, rolled back, undetermined.
    pub writes: (usize, usize, usize, usize),
    /// Reads checked.
    pub reads_checked: u64,
    /// Reads served from a cache.
    pub cache_hits: u64,
    /// GETs made.
    pub gets: u64,
    /// GETs that came back Unavailable.
    pub unavailable: u64,
    /// Crashes.
    pub crashes: u32,
    /// Partitions.
    pub partitions: u32,
    /// Sequencer epochs won, and failover times (sequencer lost to a newer epoch
    /// sequencing, and to its first write completing), in sequencer mode.
    pub failover: (u64, Histogram, Histogram),
    /// Feed entries checked against the one order, and the most committed writes a
    /// node's order had not released yet at a step (sequencer mode).
    pub order: (u64, u64),
    /// Epochs the sequencer rolled to settle a hole no ring recorded, and stamps
    /// settled as no-ops because no ring recorded them (summed over the nodes' last
    /// incarnations).
    pub rolls: (u64, u64),
    /// Stamps a fate ring recorded Aborted, and the most nodes whose stamp ledgers
    /// still held one of them then, up or down (below the quorum, or the run fails).
    pub aborted: (u64, u64),
    /// Stamps a fate ring recorded Committed, and the fewest nodes whose ledgers held
    /// one of them then (a quorum at least, or the run fails).
    pub committed: (u64, u64),
    /// Catch-ups of a node that fell a whole fate ring behind, the feed entries they
    /// copied from peers, and those that marked versions missing instead (sequencer
    /// mode).
    pub catch_ups: (u64, u64, u64),
    /// From the settled cluster to every order having released every committed write.
    pub order_drained: Histogram,
    /// Simulated time, nanoseconds.
    pub sim_ns: u64,
    /// Predictor leases marked, writes that found their key leased, and write
    /// completions that said so (`FLAG_LEASED`: the lease had a mark placed).
    pub leases: (u64, u64, u64),
    /// GETs that READ their key's spill sets too, and fragments refused for room, by the
    /// nodes' last incarnations.
    pub store: (u64, u64),
    /// Congestion control, by the nodes' last incarnations: requests held for a
    /// window, decreases on delay; and the switch ports' PFC pauses.
    pub paced: (u64, u64, u64),
    /// Sequencer mode, by the nodes' last incarnations: silent writers fenced, fences
    /// narrowed as their writer came back, stamps the orders decided from the holders'
    /// ledgers, and scans of a gone writer's ledgers.
    pub fences: (u64, u64, u64, u64),
    /// Sequencer mode, by the nodes' last incarnations: rollbacks a fencing holder did
    /// not take (frozen), and rollbacks sent again alone because a fencing holder's
    /// answer to a notice of several did not say which it left out.
    pub fenced_rollbacks: (u64, u64),
    /// Runs with a node gone for good, and the checks of the hole bound made while it
    /// was away (every steady node's order released every write committed a bound ago).
    pub gone: (u64, u64),
}

impl SimReport {
    /// Adds another run's counts.
    pub fn merge(&mut self, other: &SimReport) {
        self.steps += other.steps;
        self.writes.0 += other.writes.0;
        self.writes.1 += other.writes.1;
        self.writes.2 += other.writes.2;
        self.writes.3 += other.writes.3;
        self.reads_checked += other.reads_checked;
        self.cache_hits += other.cache_hits;
        self.gets += other.gets;
        self.unavailable += other.unavailable;
        self.crashes += other.crashes;
        self.partitions += other.partitions;
        self.sim_ns += other.sim_ns;
        self.leases.0 += other.leases.0;
        self.leases.1 += other.leases.1;
        self.leases.2 += other.leases.2;
        self.store.0 += other.store.0;
        self.store.1 += other.store.1;
        self.fences.0 += other.fences.0;
        self.fences.1 += other.fences.1;
        self.fences.2 += other.fences.2;
        self.fences.3 += other.fences.3;
        self.fenced_rollbacks.0 += other.fenced_rollbacks.0;
        self.fenced_rollbacks.1 += other.fenced_rollbacks.1;
        self.gone.0 += other.gone.0;
        self.gone.1 += other.gone.1;
        self.failover.0 += other.failover.0;
        self.failover.1.merge(&other.failover.1);
        self.failover.2.merge(&other.failover.2);
        self.order.0 += other.order.0;
        self.order.1 = self.order.1.max(other.order.1);
        self.rolls.0 += other.rolls.0;
        self.rolls.1 += other.rolls.1;
        self.aborted.0 += other.aborted.0;
        self.aborted.1 = self.aborted.1.max(other.aborted.1);
        self.committed = match (self.committed.0, other.committed.0) {
            (_, 0) => self.committed,
            (0, _) => other.committed,
            (a, b) => (a + b, self.committed.1.min(other.committed.1)),
        };
        self.catch_ups.0 += other.catch_ups.0;
        self.catch_ups.1 += other.catch_ups.1;
        self.catch_ups.2 += other.catch_ups.2;
        self.order_drained.merge(&other.order_drained);
        self.paced.0 += other.paced.0;
        self.paced.1 += other.paced.1;
        self.paced.2 += other.paced.2;
    }

    /// One line of counts.
    pub fn line(&self) -> String {
        format!(
            "{} steps, {} simulated; writes {} issued / {} committed / {} rolled back / {} undetermined; \
             {} reads checked ({} from caches, {} GETs, {} unavailable); {} crashes, {} partitions; {} leases, {} lease hits ({} completed leased); {} GETs read spill sets, {} fragments refused for room; \
             {} requests held by congestion windows, {} window decreases, {} port pauses",
            self.steps,
            if self.sim_ns >= 1_000_000_000 {
                format!("{:.2} s", self.sim_ns as f64 / 1e9)
            } else {
                format!("{:.1} ms", self.sim_ns as f64 / 1e6)
            },
            self.writes.0,
            self.writes.1,
            self.writes.2,
            self.writes.3,
            self.reads_checked,
            self.cache_hits,
            self.gets,
            self.unavailable,
            self.crashes,
            self.partitions,
            self.leases.0,
            self.leases.1,
            self.leases.2,
            self.store.0,
            self.store.1,
            self.paced.0,
            self.paced.1,
            self.paced.2
        ) + &self.failover_line()
    }

    /// The failover figures of a sequencer run ("" otherwise).
    pub fn failover_line(&self) -> String {
        let (won, claim, write) = &self.failover;
        if *won == 0 {
            return String::new();
        }
        let us = |h: &Histogram, q: f64| h.percentile(q) as f64 / 1e3;
        format!(
            "; {won} sequencer epochs, {} failovers: to a new sequencer p50 {:.0} us p99 {:.0} us, to its first write p50 {:.0} us p99 {:.0} us; {} feed entries in one order, a node at most {} committed writes behind",
            claim.count(),
            us(claim, 0.5),
            us(claim, 0.99),
            us(write, 0.5),
            us(write, 0.99),
            self.order.0,
            self.order.1
        ) + &format!(
            "; {} epochs rolled over unrecorded holes, {} unrecorded stamps settled; in the holders' stamp ledgers (up, or down as they crashed), {} stamps recorded Committed each held by a quorum (at least {}), {} recorded Aborted each by fewer (at most {}); {} catch-ups of a node a fate ring behind ({} feed entries copied from peers, {} marked missing); every order caught up after the run settled in p50 {:.0} us, max {:.0} us",
            self.rolls.0,
            self.rolls.1,
            self.committed.0,
            self.committed.1,
            self.aborted.0,
            self.aborted.1,
            self.catch_ups.0,
            self.catch_ups.1,
            self.catch_ups.2,
            us(&self.order_drained, 0.5),
            us(&self.order_drained, 1.0)
        ) + &format!(
            "; {} silent writers fenced ({} fences narrowed as they came back), {} stamps decided from the holders' ledgers, {} scans of a fenced-out writer's ledgers, {} rollbacks frozen by a fencing holder ({} sent again alone to learn which); {} runs with a node gone for good, the hole bound checked {} times while it was away",
            self.fences.0, self.fences.1, self.fences.2, self.fences.3, self.fenced_rollbacks.0, self.fenced_rollbacks.1, self.gone.0, self.gone.1
        )
    }
}

/// A broken invariant: what, when, and how to replay it.
#[derive(Clone, Debug)]
pub struct Violation {
    /// The run's options.
    pub options: SimOptions,
    /// The step it was found at.
    pub step: u32,
    /// What was broken.
    pub what: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {} step {}: {}\n  replay: {}",
            self.options.seed,
            self.step,
            self.what,
            self.options.replay_command()
        )
    }
}

/// The model's one-way delay and jitter.
const LATENCY_NS: u64 = 2_000;
const JITTER_NS: u64 = 8_000;

/// One simulated microsecond per step in these units.
const TICK_NS: u64 = 5_000;

/// Silence after which the simulated holders fence a writer (`cluster.fence_after_us`).
const SIM_FENCE_AFTER_US: u64 = 6_000;

/// Seeds whose run has a node gone for good (in sequencer mode with faults): one in
/// five. It goes at [`GONE_AT_STEP`] and comes back only for the final checks; the run
/// is at least [`GONE_STEPS`] steps, so that the orders are checked for long without it.
/// No other node crashes or is cut off in those runs; messages are still lost.
const GONE_SEEDS: u64 = 5;
const GONE_AT_STEP: u32 = 400;
const GONE_STEPS: u32 = 12_000;
/// How long a Fresh reader waits for a Pending slot before asking the DPU app.
const MAX_WAIT_NS: u64 = 300_000;
/// Fate ring entries of odd sequencer seeds: a few hundred writes of one writer, which a
/// node that is down for a while falls behind.
const SMALL_FATE_ENTRIES: usize = 256;

fn config(opts: &SimOptions, dir: &std::path::Path) -> Result<ClusterConfig, String> {
    let keys = dir.join("keys");
    std::fs::create_dir_all(&keys).map_err(|e| e.to_string())?;
    let key = keys.join("1.key");
    std::fs::write(&key, [0x5a; 32]).map_err(|e| e.to_string())?;
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).map_err(|e| e.to_string())?;
    let mut c = ClusterConfig::in_process(opts.nodes.into(), opts.k.into(), opts.m.into(), dir);
    c.quorum = opts.quorum.into();
    let storage = usize::from(opts.nodes.saturating_sub(opts.cache_members));
    for node in c.nodes.iter_mut().skip(storage) {
        node.role = crate::cluster::config::Role::Cache;
    }
    c.key_dir = keys;
    c.value_bytes_max = 1024;
    // A store of two sets (32 records) for the dozen keys, so that hot keys' versions
    // spill into other sets and superseded records are reused many times over.
    c.store_bytes = crate::cluster::protocol::node::store_bytes_for_keys(&c, 16).map_err(|e| e.to_string())?;
    // Small tables, so that long runs wrap them many times: 64 log slots, and the
    // smallest outcome table (each node's wraps every 1024 of its writes).
    c.log_slots = 64;
    c.outcome_entries = crate::limits::OUTCOME_ENTRIES_MIN as usize;
    c.heartbeat_us = 100;
    c.lease_us = 500;
    c.dead_after_us = 1_500;
    c.write_timeout_us = 6_000;
    c.invalidation = Invalidation::Speculative;
    c.predictive = opts.predictive;
    // Leases at the model's fixed threshold on even seeds, tuned from cost on odd ones:
    // the tuner starts strict and resets with every restart, so tuned runs open a
    // fifth of the leases, and the lease protocol (marks, take-overs, roll-backs
    // across crashes) needs the fixed runs' many to be exercised.
    if opts.predictive {
        c.lease_tuning = Some(opts.seed % 2 == 1);
    }
    if opts.sequencer {
        let shadows = (1..opts.nodes.min(3)).collect();
        // Holders fence a writer silent for four dead_afters: a third of the crashes
        // outlast that, so fences, their narrowing when the writer is back, and the
        // orders deciding its stamps from the ledgers run throughout.
        let fence_after_us = SIM_FENCE_AFTER_US;
        c.ordering = Ordering::Sequencer(SequencerConfig { sequencer: 0, shadows, stamp_block: 4, fence_after_us });
        // Odd seeds: fate rings so small that a node down for a while falls a whole
        // ring behind a writer, and catches up from a peer's feed, under every fault.
        if opts.seed % 2 == 1 {
            c.fate_entries = SMALL_FATE_ENTRIES;
        }
    }
    if opts.swift {
        // The model's one region (below), so each path's base round trip is known.
        let delay = PathDelay { one_way_ns: LATENCY_NS, jitter_ns: JITTER_NS };
        c.network = NetworkConfig {
            topology: Some(Topology::flat(c.nodes.len(), delay).map_err(|e| e.to_string())?),
            congestion: Congestion::Swift,
            seed: 0,
        };
    }
    c.validate().map_err(|e| e.to_string())?;
    Ok(c)
}

/// Runs one seed.
pub fn run(opts: &SimOptions) -> Result<SimReport, Violation> {
    let fail = |step: u32, what: String| Violation { options: opts.clone(), step, what };
    // One folder per run, not per seed: two runs of one seed may share a process (the
    // test harness runs the Swift and sequencer tests, both from seed 700, at once),
    // and one's clean-up would pull the files from under the other.
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let run_id = RUNS.fetch_add(1, MemOrdering::Relaxed);
    let dir = opts.dir.join(format!("sim-{}-{}-{run_id}", opts.seed, std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = Arc::new(config(opts, &dir).map_err(|e| fail(0, format!("configuration: {e}")))?);
    let mut rng = Rng::new(opts.seed);
    let model = ModelConfig {
        seed: rng.next_u64(),
        latency_ns: LATENCY_NS,
        jitter_ns: JITTER_NS,
        loss_ppm: if opts.faults { 2_000 } else { 0 },
        // 10 Gbit/s ports with 64 KiB buffers: the writes' bursts queue. (At 1 Gbit/s a
        // GET's 7 KB store-set READ takes 58 us to serialise, above Swift's target, and
        // the windows sit at their floor: the target does not grow with message size.)
        ports: opts.swift.then_some(PortConfig {
            bytes_per_s: 1_250_000_000,
            buffer_bytes: 64 << 10,
            ecn_bytes: 16 << 10,
        }),
        ..ModelConfig::ideal()
    };
    let region = region_config_for(&cfg, 1, 64);
    let clock = ClusterClock::manual(1_000_000);
    let mut cluster = InProcess::start(Arc::clone(&cfg), clock, model, region, &dir.join("regions"))
        .map_err(|e| fail(0, format!("cluster did not start: {e}")))?;
    let n = opts.nodes;
    let mut clients: Vec<Client> = (0..n).map(|i| Client::new(i, Arc::clone(cluster.host(i)))).collect();
    let mut oracle = Oracle::default();
    oracle.track_commits = opts.sequencer;
    let small_rings = opts.sequencer && opts.seed % 2 == 1;
    let mut watch = opts.sequencer.then(|| SequencerWatch::new(n, small_rings));
    if let Some(w) = watch.as_mut().filter(|_| opts.faults && opts.seed % GONE_SEEDS == 0) {
        w.track_hole_bound();
    }
    let mut report = SimReport::default();
    let mut down_since: Vec<Option<u64>> = vec![None; n as usize];
    let mut back_at: Vec<u64> = vec![0; n as usize];
    let mut cuts: Vec<(u8, u8, u64)> = Vec::new();
    let mut last_version: Vec<Vec<u64>> = vec![vec![0; 64]; n as usize];
    let mut next_write = 1u64;
    let mut seq_key: Vec<u32> = (0..u32::from(n)).collect();
    let dead_bound = (cfg.dead_after_us + 4 * cfg.heartbeat_us) * 1_000;
    // Liveness: a write ends by its deadline (write_timeout after the DPU app takes it)
    // or, committed, once its decision and marks settle; twice the timeout covers the
    // wait in the ring behind a full write table and a node's quorum wait at start.
    let write_bound = 2 * cfg.write_timeout_us * 1_000 + dead_bound;
    // Let the nodes connect.
    cluster.run_until(TICK_NS, 50_000_000, |c| {
        (0..n).all(|i| (0..n).all(|j| i == j || c.node(i).is_some_and(|x| x.peer_up(j))))
    });

    // A node gone for good (sequencer mode, one seed in GONE_SEEDS): while it is away
    // and the rest is steady, every order releases every committed write within
    // `hole_bound`, fences and the ledgers standing in for its ring.
    let gone_run = opts.sequencer && opts.faults && opts.seed % GONE_SEEDS == 0;
    let steps = if gone_run { opts.steps.max(GONE_STEPS) } else { opts.steps };
    let mut gone: Option<(u8, u64)> = None;
    // Writes seen committed when the gone node went.
    let mut gone_committed = 0;
    // Once the gone node is fenced, a hole closes within a write's bound (a write
    // decides by then), a roll and an epoch's end (a few dead_afters).
    let hole_bound = 4 * cfg.dead_after_us * 1_000 + write_bound;
    let mut disturbed: Vec<u64> = vec![0; n as usize];
    for step in 0..steps + 2_000 {
        let now = cluster.now().mono_ns;
        let workload = step < steps;
        // A gone run has no other crash or cut (messages are still lost): the hole
        // bound is checked while the gone node is away. (With another node away too,
        // a write its writer rolled back when fenced, frozen Held by fewer holders than
        // the rule needs, can wait for the gone node: dpu-app/src/cluster/README.md, "Not
        // built".)
        let quiet = gone_run;
        if gone_run && step == GONE_AT_STEP && down_since.iter().all(Option::is_none) {
            let victim = rng.below(u64::from(n)) as u8;
            if let Some(w) = watch.as_mut() {
                w.crashing(&cluster, victim);
            }
            cluster.crash(victim);
            clients[victim as usize].dpu_gone(now);
            down_since[victim as usize] = Some(now);
            back_at[victim as usize] = u64::MAX;
            gone = Some((victim, now));
            gone_committed = watch.as_ref().map_or(0, |w| w.committed_count());
            report.crashes += 1;
            report.gone.0 += 1;
        }
        for (i, since) in down_since.iter().enumerate() {
            if since.is_some() {
                disturbed[i] = now;
            }
        }
        for &(a, b, _) in &cuts {
            disturbed[a as usize] = now;
            disturbed[b as usize] = now;
        }
        // Faults.
        if opts.faults && workload && !quiet {
            let down = down_since.iter().filter(|d| d.is_some()).count();
            if down < opts.m as usize && rng.chance(400) {
                let victim = rng.below(u64::from(n)) as u8;
                if down_since[victim as usize].is_none() {
                    if let Some(w) = watch.as_mut() {
                        w.crashing(&cluster, victim);
                    }
                    cluster.crash(victim);
                    down_since[victim as usize] = Some(now);
                    back_at[victim as usize] = now + 1_000_000 + rng.below(8_000_000);
                    report.crashes += 1;
                }
            }
            if rng.chance(500) {
                let (a, b) = (rng.below(u64::from(n)) as u8, rng.below(u64::from(n)) as u8);
                if a != b && cluster.is_up(a) && cluster.is_up(b) {
                    cluster.partition(a, b);
                    cuts.push((a, b, now + 200_000 + rng.below(3_000_000)));
                    report.partitions += 1;
                }
            }
        }
        if let (Some(watch), true) = (watch.as_mut(), opts.faults && workload && !quiet) {
            let mut faults =
                Faults { down_since: &mut down_since, back_at: &mut back_at, cuts: &mut cuts, report: &mut report };
            sequencer_faults(&mut cluster, watch, &mut rng, &mut faults, now, opts.m);
        }
        cuts.retain(|&(a, b, until)| {
            let heal = now >= until || !workload;
            if heal {
                cluster.heal(a, b);
            }
            !heal
        });
        for i in 0..n {
            let due = down_since[i as usize].is_some() && (now >= back_at[i as usize] || !workload);
            if due {
                if let (Some(w), Some((g, _))) = (watch.as_mut(), gone) {
                    if g == i && w.committed_count() - gone_committed > cfg.feed_entries {
                        w.owe_gaps(i);
                    }
                }
                cluster.restart(i).map_err(|e| fail(step, format!("node {i} did not restart: {e}")))?;
                clients[i as usize].dpu_restarted(now);
                down_since[i as usize] = None;
            }
        }
        // Workload.
        if workload {
            for i in 0..n {
                if !cluster.is_up(i) {
                    continue;
                }
                let c = &mut clients[i as usize];
                if c.in_flight() < 6 && rng.chance(250_000) {
                    // Half the writes walk the keys in order (a pattern the predictor
                    // learns), half pick one at random.
                    let key = if rng.chance(500_000) {
                        seq_key[i as usize] = (seq_key[i as usize] + 1) % opts.keys;
                        seq_key[i as usize]
                    } else {
                        rng.below(u64::from(opts.keys)) as u32
                    };
                    let delete = rng.chance(100_000);
                    let len = 16 + rng.below(700) as usize;
                    if c.write(key, next_write, len, delete, now, &mut oracle) {
                        next_write += 1;
                    }
                }
                if c.in_flight() < 10 && rng.chance(300_000) {
                    let key = rng.below(u64::from(opts.keys)) as u32;
                    let fresh = rng.chance(800_000);
                    c.read(key, fresh, now, MAX_WAIT_NS, &mut oracle).map_err(|e| fail(step, e))?;
                }
                c.flush();
            }
        }
        cluster.step();
        let now = cluster.now().mono_ns;
        for c in &mut clients {
            c.reap(now, &mut oracle).map_err(|e| fail(step, e))?;
            c.recheck(now, &mut oracle).map_err(|e| fail(step, e))?;
            c.flush();
            c.overdue(now, write_bound).map_err(|e| fail(step, e))?;
        }
        if let Some(watch) = watch.as_mut() {
            watch.check(&cluster, now).map_err(|e| fail(step, e))?;
            for (stamp, at) in oracle.new_commits.drain(..) {
                watch.committed(stamp, at).map_err(|e| fail(step, e))?;
            }
            if let Some(what) = oracle.out_of_order.take() {
                return Err(fail(step, what));
            }
            if let Some((g, since)) = gone.filter(|&(g, _)| workload && !cluster.is_up(g)) {
                let steady =
                    (0..n).filter(|&j| j != g).all(|j| cluster.is_up(j) && now >= disturbed[j as usize] + hole_bound);
                let fenced_by = since + SIM_FENCE_AFTER_US * 1_000 + hole_bound;
                if steady && now >= fenced_by {
                    watch.hole_bound(&cluster, now, hole_bound, g).map_err(|e| fail(step, e))?;
                    report.gone.1 += 1;
                }
            }
        }
        // Directory invariants, on every host, for every key's slot.
        for h in 0..n {
            let host = cluster.host(h);
            let slots = host.config().directory_slots;
            for key in 0..opts.keys {
                let slot = directory::slot_of(directory::key_id(&key_bytes(key)), slots);
                let word = SlotWord::unpack(
                    host.directory_slot(slot).expect("a slot").load(std::sync::atomic::Ordering::Acquire),
                );
                let last = &mut last_version[h as usize][slot as usize % 64];
                if word.version < *last {
                    return Err(fail(
                        step,
                        format!("host {h} slot {slot}: version moved back from {:#x} to {:#x}", *last, word.version),
                    ));
                }
                *last = word.version;
                // (A dead node's own host directory is nobody's to clear: its lease has
                // lapsed with its DPU app, and it revokes the directory at restart.)
                if word.state == SlotState::Pending && cluster.is_up(h) {
                    if let Some(since) = down_since.get(word.writer as usize).copied().flatten() {
                        if now > since + dead_bound {
                            return Err(fail(
                                step,
                                format!(
                                "host {h} slot {slot}: a Pending mark of node {} outlived it by {} us (bound {} us)",
                                word.writer, (now - since) / 1000, dead_bound / 1000
                            ),
                            ));
                        }
                    }
                }
            }
        }
        cluster.clock().advance(TICK_NS);
        report.steps = step + 1;
    }

    // Quiesce: let every write, read and repair finish.
    let quiet = cluster.run_until(TICK_NS, 400_000_000, |c| {
        (0..n).all(|i| {
            c.node(i).is_some_and(|x| {
                x.in_flight() == 0 && x.repairs_pending() == 0 && (0..n).all(|j| i == j || x.peer_up(j))
            })
        })
    });
    for c in &mut clients {
        let now = cluster.now().mono_ns;
        c.reap(now, &mut oracle).map_err(|e| fail(report.steps, e))?;
    }
    if !quiet {
        for i in 0..n {
            if let Some(x) = cluster.node(i) {
                tracing::warn!(node = i, in_flight = x.in_flight(), repairs = x.repairs_pending(), detail = x.repairs_debug(), up = ?(0..n).map(|j| x.peer_up(j)).collect::<Vec<_>>(), "not settled");
            }
        }
        return Err(fail(report.steps, "the cluster did not settle (writes or repairs in flight, or links down) with every node up and every link healed".into()));
    }
    // Sequencer mode: with every node up and nothing in flight, every node's order
    // releases every committed write within the bound: no hole stays open (a write
    // decides within its timeout, a hole no ring records is rolled over after two
    // dead_afters, an epoch ends once every ring is READ past it).
    if let Some(watch) = watch.as_mut() {
        let top = watch.newest_committed();
        let from = cluster.now().mono_ns;
        let released = cluster
            .run_until(TICK_NS, write_bound, |c| c.nodes().all(|x| x.order_cursor().is_none_or(|cursor| cursor > top)));
        if !released {
            let now = cluster.now().mono_ns;
            let states: Vec<_> = cluster
                .nodes()
                .map(|x| (x.id(), x.order_cursor(), x.order_stall(now), x.order_debug(), x.apply_stats()))
                .collect();
            return Err(fail(
                report.steps,
                format!("a hole stayed open past its bound: {} ms with every node up and nothing in flight, an order is still below the newest committed version {top:#x}: {states:?}", write_bound / 1_000_000),
            ));
        }
        watch.order_drained_ns.record(cluster.now().mono_ns - from);
        watch.check(&cluster, cluster.now().mono_ns).map_err(|e| fail(report.steps, e))?;
    }
    // Every committed write reads back with every node up, and again with m nodes
    // down: the repairs gave back what the holders that were down had missed.
    let mut down = Vec::new();
    for round in 0..2 {
        if round == 1 {
            while down.len() < opts.m as usize {
                // Storage nodes: m of them down is what every read must survive.
                let storage = cfg.placement();
                let victim = storage.storage()[rng.below(storage.storage_nodes() as u64) as usize];
                if !down.contains(&victim) {
                    cluster.crash(victim);
                    down.push(victim);
                }
            }
        }
        for key in 0..opts.keys {
            let Some((stamp, _, _)) = oracle.newest(key) else { continue };
            let reader = (0..n)
                .map(|i| ((key + u32::from(i)) % u32::from(n)) as u8)
                .find(|i| !down.contains(i))
                .expect("a live node");
            let began = cluster.now().mono_ns;
            let before = oracle.reads_checked;
            let c = &mut clients[reader as usize];
            c.read(key, true, began, 0, &mut oracle).map_err(|e| fail(report.steps, e))?;
            let got = cluster.run_until(TICK_NS, 50_000_000, |cl| {
                let now = cl.now().mono_ns;
                let c = &mut clients[reader as usize];
                c.flush();
                let _ = c.reap(now, &mut oracle);
                let _ = c.recheck(now, &mut oracle);
                c.in_flight() == 0
            });
            if !got {
                return Err(fail(report.steps, format!("the final read of key {key} never completed")));
            }
            if oracle.reads_checked == before {
                let state = if round == 0 { "every node up".to_string() } else { format!("nodes {down:?} down") };
                return Err(fail(
                    report.steps,
                    format!("the final Fresh read of key {key} (newest committed version {stamp:#x}) came back Unavailable with {state}"),
                ));
            }
        }
    }
    report.writes = oracle.counts();
    report.reads_checked = oracle.reads_checked;
    for c in &clients {
        report.cache_hits += c.stats.cache_hits;
        report.gets += c.stats.gets;
        report.unavailable += c.stats.unavailable;
        report.leases.2 += c.stats.leased_writes;
    }
    report.sim_ns = cluster.now().mono_ns;
    if let Some(w) = &watch {
        report.failover = (w.epochs_won() as u64, w.to_claim.clone(), w.to_write.clone());
        report.order = (w.order_lag.1, w.order_lag.0);
        report.order_drained = w.order_drained_ns.clone();
        report.catch_ups = w.catch_ups();
        report.aborted = w.aborted;
        report.committed = w.committed;
        for node in cluster.nodes() {
            report.rolls.0 += node.sequencer_stats().map_or(0, |s| s.rolls);
            report.rolls.1 += node.apply_stats().map_or(0, |a| a.unrecorded);
            report.fences.0 += node.stats().fences;
            report.fences.1 += node.stats().fences_narrowed;
            report.fences.2 += node.apply_stats().map_or(0, |a| a.ruled);
            report.fences.3 += node.apply_stats().map_or(0, |a| a.scans);
            report.fenced_rollbacks.0 += node.stats().rollbacks_fenced;
            report.fenced_rollbacks.1 += node.stats().rollbacks_resent_alone;
        }
    }
    for node in cluster.nodes() {
        report.leases.0 += node.stats().leases_opened;
        report.leases.1 += node.stats().predictor_hits;
        report.store.0 += node.stats().get_spill_rounds;
        report.store.1 += node.stats().store_full;
        for (_, p, _) in node.pacing() {
            report.paced.0 += p.held;
            report.paced.1 += p.swift.decreases;
        }
    }
    report.paced.2 = (0..u32::from(n)).filter_map(|i| cluster.network().model().port_stats(i)).map(|s| s.pauses).sum();
    drop(clients);
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(report)
}

/// The simulator's fault state that the sequencer's faults change too.
struct Faults<'a> {
    down_since: &'a mut Vec<Option<u64>>,
    back_at: &'a mut Vec<u64>,
    cuts: &'a mut Vec<(u8, u8, u64)>,
    report: &'a mut SimReport,
}

/// The faults aimed at the sequencer (see [`sequencer`]): it crashes, a partition
/// isolates it, or a partition cuts it from its first shadow only.
fn sequencer_faults(
    cluster: &mut InProcess,
    watch: &mut SequencerWatch,
    rng: &mut Rng,
    f: &mut Faults<'_>,
    now: u64,
    m: u8,
) {
    let Some((leader, epoch)) = SequencerWatch::sequencer(cluster) else { return };
    let down = f.down_since.iter().filter(|d| d.is_some()).count();
    let n = cluster.len() as u8;
    if down < m as usize && rng.chance(100) {
        watch.crashing(cluster, leader);
        cluster.crash(leader);
        f.down_since[leader as usize] = Some(now);
        f.back_at[leader as usize] = now + 1_000_000 + rng.below(6_000_000);
        f.report.crashes += 1;
        watch.lost(epoch, now);
    } else if rng.chance(100) && f.cuts.iter().all(|&(a, b, _)| a != leader && b != leader) {
        let until = now + 500_000 + rng.below(4_000_000);
        for j in (0..n).filter(|&j| j != leader && cluster.is_up(j)) {
            cluster.partition(leader, j);
            f.cuts.push((leader, j, until));
        }
        f.report.partitions += 1;
        watch.lost(epoch, now);
    } else if rng.chance(60) {
        // The first shadow loses the sequencer while the others still hear it: it
        // claims against a live sequencer.
        let shadow = if leader == 1 { 2 } else { 1 };
        if shadow < n && cluster.is_up(shadow) && f.cuts.iter().all(|&(a, b, _)| (a, b) != (leader, shadow)) {
            cluster.partition(leader, shadow);
            f.cuts.push((leader, shadow, now + 500_000 + rng.below(3_000_000)));
            f.report.partitions += 1;
        }
    }
}
