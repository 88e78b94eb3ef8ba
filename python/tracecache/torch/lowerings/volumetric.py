"""3-d convolutions and pools ([N, C, T, H, W], the video models) as their 2-d registry ops.

The registry's convolutions and pools are 2-d; the temporal axis is handled around them:

- **conv3d** folds time into the batch and stacks the `kt` temporal taps along the channels: tap
  `i` of output time `t` reads input time `t*st - pt + i*dt` (zeros in the padding), so
  `X'[(n, t), (group, i, c)] = x_padded[n, group*C/g + c, t*st + i*dt]` and
  `W'[o, (i, c)] = w[o, c, i]`, and one `conv2d` of X' and W' with the spatial stride, padding,
  dilation and groups is the convolution, `[N*T', O, H', W']`. Its backward runs
  `conv2d_input_grad`/`conv2d_weight_grad` on the same layout and adds each tap's input
  gradient back at its times. Exact up to the summation order of the convolution's terms.
- **max_pool3d** is `max_pool2d` of every time step (time folded into the channels), then the
  maximum over each temporal window (`-inf` padding), the taps in order. Exact. Its backward
  gives each output's gradient to the first window time step holding the maximum (the last one
  holding a NaN, PyTorch's scan rule), then runs `max_pool2d_grad` per time step.
- **avg_pool3d** is `avg_pool2d` of every time step, summed over each temporal window and
  divided by the window's temporal count; PyTorch's divisor is the product of the per-axis
  counts (with or without the padding), so this is its value up to rounding (two divisions).
  No `divisor_override`.
- **adaptive_avg_pool3d** is `adaptive_avg_pool2d` of every time step, then the mean over each
  adaptive temporal window (`floor(t*T/T')` to `ceil((t+1)*T/T')`).

Part of the one mapping from ATen ops to tracecache registry ops (`tracecache.torch.lowering`
has the Lowerer and the contract every lowering follows). Read-only after import.
"""

import math

from ..lowering import DType, Value, _PoolIndices, lowers
from .layout import scatter_slice


def triple(v):
    """An int or a list of ints as a list of three (PyTorch's _triple)."""
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * 3 if len(v) == 1 else v


def _time_taps(ctx, x, taps, stride, pad_before, dilation, t_out, value=0.0):
    """For each temporal tap i, x's time steps `t*stride - pad_before + i*dilation` for
    t < t_out ([N, C, t_out, H, W] each); steps outside x read `value`."""
    n, c, t, h, w = x.shape
    needed = (t_out - 1) * stride + (taps - 1) * dilation + 1
    pad_after = max(needed - t - pad_before, 0)
    if pad_before or pad_after:
        x = ctx.op("pad", [x], x.dtype, (n, c, t + pad_before + pad_after, h, w),
                   pads=[0, 0, 0, 0, pad_before, pad_after], value=float(value))
    return [ctx.slice(x, 2, i * dilation, i * dilation + (t_out - 1) * stride + 1, stride) for i in range(taps)]


def _add_back_taps(ctx, grads, stride, pad_before, dilation, t_in):
    """The adjoint of `_time_taps`: each tap's gradient [N, C, t_out, H, W] added back at the
    time steps it read, [N, C, t_in, H, W] (what fell in the padding dropped)."""
    total = None
    for i, g in enumerate(grads):
        part = scatter_slice(ctx, g, 2, i * dilation - pad_before, stride, t_in)
        total = part if total is None else ctx.binary("add", total, part)
    return total


