"""A captured graph at other input sizes, without capturing again (automatic dynamic shapes).

A capture (`make_fx` in real mode) records every size the program computed as a number: a
`view(x, [8, 512])` holds the batch size 8. When a compiled function meets a new size of an
input dim, tracecache does not run the program again. `respecialize(capture, shapes)` rewrites
the captured graph for the new input shapes:

1. The *symbols*: each input dim whose size changed maps its captured size to its new one
   (batch 1 -> 8). Two dims that had the same captured size must change alike (else it fails).
2. Every node in order runs on PyTorch's meta tensors at the new shapes (the op's own shape
   function; an op without one runs on zeros), giving its new result type. The size arguments of
   the ops that take them are rewritten first:
   - reshapes (`view`, `_reshape_alias`, `_unsafe_view`, `reshape`): the target's dims are
     grouped with the input's by their captured sizes (the run of input dims whose product is
     the run of target dims'), and each group's growth goes to its first target dim (the batch
     leads: [B*h, T, d] -> [B, h, T, d] grows B);
   - `expand`: a dim that followed its input follows its new size; an explicit size equal to a
     symbol's captured value takes the symbol's new value;
   - creation ops (`zeros`, `full`, `new_empty`, `arange`, ...) and slice bounds: a number equal
     to a symbol's captured value takes its new value.
   Everything else is taken as independent of the sizes.
3. `bindings_for` (used by the compiled module's lowering) compares the registry ops the lowering
   emits for the new graph with those it emits for the captured one, node by node: an attribute
   element that differs is bound to a dim of a value with the same two sizes (LazyContext
   AttrBinding), so tracecache's trace template follows the dim at every later size, or, for a
   reshape, becomes -1; when one cannot be explained, the entry is kept static.

The rewrite is a heuristic: a program that computes a size the rules above do not follow (a
literal 1 that happens to equal the captured batch size) gets a graph that is wrong at the new
size. The compiled module therefore checks the first call at a new size against eager PyTorch
and, when they differ, drops the entry, keeps the dims static and captures for real.

Not thread-safe. Errors: `Unspecializable` (why) when the graph cannot be rewritten: it read a
value or made a data-dependent shape, the symbols are ambiguous, a size does not divide, or an
op fails at the new shapes.
"""

import math
import operator

import torch
from torch.fx.passes.shape_prop import _extract_tensor_metadata

from .capture import is_data_dependent

__all__ = ["Unspecializable", "respecialize", "symbols_of"]

_INT64_MAX = 9223372036854775807

_RESHAPES = {"view", "_reshape_alias", "_unsafe_view", "reshape", "view_copy", "_reshape_alias_copy"}
# Ops whose int-list argument at `index` is a size: creation ops.
_SIZE_ARG = {"zeros": 0, "ones": 0, "empty": 0, "full": 0, "rand": 0, "randn": 0, "new_zeros": 1, "new_ones": 1,
             "new_empty": 1, "new_full": 1, "empty_strided": 0}


class Unspecializable(Exception):
    """The capture cannot be rewritten for the new sizes; the message says why."""


def symbols_of(captured_shapes, new_shapes):
    """{captured size: new size} for the input dims that changed; Unspecializable when two dims of
    one captured size changed differently, or a rank differs."""
    symbols = {}
    for old, new in zip(captured_shapes, new_shapes):
        if len(old) != len(new):
            raise Unspecializable("an input's rank changed")
        for a, b in zip(old, new):
            if a == b:
                continue
            if symbols.get(a, b) != b:
                raise Unspecializable(f"two dims of size {a} became {symbols[a]} and {b}")
            symbols[a] = b
    return symbols


def _translate(v, symbols):
    return symbols.get(v, v) if isinstance(v, int) and not isinstance(v, bool) else v


