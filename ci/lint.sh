#!/usr/bin/env bash
# Formatting, lints, docs and the import graph of every crate: all must be clean.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
python3 ci/import_cycles.py
cargo clippy --workspace --all-targets -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
