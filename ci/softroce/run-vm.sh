#!/bin/bash
# Boot the RDMA test VM and run a test script inside it; exit with the script's exit code.
#   SHARE=/some/dir ./run-vm.sh /mnt/host/test.sh
#        SHARE is exported read-write into the guest over 9p (virtio) at /mnt/host;
#        put the host-built binary there (same glibc as the initramfs, so it just runs).
# Env: ACCEL=kvm|tcg (default: kvm if /dev/kvm works), MEM=1024, SMP=2, RXE_NETDEV=lo|dummy0,
#      TIMEOUT=300 (seconds), LOG=console log file, OUT=dir with vmlinuz + initramfs.cpio.gz
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/out}
TEST=${1:-/mnt/host/run.sh}
MEM=${MEM:-1024}; SMP=${SMP:-2}; TIMEOUT=${TIMEOUT:-300}; RXE_NETDEV=${RXE_NETDEV:-lo}
LOG=${LOG:-$HERE/console.log}
QEMU=${QEMU:-qemu-system-x86_64}

if [ -z "${ACCEL:-}" ]; then
  # /dev/kvm is not enough: on these machines KVM is "kvm_pvm" (no vmx/svm in cpuinfo) and a stock
  # Debian kernel never gets past the decompressor under it. Use KVM only with real VT-x/AMD-V.
  if [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo && [ ! -d /sys/module/kvm_pvm ]; then
    ACCEL=kvm; else ACCEL=tcg; fi
fi
if [ "$ACCEL" = kvm ]; then ACC=(-accel kvm -cpu host); else ACC=(-accel tcg,thread=multi -cpu max); fi
SHAREARGS=()
if [ -n "${SHARE:-}" ]; then
  SHAREARGS=(-virtfs "local,path=$SHARE,mount_tag=host0,security_model=none,id=host0")
fi

start=$(date +%s.%N)
timeout --foreground -k 5 "$TIMEOUT" "$QEMU" "${ACC[@]}" -smp "$SMP" -m "$MEM" \
  -nographic -no-reboot -nic none \
  -kernel "$OUT/vmlinuz" -initrd "$OUT/initramfs.cpio.gz" \
  -append "console=ttyS0 quiet loglevel=3 panic=-1 rxe_netdev=$RXE_NETDEV rdmatest=$TEST" \
  "${SHAREARGS[@]}" < /dev/null 2>&1 | tee "$LOG"
qrc=${PIPESTATUS[0]}
end=$(date +%s.%N)
rc=$(grep -a -o 'RDMATEST-EXIT=[0-9]*' "$LOG" | tail -1 | cut -d= -f2)
printf 'run-vm: accel=%s qemu_rc=%s test_rc=%s wall=%.1fs\n' "$ACCEL" "$qrc" "${rc:-none}" "$(awk "BEGIN{print $end-$start}")"
[ -n "$rc" ] || exit 99
exit "$rc"
