"""The one mapping from ATen ops to tracecache registry ops.

`LOWERINGS`, the op table (`lowering_table.py`), maps an ATen overload
(`"aten.convolution.default"`) to a function that receives the lowering context (this module's
`Lowerer`) and the FX node and returns the node's value(s) made of tracecache op calls (registry
op name, tensor inputs, attributes by registry name). The functions live in `lowerings/`, one
module per op family, each registering its ops with `@lowers`; this module is the Lowerer they
share and the vocabulary they use (`Value`, `DType`, ...). The calls go to an *emitter*:
`emit_trace.TraceEmitter` writes `.trace` program lines, `emit_live.LiveEmitter` applies
`tracecache.op` on lazy tensors. Both see exactly the same calls, so the exported program and
the compiled function cannot disagree.

Semantics follow PyTorch 1.13. Where the registry has no op of its own, the lowering is a
composition of registry ops (the `ops` of its registration say which); `table()` lists every
mapping, and docs/python.md holds that table (a test checks it is current).

In-place ATen ops (`relu_`, `add_`, `copy_`, ...) are lowered as their functional form: the
node's result replaces the mutated value (FX already refers to the newest node for later uses).
What that cannot express is refused with a `CaptureError`: mutating a view, or mutating a
tensor while a view of it is read later. A mutated placeholder (an optimizer updating a
parameter in place, a batch norm's running statistics) is recorded in `Lowered.updates`.

Not thread-safe per `Lowerer`; the tables are read-only after import.
"""

import operator

import torch
from torch.fx.passes.shape_prop import TensorMetadata
from torch.utils import _pytree as pytree

from . import fallback
from .capture import is_data_dependent, read_value
from .errors import CaptureError, UnsupportedOpError, user_frame
from .lowering_table import LOWERINGS, lowers, table  # noqa: F401 (the lowerings and docs import them from here)

__all__ = ["DType", "Value", "Lowered", "Lowerer", "lower", "LOWERINGS", "table", "TORCH_DTYPES"]

TORCH_DTYPES = {torch.float32: "f32", torch.int64: "i64", torch.int32: "i32", torch.bool: "bool",
                torch.float64: "f64", torch.bfloat16: "bf16", torch.float16: "f16", torch.int8: "i8",
                torch.uint8: "u8", torch.int16: "i16"}
_TORCH_OF = {v: k for k, v in TORCH_DTYPES.items()}
_INT64_MAX = 9223372036854775807



def output_structure(outputs):
    """pytree.tree_flatten of a graph's outputs (its output node's argument), with the spec in
    plain Python containers: torch.fx keeps a function's dict and list results as its immutable
    collections, which the caller should not get back (and which have no stored form)."""
    leaves, spec = pytree.tree_flatten(outputs)
    return leaves, _plain_spec(spec)


def _plain_spec(spec):
    if isinstance(spec, pytree.LeafSpec):
        return spec
    kind = spec.type
    if issubclass(kind, dict) and kind is not dict:
        kind = dict
    elif issubclass(kind, list) and kind is not list:
        kind = list
    return pytree.TreeSpec(kind, spec.context, [_plain_spec(c) for c in spec.children_specs])

class DType(str):
    """A dtype attribute value (`f32`, `bf16`, `i64`, ...: TORCH_DTYPES' names), so emitters can spell it."""


class Value:
    """A lowered tensor: the emitter's handle, its tracecache dtype and its shape."""
    __slots__ = ("handle", "dtype", "shape")

    def __init__(self, handle, dtype, shape):
        self.handle = handle
        self.dtype = dtype
        self.shape = tuple(int(d) for d in shape)

    def __repr__(self):
        return f"Value({self.handle!r}, {self.dtype}{list(self.shape)})"


class _PoolIndices:
    """The indices output of `max_pool2d_with_indices`: only its backward may read them (it
    recomputes the argmax from the input), anything else is refused."""

    def __init__(self, node):
        self.node = node


class Lowered:
    """A lowered graph: `outputs` (Values or plain Python numbers, flattened), `out_spec` (the
    pytree spec that rebuilds the function's output structure) and `updates`, a dict from
    placeholder index to the Value it holds after the graph (mutated inputs)."""

    def __init__(self, outputs, out_spec, updates):
        self.outputs = outputs
        self.out_spec = out_spec
        self.updates = updates
        self.breaks = []


