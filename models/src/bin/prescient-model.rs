//! `prescient-model`: trains predictor models from write traces and evaluates the
//! predictor against its baselines (issue 5's table). The same subcommands are
//! `prescient-dpu model ...`.

use std::process::ExitCode;

use clap::Parser;
use prescient_models::cli::{run, Command};

#[derive(Parser)]
#[command(name = "prescient-model", about = "Train and evaluate Prescient's write-stream predictor")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

fn main() -> ExitCode {
    match run(Cli::parse().command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("prescient-model: {e}");
            ExitCode::FAILURE
        }
    }
}
