# The sim backend from the command line (docs/sim.md): outputs equal to cpu in lazy and once
# mode; --json reports per-step host, wait, device busy/idle time and bytes copied; a spec file
# works and its errors name file:line; an executable cached for one spec is not served to
# another; a device too small falls back with a warning and reference results; --timeline
# writes a valid Chrome trace-event file with a host and a device track.
source "$(dirname "$0")/lib.sh"
P="$SRC/fixtures/programs"
for f in mlp attention lr_schedule embedding; do
  "$TC" run "$P/$f.trace" --backend cpu --no-cache --json > "$TMP/$f.cpu.json"
  for m in lazy once; do
    "$TC" run "$P/$f.trace" --backend sim:h100 --mode "$m" --no-cache --json > "$TMP/$f.sim.$m.json" ||
      fail "sim run $f.trace --mode $m exited $?"
  done
  python3 - "$TMP/$f" <<'PY' || fail "$f.trace: sim disagrees with cpu"
import json, sys
cpu = json.load(open(f"{sys.argv[1]}.cpu.json"))
for m in ("lazy", "once"):
    d = json.load(open(f"{sys.argv[1]}.sim.{m}.json"))
    assert d["outputs"] == cpu["outputs"], m
    sim = d["sim"]
    assert sim["device"] == "h100" and len(sim["options_digest"]) == 16
    assert len(sim["steps"]) == d["steps"]
    for s in sim["steps"]:
        assert s["bytes_copied"] > 0 and s["kernels"] > 0, s
        assert s["device_busy_us"] > 0 and s["host_us"] >= 0 and s["device_idle_us"] >= 0, s
        assert abs(s["step_us"] - (s["host_us"] + s["host_wait_us"])) < 1e-3, s
    assert d["counters"]["bytes_to_device"] + d["counters"]["bytes_to_host"] == sum(
        s["bytes_copied"] for s in sim["steps"]), d["counters"]
PY
done

# A spec file; the same graph cached under sim:h100 is a miss (new key) under the file's spec.
cat > "$TMP/small.spec" <<'SPEC'
# a small test device
name = small
matmul_tflops = 1
vector_tflops = 0.5
memory_gbps = 100
memory_capacity = 64M
link_gbps = 10
link_latency_ns = 500
launch_overhead_ns = 1000
SPEC
"$TC" run "$P/mlp.trace" --backend sim:h100 --steps 1 --db "$TMP/c.db" --json > "$TMP/h.json"
"$TC" run "$P/mlp.trace" --backend "sim:$TMP/small.spec" --steps 1 --db "$TMP/c.db" --json > "$TMP/s.json"
"$TC" run "$P/mlp.trace" --backend sim:h100 --steps 1 --db "$TMP/c.db" --json > "$TMP/h2.json"
python3 - "$TMP" <<'PY'
import json, sys
h, s, h2 = (json.load(open(f"{sys.argv[1]}/{n}.json")) for n in ("h", "s", "h2"))
assert h["counters"]["compiles"] == 1 and s["counters"]["compiles"] == 1, (h["counters"], s["counters"])
assert h2["counters"]["compiles"] == 0 and h2["counters"]["cache_hits_disk"] == 1, h2["counters"]
assert s["sim"]["device"] == "small" and s["sim"]["options_digest"] != h["sim"]["options_digest"]
assert s["outputs"] == h["outputs"]
PY

# Spec errors are bad input and name file:line.
printf 'name = bad\nmatmul_tflops = fast\n' > "$TMP/bad.spec"
expect_exit 2 "$TC" run "$P/mlp.trace" --backend "sim:$TMP/bad.spec" --no-cache
grep -q "bad.spec:2: matmul_tflops 'fast' must be a finite number > 0" "$TMP/err" || fail "spec error: $(cat "$TMP/err")"
expect_exit 2 "$TC" run "$P/mlp.trace" --backend sim:nope --no-cache
grep -q "neither a preset (h100, a100, tpu-v4) nor a readable file" "$TMP/err" || fail "$(cat "$TMP/err")"
expect_exit 2 "$TC" run "$P/mlp.trace" --backend sim:h100 --mode eager
expect_exit 2 "$TC" run "$P/mlp.trace" --backend reference --timeline "$TMP/t.json"

