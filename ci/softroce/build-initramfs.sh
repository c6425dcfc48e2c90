#!/bin/bash
# (Adapted from shared/softroce: no perftest or C smoke test; the Rust conformance suite is the test.)
# Build a tiny initramfs (busybox + rdma-core userspace copied from the host + the
# Debian kernel's rdma_rxe/9p modules) and fetch the Debian kernel, for running real
# RDMA verbs (Soft-RoCE / rdma_rxe) tests inside a qemu VM on a machine with no RDMA.
#
# Output: $OUT/vmlinuz, $OUT/initramfs.cpio.gz
# Host prerequisites (Debian bookworm):
#   apt-get install -y --no-install-recommends busybox-static cpio kmod \
#       libibverbs1 ibverbs-providers ibverbs-utils rdma-core perftest rdmacm-utils iproute2
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/out}
WORK=${WORK:-$HERE/work}
KPKG=${KPKG:-}            # e.g. linux-image-6.1.0-56-amd64; default: whatever linux-image-amd64 depends on
EXTRA_BINS=${EXTRA_BINS:-} # extra host binaries to copy in (with their libs), space separated

t0=$(date +%s.%N)
mkdir -p "$OUT" "$WORK"

# ---- 1. Debian kernel (not installed on the host: just downloaded and unpacked) ----
if [ -z "$KPKG" ]; then
  KPKG=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/{print $2; exit}')
fi
KV=${KPKG#linux-image-}
if [ ! -f "$WORK/kernel/boot/vmlinuz-$KV" ]; then
  rm -rf "$WORK/kernel" "$WORK/debs"; mkdir -p "$WORK/kernel" "$WORK/debs"
  (cd "$WORK/debs" && apt-get download "$KPKG" 2>&1 | grep -v 'unsandboxed' || true)
  dpkg-deb -x "$WORK"/debs/"$KPKG"_*.deb "$WORK/kernel"
  depmod -b "$WORK/kernel" "$KV"
  rm -rf "$WORK/debs"
fi
cp "$WORK/kernel/boot/vmlinuz-$KV" "$OUT/vmlinuz"
t1=$(date +%s.%N)

# ---- 2. root filesystem tree ----
R=$WORK/root
rm -rf "$R"
mkdir -p "$R"/{bin,sbin,etc,proc,sys,dev,tmp,run,mnt/host,lib64,usr/bin,usr/lib/x86_64-linux-gnu,lib/modules/$KV,root}
cp /bin/busybox "$R/bin/busybox"
for a in $("$R/bin/busybox" --list); do
  [ -e "$R/bin/$a" ] || ln -s busybox "$R/bin/$a"
done

copy_with_libs() { # copy an ELF file and every shared library it needs (as resolved on the host)
  local f
  for f in "$@"; do
    [ -e "$f" ] || { echo "missing $f" >&2; continue; }
    mkdir -p "$R$(dirname "$f")"; cp -L "$f" "$R$f"
    ldd "$f" 2>/dev/null | awk '/=> \//{print $3} /^\t\/lib/{print $1}' | while read -r l; do
      [ -e "$R$l" ] && continue
      mkdir -p "$R$(dirname "$l")"; cp -L "$l" "$R$l"
    done
  done
}

# bash: Debian's busybox-static is built with FEATURE_SH_STANDALONE/PREFER_APPLETS, so under
# busybox sh "tc"/"ip" always run the busybox applets (no netem); test scripts run under bash instead
BINS="/bin/bash /usr/bin/ibv_devices /usr/bin/ibv_devinfo /usr/bin/rdma /usr/sbin/ip /usr/sbin/tc"
# the rxe userspace provider is dlopen()ed by libibverbs, so ldd does not see it
BINS="$BINS /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so"
copy_with_libs $BINS $EXTRA_BINS
# libraries that binaries arriving later (over 9p) commonly need: Rust std needs libgcc_s
for l in libgcc_s.so.1 libstdc++.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libz.so.1; do
  [ -e /lib/x86_64-linux-gnu/$l ] && copy_with_libs /lib/x86_64-linux-gnu/$l
done
rm -f "$R/bin/ip" "$R/bin/tc"           # prefer iproute2 over busybox applets
ln -s /usr/sbin/ip "$R/bin/ip"; ln -s /usr/sbin/tc "$R/bin/tc"
mkdir -p "$R/etc/libibverbs.d"
cp /etc/libibverbs.d/rxe.driver "$R/etc/libibverbs.d/"
mkdir -p "$R/usr/lib/x86_64-linux-gnu/libibverbs"   # provider dir (copied above)
# Debian bookworm is merged-/usr: /lib -> usr/lib; keep the same layout so that ldd paths resolve
if [ -d "$R/lib/x86_64-linux-gnu" ] && [ -d "$R/usr/lib/x86_64-linux-gnu" ]; then
  cp -a "$R/lib/x86_64-linux-gnu/." "$R/usr/lib/x86_64-linux-gnu/"; rm -rf "$R/lib/x86_64-linux-gnu"
  ln -s ../usr/lib/x86_64-linux-gnu "$R/lib/x86_64-linux-gnu"
fi
echo "root:x:0:0:root:/root:/bin/sh" > "$R/etc/passwd"
echo "root:x:0:" > "$R/etc/group"
printf '127.0.0.1 localhost\n' > "$R/etc/hosts"

# ---- 3. kernel modules (with dependencies, in load order) ----
# crc32_generic: rdma_rxe asks the crypto API for "crc32" (ICRC) at device creation; it is not a
# modinfo dependency, and without it "rdma link add" fails with "failed to init crc32 algorithm err:-2"
MODS="crc32_generic crc32_pclmul rdma_rxe ib_uverbs rdma_ucm 9pnet_virtio 9p virtio_pci virtio_net virtio_blk dummy veth sch_netem"
: > "$R/etc/modules.load"
for m in $MODS; do
  modprobe -d "$WORK/kernel" -S "$KV" --show-depends "$m" | awk '$1=="insmod"{print $2}' | while read -r p; do
    rel=${p#"$WORK/kernel"}
    grep -qxF "$rel" "$R/etc/modules.load" && continue
    mkdir -p "$R$(dirname "$rel")"; cp "$p" "$R$rel"
    echo "$rel" >> "$R/etc/modules.load"
  done
done

# ---- 4. /init ----
cp "$HERE/init" "$R/init"; chmod +x "$R/init"

# ---- 5. pack ----
(cd "$R" && find . | cpio -o -H newc --quiet) | gzip -1 > "$OUT/initramfs.cpio.gz"
t2=$(date +%s.%N)
printf 'kernel %s fetch+unpack: %.1fs, initramfs build: %.1fs, size: %s (kernel %s)\n' "$KV" \
  "$(awk "BEGIN{print $t1 - $t0}")" "$(awk "BEGIN{print $t2 - $t1}")" \
  "$(du -h "$OUT/initramfs.cpio.gz" | cut -f1)" "$(du -h "$OUT/vmlinuz" | cut -f1)"
