# Malformed programs and bad invocations: a message naming file:line:col, exit code 2, no crash.
source "$(dirname "$0")/lib.sh"
shopt -s nullglob
bad=("$SRC"/fixtures/programs/bad/*.trace)
[ ${#bad[@]} -ge 5 ] || fail "expected at least 5 bad fixtures, found ${#bad[@]}"
for f in "${bad[@]}"; do
  for cmd in run show; do
    expect_exit 2 "$TC" $cmd "$f"
    grep -Eq "$(basename "$f"):[0-9]+:[0-9]+: " "$TMP/err" || fail "$cmd $f: no file:line:col in: $(cat "$TMP/err")"
  done
done
expect_exit 2 "$TC" run "$TMP/does-not-exist.trace"
grep -q "does-not-exist.trace" "$TMP/err" || fail "missing file not named: $(cat "$TMP/err")"
expect_exit 2 "$TC" run "$SRC/fixtures/programs/mlp.trace" --no-such-flag
expect_exit 2 "$TC" frobnicate
expect_exit 2 "$TC"
printf 'tracecache 1\ninput x : f32[2] = full(1)\ny = add(x, x\noutput y\n' > "$TMP/eof.trace"
expect_exit 2 "$TC" run "$TMP/eof.trace"
grep -q "eof.trace:3:" "$TMP/err" || fail "unterminated call not located: $(cat "$TMP/err")"
: > "$TMP/empty.trace"
expect_exit 2 "$TC" run "$TMP/empty.trace"

# Bad values of options: exit 2 and a message naming the option, the value and the valid range.
P="$SRC/fixtures/programs"
expect_exit 2 "$TC" run "$P/mlp.trace" --steps 0
grep -q -- "--steps: must be a whole number in \[1, 2147483647\], got '0'" "$TMP/err" || fail "--steps 0: $(cat "$TMP/err")"
expect_exit 2 "$TC" zoo run resnet18 --preset small --batch 0 --no-cache
grep -q -- "--batch: must be a whole number in \[1, " "$TMP/err" || fail "--batch 0: $(cat "$TMP/err")"
for t in 0 -1 two; do
  expect_exit 2 "$TC" run "$P/mlp.trace" --no-cache --threads "$t"
  grep -q -- "--threads: must be a whole number in \[1, .*got '$t'" "$TMP/err" || fail "--threads $t: $(cat "$TMP/err")"
done
TRACECACHE_THREADS=0 expect_exit 2 "$TC" run "$P/mlp.trace" --no-cache
grep -q "TRACECACHE_THREADS must be a whole number in \[1, .*got '0'" "$TMP/err" || fail "TRACECACHE_THREADS=0: $(cat "$TMP/err")"

# A mistyped command is named, with the nearest command suggested.
expect_exit 2 "$TC" audti
grep -q "unknown command 'audti' (did you mean 'audit'?)" "$TMP/err" || fail "audti: $(cat "$TMP/err")"
expect_exit 2 "$TC" rn "$P/mlp.trace"
grep -q "unknown command 'rn' (did you mean 'run'?)" "$TMP/err" || fail "rn: $(cat "$TMP/err")"
expect_exit 2 "$TC" zoo lst
grep -q "unknown command 'zoo lst' (did you mean 'zoo list'?); commands: list, .*(see tracecache zoo --help)" "$TMP/err" ||
  fail "zoo lst: $(cat "$TMP/err")"

# Output paths that cannot be written are bad input, found before the first step runs (the run
# prints nothing on stdout).
: > "$TMP/a-file"
expect_exit 2 "$TC" run "$P/mlp.trace" --no-cache --save-outputs "$TMP/a-file/out"
grep -q -- "--save-outputs: cannot create directory '$TMP/a-file/out'" "$TMP/err" || fail "save-outputs: $(cat "$TMP/err")"
[ ! -s "$TMP/out" ] || fail "ran before checking --save-outputs: $(cat "$TMP/out")"
expect_exit 2 "$TC" run "$P/mlp.trace" --backend sim:h100 --no-cache --timeline "$TMP/no-such-dir/t.json"
grep -q -- "--timeline: cannot write '$TMP/no-such-dir/t.json'" "$TMP/err" || fail "timeline: $(cat "$TMP/err")"
[ ! -s "$TMP/out" ] || fail "ran before checking --timeline: $(cat "$TMP/out")"
expect_exit 2 "$TC" zoo emit resnet18 --preset small -o "$TMP/no-such-dir/r.trace"
grep -q "directory '$TMP/no-such-dir' does not exist" "$TMP/err" || fail "zoo emit -o: $(cat "$TMP/err")"

# Token ids out of the embedding's range are reported at the boundary (input, value, index,
# range), not clamped silently by the gather inside the graph.
python3 - "$TMP/ids.npy" <<'PY'
import struct, sys
ids = list(range(15)) + [1000]  # bert_base small: vocab 1000, so 1000 is one past the end
header = "{'descr': '<i8', 'fortran_order': False, 'shape': (1, 16), }"
header += " " * (63 - (10 + len(header)) % 64) + "\n"
with open(sys.argv[1], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(struct.pack("<16q", *ids))
PY
expect_exit 2 "$TC" zoo run bert_base --preset small --no-cache --input "input_ids=$TMP/ids.npy"
grep -q "input_ids=.*ids.npy: value 1000 at index \[0, 15\] is out of range: input_ids must be in \[0, 1000)" "$TMP/err" ||
  fail "token id: $(cat "$TMP/err")"
echo ok
