# Issue 10: clear messages for what --db points at, and hash prefixes wherever a hash is taken.
source "$(dirname "$0")/lib.sh"
mlp="$SRC/fixtures/programs/mlp.trace"

# A directory: named as such, exit 2 (not SQLite's "disk I/O error").
mkdir "$TMP/dir.db"
for cmd in "run $mlp --steps 1" audit ls stats verify; do
  expect_exit 2 timeout 20 "$TC" $cmd --db "$TMP/dir.db"
  grep -q "is a directory" "$TMP/err" || fail "$cmd on a directory: $(cat "$TMP/err")"
done

# A FIFO would block SQLite's open forever: refused before opening, exit 2.
mkfifo "$TMP/fifo.db"
for cmd in "run $mlp --steps 1" audit ls; do
  expect_exit 2 timeout 20 "$TC" $cmd --db "$TMP/fifo.db"
  grep -q "not a regular file" "$TMP/err" || fail "$cmd on a FIFO: $(cat "$TMP/err")"
done

# A file that is not a database: audit/ls/stats exit 2, "not a tracecache database".
for i in $(seq 1 100); do echo "plain text, not a database"; done > "$TMP/notes.txt"
for cmd in audit ls stats; do
  expect_exit 2 "$TC" $cmd --db "$TMP/notes.txt"
  grep -q "not a tracecache database" "$TMP/err" || fail "$cmd on a text file: $(cat "$TMP/err")"
done

# show takes the 16-digit hash audit prints (and any unique prefix), like git.
db="$TMP/cache.db"
"$TC" run "$mlp" --steps 1 --db "$db" --json > "$TMP/run.json"
full=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["graph_hashes"][0])' "$TMP/run.json")
short=$("$TC" audit --db "$db" | awk 'NR == 2 {print $1}')
[ "$short" = "${full:0:16}" ] || fail "audit's short hash '$short' is not a prefix of $full"
expect_exit 0 "$TC" show "$short" --db "$db"
grep -q "graph $full" "$TMP/out" || fail "show $short: $(cat "$TMP/out")"
expect_exit 0 "$TC" show "${full:0:6}" --db "$db"
expect_exit 2 "$TC" show "ffffffffffff" --db "$db"
grep -q "no cached graph hash starts with" "$TMP/err" || fail "unknown prefix: $(cat "$TMP/err")"
# Two stored keys sharing a prefix: ambiguous, exit 2, both listed.
sqlite3 "$db" "INSERT INTO graphs VALUES ('abcd0000000000000000000000000001', x'00', 0, 1, 1, 0);
               INSERT INTO graphs VALUES ('abcd0000000000000000000000000002', x'00', 0, 1, 1, 0);"
expect_exit 2 "$TC" show abcd --db "$db"
grep -q "ambiguous" "$TMP/err" && grep -q "abcd0000000000000000000000000002" "$TMP/err" ||
  fail "ambiguous prefix: $(cat "$TMP/err")"
echo ok
