# The remote tier's failure behaviour against a real redis-server (issue 15): the server killed
# mid-run, a server that hangs (DEBUG SLEEP) while the run's timeout is 200 ms, a tiny
# maxmemory. Each run's outputs equal a run without any cache; the remote's failure is one
# warning and `unavailable_remote` / `skip_remote` / `store_failed_remote` events. Nothing here
# measures time: a long --remote-backoff makes "skipped after the failure" certain.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/redis.bash"
prog="$SRC/fixtures/programs/matmul_varying_batch.trace"   # B = 8, 8, 16, 16, 32, 8: three graphs
"$TC" run "$prog" --no-cache --json > "$TMP/base.json"
# one_warning FILE: stderr holds exactly one warning about the remote, and no other warning but
# lazy mode's advice about a program whose shapes vary.
one_warning() {
  [ "$(grep -c "remote cache" "$1")" = 1 ] && [ "$(grep "warning" "$1" | grep -vc "remote cache\|lazy mode compiled")" = 0 ] \
    || fail "expected one remote warning: $(cat "$1")"
}

# ---- the server killed mid-run ----
start_redis
"$TC" run "$prog" --db "$TMP/a.db" --remote "$REMOTE" --json > "$TMP/a.json"   # machine A fills the remote
# Machine B stops after its first step, writing that step's output into a FIFO nobody reads
# yet: its first graph came from the remote (the server counts the hit); then the server is
# killed, then the FIFO is read and B goes on to two graphs it has never seen.
fifo_dir="$TMP/outputs"
mkdir -p "$fifo_dir"
mkfifo "$fifo_dir/step0_y.npy"
rcli CONFIG RESETSTAT > /dev/null
"$TC" run "$prog" --db "$TMP/b.db" --remote "$REMOTE" --remote-backoff 600 --save-outputs "$fifo_dir" --json \
  > "$TMP/b.json" 2> "$TMP/b.err" &
run_pid=$!
for _ in $(seq 1 600); do
  rcli INFO stats | grep -Eq "^keyspace_hits:[1-9]" && break
  sleep 0.05
done
rcli INFO stats | grep -Eq "^keyspace_hits:[1-9]" || fail "machine B never read the remote"
stop_redis
cat "$fifo_dir/step0_y.npy" > /dev/null
wait "$run_pid" || fail "machine B failed after the server was killed: $(cat "$TMP/b.err")"
same_outputs "$TMP/base.json" "$TMP/b.json"
one_warning "$TMP/b.err"
[ "$(count_events "$TMP/b.db" unavailable_remote)" = 1 ] || fail "expected one unavailable_remote: $(events "$TMP/b.db")"
[ "$(count_events "$TMP/b.db" skip_remote)" -ge 2 ] || fail "later remote calls were not skipped: $(events "$TMP/b.db")"
[ "$(json_field "$TMP/b.json" "j['counters']['compiles']")" = 2 ] || fail "B should compile the two graphs after the kill"
[ "$(json_field "$TMP/b.json" "j['counters']['cache_hits_remote']")" = 1 ] || fail "B's first graph should be a remote hit"

# ---- a server that is gone before the run: the same, from the first lookup ----
"$TC" run "$prog" --db "$TMP/c.db" --remote "$REMOTE" --remote-backoff 600 --json > "$TMP/c.json" 2> "$TMP/c.err"
same_outputs "$TMP/base.json" "$TMP/c.json"
one_warning "$TMP/c.err"
[ "$(count_events "$TMP/c.db" unavailable_remote)" = 1 ] || fail "expected one unavailable_remote: $(events "$TMP/c.db")"
# 3 graphs: 3 lookups and 3 writes, all but the first skipped.
[ "$(count_events "$TMP/c.db" skip_remote)" = 5 ] || fail "expected 5 skip_remote: $(events "$TMP/c.db")"

# ---- a server that hangs: DEBUG SLEEP 5, the run's timeout 200 ms ----
start_redis --enable-debug-command local
"$TC" run "$prog" --db "$TMP/d.db" --remote "$REMOTE" --json > "$TMP/d.json"   # fills the remote
rcli DEBUG SLEEP 5 > /dev/null &
sleeper=$!
# Wait until the server no longer answers (the sleep has begun).
for _ in $(seq 1 100); do
  [ "$(timeout 0.3 redis-cli -s "$REDIS_SOCK" PING 2>/dev/null)" = PONG ] || break
  sleep 0.05
done
"$TC" run "$prog" --db "$TMP/e.db" --remote "$REMOTE" --remote-timeout-ms 200 --remote-backoff 600 --json \
  > "$TMP/e.json" 2> "$TMP/e.err"
same_outputs "$TMP/base.json" "$TMP/e.json"
one_warning "$TMP/e.err"
events "$TMP/e.db" unavailable_remote | grep . > /dev/null || fail "the hanging server was no unavailable_remote: $(events "$TMP/e.db")"
[ "$(count_events "$TMP/e.db" unavailable_remote)" = 1 ] || fail "the hung server was tried more than once: $(events "$TMP/e.db")"
[ "$(count_events "$TMP/e.db" skip_remote)" = 5 ] || fail "expected 5 skip_remote: $(events "$TMP/e.db")"
wait "$sleeper" || true
stop_redis

# ---- a tiny maxmemory: writes are refused, runs stay correct ----
start_redis --maxmemory 1 --maxmemory-policy noeviction
"$TC" run "$prog" --db "$TMP/f.db" --remote "$REMOTE" --json > "$TMP/f.json" 2> "$TMP/f.err"
same_outputs "$TMP/base.json" "$TMP/f.json"
[ "$(count_events "$TMP/f.db" store_failed_remote)" = 3 ] || fail "expected 3 store_failed_remote: $(events "$TMP/f.db")"
events "$TMP/f.db" store_failed_remote | grep "OOM" > /dev/null || fail "the refusal should say why: $(events "$TMP/f.db")"
[ "$(count_events "$TMP/f.db" unavailable_remote)" = 0 ] || fail "a refused write is no outage"
# With allkeys-lru the server evicts instead: still correct.
rcli CONFIG SET maxmemory-policy allkeys-lru > /dev/null
"$TC" run "$prog" --db "$TMP/g.db" --remote "$REMOTE" --json > "$TMP/g.json" 2> "$TMP/g.err"
same_outputs "$TMP/base.json" "$TMP/g.json"
echo ok
