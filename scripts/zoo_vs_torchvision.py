#!/usr/bin/env python3
"""Checks a zoo model against torchvision: the same weights and input give the same logits.
bert_base is checked against HuggingFace BertModel's forward written out in torch ops.

Runs `tracecache zoo emit MODEL --save-weights` (the deterministic initial weights), runs the
emitted program with `tracecache run --save-outputs` (the image input saved as an output too),
copies the weights into torchvision's model by state_dict key (the key sets must be equal) and
compares its
logits on that image. Needs torch, torchvision and numpy (Debian: python3-torchvision).

Usage: scripts/zoo_vs_torchvision.py [--tracecache build/cli/tracecache] MODEL...
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torchvision.models as models

DTYPES = {"F32": np.float32, "I64": np.int64, "I32": np.int32, "BOOL": np.bool_}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        array = np.frombuffer(data[base + begin:base + end], dtype=DTYPES[entry["dtype"]])
        tensors[name] = torch.from_numpy(array.reshape(entry["shape"]).copy())
    return tensors


def bert_forward(sd, ids, types, mask, layers, heads):
    """HuggingFace BertModel's inference forward, written out with torch ops (transformers is not
    a dependency): embeddings, post-norm encoder layers with the additive mask, tanh pooler."""
    F = torch.nn.functional
    n, length = ids.shape
    hidden = sd["embeddings.word_embeddings.weight"].shape[1]

    def linear(x, p):
        return F.linear(x, sd[p + ".weight"], sd[p + ".bias"])

    def norm(x, p):
        return F.layer_norm(x, (hidden,), sd[p + ".weight"], sd[p + ".bias"], eps=1e-12)

    x = (sd["embeddings.word_embeddings.weight"][ids] +
         sd["embeddings.token_type_embeddings.weight"][types] +
         sd["embeddings.position_embeddings.weight"][torch.arange(length)][None])
    x = norm(x, "embeddings.LayerNorm")
    additive = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
    d = hidden // heads
    for i in range(layers):
        p = f"encoder.layer.{i}"
        split = lambda t: t.view(n, length, heads, d).permute(0, 2, 1, 3)
        q, k, v = (split(linear(x, f"{p}.attention.self.{w}")) for w in ("query", "key", "value"))
        scores = q @ k.transpose(-1, -2) / d ** 0.5 + additive
        context = (scores.softmax(-1) @ v).permute(0, 2, 1, 3).reshape(n, length, hidden)
        a = norm(linear(context, f"{p}.attention.output.dense") + x, f"{p}.attention.output.LayerNorm")
        h = F.gelu(linear(a, f"{p}.intermediate.dense"))
        x = norm(linear(h, f"{p}.output.dense") + a, f"{p}.output.LayerNorm")
    return x, torch.tanh(linear(x[:, 0], "pooler.dense"))


def check_bert(tc, preset, tmp):
    weights = os.path.join(tmp, "bert.safetensors")
    program = os.path.join(tmp, "bert.trace")
    subprocess.run([tc, "zoo", "emit", "bert_base", "--preset", preset, "--save-weights", weights,
                    "-o", program], check=True)
    with open(program) as f:
        text = f.read().replace("\noutput last_hidden_state, pooler_output\n",
                                "\noutput last_hidden_state, pooler_output, input_ids\n")
    with open(program, "w") as f:
        f.write(text)
    out = os.path.join(tmp, "bert_out")
    subprocess.run([tc, "run", program, "--no-cache", "--save-outputs", out], check=True,
                   stdout=subprocess.DEVNULL)
    load = lambda k: np.load(os.path.join(out, f"step0_{k}.npy"))
    ids = torch.from_numpy(load("input_ids"))
    sd = read_safetensors(weights)
    layers = 1 + max(int(k.split(".")[2]) for k in sd if k.startswith("encoder.layer."))
    heads = 12 if preset == "default" else 4
    with torch.no_grad():
        hidden, pooled = bert_forward(sd, ids, torch.zeros_like(ids), torch.ones_like(ids), layers, heads)
    ok = True
    for ours, theirs, what in ((load("last_hidden_state"), hidden.numpy(), "last_hidden_state"),
                               (load("pooler_output"), pooled.numpy(), "pooler_output")):
        scale = max(np.abs(theirs).max(), 1e-30)
        error = np.abs(ours - theirs).max() / scale
        print(f"bert_base ({preset}) {what}: max |value| {scale:.3e}, max relative difference {error:.2e}")
        ok = ok and error < 1e-4
    return ok


def check(tc, name, tmp):
    if name == "bert_base":
        return check_bert(tc, "default", tmp)
    weights = os.path.join(tmp, name + ".safetensors")
    program = os.path.join(tmp, name + ".trace")
    subprocess.run([tc, "zoo", "emit", name, "--save-weights", weights, "-o", program], check=True)
    with open(program) as f:
        text = f.read().replace("\noutput logits\n", "\noutput logits, image\n")
    with open(program, "w") as f:
        f.write(text)
    out = os.path.join(tmp, name + "_out")
    subprocess.run([tc, "run", program, "--no-cache", "--save-outputs", out], check=True,
                   stdout=subprocess.DEVNULL)
    ours = np.load(os.path.join(out, "step0_logits.npy"))
    image = torch.from_numpy(np.load(os.path.join(out, "step0_image.npy")))
    model = getattr(models, name)()
    # Copied entry by entry rather than with load_state_dict, which needs the version metadata
    # some modules (MNASNet) keep beside the state_dict.
    ours_sd, theirs_sd = read_safetensors(weights), model.state_dict()
    assert ours_sd.keys() == theirs_sd.keys(), ours_sd.keys() ^ theirs_sd.keys()
    with torch.no_grad():
        for key, value in theirs_sd.items():
            value.copy_(ours_sd[key])
    model.eval()
    with torch.no_grad():
        theirs = model(image).numpy()
    scale = max(np.abs(theirs).max(), 1e-30)
    error = np.abs(ours - theirs).max() / scale
    print(f"{name}: max |logit| {scale:.3e}, max relative difference {error:.2e}")
    return error < 1e-4


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tracecache", default="build/cli/tracecache")
    parser.add_argument("models", nargs="+")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ok = [check(args.tracecache, m, tmp) for m in args.models]
    sys.exit(0 if all(ok) else 1)


if __name__ == "__main__":
    main()
