#!/bin/bash
# Two guests wired back to back by a virtio-net link that qemu carries over a unix
# socket (-netdev stream), each with its own rxe0 on eth0: real RoCEv2 packets between
# two kernels, through netem inside the guests if the test script adds it. Nothing is
# routed on the host. (Adapted from shared/softroce/run-2vm.sh: SMP, logs under LOGDIR.)
#   SHARE=/dir ./run-2vm.sh /mnt/host/node.sh
# The script runs in both guests with VM_ROLE=server|client, VM_IP, PEER_IP set
# (server 10.77.0.1, client 10.77.0.2). Exits 0 if both scripts exited 0.
# Env: OUT (vmlinuz, initramfs.cpio.gz), MEM=1536 and SMP=2 per guest, TIMEOUT=900 s,
#      LOGDIR (console-server.log, console-client.log; default OUT/..).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/out}
TEST=${1:?test script path inside the guest}
MEM=${MEM:-1536}; SMP=${SMP:-2}; TIMEOUT=${TIMEOUT:-900}
LOGDIR=${LOGDIR:-$OUT/..}
ACC=(-accel tcg,thread=multi -cpu max)
SOCK=$(mktemp -u /tmp/prescient-2vm-XXXXXX.sock)
SHAREARGS=()
[ -n "${SHARE:-}" ] && SHAREARGS=(-virtfs "local,path=$SHARE,mount_tag=host0,security_model=none,id=host0")

boot() { # role ip peer server(on|off) log
  timeout -k 5 "$TIMEOUT" qemu-system-x86_64 "${ACC[@]}" -smp "$SMP" -m "$MEM" -nographic -no-reboot \
    -kernel "$OUT/vmlinuz" -initrd "$OUT/initramfs.cpio.gz" \
    -netdev "stream,id=n0,server=$4,addr.type=unix,addr.path=$SOCK" \
    -device virtio-net-pci,netdev=n0,mac=52:54:00:00:77:0$([ "$1" = server ] && echo 1 || echo 2) \
    -append "console=ttyS0 quiet loglevel=3 panic=-1 rxe_netdev=eth0 vm_ip=$2/24 peer_ip=$3 vm_role=$1 rdmatest=$TEST" \
    "${SHAREARGS[@]}" < /dev/null > "$5" 2>&1
}
start=$(date +%s.%N)
boot server 10.77.0.1 10.77.0.2 on "$LOGDIR/console-server.log" &
SPID=$!
for _ in $(seq 50); do [ -S "$SOCK" ] && break; sleep 0.1; done
boot client 10.77.0.2 10.77.0.1 off "$LOGDIR/console-client.log" &
CPID=$!
wait $CPID; wait $SPID
rm -f "$SOCK"
end=$(date +%s.%N)
rs=$(grep -a -o 'RDMATEST-EXIT=[0-9]*' "$LOGDIR/console-server.log" | tail -1 | cut -d= -f2)
rc=$(grep -a -o 'RDMATEST-EXIT=[0-9]*' "$LOGDIR/console-client.log" | tail -1 | cut -d= -f2)
printf 'run-2vm: server_rc=%s client_rc=%s wall=%.1fs\n' "${rs:-none}" "${rc:-none}" "$(awk "BEGIN{print $end-$start}")"
[ "${rs:-x}" = 0 ] && [ "${rc:-x}" = 0 ]
