#!/bin/bash
# The fabric conformance suite on real libibverbs: Soft-RoCE (rdma_rxe) in a qemu VM.
#
# Installs its host packages, builds (once, cached under target/softroce) a Debian
# kernel + initramfs with rdma-core userspace, builds the `fabric_verbs` test binary with
# `--features verbs`, boots the VM (TCG), creates rxe0 on lo and runs every conformance
# check there with RDMA_TEST_DEVICE=rxe0. Exit code: the test binary's.
#   ci/softroce.sh            (about 2-4 minutes on 2 cores; most of it the cargo build)
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
exe=$(cargo test -p prescient-dpu --features verbs --test fabric_verbs --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import sys,json
for l in sys.stdin:
    try: m=json.loads(l)
    except Exception: continue
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m.get("profile",{}).get("test"):
        print(m["executable"])' | tail -1)
[ -n "$exe" ] || { echo "softroce: building the fabric_verbs test binary failed"; exit 1; }
t3=$(t)
SHARE=$(mktemp -d /tmp/prescient-softroce-XXXXXX)
trap 'rm -rf "$SHARE"' EXIT
cp "$exe" "$SHARE/fabric_verbs"
cat > "$SHARE/run.sh" <<'RUN'
#!/bin/bash
export RDMA_TEST_DEVICE=rxe0 RUST_BACKTRACE=0
ulimit -l unlimited
cd /mnt/host
ibv_devices
./fabric_verbs --test-threads=1
RUN
chmod +x "$SHARE/run.sh"
rc=0
SHARE=$SHARE LOG=$ROOT/target/softroce/console.log TIMEOUT=${TIMEOUT:-600} bash "$HERE/run-vm.sh" /mnt/host/run.sh || rc=$?
t4=$(t)
echo "softroce: host packages $(d $t0 $t1)s, kernel+initramfs $(d $t1 $t2)s, cargo build $(d $t2 $t3)s, VM run $(d $t3 $t4)s, exit $rc"
exit $rc
