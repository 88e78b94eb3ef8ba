"""Checks a `tracecache --timeline` file (tests/cli/timeline.sh): a Chrome trace-event file with
step slices, kernels inside steps, matched flows and, on sim, the device-memory counter track.

usage: timeline_check.py TIMELINE.json --steps N --mode MODE [--kernels] [--memory]
                         [--run-json RUN.json]
--kernels: the file must have kernels; --memory: a device-memory counter track whose largest
sample is RUN.json's sim.memory_peak_bytes; --run-json: the `run --json` of the same run (its
graph hashes, lazy mode, must be the step slices' graphs)."""
import argparse
import json
import re
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("timeline")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--mode", required=True)
    ap.add_argument("--kernels", action="store_true")
    ap.add_argument("--memory", action="store_true")
    ap.add_argument("--run-json")
    a = ap.parse_args()
    d = json.load(open(a.timeline))
    ev = d["traceEvents"]
    assert isinstance(ev, list) and ev, "no traceEvents"
    for e in ev:
        assert e["ph"] in ("M", "X", "C", "s", "f"), e
        assert e["pid"] == 1 and e["tid"] in (0, 1, 2), e
        if e["ph"] != "M":
            assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
    meta = {(e["name"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M"}
    assert ("process_name", 0) in meta and meta[("thread_name", 1)] == "host", meta
    assert ("thread_name", 2) in meta, meta

    xs = [e for e in ev if e["ph"] == "X"]
    for e in xs:
        assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0 and e["cat"], e
    steps = sorted((e for e in xs if e["cat"] == "step"), key=lambda e: e["ts"])
    assert [e["args"]["step"] for e in steps] == list(range(a.steps)), [e.get("args") for e in steps]
    for i, e in enumerate(steps):
        assert e["tid"] == 1 and e["name"] == f"step {i}", e
        assert e["args"]["mode"] == a.mode, e
        graphs = [g for g in e["args"]["graph"].split(",") if g]
        if a.mode == "eager":
            assert graphs == [], e
        else:
            assert graphs and all(re.fullmatch(r"[0-9a-f]{32}", g) for g in graphs), e
        if i:
            prev = steps[i - 1]
            assert e["ts"] >= prev["ts"] + prev["dur"], ("steps overlap", prev, e)

    def in_a_step(e):
        return any(s["ts"] <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] for s in steps)

    kernels = [e for e in xs if e["tid"] == 2 and e["cat"] == "kernel"]
    if a.kernels:
        assert kernels, "no kernels"
    for k in kernels:
        assert in_a_step(k), ("kernel outside every step", k)
    if a.mode == "eager":
        runs = [e for e in xs if e["tid"] == 1 and e["name"] == "run"]
        assert runs and all(in_a_step(r) for r in runs), "eager: no op spans inside the steps"

    starts = {e["id"]: e for e in ev if e["ph"] == "s"}
    ends = {e["id"]: e for e in ev if e["ph"] == "f"}
    assert len(starts) == sum(e["ph"] == "s" for e in ev), "a flow id starts twice"
    assert len(ends) == sum(e["ph"] == "f" for e in ev), "a flow id ends twice"
    assert starts.keys() == ends.keys(), "unmatched flows"
    assert len(starts) >= len(kernels), (len(starts), len(kernels))
    device_starts = {e["ts"] for e in xs if e["tid"] == 2}
    for i, s in starts.items():
        f = ends[i]
        assert s["tid"] == 1 and f["tid"] == 2 and f.get("bp") == "e", (s, f)
        assert f["ts"] >= s["ts"], ("a flow ends before it starts", s, f)
        assert f["ts"] in device_starts, ("a flow ends where no device slice starts", f)

    counters = [e for e in ev if e["ph"] == "C"]
    if a.memory:
        assert counters, "no device memory counter"
        assert all(c["name"] == "device memory" and c["args"]["bytes"] >= 0 for c in counters), counters
    else:
        assert not counters, counters

    if a.run_json:
        r = json.load(open(a.run_json))
        if a.memory:
            peak = max(c["args"]["bytes"] for c in counters)
            assert peak == r["sim"]["memory_peak_bytes"], (peak, r["sim"]["memory_peak_bytes"])
        if a.mode == "lazy":
            ran = [g for e in steps for g in e["args"]["graph"].split(",")]
            assert ran == r["graph_hashes"], (ran, r["graph_hashes"])


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        sys.exit(f"timeline_check: {e}")
