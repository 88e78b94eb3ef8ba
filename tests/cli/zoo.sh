# The model zoo from the command line: `zoo list` (text and JSON), every small model run in
# eager, lazy and once mode with equal checksums, `zoo emit` output run by `tracecache run` with
# the checksums of `zoo run`, weights saved and loaded by name, bench on zoo names, and clear
# errors with exit code 2 for bad names, options and weight files.
source "$(dirname "$0")/lib.sh"
models="resnet18 resnet50 resnext50_32x4d alexnet mobilenet_v2 mnasnet1_0 squeezenet1_1 vgg16 vit_b_16 bert_base"

for sub in "" list emit run; do
  expect_exit 0 "$TC" zoo $sub --help
  grep -qi "usage" "$TMP/out" || fail "'zoo $sub --help' printed no usage"
done

expect_exit 0 "$TC" zoo list
for m in $models; do grep -Eq "^$m +[0-9,]+ " "$TMP/out" || fail "zoo list misses $m: $(cat "$TMP/out")"; done
grep -Eq "^resnet50 +25,557,032 +image f32\[1, 3, 224, 224\]$" "$TMP/out" || fail "resnet50 row: $(cat "$TMP/out")"
expect_exit 0 "$TC" zoo list --json
python3 - "$TMP/out" <<'PY'
import json, sys
d = {m["name"]: m for m in json.load(open(sys.argv[1]))}
assert len(d) == 10, list(d)
assert d["bert_base"]["parameters"] == 109482240 and d["bert_base"]["kind"] == "text"
assert [i["name"] for i in d["bert_base"]["inputs"]] == ["input_ids", "token_type_ids", "attention_mask"]
assert d["vgg16"]["parameters"] == 138357544 and d["vgg16"]["inputs"][0]["shape"] == [1, 3, 224, 224]
assert d["vit_b_16"]["outputs"] == ["logits"]
PY

# Every small model: eager, lazy and once agree; the emitted program runs to the same checksums.
checksums() {
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" ".join(o["name"]+":"+o["checksum"] for s in d["outputs"] for o in s))' "$1"
}
for m in $models; do
  for mode in eager lazy once; do
    expect_exit 0 "$TC" zoo run "$m" --preset small --mode "$mode" --json --db "$TMP/zoo.db"
    checksums "$TMP/out" > "$TMP/$m.$mode"
  done
  [ -s "$TMP/$m.eager" ] || fail "$m: no outputs"
  cmp -s "$TMP/$m.eager" "$TMP/$m.lazy" || fail "$m: eager $(cat "$TMP/$m.eager") != lazy $(cat "$TMP/$m.lazy")"
  cmp -s "$TMP/$m.eager" "$TMP/$m.once" || fail "$m: eager $(cat "$TMP/$m.eager") != once $(cat "$TMP/$m.once")"
  expect_exit 0 "$TC" zoo emit "$m" --preset small -o "$TMP/$m.trace"
  head -1 "$TMP/$m.trace" | grep -q "^# $m: " || fail "$m.trace has no header comment"
  expect_exit 0 "$TC" run "$TMP/$m.trace" --json --db "$TMP/zoo.db"
  checksums "$TMP/out" > "$TMP/$m.emitted"
  cmp -s "$TMP/$m.eager" "$TMP/$m.emitted" || fail "$m: emitted program gives $(cat "$TMP/$m.emitted"), zoo run $(cat "$TMP/$m.eager")"
done
grep -q "^output last_hidden_state, pooler_output$" "$TMP/bert_base.trace" || fail "bert outputs not named"

# Text output: checksums and step times.
expect_exit 0 "$TC" zoo run squeezenet1_1 --preset small --steps 2 --no-cache
grep -Eq "^  logits +f32\[1, 10\] +checksum [0-9a-f]{16}$" "$TMP/out" || fail "no checksum line: $(cat "$TMP/out")"
grep -Eq "^time: first step [0-9.]+ ms, later steps median [0-9.]+ ms" "$TMP/out" || fail "no time line: $(cat "$TMP/out")"

# Options change the program: batch and resolution reach the input declaration.
expect_exit 0 "$TC" zoo emit resnet18 --preset small --batch 2 --resolution 64
grep -q "^input image : f32\[2, 3, 64, 64\] = normal(seed=1" "$TMP/out" || fail "batch/resolution ignored"
expect_exit 0 "$TC" zoo emit bert_base --preset small --seq-len 8
grep -q "^input input_ids : i64\[1, 8\] = uniform(" "$TMP/out" || fail "--seq-len ignored"

