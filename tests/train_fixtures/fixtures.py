"""PyTorch reimplementations of the three training trace programs (fixtures/programs/train_*.trace).

Each fixture is the same model, data, init and optimizer as its .trace file, written the PyTorch
way (torch.nn.functional layers, torch.optim optimizers, clip_grad_norm_), so it is an independent
oracle for what tracecache computes from plain ops. The initial values come from tracecache: the
programs draw them from its own counter-based generator, so `oracle_trace` makes a copy of the
program that also outputs them (`c_<param>` copies at every step, the fixed data params as they
are) plus each step's new param values (`<param>` -> the update's value), and the caller runs that
copy with `tracecache run --save-outputs DIR`.

Used by tests/train_fixtures/compare.py (correctness, tests/cli/train_fixtures_torch.sh) and by
bench/train_speed.py (PyTorch eager's training step next to tracecache's).
"""
import re

import numpy as np
import torch
import torch.nn.functional as F

# Per fixture: the trained params (in grad order) and the name of each one's new value, the
# fixed data params (output as they are), the per-step inputs, and the program's own outputs.
FIXTURES = {
    "train_mlp": {
        "params": {"w1": "nw1", "b1": "nb1", "w2": "nw2", "b2": "nb2"},
        "data": ["teacher"],
        "inputs": ["x"],
        "outputs": ["loss"],
    },
    "train_convnet": {
        "params": {"cw": "n_cw", "gamma": "n_gamma", "beta": "n_beta", "w2": "n_w2", "b2": "n_b2"},
        "data": ["x", "teacher"],
        "inputs": [],
        "outputs": ["loss"],
    },
    "train_transformer": {
        "params": {n: "n_" + n for n in ("ln_g", "ln_b", "wq", "wk", "wv", "wo", "wh")},
        "data": ["x", "teacher"],
        "inputs": [],
        "outputs": ["loss", "gnorm"],
    },
}


def oracle_trace(name, text):
    """The program `text` of fixture `name` with an output line that also gives the initial values
    (c_<param> = the param at the step's start), the data, the inputs and the new param values."""
    spec = FIXTURES[name]
    want = "output " + ", ".join(spec["outputs"])
    lines = text.splitlines()
    at = [i for i, l in enumerate(lines) if l.strip() == want]
    if len(at) != 1:
        raise ValueError(f"{name}: expected one line '{want}'")
    copies = [f"c_{p} = add({p}, 0)" for p in spec["params"]]
    outs = (spec["outputs"] + spec["data"] + spec["inputs"] + [f"c_{p}" for p in spec["params"]]
            + list(spec["params"].values()))
    lines[at[0]:at[0] + 1] = copies + ["output " + ", ".join(outs)]
    return "\n".join(lines) + "\n"


def labels_of(feature, teacher):
    return torch.argmax(feature @ teacher, dim=1)


def mlp_loss(p, x, teacher):
    labels = labels_of(x, teacher)
    logits = torch.relu(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    return F.cross_entropy(logits, labels)


def convnet_loss(p, x, teacher):
    labels = labels_of(x.flatten(1), teacher)
    c = F.conv2d(x, p["cw"], padding=1)
    bn = F.batch_norm(c, None, None, p["gamma"], p["beta"], training=True, eps=1e-5)
    pooled = F.max_pool2d(torch.relu(bn), 2)
    logits = pooled.flatten(1) @ p["w2"] + p["b2"]
    return F.cross_entropy(logits, labels)


def transformer_loss(p, x, teacher):
    b, s, d = x.shape
    labels = labels_of(x.mean(1), teacher)
    n = F.layer_norm(x, (d,), p["ln_g"], p["ln_b"], eps=1e-5)

    def heads(t):
        return t.reshape(b, s, 2, d // 2).permute(0, 2, 1, 3)

    q, k, v = heads(n @ p["wq"]), heads(n @ p["wk"]), heads(n @ p["wv"])
    att = torch.softmax(q @ k.transpose(-1, -2) / (d // 2) ** 0.5, dim=-1) @ v
    o = att.permute(0, 2, 1, 3).reshape(b, s, d) @ p["wo"]
    logits = (x + o).mean(1) @ p["wh"]
    return F.cross_entropy(logits, labels)


class Trainer:
    """One fixture's model and optimizer in PyTorch; step(x) is one training step."""

    def __init__(self, name, init, data):
        """init: param name -> initial value (a tensor); data: the fixed data params."""
        self.name = name
        self.params = {n: init[n].clone().requires_grad_(True) for n in FIXTURES[name]["params"]}
        self.data = data
        plist = list(self.params.values())
        if name == "train_mlp":
            self.loss_fn = mlp_loss
            self.opt = torch.optim.SGD(plist, lr=0.2, momentum=0.9)
        elif name == "train_convnet":
            self.loss_fn = convnet_loss
            self.opt = torch.optim.Adam(plist, lr=0.01, betas=(0.9, 0.999), eps=1e-8)
        else:
            self.loss_fn = transformer_loss
            self.opt = torch.optim.AdamW(plist, lr=0.01, betas=(0.9, 0.999), eps=1e-8,
                                         weight_decay=0.01)

    def step(self, x=None):
        """One step; returns the program's outputs (loss, and gnorm for the transformer)."""
        x = self.data["x"] if x is None else x
        loss = self.loss_fn(self.params, x, self.data["teacher"])
        self.opt.zero_grad()
        loss.backward()
        out = {"loss": loss.detach()}
        if self.name == "train_transformer":
            out["gnorm"] = torch.nn.utils.clip_grad_norm_(list(self.params.values()), 1.0)
        self.opt.step()
        if self.name == "train_mlp":
            for g in self.opt.param_groups:
                g["lr"] *= 0.97
        return out


def load_saved(directory, step, name):
    return torch.from_numpy(np.load(f"{directory}/step{step}_{name}.npy"))


def trainer_from_saved(name, directory):
    """A Trainer whose initial params and data are step 0's outputs of the oracle trace."""
    spec = FIXTURES[name]
    init = {p: load_saved(directory, 0, "c_" + p) for p in spec["params"]}
    data = {d: load_saved(directory, 0, d) for d in spec["data"]}
    return Trainer(name, init, data)


def fixture_name(path):
    m = re.search(r"(train_[a-z]+)\.trace$", str(path))
    if not m or m.group(1) not in FIXTURES:
        raise ValueError(f"{path}: not one of {sorted(FIXTURES)}")
    return m.group(1)
