# The remote cache tier against a real redis-server (issue 15): two "machines" (two processes
# with separate local databases) sharing one Redis. Machine B runs a program machine A compiled
# with zero compiles (lazy) and zero traces and compiles (once), its outputs the same as a run
# without any cache; the audit names the remote tier. Read-only mode writes nothing. Garbage and
# truncated values under our keys (executables, guard entries) are `corrupt` events and
# recompiles, never wrong outputs; gc --remote removes what fails verification; stats --remote.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/redis.bash"
start_redis
lazy_prog="$SRC/fixtures/programs/mlp.trace"
once_prog="$SRC/fixtures/programs/matmul_varying_batch.trace"
"$TC" run "$lazy_prog" --no-cache --json > "$TMP/lazy_base.json"
"$TC" run "$once_prog" --no-cache --mode once --json > "$TMP/once_base.json"

# ---- two machines, lazy: B compiles nothing ----
"$TC" run "$lazy_prog" --db "$TMP/a.db" --remote "$REMOTE" --json > "$TMP/a.json"
"$TC" run "$lazy_prog" --db "$TMP/b.db" --remote "$REMOTE" --json > "$TMP/b.json" 2> "$TMP/b.err"
same_outputs "$TMP/lazy_base.json" "$TMP/a.json"
same_outputs "$TMP/lazy_base.json" "$TMP/b.json"
[ "$(json_field "$TMP/a.json" "j['counters']['compiles']")" -ge 1 ] || fail "machine A compiled nothing"
[ "$(json_field "$TMP/b.json" "j['counters']['compiles']")" = 0 ] || fail "machine B compiled: $(cat "$TMP/b.json")"
[ "$(json_field "$TMP/b.json" "j['counters']['cache_hits_remote']")" -ge 1 ] || fail "machine B had no remote hit"
[ "$(json_field "$TMP/b.json" "j['timers_ms']['remote']['count'] > 0 and j['counters']['remote_bytes_read'] > 0")" = True ] \
  || fail "no remote latency or bytes in run --json"
[ ! -s "$TMP/b.err" ] || fail "machine B warned: $(cat "$TMP/b.err")"
[ "$(count_events "$TMP/a.db" store_remote)" -ge 1 ] || fail "machine A recorded no store_remote: $(events "$TMP/a.db")"
[ "$(count_events "$TMP/a.db" miss_remote)" -ge 1 ] || fail "machine A recorded no miss_remote"
python3 - "$TMP/b.db" <<'PY' || fail "machine B's hits are not counted as remote"
import sqlite3, sys
rows = sqlite3.connect(sys.argv[1]).execute("SELECT SUM(hits) FROM hit_counts WHERE tier = 'hit_remote'").fetchone()
assert rows[0] and rows[0] >= 1, rows
PY
# The per-step outcomes, the audit and stats name the remote tier; remote events carry the program.
[ "$(json_field "$TMP/b.json" "sum(g.get('tier') == 'remote' for s in j['steps_detail'] for g in s['graphs'])")" -ge 1 ] \
  || fail "run --json's steps_detail names no remote hit"
"$TC" audit --db "$TMP/b.db" --json > "$TMP/b_audit.json"
[ "$(json_field "$TMP/b_audit.json" "sum(g['hits_remote'] for g in j['graphs'])")" -ge 1 ] || fail "audit counts no remote hit"
[ "$(json_field "$TMP/b_audit.json" "all(g['program'].endswith('mlp.trace') for g in j['graphs'])")" = True ] \
  || fail "audit names no program for the remote hits: $(cat "$TMP/b_audit.json")"
"$TC" audit --db "$TMP/b.db" | grep -q "hits:remote" || fail "audit's table has no remote column"
"$TC" stats --db "$TMP/b.db" --json > "$TMP/b_stats.json"
[ "$(json_field "$TMP/b_stats.json" "j['hits_remote'] >= 1 and j['hit_rate'] > 0")" = True ] || fail "stats: $(cat "$TMP/b_stats.json")"
python3 - "$TMP/a.db" <<'PY' || fail "machine A's remote events lack their program"
import sqlite3, sys
rows = sqlite3.connect(sys.argv[1]).execute(
    "SELECT kind, program FROM events WHERE kind IN ('miss_remote', 'store_remote')").fetchall()
assert rows and all(p.endswith("mlp.trace") for _, p in rows), rows
PY
"$TC" run "$lazy_prog" --db "$TMP/b1.db" --remote "$REMOTE" -v > /dev/null 2> "$TMP/b1.err"
grep -q "hit (remote)" "$TMP/b1.err" || fail "run -v names no remote hit: $(cat "$TMP/b1.err")"
# The remote hit was copied into B's database: a third run on B needs no remote at all.
"$TC" run "$lazy_prog" --db "$TMP/b.db" --json > "$TMP/b2.json"
[ "$(json_field "$TMP/b2.json" "j['counters']['compiles']")" = 0 ] || fail "the remote hit was not copied locally"
same_outputs "$TMP/lazy_base.json" "$TMP/b2.json"

# ---- two machines, once: B traces and compiles nothing ($TRACECACHE_REMOTE this time) ----
TRACECACHE_REMOTE="$REMOTE" "$TC" run "$once_prog" --mode once --db "$TMP/c.db" --json > "$TMP/c.json"
TRACECACHE_REMOTE="$REMOTE" "$TC" run "$once_prog" --mode once --db "$TMP/d.db" --json > "$TMP/d.json"
same_outputs "$TMP/once_base.json" "$TMP/c.json"
same_outputs "$TMP/once_base.json" "$TMP/d.json"
[ "$(json_field "$TMP/d.json" "(j['counters']['traces'], j['counters']['compiles'])")" = "(0, 0)" ] \
  || fail "machine B traced or compiled in once mode: $(json_field "$TMP/d.json" "j['counters']")"
