# `show` prints the same hash in two processes, and another hash once one shape changes.
source "$(dirname "$0")/lib.sh"
mlp="$SRC/fixtures/programs/mlp.trace"
h1=$("$TC" show "$mlp" | tail -n 1)
h2=$("$TC" show "$mlp" | tail -n 1)
[[ "$h1" =~ ^hash\ [0-9a-f]{32}$ ]] || fail "unexpected last line: $h1"
[ "$h1" = "$h2" ] || fail "hash differs between processes: $h1 vs $h2"
sed 's/^dim B = 8$/dim B = 16/' "$mlp" > "$TMP/mlp16.trace"
grep -q '^dim B = 16$' "$TMP/mlp16.trace" || fail "fixture no longer declares 'dim B = 8'"
h3=$("$TC" show "$TMP/mlp16.trace" | tail -n 1)
[ "$h1" != "$h3" ] || fail "changing a shape did not change the hash"
# The hash does not depend on where the program lives or on comments.
{ echo "# a comment"; cat "$mlp"; } > "$TMP/copy.trace"
h4=$("$TC" show "$TMP/copy.trace" | tail -n 1)
[ "$h1" = "$h4" ] || fail "a comment changed the hash"
# --json agrees with the text output.
"$TC" show "$mlp" --json > "$TMP/show.json"
python3 - "$TMP/show.json" "${h1#hash }" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["graphs"][0]["hash"] == sys.argv[2], doc["graphs"][0]["hash"]
assert doc["graphs"][0]["nodes"] > 0
PY
echo ok
