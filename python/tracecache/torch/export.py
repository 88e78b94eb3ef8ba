"""Export: a PyTorch module captured as a `.trace` program plus `.safetensors` weights.

`export(module, inputs, path)` captures `module(*inputs)` (its parameters and buffers as
explicit inputs, by `state_dict` name), lowers it with the one mapping (`lowering.py`) onto
the trace emitter, and writes `path` and, next to it, `<stem>.safetensors` holding every
parameter and buffer by its `state_dict` name. The program runs with `tracecache run path`.

Needs no tracecache bindings. Errors: `CaptureError` (an op it cannot lower, naming the op and
the user's line), `ValueError` (a bad input name or dtype), `OSError` (writing the files).
"""

import os

import torch

from . import capture as capture_mod
from . import safetensors
from .emit_trace import TraceEmitter
from .errors import CaptureError
from .lowering import TORCH_DTYPES, lower

__all__ = ["ExportInput", "ExportResult", "export"]


class ExportInput:
    """An input of the exported program: its name, an example tensor (the capture runs on it),
    and the trace generator that makes its value in the program (`normal(seed=1)`,
    `npy("x.npy")`, ...)."""

    def __init__(self, name, example, generator):
        self.name = name
        self.example = example
        self.generator = generator


class ExportResult:
    """What `export` wrote: `trace_path`, `weights_path`, `names` (trace identifier ->
    `state_dict` name, for every parameter and buffer the program declares) and `outputs`
    (the output names, in order)."""

    def __init__(self, trace_path, weights_path, names, outputs):
        self.trace_path = trace_path
        self.weights_path = weights_path
        self.names = names
        self.outputs = outputs


def export(module, inputs, path, header=()):
    """Captures `module` on the example inputs (`ExportInput`s) and writes the program to
    `path` and its weights to `<stem>.safetensors` next to it."""
    if isinstance(module, torch.nn.Module):
        state = capture_mod.module_state(module)
        graph = capture_mod.capture_module(module, [i.example for i in inputs], [i.name for i in inputs], state)
    else:
        state = []
        graph = capture_mod.capture(module, [], [], [i.name for i in inputs], [i.example for i in inputs])
    stem = os.path.splitext(os.path.basename(path))[0]
    weights_name = stem + ".safetensors"
    emitter = TraceEmitter(weights_name)
    bindings = []
    for name, t in state:
        bindings.append(emitter.declare_param(name, _dtype(t, f"parameter or buffer '{name}'"), t.shape))
    for i in inputs:
        bindings.append(emitter.declare_input(i.name, _dtype(i.example, f"input '{i.name}'"), i.example.shape,
                                              i.generator))
    lowered = lower(graph.graph, emitter, bindings)
    outputs = []
    for k, v in enumerate(lowered.outputs):
        if not hasattr(v, "handle"):
            raise CaptureError(f"tracecache.torch: output {k} of the module is {v!r}, not a tensor; "
                               f"a trace program outputs tensors only")
        outputs.append(v.handle)
    if lowered.updates:
        names = ", ".join(graph.names[i] for i in sorted(lowered.updates))
        raise CaptureError(f"tracecache.torch: the module modifies {names} in place (a training-mode "
                           f"batch norm?); export captures inference: call module.eval() first")
    text = emitter.render(outputs, header)
    directory = os.path.dirname(os.path.abspath(path))
    weights_path = os.path.join(directory, weights_name)
    safetensors.write(weights_path, [(n, t) for n, t in state] + emitter.constants)
    with open(path, "w") as f:
        f.write(text)
    return ExportResult(path, weights_path, emitter.names, emitter.output_names)


def _dtype(t, what):
    d = TORCH_DTYPES.get(t.dtype)
    if d is None:
        raise ValueError(f"{what} has dtype {t.dtype}; tracecache has float32, int64, int32 and bool")
    return d
