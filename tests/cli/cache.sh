# Lazy mode through the CLI with a real cache database (issue 3's acceptance checks):
# a second process compiles nothing and gives the same checksums; audit agrees with the step
# count; every blob corrupted with the sqlite3 tool still gives exit 0, the same checksums and
# `corrupt` events; a newer schema is a clear error; ls/stats/gc/verify/show HASH work.
source "$(dirname "$0")/lib.sh"
mlp="$SRC/fixtures/programs/mlp.trace"
db="$TMP/cache.db"
"$TC" run "$mlp" --steps 50 --db "$db" --json > "$TMP/first.json"
"$TC" run "$mlp" --steps 50 --db "$db" --json > "$TMP/second.json"
"$TC" audit --db "$db" --json > "$TMP/audit.json"
python3 - "$TMP/first.json" "$TMP/second.json" "$TMP/audit.json" <<'PY'
import json, sys
first, second, audit = (json.load(open(p)) for p in sys.argv[1:4])
c1, c2 = first["counters"], second["counters"]
assert c1["compiles"] == 1 and c1["cache_misses"] == 1 and c1["cache_hits_memory"] == 49, c1
assert c2["compiles"] == 0 and c2["cache_hits_disk"] == 1 and c2["cache_hits_memory"] == 49, c2
assert c1["traces"] == 50 and c2["traces"] == 50
assert first["outputs"] == second["outputs"], "checksums differ between processes"
graphs = audit["graphs"]
assert len(graphs) == 1, graphs
g = graphs[0]
assert g["hash"] == first["graph_hashes"][0]
assert g["hits_memory"] + g["hits_disk"] + g["misses"] == 100, g
assert g["compiles"] == 1 and g["misses"] == 1 and g["hits_disk"] == 1, g
assert g["recent_misses"][0]["reason"] == "new graph", g
PY

# Corrupt every blob, then run again: same results, corrupt events, a recompile.
sqlite3 "$db" "UPDATE executables SET blob = randomblob(length(blob)); UPDATE graphs SET blob = randomblob(length(blob));"
expect_exit 1 "$TC" verify --db "$db"
grep -q "BAD executables" "$TMP/out" || fail "verify did not report the bad executable: $(cat "$TMP/out")"
"$TC" run "$mlp" --steps 50 --db "$db" --json > "$TMP/third.json"
"$TC" audit --db "$db" --json > "$TMP/audit2.json"
python3 - "$TMP/first.json" "$TMP/third.json" "$TMP/audit2.json" <<'PY'
import json, sys
first, third, audit = (json.load(open(p)) for p in sys.argv[1:4])
assert third["outputs"] == first["outputs"], "corruption changed the results"
assert third["counters"]["compiles"] == 1, third["counters"]
g = audit["graphs"][0]
assert g["corrupt"] >= 1, g
assert any(m["reason"] == "corrupt" for m in g["recent_misses"]), g
PY
expect_exit 0 "$TC" verify --db "$db"

# ls, stats, show HASH, gc.
hash=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['graph_hashes'][0])" "$TMP/first.json")
expect_exit 0 "$TC" ls --db "$db"
grep -q "$hash" "$TMP/out" || fail "ls does not list $hash"
expect_exit 0 "$TC" stats --db "$db" --json
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['executables']==1 and d['hit_rate']>0.9, d" "$TMP/out"
expect_exit 0 "$TC" show "$hash" --db "$db"
grep -q "matmul" "$TMP/out" || fail "show HASH did not print the graph"
expect_exit 2 "$TC" show 0123456789abcdef0123456789abcdef --db "$db"
expect_exit 0 "$TC" gc --db "$db" --max-bytes 0
expect_exit 0 "$TC" ls --db "$db" --json
python3 -c "import json,sys; assert json.load(open(sys.argv[1])) == []" "$TMP/out"
"$TC" run "$mlp" --steps 2 --db "$db" --json > "$TMP/after_gc.json"
"$TC" audit --db "$db" --json > "$TMP/audit3.json"
python3 - "$TMP/audit3.json" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))["graphs"][0]
assert g["recent_misses"][0]["reason"] == "evicted", g
PY
expect_exit 2 "$TC" gc --db "$db" --max-bytes lots

