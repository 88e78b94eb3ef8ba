# A read-only database file: correct results (the same checksums as with a writable cache) and a
# warning, exit 0. Root ignores file modes, so as root the command runs as `nobody`.
source "$(dirname "$0")/lib.sh"
mlp="$SRC/fixtures/programs/mlp.trace"
chmod 755 "$TMP"
"$TC" run "$mlp" --steps 3 --db "$TMP/ro.db" --json > "$TMP/writable.json"
chmod 444 "$TMP/ro.db"
as_other=()
if [ "$(id -u)" -eq 0 ]; then
  chown -R root "$TMP"
  as_other=(setpriv --reuid=65534 --regid=65534 --clear-groups)
fi
"${as_other[@]}" "$TC" run "$mlp" --steps 3 --db "$TMP/ro.db" --json > "$TMP/ro.json" 2> "$TMP/ro.err" \
  || fail "read-only run failed: $(cat "$TMP/ro.err")"
grep -q "read-only" "$TMP/ro.err" || fail "no read-only warning: $(cat "$TMP/ro.err")"
python3 - "$TMP/writable.json" "$TMP/ro.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["outputs"] == b["outputs"], "read-only cache changed the results"
assert b["counters"]["cache_hits_disk"] == 1, b["counters"]  # it still serves hits
PY
echo ok
