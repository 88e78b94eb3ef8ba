# A read-only database file: correct results (the same checksums as with a writable cache) and a
# warning, exit 0. Root ignores file modes, so as root the command runs as `nobody`; `nobody` may
# not be able to reach the checkout or $TMPDIR (root's home, a 0700 temp dir), so everything the
# read-only run touches (the binary, the program, the database) is staged in a fresh directory
# under /tmp that anyone may enter, and the test checks that `nobody` can reach it.
source "$(dirname "$0")/lib.sh"
RO=$(mktemp -d /tmp/tracecache-read-only.XXXXXX)
trap 'rm -rf "$TMP" "$RO"' EXIT
chmod 755 "$RO"
cp "$TC" "$RO/tracecache"
cp "$SRC/fixtures/programs/mlp.trace" "$RO/mlp.trace"
chmod 755 "$RO/tracecache"
chmod 644 "$RO/mlp.trace"
"$RO/tracecache" run "$RO/mlp.trace" --steps 3 --db "$RO/ro.db" --json > "$TMP/writable.json"
chmod 444 "$RO/ro.db"
as_other=()
if [ "$(id -u)" -eq 0 ]; then
  chown -R root "$RO"
  as_other=(setpriv --reuid=65534 --regid=65534 --clear-groups)
  "${as_other[@]}" test -x "$RO/tracecache" -a -r "$RO/mlp.trace" -a -r "$RO/ro.db" ||
    fail "nobody cannot reach $RO (is /tmp mode 1777?)"
  if "${as_other[@]}" test -w "$RO/ro.db"; then fail "nobody can write $RO/ro.db"; fi
fi
# Its output goes to root's $TMP through the shell's redirections, opened before dropping privileges.
"${as_other[@]}" "$RO/tracecache" run "$RO/mlp.trace" --steps 3 --db "$RO/ro.db" --json > "$TMP/ro.json" 2> "$TMP/ro.err" \
  || fail "read-only run failed: $(cat "$TMP/ro.err")"
grep -q "read-only" "$TMP/ro.err" || fail "no read-only warning: $(cat "$TMP/ro.err")"
python3 - "$TMP/writable.json" "$TMP/ro.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["outputs"] == b["outputs"], "read-only cache changed the results"
assert b["counters"]["cache_hits_disk"] == 1, b["counters"]  # it still serves hits
PY
# gc must write: on a database it can only read it is refused as bad input (exit 2), saying why.
code=0
"${as_other[@]}" "$RO/tracecache" gc --db "$RO/ro.db" --max-events 1 > "$TMP/gc.out" 2> "$TMP/gc.err" || code=$?
[ "$code" -eq 2 ] || fail "gc on a read-only database exited $code, expected 2: $(cat "$TMP/gc.err")"
grep -q "read-only" "$TMP/gc.err" || fail "gc on a read-only database does not say so: $(cat "$TMP/gc.err")"
echo ok
