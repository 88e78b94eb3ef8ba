# `run` keeps a summary of each step (graph keys, output checksums), not its outputs: the peak
# memory of 1,000 steps of a 256 KB output is within a generous bound of that of 20 steps
# (keeping every output would add 250 MB), on cpu and on sim (whose device copies of inputs
# used to stay resident forever). No timing is measured, only peak RSS.
source "$(dirname "$0")/lib.sh"
# Under AddressSanitizer, freed memory waits in a quarantine (256 MB by default) before reuse,
# which would read as growth; a small quarantine keeps the measure about the program.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=8"
cat > "$TMP/big.trace" <<'TRACE'
tracecache 1
steps 1
input x : f32[256, 256] = normal(seed=1)
y = add(x, x)
output y
TRACE
python3 - "$TC" "$TMP" <<'PY'
import resource, subprocess, sys
tc, tmp = sys.argv[1], sys.argv[2]
def peak_kb(steps, *extra, json=True):
    # ru_maxrss of RUSAGE_CHILDREN is the largest child so far, so measure in a fresh child.
    code = (f"import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, "
            f"stdout=subprocess.DEVNULL); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    cmd = [sys.executable, "-c", code, tc, "run", f"{tmp}/big.trace", "--steps", str(steps),
           "--no-cache", *(["--json"] if json else []), *extra]
    return int(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
small, large = peak_kb(20), peak_kb(1000)
assert large - small < 64 * 1024, f"peak RSS grew {(large - small) // 1024} MB from 20 to 1000 steps"
# The same in text mode, which prints each step: its small strings used to pin freed step
# buffers inside glibc's heap (271 MB at 1000 steps) until large buffers were mmapped.
small, large = peak_kb(20, json=False), peak_kb(1000, json=False)
assert large - small < 64 * 1024, f"text mode: peak RSS grew {(large - small) // 1024} MB from 20 to 1000 steps"
# On sim, the runtime keeps device copies of recent inputs (up to about 64 before it prunes the
# ones whose host buffer is gone), so compare 200 with 1000 steps: both past that window.
for mode in ("lazy", "once"):
    extra = ["--backend", "sim:h100", "--mode", mode]
    small, large = peak_kb(200, *extra), peak_kb(1000, *extra)
    assert large - small < 64 * 1024, f"sim {mode}: peak RSS grew {(large - small) // 1024} MB from 200 to 1000 steps"
PY
# --save-outputs writes each step as it finishes: every step's file, with that step's values.
"$TC" run "$TMP/big.trace" --steps 5 --no-cache --json --save-outputs "$TMP/saved" > "$TMP/saved.json"
python3 - "$TMP" <<'PY'
import json, sys
tmp = sys.argv[1]
d = json.load(open(f"{tmp}/saved.json"))
for step in range(5):
    data = open(f"{tmp}/saved/step{step}_y.npy", "rb").read()
    assert len(data) > 256 * 1024, (step, len(data))
assert d["steps"] == 5 and len(d["outputs"]) == 5
PY
echo ok
