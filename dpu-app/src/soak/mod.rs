//! `prescient-dpu soak`: a kill -9 soak of a process cluster, with its own checker of
//! every acknowledged write.
//!
//! Five `prescient-dpu serve --config` processes (this binary, one per node, on the
//! emulated fabric over TCP, or with `--fabric verbs` on an RDMA device) each serve a host region this process creates. Every host
//! has a writer thread that keeps PUTs in flight on its own keys; meanwhile a random
//! node is killed with SIGKILL every `kill_every` (never more than `m` down at once)
//! and restarted from its files after `down_for`. At the end every node is restarted,
//! the writers drain, and the checker ([`checker`]) reads every key back with a Fresh
//! GET: first with every node up, then with `m` nodes stopped, retrying while repair
//! settles (up to a bound). A key whose read is older than its newest acknowledged
//! write, or any value no write of it made, is a lost write.
//!
//! The summary gives acknowledged writes per second over the run, failures by status,
//! the longest stretch with no write acknowledged while a quorum of nodes was up (a
//! stall), and the reads with `m` down. With `--ordering sequencer` it also checks
//! every node's change feed once all are up ([`feeds`]): one order, holding every
//! acknowledged write above what the feed marked missing; and, once all have stopped,
//! the holders' stamp ledgers against the fate rings ([`ledgers`]).

pub mod checker;
pub mod feeds;
pub mod ledgers;
pub mod procs;

use crate::Error;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prescient_shim::{Host, Request, ShimError, Status};

use crate::cluster::protocol::stats::STATUS_CODES;
use crate::sim::rng::Rng;
use checker::{Checker, ReadVerdict};
use procs::ProcessCluster;

/// What to run.
#[derive(Clone, Debug)]
pub struct SoakOptions {
    /// Seconds of load with kills.
    pub seconds: f64,
    /// Nodes (RS(k, m) with k + m = nodes).
    pub nodes: u8,
    /// Parity fragments, and the most nodes down at once.
    pub m: u8,
    /// Mean time between kills (each draws uniformly from half to one and a half of it).
    pub kill_every: Duration,
    /// How long a killed node stays down (drawn uniformly from half to one and a half).
    pub down_for: Duration,
    /// Keys per writer.
    pub keys: u32,
    /// PUTs in flight per writer.
    pub depth: u32,
    /// Seed of the kills, the keys and the value sizes.
    pub seed: u64,
    /// The `prescient-dpu` binary to start the nodes with.
    pub dpu_binary: PathBuf,
    /// How long the final reads may wait for repair to settle.
    pub settle: Duration,
    /// The RDMA device every node runs on (`fabric = "verbs"`; `dpu_binary` must be a
    /// build with `--features verbs`); `None`: the emulated fabric over TCP.
    pub verbs: Option<crate::cluster::config::VerbsDevice>,
    /// Run as one site of a cluster whose nodes are spread over machines (`None`: every
    /// node here, on a cluster file this writes).
    pub site: Option<Site>,
    /// Order the writes by the sequencer (`ordering = "sequencer"`, with
    /// [`SEQUENCER_LINES`]) and check every node's change feed and the stamp ledgers
    /// at the end.
    pub sequencer: bool,
}

impl SoakOptions {
    /// The cluster's write quorum: `k + 1` of its `k + m` nodes, so that a write
    /// survives the `m` nodes the soak may have down at once.
    pub fn quorum(&self) -> u8 {
        self.nodes - self.m + 1
    }
}

/// The cluster file's lines with `soak --ordering sequencer`: node 0 sequences, 1 and
/// 2 are its shadows, and fate rings of 4,096 entries, so a node killed for a couple of
/// seconds under load falls a whole ring behind: it catches up from a peer's feed, or,
/// when the kill held every order back (the node had stamps in hand) longer than the
/// rings keep, every feed marks that stretch missing.
pub const SEQUENCER_LINES: &str =
    "ordering = \"sequencer\"\nsequencer = 0\nshadows = [1, 2]\nstamp_block = 16\nfate_entries = 4096\n";