def _grown_dim(k, old_in, new_in, target, cumulative, before, symbols):
    """The target dim that takes the growth of input dim k (see _reshape_target)."""
    o, n = old_in[k], new_in[k]
    # Among the target dims within input dim k's extent, the one whose captured size is a
    # symbol that grows exactly as k did ([T*B] -> [T, B] grows B, whichever is first).
    group = [i for i in range(len(target))
             if (cumulative[i - 1] if i else 1) >= before and cumulative[i] <= before * max(o, 1)]
    for i in group:
        if o and target[i] in symbols and target[i] * n == symbols[target[i]] * o:
            return i
    if k < len(target) and list(old_in[:k]) == target[:k] and (o == target[k] or o == 1 and target[k] == 1):
        return k  # the same position, everything before it the same
    if o != 1:  # the target dim in which it starts
        return next((i for i, c in enumerate(cumulative) if c > before), len(target) - 1)
    # A dim of size 1 has no extent in the captured shapes. It joins the next input dim when
    # that one is split over several target dims ([T, B, E] -> [T, B*h, d]), else the dims
    # before it ([T, B, E] -> [T*B, E]), else the first target dim.
    nxt = next((m for m in range(k + 1, len(old_in)) if old_in[m] != 1), None)
    if nxt is not None:
        end = before * old_in[nxt]
        group = [i for i in range(len(target))
                 if (cumulative[i - 1] if i else 1) >= before and cumulative[i] <= end and target[i] != 1]
        if len(group) >= 2:
            return group[0]
    if before > 1:
        return max(i for i, c in enumerate(cumulative) if c <= before)
    return next((i for i, c in enumerate(cumulative) if c > 1), 0)


def _reshape_targets(old_in, new_in, target, symbols):
    """The targets a reshape may have at the new input shape, the likeliest first: each input dim
    that changed passes its growth to the target dim at its own position when everything before
    it is the same (a flatten or unflatten of later dims), else to the target dim in which it
    starts (the batch leads: [B*h, T, d] -> [B, h, T, d] grows B), unless a target dim within its
    extent has a captured size that is a symbol growing as much (`symbols`); a dim of captured
    size 1 goes with its neighbours (_grown_dim). With one dim grown, the other target dims it
    touches follow as alternatives (respecialize tries them when a later op fails)."""
    target = list(target)
    if -1 in target:  # resolve it at the captured sizes first
        known = math.prod(d for d in target if d != -1)
        target[target.index(-1)] = math.prod(old_in) // known if known else 0
    if math.prod(old_in) != math.prod(target) or not target:
        raise Unspecializable(f"a reshape of {list(old_in)} to {target}")
    cumulative, c = [], 1
    for d in target:
        c *= d
        cumulative.append(c)
    grown, before, starts = [], 1, []
    for k, (o, n) in enumerate(zip(old_in, new_in)):
        starts.append(before)
        if o != n:
            grown.append(k)
        before *= o

    def apply(choice):
        out = list(target)
        for k, j in choice:
            o, n = old_in[k], new_in[k]
            if o == 0 or (out[j] * n) % o:
                return None
            out[j] = out[j] * n // o
        return out if math.prod(out) == math.prod(new_in) else None

    first = [(k, _grown_dim(k, old_in, new_in, target, cumulative, starts[k], symbols)) for k in grown]
    options = [first]
    if len(grown) == 1:
        k = grown[0]
        lo, hi = starts[k], starts[k] * max(old_in[k], 1)
        for i in range(len(target)):
            start = cumulative[i - 1] if i else 1
            if i != first[0][1] and start <= hi and cumulative[i] >= lo:
                options.append([(k, i)])
    targets = []
    for choice in options:
        out = apply(choice)
        if out is not None and out not in targets:
            targets.append(out)
    if not targets:
        raise Unspecializable(f"a reshape of {list(old_in)} to {target} does not follow the new sizes")
    return targets


def _meta(v):
    if isinstance(v, torch.Tensor):
        return v.to("meta")
    return v


def _zeros(v):
    if isinstance(v, torch.Tensor) and v.device.type == "meta":
        return torch.zeros(v.shape, dtype=v.dtype)
    if isinstance(v, (list, tuple)):
        return type(v)(_zeros(x) for x in v)
    return v


