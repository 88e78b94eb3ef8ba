# Untrusted input sizes and files (issue 10): malformed npy/safetensors files, oversized
# declared shapes and special files are bad input: exit 2 with a message naming the file, never
# a crash, a hang, an allocation of what a header claims, or exit 0 with a wrong result.
source "$(dirname "$0")/lib.sh"
BAD="$SRC/fixtures/bad_files"

# Each hand-made bad file, loaded by a trace program: exit 2, its name and its expected error.
n=0
while IFS= read -r line; do
  case "$line" in '#'*|'') continue ;; esac
  file=${line%%: *}
  want=${line#*: }
  case "$file" in
    *.npy) gen="npy(\"$BAD/$file\")" ;;
    *) gen="safetensors(\"$BAD/$file\", \"w\")" ;;
  esac
  printf 'tracecache 1\nparam w : f32[2] = %s\noutput w\n' "$gen" > "$TMP/load.trace"
  expect_exit 2 "$TC" run "$TMP/load.trace" --no-cache
  grep -qF "load.trace:2:20: $BAD/$file" "$TMP/err" || fail "$file: no location or file name in: $(cat "$TMP/err")"
  grep -qF "$want" "$TMP/err" || fail "$file: expected '$want' in: $(cat "$TMP/err")"
  n=$((n + 1))
done < "$BAD/EXPECTED"
[ "$n" -ge 8 ] || fail "expected at least 8 bad files, found $n"

# A malformed safetensors file given as zoo weights is bad input too.
expect_exit 2 "$TC" zoo emit resnet18 --weights "$BAD/st_header_too_long.safetensors"
grep -qF "st_header_too_long.safetensors: header length" "$TMP/err" || fail "$(cat "$TMP/err")"

# Declared shapes beyond the element limit: exit 2 naming file:line:col and the limit.
for f in declared_shape_overflow declared_shape_wraps; do
  expect_exit 2 "$TC" run "$SRC/fixtures/programs/bad/$f.trace" --no-cache
  grep -Eq "$f.trace:[0-9]+:15: 'x' is declared .* \(the limit is 281474976710656\)" "$TMP/err" \
    || fail "$f: $(cat "$TMP/err")"
done

# Within the limit but more than the address space: bad input too, not "internal error".
printf 'tracecache 1\ninput x : i64[281474976710656] = full(1)\noutput x\n' > "$TMP/huge.trace"
expect_exit 2 "$TC" run "$TMP/huge.trace" --no-cache
grep -qF "huge.trace:2:15: 'x' is declared i64[281474976710656]: its 2251799813685248 bytes cannot be allocated" "$TMP/err" \
  || fail "$(cat "$TMP/err")"

# An op whose output is within the element limit but larger than memory (a broadcast to 4 TiB):
# bad input in every mode, never "internal error: std::bad_alloc" or an allocator's abort.
printf 'tracecache 1\ninput x : f32[1] = full(1)\ny = broadcast_to(x, shape=[1099511627776])\noutput y\n' \
  > "$TMP/wide.trace"
for mode in eager lazy once; do
  expect_exit 2 "$TC" run "$TMP/wide.trace" --no-cache --mode "$mode"
  grep -qF "a f32[1099511627776] tensor needs 4398046511104 bytes, more than this machine's memory" "$TMP/err" \
    || fail "$mode: $(cat "$TMP/err")"
done

# Nested calls and misspelled tensor names say what to write instead.
expect_exit 2 "$TC" run "$SRC/fixtures/programs/bad/nested_call.trace"
grep -qF "write 't = neg(x)' on its own line, then 'y = relu(t)'" "$TMP/err" || fail "$(cat "$TMP/err")"
expect_exit 2 "$TC" run "$SRC/fixtures/programs/bad/safetensors_misspelled.trace"
grep -qF "(did you mean 'embedding.weight'?)" "$TMP/err" || fail "$(cat "$TMP/err")"

# A program larger than the limit is refused before it is read (a sparse file: no disk used).
truncate -s 257M "$TMP/big.trace"
expect_exit 2 "$TC" run "$TMP/big.trace" --no-cache
grep -qF "big.trace: program is 269484032 bytes; the limit is 268435456 bytes" "$TMP/err" \
  || fail "$(cat "$TMP/err")"
rm -f "$TMP/big.trace"

# Special files are refused at once instead of hanging (the timeout only bounds a regression:
# a correct build answers without reading anything).
mkfifo "$TMP/fifo.trace" "$TMP/fifo.npy"
for target in "$TMP/fifo.trace" /dev/urandom "$TMP"; do
  expect_exit 2 timeout 60 "$TC" run "$target" --no-cache
  grep -qF "$target is not a regular file" "$TMP/err" || fail "$target: $(cat "$TMP/err")"
done
for gen in "npy(\"$TMP/fifo.npy\")" 'npy("/dev/urandom")' 'safetensors("/dev/urandom", "w")'; do
  printf 'tracecache 1\nparam w : f32[2] = %s\noutput w\n' "$gen" > "$TMP/special.trace"
  expect_exit 2 timeout 60 "$TC" run "$TMP/special.trace" --no-cache
  grep -q "special.trace:2:20: .* is not a regular file" "$TMP/err" || fail "$gen: $(cat "$TMP/err")"
done
echo ok
