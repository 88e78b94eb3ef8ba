# bench/peers/train_side_by_side.py (issue 17): a one-step run of squeezenet1_1 (32 px) and
# bert_base (8 tokens) gives the tables and a JSON report of PyTorch eager and tracecache
# once-mode training steps with the ratio and FLOPs. Under the sanitizers only squeezenet1_1
# (a bert_base training step takes 6 s there, and this tests the script, not the model).
# Needs Debian's python3-torchvision under /usr/bin/python3 (scripts/setup.sh --peers).
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
"$PY" -c "import torch, torchvision" 2>/dev/null ||
  fail "python3-torch and python3-torchvision are not installed; run scripts/setup.sh --peers"
TSBS="$SRC/bench/peers/train_side_by_side.py"
# Its argument errors are checked with side_by_side.py's in peers_side_by_side.sh.
expect_exit 0 "$PY" "$TSBS" --help
tr '\n' ' ' <"$TMP/out" | grep -q "backward, SGD momentum 0.9 lr 0.01" ||
  fail "--help: $(cat "$TMP/out")"

BUILD=$(dirname "$(dirname "$TC")")
models=squeezenet1_1,bert_base
[ "$SANITIZED" = 1 ] && models=squeezenet1_1
n=$(tr ',' '\n' <<<"$models" | wc -l)
plural=$([ "$n" = 1 ] || echo s)
expect_exit 0 "$PY" "$TSBS" --build "$BUILD" --models "$models" --batches 2 \
  --threads 1 --resolution 32 --seq-len 8 --steps 1 --json "$TMP/report.json"
grep -q "^training step, batch 2, threads 1" "$TMP/out" || fail "no table: $(cat "$TMP/out")"
grep -q "^geomean tc/eager .*($n model$plural)" "$TMP/out" || fail "no geomean: $(cat "$TMP/out")"
if [ "$n" = 2 ]; then
  grep -q "^note: bert_base: attention-probability dropout removed from 12 layers" "$TMP/out" ||
    fail "no BERT dropout note: $(cat "$TMP/out")"
fi
"$PY" - "$TMP/report.json" "$models" <<'PY'
import json, math, sys
r = json.load(open(sys.argv[1]))
models = sys.argv[2].split(",")
c = r["config"]
assert r["tool"] == "bench/peers/train_side_by_side.py", r["tool"]
assert c["models"] == models and c["step"] == "training step", c
assert c["torch_systems"] == ["eager"] and (c["resolution"], c["seq_len"]) == (32, 8), c
assert c["zoo_command"] == ["train", "--optimizer", "sgd", "--momentum", "0.9", "--lr", "0.01"], c
assert r["env"]["tracecache_version"].startswith("tracecache-"), r["env"]["tracecache_version"]
(table,) = r["tables"]
assert (table["batch"], table["threads"], table["geomean_models"]) == (2, 1, len(models)), table
rows = dict(zip(models, table["rows"]))
classes = {"squeezenet1_1": 1000, "bert_base": 768}  # BERT's loss reads the pooler output
for model, row in rows.items():
    assert row["model"] == model, row
    assert row["errors"] == {}, row
    assert row["eager"]["classes"] == classes[model], (model, row["eager"])
    for system in ("eager", "tracecache"):
        assert row[system]["steps"] == 1 and row[system]["median_ms"] > 0, (system, row)
    assert "jit" not in row and "tracecache_lazy" not in row, row
    assert abs(row["ratio"] - row["tracecache"]["median_ms"] / row["eager"]["median_ms"]) < 1e-9
    assert 0 < row["tracecache_peak_fraction"] < 1, row
ratios = [row["ratio"] for row in rows.values()]
assert abs(table["geomean_ratio"] - math.prod(ratios) ** (1 / len(ratios))) < 1e-9, table
# A training step costs about 3 forwards (forward, input and weight gradients): squeezenet1_1
# at 32 px is 0.05 GFLOP for two images by the cost model; bert_base's 16 tokens through its
# 85M encoder weights 2 x 85M x 16 x 3 = 8.2 (8.6 with attention and the rest).
gflop = {"squeezenet1_1": (0.02, 0.1), "bert_base": (4, 16)}
for model, row in rows.items():
    assert gflop[model][0] < row["gflop"] < gflop[model][1], (model, row["gflop"])
PY
echo ok