def _tensor_meta(v):
    if isinstance(v, torch.Tensor):
        return _extract_tensor_metadata(v)
    if isinstance(v, (list, tuple)):
        return tuple(_tensor_meta(x) for x in v)
    return None


def respecialize(gm, names, new_shapes):
    """A copy of captured GraphModule `gm` for placeholders of `new_shapes` (one per placeholder,
    in order; dtypes unchanged), with its size arguments and recorded result types rewritten.
    Returns (graph module, symbols)."""
    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    if len(placeholders) != len(new_shapes):
        raise Unspecializable("the call has another number of arguments")
    if any(is_data_dependent(n) for n in nodes):
        raise Unspecializable("the program read a value or made a data-dependent shape")
    captured = [tuple(n.meta["tensor_meta"].shape) for n in placeholders]
    symbols = symbols_of(captured, [tuple(s) for s in new_shapes])
    if not symbols:
        raise Unspecializable("no size changed")
    graph = torch.fx.Graph()
    remap = {}
    output, _ = graph.graph_copy(gm.graph, remap, return_output_node=True)
    graph.output(output)
    out_gm = torch.fx.GraphModule(gm, graph)
    env = {}
    shapes = {remap[n]: tuple(shape) for n, shape in zip(placeholders, new_shapes)}
    work = [(old, remap[old]) for old in nodes if old.op != "output"]
    for old, node in work:
        node.meta = dict(old.meta)
        node.meta["captured_args"] = node.args
    choices = {}  # position in `work` -> (candidate argument tuples, index tried)
    backtracks = 0
    p = 0
    while p < len(work):
        old, node = work[p]
        try:
            _specialize_node(p, old, node, env, symbols, shapes, gm, choices)
            p += 1
        except Unspecializable:
            # Another candidate of the latest reshape that has one left, and go on from there.
            tried = [q for q in sorted(choices, reverse=True) if q <= p and choices[q][1] + 1 < len(choices[q][0])]
            if not tried or backtracks >= _MAX_BACKTRACKS:
                raise
            backtracks += 1
            q = tried[0]
            for later in [k for k in choices if k > q]:
                del choices[later]
            candidates, index = choices[q]
            choices[q] = (candidates, index + 1)
            p = q
    for _, node in work:
        node.meta.pop("captured_args", None)
    return out_gm, symbols


_MAX_BACKTRACKS = 32


def _specialize_node(p, old, node, env, symbols, shapes, gm, choices):
    """Node `node` (the copy of captured node `old`, at position p) at the new sizes: its size
    arguments rewritten (the candidate `choices` holds for it, if any) and its result on meta
    tensors recorded in env and in its tensor_meta. Unspecializable when the op fails there."""
    if node.op == "placeholder":
        env[node] = torch.empty(shapes[node], dtype=old.meta["tensor_meta"].dtype, device="meta")
    elif node.op == "get_attr":
        env[node] = _meta(getattr(gm, node.target))
    elif node.op == "call_function" and node.target is operator.getitem:
        env[node] = env[node.args[0]][node.args[1]]
    elif node.op == "call_function":
        if p not in choices:
            choices[p] = (_size_candidates(node, old, env, symbols), 0)
        candidates, index = choices[p]
        node.args = candidates[index]

        def value(a):
            if isinstance(a, torch.fx.Node):
                return env[a]
            if isinstance(a, (list, tuple)):
                return type(a)(value(x) for x in a)
            return a
        args, kwargs = value(node.args), {k: value(v) for k, v in node.kwargs.items()}
        try:
            env[node] = node.target(*args, **kwargs)
        except Exception:  # no meta kernel: run on zeros of the new shapes
            try:
                result = node.target(*_zeros(args), **{k: _zeros(v) for k, v in kwargs.items()})
            except Exception as e:
                raise Unspecializable(f"{node.target} fails at the new sizes: {e}") from None
            env[node] = pytree_map_meta(result)
        if len(candidates) == 1:
            del choices[p]  # nothing to go back to here
    else:
        raise Unspecializable(f"an FX node of kind {node.op}")
    value = env.get(node)
    if isinstance(value, (torch.Tensor, list, tuple)):
        node.meta["tensor_meta"] = _tensor_meta(value)


