#!/usr/bin/env bash
# The main job: installs missing packages, builds, and runs a fixture program through the CLI:
# its canonical graph and hash, then every step through lazy capture with output checksums.
# Usage: scripts/run.sh [PROGRAM.trace] (default: fixtures/programs/mlp.trace)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
program=${1:-$root/fixtures/programs/mlp.trace}
bash "$root/scripts/build.sh" "$root/build"
tc="$root/build/cli/tracecache"
echo "== tracecache show $program"
"$tc" show "$program" | tail -n 3
echo "== tracecache run $program"
"$tc" run "$program"
