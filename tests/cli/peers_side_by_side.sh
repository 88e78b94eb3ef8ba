# bench/peers/side_by_side.py (issue 17): bad arguments exit 2 with a message (also for
# train_side_by_side.py, which shares its options), and a one-step run of one small model gives
# a JSON report with the three systems, the ratio and the FLOPs.
# Needs Debian's python3-torchvision under /usr/bin/python3 (scripts/setup.sh --peers).
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
"$PY" -c "import torch, torchvision" 2>/dev/null ||
  fail "python3-torch and python3-torchvision are not installed; run scripts/setup.sh --peers"
SBS="$SRC/bench/peers/side_by_side.py"
BUILD=$(dirname "$(dirname "$TC")")
for script in "$SBS" "$SRC/bench/peers/train_side_by_side.py"; do
  expect_exit 2 "$PY" "$script" --build "$BUILD" --models resnet18,nosuchnet
  grep -q "unknown model(s): nosuchnet" "$TMP/err" || fail "$(cat "$TMP/err")"
  expect_exit 2 "$PY" "$script" --build "$BUILD" --batches 1,0
  grep -q -- "--batches takes comma-separated positive integers" "$TMP/err" ||
    fail "$(cat "$TMP/err")"
  expect_exit 2 "$PY" "$script" --build "$BUILD" --threads two
  expect_exit 2 "$PY" "$script" --build "$BUILD" --steps 0
  expect_exit 2 "$PY" "$script" --build "$BUILD" --resolution 0
  grep -q -- "--resolution must be at least 1" "$TMP/err" || fail "$(cat "$TMP/err")"
  expect_exit 2 "$PY" "$script" --build "$BUILD" --models vit_b_16 --resolution 40
  grep -q -- "--resolution must be a multiple of 16 for vit_b_16" "$TMP/err" ||
    fail "$(cat "$TMP/err")"
  expect_exit 2 "$PY" "$script" --build "$BUILD" --tc-wait-policies spin
  expect_exit 2 "$PY" "$script" --build "$BUILD" --pin sideways
  expect_exit 2 "$PY" "$script" --build "$TMP/no-build"
  grep -q "no tracecache binary at $TMP/no-build/cli/tracecache" "$TMP/err" ||
    fail "$(cat "$TMP/err")"
  expect_exit 0 "$PY" "$script" --help
  grep -q -- "--rounds" "$TMP/out" && grep -q -- "--tc-lazy" "$TMP/out" ||
    fail "--help does not list --rounds and --tc-lazy"
done

expect_exit 0 "$PY" "$SBS" --build "$BUILD" --models squeezenet1_1 --batches 1 --threads 1 \
  --steps 1 --json
"$PY" - "$TMP/out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["config"]["models"] == ["squeezenet1_1"], r["config"]
assert r["env"]["cpu"]["cores"] >= 1 and len(r["env"]["loadavg_end"]) == 3
assert r["env"]["tracecache_version"].startswith("tracecache-"), r["env"]["tracecache_version"]
(table,) = r["tables"]
assert (table["batch"], table["threads"], table["geomean_models"]) == (1, 1, 1), table
(row,) = table["rows"]
assert row["model"] == "squeezenet1_1" and row["errors"] == {}, row
for system in ("eager", "jit", "tracecache"):
    assert row[system]["steps"] == 1 and row[system]["median_ms"] > 0, (system, row[system])
best = min(row["eager"]["median_ms"], row["jit"]["median_ms"])
assert abs(row["ratio"] - row["tracecache"]["median_ms"] / best) < 1e-9, row
assert abs(table["geomean_ratio"] - row["ratio"]) < 1e-9, table
# squeezenet1_1 at 224x224 is about 0.35 GMAC: 0.7 GFLOP by the cost model (2 per MAC).
assert 0.5 < row["gflop"] < 1.0, row["gflop"]
assert 0 < row["tracecache_peak_fraction"] < 1, row
PY

# --pin rotate (the default): at fewer threads than CPUs every round runs all systems on the
# same CPU, the next CPU each round; the timed rounds' medians are kept per CPU.
ncpu=$("$PY" -c "import os; print(len(os.sched_getaffinity(0)))")
if [ "$ncpu" -ge 2 ]; then
  expect_exit 0 "$PY" "$SBS" --build "$BUILD" --models squeezenet1_1 --batches 1 --threads 1 \
    --steps 3 --rounds 3 --json
  "$PY" - "$TMP/out" <<'PY'
import json, os, sys
r = json.load(open(sys.argv[1]))
assert r["config"]["pin"] == "rotate", r["config"]
(row,) = r["tables"][0]["rows"]
cpus = sorted(os.sched_getaffinity(0))
assert row["rounds"] == 3 and row["pinned"] == [[cpus[0]], [cpus[1]], [cpus[2 % len(cpus)]]], row
timed = {str(cpus[1]), str(cpus[2 % len(cpus)])}
for system in ("eager", "jit", "tracecache"):
    by = row[system]["median_ms_by_cpus"]
    assert set(by) == timed and all(v > 0 for v in by.values()), (system, by)
PY
  expect_exit 0 "$PY" "$SBS" --build "$BUILD" --models squeezenet1_1 --batches 1 --threads 1 \
    --steps 2 --pin none --json
  "$PY" -c "import json,sys; (row,) = json.load(open(sys.argv[1]))['tables'][0]['rows']; \
assert row['pinned'] is None and 'median_ms_by_cpus' not in row['tracecache'], row" "$TMP/out" ||
    fail "--pin none pinned"
fi
echo ok
