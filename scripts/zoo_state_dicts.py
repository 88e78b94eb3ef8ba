#!/usr/bin/env python3
"""Writes fixtures/zoo/<model>.state_dict: every state_dict entry of a torchvision 0.14 model,
one per line as `name dtype [shape] parameter|buffer`, for tests/frontend/zoo_test.cc to compare the
zoo's specs against. Needs torch and torchvision (Debian: python3-torchvision).

Usage: scripts/zoo_state_dicts.py [OUTPUT_DIR]   (default: fixtures/zoo)
"""
import os
import sys

import torchvision
import torchvision.models as models

MODELS = ["resnet18", "resnet50", "resnext50_32x4d", "alexnet", "mobilenet_v2", "mnasnet1_0",
          "squeezenet1_1", "vgg16", "vit_b_16"]
DTYPES = {"torch.float32": "f32", "torch.int64": "i64"}


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "fixtures/zoo"
    os.makedirs(out_dir, exist_ok=True)
    for name in MODELS:
        model = getattr(models, name)()
        parameters = {k for k, _ in model.named_parameters()}
        with open(os.path.join(out_dir, name + ".state_dict"), "w") as f:
            f.write(f"# {name}: torchvision {torchvision.__version__} state_dict, "
                    "written by scripts/zoo_state_dicts.py\n")
            for key, value in model.state_dict().items():
                shape = ", ".join(str(d) for d in value.shape)
                role = "parameter" if key in parameters else "buffer"
                f.write(f"{key} {DTYPES[str(value.dtype)]} [{shape}] {role}\n")


if __name__ == "__main__":
    main()