class _Conv3d:
    """The conv2d layout of one 3-d convolution (see the module docstring)."""

    def __init__(self, a, x_shape, w_shape, out_shape):
        self.n, self.c, self.t, self.h, self.w = x_shape
        self.o, self.cg, self.kt, self.kh, self.kw = w_shape
        self.stride, self.padding, self.dilation = triple(a.stride), triple(a.padding), triple(a.dilation)
        self.groups = a.groups
        self.t_out = out_shape[2]
        self.out_shape = tuple(out_shape)
        self.attrs = dict(stride=self.stride[1:], padding=self.padding[1:], dilation=self.dilation[1:],
                          groups=self.groups)

    def input(self, ctx, x):
        """X': [N*T', groups*kt*C/groups, H, W]."""
        g, n, t_out = self.groups, self.n, self.t_out
        taps = _time_taps(ctx, x, self.kt, self.stride[0], self.padding[0], self.dilation[0], t_out)
        split = (n, g, 1, self.cg, t_out, self.h, self.w)
        stacked = ctx.concat([ctx.reshape(tap, split) for tap in taps], 2)
        return ctx.reshape(ctx.permute(stacked, [0, 4, 1, 2, 3, 5, 6]), (n * t_out, self.c * self.kt, self.h, self.w))

    def weight(self, ctx, w):
        """W': [O, kt*C/groups, kh, kw]."""
        return ctx.reshape(ctx.permute(w, [0, 2, 1, 3, 4]), (self.o, self.kt * self.cg, self.kh, self.kw))

    def output(self, ctx, y):
        """[N*T', O, H', W'] -> [N, O, T', H', W']."""
        n, o, t_out, ho, wo = self.out_shape
        return ctx.permute(ctx.reshape(y, (n, t_out, o, ho, wo)), [0, 2, 1, 3, 4])

    def grad_output(self, ctx, g):
        n, o, t_out, ho, wo = self.out_shape
        return ctx.reshape(ctx.permute(g, [0, 2, 1, 3, 4]), (n * t_out, o, ho, wo))

    def grad_input(self, ctx, gx2):
        """The gradient of x from the gradient of X'."""
        n, g, t_out = self.n, self.groups, self.t_out
        gx2 = ctx.reshape(gx2, (n, t_out, g, self.kt, self.cg, self.h, self.w))
        taps = []
        for i in range(self.kt):
            tap = ctx.reshape(ctx.slice(gx2, 3, i, i + 1), (n, t_out, g, self.cg, self.h, self.w))
            taps.append(ctx.reshape(ctx.permute(tap, [0, 2, 3, 1, 4, 5]), (n, self.c, t_out, self.h, self.w)))
        return _add_back_taps(ctx, taps, self.stride[0], self.padding[0], self.dilation[0], self.t)

    def grad_weight(self, ctx, gw2):
        return ctx.permute(ctx.reshape(gw2, (self.o, self.kt, self.cg, self.kh, self.kw)), [0, 2, 1, 3, 4])


def convolution3d(ctx, a, dtype, shape):
    """aten.convolution of a rank-5 input (called by conv_norm's convolution lowering)."""
    layout = _Conv3d(a, a.input.shape, a.weight.shape, shape)
    x2, w2 = layout.input(ctx, a.input), layout.weight(ctx, a.weight)
    n, o, t_out, ho, wo = shape
    inputs = [x2, w2] + ([a.bias] if a.bias is not None else [])
    y = ctx.op("conv2d", inputs, dtype, (n * t_out, o, ho, wo), **layout.attrs)
    return layout.output(ctx, y)


def convolution3d_backward(ctx, a):
    """aten.convolution_backward of a rank-5 input: (grad input, grad weight, grad bias)."""
    x, w, g = a.input, a.weight, a.grad_output
    layout = _Conv3d(a, x.shape, w.shape, g.shape)
    g2 = layout.grad_output(ctx, g)
    mask = list(a.output_mask)
    gx = gw = gb = None
    if mask[0]:
        gx2 = ctx.op("conv2d_input_grad", [g2, layout.weight(ctx, w)], "f32", (layout.n * layout.t_out,
                     layout.c * layout.kt, layout.h, layout.w), input_size=[layout.h, layout.w], **layout.attrs)
        gx = layout.grad_input(ctx, gx2)
    if mask[1]:
        gw2 = ctx.op("conv2d_weight_grad", [g2, layout.input(ctx, x)], "f32",
                     (layout.o, layout.kt * layout.cg, layout.kh, layout.kw), kernel=[layout.kh, layout.kw],
                     **layout.attrs)
        gw = layout.grad_weight(ctx, gw2)
    if mask[2]:
        gb = ctx.reduce("sum", g, [0, 2, 3, 4])
    return (gx, gw, gb)


