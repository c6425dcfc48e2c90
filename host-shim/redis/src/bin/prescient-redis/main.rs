//! `prescient-redis`: starts, inspects and stops a cluster of Redis servers on this
//! machine, each loading the Prescient module and served by its own DPU app, and
//! benchmarks it with `redis-benchmark` next to plain Redis and Redis's own
//! replication.

mod bench;
mod cluster;
mod resp;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "prescient-redis", about = "A cluster of Redis servers on Prescient, on this machine")]
struct Cli {
    #[command(subcommand)]
    command: Top,
}

#[derive(Subcommand, Debug)]
enum Top {
    /// Start, inspect or stop a cluster.
    Cluster {
        #[command(subcommand)]
        action: Action,
        /// The cluster's folder (cluster file, keys, data, logs, pid files).
        #[arg(long, default_value = "prescient-redis-cluster", global = true)]
        dir: PathBuf,
        /// `prescient-dpu` (default: beside this program).
        #[arg(long, global = true)]
        dpu: Option<PathBuf>,
        /// The module, `libprescient_redis.so` (default: beside this program).
        #[arg(long, global = true)]
        module: Option<PathBuf>,
    },
    /// Benchmark with redis-benchmark: plain Redis, Redis with its own replication
    /// (asynchronous, and synchronous with WAIT), and Redis on Prescient, side by side.
    Bench(bench::Args),
}

#[derive(Subcommand, Debug)]
enum Action {
    /// Start a fresh cluster (the folder's old contents are removed) and wait until
    /// every node reaches every other; prints each node's Redis port.
    Start {
        /// Nodes (Redis servers, each with its DPU app).
        #[arg(long, default_value_t = 3)]
        nodes: usize,
        /// Data fragments per value (default: nodes - 1).
        #[arg(long)]
        k: Option<usize>,
        /// Parity fragments per value.
        #[arg(long, default_value_t = 1)]
        m: usize,
        /// Holders that must persist a fragment before a SET is acknowledged (default:
        /// max(k, m + 1), so one node can be down).
        #[arg(long)]
        quorum: Option<usize>,
        /// Redis port of node 0; node i listens on port + i (0: any free ports).
        #[arg(long, default_value_t = 6400)]
        port: u16,
        /// Largest value a SET may carry.
        #[arg(long, default_value_t = 4096)]
        value_bytes_max: usize,
        /// Each node's fragment store, in bytes.
        #[arg(long, default_value_t = 256 << 20)]
        store_bytes: usize,
    },
    /// Stop every node (Redis first, then its DPU app, which prints its summary).
    Stop,
    /// Each node's processes and the module's counters.
    Status,
    /// Start node N's DPU app again (after it was killed); it rejoins the cluster.
    RestartDpu {
        /// The node.
        #[arg(long)]
        node: usize,
    },
}

fn run(cli: Cli) -> Result<String, String> {
    match cli.command {
        Top::Cluster { action, dir, dpu, module } => match action {
            Action::Start { nodes, k, m, quorum, port, value_bytes_max, store_bytes } => {
                let k = k.unwrap_or(nodes.saturating_sub(m).max(1));
                let quorum = quorum.unwrap_or(k.max(m + 1));
                let spec = cluster::Spec { nodes, k, m, quorum, port, value_bytes_max, store_bytes };
                let tools = cluster::Tools::find(dpu, module)?;
                let started = cluster::start(&dir, &spec, &tools)?;
                let ports: Vec<String> = started.iter().map(|n| n.port.to_string()).collect();
                Ok(format!(
                    "{nodes} Redis servers on Prescient (RS({k},{m}), quorum {quorum}), ports {}; folder {}\n\
                     try: redis-cli -p {} SET k v; redis-cli -p {} GET k\n\
                     stop: prescient-redis cluster stop --dir {}\n",
                    ports.join(" "),
                    dir.display(),
                    ports.first().map_or("", String::as_str),
                    ports.last().map_or("", String::as_str),
                    dir.display()
                ))
            }
            Action::Stop => cluster::stop(&dir),
            Action::Status => cluster::status(&dir),
            Action::RestartDpu { node } => {
                let tools = cluster::Tools::find(dpu, module)?;
                let nodes = cluster::nodes(&dir)?;
                let n = nodes
                    .iter()
                    .find(|n| n.id == node)
                    .ok_or_else(|| format!("no node {node} in {}", dir.display()))?;
                cluster::start_dpu(&dir, n, &tools)?;
                cluster::wait_ready(&dir, std::slice::from_ref(n), std::time::Duration::from_secs(60))?;
                Ok(format!("node {node}'s DPU app runs again\n"))
            }
        },
        Top::Bench(args) => bench::run(&args),
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("prescient-redis: {e}");
            ExitCode::FAILURE
        }
    }
}
