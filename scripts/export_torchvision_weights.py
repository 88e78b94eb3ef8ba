#!/usr/bin/python3
"""Exports a seeded torchvision model for tracecache's numerical cross-check against PyTorch.

Writes into --out-dir (default build/peer-fixtures, relative to the repository):
  MODEL.safetensors   the model's state_dict (parameters and buffers), written by hand:
                      8-byte little-endian header length N, N bytes of JSON
                      {name: {"dtype": "F32"|"I64", "shape": [...], "data_offsets": [b, e]}}
                      (padded with spaces to a multiple of 8), then each tensor's raw
                      little-endian bytes, row-major, in header order; offsets are relative
                      to the first byte after the header
  MODEL_input.npy     a seeded input image, NumPy format v1.0, '<f4', [1, 3, R, R]
  MODEL_logits.npy    PyTorch's logits for it (eval mode, float32), '<f4', [1, 1000]
  MODEL.json          what produced them: versions, seeds, shapes, SHA-256 of each file

The model is built with torchvision's constructor (weights=None) right after
torch.manual_seed(SEED), put in eval mode; the input is drawn from N(0, 1) with a separate
generator seeded with SEED + 1, so changing the model does not change the input.

Run with Debian's interpreter (python3-torch):
    /usr/bin/python3 scripts/export_torchvision_weights.py --model resnet18
"""

import argparse
import hashlib
import json
import os
import struct
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def npy_bytes(shape, data_le_f32):
    """NumPy .npy v1.0: magic, version 1.0, uint16 LE header length, header dict padded
    with spaces and ended by '\\n' so that the data starts at a multiple of 64 bytes."""
    shape_text = repr(tuple(int(d) for d in shape))  # "(1, 3, 224, 224)", "(5,)", "()"
    header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': {shape_text}, }}"
    prefix = 10  # magic (6) + version (2) + header length (2)
    pad = (-(prefix + len(header) + 1)) % 64
    header = header + " " * pad + "\n"
    assert len(header) < 65536
    return b"\x93NUMPY" + bytes([1, 0]) + struct.pack("<H", len(header)) \
        + header.encode("latin1") + data_le_f32


def tensor_bytes(t, np):
    """Raw little-endian bytes of a tensor, row-major, and its safetensors dtype."""
    import torch
    t = t.detach().to("cpu").contiguous()
    if t.dtype == torch.float32:
        return t.numpy().astype("<f4", copy=False).tobytes(order="C"), "F32"
    if t.dtype == torch.int64:
        return t.numpy().astype("<i8", copy=False).tobytes(order="C"), "I64"
    raise SystemExit(f"export: unsupported dtype {t.dtype}")


def safetensors_bytes(state_dict, np):
    header, blobs, offset = {}, [], 0
    for name, t in state_dict.items():
        data, dtype = tensor_bytes(t, np)
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-len(text)) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def read_safetensors(blob):
    """Independent reader used to check what was written."""
    (n,) = struct.unpack_from("<Q", blob, 0)
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    end = 0
    for name, meta in header.items():
        b, e = meta["data_offsets"]
        assert b == end, f"{name}: data not in header order"
        end = e
    assert end == len(data), "trailing or missing bytes"
    return header, data