def _planes(ctx, x):
    """[N, C, T, H, W] as [N, C*T, H, W]: every time step a plane of the 2-d ops."""
    n, c, t, h, w = x.shape
    return ctx.reshape(x, (n, c * t, h, w))


def _volumes(ctx, y, c, t):
    n, _, h, w = y.shape
    return ctx.reshape(y, (n, c, t, h, w))


def _pool_attrs(a):
    kernel = triple(a.kernel_size)
    stride = triple(a.stride) if a.stride else kernel
    return kernel, stride, triple(a.padding)


def _max_chain(ctx, taps):
    out = taps[0]
    for tap in taps[1:]:
        out = ctx.binary("maximum", out, tap)
    return out


class _Pool3dIndices(_PoolIndices):
    """The indices output of max_pool3d_with_indices: only its backward may read them."""


def _spatial_max(ctx, x, kernel, stride, padding, dilation, ceil_mode, out_hw):
    n, c, t = x.shape[:3]
    y = ctx.op("max_pool2d", [_planes(ctx, x)], "f32", (n, c * t) + tuple(out_hw), kernel=kernel[1:],
               stride=stride[1:], padding=padding[1:], dilation=dilation[1:], ceil_mode=bool(ceil_mode))
    return _volumes(ctx, y, c, t)


@lowers("aten.max_pool3d_with_indices.default", ops="max_pool2d, pad, slice, maximum",
        note="max_pool2d per time step, then the maximum over each temporal window; the indices only feed "
             "max_pool3d_with_indices_backward")
def _max_pool3d(ctx, node):
    a = ctx.args()
    x = a.self
    if len(x.shape) != 5:
        ctx.fail(f"max_pool3d of a rank-{len(x.shape)} input: only [N, C, T, H, W] is supported")
    dtype, shape = ctx.meta()[0]
    kernel, stride, padding = _pool_attrs(a)
    dilation = triple(a.dilation)
    planes = _spatial_max(ctx, x, kernel, stride, padding, dilation, a.ceil_mode, shape[3:])
    taps = _time_taps(ctx, planes, kernel[0], stride[0], padding[0], dilation[0], shape[2], value=-math.inf)
    return (_max_chain(ctx, taps), _Pool3dIndices(node))


def _arg(ctx, node, name):
    """One argument of the node by schema name, without reading the others (the pool indices)."""
    for i, s in enumerate(node.target._schema.arguments):
        if s.name == name:
            v = node.args[i] if i < len(node.args) else node.kwargs.get(name, s.default_value)
            return ctx.value_of(v)
    raise KeyError(name)


def _valid_taps(ctx, taps, stride, pad_before, dilation, t_in, t_out):
    """Per tap, None when all its time steps are inside the input, else a bool [1, 1, t_out, 1, 1]
    saying which are."""
    out = []
    for i in range(taps):
        first, last = i * dilation - pad_before, (t_out - 1) * stride + i * dilation - pad_before
        if first >= 0 and last < t_in:
            out.append(None)
            continue
        steps = ctx.op("arange", [], "i64", (t_out,), start=float(first), end=float(first + t_out * stride),
                       step=float(stride), dtype=DType("i64"))
        inside = ctx.binary("minimum", ctx.logical_not(ctx.binary("lt", steps, 0)), ctx.binary("lt", steps, t_in))
        out.append(ctx.reshape(inside, (1, 1, t_out, 1, 1)))
    return out


def _and(ctx, a, b):
    if a is None:
        return b
    return a if b is None else ctx.binary("minimum", a, b)


@lowers("aten.max_pool3d_with_indices_backward.default",
        ops="max_pool2d, eq, minimum, maximum, where, pad, max_pool2d_grad (composition)",
        note="the gradient to the first window time step holding the maximum (the last holding a NaN), then "
             "max_pool2d_grad per time step")
