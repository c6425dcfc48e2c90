#!/usr/bin/env bash
# The long simulation campaign: seeds that each simulate seconds, not milliseconds, so
# that every node's outcome table (1024 entries) and every fragment log (64 slots)
# wraps many times, with crashes, restarts, partitions and losses throughout; and
# predictive seeds (the predictor's leases on top). Every invariant is checked after
# every step (see dpu-app/src/sim/mod.rs); a failure prints the command that replays
# it. Sized for CI (about 9 minutes on 2 cores); a bigger campaign:
#   SIM_SEEDS=32 SIM_PREDICTIVE_SEEDS=8 SIM_SEQUENCER_MEDIUM_SEEDS=1000 SIM_SEQUENCER_SEEDS=16 ci/sim-campaign.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# 200,000 steps of 5 us: one simulated second per seed.
cargo run --release -p prescient-dpu -- sim --seeds "${SIM_SEEDS:-4}" --from 93000 --steps 400000
cargo run --release -p prescient-dpu -- sim --seeds "${SIM_PREDICTIVE_SEEDS:-2}" --from 94000 --steps 200000 --predictive
cargo run --release -p prescient-dpu -- sim --seeds 1 --from 95000 --steps 400000 --no-faults
# Sequencer ordering: crashes, isolating partitions and competing claims aimed at the
# sequencer, with its invariants (dpu-app/src/sim/sequencer.rs). Many medium seeds
# (50,000 steps, about a quarter of a simulated second each: one seed in six failed at
# this length while a few long seeds passed), then a few long ones: 4 simulated seconds.
# --keep-going lists every failing seed, not only the first. A hunt on fresh seeds:
#   cargo run --release -p prescient-dpu -- sim --seeds 400 --from N --steps 50000 --sequencer --keep-going
cargo run --release -p prescient-dpu -- sim --seeds "${SIM_SEQUENCER_MEDIUM_SEEDS:-160}" --from 300000 --steps 50000 --sequencer --keep-going
cargo run --release -p prescient-dpu -- sim --seeds "${SIM_SEQUENCER_SEEDS:-4}" --from 96000 --steps 200000 --sequencer
# Seed 920000 has a node gone for good through 300,000 steps, more writes than a change
# feed holds: it comes back, finds no peer's feed with what it missed, and marks those
# versions missing (each released version still checked against the marks).
cargo run --release -p prescient-dpu -- sim --seeds 2 --from 920000 --steps 300000 --sequencer
# Switch ports with bounded buffers and Swift on every node.
cargo run --release -p prescient-dpu -- sim --seeds 2 --from 97000 --steps 200000 --swift
