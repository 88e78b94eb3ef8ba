"""PyTorch capture for tracecache (`tracecache.torch`).

- `export(module, inputs, path)`: a module as a `.trace` program plus `.safetensors` weights
  (also `python3 -m tracecache.torch export`); needs no tracecache bindings.

Every ATen op is lowered by the one mapping in `lowering.py`; an op without a mapping is a
`CaptureError` naming the op and the user's source line.
"""

from .errors import CaptureError, UnsupportedOpError
from .export import ExportInput, ExportResult, export

__all__ = ["CaptureError", "UnsupportedOpError", "ExportInput", "ExportResult", "export"]