/// One site of a cluster spread over machines (the two-VM run of `ci/softroce-2vm.sh`):
/// this process runs the nodes `here` of the cluster file `config`, with a writer on
/// each of their hosts; at the end every site saves its checker into `share`, waits for
/// the others', and reads back every site's keys through its own hosts, then waits for
/// every site to have read before it stops its nodes (a site that stopped early would
/// take its nodes' fragments away from the others' reads). Files in the share:
/// `loading-SITE` once its cluster is connected (every site starts its load when all
/// are there; a script may time a link cut from them), `checker-SITE.txt`, `read-SITE`.
#[derive(Clone, Debug)]
pub struct Site {
    /// The cluster file every site runs (fabric, control addresses, data folders).
    pub config: PathBuf,
    /// The nodes this site runs.
    pub here: Vec<u8>,
    /// A folder every site reads and writes (empty at the start).
    pub share: PathBuf,
    /// How many sites run the cluster.
    pub sites: u32,
    /// How long a site waits for the others at each meeting point.
    pub meet_within: Duration,
}

impl Site {
    /// This site's name: its lowest node.
    fn name(&self) -> String {
        format!("site{}", self.here.iter().min().copied().unwrap_or(0))
    }

    /// Waits until `sites` files whose name starts with `prefix` are in the share;
    /// returns their paths.
    fn meet(&self, prefix: &str) -> Result<Vec<PathBuf>, Error> {
        let deadline = Instant::now() + self.meet_within;
        loop {
            let mut found: Vec<PathBuf> = std::fs::read_dir(&self.share)
                .map_err(|e| Error::soak(format!("cannot list the share {}: {e}", self.share.display())))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                    name.starts_with(prefix) && !name.ends_with(".partial")
                })
                .collect();
            if found.len() >= self.sites as usize {
                found.sort();
                return Ok(found);
            }
            if Instant::now() >= deadline {
                return Err(Error::soak(format!(
                    "only {} of {} sites left a {prefix}* file in {} within {:.0} s: is every site's soak running, \
                     with the same --sites and a share that was empty at the start?",
                    found.len(),
                    self.sites,
                    self.share.display(),
                    self.meet_within.as_secs_f64()
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Counts shared between the writers and the main thread.
#[derive(Default)]
struct Tally {
    acked: AtomicU64,
    failed: [AtomicU64; STATUS_CODES],
}

/// One run's report.
#[derive(Debug, Default)]
pub struct SoakReport {
    /// Writes acknowledged Ok.
    pub acked: u64,
    /// Writes failed, by status name.
    pub failed: Vec<(String, u64)>,
    /// Kills.
    pub kills: u32,
    /// Acknowledged writes in each second of the load.
    pub per_second: Vec<u64>,
    /// Longest stretch without an acknowledged write while a quorum was up, and when
    /// it began (seconds into the run).
    pub longest_stall: (Duration, f64),
    /// Every stall of a second or more with a quorum up: (start s, length s, the kill
    /// or restart that came last before it).
    pub stalls: Vec<(f64, f64, String)>,
    /// Keys checked; reads that found the newest acknowledged write (or a later one of
    /// unknown outcome) with every node up; then with m down.
    pub keys: u64,
    /// Final reads with every node up: (ok, lost, unavailable).
    pub all_up: (u64, u64, u64),
    /// Final reads with m nodes down: (ok, lost, unavailable); not done by a site of a
    /// spread cluster.
    pub m_down: (u64, u64, u64),
    /// Of the keys read, those another site's writers wrote (a site of a spread cluster).
    pub other_sites_keys: u64,
    /// Where a site left its nodes' logs.
    pub log_dir: Option<PathBuf>,
    /// How long the reads with m down took, retries included.
    pub settled_after: Duration,
    /// Reads with m down asked again (Unavailable while repair settled).
    pub retried: u64,
    /// The first few findings, for the reader.
    pub findings: Vec<String>,
    /// The change feeds' check (`--ordering sequencer`).
    pub feeds: Option<feeds::FeedCheck>,
    /// The stamp ledgers' check against the fate rings (`--ordering sequencer`).
    pub ledgers: Option<ledgers::LedgerCheck>,
}

impl SoakReport {
    /// Writes that were acknowledged and then read back older, or not at all.
    pub fn lost(&self) -> u64 {
        self.all_up.1 + self.m_down.1
    }

    /// Problems the change feeds' check found (0 without `--ordering sequencer`).
    pub fn feed_problems(&self) -> usize {
        self.feeds.as_ref().map_or(0, |f| f.problem_count)
    }

    /// Problems the stamp ledgers' check found (0 without `--ordering sequencer`).
    pub fn ledger_problems(&self) -> usize {
        self.ledgers.as_ref().map_or(0, |l| l.problem_count)
    }

    /// A readable summary.
    pub fn render(&self, opts: &SoakOptions) -> String {
        let mut s = String::new();
        if let Some(site) = &opts.site {
            let here: Vec<String> = site.here.iter().map(u8::to_string).collect();
            let _ = writeln!(
                s,
                "soak: {} of a cluster of {} nodes spread over {} sites ({}), running nodes {} with a writer each, {:.0} s of PUTs{}",
                site.name(),
                opts.nodes,
                site.sites,
                site.config.display(),
                here.join(", "),
                opts.seconds,
                if opts.kill_every.is_zero() { ", no kills".to_owned() } else { format!(", a local SIGKILL every ~{:.1} s", opts.kill_every.as_secs_f64()) }
            );
        } else {
            let _ = writeln!(
            s,
            "soak: {} nodes on {}, RS({}, {}), {:.0} s of PUTs with a SIGKILL every ~{:.1} s (at most {} down, each for ~{:.1} s)",
            opts.nodes,
            opts.verbs.as_ref().map_or_else(|| "emu".to_owned(), |d| format!("verbs {}", d.name)),
            opts.nodes - opts.m,
            opts.m,
            opts.seconds,
            opts.kill_every.as_secs_f64(),
            opts.m,
            opts.down_for.as_secs_f64()
        );
        }
        let failed: u64 = self.failed.iter().map(|(_, n)| n).sum();
        let by: Vec<String> = self.failed.iter().map(|(w, n)| format!("{n} {w}")).collect();
        let _ = writeln!(
            s,
            "  writes: {} acknowledged, {} failed cleanly ({}); {} kills",
            self.acked,
            failed,
            if by.is_empty() { "none".into() } else { by.join(", ") },
            self.kills
        );
        let rate: Vec<String> = self.per_second.iter().map(u64::to_string).collect();
        let _ = writeln!(s, "  acknowledged per second: {}", rate.join(" "));
        let _ = writeln!(
            s,
            "  longest stall (no write acknowledged while a quorum was up): {:.2} s, from {:.1} s",
            self.longest_stall.0.as_secs_f64(),
            self.longest_stall.1
        );
        for (at, len, after) in self.stalls.iter().take(12) {
            let _ = writeln!(s, "    stall of {len:.2} s from {at:.1} s, after {after}");
        }
        if self.stalls.len() > 12 {
            let _ = writeln!(s, "    ... and {} more stalls of a second or more", self.stalls.len() - 12);
        }
        if opts.site.is_some() {
            let _ = writeln!(
                s,
                "  final reads of {} keys ({} of them written by other sites) through this site's hosts, every node up: {} ok, {} lost, {} unavailable ({} asked again)",
                self.keys, self.other_sites_keys, self.all_up.0, self.all_up.1, self.all_up.2, self.retried
            );
            let _ = writeln!(s, "  lost: {}", self.lost());
            for f in &self.findings {
                let _ = writeln!(s, "  finding: {f}");
            }
            if let Some(dir) = &self.log_dir {
                let _ = writeln!(s, "  node logs: {}", dir.display());
            }
            return s;
        }
        let _ = writeln!(
            s,
            "  final reads of {} keys, every node up: {} ok, {} lost, {} unavailable",
            self.keys, self.all_up.0, self.all_up.1, self.all_up.2
        );
        let _ = writeln!(
            s,
            "  final reads with {} nodes stopped: {} ok, {} lost, {} unavailable ({} asked again while repair settled; all read in {:.1} s)",
            opts.m,
            self.m_down.0,
            self.m_down.1,
            self.m_down.2,
            self.retried,
            self.settled_after.as_secs_f64()
        );
        let _ = writeln!(s, "  lost: {}", self.lost());
        for f in &self.findings {
            let _ = writeln!(s, "  finding: {f}");
        }
        if let Some(f) = &self.feeds {
            let entries: Vec<String> = f.entries.iter().map(usize::to_string).collect();
            let _ = writeln!(
                s,
                "  change feeds (every node up): {} entries held per node, {} entries of the window all hold compared across the {} feeds, {} acknowledged writes found where a feed's window covers them ({} below a window: marked missing or wrapped); {} problems",
                entries.join(" / "),
                f.common,
                opts.nodes,
                f.acked_found,
                f.acked_below,
                f.problem_count
            );
            for p in &f.problems {
                let _ = writeln!(s, "  feed problem: {p}");
            }
        }
        if let Some(l) = &self.ledgers {
            let _ = writeln!(
                s,
                "  stamp ledgers (every node stopped, {} by kill -9 last): of the writes the fate rings still record, {} Committed each held by at least {} ledgers, {} Aborted each by at most {}, {} Pending; {} problems",
                opts.m,
                l.committed,
                l.committed_fewest.unwrap_or(0),
                l.aborted,
                l.aborted_most,
                l.pending,
                l.problem_count
            );
            for p in &l.problems {
                let _ = writeln!(s, "  ledger problem: {p}");
            }
        }
        if let Some(dir) = &self.log_dir {
            let _ = writeln!(s, "  kept for a look (node logs and data folders): {}", dir.display());
        }
        s
    }
}

/// Runs the soak; `Ok` carries the report, which says whether anything was lost.
pub fn run(opts: &SoakOptions) -> Result<SoakReport, Error> {
    if !(opts.seconds.is_finite() && opts.seconds > 0.0 && opts.seconds <= 24.0 * 3600.0) {
        return Err(Error::Option {
            option: "--seconds",
            value: opts.seconds.to_string(),
            allowed: "0 to 86400".into(),
        });
    }
    if opts.m == 0 || opts.m + 2 > opts.nodes {
        return Err(Error::Option {
            option: "--m",
            value: opts.m.to_string(),
            allowed: "1 or more, leaving at least two data fragments (k = nodes - m)".into(),
        });
    }
    if let Some(site) = &opts.site {
        if std::fs::read_dir(&site.share).map(|mut d| d.next().is_some()).unwrap_or(true) {
            return Err(Error::soak(format!(
                "the share {} must be an existing, empty folder (it holds the sites' checkers and meeting points)",
                site.share.display()
            )));
        }
    }
    let mut cluster = ProcessCluster::start(opts).map_err(Error::soak)?;
    let connect_within = opts.site.as_ref().map_or(Duration::from_secs(60), |s| s.meet_within);
    if !cluster.wait_connected(connect_within) {
        return Err(Error::soak(format!(
            "the cluster did not connect in {:.0} s: {}",
            connect_within.as_secs_f64(),
            cluster.log_tails()
        )));
    }
    if let Some(site) = &opts.site {
        // Every site starts its load once all are connected, within a poll of each
        // other, so that a link cut timed from the files (by whoever drives the run)
        // falls at the same point of every site's load.
        let loading = site.share.join(format!("loading-{}", site.name()));
        std::fs::write(&loading, b"").map_err(|e| Error::soak(format!("cannot write {}: {e}", loading.display())))?;
        site.meet("loading-")?;
    }
    let here = cluster.hosts.len();
    let checker = Arc::new(Mutex::new(Checker::default()));
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..here)
        .map(|i| {
            let host = Arc::clone(&cluster.hosts[i]);
            let node = cluster.id(i);
            let (checker, tally, stop) = (Arc::clone(&checker), Arc::clone(&tally), Arc::clone(&stop));
            let (keys, depth, seed) = (opts.keys, opts.depth, opts.seed);
            std::thread::spawn(move || write_loop(node, &host, keys, depth, seed, &checker, &tally, &stop))
        })
        .collect();

    // Load with kills.
    let mut rng = Rng::new(opts.seed ^ 0x5eed_50a4);
    let quorum = u32::from(opts.quorum());
    let start = Instant::now();
    let load = Duration::from_secs_f64(opts.seconds);
    let draw = |rng: &mut Rng, mean: Duration| {
        let ms = mean.as_millis().max(2) as u64;
        Duration::from_millis(ms / 2 + rng.below(ms))
    };
    // A mean of zero: no kills (a site of a spread cluster is cut off instead).
    let kills = !opts.kill_every.is_zero();
    let mut next_kill = start + draw(&mut rng, opts.kill_every);
    let mut back_at: Vec<Option<Instant>> = vec![None; here];
    let mut report = SoakReport::default();
    let (mut last_acked, mut last_change) = (0u64, Instant::now());
    let mut second_mark = (start + Duration::from_secs(1), 0u64);
    let mut last_event = "the start".to_string();
    let secs = |t: Instant| (t - start).as_secs_f64();
    while start.elapsed() < load {
        let now = Instant::now();
        for (i, at) in back_at.iter_mut().enumerate() {
            if at.is_some_and(|t| now >= t) {
                cluster.spawn(i).map_err(Error::soak)?;
                *at = None;
                last_event = format!("node {} restarted at {:.1} s", cluster.id(i), secs(now));
            }
        }
        let down = back_at.iter().filter(|a| a.is_some()).count();
        if kills && now >= next_kill {
            if down < opts.m as usize {
                let victim = rng.below(here as u64) as usize;
                if back_at[victim].is_none() {
                    cluster.kill9(victim);
                    back_at[victim] = Some(now + draw(&mut rng, opts.down_for));
                    report.kills += 1;
                    last_event = format!("node {} killed at {:.1} s", cluster.id(victim), secs(now));
                }
            }
            next_kill = now + draw(&mut rng, opts.kill_every);
        }
        let acked = tally.acked.load(Ordering::Relaxed);
        let up = cluster.nodes() - back_at.iter().filter(|a| a.is_some()).count();
        if acked != last_acked || (up as u32) < quorum {
            let gap = now - last_change;
            if acked != last_acked && gap >= Duration::from_secs(1) {
                report.stalls.push((secs(last_change), gap.as_secs_f64(), last_event.clone()));
            }
            last_acked = acked;
            last_change = now;
        } else if now - last_change > report.longest_stall.0 {
            report.longest_stall = (now - last_change, (last_change - start).as_secs_f64());
        }
        if now >= second_mark.0 {
            report.per_second.push(acked - second_mark.1);
            second_mark = (second_mark.0 + Duration::from_secs(1), acked);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // Every node back, the writers drain.
    for (i, at) in back_at.iter_mut().enumerate() {
        if at.take().is_some() {
            cluster.spawn(i).map_err(Error::soak)?;
        }
    }
    stop.store(true, Ordering::Release);
    for w in writers {
        let _ = w.join();
    }
    report.acked = tally.acked.load(Ordering::Relaxed);
    for (code, n) in tally.failed.iter().enumerate() {
        let n = n.load(Ordering::Relaxed);
        if n > 0 {
            report.failed.push((format!("{:?}", Status::from_u16(code as u16)), n));
        }
    }
    if !cluster.wait_connected(connect_within) {
        return Err(Error::soak(format!(
            "the cluster did not reconnect in {:.0} s: {}",
            connect_within.as_secs_f64(),
            cluster.log_tails()
        )));
    }
    let checker = std::mem::take(&mut *checker.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    let all: Vec<usize> = (0..here).collect();
    let mut retried = 0;
    if let Some(site) = &opts.site {
        // Every site's keys, read through this site's hosts once every site has saved
        // what its writers saw; then the sites wait for each other's reads.
        let mine = site.share.join(format!("checker-{}.txt", site.name()));
        checker.save(&mine).map_err(|e| Error::soak(format!("cannot write {}: {e}", mine.display())))?;
        let own_keys = checker.keys();
        let mut every = Checker::default();
        for path in site.meet("checker-")? {
            every.load_into(&path).map_err(Error::soak)?;
        }
        report.keys = every.keys() as u64;
        report.other_sites_keys = (every.keys() - own_keys) as u64;
        report.all_up = read_back(&cluster, &every, &all, opts.settle, &mut retried, &mut report.findings);
        report.retried = retried;
        report.log_dir = Some(cluster.log_dir().to_path_buf());
        let read = site.share.join(format!("read-{}", site.name()));
        std::fs::write(&read, b"").map_err(|e| Error::soak(format!("cannot write {}: {e}", read.display())))?;
        site.meet("read-")?;
        cluster.stop_all();
        return Ok(report);
    }
    report.keys = checker.keys() as u64;

    // Every key with every node up, then with m nodes stopped (retried while repair
    // settles, up to the bound).
    report.all_up = read_back(&cluster, &checker, &all, Duration::ZERO, &mut retried, &mut report.findings);
    if opts.sequencer {
        let paths: Vec<PathBuf> = all.iter().map(|&i| cluster.data_dir(i).join("feed.prfeed")).collect();
        report.feeds = Some(feeds::check(&paths, &checker.acked_versions(), opts.settle));
    }
    let mut stopped = Vec::new();
    while stopped.len() < opts.m as usize {
        let victim = rng.below(here as u64) as usize;
        if !stopped.contains(&victim) {
            cluster.kill9(victim);
            stopped.push(victim);
        }
    }
    let live: Vec<usize> = all.iter().copied().filter(|i| !stopped.contains(i)).collect();
    let settle_start = Instant::now();
    let mut retried = 0;
    report.m_down = read_back(&cluster, &checker, &live, opts.settle, &mut retried, &mut report.findings);
    report.retried = retried;
    report.settled_after = settle_start.elapsed();
    cluster.stop_all();
    if opts.sequencer {
        let dirs: Vec<PathBuf> = all.iter().map(|&i| cluster.data_dir(i)).collect();
        report.ledgers = Some(ledgers::check(&dirs, u64::from(opts.quorum())));
    }
    if report.lost() > 0
        || report.feed_problems() + report.ledger_problems() > 0
        || report.all_up.2 + report.m_down.2 > 0
    {
        // Left for whoever looks into it: the nodes' logs and data folders.
        cluster.keep_logs();
        report.log_dir = Some(cluster.log_dir().to_path_buf());
    }
    Ok(report)
}

/// Reads every key the checker knows through the hosts of `live` nodes (each key from
/// a node other than its writer where possible); `Unavailable` is asked again until
/// `settle` has passed. Returns (ok, lost, unavailable).
fn read_back(
    cluster: &ProcessCluster,
    checker: &Checker,
    live: &[usize],
    settle: Duration,
    retried: &mut u64,
    findings: &mut Vec<String>,
) -> (u64, u64, u64) {
    let deadline = Instant::now() + settle;
    let mut qps: Vec<_> = live.iter().map(|&i| (i, cluster.hosts[i].queue_pair(1).ok())).collect();
    let (mut ok, mut lost, mut unavailable) = (0, 0, 0);
    for (n, key) in checker.iter_keys().enumerate() {
        let reader = (checker.writer_of(key) as usize + 1 + n) % qps.len().max(1);
        let (node, qp) = &mut qps[reader];
        let Some(qp) = qp.as_mut() else { continue };
        let host = &cluster.hosts[*node];
        loop {
            match checker::get(host, qp, key) {
                Ok((status, version, value)) => match checker.judge(key, status, version, &value) {
                    ReadVerdict::Ok => ok += 1,
                    ReadVerdict::Unavailable if Instant::now() < deadline => {
                        *retried += 1;
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    }
                    ReadVerdict::Unavailable => unavailable += 1,
                    ReadVerdict::Lost(why) => {
                        lost += 1;
                        if findings.len() < 8 {
                            findings.push(why);
                        }
                    }
                },
                Err(e) => {
                    if Instant::now() < deadline {
                        *retried += 1;
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    }
                    unavailable += 1;
                    if findings.len() < 8 {
                        findings.push(format!("GET of key {key} through node {}: {e}", cluster.id(*node)));
                    }
                }
            }
            break;
        }
    }
    (ok, lost, unavailable)
}

/// One host's writer: keeps `depth` PUTs in flight over its keys until `stop`, then
/// drains what is in flight (bounded).
#[allow(clippy::too_many_arguments)]
fn write_loop(
    node: u8,
    host: &Arc<Host>,
    keys: u32,
    depth: u32,
    seed: u64,
    checker: &Mutex<Checker>,
    tally: &Tally,
    stop: &AtomicBool,
) {
    let Ok(mut qp) = host.queue_pair(0) else { return };
    let mut rng = Rng::new(seed ^ u64::from(node).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut in_flight: std::collections::HashMap<u64, (u32, u64)> = std::collections::HashMap::new();
    let mut busy_keys = std::collections::HashSet::new();
    let mut next_seq = 1u64;
    let mut drain_until: Option<Instant> = None;
    loop {
        if stop.load(Ordering::Acquire) && drain_until.is_none() {
            drain_until = Some(Instant::now() + Duration::from_secs(30));
        }
        if let Some(until) = drain_until {
            if in_flight.is_empty() || Instant::now() >= until {
                break;
            }
        }
        while drain_until.is_none() && (in_flight.len() as u32) < depth {
            let key = checker::key_id(node, rng.below(u64::from(keys)) as u32);
            if busy_keys.contains(&key) {
                break;
            }
            let Ok(mut buf) = host.take_buffer() else { break };
            let seq = next_seq;
            let value = checker::value_of(key, seq, 600 + rng.below(3400) as usize);
            buf.value_mut()[..value.len()].copy_from_slice(&value);
            let tag = seq;
            match qp.push(Request::put(&checker::key_bytes(key), buf, value.len()).user_data(tag)) {
                Ok(()) => {
                    next_seq += 1;
                    in_flight.insert(tag, (key, seq));
                    busy_keys.insert(key);
                    lock(checker).issued(node, key, seq);
                }
                Err((_, buf)) => {
                    drop(buf);
                    break;
                }
            }
        }
        let _ = qp.flush();
        let mut done = Vec::new();
        match qp.wait(Duration::from_millis(50), |c| done.push(c)) {
            Ok(_) | Err(ShimError::Timeout(_)) => {}
            // The DPU app is down: its requests come back once a new one serves.
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
        for c in done {
            let Some((key, seq)) = in_flight.remove(&c.user_data) else { continue };
            busy_keys.remove(&key);
            if c.status == Status::Ok {
                tally.acked.fetch_add(1, Ordering::Relaxed);
            } else {
                tally.failed[(c.status as usize).min(STATUS_CODES - 1)].fetch_add(1, Ordering::Relaxed);
            }
            lock(checker).completed(key, seq, c.status, c.version);
        }
    }
}

fn lock(c: &Mutex<Checker>) -> std::sync::MutexGuard<'_, Checker> {
    c.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
