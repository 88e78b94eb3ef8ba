"""Emitter (a): the lowered op calls as a `.trace` program (docs/trace-format.md).

`TraceEmitter` collects declarations and op lines; `render(outputs)` drops every line the
outputs do not need and returns the program text. Identifiers follow the format's rules
(`[A-Za-z_][A-Za-z0-9_]*`, not a reserved word): a `state_dict` name is spelled with its dots
as underscores (`layer1.0.conv1.weight` -> `layer1_0_conv1_weight`, made unique with a `_N`
suffix if needed); the exact name stays in the declaration's `safetensors(...)` call, and
`names` maps every identifier back to it.

Not thread-safe. Errors: `ValueError` for an attribute value the format cannot spell.
"""

import math
import re

from .errors import CaptureError
from .lowering import TORCH_DTYPES, DType

__all__ = ["TraceEmitter", "identifier", "format_type"]

_RESERVED = {"tracecache", "steps", "dim", "input", "param", "output", "true", "false", "inf", "nan",
             "bool", "i32", "i64", "f32"}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def identifier(name, taken):
    """A trace identifier for `name`, not in `taken` (which it is then added to)."""
    base = re.sub(r"[^A-Za-z0-9_]", "_", name)
    if not base or not _IDENT.match(base) or base in _RESERVED:
        base = "t_" + base
    ident, k = base, 1
    while ident in taken:
        ident = f"{base}_{k}"
        k += 1
    taken.add(ident)
    return ident


def format_type(dtype, shape):
    return f"{dtype}[{', '.join(str(int(d)) for d in shape)}]"


def _number(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    text = repr(float(v))
    return text if any(c in text for c in ".en") else text + ".0"


def _attr(v):
    if isinstance(v, DType):
        return str(v)
    if isinstance(v, (list, tuple)):
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            raise ValueError(f"attribute list {list(v)} holds a non-integer; trace attributes lists are ints")
        return "[" + ", ".join(str(x) for x in v) + "]"
    if isinstance(v, (bool, int, float)):
        return _number(v)
    raise ValueError(f"attribute value {v!r} has no trace spelling")


class TraceEmitter:
    """Collects a trace program. `declare_param`/`declare_input` return the handles of the
    placeholders; `op` and `constant` are the emitter interface the lowering calls."""

    def __init__(self, weights_file):
        self.weights_file = weights_file
        self.taken = set()
        self.names = {}
        self.decls = []
        self.lines = []
        self.constants = []
        self._hint = "v"
        self._count = 0
        self._defined = {}
        self.output_names = []

    def hint(self, name):
        """Names the results of the following ops after the FX node being lowered: the first
        one as the node, the others `<node>__1`, `<node>__2`, ..."""
        self._hint = name
        self._count = 0

    def declare_param(self, state_name, dtype, shape):
        ident = identifier(state_name, self.taken)
        self.names[ident] = state_name
        self.decls.append((ident, f"param {ident} : {format_type(dtype, shape)} = "
                                  f"safetensors({_string(self.weights_file)}, {_string(state_name)})"))
        return ident

    def declare_input(self, name, dtype, shape, generator):
        if not _IDENT.match(name) or name in _RESERVED:
            raise ValueError(f"input name '{name}' is not a trace identifier ([A-Za-z_][A-Za-z0-9_]*, "
                             f"not a reserved word)")
        if name in self.taken:
            raise ValueError(f"input name '{name}' is already the name of a parameter or input")
        self.taken.add(name)
        self.decls.append((name, f"input {name} : {format_type(dtype, shape)} = {generator}"))
        return name

    def constant(self, target, tensor):
        key = f"tracecache.constant.{target}"
        ident = self.declare_param(key, TORCH_DTYPES[tensor.dtype], tensor.shape)
        self.constants.append((key, tensor))
        return ident

    def read(self, handle):
        raise CaptureError("tracecache.torch: the program reads a tensor's value into Python (.item(), bool(), "
                           "a data-dependent branch); a trace program cannot: export a module without value reads")

    def op(self, name, inputs, attrs):
        ident = identifier(self._hint if not self._count else f"{self._hint}__{self._count}", self.taken)
        self._count += 1
        attr_text = [f"{k}={_attr(v)}" for k, v in attrs.items()]
        self.lines.append((ident, name, list(inputs), attr_text))
        self._defined[ident] = len(self.lines) - 1
        return ident

    def render(self, outputs, header=()):
        """The program text whose `output` line lists `outputs` (handles), with only the lines
        and declarations they need. An op result that is an output is renamed `out<k>`;
        `output_names` holds the names the output line uses."""
        needed = set()
        stack = [o for o in outputs]
        while stack:
            h = stack.pop()
            if h in needed:
                continue
            needed.add(h)
            if h in self._defined:
                stack.extend(self.lines[self._defined[h]][2])
        rename = {}
        for k, h in enumerate(outputs):
            if h in self._defined and h not in rename:
                new = f"out{k}" if f"out{k}" not in self.taken else identifier(f"out{k}", self.taken)
                self.taken.add(new)
                rename[h] = new
        text = ["tracecache 1"] + [f"# {line}" for line in header]
        text += [decl for ident, decl in self.decls if ident in needed]
        for ident, op, inputs, attr_text in self.lines:
            if ident in needed:
                args = ", ".join([rename.get(i, i) for i in inputs] + attr_text)
                text.append(f"{rename.get(ident, ident)} = {op}({args})")
        self.output_names = [rename.get(h, h) for h in outputs]
        text.append("output " + ", ".join(self.output_names))
        return "\n".join(text) + "\n"


def _string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
