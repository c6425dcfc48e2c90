#!/bin/bash
# The cluster across two machines on real verbs: two qemu VMs (TCG), each with Soft-RoCE
# (rxe0) on its eth0, joined by a virtual wire with netem delay; nodes 0-2 and their
# writers in one, nodes 3-4 in the other (ci/two-site/cluster.sh: RS(3,2), quorum 4, so
# no write commits without both). Each VM runs `prescient-dpu soak --config ...
# --nodes-here ...` as one site; CUT_AT s into the load the client VM's link drops
# every packet it sends (netem loss 100%) for CUT_FOR s, then heals. At the end each
# site reads every key of both sites back through its own hosts and checks it against
# what the writers were told; nothing acknowledged may be lost.
#   ci/softroce-2vm.sh                                   (about 3-4 minutes under TCG)
#   SECONDS_OF_LOAD=60 CUT_AT=20 CUT_FOR=10 DELAY_MS=2 ci/softroce-2vm.sh
#   SOFTROCE_NODE_LOG=info,prescient_dpu::cluster::protocol::peer=debug ci/softroce-2vm.sh
#     (the nodes' logs, in target/softroce/2vm-share/logs-*, with every link change)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
HERE=$ROOT/ci/softroce
export OUT=$ROOT/target/softroce/out WORK=$ROOT/target/softroce/work
LOAD=${SECONDS_OF_LOAD:-20} CUT_AT=${CUT_AT:-6} CUT_FOR=${CUT_FOR:-5} DELAY_MS=${DELAY_MS:-1}
t0=$(date +%s)
bash "$HERE/setup-host.sh" >/dev/null
stamp=$(cat "$HERE/build-initramfs.sh" "$HERE/init" | sha256sum | cut -c1-16)
if [ ! -f "$OUT/initramfs.cpio.gz" ] || [ "$(cat "$OUT/stamp" 2>/dev/null)" != "$stamp" ]; then
  bash "$HERE/build-initramfs.sh"
  echo "$stamp" > "$OUT/stamp"
fi
cd "$ROOT"
cargo build -q -p prescient-dpu --features verbs --bin prescient-dpu
t1=$(date +%s)
# The share stays until the next run: each site's node logs are in logs-ROLE.
SHARE=$ROOT/target/softroce/2vm-share
rm -rf "$SHARE"; mkdir -p "$SHARE"
cp "$ROOT/target/debug/prescient-dpu" "$SHARE/prescient-dpu"
mkdir -p "$SHARE/keys" "$SHARE/exchange"
head -c 32 /dev/urandom > "$SHARE/keys/1.key"; chmod 600 "$SHARE/keys/1.key"
# Each guest keeps its nodes' files on its own tmpfs, not on the share.
# Timings for CPUs emulated by TCG on a shared 2-core host: there a heartbeat READ
# between the VMs can take longer than the soak's 20 ms lease, and a host whose lease
# never holds at the moment the soak looks is never counted connected (seen: "the
# cluster did not connect in 300 s" on a loaded host). The cut (5 s) still outlasts
# the failure-detection bound many times over.
HEARTBEAT_US=2000 LEASE_US=250000 DEAD_AFTER_US=1500000 TRANSPORT_TIMEOUT_US=200000 \
  bash "$ROOT/ci/two-site/cluster.sh" 10.77.0.1 10.77.0.2 verbs /tmp/prescient-2vm > "$SHARE/cluster.toml"
cat > "$SHARE/node.sh" <<NODE
#!/bin/bash
export RUST_LOG=${SOFTROCE_RUST_LOG:-warn} PRESCIENT_NODE_LOG=${SOFTROCE_NODE_LOG:-warn} RUST_BACKTRACE=0
ulimit -l unlimited
cd /mnt/host
tc qdisc add dev eth0 root netem delay ${DELAY_MS}ms
if [ "\$VM_ROLE" = server ]; then here=0,1,2; else here=3,4; fi
mkdir -p logs-\$VM_ROLE
TMPDIR=/mnt/host/logs-\$VM_ROLE ./prescient-dpu soak --config cluster.toml --nodes-here \$here --share exchange --seconds $LOAD \
  --kill-every 0 --keys 200 --settle 120 --meet-within 300 > site-\$VM_ROLE.out 2>&1 &
pid=\$!
if [ "\$VM_ROLE" = client ]; then
  for _ in \$(seq 3000); do [ "\$(ls exchange | grep -c '^loading-')" = 2 ] && break; sleep 0.1; done
  s=\$(date +%s)
  sleep $CUT_AT
  tc qdisc change dev eth0 root netem delay ${DELAY_MS}ms loss 100%
  echo "softroce-2vm: client link cut $CUT_AT s into the load"
  sleep $CUT_FOR
  tc -s qdisc show dev eth0 | sed 's/^/softroce-2vm: cut: /'
  tc qdisc change dev eth0 root netem delay ${DELAY_MS}ms
  echo "softroce-2vm: client link restored after $CUT_FOR s"
fi
wait \$pid; rc=\$?
cat site-\$VM_ROLE.out
exit \$rc
NODE
chmod +x "$SHARE/node.sh"
rc=0
SHARE=$SHARE LOGDIR=$ROOT/target/softroce bash "$HERE/run-2vm.sh" /mnt/host/node.sh || rc=$?
for role in server client; do
  echo "--- $role VM"
  grep -a -E '^softroce-2vm' "$ROOT/target/softroce/console-$role.log" || true
  # The site's whole output: its summary, or the error that stopped it.
  cat "$SHARE/site-$role.out" 2>/dev/null || echo "softroce-2vm: no site-$role.out: the guest did not start its soak"
  if [ "$rc" != 0 ]; then
    echo "--- $role VM: the console's last lines"
    grep -a -v -E '^softroce-2vm' "$ROOT/target/softroce/console-$role.log" | tail -n 25 || true
    for log in "$SHARE"/logs-"$role"/*/node*.log; do
      [ -f "$log" ] || continue
      echo "--- $role VM: $(basename "$log"), $(grep -c '' "$log") lines, the last 15"
      tail -n 15 "$log" | sed 's/\x1b\[[0-9;]*m//g'
    done
  fi
done
echo "softroce-2vm: build $((t1 - t0)) s, VMs $(( $(date +%s) - t1 )) s, exit $rc"
exit $rc
