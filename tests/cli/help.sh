# Every command answers --help with exit code 0 and a usage line.
source "$(dirname "$0")/lib.sh"
for cmd in "" run import show audit ls stats gc verify bench zoo; do
  expect_exit 0 "$TC" $cmd --help
  grep -qi "usage" "$TMP/out" || fail "'$cmd --help' printed no usage"
done
expect_exit 0 "$TC" --version
# One version: CMake's project(VERSION) plus the format versions; compiled functions persist
# their guard entries under the same string (audit shows it).
want=$(sed -n 's/^project(tracecache VERSION \([0-9.]*\) .*/\1/p' "$SRC/CMakeLists.txt")
[ -n "$want" ] || fail "no project(VERSION) in CMakeLists.txt"
grep -Eq "^tracecache-$want/ir[0-9]+/schema[0-9]+/compiler[0-9]+/guards[0-9]+$" "$TMP/out" ||
  fail "--version '$(cat "$TMP/out")' is not tracecache-$want/ir.../schema.../compiler.../guards..."
version=$(cat "$TMP/out")
"$TC" run "$SRC/fixtures/programs/mlp.trace" --mode once --steps 1 --db "$TMP/v.db" --json > "$TMP/run.json"
python3 -c "import json, sys; assert json.load(open(sys.argv[1]))['version'] == sys.argv[2]" "$TMP/run.json" "$version" ||
  fail "run --json has another version than --version"
expect_exit 0 "$TC" audit --db "$TMP/v.db" --json
python3 - "$TMP/out" "$version" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
versions = {f["toolkit_version"] for f in d["functions"]}
assert versions == {sys.argv[2]}, (versions, sys.argv[2])
PY
echo ok
