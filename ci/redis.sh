#!/usr/bin/env bash
# The "Try it" commands of host-shim/redis/README.md, as typed there: start the three-node
# Redis cluster, write on one node and read on another, run redis-benchmark against
# it, stop it; then a short `prescient-redis bench` so the bench keeps working.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p prescient-dpu && cargo build --release -p prescient-redis
dir=$(mktemp -d)
trap 'target/release/prescient-redis cluster stop --dir "$dir/c" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
target/release/prescient-redis cluster start --dir "$dir/c" --port 0
ports=($(awk '{print $2}' "$dir/c/nodes"))
[ "$(redis-cli -p "${ports[0]}" SET greeting hello)" = OK ]
[ "$(redis-cli -p "${ports[2]}" GET greeting)" = hello ]
redis-benchmark -p "${ports[1]}" -t set,get -n 20000 -r 10000 -q
target/release/prescient-redis cluster status --dir "$dir/c"
errors=$(redis-cli -p "${ports[1]}" PRESCIENT.STATS | awk -F: '$1 == "errors" {print $2}')
[ "$errors" = 0 ] || { echo "ci/redis.sh: the module answered $errors errors under redis-benchmark" >&2; exit 1; }
target/release/prescient-redis cluster stop --dir "$dir/c" | tail -3
target/release/prescient-redis bench --requests 5000 --sizes 64 --pipelines 1,16 --dir "$dir/bench"
