"""The one mapping from ATen ops to tracecache registry ops.

`LOWERINGS` maps an ATen overload (`"aten.convolution.default"`) to a function that receives the
lowering context and the FX node and returns the node's value(s) made of tracecache op calls
(registry op name, tensor inputs, attributes by registry name). The calls go to an *emitter*:
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

import math
import operator

import torch
from torch.fx.passes.shape_prop import TensorMetadata
from torch.utils import _pytree as pytree

from .errors import CaptureError, UnsupportedOpError, user_frame

__all__ = ["DType", "Value", "Lowered", "Lowerer", "lower", "LOWERINGS", "table", "TORCH_DTYPES"]

TORCH_DTYPES = {torch.float32: "f32", torch.int64: "i64", torch.int32: "i32", torch.bool: "bool"}
_PROMOTION = ["bool", "i32", "i64", "f32"]
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
    """A dtype attribute value (`f32`, `i64`, `i32`, `bool`), so emitters can spell it."""


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


class _Registration:
    def __init__(self, fn, ops, note):
        self.fn = fn
        self.ops = ops
        self.note = note


LOWERINGS = {}


def lowers(*targets, ops, note=""):
    """Registers a lowering for ATen overloads (`"aten.relu.default"`); `ops` names the registry
    ops it emits (for the docs table), `note` says what the composition does, if anything."""
    def register(fn):
        for t in targets:
            assert t not in LOWERINGS, t
            LOWERINGS[t] = _Registration(fn, ops, note)
        return fn
    return register


def _dtype_of(torch_dtype, what):
    d = TORCH_DTYPES.get(torch_dtype)
    if d is None:
        raise CaptureError(f"{what} has dtype {torch_dtype}; tracecache has f32, i64, i32 and bool "
                           f"(convert with .float() or .long() first)")
    return d


def _promote(a, b):
    return a if _PROMOTION.index(a) >= _PROMOTION.index(b) else b


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
    placeholders, in order."""

    def __init__(self, graph_module, emitter, bindings):
        self.gm = graph_module
        self.graph = graph_module.graph
        self.emitter = emitter
        self.bindings = list(bindings)
        self.env = {}
        self.node = None
        self.updates = {}
        self._order = {n: i for i, n in enumerate(self.graph.nodes)}
        self._placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        self._alias_root = {}
        self._members = {}
        self._partial_base = {}
        self._mutated_at = {}

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
        """Emits one registry op whose result type is known to be dtype[shape]."""
        handle = self.emitter.op(name, [v.handle for v in inputs], attrs)
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
        """The nodes the outputs need, and every op that writes a tensor in place (its write
        may be read through another node, or be an update of an input) with what it needs."""
        live = set()
        stack = [output] + [n for n in self.graph.nodes if n.op == "call_function" and _mutated_arg(n) is not None]
        while stack:
            n = stack.pop()
            if n not in live:
                live.add(n)
                stack.extend(n.all_input_nodes)
        return live

    def run(self):
        output = next(n for n in self.graph.nodes if n.op == "output")
        live = self._live_nodes(output)
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
                seq = self.env[node.args[0]]
                item = seq[node.args[1]]
                if item is None:
                    self.fail(f"result {node.args[1]} of {_op_name(node.args[0])} is not computed")
                self.env[node] = item
                continue
            name = _op_name(node)
            reg = LOWERINGS.get(name)
            if reg is None and _is_inplace_variant(node):
                reg = LOWERINGS.get(_functional_name(node))
            if reg is None and name in _RANDOM_OPS:
                self.fail("draws PyTorch's random numbers, which tracecache cannot reproduce (training-mode "
                          "dropout?): call model.eval() or set the dropout probability to 0")
            if reg is None:
                raise UnsupportedOpError(
                    f"tracecache.torch: no mapping for ATen op {name}{self.where()}; "
                    f"`python3 -m tracecache.torch ops` lists the mapped ops", name)
            self._track_aliasing(node)
            result = reg.fn(self, node)
            self.env[node] = result
            target = _mutated_arg(node)
            if target is not None:
                self._record_mutation(node, target, result)
        outs, spec = output_structure(output.args[0])
        values = []
        for o in outs:
            self.node = output
            values.append(self.env[o] if isinstance(o, torch.fx.Node) else o)
        return Lowered(values, spec, self.updates)

    # -- aliasing and mutation ---------------------------------------------------------------
    #
    # Nodes that denote one torch tensor (an in-place op's result and its argument, a detach or
    # a view of the whole tensor) share a root; a mutation gives every node of the root the new
    # value, so later uses see it whichever node they name. A partial view (a slice, a
    # transpose, ...) cannot be written through, and reading one taken before its base changed
    # would read a stale value: both are errors.

    def _root(self, node):
        return self._alias_root.get(node, node)

    def _track_aliasing(self, node):
        for a in node.all_input_nodes:
            base = self._partial_base.get(a)
            if base is not None and self._mutated_at.get(base, -1) > self._order[a]:
                self.fail(f"reads '{a.name}', a view of '{base.name}' taken before "
                          f"'{base.name}' was modified in place; tracecache values are immutable, so "
                          f"the view would be stale (take the view after the in-place op, or "
                          f"use the out-of-place op)")
        if not _is_view(node):
            return
        base = node.args[0]
        if _is_full_alias(node):
            root = self._root(base)
            self._alias_root[node] = root
            self._members.setdefault(root, [root]).append(node)
        else:
            self._partial_base[node] = self._partial_base.get(base, self._root(base))

    def _record_mutation(self, node, target, result):
        value = result[0] if isinstance(result, tuple) else result
        if target in self._partial_base:
            self.fail(f"modifies '{target.name}' in place, a view of '{self._partial_base[target].name}'; "
                      f"writes through views are not supported (use the out-of-place op)")
        root = self._root(target)
        self._alias_root[node] = root
        self._members.setdefault(root, [root]).append(node)
        self._assign(root, value)

    def _assign(self, root, value):
        self._mutated_at[root] = self._order[self.node]
        for member in self._members.get(root, [root]):
            self.env[member] = value
        if root.op == "placeholder":
            self.updates[self._placeholders.index(root)] = value

    def mutate(self, arg_node, value):
        """Records that the current op also writes `value` into `arg_node` (a batch norm's
        running statistics) although its schema does not say so."""
        if isinstance(arg_node, torch.fx.Node):
            if arg_node in self._partial_base:
                self.fail(f"updates '{arg_node.name}' in place, a view; writes through views are not supported")
            self._assign(self._root(arg_node), value)