def _dtype_of(torch_dtype, what):
    d = TORCH_DTYPES.get(torch_dtype)
    if d is None:
        raise CaptureError(f"{what} has dtype {torch_dtype}; tracecache holds float32, float64, bfloat16, "
                           f"float16, int64, int32, int16, int8, uint8 and bool (convert it first)")
    return d


def _promote(a, b):
    """torch.promote_types on tracecache dtype names (the C++ inference rules follow it too)."""
    return TORCH_DTYPES[torch.promote_types(_TORCH_OF[a], _TORCH_OF[b])]


def _broadcast(*shapes):
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        dims = [s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0]
        big = [d for d in dims if d != 1]
        out.append(big[0] if big else 1)
    return tuple(out)


class _Args:
    """A node's arguments by schema name, defaults filled, nodes replaced by their values."""

    def __init__(self, values):
        self.__dict__.update(values)


class Lowerer:
    """Lowers one captured FX graph onto an emitter. `bindings` are the emitter's handles of the
    placeholders, in order.

    Graph breaks: when `breaks` is true and the emitter has `host_op`, an ATen op with no
    lowering (or whose lowering refuses this use of it, a CaptureError) is not an error: it
    becomes a host op that PyTorch runs on the host (see `host_op_payload` and fallback.py), and
    `self.breaks` lists each one as (op, reason, where). A value the program read into Python
    (`capture.read_value` nodes) is read through the emitter's `read`, which in a compiled
    function's trace makes a value guard."""

    def __init__(self, graph_module, emitter, bindings, breaks=False, seed=None):
        self.gm = graph_module
        self.seed = seed  # the i64[2] (seed, offset) Value random ops draw from, or None
        self._streams = 0
        self.graph = graph_module.graph
        self.emitter = emitter
        self.bindings = list(bindings)
        self.allow_breaks = breaks and hasattr(emitter, "host_op")
        self.breaks = []
        self._note_result = getattr(emitter, "note_result", None)
        self.env = {}
        self.node = None
        self.updates = {}
        self._order = {n: i for i, n in enumerate(self.graph.nodes)}
        self._placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        self._alias_root = {}
        self._members = {}
        self._partial_base = {}
        self._mutated_at = {}
        self._view_parent = {}   # partial view node -> the node it is a view of
        self._view_parents = set()  # nodes some partial view is a view of (kept: writes go back)
        self._identity_views = set()  # in-place results on a partial view: the view itself
        self._view_made_at = {}  # partial view node -> when its value was last computed

    # -- errors ----------------------------------------------------------------------------

    def where(self, node=None):
        node = node or self.node
        frame = user_frame(node.meta.get("frames")) if node is not None else None
        return f" (at {frame})" if frame else ""

    def fail(self, message):
        raise CaptureError(f"tracecache.torch: {_op_name(self.node)}: {message}{self.where()}")

    # -- types and emission ----------------------------------------------------------------

    def meta(self, node=None):
        """The node's result type(s) as recorded by the capture: (dtype, shape) or a tuple."""
        node = node or self.node
        tm = node.meta.get("tensor_meta")
        if tm is None:
            items = {u.args[1]: u.meta.get("tensor_meta") for u in node.users if u.target is operator.getitem}
            if not items:
                self.fail("the capture recorded no tensor type for this op")
            tm = tuple(items.get(i) for i in range(max(items) + 1))

        def one(t):
            if t is None:
                return None
            return (_dtype_of(t.dtype, f"the result of {_op_name(node)}"), tuple(t.shape))

        if isinstance(tm, (tuple, list)) and not isinstance(tm, TensorMetadata):
            return tuple(one(t) for t in tm)
        return one(tm)

    def op(self, name, inputs, dtype, shape, /, **attrs):
        """Emits one registry op whose result type is known to be dtype[shape]. An emitter with
        `note_result(handle, shape)` is told each result's shape (specialize.py's binder)."""
        handle = self.emitter.op(name, [v.handle for v in inputs], attrs)
        if self._note_result is not None:
            self._note_result(handle, shape)
        return Value(handle, dtype, shape)

    def full(self, value, dtype, shape=()):
        return self.op("full", [], dtype, shape, shape=list(shape), value=float(value), dtype=DType(dtype))

    def tensor(self, x, dtype):
        """`x` as a Value: a Value as it is, a Python number as a rank-0 `full` of `dtype`."""
        if isinstance(x, Value):
            return x
        if isinstance(x, (bool, int, float)):
            return self.full(x, dtype)
        self.fail(f"expected a tensor or a number, got {type(x).__name__}")

    def cast(self, x, dtype):
        if x.dtype == dtype:
            return x
        return self.op("cast", [x], dtype, x.shape, dtype=DType(dtype))

    def unary(self, name, x, dtype=None):
        return self.op(name, [x], dtype or x.dtype, x.shape)

    def binary(self, name, a, b, dtype=None, compute=None):
        """An elementwise binary op with broadcasting. Numbers become rank-0 constants of the
        computation dtype: `compute`, else the other operand's dtype (else f32). Tensor operands
        are cast to `compute` first when it is given. The result is `dtype` (default: as the
        registry promotes)."""
        if not isinstance(a, Value) and not isinstance(b, Value):
            self.fail("an elementwise op of two numbers")
        like = compute or (a.dtype if isinstance(a, Value) else b.dtype)
        if compute is None and isinstance(a, Value) != isinstance(b, Value):
            number = b if isinstance(a, Value) else a
            if isinstance(number, float) and like != "f32":
                like = "f32"
        a, b = self.tensor(a, like), self.tensor(b, like)
        if compute:
            a, b = self.cast(a, compute), self.cast(b, compute)
        out = dtype or _promote(a.dtype, b.dtype)
        if name == "div":
            out = dtype or "f32"
        if name in ("eq", "lt", "gt"):
            out = "bool"
        return self.op(name, [a, b], out, _broadcast(a.shape, b.shape))

    def where_(self, cond, a, b, dtype):
        a, b = self.cast(self.tensor(a, dtype), dtype), self.cast(self.tensor(b, dtype), dtype)
        return self.op("where", [cond, a, b], dtype, _broadcast(cond.shape, a.shape, b.shape))

    def logical_not(self, x):
        return self.binary("eq", x, self.full(0, x.dtype))

    def reshape(self, x, shape):
        shape = tuple(shape)
        if x.shape == shape:
            return x
        return self.op("reshape", [x], x.dtype, shape, shape=list(shape))

    def transpose(self, x, d0, d1):
        d0, d1 = d0 % len(x.shape), d1 % len(x.shape)
        if d0 == d1:
            return x
        shape = list(x.shape)
        shape[d0], shape[d1] = shape[d1], shape[d0]
        return self.op("transpose", [x], x.dtype, shape, dim0=d0, dim1=d1)

    def permute(self, x, perm):
        perm = [p % len(x.shape) for p in perm]
        if perm == list(range(len(perm))):
            return x
        return self.op("permute", [x], x.dtype, [x.shape[p] for p in perm], perm=perm)

    def broadcast_to(self, x, shape):
        shape = tuple(shape)
        if x.shape == shape:
            return x
        return self.op("broadcast_to", [x], x.dtype, shape, shape=list(shape))

    def reduce(self, name, x, axes, keepdim=False):
        rank = len(x.shape)
        axes = sorted({a % rank for a in axes}) if axes else list(range(rank))
        shape = [1 if i in axes else d for i, d in enumerate(x.shape)] if keepdim else \
            [d for i, d in enumerate(x.shape) if i not in axes]
        dtype = {"sum": "f32" if x.dtype == "f32" else "i64", "mean": "f32"}.get(name, x.dtype)
        if rank == 0:
            return x if name != "sum" else self.cast(x, dtype)
        return self.op(name, [x], dtype, shape, axes=axes, keepdim=bool(keepdim))

    def matmul(self, a, b):
        sa, sb = list(a.shape), list(b.shape)
        va = [1] + sa if len(sa) == 1 else sa
        vb = sb + [1] if len(sb) == 1 else sb
        batch = list(_broadcast(tuple(va[:-2]), tuple(vb[:-2])))
        shape = batch + ([va[-2]] if len(sa) > 1 else []) + ([vb[-1]] if len(sb) > 1 else [])
        return self.op("matmul", [a, b], _promote(a.dtype, b.dtype), shape)

    def slice(self, x, axis, start, end, step=1):
        axis %= len(x.shape)
        n = x.shape[axis]
        start = 0 if start is None else start
        end = n if end is None else end
        s = min(max(start + n if start < 0 else start, 0), n)
        e = min(max(end + n if end < 0 else end, 0), n)
        e = max(e, s)
        if s == 0 and e == n and step == 1:
            return x
        shape = list(x.shape)
        shape[axis] = -(-(e - s) // step)
        return self.op("slice", [x], x.dtype, shape, axis=axis, start=s, end=e, step=step)

    def concat(self, xs, axis):
        axis %= len(xs[0].shape)
        shape = list(xs[0].shape)
        shape[axis] = sum(x.shape[axis] for x in xs)
        if len(xs) == 1:
            return xs[0]
        return self.op("concat", xs, xs[0].dtype, shape, axis=axis)

    def scale(self, x, factor):
        """x * factor, skipping the multiply for factor 1."""
        return x if factor == 1 else self.binary("mul", x, factor)

    # -- the walk --------------------------------------------------------------------------

    def args(self, node=None):
        """The node's arguments by schema name, defaults filled, nodes replaced by values."""
        node = node or self.node
        schema = node.target._schema
        values = {}
        for i, a in enumerate(schema.arguments):
            if i < len(node.args):
                v = node.args[i]
            elif a.name in node.kwargs:
                v = node.kwargs[a.name]
            elif a.has_default_value():
                v = a.default_value
            else:
                v = None
            values[a.name] = self.value_of(v)
        return _Args(values)

    def value_of(self, v):
        if isinstance(v, torch.fx.Node):
            if v not in self.env:
                self.fail(f"uses '{v.name}', which was not lowered")
            if v in self._partial_base:
                self._refresh_view(v)
            val = self.env[v]
            if isinstance(val, _PoolIndices) and not _op_name(self.node).startswith(
                    "aten.max_pool2d_with_indices_backward"):
                raise CaptureError(
                    f"tracecache.torch: {_op_name(self.node)}: reads the indices of max_pool2d_with_indices"
                    f"{self.where(val.node)}; tracecache's max_pool2d has no indices output (only its "
                    f"backward may use them){self.where()}")
            return val
        if isinstance(v, (list, tuple)):
            return type(v)(self.value_of(x) for x in v)
        return v

    def _live_nodes(self, output):
        """The nodes the outputs need, every op that writes a tensor in place (its write may be
        read through another node, or be an update of an input), and every value read or
        data-dependent shape (the program used its value or shape), with what they need."""
        live = set()
        stack = [output] + [n for n in self.graph.nodes if n.op == "call_function" and
                            (_mutated_arg(n) is not None or is_data_dependent(n))]
        while stack:
            n = stack.pop()
            if n not in live:
                live.add(n)
                stack.extend(n.all_input_nodes)
        return live

    def _last_uses(self, live):
        """node -> the node after which nothing reads it any more (its value can be dropped, so a
        graph break does not keep it alive). Lowerings may look through an argument to its own
        arguments (x @ t(w) reads w), so a node's inputs' inputs count as read by it too."""
        last = {}
        for n in self.graph.nodes:
            if n in live:
                for a in n.all_input_nodes:
                    last[a] = n
                    for b in a.all_input_nodes:
                        last[b] = n
        return last

    def _drop_dead(self, node, dead_after):
        for a in dead_after.get(node, ()):
            if a.op != "placeholder" and a not in self._alias_root and a not in self._members and \
                    a not in self._view_parents and a not in self._partial_base:
                self.env.pop(a, None)

    def run(self):
        output = next(n for n in self.graph.nodes if n.op == "output")
        live = self._live_nodes(output)
        dead_after = {}
        for a, n in self._last_uses(live).items():
            if n is not output:
                dead_after.setdefault(n, []).append(a)
        placeholders = iter(self.bindings)
        hint = getattr(self.emitter, "hint", None)
        for node in self.graph.nodes:
            self.node = node
            if hint is not None:
                hint(node.name)
            if node.op == "placeholder":
                handle = next(placeholders)
                tm = node.meta.get("tensor_meta")
                self.env[node] = Value(handle, _dtype_of(tm.dtype, f"input '{node.name}'"), tm.shape)
                continue
            if node not in live or node.op == "output":
                continue
            if node.op == "get_attr":
                t = getattr(self.gm, node.target)
                dtype = _dtype_of(t.dtype, f"the constant tensor '{node.target}'")
                self.env[node] = Value(self.emitter.constant(node.target, t), dtype, t.shape)
                continue
            if node.op != "call_function":
                self.fail(f"unexpected FX node kind '{node.op}'")
            if node.target is operator.getitem:
                seq = self.value_of(node.args[0])
                item = seq[node.args[1]]
                if item is None:
                    self.fail(f"result {node.args[1]} of {_op_name(node.args[0])} is not computed")
                self.env[node] = item
                if node.args[0] in self._partial_base:  # a piece of split/unbind/chunk: a view of its input
                    self._add_view(node, node.args[0].args[0])
                continue
            if node.target is read_value:
                self.read(node)
                self._drop_dead(node, dead_after)
                continue
            name = _op_name(node)
            reg = LOWERINGS.get(name)
            if reg is None and _is_inplace_variant(node):
                reg = LOWERINGS.get(_functional_name(node))
            self._track_aliasing(node)
            if reg is None:
                if not self.allow_breaks:
                    raise UnsupportedOpError(
                        f"tracecache.torch: no mapping for ATen op {name}{self.where()}; "
                        f"`python3 -m tracecache.torch ops` lists the mapped ops", name)
                result = self.host_op(node, "no mapping to tracecache ops")
            elif self.allow_breaks:
                try:
                    result = reg.fn(self, node)
                except CaptureError as e:
                    result = self.host_op(node, _reason(e, name), error=e)
            else:
                result = reg.fn(self, node)
            self.env[node] = result
            target = _mutated_arg(node)
            if target is not None:
                self._record_mutation(node, target, result)
            self._drop_dead(node, dead_after)
        outs, spec = output_structure(output.args[0])
        values = []
        for o in outs:
            self.node = output
            values.append(self.value_of(o) if isinstance(o, torch.fx.Node) else o)
        return Lowered(values, spec, self.updates)

    # -- random numbers ----------------------------------------------------------------------

    def draw(self, kind, shape):
        """f32 numbers of `shape` from tracecache's generator: `rand_uniform` ([0, 1)) or
        `rand_normal`, each draw of the graph its own stream of the call's seed."""
        if self.seed is None:
            self.fail("draws random numbers, and this lowering has no seed input (a trace program export "
                      "cannot draw them: export the module in eval mode)")
        stream = self._streams
        self._streams += 1
        if stream > 65535:
            self.fail("draws random numbers more than 65536 times in one graph")
        return self.op(kind, [self.seed], "f32", tuple(shape), shape=list(shape), stream=stream)

    # -- graph breaks and value reads --------------------------------------------------------

    def read(self, node):
        """A value the program read into Python: read through the emitter (a value guard)."""
        val = self.value_of(node.args[0])
        if isinstance(val, Value):
            self.emitter.read(val.handle)
            self.breaks.append(("value read", "the program reads a tensor's value into Python (.item(), bool(), "
                                "a data-dependent branch): the branch taken is guarded by the value",
                                user_frame(node.meta.get("frames"))))

    def host_op(self, node, reason, error=None):
        """Node `node` as a graph break: PyTorch runs it on the host (fallback.py); its results
        are Values again. Refused (the original error, or an UnsupportedOpError) when its
        arguments or results cannot cross: a result dtype tracecache does not hold, an argument
        that is neither a tensor nor a plain value."""
        name = _op_name(node)
        why = fallback.runnable(name)
        if why is not None:
            self._refuse_break(name, why, error)
        tensors = []

        def encode(v):
            if isinstance(v, torch.fx.Node):
                v = self.value_of(v)
            if isinstance(v, Value):
                tensors.append(v)
                return {"t": len(tensors) - 1}
            if isinstance(v, (list, tuple)):
                return {"list" if isinstance(v, list) else "tuple": [encode(x) for x in v]}
            try:
                return fallback.encode_argument(v)
            except TypeError as e:
                self._refuse_break(name, f"{e}", error)

        args = [encode(a) for a in node.args]
        kwargs = {k: encode(v) for k, v in node.kwargs.items()}
        results, single = self._host_results(node, name, error)
        payload = fallback.payload(name, args, kwargs, [r is not None for r in results])
        frame = user_frame(node.meta.get("frames"))
        description = f"{name}{f' at {frame}' if frame else ''}: {reason}"
        handles = self.emitter.host_op(payload, [v.handle for v in tensors], description)
        self.breaks.append((name, reason, frame))
        self._check_host_shapes(name, [r for r in results if r is not None], handles)
        it = iter(handles)
        values = [None if r is None else Value(next(it), r[0], r[1]) for r in results]
        return values[0] if single else tuple(values)

    def _check_host_shapes(self, name, results, handles):
        """A break run live (a trace) gives its results' real shapes: one that differs from the
        capture's is a data-dependent size (how many scores pass a threshold, how many boxes NMS
        keeps) that tracecache's numbers decided otherwise than PyTorch's, which differ from them
        by rounding. The graph after it was captured for the other size: refused, never run."""
        for (dtype, shape), h in zip(results, handles):
            got = getattr(h, "shape", None)
            if got is not None and tuple(got) != tuple(shape):
                raise CaptureError(
                    f"tracecache.torch: {name}: a data-dependent size differs from the capture's: "
                    f"{list(got)} here, {list(shape)} when PyTorch ran the program (its inputs, computed by "
                    f"tracecache, differ from PyTorch's by rounding, and a value near a threshold fell on "
                    f"the other side); this call cannot run compiled: run it eagerly, or compile the part "
                    f"before the data-dependent op{self.where()}")

    def _host_results(self, node, name, error):
        """The types of a break's results, and whether it has one: [(dtype, shape)] for one tensor,
        one entry per element (None for a non-tensor) for a tuple or list."""
        tm = node.meta.get("tensor_meta")
        if tm is None:
            items = {u.args[1]: u.meta.get("tensor_meta") for u in node.users if u.target is operator.getitem}
            if not items:
                self._refuse_break(name, "its result is not a tensor", error)
            tm = tuple(items.get(i) for i in range(max(items) + 1))
        single = isinstance(tm, TensorMetadata)
        out = []
        for t in ([tm] if single else tm):
            if t is None:
                out.append(None)
                continue
            dtype = TORCH_DTYPES.get(t.dtype)
            if dtype is None:
                self._refuse_break(name, f"its result has dtype {t.dtype}, which tracecache does not hold", error)
            out.append((dtype, tuple(t.shape)))
        return out, single

    def _refuse_break(self, name, why, error):
        if error is not None:
            raise error
        raise UnsupportedOpError(f"tracecache.torch: no mapping for ATen op {name}{self.where()}, and it cannot "
                                 f"run in PyTorch as a graph break ({why})", name)

    # -- aliasing and mutation ---------------------------------------------------------------
    #
    # Nodes that denote one torch tensor (an in-place op's result and its argument, a detach or
    # a view of the whole tensor) share a root; a mutation gives every node of the root the new
    # value, so later uses see it whichever node they name. A partial view (a slice, a select, a
    # reshape or transpose, a piece of a split) remembers what it is a view of. A write through
    # one is written back: each view on the way to the root is scattered into its parent
    # (slices and selects as concatenations around the new part, reshapes and transposes
    # inverted), and the root takes the result. A view read after its root changed is computed
    # again from the root (its lowering re-run), as PyTorch's view would show the change.

    def _root(self, node):
        return self._alias_root.get(node, node)

    def _add_view(self, node, parent):
        self._view_parent[node] = parent
        self._view_parents.add(parent)
        self._partial_base[node] = self._partial_base.get(parent, self._root(parent))
        self._view_made_at[node] = self._order[node]

    def _track_aliasing(self, node):
        if not _is_view(node):
            return
        base = node.args[0]
        if _is_full_alias(node) and base not in self._partial_base:
            root = self._root(base)
            self._alias_root[node] = root
            self._members.setdefault(root, [root]).append(node)
        else:
            self._add_view(node, base)

    def _refresh_view(self, view):
        """Computes a partial view again from its parent when its root changed after it was
        computed (re-running its lowering on the parent's current value)."""
        root = self._partial_base[view]
        if self._mutated_at.get(root, -1) <= self._view_made_at.get(view, -1):
            return
        parent = self._view_parent[view]
        if parent in self._partial_base:
            self._refresh_view(parent)
        saved = self.node
        self.node = view
        try:
            if view in self._identity_views:
                self.env[view] = self.env[parent]
            elif view.target is operator.getitem:
                self._refresh_view(view.args[0])
                self.env[view] = self.env[view.args[0]][view.args[1]]
            else:
                reg = LOWERINGS.get(_op_name(view))
                if reg is None:
                    self.fail(f"reads '{view.name}', a view of '{root.name}' taken before '{root.name}' was modified "
                              f"in place, and cannot compute it again (use the out-of-place op)")
                self.env[view] = reg.fn(self, view)
        finally:
            self.node = saved
        self._view_made_at[view] = self._order[self.node] if self.node in self._order else self._view_made_at[view]

    def _write_back(self, view, value):
        """`view` (a partial view) now holds `value`: scatters it into each parent up to the
        root and assigns the root. Returns the root."""
        cur, cur_value = view, value
        now = self._order[self.node]
        while cur in self._partial_base:
            parent = self._view_parent[cur]
            if parent in self._partial_base:
                self._refresh_view(parent)
            parent_value = self.value_of(parent)
            self.env[cur] = cur_value
            self._view_made_at[cur] = now
            cur_value = self._scatter(cur, parent_value, cur_value)
            cur = parent
        root = self._root(cur)
        self._assign(root, cur_value)
        # The views just written are current; every other view of the root is now stale.
        cur = view
        while cur in self._partial_base:
            self._view_made_at[cur] = now
            cur = self._view_parent[cur]
        return root

    def _scatter(self, view, parent, value):
        """`parent` with the part `view` denotes replaced by `value` (the inverse of the view op)."""
        name = "getitem" if view.target is operator.getitem else view.target.overloadpacket.__name__.rstrip("_")
        value = self.cast(value, parent.dtype)
        if view in self._identity_views or name in ("detach", "alias", "lift_fresh"):
            return value
        if name in ("view", "_reshape_alias", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "flatten",
                    "view_copy", "_reshape_alias_copy", "unsqueeze_copy", "squeeze_copy"):
            return self.reshape(value, parent.shape)
        if name in ("t", "t_copy"):
            return self.transpose(value, 0, 1) if len(parent.shape) == 2 else value
        if name in ("transpose", "transpose_copy"):
            return self.transpose(value, view.args[1], view.args[2])
        if name in ("permute", "permute_copy"):
            perm = [p % len(parent.shape) for p in view.args[1]]
            inverse = [perm.index(i) for i in range(len(perm))]
            return self.permute(value, inverse)
        if name in ("slice", "slice_copy"):
            args = list(view.args) + [None] * (5 - len(view.args))
            dim = (args[1] if args[1] is not None else 0) % len(parent.shape)
            n = parent.shape[dim]
            start = 0 if args[2] is None else args[2]
            end = n if args[3] is None else args[3]
            step = 1 if args[4] is None else args[4]
            start = min(max(start + n if start < 0 else start, 0), n)
            end = max(min(max(end + n if end < 0 else end, 0), n), start)
            if step != 1:
                return self._replace_stepped(parent, value, dim, start, end, step)
            return self._replace_range(parent, value, dim, start, end)
        if name in ("select", "select_copy"):
            dim = view.args[1] % len(parent.shape)
            index = view.args[2] + parent.shape[dim] if view.args[2] < 0 else view.args[2]
            shape = list(parent.shape)
            shape[dim] = 1
            return self._replace_range(parent, self.reshape(value, shape), dim, index, index + 1)
        if name == "getitem":
            source = view.args[0]
            kind = source.target.overloadpacket.__name__
            at = 1 if kind == "unbind" else 2  # unbind(self, dim=0), split*(self, sizes, dim=0)
            dim = source.args[at] if len(source.args) > at else source.kwargs.get("dim", 0)
            dim = (dim if dim is not None else 0) % len(parent.shape)
            pieces = self.env[source]
            start = sum(p.shape[dim] if kind != "unbind" else 1 for p in pieces[:view.args[1]])
            if kind == "unbind":
                shape = list(parent.shape)
                shape[dim] = 1
                return self._replace_range(parent, self.reshape(value, shape), dim, start, start + 1)
            return self._replace_range(parent, value, dim, start, start + value.shape[dim])
        if name in ("as_strided", "as_strided_copy"):
            from .lowerings.strided import scatter_as_strided
            return scatter_as_strided(self, view, parent, value)
        self.fail(f"writes through '{view.name}' ({name}), a view tracecache cannot write back "
                  f"(use the out-of-place op)")

    def _replace_stepped(self, parent, value, dim, start, end, step):
        """`parent` with every `step`-th index of [start, end) along `dim` replaced by `value`."""
        k = len(range(start, end, step))
        if k == 0:
            return parent
        shape = parent.shape[:dim] + (k,) + parent.shape[dim + 1:]
        index = self.op("arange", [], "i64", (k,), start=float(start), end=float(start + k * step),
                        step=float(step), dtype=DType("i64"))
        index = self.broadcast_to(self.reshape(index, [k if d == dim else 1 for d in range(len(shape))]), shape)
        return self.op("scatter_elements", [parent, index, self.broadcast_to(value, shape)], parent.dtype,
                       parent.shape, axis=dim, reduction=0)

    def _replace_range(self, parent, value, dim, start, end):
        """`parent` with [start, end) of `dim` replaced by `value` (same shape elsewhere)."""
        n = parent.shape[dim]
        value = self.broadcast_to(value, parent.shape[:dim] + (end - start,) + parent.shape[dim + 1:])
        pieces = []
        if start > 0:
            pieces.append(self.slice(parent, dim, 0, start))
        if end > start:
            pieces.append(value)
        if end < n:
            pieces.append(self.slice(parent, dim, end, n))
        return self.concat(pieces, dim) if pieces else parent

    def _record_mutation(self, node, target, result):
        value = result[0] if isinstance(result, tuple) else result
        if target in self._partial_base:
            # The op's result is the view itself: a view of it with the identity relation.
            self._write_back(target, value)
            self._add_view(node, target)
            self._identity_views.add(node)
            self.env[node] = value
            return
        root = self._root(target)
        self._assign(root, value)
        self._alias_root[node] = root
        self._members.setdefault(root, [root]).append(node)
        self.env[node] = value

    def _assign(self, root, value):
        self._mutated_at[root] = self._order[self.node]
        for member in self._members.get(root, [root]):
            if member in self.env or member is self.node or member is root:
                self.env[member] = value
        if root.op == "placeholder":
            self.updates[self._placeholders.index(root)] = value

    def mutate(self, arg_node, value):
        """Records that the current op also writes `value` into `arg_node` (a batch norm's
        running statistics) although its schema does not say so."""
        if isinstance(arg_node, torch.fx.Node):
            if arg_node in self._partial_base:
                self._write_back(arg_node, value)
            else:
                self._assign(self._root(arg_node), value)


def lower(graph_module, emitter, bindings, breaks=False, seed=None):
    """Lowers a captured graph onto `emitter`; `bindings` are the placeholders' handles; `breaks`
    allows graph breaks (see Lowerer); `seed`, the handle of an i64[2] (seed, offset) input, lets
    random ops draw from tracecache's generator. Returns a `Lowered`; its `breaks` lists the graph
    breaks, `draws` how many random streams it used."""
    lowerer = Lowerer(graph_module, emitter, bindings, breaks,
                      None if seed is None else Value(seed, "i64", (2,)))
    lowered = lowerer.run()
    lowered.breaks = lowerer.breaks
    lowered.draws = lowerer._streams
    return lowered


def _reason(error, name):
    """A lowering's refusal as a break's reason: its message without the op name and place."""
    text = str(error)
    prefix = f"tracecache.torch: {name}: "
    text = text[len(prefix):] if text.startswith(prefix) else text
    return text.split(" (at ")[0]


def _op_name(node):
    if node is None:
        return "<graph>"
    if node.op == "call_function":
        if node.target is operator.getitem:
            return "getitem"
        return str(node.target)
    return f"<{node.op} {node.target}>"


def _schema(node):
    return getattr(node.target, "_schema", None)


def _mutated_arg(node):
    """The node (argument) an op writes in place, by its schema's alias annotation, or None."""
    schema = _schema(node)
    if schema is None:
        return None
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            v = node.args[i] if i < len(node.args) else node.kwargs.get(a.name)
            if isinstance(v, torch.fx.Node):
                return v
    return None


def _is_view(node):
    schema = _schema(node)
    if schema is None or not schema.returns:
        return False
    r = schema.returns[0].alias_info
    return r is not None and not r.is_write


_WHOLE_VIEWS = {"detach", "alias", "view", "_reshape_alias", "_unsafe_view", "reshape", "expand", "slice",
                "squeeze", "unsqueeze", "lift_fresh"}


def _is_full_alias(node):
    """A view of the whole tensor in its own order (a detach, a reshape to the same shape)."""
    if node.target.overloadpacket.__name__ not in _WHOLE_VIEWS:
        return False
    src, out = node.args[0].meta.get("tensor_meta"), node.meta.get("tensor_meta")
    return src is not None and out is not None and tuple(src.shape) == tuple(out.shape)


def _is_inplace_variant(node):
    schema = _schema(node)
    return schema is not None and schema.name.endswith("_") and _mutated_arg(node) is not None


def _functional_name(node):
    packet = node.target.overloadpacket.__name__
    return f"aten.{packet[:-1]}.{node.target._overloadname}"


def pair(v):
    """An int or a list of ints as a list of two (PyTorch's _pair for 2-d attributes)."""
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * 2 if len(v) == 1 else v


# Registers every lowering (the modules import the names above).
from . import lowerings  # noqa: E402,F401
