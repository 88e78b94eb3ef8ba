# `bench`'s columns add up (issue 36): overhead is the median of each timed step's own
# (step - kernel), and kernel is what that leaves of the median step, so every row reads
# step = kernel + overhead, in the JSON and in the table.
source "$(dirname "$0")/lib.sh"
mlp="$SRC/fixtures/programs/mlp.trace"
"$TC" bench "$mlp" --steps 5 --warmup 1 --json > "$TMP/bench.json"
python3 - "$TMP/bench.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
assert {r["mode"] for r in rows} == {"eager", "lazy", "once"}, rows
for r in rows:
    assert r["overhead_us"] >= 0 and r["kernel_us"] >= 0, r
    assert abs(r["step_us"] - (r["kernel_us"] + r["overhead_us"])) < 0.001, r
PY
"$TC" bench "$mlp" --steps 5 --warmup 1 --modes lazy > "$TMP/bench.txt"
python3 - "$TMP/bench.txt" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
header = next(i for i, l in enumerate(lines) if "overhead us" in l)
step, kernel, overhead = (float(x) for x in lines[header + 1].split()[2:5])
assert abs(step - (kernel + overhead)) <= 0.15, (step, kernel, overhead)  # each printed to 0.1 us
PY
echo ok
