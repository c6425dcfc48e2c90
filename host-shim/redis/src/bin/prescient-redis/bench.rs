//! `prescient-redis bench`: `redis-benchmark -t set` and `-t get` against plain Redis
//! (no replication), Redis replicating to two replicas (`replicaof`, asynchronous),
//! Redis with synchronous replication (`SET` then `WAIT 2 0`, which redis-benchmark
//! cannot send, so this program's own client sends it with the same clients and
//! pipelining) and Redis on Prescient (a 3-node cluster of the module), one after the
//! other on this machine, with each server's CPU time per operation read from
//! `/proc/<pid>/task/*/schedstat`. Every figure is printed next to plain Redis's in the
//! same run, as a ratio. Before the GET cells of a value size every key of the
//! keyspace is written once, so every GET finds its key (on Prescient, in a `Valid`
//! directory slot: the cached path).
//!
//! A server's CPU per operation depends on its load: every wake-up of its event loop
//! costs the same however many requests it finds, so a server at 10 000 ops/s pays
//! several times the CPU per request of one at 150 000. Plain Redis is therefore also
//! measured with fewer clients ([`LADDER`], a load ladder), and each other cell's CPU
//! is compared with the ladder point (same test, size and pipelining) whose ops/s is
//! nearest its own, as well as with plain Redis at full load.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cluster;
use crate::resp;

/// The client counts of plain Redis's load ladder (those below `--clients`).
const LADDER: [u32; 5] = [1, 2, 4, 8, 16];

/// Bench arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Requests per cell.
    #[arg(long, default_value_t = 100_000)]
    requests: u64,
    /// Value sizes in bytes, comma separated.
    #[arg(long, default_value = "64,1024,4096", value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Pipelining depths, comma separated.
    #[arg(long, default_value = "1,16", value_delimiter = ',')]
    pipelines: Vec<u32>,
    /// Parallel client connections.
    #[arg(long, default_value_t = 50)]
    clients: u32,
    /// Keys the requests are spread over (redis-benchmark's -r).
    #[arg(long, default_value_t = 10_000)]
    keyspace: u64,
    /// Folder for the Prescient cluster and the servers' files.
    #[arg(long, default_value = "prescient-redis-bench")]
    dir: PathBuf,
    /// `prescient-dpu` (default: beside this program).
    #[arg(long)]
    dpu: Option<PathBuf>,
    /// The module (default: beside this program).
    #[arg(long)]
    module: Option<PathBuf>,
}

/// One measured cell.
#[derive(Debug, Clone)]
struct Cell {
    setup: &'static str,
    test: &'static str,
    size: usize,
    pipeline: u32,
    clients: u32,
    ops: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// CPU of the server the clients talk to, ns per operation.
    primary_ns: f64,
    /// CPU of every redis-server of the setup, ns per operation.
    all_ns: f64,
    /// CPU of the DPU apps (Prescient only), ns per operation.
    dpu_ns: f64,
    errors: u64,
}

/// A process whose CPU time is read.
fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return 0 };
    tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn cpu_of(pids: &[u32]) -> u64 {
    pids.iter().map(|&p| cpu_ns(p)).sum()
}

/// Servers of one setup.
struct Servers {
    /// The port clients use.
    port: u16,
    primary: u32,
    redis: Vec<u32>,
    dpus: Vec<u32>,
    children: Vec<Child>,
}

impl Drop for Servers {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn free_port() -> Result<u16, String> {
    Ok(cluster::free_ports(1)?[0])
}

fn redis(port: u16, dir: &Path, extra: &[String]) -> Result<Child, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .args(extra)
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run redis-server: {e}; install it (`apt-get install redis-server redis-tools`)"))
}

fn ping(port: u16) -> bool {
    resp::Conn::open(port).and_then(|mut c| c.call(&[b"PING"])).is_ok_and(|r| r == resp::Reply::Simple("PONG".into()))
}

fn plain(dir: &Path) -> Result<Servers, String> {
    let port = free_port()?;
    let child = redis(port, &dir.join("plain"), &[])?;
    let pid = child.id();
    let s = Servers { port, primary: pid, redis: vec![pid], dpus: vec![], children: vec![child] };
    if !cluster::wait(Duration::from_secs(10), || ping(port)) {
        return Err("plain redis-server did not answer PING".into());
    }
    Ok(s)
}