# Out of device memory: every step falls back, with a warning, to the reference evaluator.
sed 's/^memory_capacity = .*/memory_capacity = 64K/' "$TMP/small.spec" > "$TMP/tiny.spec"
expect_exit 0 "$TC" run "$P/mlp.trace" --backend "sim:$TMP/tiny.spec" --steps 2 --no-cache --json
cp "$TMP/out" "$TMP/tiny.json"
grep -q "out of memory" "$TMP/err" || fail "no out-of-memory warning: $(cat "$TMP/err")"
grep -q "ran on the reference evaluator" "$TMP/err" || fail "no fallback warning: $(cat "$TMP/err")"
"$TC" run "$P/mlp.trace" --backend reference --steps 2 --json > "$TMP/ref.json"
python3 -c "
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert a['outputs'] == b['outputs'], 'fallback results differ from the reference'
" "$TMP/tiny.json" "$TMP/ref.json"
# The same in once mode: the compiled function's runs fall back too (trace and replay).
expect_exit 0 "$TC" run "$P/mlp.trace" --backend "sim:$TMP/tiny.spec" --mode once --steps 2 --no-cache --json
grep -q "ran on the reference evaluator" "$TMP/err" || fail "no fallback warning in once mode: $(cat "$TMP/err")"
python3 -c "
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert a['outputs'] == b['outputs'], 'once-mode fallback results differ from the reference'
assert a['function']['entries'] == 1, a['function']
" "$TMP/out" "$TMP/ref.json"

# bench on sim: the summary uses the simulated step time.
expect_exit 0 "$TC" bench "$P/mlp.trace" --backend sim:h100 --modes lazy,once --steps 2 --warmup 1 --json
python3 - "$TMP/out" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["summary_step_time"] == "simulated", d["summary_step_time"]
(s,) = d["summary"]
assert s["lazy_step_us"] > 0 and s["once_step_us"] > 0 and d["geomean"]["targets"] == 1, d
PY

# --timeline: a Chrome trace-event file. The device is slower than any host (an hour per kernel
# launch and per transfer), so the host waits for it at every value read however slow the host
# runs (an ASan build, a loaded machine): the "wait for device" span follows from the model,
# not from a race with the wall clock.
sed -e 's/^name = .*/name = glacial/' -e 's/^link_latency_ns = .*/link_latency_ns = 3.6e12/' \
  -e 's/^launch_overhead_ns = .*/launch_overhead_ns = 3.6e12/' "$TMP/small.spec" > "$TMP/glacial.spec"
"$TC" run "$P/attention.trace" --backend "sim:$TMP/glacial.spec" --mode once --steps 3 --no-cache --timeline "$TMP/tl.json" > /dev/null
python3 - "$TMP/tl.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
assert isinstance(ev, list) and ev
meta = [e for e in ev if e["ph"] == "M"]
names = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
assert names[1] == "host" and names[2].startswith("device glacial"), names
assert any(e["name"] == "process_name" for e in meta)
xs = [e for e in ev if e["ph"] == "X"]
for e in xs:
    for k in ("name", "cat", "ts", "dur", "pid", "tid"):
        assert k in e, (k, e)
    assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
    assert e["pid"] == 1 and e["tid"] in (1, 2), e
host = [e for e in xs if e["tid"] == 1]
dev = [e for e in xs if e["tid"] == 2]
hn = {e["name"] for e in host}
for want in ("trace", "canonicalize_hash", "lookup", "compile", "run", "enqueue", "guard_check", "wait for device"):
    assert want in hn, (want, hn)
assert {e["cat"] for e in dev} == {"kernel", "copy"}, {e["cat"] for e in dev}
end = -1.0
for e in dev:  # ordered, non-overlapping (slack: 1 ps, or double rounding of hour-long times)
    assert e["ts"] >= end - max(1e-6, abs(end) * 1e-12), (e, end)
    end = e["ts"] + e["dur"]
assert any("flops" in e.get("args", {}) for e in dev if e["cat"] == "kernel")
PY
echo ok
