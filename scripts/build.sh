#!/usr/bin/env bash
# Configures and builds tracecache into a build directory (default: build/).
# Usage: scripts/build.sh [BUILD_DIR] [extra cmake args...]
# Warnings are errors here (-DTRACECACHE_WERROR=ON; a plain cmake build leaves it off).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/setup.sh"
dir=${1:-$root/build}
shift || true
cmake -S "$root" -B "$dir" -G Ninja -DTRACECACHE_WERROR=ON "$@" >/dev/null
cmake --build "$dir"
