#!/usr/bin/env bash
# The README's main command, taken from the README itself (the first command in the
# fenced block after "Run the main job"), so the two cannot drift: run briefly, it
# must exit 0 and print its summary.
set -euo pipefail
cd "$(dirname "$0")/.."
cmd=$(awk '/^Run the main job/ { found = 1 } found && /^```sh/ { getline; print; exit }' README.md)
case "$cmd" in
  "cargo run "*) ;;
  *) echo "ci/main-command.sh: no 'cargo run' command found after 'Run the main job' in README.md (found: '$cmd')" >&2; exit 1 ;;
esac
seconds=${MAIN_SECONDS:-5}
echo "README main command: $cmd (run for $seconds s)"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# shellcheck disable=SC2086 # the README's command is words, as a user would type them
$cmd --seconds "$seconds" | tee "$out"
# Without faults no write fails.
for want in "PUT/s" ", 0 failed;" "over time"; do
  grep -q "$want" "$out" || { echo "ci/main-command.sh: the summary lacks '$want'" >&2; exit 1; }
done