fn replicated(dir: &Path) -> Result<Servers, String> {
    let port = free_port()?;
    let primary = redis(port, &dir.join("primary"), &[])?;
    let mut s =
        Servers { port, primary: primary.id(), redis: vec![primary.id()], dpus: vec![], children: vec![primary] };
    if !cluster::wait(Duration::from_secs(10), || ping(port)) {
        return Err("the primary redis-server did not answer PING".into());
    }
    for i in 0..2 {
        let p = free_port()?;
        let child =
            redis(p, &dir.join(format!("replica{i}")), &["--replicaof".into(), "127.0.0.1".into(), port.to_string()])?;
        s.redis.push(child.id());
        s.children.push(child);
    }
    let synced = cluster::wait(Duration::from_secs(30), || {
        resp::Conn::open(port).and_then(|mut c| c.call(&[b"INFO", b"replication"])).is_ok_and(
            |r| matches!(r, resp::Reply::Bulk(Some(t)) if String::from_utf8_lossy(&t).contains("connected_slaves:2")),
        )
    });
    if !synced {
        return Err("the two replicas did not connect to the primary within 30 s".into());
    }
    Ok(s)
}

fn pid_file(path: &Path) -> Result<u32, String> {
    cluster::pid_of(path).ok_or_else(|| format!("no pid in {}", path.display()))
}

fn prescient(dir: &Path, tools: &cluster::Tools, largest: usize) -> Result<Servers, String> {
    let spec = cluster::Spec {
        nodes: 3,
        k: 2,
        m: 1,
        quorum: 2,
        port: 0,
        value_bytes_max: largest.max(1024),
        store_bytes: 256 << 20,
    };
    let dir = dir.join("prescient");
    let nodes = cluster::start(&dir, &spec, tools)?;
    let mut s = Servers { port: nodes[0].port, primary: 0, redis: vec![], dpus: vec![], children: vec![] };
    for n in &nodes {
        s.redis.push(pid_file(&dir.join(format!("redis{}.pid", n.id)))?);
        s.dpus.push(pid_file(&dir.join(format!("dpu{}.pid", n.id)))?);
    }
    s.primary = s.redis[0];
    Ok(s)
}