# Ops that draw random numbers: PyTorch's generator cannot be reproduced, so they are refused
# with that reason rather than as unmapped.
_RANDOM_OPS = {"aten.bernoulli_.float", "aten.bernoulli.default", "aten.bernoulli.p", "aten.bernoulli_.Tensor",
               "aten.rand.default", "aten.randn.default", "aten.rand_like.default", "aten.randn_like.default",
               "aten.normal_.default", "aten.uniform_.default", "aten.randint.low", "aten.randperm.default"}


def lower(graph_module, emitter, bindings):
    """Lowers a captured graph onto `emitter`; `bindings` are the placeholders' handles."""
    return Lowerer(graph_module, emitter, bindings).run()


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


# ----------------------------------------------------------------------------------------------
# The lowerings. Each receives the Lowerer (ctx) and the node; ctx.args() gives its arguments.
# ----------------------------------------------------------------------------------------------

def _pair(v):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * 2 if len(v) == 1 else v


@lowers("aten.convolution.default", ops="conv2d", note="1-d convolutions as conv2d over a [N, C, 1, L] view")
def _convolution(ctx, node):
    a = ctx.args()
    if a.transposed:
        ctx.fail("transposed convolutions are not supported")
    dtype, shape = ctx.meta()
    x, w = a.input, a.weight
    rank = len(x.shape)
    if rank == 3:
        x = ctx.reshape(x, (x.shape[0], x.shape[1], 1, x.shape[2]))
        w = ctx.reshape(w, (w.shape[0], w.shape[1], 1, w.shape[2]))
        stride, padding, dilation = [1] + list(a.stride), [0] + list(a.padding), [1] + list(a.dilation)
        out4 = (shape[0], shape[1], 1, shape[2])
    elif rank == 4:
        stride, padding, dilation = _pair(a.stride), _pair(a.padding), _pair(a.dilation)
        out4 = shape
    else:
        ctx.fail(f"only 1-d and 2-d convolutions are supported, the input is rank {rank}")
    inputs = [x, w] + ([a.bias] if a.bias is not None else [])
    y = ctx.op("conv2d", inputs, dtype, out4, stride=stride, padding=padding, dilation=dilation,
               groups=a.groups)
    return ctx.reshape(y, shape)


def _channel_param(ctx, v, c, value):
    return v if v is not None else ctx.full(value, "f32", (c,))


def _batch_stats(ctx, x):
    axes = [0] + list(range(2, len(x.shape)))
    mean = ctx.reduce("mean", x, axes)
    bshape = [1, x.shape[1]] + [1] * (len(x.shape) - 2)
    centered = ctx.binary("sub", x, ctx.reshape(mean, bshape))
    var = ctx.reduce("mean", ctx.binary("mul", centered, centered), axes)
    count = x.shape[0] * math.prod(x.shape[2:])
    return mean, var, count


@lowers("aten.native_batch_norm.default", ops="batch_norm; training: mean, sub, mul, add, rsqrt",
        note="training mode: batch statistics by ops, running statistics updated as PyTorch does")
def _native_batch_norm(ctx, node):
    a = ctx.args()
    x = a.input
    c = x.shape[1]
    w, b = _channel_param(ctx, a.weight, c, 1), _channel_param(ctx, a.bias, c, 0)
    if not a.training:
        if a.running_mean is None:
            ctx.fail("eval-mode batch norm without running statistics")
        y = ctx.op("batch_norm", [x, a.running_mean, a.running_var, w, b], "f32", x.shape, eps=float(a.eps))
        return (y, None, None)
    mean, var, count = _batch_stats(ctx, x)
    y = ctx.op("batch_norm", [x, mean, var, w, b], "f32", x.shape, eps=float(a.eps))
    invstd = ctx.unary("rsqrt", ctx.binary("add", var, float(a.eps)), "f32")
    if a.running_mean is not None:
        m = float(a.momentum)
        unbiased = ctx.binary("mul", var, count / max(count - 1, 1))
        new_mean = ctx.binary("add", ctx.binary("mul", a.running_mean, 1 - m), ctx.binary("mul", mean, m))
        new_var = ctx.binary("add", ctx.binary("mul", a.running_var, 1 - m), ctx.binary("mul", unbiased, m))
        ctx.mutate(node.args[3], new_mean)
        ctx.mutate(node.args[4], new_var)
    return (y, mean, invstd)


@lowers("aten.native_batch_norm_backward.default",
        ops="sum, mul, sub, reshape (composition)", note="PyTorch's formula for training and eval mode")
def _native_batch_norm_backward(ctx, node):
    a = ctx.args()
    g, x = a.grad_out, a.input
    c = x.shape[1]
    axes = [0] + list(range(2, len(x.shape)))
    bshape = [1, c] + [1] * (len(x.shape) - 2)
    w = _channel_param(ctx, a.weight, c, 1)
    if a.train:
        mean, invstd = a.save_mean, a.save_invstd
    else:
        mean = a.running_mean
        invstd = ctx.unary("rsqrt", ctx.binary("add", a.running_var, float(a.eps)), "f32")
    centered = ctx.binary("sub", x, ctx.reshape(mean, bshape))
    sum_g = ctx.reduce("sum", g, axes)
    dot = ctx.reduce("sum", ctx.binary("mul", g, centered), axes)
    outs = [None, None, None]
    mask = list(a.output_mask)
    if mask[0]:
        scale = ctx.reshape(ctx.binary("mul", invstd, w), bshape)
        if a.train:
            n = x.shape[0] * math.prod(x.shape[2:])
            proj = ctx.binary("mul", ctx.binary("mul", dot, 1.0 / n), ctx.binary("mul", invstd, invstd))
            gx = ctx.binary("sub", g, ctx.binary("mul", centered, ctx.reshape(proj, bshape)))
            gx = ctx.binary("sub", gx, ctx.reshape(ctx.binary("mul", sum_g, 1.0 / n), bshape))
            outs[0] = ctx.binary("mul", gx, scale)
        else:
            outs[0] = ctx.binary("mul", g, scale)
    if mask[1]:
        outs[1] = ctx.binary("mul", dot, invstd)
    if mask[2]:
        outs[2] = sum_g
    return tuple(outs)


