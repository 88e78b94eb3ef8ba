# Helpers for the remote tier's CLI tests (tests/cli/remote*.sh), sourced after lib.sh: a private
# redis-server on a unix socket in the test's temporary directory (no TCP port, no persistence),
# stopped by the EXIT trap even when the test fails.
command -v redis-server >/dev/null || fail "redis-server is not installed (scripts/setup.sh installs it)"
command -v redis-cli >/dev/null || fail "redis-cli is not installed (scripts/setup.sh installs it)"
REDIS_DIR="$TMP/redis"
REDIS_SOCK="$REDIS_DIR/redis.sock"
REDIS_PID=
REMOTE="unix://$REDIS_SOCK"
stop_redis() {
  if [ -n "$REDIS_PID" ]; then
    kill -9 "$REDIS_PID" 2>/dev/null || true
    REDIS_PID=
  fi
}
trap 'stop_redis; rm -rf "$TMP"' EXIT
# start_redis [EXTRA redis-server ARGS...]
start_redis() {
  mkdir -p "$REDIS_DIR"
  rm -f "$REDIS_DIR/redis.pid" "$REDIS_SOCK"
  redis-server --port 0 --unixsocket "$REDIS_SOCK" --unixsocketperm 700 --save '' --appendonly no \
    --dir "$REDIS_DIR" --daemonize yes --pidfile "$REDIS_DIR/redis.pid" --logfile "$REDIS_DIR/redis.log" "$@"
  for _ in $(seq 1 200); do
    if [ -s "$REDIS_DIR/redis.pid" ] && [ "$(rcli PING 2>/dev/null)" = PONG ]; then
      REDIS_PID=$(cat "$REDIS_DIR/redis.pid")
      return 0
    fi
    sleep 0.05
  done
  fail "redis-server did not start: $(cat "$REDIS_DIR/redis.log" 2>/dev/null)"
}
rcli() { redis-cli -s "$REDIS_SOCK" "$@"; }
# The remote's keys of one kind (exe, graph, fn), one a line.
remote_keys() { rcli --scan --pattern "tracecache:*:$1:*"; }
# events DB [KIND...]: the events of a local database, "kind|reason|detail" a line.
events() {
  local db=$1; shift
  python3 - "$db" "$@" <<'PY'
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
kinds = sys.argv[2:]
for kind, reason, detail in con.execute("SELECT kind, reason, detail FROM events ORDER BY id"):
    if not kinds or kind in kinds:
        print(f"{kind}|{reason}|{detail}")
PY
}
# count_events DB KIND: how many events of that kind.
count_events() { events "$1" "$2" | wc -l | tr -d ' '; }
# json_field FILE EXPR: a Python expression over the JSON object `j`.
json_field() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"; }
# same_outputs A.json B.json: fail unless both runs' outputs (checksums) are equal.
same_outputs() {
  python3 - "$1" "$2" <<'PY' || fail "outputs of $1 and $2 differ"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["outputs"] == b["outputs"], (a["outputs"], b["outputs"])
PY
}
