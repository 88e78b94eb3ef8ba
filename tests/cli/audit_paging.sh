# `audit` stays bounded (issue 36): 50 graph rows by default, the most recently used, and a line
# saying how many were left out and how to see them (--limit N, --all); a long miss detail is cut
# (text and --json) unless --full-details; --json says graphs_total and graphs_left_out.
source "$(dirname "$0")/lib.sh"
mlp="$SRC/fixtures/programs/mlp.trace"
db="$TMP/cache.db"
"$TC" run "$mlp" --steps 2 --db "$db" > /dev/null
# 120 more graphs: copies of the run's miss under other keys, newer than it; the newest carries
# a 100 kB detail.
sqlite3 "$db" "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 120)
  INSERT INTO events (time, pid, kind, graph_key, backend, reason, duration_ms, detail, program)
  SELECT e.time + n.i, e.pid, 'miss', printf('%032x', n.i), e.backend, e.reason, 1.0,
         CASE WHEN n.i = 120 THEN 'closest ' || hex(zeroblob(50000)) ELSE 'small detail' END, e.program
  FROM n, (SELECT * FROM events WHERE kind = 'miss' LIMIT 1) e"
[ "$(sqlite3 "$db" "SELECT COUNT(DISTINCT graph_key) FROM events")" -eq 121 ] || fail "setup: not 121 graphs"

"$TC" audit --db "$db" > "$TMP/default.txt"
[ "$(grep -c '^[0-9a-f]\{16\}  ' "$TMP/default.txt")" -eq 50 ] || fail "default: not 50 rows: $(head -5 "$TMP/default.txt")"
grep -q "^(50 of 121 graphs shown, the most recently used; 71 more with --limit 121, or --all)$" "$TMP/default.txt" \
  || fail "default: no left-out line: $(tail -2 "$TMP/default.txt")"
grep -q "^0000000000000000  " "$TMP/default.txt" || fail "an inserted graph (the newest) is not first"
# The 100 kB detail is cut, and the output says how to see it whole.
[ "$(wc -L < "$TMP/default.txt")" -lt 1000 ] || fail "a line of $(wc -L < "$TMP/default.txt") bytes"
grep -q "(cut at 400 bytes; all of it: --full-details)" "$TMP/default.txt" || fail "the cut is not said"

"$TC" audit --db "$db" --limit 3 > "$TMP/three.txt"
[ "$(grep -c '^[0-9a-f]\{16\}  ' "$TMP/three.txt")" -eq 3 ] || fail "--limit 3: $(cat "$TMP/three.txt")"
grep -q "118 more with --limit 121, or --all" "$TMP/three.txt" || fail "--limit 3: $(tail -1 "$TMP/three.txt")"
"$TC" audit --db "$db" --all > "$TMP/all.txt"
[ "$(grep -c '^[0-9a-f]\{16\}  ' "$TMP/all.txt")" -eq 121 ] || fail "--all: not 121 rows"
if grep -q "graphs shown" "$TMP/all.txt"; then fail "--all says rows were left out"; fi
expect_exit 2 "$TC" audit --db "$db" --all --limit 3

"$TC" audit --db "$db" --json > "$TMP/page.json"
"$TC" audit --db "$db" --json --all --full-details > "$TMP/full.json"
python3 - "$TMP/page.json" "$TMP/full.json" <<'PY'
import json, sys
page, full = (json.load(open(p)) for p in sys.argv[1:3])
assert len(page["graphs"]) == 50 and page["graphs_total"] == 121 and page["graphs_left_out"] == 71, page["graphs_total"]
assert len(full["graphs"]) == 121 and full["graphs_left_out"] == 0
cut = page["graphs"][0]["recent_misses"][0]
assert cut["detail_cut"] is True and len(cut["detail"].encode()) <= 400, cut
whole = full["graphs"][0]["recent_misses"][0]
assert "detail_cut" not in whole and len(whole["detail"]) == len("closest ") + 100000, len(whole["detail"])
assert whole["detail"].startswith(cut["detail"])
small = page["graphs"][1]["recent_misses"][0]
assert small["detail"] == "small detail" and "detail_cut" not in small, small
PY
echo ok