@lowers("aten.native_layer_norm.default", ops="layer_norm; mean, sub, mul, add, rsqrt for mean/rstd")
def _native_layer_norm(ctx, node):
    a = ctx.args()
    x = a.input
    k = len(a.normalized_shape)
    dims = tuple(x.shape[-k:])
    w, b = a.weight, a.bias
    if w is None and b is not None:
        w = ctx.full(1, "f32", dims)
    inputs = [x] + ([w] if w is not None else []) + ([b] if b is not None else [])
    y = ctx.op("layer_norm", inputs, "f32", x.shape, normalized_dims=k, eps=float(a.eps))
    users = {u.args[1] for u in node.users if u.target is operator.getitem}
    mean = rstd = None
    if users & {1, 2}:
        axes = list(range(len(x.shape) - k, len(x.shape)))
        mean = ctx.reduce("mean", x, axes, keepdim=True)
        centered = ctx.binary("sub", x, mean)
        var = ctx.reduce("mean", ctx.binary("mul", centered, centered), axes, keepdim=True)
        rstd = ctx.unary("rsqrt", ctx.binary("add", var, float(a.eps)), "f32")
    return (y, mean, rstd)


@lowers("aten.native_layer_norm_backward.default", ops="mean, sum, mul, sub (composition)",
        note="PyTorch's formula")
def _native_layer_norm_backward(ctx, node):
    a = ctx.args()
    g, x = a.grad_out, a.input
    k = len(a.normalized_shape)
    axes = list(range(len(x.shape) - k, len(x.shape)))
    lead = list(range(len(x.shape) - k))
    xhat = ctx.binary("mul", ctx.binary("sub", x, a.mean), a.rstd)
    gw = ctx.binary("mul", g, a.weight) if a.weight is not None else g
    outs = [None, None, None]
    mask = list(a.output_mask)
    if mask[0]:
        m1 = ctx.reduce("mean", gw, axes, keepdim=True)
        m2 = ctx.reduce("mean", ctx.binary("mul", gw, xhat), axes, keepdim=True)
        inner = ctx.binary("sub", ctx.binary("sub", gw, m1), ctx.binary("mul", xhat, m2))
        outs[0] = ctx.binary("mul", inner, a.rstd)
    if mask[1] and a.weight is not None:
        outs[1] = ctx.reduce("sum", ctx.binary("mul", g, xhat), lead) if lead else ctx.binary("mul", g, xhat)
    if mask[2] and a.bias is not None:
        outs[2] = ctx.reduce("sum", g, lead) if lead else g
    return tuple(outs)


# -- elementwise -------------------------------------------------------------------------------

def _unary(target, op, float_result=False):
    @lowers(target, ops=op)
    def lowering(ctx, node):
        x = ctx.args().self
        dtype, _ = ctx.meta()
        return ctx.cast(ctx.unary(op, x, "f32" if float_result else None), dtype)
    return lowering


for _t, _op, _float in [("aten.relu.default", "relu", False), ("aten.neg.default", "neg", False),
                        ("aten.abs.default", "abs", False), ("aten.exp.default", "exp", True),
                        ("aten.log.default", "log", True), ("aten.sqrt.default", "sqrt", True),
                        ("aten.rsqrt.default", "rsqrt", True), ("aten.tanh.default", "tanh", True),
                        ("aten.sigmoid.default", "sigmoid", True), ("aten.erf.default", "erf", True),
                        ("aten.silu.default", "silu", True),
                        ("aten.hardswish.default", "hardswish", True),
                        ("aten.hardsigmoid.default", "hardsigmoid", True)]:
    _unary(_t, _op, _float)


@lowers("aten.gelu.default", ops="gelu")
def _gelu(ctx, node):
    a = ctx.args()
    return ctx.op("gelu", [a.self], "f32", a.self.shape, tanh=a.approximate == "tanh")


@lowers("aten.hardtanh.default", ops="clamp")
def _hardtanh(ctx, node):
    a = ctx.args()
    return ctx.op("clamp", [a.self], a.self.dtype, a.self.shape, min=float(a.min_val), max=float(a.max_val))


@lowers("aten.clamp.default", ops="clamp")
def _clamp(ctx, node):
    a = ctx.args()
    lo = -math.inf if a.min is None else float(a.min)
    hi = math.inf if a.max is None else float(a.max)
    dtype, _ = ctx.meta()
    x = ctx.cast(a.self, dtype)
    return ctx.op("clamp", [x], dtype, x.shape, min=lo, max=hi)


@lowers("aten.clamp_min.default", ops="maximum")
def _clamp_min(ctx, node):
    a = ctx.args()
    dtype, _ = ctx.meta()
    return ctx.binary("maximum", a.self, a.min, compute=dtype)


@lowers("aten.clamp_max.default", ops="minimum")
def _clamp_max(ctx, node):
    a = ctx.args()
    dtype, _ = ctx.meta()
    return ctx.binary("minimum", a.self, a.max, compute=dtype)


def _arith(targets, op):
    @lowers(*targets, ops=op + " (and mul for alpha)" if op in ("add", "sub") else op)
    def lowering(ctx, node):
        a = ctx.args()
        dtype, _ = ctx.meta()
        other = a.other
        alpha = getattr(a, "alpha", 1)
        if alpha is not None and alpha != 1:
            other = ctx.binary("mul", ctx.tensor(other, dtype), alpha, compute=dtype)
        if op == "div":
            mode = getattr(a, "rounding_mode", None)
            if mode is not None:
                ctx.fail(f"div with rounding_mode='{mode}' is not supported")
            return ctx.cast(ctx.binary("div", a.self, other, compute="f32"), dtype)
        return ctx.binary(op, a.self, other, dtype=dtype, compute=dtype)
    return lowering


_arith(["aten.add.Tensor", "aten.add.Scalar"], "add")
_arith(["aten.sub.Tensor", "aten.sub.Scalar"], "sub")
_arith(["aten.mul.Tensor", "aten.mul.Scalar"], "mul")
_arith(["aten.div.Tensor", "aten.div.Scalar", "aten.div.Tensor_mode"], "div")
_arith(["aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor"], "pow")
_arith(["aten.maximum.default"], "maximum")
_arith(["aten.minimum.default"], "minimum")


@lowers("aten.pow.Scalar", ops="pow")
def _pow_scalar(ctx, node):
    a = ctx.args()
    dtype, _ = ctx.meta()
    return ctx.binary("pow", ctx.full(a.self, dtype), a.exponent, dtype=dtype, compute=dtype)


