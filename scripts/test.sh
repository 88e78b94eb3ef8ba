#!/usr/bin/env bash
# The test command: installs missing packages, builds with GCC and runs the whole test suite,
# then builds with clang++ and runs it again under AddressSanitizer + UndefinedBehaviorSanitizer
# (so both compilers build the tree with -Werror), and runs every fuzz harness briefly
# (scripts/fuzz.sh, reusing that build: it is also the libFuzzer build).
# Set TRACECACHE_SKIP_SANITIZERS=1 to run only the optimized build (quick local check);
# TRACECACHE_FUZZ_SECONDS=N sets the time per fuzz harness (default 20; 0 skips fuzzing).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)

# tests/cli/torch_weights.sh checks resnet18 against PyTorch itself: Debian's python3-torch.
bash "$root/scripts/setup.sh" --peers

echo "== GCC release build + tests"
bash "$root/scripts/build.sh" "$root/build" -DCMAKE_CXX_COMPILER=g++ -DTRACECACHE_WERROR=ON
ctest --test-dir "$root/build" --output-on-failure -j "$jobs"

if [ "${TRACECACHE_SKIP_SANITIZERS:-0}" != 1 ]; then
  echo "== clang ASan+UBSan build + tests"
  bash "$root/scripts/build.sh" "$root/build-asan" -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=Debug -DTRACECACHE_SANITIZE=ON -DTRACECACHE_FUZZ=ON \
    -DTRACECACHE_BENCHMARKS=OFF -DTRACECACHE_WERROR=ON
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir "$root/build-asan" --output-on-failure -j "$jobs"
  fuzz_seconds=${TRACECACHE_FUZZ_SECONDS:-20}
  if [ "$fuzz_seconds" != 0 ]; then
    echo "== fuzz (${fuzz_seconds}s per harness)"
    bash "$root/scripts/fuzz.sh" --build-dir "$root/build-asan" --seconds "$fuzz_seconds"
  fi
fi
