"""Errors of PyTorch capture.

A capture or lowering that cannot be done raises `CaptureError`: the message names the ATen op
(`aten.xxx.overload`) and the user's source line that produced it, from the frames the capture
recorded for the FX node (`node.meta["frames"]`, see capture.py). There is never a silent
fallback to PyTorch.
"""

import linecache
import os
import re
import traceback

import torch

__all__ = ["CaptureError", "UnsupportedOpError", "user_frame", "user_frame_of_traceback", "skipped_file"]

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
# The whole tracecache package (tracecache.torch and the compiled-function wrapper around it).
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SKIP_DIRS = [_TORCH_DIR, _PACKAGE_DIR, os.path.join(os.path.dirname(_TORCH_DIR), "functorch"),
              os.path.dirname(os.path.abspath(re.__file__))]


class CaptureError(Exception):
    """A PyTorch program tracecache cannot capture or lower (an unmapped op, an unsupported
    argument, an aliasing pattern it cannot express). The message names the op and the line."""


class UnsupportedOpError(CaptureError):
    """An ATen op with no lowering to tracecache ops; `op` is its name (`aten.xxx.overload`)."""

    def __init__(self, message, op):
        super().__init__(message)
        self.op = op


def skipped_file(path):
    """Whether a frame of `path` is not the user's: PyTorch's, functorch's, the standard
    library's, tracecache's own, or generated code."""
    if path.startswith("<"):
        return True
    path = os.path.abspath(path)
    return any(path == d or path.startswith(d + os.sep) for d in _SKIP_DIRS)


def user_frame(frames):
    """The innermost of `frames` ((file, line, function) tuples, innermost first) that is not
    PyTorch's, functorch's, the standard library's or this package's own code, as
    `'file.py:12 in forward: y = f(x)'`; None when there is none."""
    for path, line, function in frames or ():
        if skipped_file(path):
            continue
        code = linecache.getline(path, line).strip()
        where = f"{path}:{line} in {function}"
        return f"{where}: {code}" if code else where
    return None


def user_frame_of_traceback(tb):
    """The innermost user frame of an exception's traceback, as `user_frame` formats it."""
    frames = [(f.filename, f.lineno, f.name) for f in traceback.extract_tb(tb, limit=None)]
    return user_frame(list(reversed(frames)))