# Weights: the saved initial weights, loaded by name, give the seeded checksums; the program
# refers to the file relative to itself.
mkdir -p "$TMP/prog" "$TMP/w"
expect_exit 0 "$TC" zoo emit mobilenet_v2 --preset small --save-weights "$TMP/w/mnv2.safetensors" -o "$TMP/prog/plain.trace"
expect_exit 0 "$TC" zoo emit mobilenet_v2 --preset small --weights "$TMP/w/mnv2.safetensors" -o "$TMP/prog/loaded.trace"
grep -q 'safetensors("../w/mnv2.safetensors", "features.0.0.weight")' "$TMP/prog/loaded.trace" ||
  fail "no relative safetensors reference: $(grep -m1 safetensors "$TMP/prog/loaded.trace")"
expect_exit 0 "$TC" run "$TMP/prog/loaded.trace" --json --no-cache
checksums "$TMP/out" > "$TMP/loaded"
cmp -s "$TMP/loaded" "$TMP/mobilenet_v2.eager" || fail "loaded weights give $(cat "$TMP/loaded"), seeded $(cat "$TMP/mobilenet_v2.eager")"
expect_exit 0 "$TC" zoo run mobilenet_v2 --preset small --weights "$TMP/w/mnv2.safetensors" --json --no-cache
checksums "$TMP/out" > "$TMP/loaded_run"
cmp -s "$TMP/loaded_run" "$TMP/mobilenet_v2.eager" || fail "zoo run --weights differs"

# Weights of another model: one error naming the tensors, exit 2.
expect_exit 2 "$TC" zoo run resnet18 --preset small --weights "$TMP/w/mnv2.safetensors"
grep -q "the weights do not fit resnet18 (small preset): .* missing: conv1.weight;" "$TMP/err" || fail "no missing list: $(cat "$TMP/err")"
grep -q "unexpected: " "$TMP/err" || fail "no unexpected list: $(cat "$TMP/err")"
expect_exit 2 "$TC" zoo run resnet18 --weights "$TMP/none.safetensors"
grep -q "none.safetensors: no such file" "$TMP/err" || fail "missing file not named: $(cat "$TMP/err")"
printf 'not a safetensors file' > "$TMP/bad.safetensors"
expect_exit 2 "$TC" zoo emit resnet18 --weights "$TMP/bad.safetensors"
grep -q "bad.safetensors: header length" "$TMP/err" || fail "corrupt file not explained: $(cat "$TMP/err")"

# Bad names and options.
expect_exit 2 "$TC" zoo run resnet19
grep -q "no model 'resnet19' in the zoo (available: resnet18," "$TMP/err" || fail "$(cat "$TMP/err")"
expect_exit 2 "$TC" zoo emit resnet18 --preset tiny
grep -q "unknown preset 'tiny' (available: default, small)" "$TMP/err" || fail "$(cat "$TMP/err")"
expect_exit 2 "$TC" zoo emit alexnet --resolution 32
grep -q "alexnet: resolution must be >= 63, got 32" "$TMP/err" || fail "$(cat "$TMP/err")"
expect_exit 2 "$TC" zoo emit vgg16 --seq-len 12
grep -q "vgg16 is an image model" "$TMP/err" || fail "$(cat "$TMP/err")"
expect_exit 2 "$TC" zoo emit bert_base --batch -1
expect_exit 2 "$TC" zoo run resnet18 --mode fast
expect_exit 2 "$TC" zoo run
expect_exit 2 "$TC" zoo frobnicate
expect_exit 2 "$TC" zoo

# bench takes zoo names next to trace programs, and says what it is running.
expect_exit 0 "$TC" bench squeezenet1_1 "$SRC/fixtures/programs/mlp.trace" --preset small --modes eager,lazy --steps 2 --warmup 1
grep -Eq "^squeezenet1_1:small +eager " "$TMP/out" || fail "no zoo row: $(cat "$TMP/out")"
grep -Eq "^mlp.trace +lazy " "$TMP/out" || fail "no program row: $(cat "$TMP/out")"
grep -q "bench: squeezenet1_1:small lazy" "$TMP/err" || fail "no progress line: $(cat "$TMP/err")"
expect_exit 2 "$TC" bench resnet19
grep -q "a bench target is a trace program or a zoo model" "$TMP/err" || fail "$(cat "$TMP/err")"
echo ok
