#!/usr/bin/python3
"""PyTorch's gradients for every case of tests/grad/cases_*.py, written as case folders that
tests/grad/grad_check.cc runs through tracecache's autodiff and compares.

Usage: torch_grads.py OUT_DIR [--only NAME ...]   (runs under /usr/bin/python3: numpy, torch 1.13)

A case file defines CASES, a list of dicts:
  {"name": "add_broadcast",
   "inputs": {"a": ("f32", [2, 3], "normal"), "b": ("f32", [3], "normal")},
   "program": "y = add(a, b)",
   "torch": lambda a, b: a + b}
`program` is one or more op lines in .trace syntax (docs/trace-format.md) over the input names;
the name its last line assigns is the result. `torch` computes the same with torch, taking the
inputs in the order of "inputs". Input generators:
  normal          standard normal
  uniform:LO:HI   uniform in [LO, HI)
  positive        uniform in [0.5, 2)
  ties            drawn from {-1, 0, 1, 2}, so that maxima and comparisons tie
  int:LO:HI       integers in [LO, HI) (dtype i32 or i64)
  bool            true or false
Every f32 input is differentiated.

For each case, OUT_DIR/NAME/ holds:
  program.trace      `input a : f32[2, 3] = npy("a.npy")` lines, the case's op lines, `output y`
  <input>.npy        the inputs
  output.npy         torch's result
  upstream.npy       R, a random gradient of the result: the loss is sum(y * R)
  grad_<input>.npy   torch's d loss / d input for every f32 input (zeros where torch gives None)
  direction_<input>.npy  a random direction per f32 input, for the finite-difference check
  manifest.txt       `case NAME`, `family F` (of cases_F.py), `fd 0|1`, `diff INPUT` per f32
                     input (the checker's index)

Inputs are seeded by the case name. A case without a "ties" input is checked by finite
differences too (grad_check.cc); its inputs must lie away from kinks (relu at 0, ties of
maximum, clamp's bounds, ...) along the direction. This script makes sure they do: in float64,
the central difference of the loss at FD_EPS along the direction must equal torch's directional
derivative within FD_SELF_TOL (relative to sum |g_i d_i|); if not (a kink inside the step, or a
function too curved for the step), the case's inputs are drawn again with the next seed, up to
MAX_DRAWS times, then the case fails with a message.
"""
import glob
import importlib.util
import os
import sys
import zlib

import numpy as np
import torch

FD_EPS = 1e-2  # keep equal to kFdEps in grad_check.cc
FD_SELF_TOL = 5e-4
MAX_DRAWS = 20
GENERATORS = ("normal", "uniform", "positive", "ties", "int", "bool")
NP_DTYPES = {"f32": np.float32, "i32": np.int32, "i64": np.int64, "bool": np.bool_}


def fail(message):
    sys.exit(f"torch_grads.py: {message}")


def load_cases(folder):
    cases = []
    for path in sorted(glob.glob(os.path.join(folder, "cases_*.py"))):
        spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if not isinstance(getattr(module, "CASES", None), list):
            fail(f"{path} defines no CASES list")
        for case in module.CASES:
            cases.append((path, case))
    names = {}
    for path, case in cases:
        for key in ("name", "inputs", "program", "torch"):
            if key not in case:
                fail(f"{path}: a case has no '{key}': {case}")
        name = case["name"]
        if name in names:
            fail(f"case '{name}' is defined twice ({names[name]} and {path})")
        names[name] = path
    return cases


def generate(spec, dtype, shape, rng):
    kind, *args = spec.split(":")
    if kind not in GENERATORS:
        fail(f"unknown input generator '{spec}' (one of {', '.join(GENERATORS)})")
    if kind == "normal":
        v = rng.standard_normal(shape)
    elif kind == "uniform":
        v = rng.uniform(float(args[0]), float(args[1]), shape)
    elif kind == "positive":
        v = rng.uniform(0.5, 2.0, shape)
    elif kind == "ties":
        v = rng.choice(np.array([-1.0, 0.0, 1.0, 2.0]), shape)
    elif kind == "int":
        v = rng.integers(int(args[0]), int(args[1]), shape)
    else:
        v = rng.random(shape) < 0.5
    return np.asarray(v).astype(NP_DTYPES[dtype])


def result_name(program, case):
    last = [line for line in program.strip().splitlines() if line.strip() and not line.strip().startswith("#")]
    if not last or "=" not in last[-1]:
        fail(f"case '{case}': the program's last line assigns no name")
    return last[-1].split("=", 1)[0].strip()


def torch_forward(case, arrays, dtype):
    tensors = []
    for (name, (dt, _, _)), a in zip(case["inputs"].items(), arrays):
        t = torch.from_numpy(np.array(a))
        if dt == "f32":
            t = t.to(dtype).requires_grad_(True)
        tensors.append(t)
    return tensors, case["torch"](*tensors)


def grads_of(tensors, y, upstream, diff):
    loss = (y * upstream).sum()
    wrt = [tensors[i] for i in diff]
    got = torch.autograd.grad(loss, wrt, allow_unused=True) if loss.requires_grad else [None] * len(wrt)
    return [torch.zeros_like(w) if g is None else g for w, g in zip(wrt, got)]


