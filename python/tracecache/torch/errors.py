"""Errors of PyTorch capture.

A capture or lowering that cannot be done raises `CaptureError`: the message names the ATen op
(`aten.xxx.overload`) and the user's source line that produced it, from the FX node's stack
metadata. There is never a silent fallback to PyTorch.
"""

import os
import re
import traceback

import torch

__all__ = ["CaptureError", "UnsupportedOpError", "user_frame", "user_frame_of_traceback"]

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_SKIP_DIRS = [_TORCH_DIR, _PACKAGE_DIR, os.path.join(os.path.dirname(_TORCH_DIR), "functorch"),
              os.path.dirname(os.path.abspath(re.__file__))]
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (.*)$')


class CaptureError(Exception):
    """A PyTorch program tracecache cannot capture or lower (an unmapped op, an unsupported
    argument, an aliasing pattern it cannot express). The message names the op and the line."""


class UnsupportedOpError(CaptureError):
    """An ATen op with no lowering to tracecache ops; `op` is its name (`aten.xxx.overload`)."""

    def __init__(self, message, op):
        super().__init__(message)
        self.op = op


def _skipped(path):
    path = os.path.abspath(path)
    return any(path == d or path.startswith(d + os.sep) for d in _SKIP_DIRS)


def user_frame(stack_trace):
    """The innermost frame of an FX node's recorded stack that is not PyTorch's, functorch's,
    the standard library's or this package's own code: `'file.py:12 in forward: y = f(x)'`, or
    None when the node has no stack (or every frame is library code)."""
    if not stack_trace:
        return None
    lines = stack_trace.splitlines()
    for i, line in enumerate(lines):
        m = _FRAME.match(line)
        if not m or _skipped(m.group(1)):
            continue
        code = ""
        if i + 1 < len(lines) and not _FRAME.match(lines[i + 1]):
            code = lines[i + 1].strip()
        where = f"{m.group(1)}:{m.group(2)} in {m.group(3)}"
        return f"{where}: {code}" if code else where
    return None


def user_frame_of_traceback(tb):
    """The innermost user frame of an exception's traceback, as `user_frame` formats it."""
    frames = traceback.extract_tb(tb)
    return user_frame("".join(traceback.format_list(list(reversed(frames)))))