@lowers("aten.rsub.Scalar", "aten.rsub.Tensor", ops="sub (and mul for alpha)", note="other - alpha * self")
def _rsub(ctx, node):
    a = ctx.args()
    dtype, _ = ctx.meta()
    x = a.self if a.alpha == 1 else ctx.binary("mul", a.self, a.alpha, compute=dtype)
    return ctx.binary("sub", a.other, x, dtype=dtype, compute=dtype)


@lowers("aten.reciprocal.default", ops="div")
def _reciprocal(ctx, node):
    return ctx.binary("div", 1.0, ctx.args().self, compute="f32")


@lowers("aten.square.default", ops="mul")
def _square(ctx, node):
    x = ctx.args().self
    return ctx.binary("mul", x, x)


def _compare(targets, build):
    @lowers(*targets, ops=build.__doc__)
    def lowering(ctx, node):
        a = ctx.args()
        x, y = a.self, a.other
        like = x.dtype if isinstance(x, Value) else y.dtype
        if isinstance(y, float) or isinstance(x, float):
            like = _promote(like, "f32")
        return build(ctx, ctx.tensor(x, like), ctx.tensor(y, like))
    return lowering


def _eq(ctx, a, b):
    "eq"
    return ctx.binary("eq", a, b)


def _ne(ctx, a, b):
    "eq, eq (not)"
    return ctx.logical_not(ctx.binary("eq", a, b))


def _lt(ctx, a, b):
    "lt"
    return ctx.binary("lt", a, b)


def _gt(ctx, a, b):
    "gt"
    return ctx.binary("gt", a, b)


def _le(ctx, a, b):
    "lt, eq, maximum (or)"
    return ctx.binary("maximum", ctx.binary("lt", a, b), ctx.binary("eq", a, b))


def _ge(ctx, a, b):
    "gt, eq, maximum (or)"
    return ctx.binary("maximum", ctx.binary("gt", a, b), ctx.binary("eq", a, b))


for _name, _build in [("eq", _eq), ("ne", _ne), ("lt", _lt), ("gt", _gt), ("le", _le), ("ge", _ge)]:
    _compare([f"aten.{_name}.Tensor", f"aten.{_name}.Scalar"], _build)


@lowers("aten.logical_not.default", ops="eq (with 0)")
def _logical_not(ctx, node):
    return ctx.logical_not(ctx.args().self)


@lowers("aten.logical_and.default", ops="cast, minimum")
def _logical_and(ctx, node):
    a = ctx.args()
    return ctx.binary("minimum", ctx.cast(a.self, "bool"), ctx.cast(a.other, "bool"))


@lowers("aten.logical_or.default", ops="cast, maximum")
def _logical_or(ctx, node):
    a = ctx.args()
    return ctx.binary("maximum", ctx.cast(a.self, "bool"), ctx.cast(a.other, "bool"))


@lowers("aten.where.self", ops="where")
def _where(ctx, node):
    a = ctx.args()
    dtype, _ = ctx.meta()
    return ctx.where_(ctx.cast(a.condition, "bool"), a.self, a.other, dtype)


@lowers("aten.masked_fill.Scalar", "aten.masked_fill.Tensor", ops="where")
def _masked_fill(ctx, node):
    a = ctx.args()
    value = a.value
    if isinstance(value, Value):
        value = ctx.cast(value, a.self.dtype)
    return ctx.where_(ctx.cast(a.mask, "bool"), value, a.self, a.self.dtype)


@lowers("aten._to_copy.default", ops="cast")
def _to_copy(ctx, node):
    dtype, _ = ctx.meta()
    return ctx.cast(ctx.args().self, dtype)


@lowers("aten.copy.default", ops="cast, broadcast_to", note="copy_: the destination takes the source's values")
def _copy(ctx, node):
    a = ctx.args()
    return ctx.broadcast_to(ctx.cast(a.src, a.self.dtype), a.self.shape)


@lowers("aten.fill.Scalar", ops="full")
def _fill(ctx, node):
    dtype, shape = ctx.meta()
    return ctx.full(ctx.args().value, dtype, shape)


@lowers("aten.fill.Tensor", ops="cast, broadcast_to")
def _fill_tensor(ctx, node):
    a = ctx.args()
    return ctx.broadcast_to(ctx.cast(ctx.reshape(a.value, ()), a.self.dtype), a.self.shape)


@lowers("aten.zero.default", ops="full")
def _zero(ctx, node):
    dtype, shape = ctx.meta()
    return ctx.full(0, dtype, shape)


# -- identities and layout ---------------------------------------------------------------------

@lowers("aten.clone.default", "aten.detach.default", "aten.alias.default", "aten.lift_fresh_copy.default",
        "aten.lift_fresh.default", "aten.contiguous.default", ops="(none: the value itself)")
def _identity(ctx, node):
    return ctx.args().self


@lowers("aten.view.default", "aten._unsafe_view.default", "aten._reshape_alias.default",
        "aten.reshape.default", "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.default",
        "aten.flatten.using_ints", "aten.view_copy.default", "aten._reshape_alias_copy.default",
        "aten.unsqueeze_copy.default", "aten.squeeze_copy.dim", ops="reshape")
def _reshape(ctx, node):
    _, shape = ctx.meta()
    return ctx.reshape(ctx.args().self, shape)


@lowers("aten.t.default", "aten.t_copy.default", ops="transpose")
def _t(ctx, node):
    x = ctx.args().self
    return ctx.transpose(x, 0, 1) if len(x.shape) == 2 else x


@lowers("aten.transpose.int", "aten.transpose_copy.int", ops="transpose")
def _transpose(ctx, node):
    a = ctx.args()
    return ctx.transpose(a.self, a.dim0, a.dim1)


@lowers("aten.permute.default", "aten.permute_copy.default", ops="permute")
def _permute(ctx, node):
    a = ctx.args()
    return ctx.permute(a.self, a.dims)


@lowers("aten.expand.default", "aten.expand_copy.default", ops="broadcast_to")
def _expand(ctx, node):
    _, shape = ctx.meta()
    return ctx.broadcast_to(ctx.args().self, shape)