def _max_pool3d_backward(ctx, node):
    g, x = _arg(ctx, node, "grad_output"), _arg(ctx, node, "self")
    kernel = triple(_arg(ctx, node, "kernel_size"))
    stride = triple(_arg(ctx, node, "stride") or kernel)
    padding, dilation = triple(_arg(ctx, node, "padding")), triple(_arg(ctx, node, "dilation"))
    ceil_mode = _arg(ctx, node, "ceil_mode")
    n, c, t = x.shape[:3]
    t_out = g.shape[2]
    planes = _spatial_max(ctx, x, kernel, stride, padding, dilation, ceil_mode, g.shape[3:])
    taps = _time_taps(ctx, planes, kernel[0], stride[0], padding[0], dilation[0], t_out, value=-math.inf)
    valid = _valid_taps(ctx, kernel[0], stride[0], padding[0], dilation[0], t, t_out)
    y = _max_chain(ctx, taps)
    is_max = [_and(ctx, ctx.binary("eq", tap, y), ok) for tap, ok in zip(taps, valid)]
    is_nan = [_and(ctx, ctx.logical_not(ctx.binary("eq", tap, tap)), ok) for tap, ok in zip(taps, valid)]
    first, taken = [], None
    for m in is_max:
        first.append(m if taken is None else ctx.binary("minimum", m, ctx.logical_not(taken)))
        taken = m if taken is None else ctx.binary("maximum", taken, m)
    last, taken = [None] * len(taps), None
    for i in reversed(range(len(taps))):
        m = is_nan[i]
        last[i] = m if taken is None else ctx.binary("minimum", m, ctx.logical_not(taken))
        taken = m if taken is None else ctx.binary("maximum", taken, m)
    y_nan = ctx.logical_not(ctx.binary("eq", y, y))
    grads = [ctx.where_(ctx.where_(y_nan, l, f, "bool"), g, 0.0, "f32") for f, l in zip(first, last)]
    per_step = _add_back_taps(ctx, grads, stride[0], padding[0], dilation[0], t)
    gx = ctx.op("max_pool2d_grad", [_planes(ctx, per_step), _planes(ctx, x)], "f32", (n, c * t) + x.shape[3:],
                kernel=kernel[1:], stride=stride[1:], padding=padding[1:], dilation=dilation[1:],
                ceil_mode=bool(ceil_mode))
    return _volumes(ctx, gx, c, t)


def _time_counts(ctx, kernel, stride, pad, t_in, t_out, include_pad):
    """The temporal part of avg_pool3d's divisor per output time step, f32 [1, 1, t_out, 1, 1]
    (an int when they are all equal)."""
    counts = []
    for k in range(t_out):
        start = k * stride - pad
        end = min(start + kernel, t_in + pad)
        counts.append(end - start if include_pad else min(end, t_in) - max(start, 0))
    if len(set(counts)) == 1:
        return counts[0]
    parts = [ctx.full(v, "f32", (1,)) for v in counts]
    return ctx.reshape(ctx.concat(parts, 0), (1, 1, t_out, 1, 1))


@lowers("aten.avg_pool3d.default", ops="avg_pool2d, pad, slice, add, div",
        note="avg_pool2d per time step, summed over each temporal window and divided by its temporal count; "
             "no divisor_override")
def _avg_pool3d(ctx, node):
    a = ctx.args()
    x = a.self
    if len(x.shape) != 5:
        ctx.fail(f"avg_pool3d of a rank-{len(x.shape)} input: only [N, C, T, H, W] is supported")
    if a.divisor_override is not None:
        ctx.fail("avg_pool3d with divisor_override is not supported")
    dtype, shape = ctx.meta()
    kernel, stride, padding = _pool_attrs(a)
    n, c, t = x.shape[:3]
    y = ctx.op("avg_pool2d", [_planes(ctx, x)], "f32", (n, c * t) + tuple(shape[3:]), kernel=kernel[1:],
               stride=stride[1:], padding=padding[1:], ceil_mode=bool(a.ceil_mode),
               count_include_pad=bool(a.count_include_pad))
    taps = _time_taps(ctx, _volumes(ctx, y, c, t), kernel[0], stride[0], padding[0], 1, shape[2])
    total = taps[0]
    for tap in taps[1:]:
        total = ctx.binary("add", total, tap)
    counts = _time_counts(ctx, kernel[0], stride[0], padding[0], t, shape[2], a.count_include_pad)
    return total if counts == 1 else ctx.binary("div", total, counts if isinstance(counts, Value) else float(counts))


