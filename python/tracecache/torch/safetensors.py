"""A `.safetensors` writer for torch tensors (the format of huggingface/safetensors, which
docs/trace-format.md describes): an 8-byte little-endian header length, a JSON header mapping
each name to its dtype, shape and byte range, padded with spaces to a multiple of 8, then the
raw little-endian row-major bytes in header order.

`write(path, tensors)` writes F32, I64, I32 and BOOL tensors (what tracecache reads); another
dtype is a `ValueError` naming the tensor. Not thread-safe for one path.
"""

import json
import struct

import torch

__all__ = ["write"]

_DTYPES = {torch.float32: ("F32", "<f4"), torch.int64: ("I64", "<i8"), torch.int32: ("I32", "<i4"),
           torch.bool: ("BOOL", "|b1")}


def write(path, tensors):
    """Writes `tensors` ((name, tensor) pairs, in order) to `path`."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors:
        kind = _DTYPES.get(t.dtype)
        if kind is None:
            raise ValueError(f"tensor '{name}' has dtype {t.dtype}; a .safetensors file for tracecache "
                             f"holds float32, int64, int32 or bool tensors")
        data = t.detach().to("cpu").contiguous().numpy().astype(kind[1], copy=False).tobytes(order="C")
        header[name] = {"dtype": kind[0], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
