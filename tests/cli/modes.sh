# The three execution modes give the same bits (docs/architecture.md invariants 3 and 4): `run --mode
# eager|lazy|once --json` reports equal output checksums for every step of every fixture;
# once mode on a varying batch recompiles and says why (the input and the dim); text mode
# prints the guard counts and the reasons; `bench` prints the once/lazy speedups, and its
# --json is valid with the documented fields.
source "$(dirname "$0")/lib.sh"
P="$SRC/fixtures/programs"
for f in mlp attention matmul_varying_batch lr_schedule ops_tour embedding; do
  for m in eager lazy once; do
    "$TC" run "$P/$f.trace" --mode "$m" --json --db "$TMP/modes.db" > "$TMP/$f.$m.json" ||
      fail "run $f.trace --mode $m exited $?"
  done
  python3 - "$TMP/$f" <<'PY' || fail "$f.trace: modes disagree"
import json, sys
docs = {m: json.load(open(f"{sys.argv[1]}.{m}.json")) for m in ("eager", "lazy", "once")}
sums = {m: [[(o["name"], o["shape"], o["checksum"]) for o in s] for s in d["outputs"]]
        for m, d in docs.items()}
assert sums["eager"] == sums["lazy"] == sums["once"], sums
for m, d in docs.items():
    assert d["mode"] == m, (m, d["mode"])
    for c in ("guard_checks", "guard_failures", "recompiles", "traces", "compiles"):
        assert isinstance(d["counters"][c], int), (m, c)
    assert isinstance(d["recompile_reasons"], list)
e = docs["eager"]
assert e["counters"]["traces"] == 0 and e["counters"]["compiles"] == 0 and e["graph_hashes"] == []
assert docs["lazy"]["counters"]["traces"] == docs["lazy"]["steps"]
o = docs["once"]
assert o["counters"]["guard_checks"] >= o["steps"] - 1, o["counters"]
assert len(o["recompile_reasons"]) == o["counters"]["recompiles"]
PY
done

# Once mode on a varying batch (B = 8, 8, 16, 16, 32, 8): B = 16 recompiles, naming input x and
# dim 0, and makes that dim dynamic; B = 32 is then a new specialization of the dynamic entry,
# with no trace.
python3 - "$TMP/matmul_varying_batch.once.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
c = d["counters"]
assert c["recompiles"] == 1 and c["traces"] == 2, c
assert c["shape_specializations"] == 1, c
assert c["guard_failures"] >= 2, c
(r,) = d["recompile_reasons"]
assert "input 0 'x': size of dim 0 expected 8, actual 16" in r, r
assert "dynamic: input 0 'x' dim 0" in r, r
PY

# With automatic dynamism off, every new batch size recompiles.
"$TC" run "$P/matmul_varying_batch.trace" --mode once --no-cache --no-auto-dynamic --json > "$TMP/static.json"
python3 - "$TMP/static.json" "$TMP/matmul_varying_batch.once.json" <<'PY'
import json, sys
d, dyn = (json.load(open(p)) for p in sys.argv[1:3])
c = d["counters"]
assert c["recompiles"] == 2 and c["traces"] == 3 and c.get("shape_specializations", 0) == 0, c
for r, actual in zip(d["recompile_reasons"], ("16", "32")):
    assert f"input 0 'x': size of dim 0 expected 8, actual {actual}" in r, r
assert d["outputs"] == dyn["outputs"]
PY

# Text mode: the counts line and the reasons.
"$TC" run "$P/matmul_varying_batch.trace" --mode once --no-cache > "$TMP/once.txt"
grep -Eq '^[0-9]+ guard checks, [0-9]+ guard failures, 1 recompiles$' "$TMP/once.txt" ||
  fail "no guard counts line: $(cat "$TMP/once.txt")"
[ "$(grep -c "^recompile: .*input 0 'x': size of dim 0 expected 8, actual 16" "$TMP/once.txt")" -eq 1 ] ||
  fail "recompile reasons missing: $(cat "$TMP/once.txt")"
grep -q "(once mode)" "$TMP/once.txt" || fail "text output does not name the mode"

# once needs compiled executables; unknown modes are bad input.
expect_exit 2 "$TC" run "$P/mlp.trace" --mode once --backend reference
grep -q "needs --backend cpu" "$TMP/err" || fail "unhelpful error: $(cat "$TMP/err")"
expect_exit 2 "$TC" run "$P/mlp.trace" --mode fast

# bench: a table with the speedups, progress on stderr, valid JSON.
expect_exit 0 "$TC" bench "$P/mlp.trace" "$P/lr_schedule.trace" --steps 3 --warmup 2
grep -q "once/lazy speedup: host overhead" "$TMP/out" || fail "no speedup in: $(cat "$TMP/out")"
for m in eager lazy once; do
  grep -Eq "^mlp.trace +$m " "$TMP/out" || fail "no mlp.trace $m row: $(cat "$TMP/out")"
  grep -q "bench: mlp.trace $m" "$TMP/err" || fail "no progress line for $m"
done
expect_exit 0 "$TC" bench "$P/matmul_varying_batch.trace" --modes lazy,once --steps 3 --warmup 6 --json
python3 - "$TMP/out" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["backend"] == "cpu" and d["steps"] == 3 and d["warmup"] == 6, d
assert [r["mode"] for r in d["rows"]] == ["lazy", "once"], d["rows"]
for r in d["rows"]:
    assert r["target"] == "matmul_varying_batch.trace"
    for k in ("step_us", "kernel_us", "overhead_us"):
        assert isinstance(r[k], (int, float)) and r[k] >= 0, (k, r)
    assert r["step_us"] >= r["overhead_us"]
once = d["rows"][1]
assert once["traces"] == 0 and once["compiles"] == 0, once  # warm: every batch size seen
assert d["rows"][0]["traces"] == 3
(s,) = d["speedups"]
assert s["target"] == "matmul_varying_batch.trace"
assert s["overhead_once_vs_lazy"] > 0 and s["step_once_vs_lazy"] > 0, s
PY

# The summary table: one entry per target, and the geomean of its ratios.
expect_exit 0 "$TC" bench "$P/lr_schedule.trace" "$P/mlp.trace" --modes lazy,once --steps 3 --warmup 2 --json
python3 - "$TMP/out" <<'PY'
import json, math, sys
d = json.load(open(sys.argv[1]))
assert d["summary_step_time"] == "wall", d["summary_step_time"]
summary = d["summary"]
assert [s["target"] for s in summary] == ["lr_schedule.trace", "mlp.trace"], summary
for s in summary:
    assert s["eager_step_us"] is None and s["lazy_step_us"] > 0 and s["once_step_us"] > 0, s
    assert abs(s["step_once_vs_lazy"] - s["lazy_step_us"] / s["once_step_us"]) <= 0.01 * s["step_once_vs_lazy"], s
g = d["geomean"]
assert g["targets"] == 2, g
for k in ("step_once_vs_lazy", "overhead_once_vs_lazy"):
    want = math.exp(sum(math.log(s[k]) for s in summary) / len(summary))
    assert abs(g[k] - want) <= 0.01 * want, (k, g[k], want)
PY
"$TC" bench "$P/lr_schedule.trace" "$P/mlp.trace" --modes lazy,once --steps 3 --warmup 2 > "$TMP/table.txt" 2>/dev/null
grep -Eq "^geomean \(2\) +[0-9.]+x +[0-9.]+x$" "$TMP/table.txt" || fail "no geomean row: $(cat "$TMP/table.txt")"
expect_exit 2 "$TC" bench "$P/mlp.trace" --modes eager,turbo
echo ok
