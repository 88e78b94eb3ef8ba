"""Advanced indexing: `x[idx]`, `x[:, i, j]`, `x[i, :, j]` (aten.index) and its writes
(`index_put`, the backward's `_index_put_impl_`), `index_add` (index_select's backward), and
the indices of `repeat_interleave`.

An advanced index is one or more integer index tensors at some of the dims of `x` (None, a full
slice, elsewhere). The index tensors broadcast to one shape B; negative entries count from the
end of their dim. The indexed dims are read as one: their entries combine into a linear index
into the product of their sizes (`((i0 * n1) + i1) * n2 + i2`), the indexed dims are moved to
the front and merged, and one `index_select` reads the rows. As in NumPy and PyTorch, B's dims
replace the indexed dims in place when those are adjacent, and lead the result otherwise. A
single index tensor is one `index_select` along its dim, with no layout change.

Index values out of range are clamped by the registry's `index_select`, `scatter_add` and
`scatter_elements` (PyTorch raises). Boolean masks are refused (the result's shape depends on
the data: `nonzero` first).

Part of the one mapping from ATen ops to tracecache registry ops (`tracecache.torch.lowering`
has the Lowerer and the contract every lowering follows). Read-only after import.
"""

import math
import operator

import torch

from ..lowering import DType, _broadcast, lowers


class _Index:
    """How an advanced index addresses `x`: the indexed `dims` (ascending), the `rest`, the
    broadcast index shape `batch`, the position `lead` of the batch dims among the result's
    dims, and `linear` (i64 of shape `batch`), the entries as one index into the indexed dims."""

    def __init__(self, dims, rest, batch, lead, linear):
        self.dims, self.rest, self.batch, self.lead, self.linear = dims, rest, batch, lead, linear

    def result_shape(self, x):
        rest = [x.shape[d] for d in self.rest]
        return tuple(rest[:self.lead]) + tuple(self.batch) + tuple(rest[self.lead:])

    def to_result(self):
        """The permutation from [batch..., rest...] to the result's dim order."""
        nb, nr = len(self.batch), len(self.rest)
        return list(range(nb, nb + self.lead)) + list(range(nb)) + list(range(nb + self.lead, nb + nr))


def _plan(ctx, x, indices):
    rank = len(x.shape)
    if len(indices) > rank:
        ctx.fail(f"{len(indices)} indices for a rank-{rank} tensor")
    entries = list(indices) + [None] * (rank - len(indices))
    dims = [d for d, t in enumerate(entries) if t is not None]
    if not dims:
        ctx.fail("an index with no index tensor")
    for d in dims:
        t = entries[d]
        if t.dtype == "bool":
            ctx.fail(f"a boolean mask index (dim {d}): the result's shape depends on the mask's values; "
                     f"index with integer positions (mask.nonzero()) outside the compiled code")
        if t.dtype not in ("i64", "i32"):
            ctx.fail(f"an index tensor of dtype {t.dtype} (dim {d}); integer indices are i64 or i32")
    batch = _broadcast(*(entries[d].shape for d in dims))
    linear = None
    for d in dims:
        t = ctx.cast(entries[d], "i64")
        t = ctx.where_(ctx.binary("lt", t, 0), ctx.binary("add", t, x.shape[d]), t, "i64")
        linear = t if linear is None else ctx.binary("add", ctx.binary("mul", linear, x.shape[d]), t)
    linear = ctx.broadcast_to(linear, batch)
    adjacent = dims == list(range(dims[0], dims[-1] + 1))
    rest = [d for d in range(rank) if d not in dims]
    return _Index(dims, rest, batch, dims[0] if adjacent else 0, linear)


def _inverse(perm):
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


@lowers("aten.index.Tensor", ops="where, lt, add, mul (negative and combined indices), index_select; permute, "
        "reshape for indices on several dims",
        note="integer index tensors on any dims (broadcast together, negative from the end); no boolean masks")
def _index(ctx, node):
    a = ctx.args()
    x = a.self
    plan = _plan(ctx, x, a.indices)
    dtype, shape = ctx.meta()
    m = math.prod(plan.batch)
    flat = ctx.reshape(plan.linear, (m,))
    if len(plan.dims) == 1:
        d = plan.dims[0]
        picked = ctx.op("index_select", [x, flat], x.dtype, x.shape[:d] + (m,) + x.shape[d + 1:], axis=d)
        return ctx.reshape(picked, shape)
    rest = tuple(x.shape[d] for d in plan.rest)
    rows = ctx.reshape(ctx.permute(x, plan.dims + plan.rest), (math.prod(x.shape[d] for d in plan.dims),) + rest)
    picked = ctx.op("index_select", [rows, flat], x.dtype, (m,) + rest, axis=0)
    return ctx.permute(ctx.reshape(picked, tuple(plan.batch) + rest), plan.to_result())


@lowers("aten.index_put.default", "aten._index_put_impl_.default",
        ops="scatter_add (accumulate, f32) or scatter_elements; reshape, permute, broadcast_to",
        note="the values broadcast to the indexed shape; accumulate adds (duplicates add up), otherwise the "
             "last duplicate wins")