@lowers("aten.avg_pool3d_backward.default", ops="div, pad, add, avg_pool2d_grad",
        note="the adjoint of the forward's composition")
def _avg_pool3d_backward(ctx, node):
    a = ctx.args()
    g, x = a.grad_output, a.self
    if a.divisor_override is not None:
        ctx.fail("avg_pool3d with divisor_override is not supported")
    kernel, stride, padding = _pool_attrs(a)
    n, c, t = x.shape[:3]
    t_out = g.shape[2]
    counts = _time_counts(ctx, kernel[0], stride[0], padding[0], t, t_out, a.count_include_pad)
    g = g if counts == 1 else ctx.binary("div", g, counts if isinstance(counts, Value) else float(counts))
    per_step = _add_back_taps(ctx, [g] * kernel[0], stride[0], padding[0], 1, t)
    gx = ctx.op("avg_pool2d_grad", [_planes(ctx, per_step)], "f32", (n, c * t) + x.shape[3:], kernel=kernel[1:],
                stride=stride[1:], padding=padding[1:], count_include_pad=bool(a.count_include_pad),
                input_size=list(x.shape[3:]))
    return _volumes(ctx, gx, c, t)


def _adaptive_windows(t_in, t_out):
    return [((k * t_in) // t_out, -((-(k + 1) * t_in) // t_out)) for k in range(t_out)]


@lowers("aten._adaptive_avg_pool3d.default", ops="adaptive_avg_pool2d, slice, mean, concat",
        note="adaptive_avg_pool2d per time step, then the mean over each adaptive temporal window")
def _adaptive_avg_pool3d(ctx, node):
    a = ctx.args()
    x = a.self
    if len(x.shape) != 5:
        ctx.fail(f"adaptive_avg_pool3d of a rank-{len(x.shape)} input: only [N, C, T, H, W] is supported")
    dtype, shape = ctx.meta()
    n, c, t = x.shape[:3]
    y = ctx.op("adaptive_avg_pool2d", [_planes(ctx, x)], "f32", (n, c * t) + tuple(shape[3:]),
               output_size=list(shape[3:]))
    y = _volumes(ctx, y, c, t)
    windows = _adaptive_windows(t, shape[2])
    if all(e - s == 1 for s, e in windows):
        return ctx.concat([ctx.slice(y, 2, s, e) for s, e in windows], 2)
    return ctx.concat([ctx.reduce("mean", ctx.slice(y, 2, s, e), [2], keepdim=True) for s, e in windows], 2)


@lowers("aten._adaptive_avg_pool3d_backward.default", ops="slice, mul, broadcast_to, pad, add, "
        "adaptive_avg_pool2d_grad", note="the adjoint of the forward's composition")
def _adaptive_avg_pool3d_backward(ctx, node):
    a = ctx.args()
    g, x = a.grad_output, a.self
    n, c, t = x.shape[:3]
    t_out, ho, wo = g.shape[2:]
    total = None
    for k, (s, e) in enumerate(_adaptive_windows(t, t_out)):
        piece = ctx.scale(ctx.slice(g, 2, k, k + 1), 1.0 / (e - s))
        piece = scatter_slice(ctx, ctx.broadcast_to(piece, (n, c, e - s, ho, wo)), 2, s, 1, t)
        total = piece if total is None else ctx.binary("add", total, piece)
    gx = ctx.op("adaptive_avg_pool2d_grad", [_planes(ctx, total)], "f32", (n, c * t) + x.shape[3:],
                input_size=list(x.shape[3:]))
    return _volumes(ctx, gx, c, t)
