# Issue 14: an audit that explains. `run -v` names each compiling step and what differs from the
# closest cached graph (the program's dim, at its line); `run --json` has per-step outcomes;
# `diff` names a differing attribute and its program line; `audit --program X` shows only X;
# graph hashes are accepted as unique prefixes everywhere (ambiguous or unknown: exit 2); once
# mode's recompile reasons use the program's names, values and step number.
source "$(dirname "$0")/lib.sh"
db="$TMP/c.db"
cat > "$TMP/batch.trace" <<'T'
tracecache 1
steps 4
dim B = [8, 8, 16, 4]
input x : f32[B, 32] = uniform(seed=3, low=-1, high=1)
param w : f32[32, 16] = normal(seed=31, mean=0, std=0.2)
y = matmul(x, w)
output y
T

# -v: one line per step and graph; compiling steps name the dim's change and the input's line.
"$TC" run "$TMP/batch.trace" --db "$db" -v > "$TMP/out" 2> "$TMP/err"
grep -q "step 0: graph [0-9a-f]\{16\} miss (new graph), compiled in" "$TMP/err" || fail "step 0: $(cat "$TMP/err")"
grep -q "step 1: graph [0-9a-f]\{16\} hit (memory)" "$TMP/err" || fail "step 1: $(cat "$TMP/err")"
grep -q "step 2: graph [0-9a-f]\{16\} miss (new graph), compiled in .*; closest [0-9a-f]\{16\}: %0 parameter input 0 shape (dim 0): f32\[8, 32\] -> f32\[16, 32\]  (.*batch.trace:4 input x : f32\[B, 32\])" "$TMP/err" \
  || fail "step 2 names the dim: $(cat "$TMP/err")"
grep -q "step 3: .*input 0 shape (dim 0)" "$TMP/err" || fail "step 3: $(cat "$TMP/err")"
grep -q "warning: lazy mode compiled 3 distinct graphs in 4 steps (what varies: input 0 shape (dim 0) (.*batch.trace:4 input x" "$TMP/err" \
  || fail "the keeps-compiling warning: $(cat "$TMP/err")"
# TRACECACHE_VERBOSE=1 is -v; a second process hits the disk.
TRACECACHE_VERBOSE=1 "$TC" run "$TMP/batch.trace" --db "$db" --steps 1 > /dev/null 2> "$TMP/err"
grep -q "step 0: graph [0-9a-f]\{16\} hit (disk)" "$TMP/err" || fail "TRACECACHE_VERBOSE: $(cat "$TMP/err")"
"$TC" run "$TMP/batch.trace" --db "$db" --steps 1 > /dev/null 2> "$TMP/err"
[ ! -s "$TMP/err" ] || fail "without -v nothing is printed: $(cat "$TMP/err")"

# --json: steps_detail, one object per step with each graph's outcome.
rm -f "$TMP/j.db"
"$TC" run "$TMP/batch.trace" --db "$TMP/j.db" --json > "$TMP/run.json" 2> /dev/null
python3 - "$TMP/run.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
d = doc["steps_detail"]
assert [s["step"] for s in d] == [0, 1, 2, 3], d
assert [g["outcome"] for s in d for g in s["graphs"]] == ["miss", "hit", "miss", "miss"], d
assert d[1]["graphs"][0]["tier"] == "memory"
first, second = d[0]["graphs"][0], d[2]["graphs"][0]
assert first["reason"] == "new graph" and first["closest"] is None and first["compile_ms"] >= 0, first
assert second["closest"] == first["hash"], second
diff = second["differences"]
assert len(diff) == 1 and diff[0]["kind"] == "input type" and diff[0]["what"] == "input 0 shape (dim 0)", diff
assert diff[0]["a"] == "f32[8, 32]" and diff[0]["b"] == "f32[16, 32]", diff
assert diff[0]["source_b"].endswith("batch.trace:4 input x : f32[B, 32]"), diff
# what existed before is unchanged
assert doc["steps"] == 4 and len(doc["graph_hashes"]) == 4 and "counters" in doc
PY

# diff: two programs that differ in one attribute, by file and by hash prefix.
for n in 4 2; do
  cat > "$TMP/r$n.trace" <<T
tracecache 1
steps 1
input x : f32[8, 4] = normal(seed=1)
h = relu(x)
r = reshape(h, shape=[$n, -1])
output r
T
done
"$TC" diff "$TMP/r4.trace" "$TMP/r2.trace" > "$TMP/diff.txt"
grep -q "reshape attribute 'shape': \[4, 8\] -> \[2, 16\]  (A: .*r4.trace:5 r; B: .*r2.trace:5 r)" "$TMP/diff.txt" || fail "diff by file: $(cat "$TMP/diff.txt")"
"$TC" run "$TMP/r4.trace" --db "$db" > /dev/null
"$TC" run "$TMP/r2.trace" --db "$db" > /dev/null
h4=$("$TC" show "$TMP/r4.trace" | sed -n 's/^hash //p')
h2=$("$TC" show "$TMP/r2.trace" | sed -n 's/^hash //p')
"$TC" diff "${h4:0:12}" "${h2:0:12}" --db "$db" > "$TMP/diff.txt"
grep -q "reshape attribute 'shape': \[4, 8\] -> \[2, 16\]  (A: .*r4.trace:5 r; B: .*r2.trace:5 r)" "$TMP/diff.txt" \
  || fail "diff by prefix: $(cat "$TMP/diff.txt")"
