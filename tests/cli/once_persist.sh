# Trace once across processes (issue 4): a varying-batch program in --mode once records
# recompiles whose reasons name the input and the dim; run again in a new process with the same
# database it reports 0 traces and 0 compiles and the same outputs; audit lists the function's
# entries with hits and reasons; editing the program never replays the old entries.
source "$(dirname "$0")/lib.sh"
prog="$SRC/fixtures/programs/matmul_varying_batch.trace"
db="$TMP/once.db"
"$TC" run "$prog" --mode once --db "$db" --json > "$TMP/first.json"
"$TC" run "$prog" --mode once --db "$db" --json > "$TMP/second.json"
"$TC" audit --db "$db" --json > "$TMP/audit.json"
python3 - "$TMP/first.json" "$TMP/second.json" "$TMP/audit.json" <<'PY'
import json, sys
first, second, audit = (json.load(open(p)) for p in sys.argv[1:4])
assert first["counters"]["recompiles"] == 1, first["counters"]  # B = 16 makes B dynamic
assert all("input 0 'x': size of dim 0 expected 8" in r for r in first["recompile_reasons"]), first["recompile_reasons"]
c = second["counters"]
assert c["traces"] == 0 and c["compiles"] == 0 and c["recompiles"] == 0, c
assert second["outputs"] == first["outputs"]
fns = audit["functions"]
assert len(fns) == 1 and len(fns[0]["entries"]) == 2, fns
steps = len(first["outputs"]) + len(second["outputs"])
assert sum(e["hits"] for e in fns[0]["entries"]) == steps - 2, fns  # every call but the 2 traces
assert len(fns[0]["recent_recompiles"]) == 1
# The second process served B = 16 and B = 32 from the stored dynamic entry: specializations
# with no trace, their executables from the database.
assert c["shape_specializations"] == 2 and c["cache_hits_disk"] >= 2, c
PY
# Without automatic dynamism, the same database's dynamic entry is not used: each new batch
# size recompiles (B = 16, 32), as on a fresh database; the static B = 8 entry still replays.
"$TC" run "$prog" --mode once --db "$db" --no-auto-dynamic --json > "$TMP/static.json"
python3 - "$TMP/static.json" "$TMP/first.json" <<'PY'
import json, sys
static, first = (json.load(open(p)) for p in sys.argv[1:3])
c = static["counters"]
assert c["recompiles"] == 2 and c["traces"] == 2 and c.get("shape_specializations", 0) == 0, c
assert static["outputs"] == first["outputs"]
PY
# An edited program under the same file name: its own entries, never the old ones.
mkdir -p "$TMP/edit"
sed 's/^steps .*/steps 2/' "$prog" > "$TMP/edit/matmul_varying_batch.trace"
"$TC" run "$TMP/edit/matmul_varying_batch.trace" --mode once --db "$db" --json > "$TMP/edited.json"
python3 -c "import json,sys; c=json.load(open(sys.argv[1]))['counters']; assert c['traces'] >= 1, c" "$TMP/edited.json"
echo ok