def _index_put(ctx, node):
    a = ctx.args()
    x = a.self
    plan = _plan(ctx, x, a.indices)
    values = ctx.broadcast_to(ctx.cast(ctx.tensor(a.values, x.dtype), x.dtype), plan.result_shape(x))
    m = math.prod(plan.batch)
    rest = tuple(x.shape[d] for d in plan.rest)
    if len(plan.dims) == 1:
        d = plan.dims[0]
        target, axis = x, d
        src = ctx.reshape(values, x.shape[:d] + (m,) + x.shape[d + 1:])
        index_shape = [m if k == d else 1 for k in range(len(x.shape))]
    else:
        lead = (math.prod(x.shape[d] for d in plan.dims),)
        target, axis = ctx.reshape(ctx.permute(x, plan.dims + plan.rest), lead + rest), 0
        src = ctx.reshape(ctx.permute(values, _inverse(plan.to_result())), (m,) + rest)
        index_shape = [m] + [1] * len(rest)
    index = ctx.broadcast_to(ctx.reshape(plan.linear, index_shape), src.shape)
    if a.accumulate and x.dtype == "f32":
        out = ctx.op("scatter_add", [target, index, src], x.dtype, target.shape, axis=axis)
    else:
        out = ctx.op("scatter_elements", [target, index, src], x.dtype, target.shape, axis=axis,
                     reduction=1 if a.accumulate else 0)
    if len(plan.dims) == 1:
        return out
    out = ctx.reshape(out, tuple(x.shape[d] for d in plan.dims) + rest)
    return ctx.permute(out, _inverse(plan.dims + plan.rest))


@lowers("aten.index_add.default", ops="scatter_add (f32) or scatter_elements; reshape, broadcast_to",
        note="source's slices added at the indices along dim (duplicates add up); index_select's backward")
def _index_add(ctx, node):
    a = ctx.args()
    x, src = a.self, ctx.cast(a.source, a.self.dtype)
    dim = a.dim % len(x.shape) if x.shape else 0
    src = ctx.scale(src, a.alpha)
    index = ctx.reshape(ctx.cast(a.index, "i64"), [src.shape[dim] if k == dim else 1 for k in range(len(x.shape))])
    index = ctx.broadcast_to(index, src.shape)
    if x.dtype == "f32":
        return ctx.op("scatter_add", [x, index, src], x.dtype, x.shape, axis=dim)
    return ctx.op("scatter_elements", [x, index, src], x.dtype, x.shape, axis=dim, reduction=1)

# Ops through which a tensor whose elements all equal one number keeps that property.
_SAME_VALUE_VIEWS = {"expand", "_reshape_alias", "view", "reshape", "_unsafe_view", "clone", "alias", "detach",
                     "lift_fresh_copy", "lift_fresh", "unsqueeze", "squeeze", "contiguous", "permute", "t",
                     "transpose"}


def _uniform_value(ctx, node):
    """The number every element of `node`'s tensor holds, when the graph makes it so (a fill or
    a full, through views), else None."""
    while isinstance(node, torch.fx.Node):
        if node.op == "get_attr":
            t = getattr(ctx.gm, node.target)
            values = set(t.reshape(-1).tolist())
            return values.pop() if len(values) == 1 else None
        if node.op != "call_function" or node.target is operator.getitem:
            return None
        name = node.target.overloadpacket.__name__
        if name in ("fill", "fill_") and not isinstance(node.args[1], torch.fx.Node):
            return node.args[1]
        if name in ("full", "full_like"):
            return node.args[1]
        if name == "new_full":
            return node.args[2]
        if name in ("ones", "ones_like", "new_ones"):
            return 1
        if name not in _SAME_VALUE_VIEWS:
            return None
        node = node.args[0]
    return None


@lowers("aten.repeat_interleave.Tensor", ops="arange, trunc_div",
        note="repeats all one number k (torch.repeat_interleave(x, k, dim)): arange(n * k) // k; other repeats are "
             "refused (the result's length depends on their values)")
def _repeat_interleave(ctx, node):
    a = ctx.args()
    repeats = a.repeats
    k = _uniform_value(ctx, node.args[0])
    if len(repeats.shape) != 1 or not isinstance(k, int) or isinstance(k, bool) or k < 0:
        ctx.fail("repeat_interleave with a tensor of repeats: the result's length depends on their values "
                 "(repeat every element the same number of times, torch.repeat_interleave(x, k, dim))")
    dtype, shape = ctx.meta()
    total = repeats.shape[0] * k
    if shape != (total,):
        ctx.fail(f"repeat_interleave of {repeats.shape[0]} repeats of {k} recorded a result of shape {list(shape)}")
    index = ctx.op("arange", [], "i64", (total,), start=0.0, end=float(total), step=1.0, dtype=DType("i64"))
    return index if k == 1 else ctx.op("trunc_div", [index, ctx.full(k, "i64")], "i64", (total,))