/// Runs redis-benchmark for one test; returns (ops/s, p50 ms, p99 ms).
fn redis_benchmark(port: u16, test: &str, size: usize, pipeline: u32, args: &Args) -> Result<(f64, f64, f64), String> {
    let out = Command::new("redis-benchmark")
        .args(["-p", &port.to_string(), "-t", test, "-n", &args.requests.to_string()])
        .args(["-c", &args.clients.to_string(), "-P", &pipeline.to_string(), "-d", &size.to_string()])
        .args(["-r", &args.keyspace.to_string(), "--csv"])
        .output()
        .map_err(|e| format!("cannot run redis-benchmark: {e}; install it (`apt-get install redis-tools`)"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
    let row = text.lines().find(|l| l.starts_with(&format!("\"{}", test.to_uppercase()))).ok_or_else(|| {
        format!("redis-benchmark printed no {test} row: {text}{}", String::from_utf8_lossy(&out.stderr))
    })?;
    let f: Vec<f64> = row.split(',').skip(1).map(|v| v.trim_matches('"').parse().unwrap_or(f64::NAN)).collect();
    Ok((f[0], f[3], f[5]))
}

/// `SET k v` then `WAIT 2 0` from `clients` connections, `pipeline` pairs at a time;
/// returns (ops/s, p50 ms, p99 ms, errors).
fn set_wait(port: u16, size: usize, pipeline: u32, args: &Args) -> Result<(f64, f64, f64, u64), String> {
    let per_client = args.requests / u64::from(args.clients);
    let value = vec![b'x'; size];
    let start = Instant::now();
    let threads: Vec<_> = (0..args.clients)
        .map(|c| {
            let value = value.clone();
            let keyspace = args.keyspace;
            std::thread::spawn(move || -> Result<(Vec<u32>, u64), String> {
                let mut con = resp::Conn::open(port).map_err(|e| e.to_string())?;
                let mut lat = Vec::with_capacity(per_client as usize);
                let mut errors = 0;
                let mut n = 0u64;
                while n < per_client {
                    let batch = u64::from(pipeline).min(per_client - n);
                    let t0 = Instant::now();
                    for i in 0..batch {
                        let key = format!("key:{:012}", (u64::from(c) * 7919 + n + i) % keyspace);
                        con.send(&[b"SET", key.as_bytes(), &value]).map_err(|e| e.to_string())?;
                        con.send(&[b"WAIT", b"2", b"0"]).map_err(|e| e.to_string())?;
                    }
                    for _ in 0..batch {
                        let set = con.read().map_err(|e| e.to_string())?;
                        let wait = con.read().map_err(|e| e.to_string())?;
                        if !matches!(set, resp::Reply::Simple(_)) || wait != resp::Reply::Integer(2) {
                            errors += 1;
                        }
                    }
                    let us = t0.elapsed().as_micros() as u32;
                    lat.extend(std::iter::repeat_n(us, batch as usize));
                    n += batch;
                }
                Ok((lat, errors))
            })
        })
        .collect();
    let mut all = Vec::new();
    let mut errors = 0;
    for t in threads {
        let (lat, e) = t.join().map_err(|_| "a client thread panicked".to_string())??;
        all.extend(lat);
        errors += e;
    }
    let secs = start.elapsed().as_secs_f64();
    all.sort_unstable();
    let pct = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .map_or(f64::NAN, |&us| f64::from(us) / 1000.0)
    };
    Ok((all.len() as f64 / secs, pct(0.5), pct(0.99), errors))
}

fn measure(
    servers: &Servers,
    setup: &'static str,
    test: &'static str,
    size: usize,
    pipeline: u32,
    args: &Args,
) -> Result<Cell, String> {
    let (p0, a0, d0) = (cpu_ns(servers.primary), cpu_of(&servers.redis), cpu_of(&servers.dpus));
    let (ops, p50_ms, p99_ms, errors) = if setup == "sync (WAIT 2)" {
        set_wait(servers.port, size, pipeline, args)?
    } else {
        let (ops, p50, p99) = redis_benchmark(servers.port, test, size, pipeline, args)?;
        (ops, p50, p99, 0)
    };
    let (p1, a1, d1) = (cpu_ns(servers.primary), cpu_of(&servers.redis), cpu_of(&servers.dpus));
    let n = args.requests as f64;
    Ok(Cell {
        setup,
        test,
        size,
        pipeline,
        clients: args.clients,
        ops,
        p50_ms,
        p99_ms,
        primary_ns: (p1 - p0) as f64 / n,
        all_ns: (a1 - a0) as f64 / n,
        dpu_ns: (d1 - d0) as f64 / n,
        errors,
    })
}

/// Writes every key of the keyspace (`key:%012d`, redis-benchmark's names) with a
/// value of `size` bytes, so that the GET cells read keys that exist everywhere.
fn prefill(port: u16, size: usize, keyspace: u64) -> Result<(), String> {
    let mut con = resp::Conn::open(port).map_err(|e| format!("prefill: {e}"))?;
    let value = vec![b'v'; size];
    let mut key = 0;
    while key < keyspace {
        let batch = 100.min(keyspace - key);
        for i in 0..batch {
            con.send(&[b"SET", format!("key:{:012}", key + i).as_bytes(), &value])
                .map_err(|e| format!("prefill: {e}"))?;
        }
        for _ in 0..batch {
            match con.read().map_err(|e| format!("prefill: {e}"))? {
                resp::Reply::Simple(_) => {}
                other => return Err(format!("prefill: SET answered {other:?}")),
            }
        }
        key += batch;
    }
    Ok(())
}

fn prescient_errors(port: u16) -> u64 {
    resp::stats(port).map_or(0, |s| s.iter().find(|(k, _)| k == "errors").map_or(0, |(_, v)| *v))
}

/// Runs the bench; returns the table.
pub fn run(args: &Args) -> Result<String, String> {
    let tools = cluster::Tools::find(args.dpu.clone(), args.module.clone())?;
    let _ = std::fs::remove_dir_all(&args.dir);
    std::fs::create_dir_all(&args.dir).map_err(|e| format!("cannot create {}: {e}", args.dir.display()))?;
    let largest = args.sizes.iter().copied().max().unwrap_or(64);
    let mut cells = Vec::new();
    let grid =
        |servers: &Servers, setup: &'static str, tests: &[&'static str], cells: &mut Vec<Cell>| -> Result<(), String> {
            for &size in &args.sizes {
                if tests.contains(&"get") {
                    prefill(servers.port, size, args.keyspace)?;
                }
                for &pipeline in &args.pipelines {
                    for &test in tests {
                        let mut cell = measure(servers, setup, test, size, pipeline, args)?;
                        if setup == "prescient" {
                            cell.errors = prescient_errors(servers.port);
                        }
                        eprintln!(
                        "{setup:>14} {test:>3} {size:>5} B P{pipeline:<2}: {:>9.0} ops/s, p50 {:.3} ms, p99 {:.3} ms",
                        cell.ops, cell.p50_ms, cell.p99_ms
                    );
                        cells.push(cell);
                    }
                }
            }
            Ok(())
        };
    let mut ladder = Vec::new();
    {
        let s = plain(&args.dir)?;
        grid(&s, "plain", &["set", "get"], &mut cells)?;
        for &clients in LADDER.iter().filter(|&&c| c < args.clients) {
            let fewer = Args { clients, requests: args.requests.min(LADDER_REQUESTS_MAX), ..args.clone() };
            for &size in &args.sizes {
                // The keys exist already (the GET cells' prefill of the largest size
                // ran last); a GET reads whatever value is there.
                for &pipeline in &args.pipelines {
                    for test in ["set", "get"] {
                        ladder.push(measure(&s, "plain", test, size, pipeline, &fewer)?);
                    }
                }
            }
        }
    }
    {
        let s = replicated(&args.dir)?;
        grid(&s, "replicaof", &["set", "get"], &mut cells)?;
        grid(&s, "sync (WAIT 2)", &["set"], &mut cells)?;
    }
    {
        let s = prescient(&args.dir, &tools, largest)?;
        let result = grid(&s, "prescient", &["set", "get"], &mut cells);
        let stats = cluster::status(&args.dir.join("prescient")).unwrap_or_default();
        let _ = cluster::stop(&args.dir.join("prescient"));
        result?;
        eprintln!("{stats}");
    }
    Ok(table(&cells, &ladder, args))
}

