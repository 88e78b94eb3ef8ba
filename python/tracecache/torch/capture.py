"""Capture of a PyTorch module or function as one ATen graph, with `make_fx`.

`capture(fn, state, inputs)` traces `fn` with `torch.fx.experimental.proxy_tensor.make_fx` in
real mode: `fn` runs once on the given tensors and every ATen op it dispatches (the forward and,
for a training step, the backward and the optimizer's ops) becomes a node. A module is called
through `torch.nn.utils.stateless.functional_call` with its parameters and buffers as explicit
inputs, so they are graph placeholders named by their `state_dict` names, never constants.

Tracing runs with gradients enabled, so PyTorch takes its composite paths instead of fused fast
paths (`_native_multi_head_attention`, the nested-tensor encoder), and every node records the
Python stack that produced it (for error messages naming the user's line).

Value reads are recorded, not refused: `.item()`, `bool(t)`, `int(t)`, `if t > 0:` (ATen's
`_local_scalar_dense`), `.tolist()` and `.numpy()` run on the real tensor during the capture and
leave a `read_value(t)` node in the graph, so the lowering reads the same value through
tracecache (a value guard between graphs: replay/engine/compiled_function.h). Everything the program
then did with the Python value (a branch taken, a number used in later ops) is baked into the
graph and valid exactly while the guard holds. Ops whose result *shape* depends on the data
(`nonzero`, `masked_select`, ...) are kept in the graph even when only their shape was used.
A capture that read values (`Capture.data_dependent`) holds for those values only: callers do
not reuse it for another call.

Not thread-safe: it wraps methods of PyTorch's tracer class and of `torch.Tensor` for the
duration of a capture (to record each node's frames and the value reads).
Errors: anything the traced code raises, unchanged.
"""

import contextlib
import sys
import threading

import torch
from torch.fx.experimental import proxy_tensor
from torch.nn.utils import stateless

from torch.utils import _python_dispatch

__all__ = ["Capture", "capture", "capture_module", "module_state", "captures", "read_value", "is_data_dependent"]

_aten = torch.ops.aten


def read_value(t):
    """The target of a value-read node: the traced program read tensor `t` into Python. Calling
    it returns `t` (it exists to name the node)."""
    return t


def is_data_dependent(node):
    """Whether an FX node reads a value into Python or makes a result whose shape depends on the
    data: such a node is lowered even when nothing uses its result (its value or shape was used)."""
    if node.op != "call_function":
        return False
    if node.target is read_value:
        return True
    tags = getattr(node.target, "tags", ())
    return torch.Tag.dynamic_output_shape in tags or torch.Tag.data_dependent_output in tags

_lock = threading.Lock()
_count = 0


def captures():
    """How many graphs this process has captured (each `make_fx` run is one)."""
    return _count


def uncount_captures(n):
    """Takes `n` captures back from the count (explain's, which compile nothing)."""
    global _count
    _count -= n


def _record_read(t):
    """During a capture: adds a `read_value(t)` node for real tensor `t` (tracked by the active
    proxy mode), so the lowering reads it too. Returns whether a node was added."""
    mode = _python_dispatch._get_current_dispatch_mode()
    tracer = getattr(mode, "tracer", None)
    if tracer is None or not proxy_tensor.has_proxy_slot(t, tracer):
        return False
    proxy = proxy_tensor.get_proxy_slot(t, tracer, None, lambda x: x.proxy)
    tracer.create_proxy("call_function", read_value, (proxy,), {})
    return True


def _local_scalar_dense(t):
    """`.item()`, `bool()`, `int()`, `float()` of a traced tensor: recorded, then the real value."""
    _record_read(t)
    with proxy_tensor.disable_proxy_modes_tracing():
        return _aten._local_scalar_dense.default(t)


_DECOMPOSITIONS = {_aten._local_scalar_dense.default: _local_scalar_dense}


@contextlib.contextmanager
def _recording_reads():
    """Records `.tolist()` and `.numpy()` of traced tensors, which read the data without an
    ATen op (so make_fx alone would not see them)."""
    originals = {name: getattr(torch.Tensor, name) for name in ("tolist", "numpy")}

    def wrap(name):
        original = originals[name]

        def read(self, *args, **kwargs):
            mode = _python_dispatch._get_current_dispatch_mode()
            if mode is not None and _record_read(self):
                with proxy_tensor.disable_proxy_modes_tracing():
                    return original(self, *args, **kwargs)
            return original(self, *args, **kwargs)
        read.__name__ = name
        return read

    try:
        for name in originals:
            setattr(torch.Tensor, name, wrap(name))
        yield
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


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
    order (the state names first, then the input names), `num_state` (how many of the
    placeholders are state: parameters and buffers), and `data_dependent`: the program read a
    value or made a data-dependent shape, so the graph holds for this call's values only."""

    def __init__(self, graph, names, num_state):
        self.graph = graph
        self.names = names
        self.num_state = num_state
        self.data_dependent = any(is_data_dependent(n) for n in graph.graph.nodes)


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
    with _lock, _recording_frames(), _recording_reads(), torch.enable_grad():
        graph = proxy_tensor.make_fx(fn, decomposition_table=_DECOMPOSITIONS)(*args)
        _count += 1
    return Capture(graph, list(state_names) + list(input_names), len(state))


def capture_module(module, inputs, input_names=None, state=None, rebuild=None):
    """Captures `module(*inputs)` with its parameters and buffers as the first placeholders,
    by `state_dict` name. `state` (optional) is `module_state(module)`, computed if absent.
    `rebuild` (optional) turns the input tensors into the call's (args, kwargs), for a call
    whose tensors sit in lists, dicts or keywords."""
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
        if rebuild is None:
            return stateless.functional_call(module, params, tuple(args[len(names):]))
        call_args, call_kwargs = rebuild(args[len(names):])
        return stateless.functional_call(module, params, tuple(call_args), call_kwargs)

    return capture(call, names, [t for _, t in state], input_names, inputs)
