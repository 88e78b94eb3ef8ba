# `run` talks while it works (issue 36): each step's outputs are printed (and flushed) as the
# step ends, so a pipe or a file sees them before the run is over; Ctrl-C (SIGINT) or SIGTERM ends
# the run after the current step with "interrupted at step N", the summary so far, the replay
# counts written to the database, and exit 128 + the signal (130, 143). No timing assumptions:
# the signal is sent once the first step's output has appeared, however long that takes.
source "$(dirname "$0")/lib.sh"
mlp="$SRC/fixtures/programs/mlp.trace"
# Job control: a background job of a non-interactive shell inherits SIGINT ignored (and
# tracecache, like a shell, leaves an inherited ignore alone); with -m it gets the default.
set -m

# wait_for FILE PATTERN PID: until FILE has a line matching PATTERN (or PID has ended).
wait_for() {
  until grep -q "$2" "$1" 2>/dev/null; do
    kill -0 "$3" 2>/dev/null || fail "the run ended before '$2' appeared: $(cat "$1") $(cat "$TMP/long.err")"
    sleep 0.05
  done
}

# ---- SIGINT, text output: steps appear as they end; the summary and counts survive ----
db="$TMP/int.db"
"$TC" run "$mlp" --steps 2000000000 --db "$db" > "$TMP/long.out" 2> "$TMP/long.err" &
pid=$!
wait_for "$TMP/long.out" "^step 0 " "$pid"
kill -INT "$pid"
code=0
wait "$pid" || code=$?
[ "$code" -eq 130 ] || fail "SIGINT: exit $code, expected 130; stderr: $(cat "$TMP/long.err")"
grep -q "interrupted at step [0-9]* (SIGINT)" "$TMP/long.err" || fail "no 'interrupted at step N': $(cat "$TMP/long.err")"
ran=$(sed -n 's/.*: \([0-9]*\) of 2000000000 steps ran.*/\1/p' "$TMP/long.err")
[ -n "$ran" ] && [ "$ran" -ge 1 ] || fail "how many steps ran is not said: $(cat "$TMP/long.err")"
grep -q "^$ran steps (lazy mode)" "$TMP/long.out" || fail "no summary of the $ran steps: $(tail -3 "$TMP/long.out")"
grep -q "^time: first step" "$TMP/long.out" || fail "no step time summary: $(tail -3 "$TMP/long.out")"
[ "$(grep -c '^step ' "$TMP/long.out")" -eq "$ran" ] || fail "$ran steps ran, $(grep -c '^step ' "$TMP/long.out") printed"
# The replay counts reached the database: every step is a hit or the one miss.
"$TC" audit --db "$db" --json > "$TMP/audit.json"
python3 - "$TMP/audit.json" "$ran" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))["graphs"]
ran = int(sys.argv[2])
assert len(g) == 1, g
assert g[0]["misses"] == 1, g
assert g[0]["hits_memory"] + g[0]["hits_disk"] + g[0]["misses"] == ran, (g, ran)
PY
"$TC" audit --db "$db" > "$TMP/audit.txt"
grep -q "^[0-9a-f]\{16\}  *$((ran - 1)) " "$TMP/audit.txt" || fail "audit shows no $((ran - 1)) memory hits: $(cat "$TMP/audit.txt")"

# ---- SIGTERM, --json (steps on stderr with -v): one valid JSON object of the steps so far ----
"$TC" run "$mlp" --steps 2000000000 --mode once --db "$TMP/term.db" --json -v > "$TMP/long.json" 2> "$TMP/long.err" &
pid=$!
wait_for "$TMP/long.err" "step 0" "$pid"
kill -TERM "$pid"
code=0
wait "$pid" || code=$?
[ "$code" -eq 143 ] || fail "SIGTERM: exit $code, expected 143; stderr: $(tail -3 "$TMP/long.err")"
python3 - "$TMP/long.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
i = doc["interrupted"]
assert i["signal"] == "SIGTERM" and i["steps_planned"] == 2000000000, i
assert doc["steps"] >= 1 and i["at_step"] == doc["steps"] - 1, (doc["steps"], i)
assert len(doc["outputs"]) == doc["steps"] == len(doc["step_ms"]), doc["steps"]
PY

# ---- a run that is not interrupted prints no interruption and exits 0; nothing on stderr ----
"$TC" run "$mlp" --steps 3 --db "$db" > "$TMP/short.out" 2> "$TMP/short.err"
[ ! -s "$TMP/short.err" ] || fail "a piped run wrote to stderr: $(cat -v "$TMP/short.err")"
[ "$(grep -c '^step ' "$TMP/short.out")" -eq 3 ] || fail "3 steps: $(cat "$TMP/short.out")"

# ---- progress: on a terminal (stderr) when stdout is not one; never in a pipe ----
if script -qec true /dev/null > /dev/null 2>&1; then
  script -qec "'$TC' run '$mlp' --steps 5 --db '$db' > '$TMP/tty.out'" /dev/null > "$TMP/tty.err"
  grep -q "step 5/5" "$TMP/tty.err" || fail "no progress line on a terminal: $(cat -v "$TMP/tty.err")"
  grep -q $'\r' "$TMP/tty.out" && fail "progress reached stdout: $(cat -v "$TMP/tty.out")"
  [ "$(grep -c '^step ' "$TMP/tty.out")" -eq 5 ] || fail "stdout lost steps: $(cat "$TMP/tty.out")"
  # -q: nothing at all, even on a terminal.
  script -qec "'$TC' run '$mlp' --steps 5 --db '$db' -q > /dev/null" /dev/null > "$TMP/tty_quiet.err"
  [ ! -s "$TMP/tty_quiet.err" ] || fail "-q drew progress: $(cat -v "$TMP/tty_quiet.err")"
else
  echo "note: no pseudo-terminal here (script failed); the progress line is not checked"
fi
echo ok
