#!/usr/bin/env bash
# Model-checks the ring protocol (host-shim/src/ring.rs) under loom: every
# interleaving of producer and consumer up to loom's bounds, with data races on the
# slots reported. Separate target folder: --cfg loom rebuilds everything it touches.
set -euo pipefail
cd "$(dirname "$0")/.."
RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}" \
  cargo test --release --target-dir target/loom -p prescient-shim --lib ring::loom_tests -- --test-threads=1
