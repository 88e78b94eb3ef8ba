#!/usr/bin/env bash
# Builds (or reuses) the clang libFuzzer build and runs every fuzz harness (fuzz/) in turn for a
# fixed time, seeded with fuzz/corpus/<harness>/, fuzz/regressions/<harness>/ and the seeds
# fuzz/make_seeds.sh makes from the fixtures. Prints one summary line per harness; exits 1 if
# any harness crashed, leaked, timed out or ran out of memory, after listing the saved inputs
# (BUILD_DIR/fuzz/crashes/<harness>/): copy each to fuzz/regressions/<harness>/ once understood.
#
#   scripts/fuzz.sh [--seconds N] [--build-dir DIR] [--keep-going] [HARNESS...]
#     --seconds N      time per harness (default 60)
#     --build-dir DIR  a build configured with -DTRACECACHE_FUZZ=ON (default build-fuzz/, made
#                      here with clang++ if missing; scripts/test.sh passes its build-asan/)
#     --keep-going     do not stop a harness at its first crash (libFuzzer fork mode)
#     HARNESS...       program npy safetensors graph_codec executable guard_entry (default: all)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=60 dir=$root/build-fuzz keep_going=0 harnesses=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --build-dir) dir=$2; shift 2 ;;
    --keep-going) keep_going=1; shift ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz: unknown option '$1' (try --help)" >&2; exit 2 ;;
    *) harnesses+=("$1"); shift ;;
  esac
done
[ ${#harnesses[@]} -gt 0 ] || harnesses=(program npy safetensors graph_codec executable guard_entry)

# Inputs longer than this are cut: large enough for every seed's interesting part.
declare -A max_len=([program]=8192 [npy]=4096 [safetensors]=8192 [graph_codec]=16384
                    [executable]=32768 [guard_entry]=4096)

bash "$root/scripts/setup.sh"
if [ ! -f "$dir/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTRACECACHE_FUZZ=ON -DTRACECACHE_BENCHMARKS=OFF -DTRACECACHE_WERROR=ON >/dev/null
fi
grep -q '^TRACECACHE_FUZZ:BOOL=ON' "$dir/CMakeCache.txt" ||
  { echo "fuzz: $dir is not configured with -DTRACECACHE_FUZZ=ON" >&2; exit 2; }
targets=(tracecache)
for h in "${harnesses[@]}"; do targets+=("fuzz_$h"); done
cmake --build "$dir" --target "${targets[@]}"

seeds=$dir/fuzz/seeds
bash "$root/fuzz/make_seeds.sh" "$dir/cli/tracecache" "$root" "$seeds" >/dev/null

failed=()
for h in "${harnesses[@]}"; do
  [ -n "${max_len[$h]:-}" ] || { echo "fuzz: unknown harness '$h'" >&2; exit 2; }
  corpus=$dir/fuzz/corpus-run/$h crashes=$dir/fuzz/crashes/$h log=$dir/fuzz/logs/$h.log
  mkdir -p "$corpus" "$crashes" "$(dirname "$log")"
  inputs=("$corpus")
  for d in "$root/fuzz/corpus/$h" "$root/fuzz/regressions/$h" "$seeds/$h"; do
    [ -d "$d" ] && inputs+=("$d")
  done
  before=$(find "$crashes" -type f | sort)
  mode=()
  [ "$keep_going" = 1 ] && mode=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
  start=$SECONDS
  set +e
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$dir/fuzz/fuzz_$h" "${mode[@]}" -max_total_time="$seconds" -max_len="${max_len[$h]}" \
    -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 -artifact_prefix="$crashes/" \
    "${inputs[@]}" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
  [ -n "$execs" ] || execs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#' || true)
  new=$(comm -13 <(echo "$before") <(find "$crashes" -type f | sort) | sed '/^$/d')
  found=$(printf '%s' "$new" | grep -c . || true)
  printf 'fuzz: %-12s %4ds  execs %-10s new crashes %d  (exit %d, log %s)\n' \
    "$h" $((SECONDS - start)) "${execs:-?}" "$found" "$rc" "$log"
  if [ "$rc" -ne 0 ] || [ "$found" -gt 0 ]; then
    failed+=("$h")
    [ -z "$new" ] || printf '  saved %s\n' $new
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (inputs under $dir/fuzz/crashes/; logs under $dir/fuzz/logs/)" >&2
  exit 1
fi
echo "fuzz: no crashes"