@lowers("aten.slice.Tensor", "aten.slice_copy.Tensor", ops="slice")
def _slice(ctx, node):
    a = ctx.args()
    if a.step < 1:
        ctx.fail(f"slice step {a.step}: only positive steps are supported")
    return ctx.slice(a.self, a.dim, a.start, a.end, a.step)


@lowers("aten.select.int", "aten.select_copy.int", ops="slice, reshape")
def _select(ctx, node):
    a = ctx.args()
    x = a.self
    dim = a.dim % len(x.shape)
    index = a.index + x.shape[dim] if a.index < 0 else a.index
    _, shape = ctx.meta()
    return ctx.reshape(ctx.slice(x, dim, index, index + 1), shape)


@lowers("aten.split.Tensor", "aten.split_with_sizes.default", "aten.split_copy.Tensor", ops="slice")
def _split(ctx, node):
    a = ctx.args()
    x = a.self
    dim = a.dim % len(x.shape)
    sizes = a.split_sizes if hasattr(a, "split_sizes") else None
    if sizes is None:
        n, step = x.shape[dim], a.split_size
        sizes = [min(step, n - s) for s in range(0, n, step)] if n else [0]
    out, start = [], 0
    for s in sizes:
        out.append(ctx.slice(x, dim, start, start + s))
        start += s
    return tuple(out)


@lowers("aten.unbind.int", ops="slice, reshape")
def _unbind(ctx, node):
    a = ctx.args()
    x = a.self
    dim = a.dim % len(x.shape)
    shape = x.shape[:dim] + x.shape[dim + 1:]
    return tuple(ctx.reshape(ctx.slice(x, dim, i, i + 1), shape) for i in range(x.shape[dim]))


def _pad_axis(ctx, g, axis, before, after, shape):
    """g zero-padded along one axis to `shape` (the backward of a slice or a select)."""
    rank = len(shape)
    if rank - axis > 4:
        ctx.fail(f"padding axis {axis} of a rank-{rank} tensor: pad covers the last 4 dims only")
    pads = [0] * (2 * (rank - axis))
    pads[-2], pads[-1] = before, after
    return ctx.op("pad", [g], g.dtype, shape, pads=pads, value=0.0)


@lowers("aten.slice_backward.default", ops="pad", note="the gradient zero-padded back (step 1)")
def _slice_backward(ctx, node):
    a = ctx.args()
    shape = tuple(a.input_sizes)
    axis = a.dim % len(shape)
    n = shape[axis]
    start = min(max(a.start + n if a.start < 0 else a.start, 0), n)
    end = min(max(a.end + n if a.end < 0 else a.end, start), n)
    if a.step != 1:
        ctx.fail(f"the backward of a slice with step {a.step} is not supported")
    return _pad_axis(ctx, a.grad_output, axis, start, n - end, shape)


@lowers("aten.select_backward.default", ops="reshape, pad", note="the gradient zero-padded back")
def _select_backward(ctx, node):
    a = ctx.args()
    shape = tuple(a.input_sizes)
    axis = a.dim % len(shape)
    index = a.index + shape[axis] if a.index < 0 else a.index
    g = ctx.reshape(a.grad_output, shape[:axis] + (1,) + shape[axis + 1:])
    return _pad_axis(ctx, g, axis, index, shape[axis] - index - 1, shape)


@lowers("aten.cat.default", ops="concat")
def _cat(ctx, node):
    a = ctx.args()
    dtype, _ = ctx.meta()
    xs = [ctx.cast(t, dtype) for t in a.tensors if not (len(t.shape) == 1 and t.shape[0] == 0)]
    return ctx.concat(xs, a.dim)


@lowers("aten.stack.default", ops="reshape, concat")
def _stack(ctx, node):
    a = ctx.args()
    dtype, shape = ctx.meta()
    dim = a.dim % len(shape)
    xs = [ctx.reshape(ctx.cast(t, dtype), t.shape[:dim] + (1,) + t.shape[dim:]) for t in a.tensors]
    return ctx.concat(xs, dim)


@lowers("aten.constant_pad_nd.default", ops="pad")
def _constant_pad(ctx, node):
    a = ctx.args()
    dtype, shape = ctx.meta()
    if not any(a.pad):
        return a.self
    return ctx.op("pad", [a.self], dtype, shape, pads=list(a.pad), value=float(a.value))


# -- sources -----------------------------------------------------------------------------------

@lowers("aten.zeros.default", "aten.zeros_like.default", "aten.empty.memory_format", "aten.empty_like.default",
        "aten.new_zeros.default", "aten.new_empty.default", "aten.empty_strided.default", ops="full",
        note="empty tensors are zeros")
def _zeros(ctx, node):
    dtype, shape = ctx.meta()
    return ctx.full(0, dtype, shape)


@lowers("aten.ones.default", "aten.ones_like.default", "aten.new_ones.default", ops="full")
def _ones(ctx, node):
    dtype, shape = ctx.meta()
    return ctx.full(1, dtype, shape)


@lowers("aten.full.default", "aten.full_like.default", "aten.new_full.default", ops="full")
def _full(ctx, node):
    dtype, shape = ctx.meta()
    return ctx.full(ctx.args().fill_value, dtype, shape)


@lowers("aten.scalar_tensor.default", ops="full")
def _scalar_tensor(ctx, node):
    dtype, shape = ctx.meta()
    return ctx.full(ctx.args().s, dtype, shape)


@lowers("aten.arange.default", "aten.arange.start", "aten.arange.start_step", ops="arange")
def _arange(ctx, node):
    a = ctx.args()
    dtype, shape = ctx.meta()
    start = getattr(a, "start", 0)
    step = getattr(a, "step", 1)
    return ctx.op("arange", [], dtype, shape, start=float(start), end=float(a.end), step=float(step),
                  dtype=DType(dtype))


# -- reductions --------------------------------------------------------------------------------

@lowers("aten.sum.dim_IntList", "aten.sum.default", ops="sum")
def _sum(ctx, node):
    a = ctx.args()
    dtype, _ = ctx.meta()
    dims = getattr(a, "dim", None) or []
    return ctx.cast(ctx.reduce("sum", a.self, list(dims), getattr(a, "keepdim", False)), dtype)


@lowers("aten.mean.dim", "aten.mean.default", ops="mean")
def _mean(ctx, node):
    a = ctx.args()
    dtype, _ = ctx.meta()
    dims = getattr(a, "dim", None) or []
    return ctx.cast(ctx.reduce("mean", a.self, list(dims), getattr(a, "keepdim", False)), dtype)


