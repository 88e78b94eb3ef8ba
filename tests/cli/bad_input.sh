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
expect_exit 2 "$TC" run "$SRC/fixtures/programs/mlp.trace" --steps 0
expect_exit 2 "$TC" run "$SRC/fixtures/programs/mlp.trace" --no-such-flag
expect_exit 2 "$TC" frobnicate
expect_exit 2 "$TC"
printf 'tracecache 1\ninput x : f32[2] = full(1)\ny = add(x, x\noutput y\n' > "$TMP/eof.trace"
expect_exit 2 "$TC" run "$TMP/eof.trace"
grep -q "eof.trace:3:" "$TMP/err" || fail "unterminated call not located: $(cat "$TMP/err")"
: > "$TMP/empty.trace"
expect_exit 2 "$TC" run "$TMP/empty.trace"
echo ok
