"""as_strided: a tensor's elements read through explicit sizes and strides.

tracecache values are dense row-major tensors with no storage of their own, so an `as_strided`
is lowered as a read of the elements it addresses: the source's elements are put in their
storage order (known from the strides the capture recorded), and the addressed ones are picked
with `index_select` (or, when the new sizes and strides address the storage in order, a plain
reshape). PyTorch 1.13's `adaptive_avg_pool2d` with a 1x1 output over a channels-last input
(ConvNeXt's and Swin's heads) restrides its result in place this way, to the same elements.

Refused with a CaptureError: a source whose strides overlap or leave gaps (not a permutation of
a dense layout), an explicit `storage_offset` on a tensor whose own offset the capture does not
know (a view or an input), and addresses outside the source's elements.

Part of the one mapping from ATen ops to tracecache registry ops (`tracecache.torch.lowering`
has the Lowerer and the contract every lowering follows). Read-only after import.
"""

import math

import torch

from ..lowering import DType, _is_view, lowers


def _contiguous_strides(shape):
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return list(reversed(strides))


def _storage_order(shape, strides):
    """The permutation that puts a dense tensor's dims in storage order (outermost first), or
    None when the strides overlap or leave gaps."""
    dims = sorted(range(len(shape)), key=lambda d: (shape[d] != 1, -strides[d], d))
    expected = 1
    for d in reversed(dims):
        if shape[d] == 1:
            continue
        if strides[d] != expected:
            return None
        expected *= shape[d]
    return dims


def _offset_is_zero(node):
    """Whether the tensor `node` denotes starts its storage (a fresh result, or an in-place op
    on one); False when it may not (a view, an input)."""
    while isinstance(node, torch.fx.Node) and node.op == "call_function":
        schema = getattr(node.target, "_schema", None)
        alias = schema.returns[0].alias_info if schema is not None and schema.returns else None
        if alias is None:
            return True
        if _is_view(node):
            return False
        node = node.args[0]
    return False


@lowers("aten.as_strided.default", "aten.as_strided_.default",
        ops="reshape; permute, reshape, arange, mul, add, index_select (composition)",
        note="reads the addressed elements of the source's storage (the source dense in some dim order); "
             "a reshape when they are the storage in order")
def _as_strided(ctx, node):
    a = ctx.args()
    x = a.self
    size, stride = [int(s) for s in a.size], [int(s) for s in a.stride]
    meta = node.args[0].meta.get("tensor_meta")
    if meta is None:
        ctx.fail("the capture recorded no strides for the source of as_strided")
    order = _storage_order(x.shape, list(meta.stride))
    if order is None:
        ctx.fail(f"as_strided of a tensor with strides {list(meta.stride)} for shape {list(x.shape)}: "
                 f"only sources whose elements are dense (in some dim order) are supported")
    offset = a.storage_offset
    if offset is not None and offset != 0 and not _offset_is_zero(node.args[0]):
        ctx.fail("as_strided with an explicit storage_offset of a view or an input, whose own offset the "
                 "capture does not know")
    offset = int(offset or 0)
    dtype, shape = ctx.meta()
    n_out, n_in = math.prod(size), math.prod(x.shape)
    if n_out == 0:
        return ctx.full(0, dtype, shape)
    if min(stride, default=0) < 0:
        ctx.fail(f"as_strided with a negative stride {stride}")
    last = _last_address(size, stride, offset)
    if offset < 0 or last >= n_in:
        ctx.fail(f"as_strided addresses elements {offset}..{last} of a source of {n_in} elements; only "
                 f"elements of the source itself can be read")
    storage = ctx.reshape(ctx.permute(x, order), (n_in,))
    if _is_run(size, stride):
        return ctx.reshape(ctx.slice(storage, 0, offset, offset + n_out), shape)
    picked = ctx.op("index_select", [storage, _addresses(ctx, size, stride, offset)], x.dtype, (n_out,), axis=0)
    return ctx.reshape(picked, shape)


def _is_run(size, stride):
    """Whether sizes and strides address a run of the storage in order (row-major, no gaps)."""
    return all(s == 1 or t == c for s, t, c in zip(size, stride, _contiguous_strides(size)))


def _last_address(size, stride, offset):
    return offset + sum((s - 1) * t for s, t in zip(size, stride))


def _addresses(ctx, size, stride, offset):
    """The storage positions an as_strided view addresses, in its row-major order: i64[numel]."""
    index = ctx.full(offset, "i64", [1] * len(size))
    for d, (s, t) in enumerate(zip(size, stride)):
        if s == 1 or t == 0:
            continue
        steps = ctx.op("arange", [], "i64", (s,), start=0.0, end=float(s * t), step=float(t), dtype=DType("i64"))
        index = ctx.binary("add", index, ctx.reshape(steps, [s if k == d else 1 for k in range(len(size))]))
    return ctx.reshape(ctx.broadcast_to(index, size), (math.prod(size),))


def _distinct(size, stride):
    """Whether sizes and strides address each element once (a sufficient test: each dim's stride,
    in increasing order, steps over everything the smaller ones reach)."""
    reach = 0
    for t, s in sorted((t, s) for s, t in zip(size, stride) if s > 1):
        if t <= reach:
            return False
        reach += (s - 1) * t
    return True


def scatter_as_strided(ctx, view, parent, value):
    """`parent` with the elements the `as_strided` node `view` addresses replaced by `value`: the
    inverse of `_as_strided` (autograd's CopySlices writes a gradient back through such a view),
    for views that address each element of a dense source at most once."""
    size, stride = [int(s) for s in view.args[1]], [int(s) for s in view.args[2]]
    offset = int(view.args[3]) if len(view.args) > 3 and view.args[3] is not None else 0
    meta = view.args[0].meta.get("tensor_meta")
    order = None if meta is None else _storage_order(parent.shape, list(meta.stride))
    n_out, n_in = math.prod(size), math.prod(parent.shape)
    last = _last_address(size, stride, offset)
    if order is None or min(stride, default=0) < 0 or not _distinct(size, stride) or offset < 0 \
            or (n_out and last >= n_in) or (offset and not _offset_is_zero(view.args[0])):
        ctx.fail(f"writes through '{view.name}', an as_strided view (sizes {size}, strides {stride}, offset "
                 f"{offset}) that tracecache cannot write back: its source must be dense and start its "
                 f"storage, and it must address each element once (use the out-of-place op)")
    if n_out == 0:
        return parent
    permuted = ctx.permute(parent, order)
    storage = ctx.reshape(permuted, (n_in,))
    flat = ctx.reshape(ctx.broadcast_to(value, size), (n_out,))
    if _is_run(size, stride):
        storage = ctx._replace_range(storage, flat, 0, offset, offset + n_out)
    else:
        storage = ctx.op("scatter_elements", [storage, _addresses(ctx, size, stride, offset), flat], parent.dtype,
                         (n_in,), axis=0, reduction=0)
    inverse = [order.index(i) for i in range(len(order))]
    return ctx.permute(ctx.reshape(storage, permuted.shape), inverse)
