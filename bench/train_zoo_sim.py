#!/usr/bin/env python3
"""Trace once vs trace every step, in training mode, over the model zoo on a simulated device.

The training counterpart of the inference experiment (`tracecache bench ZOO... --backend sim:h100
--modes lazy,once`, tables by bench/zoo_table.py): for each model, runs

    tracecache zoo train MODEL --preset PRESET --mode {lazy,once} --backend sim:h100 \\
        --optimizer sgd --momentum 0.9 --lr 0.01 --steps WARMUP+STEPS --no-cache --json

and reads the `sim` object of each run (one interval per step: simulated `step_us`, measured
`host_us`, simulated device busy/idle, kernels; the run's `memory_peak_bytes`). Step 0 is the trace
(once) or the trace + compile (lazy); the first WARMUP steps are left out and every figure is the
median over the STEPS after them, as `tracecache bench` does. Both modes must give bitwise the same
loss at every step (the values and checksums of the `loss` output); if they do not, the script
says which model and step and exits 1 after the table.

    bench/train_zoo_sim.py                                  # every model, small preset, a Markdown table
    bench/train_zoo_sim.py --full resnet18,alexnet --json   # those two also at full size, JSON on stdout
    bench/train_zoo_sim.py --table small.json full.json      # table from saved JSON (rows merged)

Progress goes to stderr. Times are microseconds in the JSON; the table prints step times in ms,
host time in us. Peak memory is the run's peak, which includes step 0: a once-mode trace holds one
more copy of the updated params than the replays after it (docs/trace-once.md, *Donation*).
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

MODELS = ["resnet18", "resnet50", "resnext50_32x4d", "alexnet", "mobilenet_v2", "mnasnet1_0",
          "squeezenet1_1", "vgg16", "vit_b_16", "bert_base"]
FIELDS = ["step_us", "host_us", "host_wait_us", "device_busy_us", "device_idle_us", "kernels", "bytes_copied"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run_mode(a, model, preset, mode):
    cmd = [a.tracecache, "zoo", "train", model, "--preset", preset, "--mode", mode, "--backend", a.backend,
           "--optimizer", a.optimizer, "--momentum", str(a.momentum), "--lr", str(a.lr),
           "--batch", str(a.batch), "--steps", str(a.warmup + a.steps), "--threads", str(a.threads),
           "--no-cache", "--json"]
    start = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - start
    if p.returncode != 0:
        raise RuntimeError(f"{model} ({preset}) {mode} failed (exit {p.returncode}): {' '.join(cmd)}\n{p.stderr}")
    d = json.loads(p.stdout)
    steps = d["sim"]["steps"]
    if len(steps) != a.warmup + a.steps:
        raise RuntimeError(f"{model} ({preset}) {mode}: {len(steps)} sim intervals for {a.warmup + a.steps} steps")
    kept = steps[a.warmup:]
    r = {f: statistics.median(s[f] for s in kept) for f in FIELDS}
    r["trace_step_us"] = steps[0]["step_us"]
    r["memory_peak_bytes"] = d["sim"]["memory_peak_bytes"]
    r["traces"] = d["counters"]["traces"]
    r["compiles"] = d["counters"]["compiles"]
    r["wall_s"] = round(wall, 2)
    r["losses"] = [[o["value"], o["checksum"]] for step in d["outputs"] for o in step if o["name"] == "loss"]
    return r


def run_model(a, model, preset):
    row = {"model": model, "preset": preset}
    for mode in ("lazy", "once"):
        log(f"  {model} ({preset}) {mode} ...")
        row[mode] = run_mode(a, model, preset, mode)
        log(f"    {row[mode]['wall_s']} s wall, sim step {row[mode]['step_us'] / 1000:.3f} ms")
    lazy, once = row["lazy"]["losses"], row["once"]["losses"]
    row["losses_equal"] = lazy == once
    row["loss_first_last"] = [lazy[0][0], lazy[-1][0]]
    if not row["losses_equal"]:
        bad = next(i for i, (x, y) in enumerate(zip(lazy, once)) if x != y) if len(lazy) == len(once) else None
        row["loss_mismatch"] = f"step {bad}: lazy {lazy[bad]}, once {once[bad]}" if bad is not None else \
            f"{len(lazy)} lazy losses, {len(once)} once losses"
    for mode in ("lazy", "once"):
        del row[mode]["losses"]
    row["step_once_vs_lazy"] = row["lazy"]["step_us"] / row["once"]["step_us"]
    row["host_once_vs_lazy"] = row["lazy"]["host_us"] / row["once"]["host_us"]
    return row


def geomean(v):
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else None


def summarize(rows):
    out = {}
    for preset in sorted({r["preset"] for r in rows}):
        rs = [r for r in rows if r["preset"] == preset]
        out[preset] = {"models": len(rs),
                       "step_once_vs_lazy": geomean([r["step_once_vs_lazy"] for r in rs]),
                       "host_once_vs_lazy": geomean([r["host_once_vs_lazy"] for r in rs])}
    return out


def table(d):
    head = ["model", "preset", "lazy step ms", "once step ms", "lazy host µs", "once host µs",
            "lazy device idle ms", "once device idle ms", "device busy ms", "kernels / step",
            "lazy peak MB", "once peak MB", "host once/lazy", "step once/lazy"]
    lines = ["| " + " | ".join(head) + " |", "| --- | --- |" + " ---: |" * (len(head) - 2)]
    for preset, g in d["geomean"].items():
        for r in (r for r in d["rows"] if r["preset"] == preset):
            lz, on = r["lazy"], r["once"]
            busy = f"{lz['device_busy_us'] / 1000:.2f}"
            if abs(lz["device_busy_us"] - on["device_busy_us"]) > 0.005 * lz["device_busy_us"]:
                busy = f"{lz['device_busy_us'] / 1000:.2f} / {on['device_busy_us'] / 1000:.2f}"
            kernels = f"{lz['kernels']:.0f}" if lz["kernels"] == on["kernels"] else f"{lz['kernels']:.0f} / {on['kernels']:.0f}"
            name = r["model"] + ("" if r["losses_equal"] else " **(losses differ)**")
            lines.append("| " + " | ".join([
                name, preset, f"{lz['step_us'] / 1000:.2f}", f"{on['step_us'] / 1000:.2f}",
                f"{lz['host_us']:.1f}", f"{on['host_us']:.1f}",
                f"{lz['device_idle_us'] / 1000:.2f}", f"{on['device_idle_us'] / 1000:.2f}", busy, kernels,
                f"{lz['memory_peak_bytes'] / 1e6:.2f}", f"{on['memory_peak_bytes'] / 1e6:.2f}",
                f"{r['host_once_vs_lazy']:.2f}x", f"{r['step_once_vs_lazy']:.2f}x"]) + " |")
        lines.append(f"| **geomean** ({g['models']}) | {preset} |" + " |" * (len(head) - 4)
                     + f" **{g['host_once_vs_lazy']:.2f}x** | **{g['step_once_vs_lazy']:.2f}x** |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tracecache", default=os.path.join(ROOT, "build", "cli", "tracecache"))
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated zoo models at the small preset")
    ap.add_argument("--full", default="", help="comma-separated models to run at full size (default preset) too")
    ap.add_argument("--backend", default="sim:h100")
    ap.add_argument("--steps", type=int, default=30, help="measured steps after the warmup (default 30)")
    ap.add_argument("--full-steps", type=int, default=10, help="measured steps at full size (default 10)")
    ap.add_argument("--warmup", type=int, default=3, help="steps left out, the trace first (default 3)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--optimizer", default="sgd")
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    ap.add_argument("--table", metavar="JSON", nargs="+",
                    help="print the table of saved --json outputs (several: their rows merged, geomeans "
                    "recomputed) and exit; with --json, print the merged JSON instead")
    a = ap.parse_args()
    if a.table:
        runs = [json.load(open(f)) for f in a.table]
        d = dict(runs[0], rows=[r for run in runs for r in run["rows"]])
        d["geomean"] = summarize(d["rows"])
        print(json.dumps(d, indent=1) if a.json else table(d))
        return 0
    if a.warmup < 1 or a.steps < 1 or a.full_steps < 1:
        ap.error("--warmup, --steps and --full-steps must be at least 1 (step 0 is the trace)")
    rows = []
    plan = [(m, "small") for m in a.models.split(",") if m] + [(m, "default") for m in a.full.split(",") if m]
    measured = a.steps
    for model, preset in plan:
        a.steps = measured if preset == "small" else a.full_steps
        rows.append(run_model(a, model, preset))
    a.steps = measured
    d = {"backend": a.backend, "batch": a.batch, "optimizer": a.optimizer, "momentum": a.momentum, "lr": a.lr,
         "warmup": a.warmup, "steps": a.steps, "full_steps": a.full_steps, "threads": a.threads,
         "rows": rows, "geomean": summarize(rows)}
    print(json.dumps(d, indent=1) if a.json else table(d))
    bad = [r for r in rows if not r["losses_equal"]]
    for r in bad:
        log(f"ERROR: {r['model']} ({r['preset']}): lazy and once losses differ at {r['loss_mismatch']}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