def pytree_map_meta(v):
    if isinstance(v, torch.Tensor):
        return v.to("meta")
    if isinstance(v, (list, tuple)):
        return type(v)(pytree_map_meta(x) for x in v)
    return v


def _shape(env, a):
    v = env[a]
    return tuple(v.shape)


def _size_candidates(node, old, env, symbols):
    """The argument tuples `node` (a copy of captured node `old`) may take at the new input
    shapes, the likeliest first: its size arguments rewritten (one candidate but for reshapes)."""
    packet = getattr(node.target, "overloadpacket", None)
    name = packet.__name__ if packet is not None else ""
    base = name[:-1] if name.endswith("_") and not name.startswith("_") else name
    args = list(node.meta["captured_args"])
    if base in _RESHAPES:
        src = old.args[0]
        old_in = tuple(src.meta["tensor_meta"].shape)
        new_in = _shape(env, node.args[0])
        target = tuple(old.meta["tensor_meta"].shape)
        out = []
        for t in _reshape_targets(old_in, new_in, target, symbols):
            a = list(args)
            a[1] = t
            if base in ("_reshape_alias", "_reshape_alias_copy") and len(a) > 2:
                a[2] = list(torch.empty(t, device="meta").stride())
            out.append(_node_args(a))
        return out
    elif base in ("expand", "expand_copy"):
        new_in = _shape(env, node.args[0])
        old_in = tuple(old.args[0].meta["tensor_meta"].shape)
        size = list(args[1])
        lead = len(size) - len(new_in)
        for d, s in enumerate(size):
            k = d - lead
            if s == -1:
                continue
            if k >= 0 and old_in[k] == s and not (s in symbols and old_in[k] == 1):
                size[d] = new_in[k]
            else:
                size[d] = _translate(s, symbols)
        args[1] = size
    elif base in _SIZE_ARG and len(args) > _SIZE_ARG[base]:
        k = _SIZE_ARG[base]
        args[k] = [_translate(s, symbols) for s in args[k]]
    elif base == "arange":
        args = [_translate(a, symbols) for a in args]
    elif base in ("slice", "slice_copy"):
        src = old.args[0]
        dim = args[1] if len(args) > 1 else 0
        old_size = tuple(src.meta["tensor_meta"].shape)[dim]
        new_size = _shape(env, node.args[0])[dim]
        for k in (2, 3):
            if k < len(args) and isinstance(args[k], int):
                if args[k] == old_size or args[k] >= _INT64_MAX:
                    args[k] = new_size if args[k] == old_size else args[k]
                else:
                    args[k] = _translate(args[k], symbols)
    return [_node_args(args)]


def _node_args(args):
    """Argument values as node arguments (the captured nodes' own, sizes replaced)."""
    return tuple(args)



# -- bindings: which attribute elements follow which dims ------------------------------------

class _Shadow:
    """A handle of the shadow lowering: the shape its value has there."""
    __slots__ = ("shape",)

    def __init__(self):
        self.shape = None


class ShadowEmitter:
    """Records, per FX node, the registry ops a lowering emits (name, attributes, result shape),
    computing nothing: the lowering of the graph at the other sizes."""

    def __init__(self):
        self.ops = {}
        self._node = None

    def hint(self, name):
        self._node = self.ops.setdefault(name, [])

    def op(self, name, inputs, attrs):
        handle = _Shadow()
        self._node.append((name, dict(attrs), handle))
        return handle

    def note_result(self, handle, shape):
        handle.shape = tuple(shape)

    def constant(self, target, tensor):
        return _Shadow()

    def read(self, handle):
        pass

    def host_op(self, payload, inputs, description):
        import json
        return [_Shadow() for r in json.loads(payload)["results"] if r]


