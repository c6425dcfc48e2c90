#!/bin/bash
# The emulated fabric between network namespaces: two namespaces joined by a veth pair
# (addresses 10.231.77.1/.2, which exist only inside them), a `fabric-node` in each. The
# client WRITEs, READs back, races CAS increments, FETCH_ADDs and notifies by
# WRITE_WITH_IMM; the server checks the totals. Namespaces are torn down on exit.
#   ci/fabric-netns.sh        (needs root; about 1 s after the build)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export DEBIAN_FRONTEND=noninteractive
command -v ip >/dev/null || apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends iproute2
cd "$ROOT"
# --workspace: the features the test step built with, so nothing is built again.
cargo build -q --workspace --bin fabric-node
BIN=$ROOT/target/debug/fabric-node
A=prescient-fab-a-$$ B=prescient-fab-b-$$
DIR=$(mktemp -d /tmp/prescient-netns-XXXXXX)
cleanup() { ip netns del "$A" 2>/dev/null || true; ip netns del "$B" 2>/dev/null || true; rm -rf "$DIR"; }
trap cleanup EXIT
ip netns add "$A"; ip netns add "$B"
ip link add "vfa$$" netns "$A" type veth peer name "vfb$$" netns "$B"
ip -n "$A" addr add 10.231.77.1/24 dev "vfa$$"; ip -n "$B" addr add 10.231.77.2/24 dev "vfb$$"
for n in "$A" "$B"; do ip -n "$n" link set lo up; done
ip -n "$A" link set "vfa$$" up; ip -n "$B" link set "vfb$$" up
start=$(date +%s.%N)
ip netns exec "$A" "$BIN" serve --id 1 --listen 10.231.77.1:0 --dir "$DIR" --peers 2 > "$DIR/serve.out" &
spid=$!
ip netns exec "$B" "$BIN" client --id 2 --listen 10.231.77.2:0 --dir "$DIR" --peer 1 --rounds 200 > "$DIR/client.out"
wait $spid
end=$(date +%s.%N)
cat "$DIR/client.out" "$DIR/serve.out"
grep -qx "CLIENT 2 OK" "$DIR/client.out"
grep -qx "FINAL 200 200 200" "$DIR/serve.out"
printf 'fabric-netns: PASS (two namespaces over veth, %.2fs)\n' "$(awk "BEGIN{print $end-$start}")"
