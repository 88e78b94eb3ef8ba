#!/usr/bin/env bash
# The figures a restructure must not regress, in one run (see docs/architecture.md):
# record ns/op and canonicalize+hash ns/node (capture_bench), guard check ns (guard_bench),
# once-mode host overhead vs lazy on the fixture programs, and the zoo's cpu step times in once mode.
# Usage: bench/figures.sh BUILD_DIR OUT_DIR   (run on a quiet machine; names BLAS and threads)
set -euo pipefail
build=${1:?usage: bench/figures.sh BUILD_DIR OUT_DIR}
out=${2:?usage: bench/figures.sh BUILD_DIR OUT_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
threads=${TRACECACHE_THREADS:-2}
mkdir -p "$out"
echo "BLAS: OpenBLAS $(dpkg-query -W -f='${Version}' libopenblas0-pthread 2>/dev/null || echo '?'), threads: $threads" | tee "$out/machine.txt"
"$build/bench/capture_bench" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  --benchmark_format=console | tee "$out/capture_bench.txt"
"$build/bench/guard_bench" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  --benchmark_format=console | tee "$out/guard_bench.txt"
"$build/cli/tracecache" bench "$root"/fixtures/programs/*.trace --modes lazy,once --steps 50 --warmup 5 \
  --threads "$threads" | tee "$out/fixtures_once_vs_lazy.txt"
"$build/cli/tracecache" bench $("$build/cli/tracecache" zoo list --json 2>/dev/null | /usr/bin/python3 -c 'import json,sys; print(" ".join(m["name"] for m in json.load(sys.stdin)))' 2>/dev/null || echo resnet18) \
  --modes once --steps 10 --warmup 2 --threads "$threads" | tee "$out/zoo_cpu_once.txt"