def kink_free(case, arrays, diff, upstream, directions):
    """Float64: does the central difference at FD_EPS match the directional derivative?"""
    def loss_at(t):
        moved = [a.astype(np.float64) + t * directions[diff.index(i)].astype(np.float64) if i in diff else a
                 for i, a in enumerate(arrays)]
        tensors, y = torch_forward(case, moved, torch.float64)
        return tensors, y, (y * torch.from_numpy(upstream.astype(np.float64))).sum()
    tensors, y, _ = loss_at(0.0)
    g = grads_of(tensors, y, torch.from_numpy(upstream.astype(np.float64)), diff)
    terms = [float((gi.detach().numpy() * d).sum()) for gi, d in zip(g, directions)]
    scale = sum(float(np.abs(gi.detach().numpy() * d).sum()) for gi, d in zip(g, directions))
    with torch.no_grad():
        fd = (float(loss_at(FD_EPS)[2]) - float(loss_at(-FD_EPS)[2])) / (2 * FD_EPS)
    return abs(fd - sum(terms)) <= FD_SELF_TOL * scale + 1e-9


def write_case(out_dir, path, case):
    name = case["name"]
    inputs = case["inputs"]
    diff = [i for i, (_, (dt, _, _)) in enumerate(inputs.items()) if dt == "f32"]
    if not diff:
        fail(f"{path}: case '{name}' has no f32 input: nothing to differentiate")
    has_ties = any(spec.split(":")[0] == "ties" for (_, _, spec) in inputs.values())
    for (iname, (dt, shape, spec)) in inputs.items():
        if dt not in NP_DTYPES:
            fail(f"{path}: case '{name}': input '{iname}' has unknown dtype '{dt}'")
        if (dt == "f32") != (spec.split(":")[0] in ("normal", "uniform", "positive", "ties")):
            fail(f"{path}: case '{name}': input '{iname}': generator '{spec}' does not make {dt}")
    seed = zlib.crc32(name.encode())
    for draw in range(MAX_DRAWS):
        rng = np.random.default_rng([seed, draw])
        arrays = [generate(spec, dt, shape, rng) for (dt, shape, spec) in inputs.values()]
        tensors, y = torch_forward(case, arrays, torch.float32)
        if y.dtype != torch.float32:
            fail(f"{path}: case '{name}': torch's result is {y.dtype}, not float32")
        upstream = rng.standard_normal(tuple(y.shape)).astype(np.float32)
        directions = [rng.standard_normal(arrays[i].shape).astype(np.float32) for i in diff]
        if has_ties or kink_free(case, arrays, diff, upstream, directions):
            break
    else:
        fail(f"{path}: case '{name}': every one of {MAX_DRAWS} draws of the inputs has a kink (or too much "
             f"curvature) within {FD_EPS} along the finite-difference direction: draw inputs away from "
             f"the op's kinks (e.g. uniform:LO:HI) or use 'ties' inputs (no finite-difference check)")
    grads = grads_of(tensors, y, torch.from_numpy(upstream), diff)

    folder = os.path.join(out_dir, name)
    os.makedirs(folder, exist_ok=True)
    lines = ["tracecache 1"]
    for (iname, (dt, shape, _)), a in zip(inputs.items(), arrays):
        np.save(os.path.join(folder, f"{iname}.npy"), a)
        lines.append(f'input {iname} : {dt}[{", ".join(str(d) for d in shape)}] = npy("{iname}.npy")')
    lines += [line.strip() for line in case["program"].strip().splitlines() if line.strip()]
    lines.append(f"output {result_name(case['program'], name)}")
    with open(os.path.join(folder, "program.trace"), "w") as f:
        f.write("\n".join(lines) + "\n")
    np.save(os.path.join(folder, "output.npy"), np.array(y.detach().numpy(), order="C"))
    np.save(os.path.join(folder, "upstream.npy"), upstream)
    names = list(inputs)
    for i, g, d in zip(diff, grads, directions):
        np.save(os.path.join(folder, f"grad_{names[i]}.npy"), np.array(g.detach().numpy(), dtype=np.float32, order="C"))
        np.save(os.path.join(folder, f"direction_{names[i]}.npy"), d.astype(np.float32))
    with open(os.path.join(folder, "manifest.txt"), "w") as f:
        family = os.path.basename(path)[len("cases_"):-len(".py")]
        f.write(f"case {name}\nfamily {family}\nfd {0 if has_ties else 1}\n")
        for i in diff:
            f.write(f"diff {names[i]}\n")


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        fail("usage: torch_grads.py OUT_DIR [--only NAME ...]")
    out_dir = args[0]
    only = set(args[2:]) if len(args) > 1 and args[1] == "--only" else None
    torch.manual_seed(0)
    cases = load_cases(os.path.dirname(os.path.abspath(__file__)))
    if only:
        missing = only - {c["name"] for _, c in cases}
        if missing:
            fail(f"no case named {', '.join(sorted(missing))}")
    os.makedirs(out_dir, exist_ok=True)
    count = 0
    for path, case in cases:
        if only and case["name"] not in only:
            continue
        write_case(out_dir, path, case)
        count += 1
    print(f"{count} cases written to {out_dir}")


if __name__ == "__main__":
    main()
