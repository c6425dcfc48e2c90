#!/usr/bin/env bash
# What the C section of host-shim/README.md ("Using the shim from C") says, verbatim:
# install the shim into a fresh prefix with ci/install-c.sh, build the C client
# (tests/c/) with nothing but `cc ... $(pkg-config --cflags --libs prescient)`, once
# against the shared library and once statically (`pkg-config --static`), and run each against a real prescient-dpu:
# it PUTs 100 values and GETs one back.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
dpu_pid=
cleanup() {
  [ -n "$dpu_pid" ] && kill "$dpu_pid" 2>/dev/null || true
  rm -rf "$work" /dev/shm/prescient-ci-c-"$$"*
}
trap cleanup EXIT

# Built first: aws-lc-sys's build script reruns whenever PKG_CONFIG_PATH changes, so a
# build under the export below would rebuild it here and again in the next step.
cargo build --release -p prescient-dpu
ci/install-c.sh "$work/prefix"
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
pkg-config --exists prescient
cc -std=c11 -Wall -Wextra -Werror -o "$work/client" tests/c/main.c tests/c/client.c \
  $(pkg-config --cflags --libs prescient) -Wl,-rpath,"$work/prefix/lib"
# Statically: the archive by name, and the system libraries it needs from Libs.private.
cc -std=c11 -Wall -Wextra -Werror -o "$work/client-static" tests/c/main.c tests/c/client.c \
  $(pkg-config --cflags prescient) "$work/prefix/lib/libprescient_shim.a" \
  $(pkg-config --static --libs-only-l prescient | sed 's/-lprescient_shim//')
# ldd's output is read whole before grep looks at it: `ldd | grep -q` under pipefail
# fails at random when grep exits at its match and ldd, still writing, gets SIGPIPE
# (a CI run stopped here with no message).
shared_deps=$(ldd "$work/client")
static_deps=$(ldd "$work/client-static" || true)
grep -qF "$work/prefix/lib/libprescient_shim.so" <<<"$shared_deps"
if grep -q prescient_shim <<<"$static_deps"; then
  echo "ci/c-pkg-config.sh: the static client still needs libprescient_shim.so" >&2
  exit 1
fi

for client in client client-static; do
  region=/dev/shm/prescient-ci-c-$$-$client
  ready=$work/$client.ready
  "$work/$client" "$region" "$ready" 100 &
  client_pid=$!
  for _ in $(seq 200); do [ -e "$ready" ] && break; sleep 0.1; done
  [ -e "$ready" ] || { echo "ci/c-pkg-config.sh: $client never created its region" >&2; exit 1; }
  target/release/prescient-dpu serve --emulate --no-pin --region "$region" >"$work/$client.dpu.log" 2>&1 &
  dpu_pid=$!
  if ! wait "$client_pid"; then
    echo "ci/c-pkg-config.sh: $client failed; the DPU app said:" >&2
    cat "$work/$client.dpu.log" >&2
    exit 1
  fi
  kill -TERM "$dpu_pid"
  wait "$dpu_pid"
  dpu_pid=
done
echo "C client built with pkg-config (shared and static) and run against prescient-dpu: ok"
