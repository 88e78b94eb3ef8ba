# `run --json` is one valid JSON object with steps, outputs (name, shape, dtype, checksum per
# step and output) and graph_hashes; --save-outputs writes one .npy per output per step.
source "$(dirname "$0")/lib.sh"
mlp="$SRC/fixtures/programs/mlp.trace"
"$TC" run "$mlp" --steps 4 --json --save-outputs "$TMP/out" > "$TMP/run.json"
"$TC" run "$mlp" --steps 4 --json > "$TMP/run2.json"
python3 - "$TMP/run.json" "$TMP/run2.json" "$TMP/out" <<'PY'
import json, os, re, sys
doc = json.load(open(sys.argv[1]))
again = json.load(open(sys.argv[2]))
assert doc["steps"] == 4, doc["steps"]
assert len(doc["outputs"]) == 4 and len(doc["graph_hashes"]) == 4
for step in doc["outputs"]:
    assert [o["name"] for o in step] == ["logits", "loss"], step
    for o in step:
        assert re.fullmatch(r"[0-9a-f]{16}", o["checksum"]), o
        assert o["dtype"] == "f32"
    assert step[0]["shape"] == [8, 10] and step[1]["shape"] == []
assert all(re.fullmatch(r"[0-9a-f]{32}", h) for h in doc["graph_hashes"])
assert len(set(doc["graph_hashes"])) == 1, "fixed shapes: one graph for every step"
assert doc["outputs"] == again["outputs"], "outputs differ between two runs"
# inputs are regenerated per step, so the steps' logits differ
assert len({s[0]["checksum"] for s in doc["outputs"]}) == 4
files = sorted(os.listdir(sys.argv[3]))
assert len(files) == 8 and "step0_logits.npy" in files, files
for f in files:
    with open(os.path.join(sys.argv[3], f), "rb") as fh:
        assert fh.read(6) == b"\x93NUMPY", f
PY
# A program path that is not valid UTF-8 still gives valid JSON.
cp "$mlp" "$TMP/"$'bad\xffname.trace'
"$TC" run "$TMP/"$'bad\xffname.trace' --steps 1 --json > "$TMP/utf8.json"
python3 -c "import json,sys; d=json.load(open(sys.argv[1], encoding='utf-8')); assert '\ufffd' in d['program'], d['program']" "$TMP/utf8.json"

# A varying batch size gives one graph per distinct shape.
"$TC" run "$SRC/fixtures/programs/matmul_varying_batch.trace" --json > "$TMP/vary.json"
python3 - "$TMP/vary.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
batches = [s[0]["shape"][0] for s in doc["outputs"]]
assert len(set(batches)) > 1, batches
by_batch = {}
for b, h in zip(batches, doc["graph_hashes"]):
    by_batch.setdefault(b, set()).add(h)
assert all(len(v) == 1 for v in by_batch.values()), by_batch
assert len({next(iter(v)) for v in by_batch.values()}) == len(by_batch)
PY
echo ok
