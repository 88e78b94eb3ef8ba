#!/usr/bin/env python3
"""The zoo's ten models exported to ONNX from their PyTorch code and run by tracecache
(docs/onnx.md, "Zoo models"): issue 16's part 4.

For each model: the torchvision model (seeded initial weights; bert_base: the zoo's BERT weights,
`tracecache zoo emit bert_base --save-weights`, in a torch module whose state_dict keys are the
zoo's, running zoo_vs_torchvision.py's forward) is exported with torch.onnx.export at each opset
(ViT and BERT with dynamic batch, BERT also a dynamic sequence axis), then `tracecache run
MODEL.onnx --input ...` runs it in lazy and once mode on cpu and sim:h100 (BERT and ViT at two
batch sizes, BERT also two sequence lengths, each size its own import), and the outputs are
compared with PyTorch's: max |difference| / max |value| below 1e-4. It also counts how many of the
program's params keep their state_dict names.

(AlexNet, VGG16 and ViT at 224 x 224, the other CNNs at --resolution.)

Usage: scripts/onnx_zoo.py [--tracecache build/cli/tracecache] [--resolution 64] [--opsets 13,17]
                           [--bert-preset small] [MODEL...]      (default: all ten)
Needs torch, torchvision, numpy (Debian: python3-torchvision). Prints one line per run; exit 1 if
any run fails or differs.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torchvision.models as models

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zoo_vs_torchvision import bert_forward, read_safetensors  # noqa: E402

ZOO = ["resnet18", "resnet50", "resnext50_32x4d", "alexnet", "mobilenet_v2", "mnasnet1_0",
       "squeezenet1_1", "vgg16", "vit_b_16", "bert_base"]
RUNS = [(mode, backend) for mode in ("lazy", "once") for backend in ("cpu", "sim:h100")]


class Bert(torch.nn.Module):
    """The zoo's BERT weights under their state_dict keys, with bert_forward as the forward."""

    def __init__(self, sd, layers, heads):
        super().__init__()
        for key, value in sd.items():
            *path, leaf = key.split(".")
            module = self
            for part in path:
                if not hasattr(module, part):
                    module.add_module(part, torch.nn.Module())
                module = getattr(module, part)
            module.register_parameter(leaf, torch.nn.Parameter(value.float(), requires_grad=False))
        self.layers, self.heads = layers, heads

    def forward(self, ids, types, mask):
        sd = dict(self.named_parameters())
        return bert_forward(sd, ids, types, mask, self.layers, self.heads)


def compare(ours, theirs):
    scale = max(float(np.abs(theirs).max()), 1e-30)
    return float(np.abs(ours.astype(np.float64) - theirs).max()) / scale


