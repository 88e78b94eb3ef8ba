# Issue 10: the audit log stays bounded (hits are counted, not one row each), a different sim
# device spec is a "new backend options" miss (not "evicted"), and gc trims the log.
source "$(dirname "$0")/lib.sh"
mlp="$SRC/fixtures/programs/mlp.trace"
db="$TMP/cache.db"
"$TC" run "$mlp" --steps 2000 --db "$db" > /dev/null
rows=$(sqlite3 "$db" "SELECT COUNT(*) FROM events")
[ "$rows" -le 10 ] || fail "2000 steps left $rows event rows (hits must be counted, not logged)"
"$TC" audit --db "$db" --json > "$TMP/audit.json"
python3 - "$TMP/audit.json" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))["graphs"]
assert len(g) == 1, g
assert g[0]["hits_memory"] + g[0]["hits_disk"] + g[0]["misses"] == 2000, g
assert g[0]["misses"] == 1 and g[0]["compiles"] == 1, g
PY

# Three device specs: the second and third are new options, not evictions.
sim="$TMP/sim.db"
for spec in h100 a100 tpu-v4; do "$TC" run "$mlp" --steps 2 --backend "sim:$spec" --db "$sim" > /dev/null; done
"$TC" audit --db "$sim" > "$TMP/sim_audit.txt"
if grep -q "evicted" "$TMP/sim_audit.txt"; then fail "a new device spec reported as evicted: $(cat "$TMP/sim_audit.txt")"; fi
[ "$(grep -c "new backend options" "$TMP/sim_audit.txt")" -eq 2 ] || fail "expected two 'new backend options' misses: $(cat "$TMP/sim_audit.txt")"
"$TC" ls --db "$sim" --json > "$TMP/ls.json"
python3 - "$TMP/ls.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
assert len({r["options_digest"] for r in rows}) == 3, rows
PY
"$TC" ls --db "$sim" > "$TMP/ls.txt"
grep -q "options" "$TMP/ls.txt" || fail "ls has no options digest column: $(cat "$TMP/ls.txt")"

# gc trims the audit log to --max-events (the newest kept).
before=$(sqlite3 "$sim" "SELECT COUNT(*) FROM events")
[ "$before" -gt 2 ] || fail "expected more than 2 events, got $before"
"$TC" gc --db "$sim" --max-bytes 1G --max-events 2 > /dev/null
[ "$(sqlite3 "$sim" "SELECT COUNT(*) FROM events")" -eq 2 ] || fail "gc --max-events 2 left $(sqlite3 "$sim" "SELECT COUNT(*) FROM events") rows"
"$TC" verify --db "$sim" > /dev/null || fail "verify after gc"
echo ok