@lowers("aten.amax.default", ops="max")
def _amax(ctx, node):
    a = ctx.args()
    return ctx.reduce("max", a.self, list(a.dim), a.keepdim)


@lowers("aten.max.default", ops="max")
def _max_all(ctx, node):
    return ctx.reduce("max", ctx.args().self, [])


@lowers("aten.max.dim", ops="max, argmax")
def _max_dim(ctx, node):
    a = ctx.args()
    return (ctx.reduce("max", a.self, [a.dim], a.keepdim), _argmax_value(ctx, a.self, a.dim, a.keepdim))


def _argmax_value(ctx, x, dim, keepdim):
    dim %= len(x.shape)
    shape = [1 if i == dim else d for i, d in enumerate(x.shape)] if keepdim else \
        [d for i, d in enumerate(x.shape) if i != dim]
    return ctx.op("argmax", [x], "i64", shape, axis=dim, keepdim=bool(keepdim))


@lowers("aten.argmax.default", ops="argmax")
def _argmax(ctx, node):
    a = ctx.args()
    x = a.self
    if a.dim is None:
        x = ctx.reshape(x, (math.prod(x.shape),))
        return _argmax_value(ctx, x, 0, False)
    return _argmax_value(ctx, x, a.dim, a.keepdim)


def _norm(ctx, x, order, dims, keepdim):
    x = ctx.cast(x, "f32")
    order = 2.0 if order is None else float(order)
    if order == 2:
        return ctx.unary("sqrt", ctx.reduce("sum", ctx.binary("mul", x, x), dims, keepdim))
    if order == math.inf:
        return ctx.reduce("max", ctx.unary("abs", x), dims, keepdim)
    if order > 0:
        s = ctx.reduce("sum", ctx.binary("pow", ctx.unary("abs", x), order), dims, keepdim)
        return ctx.binary("pow", s, 1.0 / order)
    ctx.fail(f"a norm of order {order} is not supported")


@lowers("aten.linalg_vector_norm.default", ops="mul, sum, sqrt; abs, max; abs, pow, sum (composition)",
        note="ord 2 as sqrt(sum(x*x)), inf as max(abs), other p > 0 as sum(abs^p)^(1/p)")
def _vector_norm(ctx, node):
    a = ctx.args()
    return _norm(ctx, a.self, a.ord, list(a.dim) if a.dim else [], a.keepdim)


@lowers("aten.norm.Scalar", "aten.norm.ScalarOpt_dim", ops="mul, sum, sqrt; abs, max; abs, pow, sum (composition)",
        note="as linalg_vector_norm")
def _torch_norm(ctx, node):
    a = ctx.args()
    dims = list(getattr(a, "dim", None) or [])
    return _norm(ctx, a.self, a.p, dims, getattr(a, "keepdim", False))


@lowers("aten.addcmul.default", ops="mul, add")
def _addcmul(ctx, node):
    a = ctx.args()
    return ctx.binary("add", a.self, ctx.scale(ctx.binary("mul", a.tensor1, a.tensor2), a.value))


@lowers("aten.addcdiv.default", ops="div, mul, add")
def _addcdiv(ctx, node):
    a = ctx.args()
    return ctx.binary("add", a.self, ctx.scale(ctx.binary("div", a.tensor1, a.tensor2), a.value))


@lowers("aten.sgn.default", "aten.sign.default", ops="gt, lt, cast, sub")
def _sign(ctx, node):
    x = ctx.args().self
    pos = ctx.cast(ctx.binary("gt", x, 0), x.dtype)
    neg = ctx.cast(ctx.binary("lt", x, 0), x.dtype)
    return ctx.binary("sub", pos, neg)


# -- matrix products ---------------------------------------------------------------------------

def _transposed_param(node):
    """The tensor node whose transpose `node` is, if `node` is `aten.t` of a 2-d tensor."""
    if isinstance(node, torch.fx.Node) and node.op == "call_function" and \
            str(node.target) in ("aten.t.default", "aten.t_copy.default"):
        return node.args[0]
    return None


@lowers("aten.addmm.default", ops="linear, or matmul and add",
        note="bias + x @ t(w) is one linear; other operands a matmul and an add")
def _addmm(ctx, node):
    a = ctx.args()
    dtype, shape = ctx.meta()
    weight = _transposed_param(node.args[2])
    if weight is not None and a.beta == 1 and a.alpha == 1 and len(a.self.shape) == 1:
        w = ctx.env[weight]
        return ctx.op("linear", [a.mat1, w, a.self], dtype, shape)
    product = ctx.scale(ctx.matmul(a.mat1, a.mat2), a.alpha)
    return ctx.binary("add", product, ctx.scale(a.self, a.beta))


@lowers("aten.mm.default", "aten.bmm.default", "aten.matmul.default", ops="matmul; linear for x @ t(w)",
        note="x @ t(w) is a linear without bias (no transposed copy of the weight)")
def _mm(ctx, node):
    a = ctx.args()
    other = getattr(a, "mat2", None)
    other = other if other is not None else a.other
    weight = _transposed_param(node.args[1])
    if weight is not None and len(a.self.shape) >= 1 and len(other.shape) == 2:
        dtype, shape = ctx.meta()
        return ctx.op("linear", [a.self, ctx.env[weight]], dtype, shape)
    return ctx.matmul(a.self, other)


@lowers("aten.baddbmm.default", ops="matmul, mul, add")
def _baddbmm(ctx, node):
    a = ctx.args()
    product = ctx.scale(ctx.matmul(a.batch1, a.batch2), a.alpha)
    if a.beta == 0:
        return product
    return ctx.binary("add", ctx.scale(a.self, a.beta), product)


# -- nn ----------------------------------------------------------------------------------------

@lowers("aten.max_pool2d_with_indices.default", ops="max_pool2d",
        note="the indices only feed max_pool2d_with_indices_backward")
def _max_pool2d(ctx, node):
    a = ctx.args()
    dtype, shape = ctx.meta()[0]
    kernel = _pair(a.kernel_size)
    stride = _pair(a.stride) if a.stride else kernel
    y = ctx.op("max_pool2d", [a.self], dtype, shape, kernel=kernel, stride=stride, padding=_pair(a.padding),
               dilation=_pair(a.dilation), ceil_mode=bool(a.ceil_mode))
    return (y, _PoolIndices(node))


