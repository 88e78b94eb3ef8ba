# Argument and input errors go through the tool's own words (issue 36): an unknown option names
# the nearest one; every out-of-range number reads the same; a hash prefix too short says so;
# control bytes from a bad program are escaped; `audit --program` with no match lists the
# programs the cache knows; an explicit --db in a missing directory is refused, not created; gc
# removes what it is told to (--max-events or --older-than alone) and says what to do with a
# damaged database; a file name longer than the system allows is cut in the message. All exit 2.
source "$(dirname "$0")/lib.sh"
mlp="$SRC/fixtures/programs/mlp.trace"
db="$TMP/cache.db"
"$TC" run "$mlp" --steps 2 --db "$db" > /dev/null

# ---- unknown options: the nearest one, in the tool's format ----
expect_exit 2 "$TC" run "$mlp" --step 5
grep -q "^tracecache: run: unknown option '--step' (did you mean '--steps'?); see tracecache run --help" "$TMP/err" \
  || fail "--step: $(cat "$TMP/err")"
expect_exit 2 "$TC" zoo train resnet18 --optimiser adam
grep -q "^tracecache: zoo train: unknown option '--optimiser' (did you mean '--optimizer'?)" "$TMP/err" \
  || fail "--optimiser: $(cat "$TMP/err")"
expect_exit 2 "$TC" audit --db "$db" --limt 3
grep -q "did you mean '--limit'" "$TMP/err" || fail "--limt: $(cat "$TMP/err")"

# ---- out-of-range values: one wording ----
for args in "run $mlp --steps 0" "gc --db $db --max-events -1" "audit --db $db --limit 0" \
            "zoo run resnet18 --batch 0" "bench $mlp --warmup -2" "run $mlp --remote-timeout-ms 0"; do
  # shellcheck disable=SC2086
  expect_exit 2 "$TC" $args
  grep -q "^tracecache: .*must be a whole number in \[[0-9]*, [0-9]*\], got '" "$TMP/err" \
    || fail "'$args': $(cat "$TMP/err")"
done

for v in 0 abc inf; do
  expect_exit 2 "$TC" run "$mlp" --no-cache --remote-backoff "$v"
  grep -q "^tracecache: run: --remote-backoff: must be a number in \[0.001, 86400\], got '$v'" "$TMP/err" \
    || fail "--remote-backoff $v: $(cat "$TMP/err")"
done

# ---- a hash prefix shorter than 4 hex digits ----
for cmd in "show abc" "diff ab $mlp" "audit --graph ab"; do
  # shellcheck disable=SC2086
  expect_exit 2 "$TC" $cmd --db "$db"
  grep -q "'a[bc]*' is too short for a graph hash prefix: give 4 to 32 hex digits" "$TMP/err" \
    || fail "'$cmd': $(cat "$TMP/err")"
done

# ---- control bytes in a bad program are escaped, never sent to the terminal ----
printf 'tracecache 1\ninput x : f32[2] = normal(seed=1)\ny = re\033[31mlu(x)\n' > "$TMP/esc.trace"
expect_exit 2 "$TC" run "$TMP/esc.trace"
if grep -q $'\033' "$TMP/err"; then fail "a raw ESC byte reached stderr: $(cat -v "$TMP/err")"; fi
grep -qF '\x1b' "$TMP/err" || fail "the ESC byte is not shown escaped: $(cat -v "$TMP/err")"

# ---- audit --program with no match lists the programs it knows ----
expect_exit 2 "$TC" audit --db "$db" --program mpl
grep -q "programs it knows: .*mlp.trace" "$TMP/err" || fail "audit --program mpl: $(cat "$TMP/err")"
expect_exit 0 "$TC" audit --db "$db" --program mlp
expect_exit 0 "$TC" audit --db "$db" --program mlp --kind corrupt  # known program, no such events

# ---- an explicit --db in a directory that does not exist ----
expect_exit 2 "$TC" run "$mlp" --steps 1 --db "$TMP/no/such/dir/cache.db"
grep -q "the directory '$TMP/no/such/dir' does not exist" "$TMP/err" || fail "--db missing dir: $(cat "$TMP/err")"
[ ! -e "$TMP/no" ] || fail "--db in a missing directory created it"
expect_exit 2 "$TC" zoo run resnet18 --preset small --db "$TMP/no/cache.db"
[ ! -e "$TMP/no" ] || fail "zoo run --db in a missing directory created it"

# ---- gc: --max-events or --older-than alone; nothing to do is an error ----
expect_exit 0 "$TC" gc --db "$db" --max-events 1
[ "$(sqlite3 "$db" "SELECT COUNT(*) FROM events")" -le 1 ] || fail "gc --max-events 1 kept more"
[ "$(sqlite3 "$db" "SELECT COUNT(*) FROM executables")" -eq 1 ] || fail "gc --max-events evicted executables"
grep -q "executables evicted" "$TMP/out" && fail "gc without --max-bytes reports no eviction: $(cat "$TMP/out")"
grep -q "audit events, .* removed" "$TMP/out" || fail "gc --max-events says what it trimmed: $(cat "$TMP/out")"
expect_exit 0 "$TC" gc --db "$db" --older-than 30d
expect_exit 2 "$TC" gc --db "$db"
grep -q "gc needs what to remove" "$TMP/err" || fail "gc alone: $(cat "$TMP/err")"

# ---- gc on a damaged database: exit 2 and what to do ----
head -c 4096 /dev/urandom > "$TMP/garbage.db"
expect_exit 2 "$TC" gc --db "$TMP/garbage.db" --max-events 10
grep -q "tracecache verify" "$TMP/err" || fail "gc on garbage does not say what to do: $(cat "$TMP/err")"

# ---- a parameter file whose name exceeds the system's limit: exit 2, the name cut ----
long=$(head -c 300000 /dev/zero | tr '\0' 'a')
printf 'tracecache 1\nparam w : f32[2] = npy("%s.npy")\ny = relu(w)\noutput y\n' "$long" > "$TMP/long.trace"
expect_exit 2 "$TC" run "$TMP/long.trace"
[ "$(wc -c < "$TMP/err")" -lt 2000 ] || fail "the long name was echoed: $(wc -c < "$TMP/err") bytes"
grep -q "longer than the system allows" "$TMP/err" || fail "long name: $(head -c 500 "$TMP/err")"
echo ok