class BindingEmitter:
    """Wraps the emitter of a trace (the real lowering) and, comparing each op with the shadow
    lowering's op of the same node and position, binds every attribute element that differs to
    a dim of a value that differs the same way (AttrBinding through `tracecache.op(_bind=...)`),
    or makes it -1 in a reshape's shape. What it cannot explain is listed in `unexplained`: the
    caller then keeps the entry static. `sources` starts with the inputs' dims: (handle, shadow
    shape) per input."""

    def __init__(self, inner, shadow_ops, inputs):
        self.inner = inner
        self.shadow_ops = shadow_ops
        self.unexplained = []
        self.sources = {}
        self._node = None
        self._shadow = []
        self._k = 0
        self._pending = []
        for handle, shadow_shape in inputs:
            self._add_sources(handle, shadow_shape, tuple(handle._peek_shape))

    def _add_sources(self, handle, shadow_shape, shape):
        if shadow_shape is None or shape is None or len(shadow_shape) != len(shape):
            return
        for d, (a, b) in enumerate(zip(shadow_shape, shape)):
            if a != b:
                self.sources.setdefault((a, b), (handle, d))

    def hint(self, name):
        if self._node is not None and self._k != len(self._shadow):
            self.unexplained.append(f"{self._node}: the lowering emits other ops at the two sizes")
        self._node = name
        self._shadow = self.shadow_ops.get(name, [])
        self._k = 0
        if name is not None and hasattr(self.inner, "hint"):
            self.inner.hint(name)

    def op(self, name, inputs, attrs):
        shadow = self._shadow[self._k] if self._k < len(self._shadow) else None
        self._k += 1
        if shadow is None or shadow[0] != name:
            if any(isinstance(v, (int, float, list, tuple)) and not isinstance(v, bool) for v in attrs.values()):
                self.unexplained.append(f"{self._node}: '{name}' has no counterpart at the other sizes")
            self._pending = [None]
            return self.inner.op(name, inputs, attrs)
        bind, attrs = self._bind(name, shadow[1], dict(attrs))
        if bind:
            attrs["_bind"] = bind
        handle = self.inner.op(name, inputs, attrs)
        self._pending = [shadow[2]]
        return handle

    def _bind(self, name, shadow_attrs, attrs):
        bind = []
        for key, value in list(attrs.items()):
            other = shadow_attrs.get(key)
            if other == value:
                continue
            if isinstance(value, (list, tuple)) and isinstance(other, (list, tuple)) and len(value) == len(other):
                value = list(value)
                for e, (a, b) in enumerate(zip(other, value)):
                    if a == b:
                        continue
                    source = self.sources.get((a, b))
                    if source is not None:
                        bind.append((key, e, source[0], source[1]))
                    elif name == "reshape" and key == "shape" and -1 not in value:
                        value[e] = -1
                    else:
                        self.unexplained.append(f"{self._node}: '{name}' {key}[{e}] is {a} and {b} at the two sizes")
                attrs[key] = value
            elif isinstance(value, (int, float)) and isinstance(other, (int, float)) and not isinstance(value, bool):
                source = self.sources.get((other, value))
                if source is not None and float(value) == int(value):
                    bind.append((key, -1, source[0], source[1]))
                else:
                    self.unexplained.append(f"{self._node}: '{name}' {key} is {other} and {value} at the two sizes")
            else:
                self.unexplained.append(f"{self._node}: '{name}' {key} differs at the two sizes")
        return bind, attrs

    def finish(self):
        """Checks the last node's ops (call after the lowering)."""
        self.hint(None)

    def note_result(self, handle, shape):
        shadow = self._pending[0] if self._pending else None
        if shadow is not None:
            self._add_sources(handle, shadow.shape, tuple(shape))
        self._pending = []

    def constant(self, target, tensor):
        return self.inner.constant(target, tensor)

    def read(self, handle):
        return self.inner.read(handle)

    def host_op(self, payload, inputs, description):
        return self.inner.host_op(payload, inputs, description)
