#!/usr/bin/env python3
"""Training-step speed of the training fixtures: tracecache on cpu against PyTorch eager, and the
trace-once experiment on training (once vs lazy host overhead and step time, cpu and sim).

    /usr/bin/python3 bench/train_speed.py [--tc build/cli/tracecache] [--threads 2] [--steps 50] [--warmup 5] [FIXTURE.trace ...]

In one run, for each program (default: fixtures/programs/train_{mlp,convnet,transformer}.trace):
  - PyTorch eager: the same model and optimizer (tests/train_fixtures/fixtures.py) from the same
    initial values (an oracle copy of the program run for one step), max(--warmup, 10) untimed
    steps (its first two steps take ~10 ms each: allocator and thread-pool warmup), then
    the median of --steps timed steps (forward, backward, clipping, optimizer step, loss.item());
    torch.set_num_threads and openblas_set_num_threads at --threads;
  - `tracecache bench PROG --modes eager,lazy,once --threads N --steps S --warmup W --json` (cpu);
  - `tracecache bench PROG --backend sim:h100 --modes lazy,once --steps S --warmup W --json`.
Prints the BLAS and threads, then three markdown tables. Times are medians (tracecache bench's
step_us and overhead_us; on sim, the simulated step and the host's own time per step).
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests/train_fixtures"))
sys.path.insert(0, os.path.join(ROOT, "bench/peers"))
from fixtures import FIXTURES, fixture_name, load_saved, oracle_trace, trainer_from_saved  # noqa: E402
import torch_peer  # noqa: E402
from torch_peer import configure_threads, env_summary, environment  # noqa: E402

torch_peer.torch = torch  # torch_peer imports torch in its own main(); its helpers read the global


def torch_step_us(tc, prog, steps, warmup):
    name = fixture_name(prog)
    with tempfile.TemporaryDirectory() as tmp:
        oracle = os.path.join(tmp, "oracle.trace")
        open(oracle, "w").write(oracle_trace(name, open(prog).read()))
        subprocess.run([tc, "run", oracle, "--steps", "1", "--no-cache", "--save-outputs", tmp],
                       check=True, capture_output=True)
        trainer = trainer_from_saved(name, tmp)
        x0 = load_saved(tmp, 0, "x") if FIXTURES[name]["inputs"] else None
    # A program input is new every step: fresh values of its shape, made before the clock starts.
    xs = [None if x0 is None else torch.randn(x0.shape) for _ in range(warmup + steps)]
    times = []
    for i, x in enumerate(xs):
        t0 = time.perf_counter()
        out = trainer.step(x)
        float(out["loss"])
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def bench(tc, prog, *args):
    out = subprocess.run([tc, "bench", prog, "--json", *args], check=True, capture_output=True,
                         text=True).stdout
    d = json.loads(out)
    return {r["mode"]: r for r in d["rows"]}


def ms(us):
    return f"{us / 1000:.3f}"


def table(head, rows):
    lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tc", default=os.path.join(ROOT, "build/cli/tracecache"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("programs", nargs="*",
                    default=sorted(glob.glob(os.path.join(ROOT, "fixtures/programs/train_*.trace"))))
    a = ap.parse_args()
    configure_threads(a.threads)
    torch.ones(2, 2) @ torch.ones(2, 2)  # loads libblas, so the summary can name it
    configure_threads(a.threads)
    for line in env_summary(environment(a)):
        print(line)
    print(f"tracecache: --threads {a.threads} (libopenblas.so.0, openblas-pthread, and its kernels' loops); {a.warmup} warmup "
          f"(PyTorch {max(a.warmup, 10)}) + {a.steps} timed steps, medians\n")
    common = ["--steps", str(a.steps), "--warmup", str(a.warmup)]
    cpu_rows, once_rows, sim_rows = [], [], []
    for prog in a.programs:
        name = os.path.basename(prog)
        t = torch_step_us(a.tc, prog, a.steps, max(a.warmup, 10))
        c = bench(a.tc, prog, "--modes", "eager,lazy,once", "--threads", str(a.threads), *common)
        s = bench(a.tc, prog, "--backend", "sim:h100", "--modes", "lazy,once", *common)
        cpu_rows.append([name, ms(t), ms(c["eager"]["step_us"]), ms(c["lazy"]["step_us"]),
                         ms(c["once"]["step_us"]), f"{t / c['once']['step_us']:.2f}x",
                         f"{t / c['lazy']['step_us']:.2f}x"])
        lo, oo = c["lazy"]["overhead_us"], c["once"]["overhead_us"]
        once_rows.append([name, f"{lo:.1f}", f"{oo:.1f}", f"{lo / oo:.1f}x",
                          f"{c['lazy']['step_us'] / c['once']['step_us']:.2f}x"])
        ls, os_ = s["lazy"]["sim"], s["once"]["sim"]
        sim_rows.append([name, f"{ls['host_us']:.1f}", f"{os_['host_us']:.1f}",
                         f"{ls['host_us'] / os_['host_us']:.1f}x", f"{ls['step_us']:.1f}",
                         f"{os_['step_us']:.1f}", f"{ls['device_busy_us']:.1f}",
                         f"{os_['device_busy_us']:.1f}", f"{ls['step_us'] / os_['step_us']:.2f}x"])
    print(f"cpu training step, ms ({a.threads} threads)\n")
    print(table(["program", "PyTorch eager", "tc eager", "tc lazy", "tc once",
                 "PyTorch / once", "PyTorch / lazy"], cpu_rows))
    print("\ncpu, once vs lazy: host overhead per step (µs) and step time\n")
    print(table(["program", "lazy overhead µs", "once overhead µs", "overhead lazy/once",
                 "step lazy/once"], once_rows))
    print("\nsim:h100, once vs lazy: host time per step and simulated step (µs)\n")
    print(table(["program", "lazy host", "once host", "host lazy/once", "lazy step", "once step",
                 "lazy device busy", "once device busy", "step lazy/once"], sim_rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