events "$TMP/d.db" hit_remote | grep "guard entries" > /dev/null || fail "no hit_remote for the guard entries: $(events "$TMP/d.db")"
[ "$(count_events "$TMP/c.db" store_remote)" -ge 2 ] || fail "machine A stored no guard entry remotely"
"$TC" audit --db "$TMP/d.db" --json > "$TMP/d_audit.json"
[ "$(json_field "$TMP/d_audit.json" "bool(j['graphs']) and all(g['program'].endswith('matmul_varying_batch.trace') and g['hits_remote'] >= 1 for g in j['graphs'])")" = True ] \
  || fail "once mode: the audit names no program or remote hit for graphs met through guard entries: $(cat "$TMP/d_audit.json")"

# ---- stats --remote ----
"$TC" stats --remote "$REMOTE" --json > "$TMP/stats.json"
[ "$(json_field "$TMP/stats.json" "j['executables'] >= 4 and j['graphs'] >= 4 and j['functions'] == 1")" = True ] \
  || fail "stats --remote: $(cat "$TMP/stats.json")"
executables_before=$(json_field "$TMP/stats.json" "j['executables']")

# ---- read-only mode: a new program runs correctly and writes nothing ----
conv="$SRC/fixtures/programs/convnet.trace"
"$TC" run "$conv" --no-cache --json > "$TMP/conv_base.json"
"$TC" run "$conv" --db "$TMP/e.db" --remote "$REMOTE" --remote-mode read-only --json > "$TMP/e.json"
same_outputs "$TMP/conv_base.json" "$TMP/e.json"
events "$TMP/e.db" skip_remote | grep "read-only" > /dev/null || fail "read-only mode recorded no skip_remote: $(events "$TMP/e.db")"
[ "$(count_events "$TMP/e.db" store_remote)" = 0 ] || fail "read-only mode wrote to the remote"
"$TC" stats --remote "$REMOTE" --json > "$TMP/stats2.json"
[ "$(json_field "$TMP/stats2.json" "j['executables']")" = "$executables_before" ] || fail "read-only mode added entries"

# ---- garbage and truncated values: corrupt events, recompiles, correct outputs ----
[ "$(remote_keys exe | wc -l)" -ge 2 ] || fail "expected several executables on the remote"
poison() {
  local i=0
  for k in $(remote_keys exe); do
    if [ $((i % 2)) -eq 0 ]; then
      rcli SET "$k" "garbage, not an executable" > /dev/null
    else  # truncated: the first 40 bytes of the real value
      rcli EVAL "redis.call('SET', KEYS[1], string.sub(redis.call('GET', KEYS[1]), 1, 40)) return 1" 1 "$k" > /dev/null
    fi
    i=$((i + 1))
  done
  for k in $(remote_keys fn); do
    rcli HSET "$k" 0 "garbage guard entry" > /dev/null
    rcli HSET "$k" not-a-number "x" > /dev/null
  done
}
poison
"$TC" run "$lazy_prog" --db "$TMP/f.db" --remote "$REMOTE" --json > "$TMP/f.json"
same_outputs "$TMP/lazy_base.json" "$TMP/f.json"
[ "$(count_events "$TMP/f.db" corrupt)" -ge 1 ] || fail "a poisoned executable was no corrupt event: $(events "$TMP/f.db")"
[ "$(json_field "$TMP/f.json" "j['counters']['compiles']")" -ge 1 ] || fail "a poisoned executable was not recompiled"
"$TC" run "$once_prog" --mode once --db "$TMP/g.db" --remote "$REMOTE" --json > "$TMP/g.json"
same_outputs "$TMP/once_base.json" "$TMP/g.json"
events "$TMP/g.db" corrupt | grep "guard entry" > /dev/null || fail "a poisoned guard entry was no corrupt event: $(events "$TMP/g.db")"
# The recompiled executables replaced the removed bad values: a new machine is served again.
"$TC" run "$lazy_prog" --db "$TMP/h.db" --remote "$REMOTE" --json > "$TMP/h.json"
same_outputs "$TMP/lazy_base.json" "$TMP/h.json"
[ "$(json_field "$TMP/h.json" "j['counters']['compiles']")" = 0 ] || fail "bad remote values were not replaced"

# ---- gc --remote: removes values that fail verification and keys of other versions ----
poison
rcli SET "tracecache:s0:ir0:exe:old" "an entry of an older tracecache" > /dev/null
"$TC" gc --remote "$REMOTE" --json > "$TMP/gc.json"
[ "$(json_field "$TMP/gc.json" "j['bad_values_removed'] >= 2 and j['other_versions_removed'] == 1 and j['bad_guard_entries_removed'] >= 1")" = True ] \
  || fail "gc --remote: $(cat "$TMP/gc.json")"
[ -z "$(rcli EXISTS tracecache:s0:ir0:exe:old | grep 1)" ] || fail "gc --remote kept another version's key"
"$TC" gc --remote "$REMOTE" --json > "$TMP/gc2.json"
[ "$(json_field "$TMP/gc2.json" "j['bad_values_removed'] + j['other_versions_removed'] + j['bad_guard_entries_removed']")" = 0 ] \
  || fail "a second gc --remote found more: $(cat "$TMP/gc2.json")"
# A bad URL is bad input.
expect_exit 2 "$TC" run "$lazy_prog" --db "$TMP/a.db" --remote "http://nowhere"
grep -q "redis://HOST:PORT" "$TMP/err" || fail "bad URL message: $(cat "$TMP/err")"
echo ok
