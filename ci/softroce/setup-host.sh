#!/bin/bash
# Host packages for the Soft-RoCE VM path (Debian 12 bookworm, root). Idempotent.
# Adapted from shared/softroce: qemu from backports (bookworm's own would remove qemu-utils 10.x),
# busybox/cpio/kmod for the initramfs, rdma-core userspace for the guest, cmake/clang for sideway.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
APT=(apt-get -o DPkg::Lock::Timeout=600)
need=()
for p in busybox-static cpio kmod rdma-core ibverbs-utils ibverbs-providers libibverbs-dev \
         iproute2 pkg-config cmake clang libclang-dev libnl-3-dev libnl-route-3-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || need+=("$p")
done
if ! command -v qemu-system-x86_64 >/dev/null; then
  # qemu-utils 10.x from bookworm-backports is preinstalled on these machines; bookworm's own
  # qemu-system-x86 (7.2) Breaks it and apt would REMOVE qemu-utils. Take qemu from backports.
  if dpkg-query -W -f='${Version}' qemu-utils 2>/dev/null | grep -q bpo; then
    # Reuse the mirror this machine is already configured with (first URIs line of debian.sources).
    mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources)
    [ -f /etc/apt/sources.list.d/bookworm-backports.sources ] || cat > /etc/apt/sources.list.d/bookworm-backports.sources <<SRC
Types: deb
URIs: $mirror
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    "${APT[@]}" update -qq
    "${APT[@]}" install -y -qq --no-install-recommends -t bookworm-backports qemu-system-x86
  else
    need+=(qemu-system-x86)
  fi
fi
if [ ${#need[@]} -gt 0 ]; then
  "${APT[@]}" update -qq
  "${APT[@]}" install -y -qq --no-install-recommends "${need[@]}"
fi
qemu-system-x86_64 --version | head -1
