"""Identities, views and layout: reshape, transpose, permute, expand, slices, splits, concat, pad,
roll, repeat.

Part of the one mapping from ATen ops to tracecache registry ops (`tracecache.torch.lowering`
has the Lowerer and the contract every lowering follows). Read-only after import.
"""

import math

from ..lowering import lowers


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


def scatter_slice(ctx, g, axis, start, step, length):
    """The adjoint of a strided slice: zeros of `length` along `axis` with g's k-th element along
    it at `start + k * step`. Elements that land outside [0, length) are dropped, so `start` may
    be negative (a slice of a padded tensor, its padding cropped off). A `pad` of the
    [outer, n, inner] view, after padding each element with `step - 1` zeros on a new axis."""
    shape = list(g.shape)
    axis %= len(shape)
    m = shape[axis]
    outer, inner = math.prod(shape[:axis]), math.prod(shape[axis + 1:])
    out_shape = shape[:axis] + [length] + shape[axis + 1:]
    v = ctx.reshape(g, (outer, m, inner))
    if step > 1:
        v = ctx.op("pad", [ctx.reshape(v, (outer, m, 1, inner))], g.dtype, (outer, m, step, inner),
                   pads=[0, 0, 0, step - 1], value=0.0)
        v = ctx.reshape(v, (outer, m * step, inner))
    span = v.shape[1]
    if start != 0 or length != span:
        v = ctx.op("pad", [v], g.dtype, (outer, length, inner), pads=[0, 0, start, length - start - span], value=0.0)
    return ctx.reshape(v, out_shape)


@lowers("aten.slice_backward.default", ops="reshape, pad",
        note="the gradient zero-padded back along the dim (any rank; with a step, zeros between its elements)")
def _slice_backward(ctx, node):
    a = ctx.args()
    shape = tuple(a.input_sizes)
    axis = a.dim % len(shape)
    n = shape[axis]
    start = min(max(a.start + n if a.start < 0 else a.start, 0), n)
    return scatter_slice(ctx, a.grad_output, axis, start, a.step, n)


@lowers("aten.select_backward.default", ops="reshape, pad", note="the gradient zero-padded back (any rank)")
def _select_backward(ctx, node):
    a = ctx.args()
    shape = tuple(a.input_sizes)
    axis = a.dim % len(shape)
    index = a.index + shape[axis] if a.index < 0 else a.index
    g = ctx.reshape(a.grad_output, shape[:axis] + (1,) + shape[axis + 1:])
    return scatter_slice(ctx, g, axis, index, 1, shape[axis])


@lowers("aten.cat.default", ops="concat")
def _cat(ctx, node):
    a = ctx.args()
    dtype, shape = ctx.meta()
    # PyTorch skips 1-d empty tensors (the legacy "no tensor"); if nothing is left, the result is
    # empty too (FCOS and RetinaNet concatenate per-level detections of which there may be none).
    xs = [ctx.cast(t, dtype) for t in a.tensors if not (len(t.shape) == 1 and t.shape[0] == 0)]
    if not xs:
        return ctx.full(0, dtype, shape)
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


@lowers("aten.roll.default", ops="slice, concat (reshape without dims)",
        note="per rolled dim, the last `shift` elements moved to the front; without dims, of the flattened tensor")
def _roll(ctx, node):
    a = ctx.args()
    x = a.self
    shifts, dims = list(a.shifts), list(a.dims)
    if not dims:
        if len(shifts) != 1:
            ctx.fail(f"roll without dims takes one shift, got {shifts}")
        flat = ctx.reshape(x, (math.prod(x.shape),))
        return ctx.reshape(_roll_axis(ctx, flat, 0, shifts[0]), x.shape)
    if len(shifts) != len(dims):
        ctx.fail(f"roll with {len(shifts)} shifts for {len(dims)} dims")
    for shift, dim in zip(shifts, dims):
        x = _roll_axis(ctx, x, dim, shift)
    return x


def _roll_axis(ctx, x, axis, shift):
    n = x.shape[axis]
    s = shift % n if n else 0
    if s == 0:
        return x
    return ctx.concat([ctx.slice(x, axis, n - s, n), ctx.slice(x, axis, 0, n - s)], axis)


@lowers("aten.repeat.default", ops="reshape, broadcast_to", note="x.repeat(r0, r1, ...): each dim tiled in turn")
def _repeat(ctx, node):
    a = ctx.args()
    x = a.self
    repeats = list(a.repeats)
    if len(repeats) < len(x.shape):
        ctx.fail(f"repeat with {len(repeats)} counts for a rank-{len(x.shape)} tensor")
    shape = [1] * (len(repeats) - len(x.shape)) + list(x.shape)
    x = ctx.reshape(x, shape)
    for axis, r in enumerate(repeats):
        if r == 1:
            continue
        outer, d, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
        tiled = ctx.broadcast_to(ctx.reshape(x, (outer, 1, d, inner)), (outer, r, d, inner))
        shape[axis] = r * d
        x = ctx.reshape(tiled, shape)
    return x
