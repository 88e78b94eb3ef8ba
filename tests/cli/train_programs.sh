# Trace programs that train (issue 12): train_mlp.trace's loss falls over 20 steps; eager, lazy
# and once give the same losses; lazy mode compiles one graph (the same key every step), once
# mode traces once, a learning rate that changes every step (a decayed param, or a scheduled
# input) recompiles nothing, and a second process with the same database runs with zero traces
# and zero compiles (`tracecache audit` agrees); PyTorch (SGD with momentum) computes the same losses and params.
source "$(dirname "$0")/lib.sh"
prog="$SRC/fixtures/programs/train_mlp.trace"

for mode in eager lazy once; do
  "$TC" run "$prog" --mode $mode --db "$TMP/$mode.db" --json --save-outputs "$TMP/out_$mode" > "$TMP/$mode.json"
done
# The same program with the learning rate as a scheduled input instead of a decayed param.
sed -e 's/^param lr : f32\[\] = full(0.2)$/input lr : f32[] = schedule([0.2, 0.15, 0.1, 0.12, 0.08])/' \
    -e '/^update lr = nlr$/d' "$prog" > "$TMP/train_mlp_schedule.trace"
grep -q '^input lr' "$TMP/train_mlp_schedule.trace" || fail "the schedule variant was not made"
for mode in lazy once; do
  "$TC" run "$TMP/train_mlp_schedule.trace" --mode $mode --db "$TMP/sched_$mode.db" --json > "$TMP/sched_$mode.json"
done
# A second process on each database.
for mode in lazy once; do
  "$TC" run "$prog" --mode $mode --db "$TMP/$mode.db" --json --save-outputs "$TMP/again_$mode" > "$TMP/again_$mode.json"
done

/usr/bin/python3 - "$TMP" <<'PY'
import json, sys
import numpy as np
tmp = sys.argv[1]
def load(name): return json.load(open(f"{tmp}/{name}.json"))
def losses(d): return [float(np.load(f"{tmp}/{d}/step{i}_loss.npy")) for i in range(20)]

eager, lazy, once = losses("out_eager"), losses("out_lazy"), losses("out_once")
# The loss falls: the last steps' mean is well below the first steps'.
first, last = np.mean(eager[:5]), np.mean(eager[-5:])
assert last < 0.6 * first, (first, last, eager)
assert all(np.isfinite(eager)), eager
# The three modes agree over (at least) 10 steps.
for name, other in (("lazy", lazy), ("once", once)):
    for s in range(10):
        assert abs(other[s] - eager[s]) <= 1e-5 * abs(eager[s]), (name, s, other[s], eager[s])

j = load("lazy")
assert len(j["graph_hashes"]) == 20 and len(set(j["graph_hashes"])) == 1, j["graph_hashes"]
assert j["counters"]["compiles"] == 1, j["counters"]
j = load("once")
c = j["counters"]
assert c["traces"] == 1 and c["compiles"] == 1 and c["recompiles"] == 0, c
assert c["guard_checks"] >= 19 and c["guard_failures"] == 0, c

# A learning rate changing every step: no new graph, no retrace.
j = load("sched_lazy")
assert len(set(j["graph_hashes"])) == 1 and j["counters"]["compiles"] == 1, j
c = load("sched_once")["counters"]
assert c["traces"] == 1 and c["compiles"] == 1 and c["recompiles"] == 0, c

# A second process with the same database: zero traces and zero compiles from the first step.
c = load("again_once")["counters"]
assert c["traces"] == 0 and c["compiles"] == 0 and c["recompiles"] == 0, c
c = load("again_lazy")["counters"]
assert c["compiles"] == 0 and c["cache_hits_disk"] >= 1, c
assert losses("again_once") == once and losses("again_lazy") == lazy
PY
# The audit shows it: one graph per database, compiled once (by the first process); in lazy mode
# the second process's first step is a disk hit and its other steps memory hits; in once mode the
# function has one guard entry, replayed by every call after the trace (19 + 20 guard hits), and
# no recompile, and the graph was compiled once and loaded once from disk.
for mode in lazy once; do
  "$TC" audit --db "$TMP/$mode.db" --json > "$TMP/audit_$mode.json"
