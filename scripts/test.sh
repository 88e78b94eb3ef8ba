#!/usr/bin/env bash
# The test command: installs missing packages, builds, runs the whole test suite, then builds
# and runs it again under AddressSanitizer + UndefinedBehaviorSanitizer.
# Set TRACECACHE_SKIP_SANITIZERS=1 to run only the optimized build (quick local check).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)

# tests/cli/torch_weights.sh checks resnet18 against PyTorch itself: Debian's python3-torch.
bash "$root/scripts/setup.sh" --peers

echo "== release build + tests"
bash "$root/scripts/build.sh" "$root/build"
ctest --test-dir "$root/build" --output-on-failure -j "$jobs"

if [ "${TRACECACHE_SKIP_SANITIZERS:-0}" != 1 ]; then
  echo "== ASan+UBSan build + tests"
  bash "$root/scripts/build.sh" "$root/build-asan" -DCMAKE_BUILD_TYPE=Debug \
    -DTRACECACHE_SANITIZE=ON -DTRACECACHE_BENCHMARKS=OFF
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir "$root/build-asan" --output-on-failure -j "$jobs"
fi
