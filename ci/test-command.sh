#!/usr/bin/env bash
# The README's test command, taken from the README itself (every line of the fenced
# block after "Run the tests"), so the two cannot drift: CI runs exactly what a new
# user types on a fresh clone.
set -euo pipefail
cd "$(dirname "$0")/.."
block=$(awk '/^Run the tests/ { found = 1; next } found && /^```sh/ { inside = 1; next } inside && /^```/ { exit } inside { print }' README.md)
if [ -z "$block" ] || ! grep -q "cargo test" <<<"$block"; then
  echo "ci/test-command.sh: no fenced block with 'cargo test' after 'Run the tests' in README.md (found: '$block')" >&2
  exit 1
fi
echo "README test command:"
echo "$block"
bash -euo pipefail -c "$block"
