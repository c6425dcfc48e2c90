#!/usr/bin/env bash
# System packages and toolchain parts the tests need on a fresh machine.
# Idempotent: skips what is already there.
set -euo pipefail
need=()
command -v cc >/dev/null || need+=(build-essential)
dpkg -s libc6-dev >/dev/null 2>&1 || need+=(libc6-dev)
# The Redis module's system tests run real redis-servers; its build generates the
# module API's bindings with bindgen, which needs libclang.
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-benchmark >/dev/null || need+=(redis-tools)
dpkg -s libclang-dev >/dev/null 2>&1 || need+=(libclang-dev)
# ci/c-pkg-config.sh builds the C client the way host-shim/README.md tells C users to.
command -v pkg-config >/dev/null || need+=(pkg-config)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
cargo fmt --version >/dev/null 2>&1 || rustup component add rustfmt
# The shared-memory tests create their regions here.
[ -d /dev/shm ] && [ -w /dev/shm ] || { echo "ci/setup.sh: /dev/shm is missing or not writable" >&2; exit 1; }