def main(argv=None):
    p = argparse.ArgumentParser(
        description="Write a seeded torchvision model as .safetensors plus a seeded input "
                    "image and PyTorch's logits as .npy (for tracecache's resnet18 "
                    "cross-check). Run with /usr/bin/python3.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="resnet18", help="torchvision.models constructor name")
    p.add_argument("--out-dir", default=os.path.join(REPO, "build", "peer-fixtures"))
    p.add_argument("--seed", type=int, default=0,
                   help="torch.manual_seed before building the model; input uses SEED + 1")
    p.add_argument("--resolution", type=int, default=224, help="input height and width")
    p.add_argument("--random-bn-stats", action="store_true",
                   help="also give BatchNorm layers seeded non-trivial running_mean, "
                        "running_var, weight and bias (fresh ones are identity maps in eval "
                        "mode, so a test would not see a BatchNorm bug)")
    args = p.parse_args(argv)

    try:
        import numpy as np
        import torch
        import torchvision
    except ImportError as e:
        sys.exit(f"export: {e}; run with /usr/bin/python3 after scripts/setup.sh --peers")

    ctor = getattr(torchvision.models, args.model, None)
    if ctor is None or not callable(ctor):
        sys.exit(f"export: torchvision.models has no model '{args.model}'")

    torch.manual_seed(args.seed)
    model = ctor(weights=None)
    if args.random_bn_stats:
        g = torch.Generator().manual_seed(args.seed + 2)
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                    c = m.num_features
                    m.running_mean.copy_(torch.randn(c, generator=g) * 0.1)
                    m.running_var.copy_(torch.rand(c, generator=g) * 0.5 + 0.75)
                    m.weight.copy_(torch.rand(c, generator=g) * 0.5 + 0.75)
                    m.bias.copy_(torch.randn(c, generator=g) * 0.1)
    model.eval()

    g = torch.Generator().manual_seed(args.seed + 1)
    x = torch.randn(1, 3, args.resolution, args.resolution, generator=g, dtype=torch.float32)
    with torch.no_grad():
        logits = model(x)
    if isinstance(logits, (tuple, list)):
        logits = logits[0]
    logits = logits.detach().to(torch.float32).contiguous()
    # The same forward pass in float64: how far PyTorch's own float32 result is from it,
    # i.e. how much of a 1e-4 tolerance float32 rounding alone uses.
    with torch.no_grad():
        ref64 = model.double()(x.double())
        model.float()
    if isinstance(ref64, (tuple, list)):
        ref64 = ref64[0]
    f32_vs_f64 = float((logits.double() - ref64).abs().max() / ref64.abs().max())

    os.makedirs(args.out_dir, exist_ok=True)
    stem = os.path.join(args.out_dir, args.model)
    files = {
        "safetensors": (stem + ".safetensors", safetensors_bytes(model.state_dict(), np)),
        "input": (stem + "_input.npy", npy_bytes(list(x.shape),
                                                 x.numpy().astype("<f4").tobytes())),
        "logits": (stem + "_logits.npy", npy_bytes(list(logits.shape),
                                                   logits.numpy().astype("<f4").tobytes())),
    }
    for path, blob in files.values():
        with open(path, "wb") as f:
            f.write(blob)

    # Read everything back with independent code paths and compare with the source tensors.
    header, data = read_safetensors(files["safetensors"][1])
    sd = model.state_dict()
    assert list(header) == list(sd), "header order differs from the state_dict"
    for name, t in sd.items():
        meta = header[name]
        b, e = meta["data_offsets"]
        dt = {"F32": "<f4", "I64": "<i8"}[meta["dtype"]]
        back = np.frombuffer(data[b:e], dtype=dt).reshape(meta["shape"])
        assert np.array_equal(back, t.numpy()), name
    assert np.array_equal(np.load(files["input"][0]), x.numpy())
    assert np.array_equal(np.load(files["logits"][0]), logits.numpy())

    params = sum(t.numel() for t in model.parameters())
    meta = {
        "model": args.model,
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "seed": args.seed,
        "input_seed": args.seed + 1,
        "random_bn_stats": args.random_bn_stats,
        "resolution": args.resolution,
        "parameters": params,
        "state_dict_entries": len(sd),
        "input_shape": list(x.shape),
        "logits_shape": list(logits.shape),
        "logits_argmax": int(logits.argmax()),
        "logits_absmax": float(logits.abs().max()),
        "logits_f32_vs_f64_max_rel": f32_vs_f64,
        "files": {k: {"path": os.path.basename(path),
                      "bytes": len(blob),
                      "sha256": hashlib.sha256(blob).hexdigest()}
                  for k, (path, blob) in files.items()},
    }
    with open(stem + ".json", "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    for path, blob in files.values():
        print(f"{path}: {len(blob):,} bytes")
    print(f"{stem}.json: {args.model}, {params:,} parameters, {len(sd)} state_dict entries, "
          f"logits absmax {meta['logits_absmax']:.4g}, argmax {meta['logits_argmax']}, "
          f"float32 vs float64 max rel {f32_vs_f64:.2g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
