#!/usr/bin/python3
"""PyTorch's side of the `tracecache zoo train` check (tests/cli/zoo_train.sh): resnet18 at the
zoo's small preset (stem 8, one BasicBlock per stage, 10 classes; docs/zoo.md), built in torch
from torchvision 0.14's BasicBlock with the zoo's state_dict names, trained in train mode on
one fixed batch with the same optimizer, compared with what tracecache saved.

  torch_resnet18.py prepare DIR
      writes DIR/weights.safetensors (the state_dict after torch.manual_seed(0)),
      DIR/image.npy (f32 [8, 3, 32, 32], N(0, 1), seed 1) and DIR/labels.npy (i64 [8], seed 2)
  torch_resnet18.py compare DIR OPTIMIZER LR STEPS RUN...
      trains the model STEPS steps with OPTIMIZER (sgd-momentum: SGD momentum 0.9;
      sgd-nesterov: SGD momentum 0.9, nesterov, weight decay 1e-4; adam: Adam; adamw: AdamW,
      weight decay 0.01) at LR, and compares every RUN directory (tracecache's --save-outputs of a run with
      --output-params) with it: each step's loss and the final parameters and running
      statistics, each within 1e-4 relative (max |a - b| / max |b| over a tensor). Prints the
      worst relative errors per run; exits 1 when one is above the tolerance.

Run with Debian's interpreter, which has torch 1.13 and torchvision 0.14: /usr/bin/python3.
"""
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.models.resnet import BasicBlock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from export_torchvision_weights import safetensors_bytes  # noqa: E402

BATCH, RESOLUTION, CLASSES, STEM = 8, 32, 10, 8
TOLERANCE = 1e-4


class SmallResNet18(nn.Module):
    """torchvision's ResNet with BasicBlock [1, 1, 1, 1] and a stem of 8 channels: the zoo's
    small preset. The state_dict names are torchvision's."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, STEM, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(STEM)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        inplanes = STEM
        for stage in range(4):
            planes = STEM << stage
            stride = 1 if stage == 0 else 2
            downsample = None
            if stride != 1 or inplanes != planes:
                downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False),
                                           nn.BatchNorm2d(planes))
            setattr(self, f"layer{stage + 1}",
                    nn.Sequential(BasicBlock(inplanes, planes, stride, downsample)))
            inplanes = planes
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(inplanes, CLASSES)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def save_npy(path, array):
    np.save(path, np.ascontiguousarray(array))


def prepare(out):
    torch.manual_seed(0)
    model = SmallResNet18()
    with open(os.path.join(out, "weights.safetensors"), "wb") as f:
        f.write(safetensors_bytes(model.state_dict(), np))
    image = np.random.default_rng(1).standard_normal((BATCH, 3, RESOLUTION, RESOLUTION))
    save_npy(os.path.join(out, "image.npy"), image.astype(np.float32))
    labels = np.random.default_rng(2).integers(0, CLASSES, BATCH)
    save_npy(os.path.join(out, "labels.npy"), labels.astype(np.int64))


def read_safetensors(path):
    blob = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", blob, 0)
    import json
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, meta in header.items():
        b, e = meta["data_offsets"]
        dtype = {"F32": np.float32, "I64": np.int64}[meta["dtype"]]
        out[name] = torch.from_numpy(np.frombuffer(data[b:e], dtype=dtype).reshape(meta["shape"]).copy())
    return out


def relative(got, want):
    scale = float(np.abs(want).max())
    return float(np.abs(got - want).max()) / (scale if scale > 0 else 1.0)


def compare(out, optimizer, lr, steps, runs):
    model = SmallResNet18()
    model.load_state_dict(read_safetensors(os.path.join(out, "weights.safetensors")))
    model.train()
    image = torch.from_numpy(np.load(os.path.join(out, "image.npy")))
    labels = torch.from_numpy(np.load(os.path.join(out, "labels.npy")))
    if optimizer == "sgd-momentum":
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    elif optimizer == "sgd-nesterov":
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, nesterov=True, weight_decay=1e-4)
    elif optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=lr)
    elif optimizer == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    else:
        raise SystemExit(f"unknown optimizer {optimizer}")
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(image), labels)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    print(f"torch {optimizer} losses: " + " ".join(f"{v:.6f}" for v in losses))
    final = {k: v.numpy() for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    ok = True
    for run in runs:
        loss_err = 0.0
        for step, want in enumerate(losses):
            got = float(np.load(os.path.join(run, f"step{step}_loss.npy")))
            loss_err = max(loss_err, abs(got - want) / abs(want))
        weight_err, worst = 0.0, ""
        for key, want in final.items():
            got = np.load(os.path.join(run, f"step{steps - 1}_{key.replace('.', '_')}_next.npy"))
            assert got.shape == want.shape, (key, got.shape, want.shape)
            err = relative(got, want)
            if err >= weight_err:
                weight_err, worst = err, key
        status = "ok" if loss_err <= TOLERANCE and weight_err <= TOLERANCE else "FAIL"
        ok = ok and status == "ok"
        print(f"{status} {optimizer} {os.path.basename(run)}: worst loss relative error {loss_err:.2e}, "
              f"worst final tensor relative error {weight_err:.2e} ({worst})")
    return 0 if ok else 1


def main(argv):
    if len(argv) >= 2 and argv[0] == "prepare":
        prepare(argv[1])
        return 0
    if len(argv) >= 5 and argv[0] == "compare":
        return compare(argv[1], argv[2], float(argv[3]), int(argv[4]), argv[5:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
