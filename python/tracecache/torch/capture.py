"""Capture of a PyTorch module or function as one ATen graph, with `make_fx`.

`capture(fn, state, inputs)` traces `fn` with `torch.fx.experimental.proxy_tensor.make_fx` in
real mode: `fn` runs once on the given tensors and every ATen op it dispatches (the forward and,
for a training step, the backward and the optimizer's ops) becomes a node. A module is called
through `torch.nn.utils.stateless.functional_call` with its parameters and buffers as explicit
inputs, so they are graph placeholders named by their `state_dict` names, never constants.

Tracing runs with gradients enabled, so PyTorch takes its composite paths instead of fused fast
paths (`_native_multi_head_attention`, the nested-tensor encoder), and every node records the
Python stack that produced it (for error messages naming the user's line).

Not thread-safe: it wraps a method of PyTorch's tracer class for the duration of a capture
(to record each node's frames).
Errors: a `CaptureError` naming the user's line for a value read into Python (`.item()`, a
data-dependent branch); anything else the traced code raises, unchanged.
"""

import contextlib
import sys
import threading

import torch
from torch.fx.experimental import proxy_tensor
from torch.nn.utils import stateless

from .errors import CaptureError, user_frame_of_traceback

__all__ = ["Capture", "capture", "capture_module", "module_state", "captures"]

_lock = threading.Lock()
_count = 0


def captures():
    """How many graphs this process has captured (each `make_fx` run is one)."""
    return _count


@contextlib.contextmanager
def _recording_frames():
    """Records, for every node the tracer creates, the Python frames that led to it as
    (file, line, function) tuples, innermost first, in `node.meta["frames"]`. Cheaper than
    PyTorch's `record_stack_traces`, which formats every frame's source line for every node;
    errors format the one frame they report."""
    tracer = proxy_tensor.PythonKeyTracer
    own = tracer.__dict__.get("create_proxy")
    original = tracer.create_proxy

    def create_proxy(self, *args, **kwargs):
        proxy = original(self, *args, **kwargs)
        frames, f = [], sys._getframe(1)
        while f is not None:
            frames.append((f.f_code.co_filename, f.f_lineno, f.f_code.co_name))
            f = f.f_back
        proxy.node.meta["frames"] = frames
        return proxy

    tracer.create_proxy = create_proxy
    try:
        yield
    finally:
        if own is None:
            del tracer.create_proxy
        else:
            tracer.create_proxy = own


class Capture:
    """A captured graph: `graph` (a `torch.fx.GraphModule`), `names`, one per placeholder in
    order (the state names first, then the input names), and `num_state` (how many of the
    placeholders are state: parameters and buffers)."""

    def __init__(self, graph, names, num_state):
        self.graph = graph
        self.names = names
        self.num_state = num_state


def module_state(module):
    """The module's parameters and buffers as (name, tensor) pairs: the `state_dict` entries in
    `state_dict` order, then buffers that are not in it (non-persistent ones). Tied tensors
    appear once, under their first name."""
    seen = {}
    tensors = dict(module.named_parameters())
    tensors.update(module.named_buffers())
    for name in module.state_dict(keep_vars=True):
        if name in tensors:
            seen[name] = tensors[name]
    for name, t in tensors.items():
        seen.setdefault(name, t)
    return list(seen.items())


def capture(fn, state_names, state, input_names, inputs):
    """Traces `fn(*state, *inputs)` (all tensors) into one ATen graph whose placeholders are the
    state tensors, then the inputs, in order."""
    global _count
    args = list(state) + list(inputs)
    with _lock, _recording_frames(), torch.enable_grad():
        try:
            graph = proxy_tensor.make_fx(fn)(*args)
        except RuntimeError as e:
            if "get value out of a tracing tensor" not in str(e):
                raise
            frame = user_frame_of_traceback(e.__traceback__)
            raise CaptureError(f"tracecache.torch: the program reads a tensor's value into Python (.item(), "
                               f"bool(), a data-dependent branch){f' (at {frame})' if frame else ''}; a "
                               f"captured graph cannot depend on values, and graph breaks are not "
                               f"supported") from None
        _count += 1
    return Capture(graph, list(state_names) + list(input_names), len(state))


def capture_module(module, inputs, input_names=None, state=None):
    """Captures `module(*inputs)` with its parameters and buffers as the first placeholders,
    by `state_dict` name. `state` (optional) is `module_state(module)`, computed if absent."""
    state = state if state is not None else module_state(module)
    names = [n for n, _ in state]
    # A parameter frozen with requires_grad_(False) would let PyTorch take its fused inference
    # paths (_native_multi_head_attention); an alias that requires grad (same storage) keeps the
    # composite ones.
    state = [(n, torch.nn.Parameter(t.detach(), requires_grad=True)
              if isinstance(t, torch.nn.Parameter) and t.is_floating_point() and not t.requires_grad else t)
             for n, t in state]
    input_names = input_names or [f"input{i}" for i in range(len(inputs))]

    def call(*args):
        params = dict(zip(names, args[:len(names)]))
        return stateless.functional_call(module, params, tuple(args[len(names):]))

    return capture(call, names, [t for _, t in state], input_names, inputs)
