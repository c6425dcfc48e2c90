//! The `prescient-dpu` command: serve host regions, run the demo, run benchmarks.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use prescient_dpu::cluster::config::{ClusterConfig, Congestion};
use prescient_dpu::cluster::run::one_node::{ServeRegions, STORE_BYTES_DEFAULT};
use prescient_dpu::cluster::run::process::{self, ServeCluster};
use prescient_dpu::load::setup::{Network, Policy};
use prescient_dpu::{bench, demo, signal};
use prescient_models::trace::traces_dir;
use prescient_shim::config::HOST_TIMEOUT_MS_DEFAULT;

/// Prescient's DPU offload engine.
#[derive(Parser, Debug)]
#[command(name = "prescient-dpu", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve one or more host regions (one per KV-store process). Without `--config`
    /// each region is served by a cluster of one node (its values sealed and kept whole
    /// in its own files, GETs served, its cache directory kept); with `--config`, the one
    /// region is served as node `--node` of that replicated cluster.
    Serve {
        /// CPU-emulation mode: run on this host's cores, reading the region file
        /// directly (the only mode this build has).
        #[arg(long)]
        emulate: bool,
        /// A region file created by the host shim (repeatable; exactly one with
        /// `--config`). Regions are failure domains: one that cannot be served is
        /// refused, naming it, and the others are served.
        #[arg(long, required = true)]
        region: Vec<PathBuf>,
        /// Do not mlock the regions (for hosts with a small memlock limit).
        #[arg(long)]
        no_pin: bool,
        /// Milliseconds without a host heartbeat before its buffers are reclaimed.
        #[arg(long, default_value_t = HOST_TIMEOUT_MS_DEFAULT)]
        host_timeout_ms: u64,
        /// Folder for each region's files (fragment store, outcome table, epochs,
        /// keys), one subfolder per region named for its file. Default: `<region>.prescient`
        /// beside each region file. A restarted DPU app finds its values there.
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Seal every value with the keys in this folder (`<id>.key` files of 32 bytes,
        /// readable by the owner only; the highest id seals), shared by every region.
        /// Default: `keys/` in each region's data folder, made with one random key on
        /// first start.
        #[arg(long)]
        key_dir: Option<PathBuf>,
        /// A predictor model file (e.g. models/shipped/OLTP.model): every written key
        /// feeds it, and the keys it predicts are marked in the host's cache directory
        /// before their write arrives (leases; reported in the summary). Default: no
        /// predictor.
        #[arg(long)]
        model: Option<PathBuf>,
        /// Largest PUT value, in bytes; larger ones are refused at the door. Default:
        /// the largest the region's buffers carry sealed. Store records are sized for it.
        #[arg(long)]
        value_bytes_max: Option<usize>,
        /// Bytes of each region's fragment store file, allocated when it is created. A
        /// record holds one version of a key at up to --value-bytes-max (plus 104 bytes,
        /// rounded up to 64); keep keys under half the records, where the store stays
        /// well below refusing (`prescient-dpu fill` measures). 64 MiB holds about 17,000
        /// records of the 3712-byte values of 4 KiB buffers.
        #[arg(long, default_value_t = STORE_BYTES_DEFAULT)]
        store_bytes: usize,
        /// Serve as node `--node` of the replicated cluster in this file (writes
        /// replicated across its nodes, GETs, cache-directory invalidation); exactly one
        /// `--region`. Keys, the data folder, the model and sizes then come from the file.
        #[arg(long, conflicts_with_all = ["data_dir", "key_dir", "model", "value_bytes_max", "store_bytes"])]
        config: Option<PathBuf>,
        /// With `--config`: this node's id in the file.
        #[arg(long, requires = "config", default_value_t = 0)]
        node: u8,
        /// Answer `GET /metrics` on this HOST:PORT (e.g. 127.0.0.1:9464; port 0 picks a
        /// free one) with the Prometheus text format: per-stage latency histograms,
        /// requests by op and status, predictor, invalidation, bytes and links per peer.
        /// The address in use is printed at start.
        #[arg(long, value_name = "ADDR")]
        metrics: Option<String>,
        /// Removed (there is no stage pipeline to delay); refused with what to do.
        #[arg(long, hide = true)]
        delay_us: Option<String>,
        /// Removed (a one-node cluster keeps each value whole); refused with what to do.
        #[arg(long, hide = true)]
        stripe: Option<String>,
        /// Removed (the key epoch is in the data folder); refused with what to do.
        #[arg(long, hide = true)]
        epoch_file: Option<PathBuf>,
    },
    /// Deterministic simulation of a whole cluster with random faults (see
    /// `prescient_dpu::sim`); a failing seed prints the command that replays it.
    Sim {
        /// Run this one seed.
        #[arg(long)]
        seed: Option<u64>,
        /// Run this many seeds, from `--from`.
        #[arg(long, default_value_t = 1000)]
        seeds: u64,
        /// First seed of `--seeds`.
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// Scheduler steps per seed.
        #[arg(long, default_value_t = 3000)]
        steps: u32,
        /// Nodes.
        #[arg(long, default_value_t = 5)]
        nodes: u8,
        /// Data fragments.
        #[arg(long, default_value_t = 3)]
        k: u8,
        /// Parity fragments.
        #[arg(long, default_value_t = 2)]
        m: u8,
        /// Quorum.
        #[arg(long, default_value_t = 4)]
        quorum: u8,
        /// Keys the workload touches.
        #[arg(long, default_value_t = 12)]
        keys: u32,
        /// No crashes, restarts or partitions.
        #[arg(long)]
        no_faults: bool,
        /// Predictor leases pre-invalidate predicted keys (an online model).
        #[arg(long)]
        predictive: bool,
        /// Order writes by a sequencer (node 0; shadows 1 and 2), with crashes and
        /// partitions aimed at it and the sequencer's invariants.
        #[arg(long)]
        sequencer: bool,
        /// Switch ports with bounded buffers in the model and Swift congestion control.
        #[arg(long)]
        swift: bool,
        /// The last N nodes are cache-only members (no fragments; their directories
        /// are invalidated, their GETs read the storage nodes).
        #[arg(long, default_value_t = 0)]
        cache_members: u8,
        /// Seeds run at once, each on a thread of its own (default: one per CPU). A
        /// seed's run is the same whatever this is.
        #[arg(long)]
        jobs: Option<usize>,
        /// Run every seed even after one fails, print each failure as it is found, and
        /// end with the list of failing seeds (a hunt; the default stops at the first).
        #[arg(long)]
        keep_going: bool,
    },
    /// Train and evaluate the write-stream predictor (same as `prescient-model`).
    Model {
        #[command(subcommand)]
        command: prescient_models::cli::Command,
    },
    /// The README's main job: a 5-node emulated cluster in this process (RS(3,2),
    /// speculative invalidation with predictor leases, LAN model) replaying the OLTP
    /// trace's writes from every node's host with readers on every node; prints a summary.
    Demo {
        /// Seconds of load.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// The trace whose write stream the hosts replay (default: OLTP.lis.zst in the
        /// traces folder, `$PRESCIENT_TRACES` or models/traces; absent: a
        /// synthetic YCSB-like stream).
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Predictor model (default: the shipped OLTP model, if this is a source
        /// checkout; the predictor learns online without one).
        #[arg(long)]
        model: Option<PathBuf>,
        /// Seed of the network model and the readers.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// A kill -9 soak of a five-process cluster (this binary's `serve --config`, one
    /// process per node): writers keep PUTs in flight on every host while a random
    /// node is killed every ~`--kill-every` s (at most m down) and restarted from its
    /// files; at the end every acknowledged write is read back, with every node up and
    /// with m nodes stopped. Exits non-zero if any acknowledged write was lost. With
    /// `--config`, runs only `--nodes-here` of that cluster file, as one site of a
    /// cluster spread over machines (see `ci/softroce-2vm.sh`).
    Soak {
        /// Seconds of load with kills.
        #[arg(long, default_value_t = 60.0)]
        seconds: f64,
        /// Mean seconds between kills (0: none).
        #[arg(long, default_value_t = 2.5)]
        kill_every: f64,
        /// Mean seconds a killed node stays down.
        #[arg(long, default_value_t = 2.0)]
        down_for: f64,
        /// Keys per writer.
        #[arg(long, default_value_t = 2000)]
        keys: u32,
        /// PUTs in flight per writer.
        #[arg(long, default_value_t = 16)]
        depth: u32,
        /// Seed of the kills, keys and value sizes.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Seconds the final reads with m nodes down may wait for repair to settle.
        #[arg(long, default_value_t = 60.0)]
        settle: f64,
        /// The nodes' fabric: emu (the emulated NIC over TCP) or verbs (the RDMA device
        /// `--device`; this binary must be built with `--features verbs`).
        #[arg(long, default_value = "emu", value_parser = ["emu", "verbs"])]
        fabric: String,
        /// With `--fabric verbs`: the RDMA device every node opens (as ibv_devices names it).
        #[arg(long)]
        device: Option<String>,
        /// With `--fabric verbs`: the GID index (default: a RoCEv2 GID with an IPv4 address).
        #[arg(long)]
        gid_index: Option<u8>,
        /// Run as one site of a cluster spread over machines: this cluster file (every
        /// site runs the same one; its fabric and devices are used, not `--fabric`).
        #[arg(long, requires_all = ["nodes_here", "share"])]
        config: Option<PathBuf>,
        /// With `--config`: the nodes this site runs, comma-separated (e.g. 0,1,2).
        #[arg(long, value_delimiter = ',')]
        nodes_here: Vec<u8>,
        /// With `--config`: a folder every site reads and writes, empty at the start.
        #[arg(long)]
        share: Option<PathBuf>,
        /// With `--config`: how many sites run the cluster.
        #[arg(long, default_value_t = 2)]
        sites: u32,
        /// With `--config`: seconds a site waits for the others to connect and at each
        /// meeting point.
        #[arg(long, default_value_t = 300.0)]
        meet_within: f64,
        /// How the cluster orders writes: hlc, or sequencer (node 0 sequences, 1 and 2
        /// are its shadows, 4,096-entry fate rings so a killed node falls a ring behind;
        /// at the end every node's change feed is checked to be one order holding every
        /// acknowledged write).
        #[arg(long, default_value = "hlc", value_parser = ["hlc", "sequencer"])]
        ordering: String,
    },
    /// Fills one node's fragment store toward `--keys` keys (each key's fragment of a
    /// real stripe, inserted then committed, as a holder does) and reports the write
    /// rate as it fills, where the store first refuses, and the index memory per key.
    Fill {
        /// Keys to write.
        #[arg(long, default_value_t = 10_000_000)]
        keys: u64,
        /// Bytes of each value.
        #[arg(long, default_value_t = 4096)]
        value_bytes: usize,
        /// Data fragments of the code (the node stores one fragment a key).
        #[arg(long, default_value_t = 3)]
        k: usize,
        /// Parity fragments.
        #[arg(long, default_value_t = 2)]
        m: usize,
        /// Folder for the store file (removed at the end unless --keep).
        #[arg(long, default_value = "target/prescient-fill")]
        dir: PathBuf,
        /// Store file size in bytes (default: --keys at half load, at most 80 % of the
        /// free disk space and 60 % of the available memory).
        #[arg(long)]
        store_bytes: Option<u64>,
        /// Keep the store file.
        #[arg(long)]
        keep: bool,
    },
    /// Benchmarks that print each figure next to a reference measured in the same run.
    Bench {
        #[command(subcommand)]
        what: BenchWhat,
    },
}

#[derive(Subcommand, Debug)]
enum BenchWhat {
    /// One DPU app serving an honest host A and a host B that scribbles over its whole
    /// region (random bytes, ring indices, malicious descriptors, liveness words,
    /// re-attaches): A's longest gap and p99.9 with and without the scribbler, as
    /// ratios, and the DPU app's log bytes per minute under attack.
    Scribble {
        /// Seconds of each phase (reference, then attack).
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// Seed of the scribbler.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// The host <-> DPU ring between two processes, next to rtrb and crossbeam-channel.
    Ring {
        /// Seconds per throughput figure.
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
        /// Round trips per latency figure.
        #[arg(long, default_value_t = 200_000)]
        round_trips: usize,
    },
    /// `ordering = "sequencer"`: PUT latency and throughput next to HLC ordering, and
    /// failover times (p50/p99) in the simulator on the LAN model and in a cluster of
    /// processes.
    Sequencer {
        /// Measured seconds of PUTs per ordering and load.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// Failovers in the simulator.
        #[arg(long, default_value_t = 200)]
        sim_failovers: u32,
        /// Failovers in the process cluster.
        #[arg(long, default_value_t = 30)]
        process_failovers: u32,
        /// The trace whose key order the writers replay (default: OLTP.lis.zst in the
        /// traces folder, `$PRESCIENT_TRACES` or models/traces; absent: a synthetic
        /// YCSB-like stream).
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Seed of the network models.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Four writers WRITE to one holder at twice its switch port's rate on the modelled
    /// fabric (manual clock: modelled time), with Swift and without.
    Incast {
        /// Seed of the network model.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Measured milliseconds of modelled time (after 5 ms of warm-up).
        #[arg(long, default_value_t = 50)]
        ms: u64,
    },
    /// The write path of a 5-node in-process cluster per network model and invalidation
    /// policy, next to replication without invalidation and sealing + striping alone.
    Cluster {
        /// Reed-Solomon data and parity fragments, as K+M with K + M <= 5 (3+2 or 4+1).
        #[arg(long, default_value = "3+2")]
        stripe: String,
        /// Measured seconds per cell (default: 3 on the LAN, 8 on the WAN).
        #[arg(long)]
        seconds: Option<f64>,
        /// 1 s per cell and shorter warm-ups: a smoke run.
        #[arg(long)]
        quick: bool,
        /// Network models, comma-separated: lan-1 (the LAN, one PUT in flight per
        /// writer: latency), lan (16 in flight: throughput), wan, incast (the LAN with
        /// every switch port a bottleneck at about half the offered load), geo (five
        /// storage nodes in one region, cache-only members 40 and 90 ms away).
        #[arg(long, default_value = "lan-1,lan,wan")]
        networks: String,
        /// Congestion control per cell: none, swift or both (default: none on lan-1,
        /// lan and wan, both on incast).
        #[arg(long)]
        congestion: Option<String>,
        /// Policies, comma-separated: none, after-commit, speculative,
        /// speculative+predictive.
        #[arg(long, default_value = "none,after-commit,speculative,speculative+predictive")]
        policies: String,
        /// The trace whose key order the writers replay (default: OLTP.lis.zst in the
        /// traces folder, `$PRESCIENT_TRACES` or models/traces; absent: a synthetic
        /// YCSB-like stream).
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Predictor model for speculative+predictive (default: the shipped OLTP model).
        #[arg(long)]
        model: Option<PathBuf>,
        /// Seed of the network model and the readers.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

fn parse_stripe(text: &str) -> Result<(u8, u8), String> {
    let bad = || format!("--stripe {text:?}: expected K+M, e.g. 4+2, with K >= 1, M >= 1 and K + M <= 32");
    let (k, m) = text.split_once('+').ok_or_else(bad)?;
    let (k, m): (u8, u8) = (k.trim().parse().map_err(|_| bad())?, m.trim().parse().map_err(|_| bad())?);
    if k == 0 || m == 0 || u16::from(k) + u16::from(m) > 32 {
        return Err(bad());
    }
    Ok((k, m))
}

fn self_binary() -> Result<PathBuf, String> {
    std::env::current_exe().map_err(|e| format!("cannot find the prescient-dpu binary: {e}"))
}

/// What stopped a command: the library's error (printed with its causes) or a
/// message about the command line.
type Failure = Box<dyn std::error::Error>;

fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Serve {
            emulate,
            region,
            no_pin,
            host_timeout_ms,
            data_dir,
            key_dir,
            model,
            value_bytes_max,
            store_bytes,
            config,
            node,
            metrics,
            delay_us,
            stripe,
            epoch_file,
        } => {
            if delay_us.is_some() {
                return Err("--delay-us is gone with the stage pipeline it delayed: every request now takes the cluster's write or GET path; drop the flag".into());
            }
            if stripe.is_some() {
                return Err("--stripe is gone: a region served without --config is a one-node cluster, which keeps each value whole (RS(1, 0)); to stripe values across nodes, serve a cluster with --config (k and m are in its file)".into());
            }
            if epoch_file.is_some() {
                return Err("--epoch-file is gone: the key epoch is kept in each region's data folder (see --data-dir); drop the flag".into());
            }
            if !emulate {
                return Err("this build serves only in CPU-emulation mode: pass --emulate (the BlueField DOCA link is not built in)".into());
            }
            let host_timeout = Duration::from_millis(host_timeout_ms);
            let stop = signal::install()?;
            let summary = match config {
                Some(path) => {
                    let [region] = <[PathBuf; 1]>::try_from(region)
                        .map_err(|r| format!("--config serves exactly one host region; {} were given", r.len()))?;
                    let config = ClusterConfig::load(&path)?;
                    let opts = ServeCluster {
                        config: Arc::new(config),
                        id: node,
                        region,
                        pin: !no_pin,
                        host_timeout,
                        metrics,
                    };
                    process::serve(&opts, stop)?
                }
                None => {
                    let opts = ServeRegions {
                        regions: region,
                        data_dir,
                        key_dir,
                        model,
                        value_bytes_max,
                        store_bytes,
                        pin: !no_pin,
                        host_timeout,
                        metrics,
                    };
                    process::serve_regions(&opts, stop)?
                }
            };
            println!("{}", summary.trim_end());
            Ok(())
        }
        Command::Model { command } => Ok(prescient_models::cli::run(command)?),
        Command::Sim {
            seed,
            seeds,
            from,
            steps,
            nodes,
            k,
            m,
            quorum,
            keys,
            no_faults,
            predictive,
            sequencer,
            swift,
            cache_members,
            jobs,
            keep_going,
        } => {
            let seeds: Vec<u64> = match seed {
                Some(s) => vec![s],
                None => (from..from + seeds).collect(),
            };
            let base = prescient_dpu::sim::SimOptions {
                seed: 0,
                nodes,
                k,
                m,
                quorum,
                steps,
                keys,
                faults: !no_faults,
                predictive,
                sequencer,
                swift,
                cache_members,
                dir: std::env::temp_dir().join("prescient-sim"),
            };
            let jobs = jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            let started = std::time::Instant::now();
            let progress = |done: usize, total: &prescient_dpu::sim::SimReport| {
                if done % 100 == 0 || done == seeds.len() {
                    println!("{done} seeds ok ({:.1} s): {}", started.elapsed().as_secs_f64(), total.line());
                }
            };
            let steps_each = u64::from(steps);
            let covered = |report: &prescient_dpu::sim::SimReport, passed: usize| {
                format!(
                    "{}: {passed} seeds x {steps_each} steps passed, {:.2} simulated seconds in all",
                    base.mode_name(),
                    report.sim_ns as f64 / 1e9
                )
            };
            if keep_going {
                let failed = |v: &prescient_dpu::sim::Violation| eprintln!("invariant broken\n{v}");
                let (report, violations) =
                    prescient_dpu::sim::campaign::run_all_seeds(&base, &seeds, jobs, progress, failed);
                println!("{}", covered(&report, seeds.len() - violations.len()));
                if !violations.is_empty() {
                    let list: Vec<String> = violations.iter().map(|v| v.options.seed.to_string()).collect();
                    return Err(
                        format!("{} of {} seeds failed: {}", violations.len(), seeds.len(), list.join(" ")).into()
                    );
                }
                return Ok(());
            }
            let report = prescient_dpu::sim::campaign::run_seeds(&base, &seeds, jobs, progress)
                .map_err(|v| format!("invariant broken\n{v}"))?;
            println!("{}", covered(&report, seeds.len()));
            Ok(())
        }
        Command::Demo { seconds, trace, model, seed } => {
            let shipped = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../models/shipped/OLTP.model"));
            let model = model.or_else(|| shipped.exists().then_some(shipped));
            let trace = trace.unwrap_or_else(|| traces_dir().join("OLTP.lis.zst"));
            let demo = demo::ClusterDemo { seconds, trace, model, seed };
            print!("{}", demo::run(&demo)?);
            Ok(())
        }
        Command::Fill { keys, value_bytes, k, m, dir, store_bytes, keep } => {
            Ok(prescient_dpu::fill::run(&prescient_dpu::fill::FillOptions {
                keys,
                value_bytes,
                k,
                m,
                dir,
                store_bytes,
                keep,
            })?)
        }
        Command::Soak {
            seconds,
            kill_every,
            down_for,
            keys,
            depth,
            seed,
            settle,
            fabric,
            device,
            gid_index,
            config,
            nodes_here,
            share,
            sites,
            meet_within,
            ordering,
        } => {
            let verbs = match (fabric.as_str(), device) {
                ("verbs", Some(name)) => Some(prescient_dpu::cluster::config::VerbsDevice { name, port: 1, gid_index }),
                ("verbs", None) => {
                    return Err(
                        "soak --fabric verbs needs --device NAME, the RDMA device the nodes open (see ibv_devices)"
                            .into(),
                    )
                }
                _ if gid_index.is_some() => return Err("soak --gid-index is for --fabric verbs".into()),
                (_, Some(_)) => return Err("soak --device is for --fabric verbs".into()),
                _ => None,
            };
            let secs = |option: &'static str, v: f64| {
                if v.is_finite() && v > 0.0 && v <= 3600.0 {
                    Ok(std::time::Duration::from_secs_f64(v))
                } else {
                    Err(format!("soak {option} = {v} is out of range: more than 0, at most 3600 seconds"))
                }
            };
            let (mut nodes, mut m) = (5, 2);
            if config.is_some() && ordering != "hlc" {
                return Err("soak --ordering is for the cluster the soak writes itself; with --config, set `ordering` in that cluster file (its feeds are not checked then)".into());
            }
            let site = match (config, share) {
                (Some(config), Some(share)) => {
                    let cluster = prescient_dpu::cluster::config::ClusterConfig::load(&config)
                        .map_err(|e| format!("soak --config {}: {e}", config.display()))?;
                    nodes = cluster.nodes.len() as u8;
                    m = cluster.m as u8;
                    if let Some(bad) = nodes_here.iter().find(|&&id| cluster.nodes.iter().all(|n| n.id != id)) {
                        return Err(format!("soak --nodes-here: {} has no node {bad}", config.display()).into());
                    }
                    if nodes_here.is_empty() || !(2..=32).contains(&sites) {
                        return Err(
                            "soak --config needs --nodes-here with at least one node and --sites from 2 to 32".into()
                        );
                    }
                    Some(prescient_dpu::soak::Site {
                        config,
                        here: nodes_here,
                        share,
                        sites,
                        meet_within: secs("--meet-within", meet_within)?,
                    })
                }
                _ => None,
            };
            let opts = prescient_dpu::soak::SoakOptions {
                seconds,
                nodes,
                m,
                // 0: no kills.
                kill_every: if kill_every == 0.0 {
                    std::time::Duration::ZERO
                } else {
                    secs("--kill-every", kill_every)?
                },
                down_for: secs("--down-for", down_for)?,
                keys: keys.clamp(1, 100_000),
                depth: depth.clamp(1, 64),
                seed,
                dpu_binary: self_binary()?,
                settle: secs("--settle", settle)?,
                verbs,
                site,
                sequencer: ordering == "sequencer",
            };
            let report = prescient_dpu::soak::run(&opts)?;
            print!("{}", report.render(&opts));
            if report.lost() > 0 {
                return Err(format!("{} acknowledged writes were lost", report.lost()).into());
            }
            if report.feed_problems() > 0 {
                return Err(format!(
                    "the change feeds are not one order holding every acknowledged write: {} problems (above)",
                    report.feed_problems()
                )
                .into());
            }
            if report.ledger_problems() > 0 {
                return Err(format!(
                    "the holders' stamp ledgers disagree with the fate rings: {} problems (above)",
                    report.ledger_problems()
                )
                .into());
            }
            if opts.site.is_some() && report.all_up.2 > 0 {
                return Err(format!(
                    "{} keys could not be read back with every node up, so their writes are unchecked",
                    report.all_up.2
                )
                .into());
            }
            Ok(())
        }
        Command::Bench {
            what: BenchWhat::Cluster { stripe, seconds, quick, networks, policies, congestion, trace, model, seed },
        } => {
            let (k, m) = parse_stripe(&stripe)?;
            if usize::from(k) + usize::from(m) > usize::from(bench::cluster::NODES) {
                return Err(format!(
                    "--stripe {stripe}: each fragment goes to its own node and the cluster has {} nodes; use 3+2 or 4+1",
                    bench::cluster::NODES
                )
                .into());
            }
            let shipped = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../models/shipped/OLTP.model"));
            let bench = bench::cluster::ClusterBench {
                stripe: (k, m),
                networks: Network::parse_list(&networks)?,
                policies: Policy::parse_list(&policies)?,
                congestion: match congestion.as_deref().map(str::trim) {
                    None => None,
                    Some("none") => Some(vec![Congestion::None]),
                    Some("swift") => Some(vec![Congestion::Swift]),
                    Some("both") => Some(Congestion::ALL.to_vec()),
                    Some(other) => {
                        return Err(format!("--congestion {other:?}: use none, swift or both").into());
                    }
                },
                seconds,
                quick,
                trace: trace.unwrap_or_else(|| traces_dir().join("OLTP.lis.zst")),
                model: model.or_else(|| shipped.exists().then_some(shipped)),
                seed,
            };
            print!("{}", bench::cluster::run(&bench)?.render());
            Ok(())
        }
        Command::Bench { what: BenchWhat::Sequencer { seconds, sim_failovers, process_failovers, trace, seed } } => {
            if !(seconds.is_finite() && seconds > 0.0 && seconds <= 600.0) {
                return Err(format!("--seconds {seconds} is out of range: more than 0, at most 600").into());
            }
            if sim_failovers == 0 || process_failovers == 0 || sim_failovers > 100_000 || process_failovers > 1_000 {
                return Err("--sim-failovers must be 1 to 100000 and --process-failovers 1 to 1000".into());
            }
            let bench = bench::sequencer::SequencerBench {
                seconds,
                sim_failovers,
                process_failovers,
                trace: trace.unwrap_or_else(|| traces_dir().join("OLTP.lis.zst")),
                seed,
                dpu_binary: self_binary()?,
            };
            print!("{}", bench::sequencer::run(&bench)?);
            Ok(())
        }
        Command::Bench { what: BenchWhat::Scribble { seconds, seed } } => {
            if !(seconds.is_finite() && seconds > 0.0 && seconds <= 3600.0) {
                return Err(format!("--seconds {seconds} is out of range: more than 0, at most 3600").into());
            }
            let bench = bench::scribble::ScribbleBench { seconds, seed, dpu_binary: self_binary()? };
            let report = bench::scribble::run(&bench)?;
            println!(
                "prescient-dpu bench scribble: honest host A under a scribbling host B, {seconds} s per phase, seed {seed}\n{}",
                report.render()
            );
            Ok(())
        }
        Command::Bench { what: BenchWhat::Incast { seed, ms } } => {
            let o = bench::incast::IncastOptions {
                measure_ns: ms * 1_000_000,
                ..bench::incast::IncastOptions::four_to_one(seed)
            };
            println!(
                "prescient-dpu bench incast: 4 writers, 4 KiB WRITEs at 2x a 10 Gbit/s port (256 KiB buffer), {ms} ms modelled, seed {seed}\n{}",
                bench::incast::render(&o)?
            );
            Ok(())
        }
        Command::Bench { what: BenchWhat::Ring { seconds, round_trips } } => {
            let report =
                bench::ring::run(&bench::ring::RingBench { seconds, round_trips, dpu_binary: self_binary()? })?;
            println!(
                "prescient-dpu bench ring: 64-byte messages, 2 processes (ours) vs 2 threads (references)\n{}",
                report.render()
            );
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The simulator injects crashes and losses on purpose, and the sequencer bench
    // kills sequencers: the warnings they raise are their normal weather, so they show
    // errors only unless RUST_LOG says otherwise.
    let quiet = if matches!(cli.command, Command::Sim { .. } | Command::Bench { what: BenchWhat::Sequencer { .. } }) {
        "error"
    } else {
        "warn"
    };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| quiet.into()))
        .with_writer(std::io::stderr)
        // Colours on a terminal only: a node's log file (the soak's, a service's) is
        // read with less and grep.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("prescient-dpu: error: {:#}", prescient_dpu::error::Report(&*failure));
            ExitCode::FAILURE
        }
    }
}
