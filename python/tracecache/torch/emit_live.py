"""Emitter (b): the lowered op calls applied with `tracecache.op` on lazy tensors, graph breaks
run through `tracecache._host_op` (fallback.py) and value reads read.

Inside a `tracecache.compile`d function the handles are the call's proxies and the ops are
recorded into its trace; in lazy or eager mode they are ordinary tensors of the session.

A constant tensor of the captured graph (a `torch.tensor(...)` inside `forward`) is rebuilt
from ops (`full`, `concat`, `reshape`) when it has at most `MAX_CONSTANT_ELEMENTS` elements, so
it is part of the graph rather than data captured from outside (which a compiled function
refuses); a larger one is a `CaptureError` asking for a buffer instead.

Not thread-safe (the session records ops from one thread at a time).
"""

import math

import torch

from . import fallback
from .errors import CaptureError
from .lowering import TORCH_DTYPES

__all__ = ["LiveEmitter", "MAX_CONSTANT_ELEMENTS"]

MAX_CONSTANT_ELEMENTS = 64


class LiveEmitter:
    """`traced`: the handles are a compiled function's proxies (once mode), so graph breaks go
    to the function's trace (`tracecache._host_op`) and value reads become value guards;
    otherwise they are session tensors (lazy and eager mode) and a break runs at once."""

    def __init__(self, tracecache, traced=False):
        self.tc = tracecache
        self.traced = traced

    def op(self, name, inputs, attrs):
        return self.tc.op(name, *inputs, **attrs)

    def read(self, handle):
        handle.numpy()

    def host_op(self, payload, inputs, description):
        if self.traced:
            return self.tc._host_op(payload, list(inputs), description)
        return [self.tc.from_numpy(a) for a in fallback.run(payload, [h.numpy() for h in inputs])]

    def constant(self, target, tensor):
        dtype = TORCH_DTYPES[tensor.dtype]
        n = math.prod(tensor.shape)
        if isinstance(tensor, torch.nn.Parameter) or target.startswith("_param_constant"):
            raise CaptureError(
                f"tracecache.torch: the function reads a parameter ({list(tensor.shape)}) that is not one "
                f"of its arguments: compile the module itself (tracecache.torch.compile(model)), or a "
                f"training step with tracecache.torch.compile_step(step, model, optimizer)")
        if n > MAX_CONSTANT_ELEMENTS:
            raise CaptureError(
                f"tracecache.torch: the captured graph holds a constant tensor '{target}' of {n} elements "
                f"(made inside forward); register it as a buffer (module.register_buffer) so it is an "
                f"input of the graph, or build it from ops")
        values = tensor.detach().reshape(-1).tolist()
        if n == 0 or len(set(values)) <= 1:
            value = float(values[0]) if values else 0.0
            return self.tc.op("full", shape=list(tensor.shape), value=value, dtype=dtype)
        parts = [self.tc.op("full", shape=[1], value=float(v), dtype=dtype) for v in values]
        flat = self.tc.op("concat", *parts, axis=0)
        return self.tc.op("reshape", flat, shape=list(tensor.shape))