/// Requests per cell of the load ladder at most (its low-client cells are slow).
const LADDER_REQUESTS_MAX: u64 = 20_000;

/// The plain cell (full load or a ladder point) of `c`'s test, size and pipelining
/// whose ops/s is nearest `c`'s, by ratio.
fn nearest_load<'a>(c: &Cell, plain: impl Iterator<Item = &'a Cell>) -> Option<&'a Cell> {
    plain
        .filter(|b| b.test == c.test && b.size == c.size && b.pipeline == c.pipeline && b.ops > 0.0)
        .min_by(|a, b| (a.ops / c.ops).ln().abs().total_cmp(&(b.ops / c.ops).ln().abs()))
}

fn table(cells: &[Cell], ladder: &[Cell], args: &Args) -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "redis-benchmark, {} requests per cell, {} clients, keyspace {}; {} CPUs ({cpu}); every ratio is against plain \
         Redis's same cell in this run. CPU is per operation: the server the clients talk to, every redis-server of the \
         setup, and (Prescient) the DPU apps, which run on the DPU's cores in production. \"at same load\": against \
         plain Redis driven by fewer clients to the ops/s nearest the cell's own (its clients and ops/s in brackets; \
         the ladder is below the table).",
        args.requests,
        args.clients,
        args.keyspace,
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    let _ = writeln!(
        out,
        "\n| setup | test | value | P | ops/s | vs plain | p50 ms | p99 ms | server CPU us/op | vs plain | vs plain at same load | all redis CPU us/op | DPU apps CPU us/op | errors |"
    );
    let _ = writeln!(out, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for c in cells {
        let base = cells
            .iter()
            .find(|b| b.setup == "plain" && b.test == c.test && b.size == c.size && b.pipeline == c.pipeline);
        let ratio =
            |a: f64, b: Option<f64>| b.filter(|b| *b > 0.0).map_or("-".to_string(), |b| format!("{:.2}x", a / b));
        let plain = cells.iter().filter(|b| b.setup == "plain").chain(ladder.iter());
        let same_load = match nearest_load(c, plain) {
            Some(b) if c.setup != "plain" && b.primary_ns > 0.0 => {
                format!("{:.2}x (c={}: {:.0} ops/s)", c.primary_ns / b.primary_ns, b.clients, b.ops)
            }
            _ => "-".into(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} B | {} | {:.0} | {} | {:.3} | {:.3} | {:.2} | {} | {} | {:.2} | {} | {} |",
            c.setup,
            c.test.to_uppercase(),
            c.size,
            c.pipeline,
            c.ops,
            ratio(c.ops, base.map(|b| b.ops)),
            c.p50_ms,
            c.p99_ms,
            c.primary_ns / 1000.0,
            ratio(c.primary_ns, base.map(|b| b.primary_ns)),
            same_load,
            c.all_ns / 1000.0,
            if c.dpu_ns > 0.0 { format!("{:.2}", c.dpu_ns / 1000.0) } else { "-".into() },
            c.errors
        );
    }
    if !ladder.is_empty() {
        let mut clients: Vec<u32> = ladder.iter().map(|c| c.clients).collect();
        clients.dedup();
        let _ =
            writeln!(out, "\nPlain Redis by load: ops/s and server CPU us/op with fewer clients than the table's.\n");
        let head: String = clients.iter().map(|c| format!(" {c} client{} |", if *c == 1 { "" } else { "s" })).collect();
        let _ = writeln!(out, "| test | value | P |{head}");
        let _ = writeln!(out, "| --- | --- | --- |{}", " --- |".repeat(clients.len()));
        let first = clients[0];
        for c in ladder.iter().filter(|c| c.clients == first) {
            let points: String = ladder
                .iter()
                .filter(|b| b.test == c.test && b.size == c.size && b.pipeline == c.pipeline)
                .map(|b| format!(" {:.0}: {:.2} |", b.ops, b.primary_ns / 1000.0))
                .collect();
            let _ = writeln!(out, "| {} | {} B | {} |{points}", c.test.to_uppercase(), c.size, c.pipeline);
        }
    }
    out
}
