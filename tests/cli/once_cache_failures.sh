# A guard entry whose cache rows are missing or damaged (issue 10): once mode never fails on it.
# The call is a miss with an audit event saying why, it traces again, and its outputs equal the
# first run's. Covered: the graphs table emptied, the executables table emptied, a graph blob
# corrupted (with no executable to fall back on).
source "$(dirname "$0")/lib.sh"
prog="$SRC/fixtures/programs/mlp.trace"
run_json() { "$TC" run "$prog" --mode once --db "$1" --json > "$2" || fail "run exited $? on $1: $(cat "$2")"; }
check() {  # check NAME SQL EXPECT_EVENT_KIND
  local db="$TMP/$1.db"
  run_json "$db" "$TMP/$1-first.json"
  sqlite3 "$db" "$2"
  run_json "$db" "$TMP/$1-second.json"
  sqlite3 -separator '|' "$db" "SELECT kind, detail FROM events" > "$TMP/$1-events.txt"
  run_json "$db" "$TMP/$1-third.json"
  python3 - "$TMP/$1-first.json" "$TMP/$1-second.json" "$TMP/$1-third.json" "$TMP/$1-events.txt" "$3" <<'PY'
import json, sys
first, second, third = (json.load(open(p)) for p in sys.argv[1:4])
events, want = open(sys.argv[4]).read(), sys.argv[5]
assert second["outputs"] == first["outputs"], (first["outputs"], second["outputs"])
assert third["outputs"] == first["outputs"], (first["outputs"], third["outputs"])
if want:
    assert any(line.startswith(want + "|") and "entry" in line for line in events.splitlines()), events
# The cache heals: the run after the failure replays without tracing.
assert third["counters"]["traces"] == 0, third["counters"]
PY
}
# The graph row is gone but the executable is there: served from the executable, no trace.
check graphs "DELETE FROM graphs" ""
# Both gone: the entry cannot be used; a miss event names the missing graph, the call traces.
check both "DELETE FROM graphs; DELETE FROM executables" "miss"
grep -q "is not in the cache" "$TMP/both-events.txt" || fail "no event names the missing graph: $(cat "$TMP/both-events.txt")"
# The executables emptied: the stored graph is compiled again.
check executables "DELETE FROM executables" ""
# A damaged graph blob and no executable: a corrupt event, the call traces.
check corrupt "DELETE FROM executables; UPDATE graphs SET blob = X'0011223344'" "corrupt"
echo ok
