#!/usr/bin/env python3
"""Trains tiny models with PyTorch and with tracecache (train_driver) from identical weights and
data, and checks that every step's loss and the final weights agree within 1e-4 relative.

Usage: compare_torch.py TRAIN_DRIVER WORK_DIR

Models (tests/train/train_driver.cc): an MLP (linear, relu, linear) and the same with a
training-mode batch norm after the first linear layer. Each configuration trains 20 steps with
SGD (momentum, nesterov, dampening, weight decay), Adam or AdamW, optionally clip_grad_norm_,
and a learning-rate schedule (the learning rate changes every step; in lazy mode on the cpu
backend that must compile once). tracecache runs in eager mode (cpu kernels) and lazy mode (the
cpu backend through the Runtime, and the reference evaluator). Dropout is not compared: PyTorch's
generator cannot be reproduced (tests/capture/train_ops_test.cc checks its statistics instead).
Exit status 0 when everything agrees; otherwise an AssertionError naming the configuration,
mode and tensor.
"""
import math
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

STEPS = 20
N, FEATURES, HIDDEN, CLASSES = 16, 8, 12, 4
TOLERANCE = 1e-4
MODES = [("eager", "cpu"), ("lazy", "cpu"), ("lazy", "reference")]


def schedule(kind, base):
    if kind == "const":
        return [base] * STEPS
    if kind == "exp":
        return [base * 0.9 ** s for s in range(STEPS)]
    if kind == "cosine":
        return [base * 0.5 * (1 + math.cos(math.pi * s / STEPS)) for s in range(STEPS)]
    if kind == "step":
        return [base * (0.5 if s >= STEPS // 2 else 1.0) for s in range(STEPS)]
    raise ValueError(kind)


CONFIGS = [
    dict(name="mlp_sgd_nesterov", model="mlp", loss="ce", opt="sgd", lr=0.1, sched="exp",
         momentum=0.9, nesterov=1, weight_decay=1e-3),
    dict(name="mlp_sgd_dampening_mse", model="mlp", loss="mse", opt="sgd", lr=0.05, sched="const",
         momentum=0.9, dampening=0.2, weight_decay=1e-2, clip=1.0),
    dict(name="mlp_adam_clip", model="mlp", loss="ce", opt="adam", lr=0.01, sched="cosine",
         weight_decay=1e-2, clip=0.5),
    dict(name="mlp_adamw", model="mlp", loss="ce", opt="adamw", lr=0.01, sched="step",
         beta1=0.8, beta2=0.99, weight_decay=0.1),
    dict(name="bn_sgd_momentum_clip", model="bn", loss="ce", opt="sgd", lr=0.1, sched="cosine",
         momentum=0.9, weight_decay=1e-4, clip=2.0),
    dict(name="bn_adamw", model="bn", loss="ce", opt="adamw", lr=0.005, sched="exp", weight_decay=0.05),
]


def make_data(work, model, loss):
    g = torch.Generator().manual_seed(1234 if model == "mlp" else 4321)
    tensors = {
        "x": torch.randn(N, FEATURES, generator=g),
        "w1": torch.randn(HIDDEN, FEATURES, generator=g) * 0.3,
        "b1": torch.randn(HIDDEN, generator=g) * 0.1,
        "w2": torch.randn(CLASSES, HIDDEN, generator=g) * 0.3,
        "b2": torch.randn(CLASSES, generator=g) * 0.1,
    }
    if loss == "ce":
        tensors["y"] = torch.randint(0, CLASSES, (N,), generator=g)
    else:
        tensors["y"] = torch.randn(N, CLASSES, generator=g)
    if model == "bn":
        tensors["gamma"] = 1 + 0.1 * torch.randn(HIDDEN, generator=g)
        tensors["beta"] = 0.1 * torch.randn(HIDDEN, generator=g)
        tensors["running_mean"] = 0.1 * torch.randn(HIDDEN, generator=g)
        tensors["running_var"] = 1 + 0.1 * torch.rand(HIDDEN, generator=g)
    d = os.path.join(work, f"data_{model}_{loss}")
    os.makedirs(d, exist_ok=True)
    for k, v in tensors.items():
        np.save(os.path.join(d, k + ".npy"), v.numpy())
    return d, tensors


def torch_train(cfg, tensors, lrs):
    # No bias before the batch norm (its gradient is zero up to rounding): train_driver.cc.
    names = ["w1", "gamma", "beta", "w2", "b2"] if cfg["model"] == "bn" else ["w1", "b1", "w2", "b2"]
    params = {k: tensors[k].clone().requires_grad_(True) for k in names}
    rm = tensors.get("running_mean", torch.zeros(0)).clone()
    rv = tensors.get("running_var", torch.zeros(0)).clone()
    plist = [params[k] for k in names]
    wd = cfg.get("weight_decay", 0.0)
    if cfg["opt"] == "sgd":
        opt = torch.optim.SGD(plist, lr=lrs[0], momentum=cfg.get("momentum", 0.0),
                              dampening=cfg.get("dampening", 0.0), weight_decay=wd,
                              nesterov=bool(cfg.get("nesterov", 0)))
    else:
        cls = torch.optim.Adam if cfg["opt"] == "adam" else torch.optim.AdamW
        opt = cls(plist, lr=lrs[0], betas=(cfg.get("beta1", 0.9), cfg.get("beta2", 0.999)),
                  eps=cfg.get("eps", 1e-8), weight_decay=wd)
    losses = []
    for lr in lrs:
        for group in opt.param_groups:
            group["lr"] = lr
        opt.zero_grad()
        h = tensors["x"] @ params["w1"].t()
        if cfg["model"] == "bn":
            h = F.batch_norm(h, rm, rv, params["gamma"], params["beta"], training=True, momentum=0.1, eps=1e-5)
        else:
            h = h + params["b1"]
        out = torch.relu(h) @ params["w2"].t() + params["b2"]
        loss = F.cross_entropy(out, tensors["y"]) if cfg["loss"] == "ce" else F.mse_loss(out, tensors["y"])
        loss.backward()
        if cfg.get("clip"):
            torch.nn.utils.clip_grad_norm_(plist, cfg["clip"])
        opt.step()
        losses.append(loss.item())
    result = {k: v.detach().numpy() for k, v in params.items()}
    result["losses"] = np.array(losses, dtype=np.float32)
    if cfg["model"] == "bn":
        result["running_mean"] = rm.numpy()
        result["running_var"] = rv.numpy()
    return result


def relative_error(got, want):
    scale = float(np.abs(want).max())
    return float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max()) / max(scale, 1e-30)


def main():
    driver, work = sys.argv[1], sys.argv[2]
    overall = 0.0
    for cfg in CONFIGS:
        worst = 0.0
        data, tensors = make_data(work, cfg["model"], cfg["loss"])
        lrs = schedule(cfg["sched"], cfg["lr"])
        want = torch_train(cfg, tensors, lrs)
        assert np.isfinite(want["losses"]).all() and want["losses"][-1] < want["losses"][0], \
            f"{cfg['name']}: PyTorch did not train ({want['losses']})"
        for mode, executor in MODES:
            out = os.path.join(work, f"{cfg['name']}_{mode}_{executor}")
            os.makedirs(out, exist_ok=True)
            args = [driver, f"data={data}", f"out={out}", f"mode={mode}", f"executor={executor}",
                    "lrs=" + ",".join(repr(lr) for lr in lrs)]
            args += [f"{k}={v}" for k, v in cfg.items() if k not in ("name", "lr", "sched")]
            run = subprocess.run(args, capture_output=True, text=True)
            assert run.returncode == 0, f"{cfg['name']} {mode}/{executor}: {run.stderr}"
            if (mode, executor) == ("lazy", "cpu"):
                assert run.stdout.strip() == "compiles 1", \
                    f"{cfg['name']}: the learning-rate schedule recompiled: {run.stdout!r}"
            for key, expected in want.items():
                got = np.load(os.path.join(out, key + ".npy"))
                assert got.shape == expected.shape, (cfg["name"], key, got.shape, expected.shape)
                if key == "losses":
                    err = float((np.abs(got.astype(np.float64) - expected) / np.abs(expected)).max())
                else:
                    err = relative_error(got, expected)
                worst = max(worst, err)
                assert err <= TOLERANCE, \
                    f"{cfg['name']} {mode}/{executor} {key}: relative error {err:.3g} > {TOLERANCE}"
        overall = max(overall, worst)
        print(f"{cfg['name']}: loss {want['losses'][0]:.4f} -> {want['losses'][-1]:.4f}, "
              f"{len(MODES)} modes agree, largest relative error {worst:.3g}")
    print(f"largest relative error {overall:.3g}")


if __name__ == "__main__":
    main()
