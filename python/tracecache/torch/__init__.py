"""PyTorch capture for tracecache (`tracecache.torch`, docs/python.md).

- `compile(module_or_fn)`: a callable that runs the module as cached tracecache graphs and
  returns torch tensors; in once mode a new process with the same cache database does zero
  captures and zero compiles.
- `export(module, inputs, path)`: a module as a `.trace` program plus `.safetensors` weights
  (also `python3 -m tracecache.torch export`); needs no session.
- `compile_step(fn, model, optimizer)`: a whole training step (forward, backward, clipping,
  optimizer step) as one graph; the new weights and optimizer state are written back.
- `stats()`: this process's captures and lowerings.

Every ATen op is lowered by the one mapping in `lowering.py`; an op without a mapping is a
`CaptureError` naming the op and the user's source line.
"""

from .compiled import CompiledModule, compile, mark_dynamic, mark_static, stats
from .errors import CaptureError, UnsupportedOpError
from .explain import ExplainOutput, GraphBreak, explain
from .export import ExportInput, ExportResult, export
from .step import CompiledStep, compile_step

__all__ = ["CaptureError", "UnsupportedOpError", "CompiledModule", "CompiledStep", "compile", "compile_step",
           "explain", "ExplainOutput", "GraphBreak", "mark_dynamic", "mark_static", "stats", "ExportInput", "ExportResult", "export"]
