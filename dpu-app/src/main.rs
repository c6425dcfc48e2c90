//! The `prescient-dpu` command: serve host regions, run the demo, run benchmarks.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use prescient_dpu::delay::Delay;
use prescient_dpu::pipeline::Pipeline;
use prescient_dpu::sequence::Sequencer;
use prescient_dpu::serve::{ServeOptions, Server};
use prescient_dpu::{bench, demo, signal};
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
    /// Serve one or more host regions (one per KV-store process).
    Serve {
        /// CPU-emulation mode: run on this host's cores, reading the region file
        /// directly (the only mode this build has).
        #[arg(long)]
        emulate: bool,
        /// A region file created by the host shim (repeatable).
        #[arg(long, required = true)]
        region: Vec<PathBuf>,
        /// Do not mlock the regions (for hosts with a small memlock limit).
        #[arg(long)]
        no_pin: bool,
        /// Milliseconds without a host heartbeat before its buffers are reclaimed.
        #[arg(long, default_value_t = HOST_TIMEOUT_MS_DEFAULT)]
        host_timeout_ms: u64,
        /// Hold every request this many microseconds in an extra stage (emulates
        /// latency of work done elsewhere; at most 1 s).
        #[arg(long, default_value_t = 0)]
        delay_us: u64,
    },
    /// The README's main job: a host workload of PUTs from several threads against a
    /// real DPU-app process, with a summary.
    Demo {
        /// Host threads (one queue pair each).
        #[arg(long, default_value_t = 4)]
        threads: u32,
        /// Seconds to run.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// Bytes per value.
        #[arg(long, default_value_t = 1024)]
        value_bytes: usize,
        /// Requests in flight per thread.
        #[arg(long, default_value_t = 64)]
        depth: u32,
    },
    /// Benchmarks that print each figure next to a reference measured in the same run.
    Bench {
        #[command(subcommand)]
        what: BenchWhat,
    },
}

#[derive(Subcommand, Debug)]
enum BenchWhat {
    /// The host <-> DPU ring between two processes, next to rtrb and crossbeam-channel.
    Ring {
        /// Seconds per throughput figure.
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
        /// Round trips per latency figure.
        #[arg(long, default_value_t = 200_000)]
        round_trips: usize,
    },
}

fn self_binary() -> Result<PathBuf, String> {
    std::env::current_exe().map_err(|e| format!("cannot find the prescient-dpu binary: {e}"))
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::Serve { emulate, region, no_pin, host_timeout_ms, delay_us } => {
            if !emulate {
                return Err("this build serves only in CPU-emulation mode: pass --emulate (the BlueField DOCA link is not built in)".into());
            }
            let options = ServeOptions {
                regions: region,
                pin: !no_pin,
                host_timeout: Duration::from_millis(host_timeout_ms),
                idle_sleep: Duration::from_millis(5),
            };
            let stop = signal::install().map_err(|e| e.to_string())?;
            let mut server = Server::attach(&options).map_err(|e| e.to_string())?;
            let mut pipeline = Pipeline::new();
            pipeline.push(Box::new(Sequencer::new(server.epoch())));
            if delay_us > 0 {
                let delay = Delay::new(Duration::from_micros(delay_us)).ok_or_else(|| {
                    format!("--delay-us {delay_us} is above the limit of {:?}", prescient_dpu::delay::DELAY_MAX)
                })?;
                pipeline.push(Box::new(delay));
            }
            tracing::info!(stages = ?pipeline.names(), regions = options.regions.len(), "serving");
            let metrics = server.run(&mut pipeline, &options, stop);
            println!("{}", metrics.summary());
            Ok(())
        }
        Command::Demo { threads, seconds, value_bytes, depth } => {
            let summary = demo::run(&demo::Demo { threads, seconds, value_bytes, depth, dpu_binary: self_binary()? })?;
            println!("{summary}");
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
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("prescient-dpu: error: {message}");
            ExitCode::FAILURE
        }
    }
}
