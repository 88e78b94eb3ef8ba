# --threads (and TRACECACHE_THREADS) set the cpu backend's threads (OpenBLAS and the kernels'
# loops); results do not depend on them: 1 and 2 threads give the same checksums, in every mode.
# Invalid values are bad input (tests/cli/bad_input.sh).
source "$(dirname "$0")/lib.sh"
P="$SRC/fixtures/programs"
for f in mlp attention; do
  for m in eager lazy once; do
    for t in 1 2; do
      "$TC" run "$P/$f.trace" --mode "$m" --no-cache --threads "$t" --json > "$TMP/$f.$m.$t.json" ||
        fail "$f.trace --mode $m --threads $t exited $?"
    done
    TRACECACHE_THREADS=2 "$TC" run "$P/$f.trace" --mode "$m" --no-cache --json > "$TMP/$f.$m.env.json" ||
      fail "$f.trace --mode $m with TRACECACHE_THREADS=2 exited $?"
    python3 - "$TMP/$f.$m" <<'PY' || fail "$f.trace --mode $m: checksums depend on the thread count"
import json, sys
a, b, e = (json.load(open(f"{sys.argv[1]}.{n}.json")) for n in ("1", "2", "env"))
assert a["outputs"] == b["outputs"] == e["outputs"]
assert a["outputs"] and all(o["checksum"] for step in a["outputs"] for o in step)
PY
  done
done
"$TC" zoo run resnet18 --preset small --no-cache --threads 1 --json > "$TMP/z1.json"
"$TC" zoo run resnet18 --preset small --no-cache --threads 2 --json > "$TMP/z2.json"
python3 -c "
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a['outputs'] == b['outputs'], 'zoo run checksums depend on the thread count'
" "$TMP/z1.json" "$TMP/z2.json"
echo ok
