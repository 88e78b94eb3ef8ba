#!/usr/bin/env python3
"""bf16 against f32 inference on the cpu backend, through tracecache.torch.compile, beside
PyTorch's own bf16 (the model in bf16, eager) and f32 (eager):

    /usr/bin/python3 bench/dtypes_speed.py [--models resnet50,vit_b_16,bert] [--batches 1,8]
                                           [--threads 1] [--calls 5] [--json]

For each model and batch: one process, the models made once (torchvision, weights=None, seeded;
bert: tracecache.torch.bench's BERT-base encoder), f32 and bf16 copies; tracecache once mode on
the cpu backend (no disk cache); the median of --calls timed calls after two untimed ones, each
system's calls interleaved round by round. Also, per model and batch, the largest difference of
each bf16 result to the f32 PyTorch logits and the top-1 agreement with them (over the batch's
rows). Prints the BLAS, threads and machine, then one markdown table (or --json).
"""
import argparse
import copy
import json
import os
import platform
import statistics
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.append(os.path.join(ROOT, "build", "python"))  # after $PYTHONPATH: another build may be named there

import tracecache  # noqa: E402
import tracecache.torch as tct  # noqa: E402


def make(name, batch):
    torch.manual_seed(0)
    if name == "bert":
        from tracecache.torch import bench
        return bench._Bert().eval(), torch.randint(0, 30522, (batch, 128))
    import torchvision
    model = getattr(torchvision.models, name)().eval()
    return model, torch.randn(batch, 3, 224, 224)


def timed(fn, x):
    start = time.perf_counter()
    with torch.no_grad():
        out = fn(x)
    return (time.perf_counter() - start) * 1e3, out


def measure(name, batch, calls):
    f32, x = make(name, batch)
    bf16 = copy.deepcopy(f32).to(torch.bfloat16)
    xb = x if name == "bert" else x.to(torch.bfloat16)
    systems = {
        "torch f32": (f32, x),
        "torch bf16": (bf16, xb),
        "tracecache f32": (tct.compile(f32), x),
        "tracecache bf16": (tct.compile(bf16), xb),
    }
    outs = {}
    for label, (fn, inp) in systems.items():
        for _ in range(2):
            outs[label] = timed(fn, inp)[1]
    times = {label: [] for label in systems}
    for _ in range(calls):
        for label, (fn, inp) in systems.items():
            times[label].append(timed(fn, inp)[0])
    ref = outs["torch f32"].float()
    row = {"model": name, "batch": batch}
    for label in systems:
        row[label + " ms"] = statistics.median(times[label])
    for label in ("torch bf16", "tracecache bf16"):
        got = outs[label].float()
        row[label + " max diff"] = (got - ref).abs().max().item()
        row[label + " top-1"] = (got.argmax(-1) == ref.argmax(-1)).float().mean().item()
    row["tracecache bf16 speedup over f32"] = row["tracecache f32 ms"] / row["tracecache bf16 ms"]
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="resnet50,vit_b_16,bert")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    if a.calls < 1 or a.threads < 1:
        print("dtypes_speed: --calls and --threads must be >= 1", file=sys.stderr)
        return 2
    import torchvision
    models = a.models.split(",")
    unknown = [m for m in models if m != "bert" and not callable(getattr(torchvision.models, m, None))]
    if unknown:
        print(f"dtypes_speed: unknown model {', '.join(unknown)} (torchvision.models' constructors, or bert)",
              file=sys.stderr)
        return 2
    try:
        batches = [int(b) for b in a.batches.split(",")]
    except ValueError:
        batches = []
    if not batches or min(batches) < 1:
        print(f"dtypes_speed: --batches {a.batches!r} must be positive integers, comma-separated", file=sys.stderr)
        return 2
    torch.set_num_threads(a.threads)
    tracecache.configure(mode="once", no_cache=True, threads=a.threads)
    rows = []
    for name in models:
        for batch in batches:
            print(f"measuring {name} batch {batch} ...", file=sys.stderr, flush=True)
            rows.append(measure(name, batch, a.calls))
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    blas = torch.__config__.show().split("BLAS_INFO=")[-1].split(",")[0] if "BLAS_INFO" in torch.__config__.show() else "?"
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; threads {a.threads}; "
          f"PyTorch {torch.__version__} (BLAS {blas}); median of {a.calls} calls\n")
    cols = ["model", "batch", "torch f32 ms", "torch bf16 ms", "tracecache f32 ms", "tracecache bf16 ms",
            "tracecache bf16 speedup over f32", "torch bf16 max diff", "tracecache bf16 max diff",
            "torch bf16 top-1", "tracecache bf16 top-1"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        cells = [f"{r[c]:.3g}" if isinstance(r[c], float) else str(r[c]) for c in cols]
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
