# Issue 10: eight processes open one NEW cache database at the same moment, twenty rounds (ten
# under the sanitizers, where each process starts several times slower).
# None may run uncached or be told the file is "not a tracecache database"; every process gets the
# same outputs. (No timing is asserted: the processes are started together and only their
# results are checked.)
source "$(dirname "$0")/lib.sh"
mlp="$SRC/fixtures/programs/mlp.trace"
"$TC" run "$mlp" --steps 2 --no-cache --json > "$TMP/want.json"
rounds=20
[ "$SANITIZED" = 1 ] && rounds=10
for round in $(seq 1 "$rounds"); do
  db="$TMP/round$round/cache.db"
  mkdir -p "$TMP/round$round"  # an explicit --db must be in an existing directory
  pids=()
  for p in $(seq 1 8); do
    "$TC" run "$mlp" --steps 2 --db "$db" --json > "$TMP/r$round.$p.json" 2> "$TMP/r$round.$p.err" &
    pids+=($!)
  done
  for p in $(seq 1 8); do
    wait "${pids[$((p - 1))]}" || fail "round $round process $p failed: $(cat "$TMP/r$round.$p.err")"
    if grep -q "warning" "$TMP/r$round.$p.err"; then
      fail "round $round process $p: $(cat "$TMP/r$round.$p.err")"
    fi
  done
  python3 - "$TMP/want.json" "$TMP"/r$round.*.json <<'PY'
import json, sys
want = json.load(open(sys.argv[1]))
for path in sys.argv[2:]:
    got = json.load(open(path))
    assert got["outputs"] == want["outputs"], path + ": outputs differ from the uncached run"
    c = got["counters"]
    assert c["cache_hits_memory"] + c["cache_hits_disk"] + c["cache_misses"] == 2, (path, c)
PY
  "$TC" verify --db "$db" > /dev/null || fail "round $round: verify failed"
done
echo ok