done
/usr/bin/python3 - "$TMP" <<'PY'
import json, sys
tmp = sys.argv[1]
lazy = json.load(open(f"{tmp}/audit_lazy.json"))
assert len(lazy["graphs"]) == 1, lazy
g = lazy["graphs"][0]
assert (g["compiles"], g["misses"], g["hits_disk"], g["hits_memory"]) == (1, 1, 1, 38), g
assert [m["reason"] for m in g["recent_misses"]] == ["new graph"], g
once = json.load(open(f"{tmp}/audit_once.json"))
assert len(once["graphs"]) == 1, once
g = once["graphs"][0]
assert (g["compiles"], g["misses"], g["hits_disk"]) == (1, 1, 1), g
[f] = once["functions"]
assert f["name"] == "train_mlp.trace:step" and f["recent_recompiles"] == [], f
assert [e["hits"] for e in f["entries"]] == [39], f
PY
# A varying batch: every mode still gives the same losses (once mode retraces per batch size:
# the gradient rules read shapes).
sed 's/^dim B = 32$/dim B = [32, 16, 24, 16]/' "$prog" > "$TMP/train_mlp_batches.trace"
grep -q '^dim B = \[' "$TMP/train_mlp_batches.trace" || fail "the varying-batch variant was not made"
for mode in eager lazy once; do
  "$TC" run "$TMP/train_mlp_batches.trace" --mode $mode --no-cache --steps 6 --json --save-outputs "$TMP/batches_$mode" > "$TMP/batches_$mode.json"
done
/usr/bin/python3 - "$TMP" <<'PY'
import json, sys
import numpy as np
tmp = sys.argv[1]
def losses(mode): return [float(np.load(f"{tmp}/batches_{mode}/step{i}_loss.npy")) for i in range(6)]
eager = losses("eager")
for mode in ("lazy", "once"):
    for s, (a, b) in enumerate(zip(losses(mode), eager)):
        assert abs(a - b) <= 1e-5 * abs(b), (mode, s, a, b)
c = json.load(open(f"{tmp}/batches_once.json"))["counters"]
assert c["traces"] == 3, c  # B = 32, 16, 24
PY

# PyTorch as the oracle: the same program also outputs each step's batch and the params' values
# at the step's start (copies: an updated param cannot be an output); torch.optim.SGD with
# momentum on F.cross_entropy, its lr decayed by 0.97 per step, must give the same losses.
sed -e 's/^output loss$/c_w1 = add(w1, 0)\nc_b1 = add(b1, 0)\nc_w2 = add(w2, 0)\nc_b2 = add(b2, 0)\noutput loss, x, teacher, c_w1, c_b1, c_w2, c_b2/' \
    "$prog" > "$TMP/train_mlp_oracle.trace"
"$TC" run "$TMP/train_mlp_oracle.trace" --mode lazy --no-cache --save-outputs "$TMP/oracle" > /dev/null
/usr/bin/python3 - "$TMP/oracle" <<'PY'
import sys
import numpy as np
import torch
d = sys.argv[1]
def out(step, name): return torch.from_numpy(np.load(f"{d}/step{step}_{name}.npy"))
params = [out(0, n).clone().requires_grad_(True) for n in ("c_w1", "c_b1", "c_w2", "c_b2")]
w1, b1, w2, b2 = params
opt = torch.optim.SGD(params, lr=0.2, momentum=0.9)
teacher = out(0, "teacher")
for step in range(20):
    x = out(step, "x")
    for p, n in zip(params, ("c_w1", "c_b1", "c_w2", "c_b2")):
        assert torch.allclose(p.detach(), out(step, n), rtol=1e-4, atol=1e-5), (step, n)
    labels = torch.argmax(x @ teacher, dim=1)
    logits = torch.relu(x @ w1 + b1) @ w2 + b2
    loss = torch.nn.functional.cross_entropy(logits, labels)
    got = float(np.load(f"{d}/step{step}_loss.npy"))
    assert abs(got - loss.item()) <= 1e-4 * abs(loss.item()), (step, got, loss.item())
    opt.zero_grad()
    loss.backward()
    opt.step()
    for g in opt.param_groups: g["lr"] *= 0.97
PY
echo ok
