#!/bin/bash
# The fabric conformance suite on real libibverbs: Soft-RoCE (rdma_rxe) in a qemu VM.
#
# Installs its host packages, builds (once, cached under target/softroce) a Debian
# kernel + initramfs with rdma-core userspace, builds the `fabric_verbs` test binary with
# `--features verbs`, the `cluster_faults` system tests and `prescient-dpu` with
# `--features verbs`, boots the VM (TCG), creates rxe0 on lo and runs there every
# conformance check with RDMA_TEST_DEVICE=rxe0, then the cluster fault tests with
# PRESCIENT_TEST_FABRIC=verbs: five `prescient-dpu serve --config` processes whose
# cluster file says fabric = "verbs", device = "rxe0"; then the sequencer failover test
# the same way (stamps by FETCH_ADD and claims by CAS on rxe0's remote atomics, the
# sequencer SIGKILLed mid-write); then a 10 s `prescient-dpu soak --fabric verbs`
# (kills, and every acknowledged write checked). Exit code: 0 if all passed.
#   ci/softroce.sh                       (all four)
#   SOFTROCE_TESTS=cluster ci/softroce.sh  (some of them: conformance, cluster, sequencer, soak)
#   SOFTROCE_CLUSTER_FILTER=rejoin ci/softroce.sh  (cluster tests whose name has it)
#   SOFTROCE_RUST_LOG=info ci/softroce.sh  (what the nodes log, default warn)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
HERE=$ROOT/ci/softroce
export OUT=$ROOT/target/softroce/out WORK=$ROOT/target/softroce/work
t() { date +%s.%N; }
d() { awk "BEGIN{printf \"%.1f\", $2-$1}"; }

t0=$(t)
bash "$HERE/setup-host.sh" >/dev/null
t1=$(t)
stamp=$(cat "$HERE/build-initramfs.sh" "$HERE/init" | sha256sum | cut -c1-16)
if [ ! -f "$OUT/initramfs.cpio.gz" ] || [ "$(cat "$OUT/stamp" 2>/dev/null)" != "$stamp" ]; then
  bash "$HERE/build-initramfs.sh"
  echo "$stamp" > "$OUT/stamp"
fi
t2=$(t)
cd "$ROOT"
# The executable of target NAME that cargo built for the command that follows (from its
# JSON messages): `cargo test --test X` also builds the package's binaries.
artifact() {
  local name=$1
  shift
  "$@" --message-format=json 2>/dev/null | python3 -c 'import sys,json
for l in sys.stdin:
    try: m=json.loads(l)
    except Exception: continue
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"]==sys.argv[1]:
        print(m["executable"])' "$name" | tail -1
}
SHARE=$(mktemp -d /tmp/prescient-softroce-XXXXXX)
trap 'rm -rf "$SHARE"' EXIT
tests=${SOFTROCE_TESTS:-conformance cluster sequencer soak}
if [[ " $tests " == *" conformance "* ]]; then
  exe=$(artifact fabric_verbs cargo test -p prescient-dpu --features verbs --test fabric_verbs --no-run)
  [ -n "$exe" ] || { echo "softroce: building the fabric_verbs test binary failed"; exit 1; }
  cp "$exe" "$SHARE/fabric_verbs"
fi
if [[ " $tests " == *" cluster "* ]]; then
  # The cluster fault tests spawn the prescient-dpu beside their own folder
  # (deps/..), so the share mirrors target/debug: deps/cluster_faults, prescient-dpu.
  # Built as the README's test command builds them (--workspace: the same features,
  # so nothing is built again after it; with -p cargo would resolve the dependencies'
  # features for one package and rebuild them).
  exe=$(artifact cluster_faults cargo test --workspace --no-run)
  [ -n "$exe" ] || { echo "softroce: building the cluster_faults test binary failed"; exit 1; }
  mkdir -p "$SHARE/deps"
  cp "$exe" "$SHARE/deps/cluster_faults"
fi
if [[ " $tests " == *" sequencer "* ]]; then
  exe=$(artifact sequencer_failover cargo test --workspace --no-run)
  [ -n "$exe" ] || { echo "softroce: building the sequencer_failover test binary failed"; exit 1; }
  mkdir -p "$SHARE/deps"
  cp "$exe" "$SHARE/deps/sequencer_failover"
fi
if [[ " $tests " == *" cluster "* || " $tests " == *" sequencer "* || " $tests " == *" soak "* ]]; then
  dpu=$(artifact prescient-dpu cargo build -p prescient-dpu --features verbs --bin prescient-dpu)
  [ -n "$dpu" ] || { echo "softroce: building prescient-dpu with --features verbs failed"; exit 1; }
  cp "$dpu" "$SHARE/prescient-dpu"
fi
soak=""
[[ " $tests " == *" soak "* ]] && soak=yes
t3=$(t)
cat > "$SHARE/run.sh" <<RUN
#!/bin/bash
export RDMA_TEST_DEVICE=rxe0 RUST_BACKTRACE=0 RUST_LOG=${SOFTROCE_RUST_LOG:-warn}
ulimit -l unlimited
cd /mnt/host
ibv_devices
rc=0
s=\$(date +%s)
if [ -x ./fabric_verbs ]; then
  ./fabric_verbs --test-threads=1 || rc=1
  echo "softroce-vm: fabric conformance \$(( \$(date +%s) - s )) s"; s=\$(date +%s)
fi
if [ -x ./deps/cluster_faults ]; then
  # Five prescient-dpu serve --config processes over rxe0 (GID 1: ::ffff:127.0.0.1 on lo).
  PRESCIENT_TEST_FABRIC=verbs RDMA_TEST_GID_INDEX=1 ./deps/cluster_faults --test-threads=1 ${SOFTROCE_CLUSTER_FILTER:-} || rc=1
  echo "softroce-vm: cluster fault tests \$(( \$(date +%s) - s )) s"; s=\$(date +%s)
fi
if [ -x ./deps/sequencer_failover ]; then
  # ordering = "sequencer" over rxe0: FETCH_ADD stamps and CAS claims on real verbs.
  PRESCIENT_TEST_FABRIC=verbs RDMA_TEST_GID_INDEX=1 ./deps/sequencer_failover --test-threads=1 || rc=1
  echo "softroce-vm: sequencer failover \$(( \$(date +%s) - s )) s"; s=\$(date +%s)
fi
if [ -n "$soak" ]; then
  # A short kill -9 soak over rxe0: writers on every host, a node SIGKILLed every ~2.5 s,
  # then every key read back with all nodes up and with two stopped, each read checked
  # against the writes acknowledged. Cut for TCG: 10 s of load, 300 keys per writer.
  ./prescient-dpu soak --seconds 10 --keys 300 --settle 60 --fabric verbs --device rxe0 --gid-index 1 || rc=1
  echo "softroce-vm: soak \$(( \$(date +%s) - s )) s"
fi
exit \$rc
RUN
chmod +x "$SHARE/run.sh"
rc=0
SHARE=$SHARE LOG=$ROOT/target/softroce/console.log MEM=${MEM:-2048} TIMEOUT=${TIMEOUT:-600} bash "$HERE/run-vm.sh" /mnt/host/run.sh || rc=$?
t4=$(t)
echo "softroce: host packages $(d $t0 $t1)s, kernel+initramfs $(d $t1 $t2)s, cargo build $(d $t2 $t3)s, VM run $(d $t3 $t4)s, exit $rc"
exit $rc
