# The remote tier under concurrency (issue 15): eight processes, lazy and once mode, on two local
# databases sharing one redis-server, 200 steps each, started together. Every process succeeds
# without a warning and every step's outputs equal the uncached run's; the remote ends up with
# one entry per graph (set-if-absent: concurrent writers never overwrite each other), and a
# ninth process on a new database compiles nothing. No timing is asserted.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/redis.bash"
start_redis
mlp="$SRC/fixtures/programs/mlp.trace"
"$TC" run "$mlp" --steps 200 --no-cache --json > "$TMP/lazy_want.json"
"$TC" run "$mlp" --steps 200 --no-cache --mode once --json > "$TMP/once_want.json"
pids=()
for p in $(seq 1 8); do
  mode=lazy
  [ $((p % 4)) -ge 2 ] && mode=once
  "$TC" run "$mlp" --steps 200 --mode "$mode" --db "$TMP/local$((p % 2)).db" --remote "$REMOTE" --json \
    > "$TMP/p$p.$mode.json" 2> "$TMP/p$p.err" &
  pids+=($!)
done
for p in $(seq 1 8); do
  wait "${pids[$((p - 1))]}" || fail "process $p failed: $(cat "$TMP/p$p.err")"
  ! grep -q "warning" "$TMP/p$p.err" || fail "process $p: $(cat "$TMP/p$p.err")"
done
python3 - "$TMP" <<'PY'
import glob, json, os, sys
tmp = sys.argv[1]
want = {m: json.load(open(os.path.join(tmp, f"{m}_want.json")))["outputs"] for m in ("lazy", "once")}
paths = sorted(glob.glob(os.path.join(tmp, "p*.*.json")))
assert len(paths) == 8, paths
for path in paths:
    mode = path.rsplit(".", 2)[-2]
    got = json.load(open(path))
    assert len(got["outputs"]) == 200, path
    assert got["outputs"] == want[mode], path + ": outputs differ from the uncached run"
PY
"$TC" stats --remote "$REMOTE" --json > "$TMP/stats.json"
[ "$(json_field "$TMP/stats.json" "j['executables']")" = 1 ] || fail "expected one executable: $(cat "$TMP/stats.json")"
"$TC" gc --remote "$REMOTE" --json > "$TMP/gc.json"
[ "$(json_field "$TMP/gc.json" "j['bad_values_removed'] + j['bad_guard_entries_removed']")" = 0 ] \
  || fail "concurrent writers left bad values: $(cat "$TMP/gc.json")"
"$TC" run "$mlp" --steps 2 --db "$TMP/new.db" --remote "$REMOTE" --json > "$TMP/new.json"
[ "$(json_field "$TMP/new.json" "j['counters']['compiles']")" = 0 ] || fail "a new machine compiled"
for db in "$TMP/local0.db" "$TMP/local1.db"; do
  "$TC" verify --db "$db" > /dev/null || fail "verify $db failed"
done
echo ok
