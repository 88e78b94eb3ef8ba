# Results a person reads (issue 14, part 7): `run` prints a scalar output's value and a
# classifier's top-5 classes per row (softmax probabilities; the first 8 rows of a larger batch,
# saying so), named by `--labels FILE`; `--json` has them as "value" and "top5" beside the
# checksums, which stay in both; `--quiet` prints nothing but errors (and the JSON). NumPy, from
# the outputs `--save-outputs` wrote, is the oracle for the values and the top-5.
source "$(dirname "$0")/lib.sh"
P="$SRC/fixtures/programs"
PY=/usr/bin/python3

# Text: the loss's value and each row's top-5 classes beside the checksums.
expect_exit 0 "$TC" run "$P/mlp.trace" --steps 2 --no-cache
grep -Eq "^  loss +f32\[\] +[0-9]+\.[0-9]{6}  checksum [0-9a-f]{16}$" "$TMP/out" || fail "no loss value: $(cat "$TMP/out")"
grep -Eq "^  logits +f32\[8, 10\] +checksum [0-9a-f]{16}$" "$TMP/out" || fail "no logits checksum: $(cat "$TMP/out")"
[ "$(grep -Ec "^    row [0-7] top-5: ([0-9] 0\.[0-9]{4}, ){4}[0-9] 0\.[0-9]{4}$" "$TMP/out")" = 16 ] ||
  fail "expected 8 top-5 rows per step: $(cat "$TMP/out")"

# JSON: "value" and "top5" agree with NumPy on the saved outputs.
seq 0 9 | sed 's/^/class-/' > "$TMP/labels.txt"
expect_exit 0 "$TC" run "$P/mlp.trace" --steps 2 --no-cache --json --labels "$TMP/labels.txt" --save-outputs "$TMP/saved"
"$PY" - "$TMP/out" "$TMP/saved" <<'PY'
import json, sys
import numpy as np
d, saved = json.load(open(sys.argv[1])), sys.argv[2]
for step, outputs in enumerate(d["outputs"]):
    logits, loss = outputs
    assert "value" not in logits and "top5" not in loss, outputs
    assert loss["value"] == float(np.load(f"{saved}/step{step}_loss.npy")), (loss, step)
    x = np.load(f"{saved}/step{step}_logits.npy").astype(np.float64)
    p = np.exp(x - x.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    assert len(logits["top5"]) == 8, logits["top5"]
    for row, top in enumerate(logits["top5"]):
        want = sorted(range(10), key=lambda c: (-p[row, c], c))[:5]
        assert [c["class"] for c in top] == want, (step, row, top, want)
        assert [c["label"] for c in top] == [f"class-{c}" for c in want], top
        for c in top:
            assert abs(c["probability"] - p[row, c["class"]]) < 1e-9, (c, p[row])
    assert all(len(o["checksum"]) == 16 for o in outputs)
PY

# With labels, the text names the classes; a batch larger than 8 shows its first 8 rows and says
# so; fewer than 5 classes show them all; integer scalars print as integers.
cat > "$TMP/wide.trace" <<'TRACE'
tracecache 1
steps 1
input x : f32[20, 3] = normal(seed=1)
logits = mul(x, x)
best = argmax(logits, axis=1)
first = reshape(best, shape=[20])
n = sum(first, axes=[0])
output logits, n
TRACE
expect_exit 0 "$TC" run "$TMP/wide.trace" --no-cache --labels "$TMP/labels.txt"
[ "$(grep -Ec "^    row [0-7] top-3: (class-[0-2] \([0-2]\) 0\.[0-9]{4}, ){2}class-[0-2] \([0-2]\) 0\.[0-9]{4}$" "$TMP/out")" = 8 ] ||
  fail "expected 8 labelled top-3 rows: $(cat "$TMP/out")"
grep -qx "    (the first 8 of 20 rows)" "$TMP/out" || fail "no note of the rows not shown: $(cat "$TMP/out")"
grep -Eq "^  n +i64\[\] +[0-9]+  checksum [0-9a-f]{16}$" "$TMP/out" || fail "no integer value: $(cat "$TMP/out")"

# --labels: a missing or short file is bad input, named.
expect_exit 2 "$TC" run "$P/mlp.trace" --no-cache --labels "$TMP/none.txt"
grep -q -- "--labels $TMP/none.txt: cannot read" "$TMP/err" || fail "missing labels: $(cat "$TMP/err")"
[ ! -s "$TMP/out" ] || fail "ran without its labels: $(cat "$TMP/out")"
head -4 "$TMP/labels.txt" > "$TMP/short.txt"
expect_exit 2 "$TC" run "$P/mlp.trace" --no-cache --labels "$TMP/short.txt"
grep -q -- "--labels $TMP/short.txt has 4 labels, output 'logits' (f32\[8, 10\]) has 10 classes" "$TMP/err" ||
  fail "short labels: $(cat "$TMP/err")"

# --quiet: nothing on stdout (but the JSON with --json), errors still reported.
expect_exit 0 "$TC" run "$P/mlp.trace" --no-cache --quiet
[ ! -s "$TMP/out" ] && [ ! -s "$TMP/err" ] || fail "--quiet printed: $(cat "$TMP/out" "$TMP/err")"
expect_exit 0 "$TC" run "$P/mlp.trace" --no-cache --quiet --json
"$PY" -c 'import json,sys; json.load(open(sys.argv[1]))' "$TMP/out" || fail "--quiet --json: $(cat "$TMP/out")"
expect_exit 2 "$TC" run "$P/mlp.trace" --no-cache -q --labels "$TMP/short.txt"
grep -q "has 4 labels" "$TMP/err" || fail "--quiet hid an error"

# The zoo: a classifier's top-5, labelled; zoo train prints its losses, quiet when asked.
expect_exit 0 "$TC" zoo run resnet18 --preset small --no-cache --labels "$TMP/labels.txt"
grep -Eq "^    row 0 top-5: (class-[0-9] \([0-9]\) 0\.[0-9]{4}, ){4}class-[0-9] \([0-9]\) 0\.[0-9]{4}$" "$TMP/out" ||
  fail "zoo run: $(cat "$TMP/out")"
expect_exit 0 "$TC" zoo train resnet18 --preset small --steps 2 --no-cache --quiet
[ ! -s "$TMP/out" ] || fail "zoo train --quiet printed: $(cat "$TMP/out")"
echo ok
