# Shared helpers for the CLI tests. Each test script is called as: SCRIPT TRACECACHE_BIN SOURCE_DIR
set -euo pipefail
TC=$1
SRC=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# Never touch the user's real cache: commands without --db use this one.
export TRACECACHE_DB="$TMP/default-cache.db"
# 1 in a sanitizer build (tests/CMakeLists.txt): a script may then run a smaller case.
SANITIZED=${TRACECACHE_SANITIZED:-0}
fail() { echo "FAIL: $*" >&2; exit 1; }
# expect_exit CODE CMD...: runs CMD, captures stdout/stderr into $TMP/out and $TMP/err.
expect_exit() {
  local want=$1; shift
  local got=0
  "$@" >"$TMP/out" 2>"$TMP/err" || got=$?
  [ "$got" -eq "$want" ] || fail "'$*' exited $got, expected $want; stderr: $(cat "$TMP/err")"
}
