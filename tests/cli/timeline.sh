# `--timeline FILE` on every backend (issue 14, part 6): `run` on cpu and sim, in lazy and once
# mode (and eager on cpu), writes a Chrome trace-event file that tests/cli/timeline_check.py
# parses: metadata naming the process and the host and device tracks, a step slice per step
# with args {step, mode, graph} (the graph the step ran, as `run --json` lists it), kernels inside
# steps, every flow start ("s", host) matched by one flow end ("f", device) no earlier, and on
# sim a device-memory counter track whose samples are never negative and whose largest equals
# the reported memory_peak_bytes. `zoo run --timeline` and `zoo train --timeline` write one too;
# the reference evaluator has no timeline (exit 2). No times are asserted, only their order.
source "$(dirname "$0")/lib.sh"
P="$SRC/fixtures/programs"
CHECK="$SRC/tests/cli/timeline_check.py"

for backend in cpu sim:h100; do
  for mode in lazy once; do
    expect_exit 0 "$TC" run "$P/mlp.trace" --backend "$backend" --mode "$mode" --steps 3 --no-cache \
      --json --timeline "$TMP/t.json"
    /usr/bin/python3 "$CHECK" "$TMP/t.json" --run-json "$TMP/out" --steps 3 --mode "$mode" \
      --kernels $([ "$backend" = cpu ] || echo --memory) || fail "run --backend $backend --mode $mode"
  done
done

# A batch that varies: each step's slice names the graph of its batch size.
expect_exit 0 "$TC" run "$P/matmul_varying_batch.trace" --steps 3 --no-cache --json --timeline "$TMP/t.json"
/usr/bin/python3 "$CHECK" "$TMP/t.json" --run-json "$TMP/out" --steps 3 --mode lazy --kernels ||
  fail "matmul_varying_batch"

# Eager mode on cpu: step slices with no graph, and the ops' "run" spans inside them.
expect_exit 0 "$TC" run "$P/mlp.trace" --mode eager --steps 2 --timeline "$TMP/t.json"
/usr/bin/python3 "$CHECK" "$TMP/t.json" --steps 2 --mode eager || fail "eager"

# The zoo: a forward and a training run.
expect_exit 0 "$TC" zoo run resnet18 --preset small --no-cache --timeline "$TMP/z.json"
/usr/bin/python3 "$CHECK" "$TMP/z.json" --steps 1 --mode lazy --kernels || fail "zoo run"
expect_exit 0 "$TC" zoo train resnet18 --preset small --steps 2 --mode once --backend sim:h100 --no-cache \
  --json --timeline "$TMP/z.json"
/usr/bin/python3 "$CHECK" "$TMP/z.json" --run-json "$TMP/out" --steps 2 --mode once --kernels --memory ||
  fail "zoo train"

# The summary line of sim says what is a total and what is per step.
expect_exit 0 "$TC" run "$P/mlp.trace" --backend sim:h100 --steps 2 --no-cache
grep -Eq "^sim h100: total over 2 steps [0-9.]+ us .*; per step [0-9.]+ us; peak memory [0-9]+ bytes$" "$TMP/out" ||
  fail "sim summary: $(cat "$TMP/out")"

# No timeline on the reference evaluator; an unwritable path is refused before any step runs.
expect_exit 2 "$TC" run "$P/mlp.trace" --backend reference --timeline "$TMP/t.json"
grep -q -- "--timeline needs --backend cpu or sim" "$TMP/err" || fail "reference: $(cat "$TMP/err")"
expect_exit 2 "$TC" run "$P/mlp.trace" --no-cache --timeline "$TMP/no-such-dir/t.json"
[ ! -s "$TMP/out" ] || fail "ran before checking --timeline: $(cat "$TMP/out")"
echo ok
