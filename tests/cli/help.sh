# Every command answers --help with exit code 0 and a usage line.
source "$(dirname "$0")/lib.sh"
# The commands as the top-level help lists them (so a new one cannot be missed), and zoo's.
expect_exit 0 "$TC" --help
commands=$(sed -n '/^Subcommands:/,$s/^  \([a-z][a-z-]*\) .*/\1/p' "$TMP/out")
for c in run import show diff audit report zoo; do
  grep -qx "$c" <<< "$commands" || fail "'tracecache --help' does not list '$c'"
done
expect_exit 0 "$TC" zoo --help
zoo_commands=$(sed -n '/^Subcommands:/,$s/^  \([a-z][a-z-]*\) .*/zoo \1/p' "$TMP/out")
[ -n "$zoo_commands" ] || fail "'tracecache zoo --help' lists no subcommands"
while read -r cmd; do
  expect_exit 0 "$TC" $cmd --help
  grep -qi "usage" "$TMP/out" || fail "'$cmd --help' printed no usage"
done <<< "$commands
$zoo_commands"
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