# A database from a newer schema is a clear error, not a guess.
sqlite3 "$TMP/new.db" "PRAGMA user_version = 99; CREATE TABLE t(x);"
expect_exit 2 "$TC" run "$mlp" --steps 1 --db "$TMP/new.db"
grep -q "schema version 99, newer than this tracecache" "$TMP/err" || fail "newer schema: $(cat "$TMP/err")"
# A file that is not a database costs the cache, not the results.
echo "not a database" > "$TMP/junk.db"
expect_exit 0 "$TC" run "$mlp" --steps 2 --db "$TMP/junk.db" --json
grep -q "running without the cache" "$TMP/err" || fail "junk db: $(cat "$TMP/err")"

# Executables swapped between two graphs, checksums and all: verify and run both catch it.
swap="$TMP/swap.db"
"$TC" run "$mlp" --steps 1 --db "$swap" --json > "$TMP/swap_mlp.json"
"$TC" run "$SRC/fixtures/programs/attention.trace" --steps 1 --db "$swap" > /dev/null
sqlite3 "$swap" "CREATE TEMP TABLE s AS SELECT graph_key, blob, checksum, bytes FROM executables;
  UPDATE executables SET
    blob = (SELECT blob FROM s WHERE s.graph_key != executables.graph_key),
    checksum = (SELECT checksum FROM s WHERE s.graph_key != executables.graph_key),
    bytes = (SELECT bytes FROM s WHERE s.graph_key != executables.graph_key);"
expect_exit 1 "$TC" verify --db "$swap"
[ "$(grep -c "stored under another graph" "$TMP/out")" -eq 2 ] || fail "verify missed swapped executables: $(cat "$TMP/out")"
"$TC" run "$mlp" --steps 1 --db "$swap" --json > "$TMP/swap_mlp2.json"
python3 - "$TMP/swap_mlp.json" "$TMP/swap_mlp2.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["outputs"] == b["outputs"], "a swapped executable changed the results"
assert b["counters"]["cache_corrupt"] == 1 and b["counters"]["compiles"] == 1, b["counters"]
PY

# A row whose key columns are damaged: ls still works, verify flags the database, gc cleans it.
dmg="$TMP/damaged.db"
"$TC" run "$mlp" --steps 1 --db "$dmg" > /dev/null
"$TC" run "$SRC/fixtures/programs/attention.trace" --steps 1 --db "$dmg" > /dev/null
sqlite3 "$dmg" "UPDATE executables SET graph_key = 'not-a-key', compiler_version = -5 WHERE rowid = (SELECT MIN(rowid) FROM executables)"
expect_exit 0 "$TC" ls --db "$dmg" --json
python3 -c "import json,sys; assert len(json.load(open(sys.argv[1]))) == 1" "$TMP/out"
verify_rc=0; "$TC" verify --db "$dmg" > /dev/null 2>&1 || verify_rc=$?
[ "$verify_rc" -ne 0 ] || fail "verify passed a damaged row"
expect_exit 0 "$TC" gc --db "$dmg" --max-bytes 1G
expect_exit 0 "$TC" verify --db "$dmg"
[ "$(sqlite3 "$dmg" "SELECT COUNT(*) FROM executables")" = 1 ] || fail "gc did not remove the damaged row"

# Missing database for maintenance commands; TRACECACHE_DB is honoured.
expect_exit 2 "$TC" audit --db "$TMP/none.db"
TRACECACHE_DB="$TMP/env.db" "$TC" run "$mlp" --steps 1 > /dev/null
[ -f "$TMP/env.db" ] || fail "TRACECACHE_DB was not used"
echo ok