@lowers("aten.max_pool2d_with_indices_backward.default", ops="max_pool2d_grad")
def _max_pool2d_backward(ctx, node):
    a = ctx.args()
    kernel = _pair(a.kernel_size)
    stride = _pair(a.stride) if a.stride else kernel
    return ctx.op("max_pool2d_grad", [a.grad_output, a.self], "f32", a.self.shape, kernel=kernel,
                  stride=stride, padding=_pair(a.padding), dilation=_pair(a.dilation),
                  ceil_mode=bool(a.ceil_mode))


@lowers("aten.avg_pool2d.default", ops="avg_pool2d")
def _avg_pool2d(ctx, node):
    a = ctx.args()
    if a.divisor_override is not None:
        ctx.fail("avg_pool2d with divisor_override is not supported")
    dtype, shape = ctx.meta()
    kernel = _pair(a.kernel_size)
    stride = _pair(a.stride) if a.stride else kernel
    return ctx.op("avg_pool2d", [a.self], dtype, shape, kernel=kernel, stride=stride, padding=_pair(a.padding),
                  ceil_mode=bool(a.ceil_mode), count_include_pad=bool(a.count_include_pad))


@lowers("aten.avg_pool2d_backward.default", ops="avg_pool2d_grad")
def _avg_pool2d_backward(ctx, node):
    a = ctx.args()
    if a.divisor_override is not None:
        ctx.fail("avg_pool2d with divisor_override is not supported")
    kernel = _pair(a.kernel_size)
    stride = _pair(a.stride) if a.stride else kernel
    x = a.self
    return ctx.op("avg_pool2d_grad", [a.grad_output], "f32", x.shape, kernel=kernel, stride=stride,
                  padding=_pair(a.padding), count_include_pad=bool(a.count_include_pad),
                  input_size=list(x.shape[2:]))


@lowers("aten._adaptive_avg_pool2d.default", ops="adaptive_avg_pool2d")
def _adaptive_avg_pool2d(ctx, node):
    a = ctx.args()
    dtype, shape = ctx.meta()
    return ctx.op("adaptive_avg_pool2d", [a.self], dtype, shape, output_size=_pair(a.output_size))


@lowers("aten._adaptive_avg_pool2d_backward.default", ops="adaptive_avg_pool2d_grad")
def _adaptive_avg_pool2d_backward(ctx, node):
    a = ctx.args()
    return ctx.op("adaptive_avg_pool2d_grad", [a.grad_output], "f32", a.self.shape,
                  input_size=list(a.self.shape[2:]))


@lowers("aten.convolution_backward.default", ops="conv2d_input_grad, conv2d_weight_grad, sum")
def _convolution_backward(ctx, node):
    a = ctx.args()
    if a.transposed:
        ctx.fail("transposed convolutions are not supported")
    g, x, w = a.grad_output, a.input, a.weight
    if len(x.shape) != 4:
        ctx.fail(f"only the backward of 2-d convolutions is supported, the input is rank {len(x.shape)}")
    attrs = dict(stride=_pair(a.stride), padding=_pair(a.padding), dilation=_pair(a.dilation), groups=a.groups)
    mask = list(a.output_mask)
    gx = ctx.op("conv2d_input_grad", [g, w], "f32", x.shape, input_size=list(x.shape[2:]), **attrs) \
        if mask[0] else None
    gw = ctx.op("conv2d_weight_grad", [g, x], "f32", w.shape, kernel=list(w.shape[2:]), **attrs) \
        if mask[1] else None
    gb = ctx.reduce("sum", g, [0, 2, 3]) if mask[2] else None
    return (gx, gw, gb)


@lowers("aten.threshold_backward.default", ops="gt, where")
def _threshold_backward(ctx, node):
    a = ctx.args()
    keep = ctx.binary("gt", a.self, float(a.threshold), compute=a.self.dtype)
    return ctx.where_(keep, a.grad_output, 0.0, a.grad_output.dtype)


@lowers("aten.hardtanh_backward.default", ops="lt, gt, minimum, where")
def _hardtanh_backward(ctx, node):
    a = ctx.args()
    x = a.self
    inside = ctx.binary("minimum", ctx.binary("gt", x, float(a.min_val)), ctx.binary("lt", x, float(a.max_val)))
    return ctx.where_(inside, a.grad_output, 0.0, "f32")


@lowers("aten.gelu_backward.default", ops="mul, add, erf, exp, tanh (composition)", note="PyTorch's formula")
def _gelu_backward(ctx, node):
    a = ctx.args()
    g, x = a.grad_output, a.self
    if a.approximate == "tanh":
        k = math.sqrt(2 / math.pi)
        x2 = ctx.binary("mul", x, x)
        inner = ctx.binary("mul", ctx.binary("add", x, ctx.binary("mul", ctx.binary("mul", x2, x), 0.044715)), k)
        t = ctx.unary("tanh", inner)
        left = ctx.binary("mul", ctx.binary("add", t, 1.0), 0.5)
        dinner = ctx.binary("mul", ctx.binary("add", ctx.binary("mul", x2, 3 * 0.044715), 1.0), k)
        right = ctx.binary("mul", ctx.binary("mul", ctx.binary("mul", x, 0.5),
                                              ctx.binary("sub", 1.0, ctx.binary("mul", t, t))), dinner)
        return ctx.binary("mul", g, ctx.binary("add", left, right))
    cdf = ctx.binary("mul", ctx.binary("add", ctx.unary("erf", ctx.binary("mul", x, 1 / math.sqrt(2))), 1.0), 0.5)
    pdf = ctx.binary("mul", ctx.unary("exp", ctx.binary("mul", ctx.binary("mul", x, x), -0.5)),
                     1 / math.sqrt(2 * math.pi))
    return ctx.binary("mul", g, ctx.binary("add", cdf, ctx.binary("mul", x, pdf)))


@lowers("aten.tanh_backward.default", ops="mul, sub")
def _tanh_backward(ctx, node):
    a = ctx.args()
    y = a.output
    return ctx.binary("mul", a.grad_output, ctx.binary("sub", 1.0, ctx.binary("mul", y, y)))


@lowers("aten.sigmoid_backward.default", ops="mul, sub")
def _sigmoid_backward(ctx, node):
    a = ctx.args()
    y = a.output
    return ctx.binary("mul", a.grad_output, ctx.binary("mul", y, ctx.binary("sub", 1.0, y)))


