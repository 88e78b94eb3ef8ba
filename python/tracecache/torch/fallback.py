"""Graph breaks: the ATen ops tracecache runs in PyTorch, on the host, between its graphs.

The lowering (`Lowerer.host_op`) describes such an op as a *payload*: JSON naming the op
(`aten.cumsum.default`), its arguments with each tensor replaced by its position among the op's
tensor inputs (`{"t": 0}`), and which of its results are tensors. The payload is stored with the
compiled function's guard entry (in the cache, and in a remote tier), so a new process runs the
break without capturing anything: `run(payload, arrays)` is the runner every compiled function of
`tracecache.torch` passes to `tracecache.compile(host_op=...)`.

Payloads come from the cache: untrusted. `run` resolves only ops of the `aten`, `prims` and
`torchvision` namespaces by their registered name (never Python objects), checks the arguments
against the op's schema (a tensor where the schema has a tensor, a plain value elsewhere), never
writes to its inputs (an in-place op runs on a copy of what it writes), and returns only
tensors of tracecache's dtypes. Anything else raises ValueError, which the compiled function
treats as an entry it cannot use (the call traces instead).

Thread-safety: `run` may be called from any thread holding the GIL; the decode cache is guarded
by the GIL. Errors: `TypeError` from `encode_argument` for a value a payload cannot hold;
`ValueError` from `run` for a payload that does not decode or check.
"""

import functools
import json
import math
import warnings

import numpy as np
import torch

__all__ = ["encode_argument", "payload", "run", "describe", "runnable"]

_NAMESPACES = ("aten", "prims", "torchvision")
# The dtypes a graph break's results may have: those NumPy holds too (a bf16 result is refused:
# host ops exchange NumPy arrays, and NumPy has no bfloat16).
_HELD = {torch.float32: np.float32, torch.int64: np.int64, torch.int32: np.int32, torch.bool: np.bool_,
         torch.float64: np.float64, torch.float16: np.float16, torch.int8: np.int8, torch.uint8: np.uint8,
         torch.int16: np.int16}
_MAX_DEPTH = 8


def encode_argument(v, depth=0):
    """A plain argument value as JSON: numbers (non-finite floats spelled), strings, None, lists
    and tuples of them, dtypes, devices, layouts and memory formats. TypeError otherwise."""
    if depth > _MAX_DEPTH:
        raise TypeError("an argument nested too deeply")
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else {"float": repr(v)}
    if isinstance(v, (list, tuple)):
        return {"list" if isinstance(v, list) else "tuple": [encode_argument(x, depth + 1) for x in v]}
    if isinstance(v, torch.dtype):
        return {"dtype": str(v).removeprefix("torch.")}
    if isinstance(v, torch.device):
        return {"device": str(v)}
    if isinstance(v, torch.layout):
        return {"layout": str(v).removeprefix("torch.")}
    if isinstance(v, torch.memory_format):
        return {"memory_format": str(v).removeprefix("torch.")}
    raise TypeError(f"an argument of type {type(v).__name__}")


def payload(op, args, kwargs, tensor_results):
    """The stored description of a break: op name, encoded arguments, and per result whether it
    is a tensor (the runner returns the tensors only, in order)."""
    return json.dumps({"op": op, "args": args, "kwargs": kwargs, "results": tensor_results},
                      sort_keys=True, separators=(",", ":")).encode()


def describe(data):
    """The op a payload names, for messages ("aten.cumsum.default"); "?" if it does not decode."""
    try:
        return str(json.loads(bytes(data))["op"])
    except (ValueError, KeyError, TypeError):
        return "?"


def runnable(name):
    """Why op `name` cannot run as a graph break, or None when it can (an op overload of an
    allowed namespace)."""
    try:
        _resolve(name)
    except ValueError as e:
        return str(e)
    return None


def _resolve(name):
    parts = name.split(".") if isinstance(name, str) else []
    if len(parts) != 3 or parts[0] not in _NAMESPACES or not all(p.isidentifier() for p in parts):
        raise ValueError(f"graph break names an op outside {', '.join(_NAMESPACES)}: {name!r}")
    try:
        packet = getattr(getattr(torch.ops, parts[0]), parts[1])
        op = getattr(packet, parts[2])
    except (AttributeError, RuntimeError) as e:
        raise ValueError(f"graph break names an unknown op {name!r}") from e
    if not isinstance(op, torch._ops.OpOverload):
        raise ValueError(f"graph break names {name!r}, which is not an op overload")
    return op


