"""Compares tracecache's training of a fixture with PyTorch's (tests/train_fixtures/fixtures.py).

Usage: compare.py FIXTURE STEPS TOL LABEL=DIR [LABEL=DIR ...]
Each DIR holds `tracecache run ORACLE_TRACE --save-outputs DIR` of the oracle copy of the fixture
(fixtures.oracle_trace). PyTorch trains from the first DIR's initial values (and per-step inputs)
for STEPS steps; for every DIR, each step's outputs (loss; gnorm for the transformer) and the
final params (the last step's new values) must be within TOL relative of PyTorch's: |a - b| / |b|
for a scalar, max|a - b| / max|b| for a tensor. Prints the worst relative error per DIR and exits
non-zero if one exceeds TOL.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixtures import FIXTURES, load_saved, trainer_from_saved  # noqa: E402


def rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def main():
    name, steps, tol = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    runs = [arg.split("=", 1) for arg in sys.argv[4:]]
    spec = FIXTURES[name]
    first = runs[0][1]
    trainer = trainer_from_saved(name, first)
    torch_out = []
    for step in range(steps):
        x = load_saved(first, step, "x") if spec["inputs"] else None
        torch_out.append(trainer.step(x))
    final = {p: t.detach() for p, t in trainer.params.items()}

    failed = False
    for label, d in runs:
        worst_out, worst_param = (0.0, ""), (0.0, "")
        for step in range(steps):
            for o in spec["outputs"]:
                e = rel(load_saved(d, step, o), torch_out[step][o])
                if e > worst_out[0]:
                    worst_out = (e, f"{o} step {step}")
            for i in spec["inputs"]:
                if not torch.equal(load_saved(d, step, i), load_saved(first, step, i)):
                    print(f"{name} {label}: input {i} at step {step} differs from {runs[0][0]}'s")
                    failed = True
        for p, new in spec["params"].items():
            e = rel(load_saved(d, steps - 1, new), final[p])
            if e > worst_param[0]:
                worst_param = (e, p)
        ok = worst_out[0] <= tol and worst_param[0] <= tol
        failed |= not ok
        print(f"{name:18s} {label:10s} worst output rel {worst_out[0]:.2e} ({worst_out[1] or '-'}), "
              f"worst final param rel {worst_param[0]:.2e} ({worst_param[1] or '-'})"
              f"{'' if ok else f'  > {tol:g}: FAIL'}")
    losses = [float(o["loss"]) for o in torch_out]
    print(f"{name:18s} torch loss step 0 {losses[0]:.4f} -> step {steps - 1} {losses[-1]:.4f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