@lowers("aten._softmax.default", ops="softmax")
def _softmax(ctx, node):
    a = ctx.args()
    x = a.self
    return ctx.op("softmax", [x], "f32", x.shape, axis=a.dim % len(x.shape))


@lowers("aten._log_softmax.default", ops="log_softmax")
def _log_softmax(ctx, node):
    a = ctx.args()
    x = a.self
    return ctx.op("log_softmax", [x], "f32", x.shape, axis=a.dim % len(x.shape))


@lowers("aten._softmax_backward_data.default", ops="mul, sum, sub")
def _softmax_backward(ctx, node):
    a = ctx.args()
    g, y = a.grad_output, a.output
    s = ctx.reduce("sum", ctx.binary("mul", g, y), [a.dim], keepdim=True)
    return ctx.binary("mul", y, ctx.binary("sub", g, s))


@lowers("aten._log_softmax_backward_data.default", ops="exp, sum, mul, sub")
def _log_softmax_backward(ctx, node):
    a = ctx.args()
    g, y = a.grad_output, a.output
    s = ctx.reduce("sum", g, [a.dim], keepdim=True)
    return ctx.binary("sub", g, ctx.binary("mul", ctx.unary("exp", y), s))


@lowers("aten.embedding.default", ops="embedding")
def _embedding(ctx, node):
    a = ctx.args()
    w, idx = a.weight, a.indices
    return ctx.op("embedding", [w, idx], w.dtype, idx.shape + (w.shape[1],))


@lowers("aten.embedding_dense_backward.default", ops="full, reshape, broadcast_to, scatter_add")
def _embedding_backward(ctx, node):
    a = ctx.args()
    if a.scale_grad_by_freq:
        ctx.fail("embedding with scale_grad_by_freq is not supported")
    g, idx = a.grad_output, a.indices
    dim = g.shape[-1]
    n = math.prod(idx.shape)
    flat = ctx.broadcast_to(ctx.reshape(idx, (n, 1)), (n, dim))
    rows = ctx.reshape(g, (n, dim))
    if a.padding_idx >= 0:
        keep = ctx.logical_not(ctx.binary("eq", flat, a.padding_idx))
        rows = ctx.where_(keep, rows, 0.0, "f32")
    zeros = ctx.full(0, "f32", (a.num_weights, dim))
    return ctx.op("scatter_add", [zeros, flat, rows], "f32", (a.num_weights, dim), axis=0)


@lowers("aten.gather.default", ops="gather")
def _gather(ctx, node):
    a = ctx.args()
    if a.sparse_grad:
        ctx.fail("gather with sparse_grad is not supported")
    return ctx.op("gather", [a.self, a.index], a.self.dtype, a.index.shape, axis=a.dim % len(a.self.shape))


@lowers("aten.index_select.default", ops="index_select")
def _index_select(ctx, node):
    a = ctx.args()
    dtype, shape = ctx.meta()
    return ctx.op("index_select", [a.self, a.index], dtype, shape, axis=a.dim % len(a.self.shape))


@lowers("aten.scatter_add.default", ops="scatter_add")
def _scatter_add(ctx, node):
    a = ctx.args()
    return ctx.op("scatter_add", [a.self, a.index, a.src], a.self.dtype, a.self.shape,
                  axis=a.dim % len(a.self.shape))


@lowers("aten.nll_loss_forward.default", ops="gather, neg, mean/sum, where, eq (composition)",
        note="no class weights; ignore_index honoured")
def _nll_loss_forward(ctx, node):
    a = ctx.args()
    if a.weight is not None:
        ctx.fail("nll_loss with class weights is not supported")
    x, target = a.self, a.target
    if len(x.shape) != 2:
        ctx.fail(f"nll_loss over a rank-{len(x.shape)} input: only [N, C] is supported")
    n = x.shape[0]
    picked = ctx.reshape(ctx.op("gather", [x, ctx.reshape(target, (n, 1))], "f32", (n, 1), axis=1), (n,))
    valid = ctx.logical_not(ctx.binary("eq", target, a.ignore_index))
    losses = ctx.where_(valid, ctx.unary("neg", picked), 0.0, "f32")
    count = ctx.reduce("sum", ctx.cast(valid, "f32"), [])
    if a.reduction == 0:
        return (losses, count)
    total = ctx.reduce("sum", losses, [])
    if a.reduction == 1:
        return (ctx.binary("div", total, count), count)
    return (total, count)


@lowers("aten.nll_loss_backward.default", ops="scatter_add, where, eq, div (composition)")
def _nll_loss_backward(ctx, node):
    a = ctx.args()
    x, target, g = a.self, a.target, a.grad_output
    n, c = x.shape
    valid = ctx.logical_not(ctx.binary("eq", target, a.ignore_index))
    scale = ctx.where_(valid, ctx.unary("neg", ctx.broadcast_to(g, (n,))) if g.shape != (n,) else
                       ctx.unary("neg", g), 0.0, "f32")
    if a.reduction == 1:
        scale = ctx.binary("div", scale, a.total_weight)
    zeros = ctx.full(0, "f32", (n, c))
    return ctx.op("scatter_add", [zeros, ctx.reshape(target, (n, 1)), ctx.reshape(scale, (n, 1))], "f32",
                  (n, c), axis=1)


@lowers("aten.native_dropout.default", ops="(identity at p = 0)",
        note="training dropout draws PyTorch's random numbers, which tracecache cannot match: only p = 0 or eval")
def _native_dropout(ctx, node):
    a = ctx.args()
    if a.train and a.p > 0:
        ctx.fail(f"training-mode dropout (p={a.p}) draws PyTorch's random numbers, which tracecache cannot "
                 f"reproduce; call model.eval() or use p=0")
    x = a.self
    return (x, ctx.full(1, "bool", x.shape))


@lowers("aten.native_dropout_backward.default", ops="cast, mul")
def _native_dropout_backward(ctx, node):
    a = ctx.args()
    return ctx.binary("mul", a.grad_output, ctx.binary("mul", ctx.cast(a.mask, "f32"), float(a.scale)))


def table():
    """The mapping as rows (ATen op, tracecache ops, note), sorted by ATen op name. In-place
    variants (`relu_`, `add_`, ...) map as their functional op."""
    return [(name, reg.ops, reg.note) for name, reg in sorted(LOWERINGS.items())]
