#!/usr/bin/env python3
"""resnet18 training step at batch 8 (224x224, 1000 classes), tracecache on cpu against PyTorch
eager, in one run (issue 12, part 8).

    /usr/bin/python3 bench/train_resnet18.py [--tc build/cli/tracecache] [--threads 2] [--steps 5] [--warmup 2]

tracecache: `tracecache zoo train resnet18 --preset default --batch 8 --optimizer sgd --momentum
0.9 --lr 0.01 --mode {lazy,once} --threads N --steps W+S --no-cache --json`, the median of the
step times after the first W steps (forward, loss, backward and the SGD update as one graph).
PyTorch: torchvision 0.14's resnet18 in train mode, the same batch size and optimizer, W untimed
steps then the median of S (forward, cross_entropy, backward, optimizer.step, loss.item()),
torch.set_num_threads and openblas_set_num_threads at N. Prints the BLAS and the threads.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "peers"))
import torch_peer  # noqa: E402

torch_peer.torch = torch


def tracecache_steps(tc, mode, threads, steps, warmup):
    out = subprocess.run(
        [tc, "zoo", "train", "resnet18", "--preset", "default", "--batch", "8", "--optimizer", "sgd",
         "--momentum", "0.9", "--lr", "0.01", "--mode", mode, "--threads", str(threads),
         "--steps", str(warmup + steps), "--no-cache", "--json"],
        check=True, capture_output=True, text=True).stdout
    d = json.loads(out)
    return statistics.median(d["step_ms"][warmup:]), d["counters"]


def torch_steps(threads, steps, warmup):
    torch_peer.configure_threads(threads)
    torch.manual_seed(0)
    model = torchvision.models.resnet18()
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(8, 3, 224, 224)
    y = torch.randint(0, 1000, (8,))
    times = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        loss.item()
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tc", default=os.path.join(os.path.dirname(__file__), "..", "build", "cli", "tracecache"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    if args.steps < 1 or args.warmup < 0:
        ap.error("--steps must be >= 1 and --warmup >= 0")
    path, _ = torch_peer.openblas_handle()
    print(f"BLAS: {path or 'not OpenBLAS'}; threads: {args.threads}; torch {torch.__version__}")
    rows = []
    for mode in ("lazy", "once"):
        ms, counters = tracecache_steps(args.tc, mode, args.threads, args.steps, args.warmup)
        rows.append((f"tracecache {mode}", ms, f"compiles {counters.get('compiles', 0)}"))
        print(f"  tracecache {mode}: {ms:.1f} ms", file=sys.stderr)
    ms = torch_steps(args.threads, args.steps, args.warmup)
    rows.append(("PyTorch eager", ms, ""))
    print("| resnet18, batch 8, train step | median ms | |")
    print("| --- | ---: | --- |")
    for name, ms, note in rows:
        print(f"| {name} | {ms:.1f} | {note} |")


if __name__ == "__main__":
    main()
