#!/usr/bin/env python3
"""Peak device memory of a training step on `sim`, against the bound the program's sizes give.

    /usr/bin/python3 bench/train_memory.py [--tc build/cli/tracecache] [--backend sim:h100] [FIXTURE.trace ...]

For each training program (default: fixtures/programs/train_{mlp,convnet,transformer}.trace) and
mode (lazy, once), runs `tracecache run PROG --backend sim:h100 --mode MODE --no-cache --json` for
1 step and for 20 steps and reads `sim.memory_peak_bytes` (sim accounts every device byte: params
copied in, each run's scratch arena and outputs; a donated output written in place takes no new
memory). The bound, from the program's declared types and its op results' sizes:
  data      the params no update changes (a fixed batch, the teacher) and one step's inputs
  weights   the params some grad statement differentiates by
  grads     one gradient per weight (the weights' bytes)
  opt state every other updated param (momentum, Adam's m and v, lr, the bias-correction powers)
  acts      every forward op result (the ops before the first grad statement): what an executor
            that keeps the whole forward pass for the backward would hold; a fusing compiler needs
            less, so this is an upper bound of the live activations
  bound     the sum: a step that holds each of these once, and one copy of the updated params
Once mode keeps two copies of the updated params during a step (no donation yet, see
docs/trace-format.md, Training), so its peak minus lazy's is printed next to those params' bytes.
The sizes of the op results come from tracecache itself: a copy of the program that outputs every
forward result runs for one step with --save-outputs. Prints a markdown table.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTYPE_BYTES = {"f32": 4, "i32": 4, "i64": 8, "bool": 1}
DECL = re.compile(r"^(input|param)\s+(\w+)\s*:\s*(\w+)\[([^\]]*)\]")
DIM = re.compile(r"^dim\s+(\w+)\s*=\s*(\d+)\s*$")
OP = re.compile(r"^(\w+)\s*=\s*(\w+)\(")
GRAD = re.compile(r"^([\w\s,]+)=\s*grad\(\s*(\w+)\s*,([^)]*)\)")
UPDATE = re.compile(r"^update\s+(\w+)\s*=\s*(\w+)")


def strip(line):
    return line.split("#", 1)[0].strip()


def analyse(text):
    dims, decls, forward, grads, updates, output_at = {}, {}, [], [], set(), None
    for i, raw in enumerate(text.splitlines()):
        line = strip(raw)
        if m := DIM.match(line):
            dims[m.group(1)] = int(m.group(2))
        elif m := DECL.match(line):
            shape = [int(d) if d.strip().lstrip("-").isdigit() else dims[d.strip()]
                     for d in m.group(4).split(",") if d.strip()]
            decls[m.group(2)] = (m.group(1), DTYPE_BYTES[m.group(3)] * int(np.prod(shape, dtype=np.int64)))
        elif m := GRAD.match(line):
            grads += [w.strip() for w in m.group(3).split(",")]
        elif m := UPDATE.match(line):
            updates.add(m.group(1))
        elif line.startswith("output"):
            output_at = i
        elif (m := OP.match(line)) and not grads:
            forward.append(m.group(1))
    return dims, decls, forward, grads, updates, output_at


def run_json(tc, prog, *args):
    out = subprocess.run([tc, "run", prog, "--no-cache", "--json", *args], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def activation_bytes(tc, text, forward, output_at, tmp):
    lines = text.splitlines()
    outs = strip(lines[output_at])[len("output"):].strip()
    lines[output_at] = f"output {outs}, " + ", ".join(forward)
    prog = os.path.join(tmp, "acts.trace")
    open(prog, "w").write("\n".join(lines) + "\n")
    saved = os.path.join(tmp, "acts")
    subprocess.run([tc, "run", prog, "--steps", "1", "--no-cache", "--save-outputs", saved],
                   check=True, capture_output=True)
    return sum(np.load(os.path.join(saved, f"step0_{n}.npy")).nbytes for n in forward)


def kb(b):
    return f"{b / 1024:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tc", default=os.path.join(ROOT, "build/cli/tracecache"))
    ap.add_argument("--backend", default="sim:h100")
    ap.add_argument("programs", nargs="*",
                    default=sorted(glob.glob(os.path.join(ROOT, "fixtures/programs/train_*.trace"))))
    a = ap.parse_args()
    head = ["program", "data KB", "weights KB", "grads KB", "opt state KB", "acts KB", "bound KB",
            "lazy peak KB (1 step / 20)", "lazy / bound", "once peak KB (1 step / 20)", "once / bound",
            "once - lazy KB", "updated params KB"]
    print("| " + " | ".join(head) + " |")
    print("| --- |" + " ---: |" * (len(head) - 1))
    for prog in a.programs:
        text = open(prog).read()
        _, decls, forward, grads, updates, output_at = analyse(text)
        weights = sum(decls[w][1] for w in grads)
        state = sum(b for n, (_, b) in decls.items() if n in updates and n not in grads)
        data = sum(b for n, (kind, b) in decls.items() if n not in updates)
        with tempfile.TemporaryDirectory() as tmp:
            acts = activation_bytes(a.tc, text, forward, output_at, tmp)
        bound = data + 2 * weights + state + acts
        peaks = {}
        for mode in ("lazy", "once"):
            peaks[mode] = [run_json(a.tc, prog, "--backend", a.backend, "--mode", mode, "--steps", str(n))
                           ["sim"]["memory_peak_bytes"] for n in (1, 20)]
        name = os.path.basename(prog)
        row = [name, kb(data), kb(weights), kb(weights), kb(state), kb(acts), kb(bound)]
        for mode in ("lazy", "once"):
            row += [f"{kb(peaks[mode][0])} / {kb(peaks[mode][1])}", f"{peaks[mode][1] / bound:.2f}"]
        row += [kb(peaks["once"][1] - peaks["lazy"][1]), kb(weights + state)]
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