def run_onnx(tc, path, inputs, tmp, mode, backend, outputs):
    out = os.path.join(tmp, "out")
    subprocess.run(["rm", "-rf", out], check=True)
    cmd = [tc, "run", path, "--mode", mode, "--backend", backend, "--db", os.path.join(tmp, "cache.db"),
           "--save-outputs", out, "-q"]
    for name, file in inputs.items():
        cmd += ["--input", f"{name}={file}"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        return None, done.stderr.strip()
    return [np.load(os.path.join(out, f"step0_{o}.npy")) for o in outputs], ""


def names_kept(tc, path, inputs, tmp, state_dict_keys):
    program = os.path.join(tmp, "imported.trace")
    cmd = [tc, "import", path, "-o", program]
    for name, file in inputs.items():
        cmd += ["--input", f"{name}={file}"]
    subprocess.run(cmd, check=True, capture_output=True)
    names = re.findall(r'safetensors\("[^"]*", "([^"]*)"\)', open(program).read())
    kept = sum(1 for n in names if n in state_dict_keys)
    return kept, len(names)


def check_model(tc, name, args, tmp):
    ok = True
    torch.manual_seed(0)
    if name == "bert_base":
        weights = os.path.join(tmp, "bert.safetensors")
        subprocess.run([tc, "zoo", "emit", name, "--preset", args.bert_preset, "--save-weights", weights, "-o",
                        os.path.join(tmp, "bert.trace")], check=True)
        sd = read_safetensors(weights)
        layers = 1 + max(int(k.split(".")[2]) for k in sd if k.startswith("encoder.layer."))
        model = Bert(sd, layers, 12 if args.bert_preset == "default" else 4).eval()
        vocab = sd["embeddings.word_embeddings.weight"].shape[0]
        sizes = [(1, 16), (2, 24)]
        make = lambda n, l: (torch.randint(0, vocab, (n, l)), torch.zeros(n, l, dtype=torch.long),
                             torch.ones(n, l, dtype=torch.long))
        input_names, output_names = ["input_ids", "token_type_ids", "attention_mask"], ["last_hidden_state", "pooler_output"]
        dynamic = {k: {0: "batch", 1: "sequence"} for k in input_names}
    else:
        model = getattr(models, name)().eval()
        if name == "vit_b_16":  # torchvision initializes the head to zeros: the logits would be 0
            torch.nn.init.normal_(model.heads.head.weight, std=0.02)
        # ViT's position embeddings fix 224; AlexNet's and VGG's adaptive pools export only when
        # the output size divides the feature map (224: 6x6, 7x7).
        full_size = name in ("vit_b_16", "alexnet", "vgg16")
        res = 224 if full_size else args.resolution
        sizes = [(1, res), (2, res)] if name == "vit_b_16" else [(1 if full_size else 2, res)]
        make = lambda n, r: (torch.randn(n, 3, r, r),)
        input_names, output_names = ["image"], ["logits"]
        dynamic = {"image": {0: "batch"}} if name == "vit_b_16" else None
    keys = set(model.state_dict().keys())
    for opset in args.opsets:
        path = os.path.join(tmp, f"{name}_{opset}.onnx")
        try:
            # Not under no_grad: there, torchvision's ViT takes PyTorch's fused attention fast path,
            # which the exporter cannot write.
            torch.onnx.export(model, make(*sizes[0]), path, opset_version=opset, input_names=input_names,
                              output_names=output_names, dynamic_axes=dynamic)
        except Exception as e:  # torch's exporter, not tracecache
            print(f"{name} opset {opset}: torch.onnx.export FAILED: {str(e).splitlines()[0]}")
            ok = False
            continue
        for n, size in sizes:
            data = make(n, size)
            with torch.no_grad():
                expected = model(*data)
            expected = [t.numpy() for t in (expected if isinstance(expected, tuple) else (expected,))]
            inputs = {}
            for k, t in zip(input_names, data):
                inputs[k] = os.path.join(tmp, f"{k}.npy")
                np.save(inputs[k], t.numpy())
            kept, total = names_kept(tc, path, inputs, tmp, keys)
            for mode, backend in RUNS:
                got, err = run_onnx(tc, path, inputs, tmp, mode, backend, output_names)
                if got is None:
                    print(f"{name} opset {opset} [{n}, {size}] {mode} {backend}: FAILED: {err}")
                    ok = False
                    continue
                error = max(compare(g, e) for g, e in zip(got, expected))
                good = error < 1e-4
                ok = ok and good
                print(f"{name} opset {opset} [{n}, {size}] {mode} {backend}: max relative difference "
                      f"{error:.2e} {'ok' if good else 'DIFFERS'}; params by state_dict name {kept}/{total}")
            sys.stdout.flush()
    return ok


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tracecache", default="build/cli/tracecache")
    parser.add_argument("--resolution", type=int, default=64, help="image size of the CNNs (ViT: 224)")
    parser.add_argument("--opsets", default="13,17")
    parser.add_argument("--bert-preset", default="small", choices=["small", "default"])
    parser.add_argument("models", nargs="*", metavar="MODEL",
                        help=f"zoo models (default: all ten): {', '.join(ZOO)}")
    args = parser.parse_args()
    for name in args.models:
        if name not in ZOO:
            parser.error(f"'{name}' is not a zoo model (models: {', '.join(ZOO)})")
    try:
        args.opsets = [int(o) for o in args.opsets.split(",")]
    except ValueError:
        parser.error(f"--opsets '{args.opsets}': comma-separated opset numbers (13 to 17)")
    if args.resolution < 32:
        parser.error(f"--resolution {args.resolution}: at least 32")
    tc = os.path.abspath(args.tracecache)
    ok = True
    for name in args.models or ZOO:
        with tempfile.TemporaryDirectory() as tmp:
            ok = check_model(tc, name, args, tmp) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