"$TC" diff "$h4" "$h2" --db "$db" --json > "$TMP/diff.json"
python3 - "$TMP/diff.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["identical"] is False and d["a"]["program"].endswith("r4.trace"), d
[x] = d["differences"]
assert x["kind"] == "attribute" and x["what"] == "attribute 'shape'" and x["source_b"].endswith("r2.trace:5 r"), x
PY
# show prints each node's program line, by prefix too.
"$TC" show "${h4:0:8}" --db "$db" > "$TMP/show.txt"
grep -q "= reshape(.*  # .*r4.trace:5 r" "$TMP/show.txt" || fail "show: $(cat "$TMP/show.txt")"
grep -q "^program .*r4.trace" "$TMP/show.txt" || fail "show names the program: $(cat "$TMP/show.txt")"

"$TC" show "$TMP/r4.trace" --json > "$TMP/show.json"
python3 - "$TMP/show.json" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))["graphs"][0]
assert len(g["sources"]) == g["nodes"] and g["sources"][-1].endswith("r4.trace:5 r"), g
PY

# Prefixes: unknown and ambiguous are exit 2 naming what was asked (and the candidates).
expect_exit 2 "$TC" show ffffffffffffffff --db "$db"
grep -q "ffffffffffffffff" "$TMP/err" || fail "unknown prefix: $(cat "$TMP/err")"
python3 - "$db" "${h4:0:6}" <<'PY'
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
con.execute("INSERT INTO graphs (key, blob, checksum, bytes, nodes, created) VALUES (?, x'00', 0, 1, 1, 0)",
            (sys.argv[2] + "0" * 26,))
con.commit()
PY
expect_exit 2 "$TC" show "${h4:0:6}" --db "$db"
grep -q "ambiguous" "$TMP/err" && grep -q "$h4" "$TMP/err" || fail "ambiguous prefix: $(cat "$TMP/err")"
expect_exit 2 "$TC" diff "${h4:0:6}" "$h2" --db "$db"
expect_exit 2 "$TC" audit --db "$db" --graph "${h4:0:6}"
expect_exit 0 "$TC" audit --db "$db" --graph "${h2:0:10}"
grep -q "^${h2:0:16} " "$TMP/out" || fail "audit --graph: $(cat "$TMP/out")"
[ "$(grep -c '^[0-9a-f]\{16\} ' "$TMP/out")" = 1 ] || fail "audit --graph shows one graph: $(cat "$TMP/out")"

# audit --program X shows only X; --kind, --since; bad values are exit 2.
"$TC" audit --db "$db" --program batch > "$TMP/audit.txt"
[ "$(grep -c '^[0-9a-f]\{16\} ' "$TMP/audit.txt")" = 3 ] || fail "batch has 3 graphs: $(cat "$TMP/audit.txt")"
grep -q "r4.trace\|r2.trace" "$TMP/audit.txt" && fail "audit --program batch shows other programs: $(cat "$TMP/audit.txt")"
grep -q "closest [0-9a-f]\{32\}: %0 parameter input 0 shape (dim 0)" "$TMP/audit.txt" || fail "audit shows the miss detail: $(cat "$TMP/audit.txt")"
"$TC" audit --db "$db" --program r4.trace --json > "$TMP/audit.json"
python3 - "$TMP/audit.json" "$h4" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert [g["hash"] for g in d["graphs"]] == [sys.argv[2]], d["graphs"]
assert d["graphs"][0]["program"].endswith("r4.trace")
PY
"$TC" audit --db "$db" --kind compile --since 1h > "$TMP/audit.txt"
[ "$(grep -c '^[0-9a-f]\{16\} ' "$TMP/audit.txt")" = 5 ] || fail "5 graphs compiled in the last hour: $(cat "$TMP/audit.txt")"
"$TC" audit --db "$db" --since 2000-01-01 > /dev/null || fail "an ISO date"
"$TC" audit --db "$db" --since "2000-01-01T10:00:00Z" > /dev/null || fail "an ISO date and time"
"$TC" audit --db "$db" --since 2999-01-01 > "$TMP/audit.txt"
grep -q "no cache events" "$TMP/audit.txt" || fail "nothing since the future: $(cat "$TMP/audit.txt")"
expect_exit 2 "$TC" audit --db "$db" --since yesterday
grep -q "not a time" "$TMP/err" || fail "--since: $(cat "$TMP/err")"
expect_exit 2 "$TC" audit --db "$db" --since 2026-02-30
expect_exit 2 "$TC" audit --db "$db" --kind nonsense
grep -q "kinds: hit_memory" "$TMP/err" || fail "--kind: $(cat "$TMP/err")"

# Once mode: a dim only an attribute uses is a scalar argument, named as the program names it,
# with the value expected and read, and the step that recompiled.
cat > "$TMP/rows.trace" <<'T'
tracecache 1
steps 2
dim R = [4, 2]
input x : f32[8, 4] = normal(seed=1)
r = reshape(x, shape=[R, -1])
output r
T
"$TC" run "$TMP/rows.trace" --db "$db" --mode once --no-auto-dynamic -v > "$TMP/out" 2> "$TMP/err"
grep -q "step 0: traced (first call)" "$TMP/err" || fail "once step 0: $(cat "$TMP/err")"
grep -q "step 1: recompile: entry 0: scalar 0 'R': value expected 4, actual 2" "$TMP/err" || fail "once step 1: $(cat "$TMP/err")"
"$TC" audit --db "$db" --function rows.trace:step > "$TMP/audit.txt"
grep -q "recompile: step 1: entry 0: scalar 0 'R': value expected 4, actual 2" "$TMP/audit.txt" || fail "audit once: $(cat "$TMP/audit.txt")"
"$TC" run "$TMP/rows.trace" --db "$db" --mode once -v --steps 1 > /dev/null 2> "$TMP/err"
grep -q "step 0: guard entry 0 replayed" "$TMP/err" || fail "once replay: $(cat "$TMP/err")"
echo ok
