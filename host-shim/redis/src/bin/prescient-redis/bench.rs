//! `prescient-redis bench` (filled in below).
use clap::Parser;

/// Bench arguments.
#[derive(Parser, Debug)]
pub struct Args {}

/// Runs the bench.
pub fn run(_args: &Args) -> Result<String, String> {
    Err("not built yet".into())
}