def _decode_value(v, count, depth=0):
    """A stored argument back as Python, tensors as ("t", index). ValueError if malformed."""
    if depth > _MAX_DEPTH:
        raise ValueError("graph break argument nested too deeply")
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, dict) and len(v) == 1:
        (kind, x), = v.items()
        if kind == "t" and isinstance(x, int) and not isinstance(x, bool) and 0 <= x < count:
            return ("t", x)
        if kind in ("list", "tuple") and isinstance(x, list):
            items = [_decode_value(i, count, depth + 1) for i in x]
            return items if kind == "list" else tuple(items)
        if kind == "float" and x in ("inf", "-inf", "nan"):
            return float(x)
        if kind == "dtype" and isinstance(x, str) and isinstance(getattr(torch, x, None), torch.dtype):
            return getattr(torch, x)
        if kind == "device" and x == "cpu":
            return torch.device("cpu")
        if kind == "layout" and isinstance(x, str) and isinstance(getattr(torch, x, None), torch.layout):
            return getattr(torch, x)
        if kind == "memory_format" and isinstance(x, str) and isinstance(getattr(torch, x, None), torch.memory_format):
            return getattr(torch, x)
    raise ValueError(f"graph break has a malformed argument {v!r:.80}")


class _Break:
    """A decoded payload: the op, its arguments (tensors as ("t", i)), which schema arguments it
    writes, and which results are tensors."""

    def __init__(self, data, num_inputs):
        try:
            spec = json.loads(data)
        except (ValueError, UnicodeDecodeError) as e:
            raise ValueError("graph break payload is not JSON") from e
        if not isinstance(spec, dict) or not isinstance(spec.get("args"), list) or \
                not isinstance(spec.get("kwargs"), dict) or not isinstance(spec.get("results"), list) or \
                not all(isinstance(r, bool) for r in spec["results"]):
            raise ValueError("graph break payload is malformed")
        self.op = _resolve(spec.get("op"))
        self.args = [_decode_value(a, num_inputs) for a in spec["args"]]
        self.kwargs = {str(k): _decode_value(v, num_inputs) for k, v in spec["kwargs"].items()}
        self.results = spec["results"]
        schema = self.op._schema
        if len(self.args) > len(schema.arguments):
            raise ValueError(f"graph break passes {len(self.args)} arguments to {spec['op']}")
        names = {a.name for a in schema.arguments}
        if not set(self.kwargs) <= names:
            raise ValueError(f"graph break passes an argument {spec['op']} does not take")
        self.writes = {i for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write}
        self.write_names = {schema.arguments[i].name for i in self.writes}


@functools.lru_cache(maxsize=1024)
def _decoded(data, num_inputs):
    return _Break(data, num_inputs)


def _bind(v, tensors):
    if isinstance(v, tuple) and len(v) == 2 and v[0] == "t":
        return tensors[v[1]]
    if isinstance(v, list):
        return [_bind(x, tensors) for x in v]
    if isinstance(v, tuple):
        return tuple(_bind(x, tensors) for x in v)
    return v


def run(data, arrays):
    """Runs a graph break: `data` its payload, `arrays` its tensor inputs as (read-only) NumPy
    arrays. Returns its tensor results as C-contiguous NumPy arrays of tracecache's dtypes."""
    brk = _decoded(bytes(data), len(arrays))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        tensors = [torch.from_numpy(a) for a in arrays]
    args = [_bind(a, tensors) for a in brk.args]
    kwargs = {k: _bind(v, tensors) for k, v in brk.kwargs.items()}
    # Inputs are tracecache's values, which never change: an op that writes runs on a copy.
    for i in brk.writes:
        if i < len(args) and isinstance(args[i], torch.Tensor):
            args[i] = args[i].clone()
    for k in brk.write_names & set(kwargs):
        if isinstance(kwargs[k], torch.Tensor):
            kwargs[k] = kwargs[k].clone()
    with torch.no_grad():
        out = brk.op(*args, **kwargs)
    items = list(out) if isinstance(out, (tuple, list)) else [out]
    if len(items) != len(brk.results):
        raise ValueError(f"graph break {brk.op} gave {len(items)} results, its payload says {len(brk.results)}")
    arrays_out = []
    for item, is_tensor in zip(items, brk.results):
        if not is_tensor:
            continue
        if not isinstance(item, torch.Tensor) or item.dtype not in _HELD:
            raise ValueError(f"graph break {brk.op} gave {type(item).__name__} "
                             f"{getattr(item, 'dtype', '')} where a tensor of a tracecache dtype was traced")
        a = item.detach().numpy()
        # Not np.ascontiguousarray: it makes a rank-0 result (torch.min of a vector) rank 1.
        arrays_out.append(a if a.flags.c_contiguous else a.copy(order="C"))
    return arrays_out
