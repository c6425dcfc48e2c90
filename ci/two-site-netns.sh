#!/bin/bash
# A cluster spread over two sites, with one site's link cut mid-load: two network
# namespaces joined by a veth pair, nodes 0-2 (and their writers) in one, nodes 3-4 in
# the other, on the emulated fabric over TCP. Each site is a `prescient-dpu soak
# --config ... --nodes-here ...`; RS(3,2) with quorum 4 means no write commits without
# both sites. After CUT_AT s the link goes down for CUT_FOR s: writes fail cleanly
# (NotDurable) or wait, the links come back, writes resume. At the end each site reads
# every key of both sites back through its own hosts and checks it against what the
# writers were told; nothing acknowledged may be lost. (The same run on real verbs,
# across two VMs with netem delay: ci/softroce-2vm.sh.)
#   ci/two-site-netns.sh            (needs root; about 40 s after the build)
#   SECONDS_OF_LOAD=60 CUT_AT=20 CUT_FOR=10 ci/two-site-netns.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LOAD=${SECONDS_OF_LOAD:-20} CUT_AT=${CUT_AT:-6} CUT_FOR=${CUT_FOR:-4}
export DEBIAN_FRONTEND=noninteractive
command -v ip >/dev/null || apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends iproute2
cd "$ROOT"
cargo build -q --release -p prescient-dpu --bin prescient-dpu
BIN=$ROOT/target/release/prescient-dpu
A=prescient-site-a-$$ B=prescient-site-b-$$ VA=vsa$$ VB=vsb$$
DIR=$(mktemp -d /tmp/prescient-two-site-XXXXXX)
cleanup() {
  jobs -p | xargs -r kill 2>/dev/null || true
  ip netns del "$A" 2>/dev/null || true; ip netns del "$B" 2>/dev/null || true
  rm -rf "$DIR"
}
trap cleanup EXIT
ip netns add "$A"; ip netns add "$B"
ip link add "$VA" netns "$A" type veth peer name "$VB" netns "$B"
ip -n "$A" addr add 10.231.78.1/24 dev "$VA"; ip -n "$B" addr add 10.231.78.2/24 dev "$VB"
for n in "$A" "$B"; do ip -n "$n" link set lo up; done
ip -n "$A" link set "$VA" up; ip -n "$B" link set "$VB" up
mkdir -p "$DIR/keys" "$DIR/share"
head -c 32 /dev/urandom > "$DIR/keys/1.key"; chmod 600 "$DIR/keys/1.key"
bash "$ROOT/ci/two-site/cluster.sh" 10.231.78.1 10.231.78.2 emu "$DIR/data" > "$DIR/cluster.toml"
site() { # netns nodes log (its node logs go under $DIR, removed with it)
  mkdir -p "$DIR/logs-$1"
  TMPDIR="$DIR/logs-$1" ip netns exec "$1" "$BIN" soak --config "$DIR/cluster.toml" --nodes-here "$2" --share "$DIR/share" \
    --seconds "$LOAD" --kill-every 0 --keys 300 --settle 60 --meet-within 120 > "$3" 2>&1
}
start=$(date +%s)
site "$A" 0,1,2 "$DIR/a.out" & pa=$!
site "$B" 3,4 "$DIR/b.out" & pb=$!
# The load starts once both sites are connected; the cut is timed from there.
for _ in $(seq 1200); do
  [ "$(ls "$DIR/share" | grep -c '^loading-')" = 2 ] && break
  sleep 0.1
done
sleep "$CUT_AT"
echo "two-site-netns: cutting site B's link at $(( $(date +%s) - start )) s for $CUT_FOR s"
ip -n "$B" link set "$VB" down
sleep "$CUT_FOR"
ip -n "$B" link set "$VB" up
echo "two-site-netns: link restored at $(( $(date +%s) - start )) s"
rc=0
wait $pa || rc=1
wait $pb || rc=1
echo "--- site A (nodes 0-2)"; cat "$DIR/a.out"
echo "--- site B (nodes 3-4)"; cat "$DIR/b.out"
if [ $rc != 0 ]; then
  for f in "$DIR"/logs-*/*/node*.log; do echo "--- last lines of $f"; tail -n 15 "$f"; done
fi
[ $rc = 0 ] && echo "two-site-netns: PASS in $(( $(date +%s) - start )) s" || echo "two-site-netns: FAIL"
exit $rc
