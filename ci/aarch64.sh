#!/usr/bin/env bash
# Builds the codecs (sealing, striping) for BlueField's Arm cores,
# aarch64-unknown-linux-gnu, and runs their unit and property tests under
# `qemu-aarch64 -cpu max` (so the NEON striping kernels and AWS-LC's ARMv8
# AES/PMULL code are what runs). Installs what it needs, idempotently.
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

# Unit tests of the codec modules, then the end-to-end codec property tests, in the
# cross-test profile (Cargo.toml: a lighter build of the whole tree, 508 s -> 278 s).
cargo test --profile cross-test -p prescient-dpu --target "$target" --lib -- seal:: stripe::
cargo test --profile cross-test -p prescient-dpu --target "$target" --test codec_roundtrip
