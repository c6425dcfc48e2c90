#!/usr/bin/env bash
# The predictor's evaluation table (issue 5) and its benchmark, on the traces shipped in
# models/traces (PRESCIENT_TRACES overrides); no Debian packages.
# About 3 minutes on 2 loaded cores (release build of one crate, eval ~25 s CPU,
# bench ~30 s CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p prescient-models --bin prescient-model
./target/release/prescient-model eval
cargo bench -p prescient-models --bench predictor
