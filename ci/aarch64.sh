#!/usr/bin/env bash
# ci/aarch64.sh [--full]
# Builds prescient-dpu for BlueField's Arm cores, aarch64-unknown-linux-gnu, and runs
# its test suite under `qemu-aarch64 -cpu max` (so the NEON striping kernels and
# AWS-LC's ARMv8 AES/PMULL code are what runs): the library's unit tests and the
# integration tests, the ones that spawn `prescient-dpu` and `fabric-node` included,
# all but those named below. The spawned binaries are aarch64 ones, which the kernel hands to qemu
# through binfmt_misc: this script registers qemu-aarch64 there (Debian's
# qemu-user-binfmt entry if installed, else the same magic pointing at
# /usr/bin/qemu-aarch64) when the kernel lets it; where it does not, those three test
# files are left out and the script says so.
#
# Left out, each also run natively by the README's test command:
# - `the_incast_cells_run_with_and_without_swift_and_report_the_ports`: a bench on the
#   real clock whose incast must build a switch queue; under emulation a step of the
#   cluster takes about 34 ms and no queue forms;
# - unless `--full`: the order model (`tests/order_model.rs`), a model check of the
#   protocol's decision functions, and the simulator's seed campaigns
#   (`tests/simulation.rs`, the tests named `*seeds*`): deterministic runs of the same
#   code, about 30 times slower under qemu (the order model took 723 s where the
#   native run takes 24 s) than CI's time allows. `ci/aarch64.sh --full` runs them too.
#
# Installs what it needs, idempotently.
set -euo pipefail
cd "$(dirname "$0")/.."

target=aarch64-unknown-linux-gnu
missing=()
for pkg in gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}"
fi
rustup target list --installed | grep -qx "$target" || rustup target add "$target"

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -cpu max -L /usr/aarch64-linux-gnu"
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
export CXX_aarch64_unknown_linux_gnu=aarch64-linux-gnu-g++
export AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
# For binaries the tests spawn, started by binfmt_misc (no runner in between).
export QEMU_LD_PREFIX=/usr/aarch64-linux-gnu QEMU_CPU=max

binfmt=/proc/sys/fs/binfmt_misc
if [ ! -e "$binfmt/register" ]; then
    mount -t binfmt_misc binfmt_misc "$binfmt" 2>/dev/null || true
fi
if [ ! -e "$binfmt/qemu-aarch64" ] && [ -w "$binfmt/register" ]; then
    entry=/usr/lib/binfmt.d/qemu-aarch64.conf
    if [ -r "$entry" ]; then
        cat "$entry" >"$binfmt/register" 2>/dev/null || true
    else
        # An aarch64 ELF executable (EM_AARCH64 = 0xb7), run by qemu opened now (F).
        printf '%s' ':qemu-aarch64:M::\x7f\x45\x4c\x46\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00:\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:/usr/bin/qemu-aarch64:F' \
            >"$binfmt/register" 2>/dev/null || true
    fi
fi
targets=(--lib --bins --tests)
if grep -qx enabled "$binfmt/qemu-aarch64" 2>/dev/null; then
    echo "binfmt_misc runs aarch64 binaries through qemu: the tests that spawn them run too"
else
    echo "binfmt_misc cannot run aarch64 binaries here (it could not be mounted or registered, or its qemu-aarch64 entry is disabled):"
    echo "  tests/cli.rs, tests/cluster_commands.rs and tests/fabric_processes.rs are left out"
    targets=(--lib)
    for t in dpu-app/tests/*.rs; do
        name=$(basename "$t" .rs)
        case "$name" in cli | cluster_commands | fabric_processes | order_model) ;; *) targets+=(--test "$name") ;; esac
    done
fi

skips=(--skip the_incast_cells_run_with_and_without_swift_and_report_the_ports)
if [ "${1:-}" != "--full" ]; then
    skips+=(--skip a_writer_gone_for_good --skip a_writer_that_comes_back --skip seeds_)
fi
# The cross-test profile (Cargo.toml) is a lighter build of the whole tree.
cargo test --profile cross-test -p prescient-dpu --target "$target" "${targets[@]}" -- "${skips[@]}"
