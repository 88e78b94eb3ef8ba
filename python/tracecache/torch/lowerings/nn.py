"""Pools, activation backwards, softmax, embedding, gather/scatter, losses, dropout.

Part of the one mapping from ATen ops to tracecache registry ops (`tracecache.torch.lowering`
has the Lowerer and the contract every lowering follows). Read-only after import.
"""

import math

from ..lowering import _PoolIndices, lowers, pair as _pair
from .volumetric import convolution3d_backward


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


@lowers("aten.convolution_backward.default", ops="conv2d_input_grad, conv2d_weight_grad, sum; 3-d: on the "
        "forward's conv2d layout, pad to add the taps back", note="3-d: the adjoint of the forward's layout")
def _convolution_backward(ctx, node):
    a = ctx.args()
    if a.transposed:
        ctx.fail("transposed convolutions are not supported")
    g, x, w = a.grad_output, a.input, a.weight
    if len(x.shape) == 5:
        return convolution3d_backward(ctx, a)
    if len(x.shape) != 4:
        ctx.fail(f"only the backward of 2-d and 3-d convolutions is supported, the input is rank {len(x.shape)}")
    attrs = dict(stride=_pair(a.stride), padding=_pair(a.padding), dilation=_pair(a.dilation), groups=a.groups)
    mask = list(a.output_mask)
    # Each gradient in the dtype PyTorch gave it (under autocast the operands may differ: a bf16
    # weight copy, an f32 gradient from a norm), its operands cast to it.
    metas = ctx.meta()
    dtype_of = lambda k, like: metas[k][0] if metas[k] is not None else like.dtype  # noqa: E731
    gx = gw = gb = None
    if mask[0]:
        d = dtype_of(0, x)
        gx = ctx.op("conv2d_input_grad", [ctx.cast(g, d), ctx.cast(w, d)], d, x.shape,
                    input_size=list(x.shape[2:]), **attrs)
    if mask[1]:
        d = dtype_of(1, w)
        gw = ctx.op("conv2d_weight_grad", [ctx.cast(g, d), ctx.cast(x, d)], d, w.shape,
                    kernel=list(w.shape[2:]), **attrs)
    if mask[2]:
        gb = ctx.cast(ctx.reduce("sum", g, [0, 2, 3]), dtype_of(2, g))
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


@lowers("aten.hardswish_backward.default", ops="lt, eq, maximum (or), div, add, mul, where",
        note="PyTorch's formula: 0 below -3, g * (x / 3 + 1/2) on [-3, 3], g above")
def _hardswish_backward(ctx, node):
    a = ctx.args()
    g, x = a.grad_output, a.self
    middle = ctx.binary("mul", g, ctx.binary("add", ctx.binary("div", x, 3.0), 0.5))
    # x <= 3 as PyTorch tests it, so a NaN x takes g (not NaN) as in PyTorch's kernel.
    at_most_3 = ctx.binary("maximum", ctx.binary("lt", x, 3.0), ctx.binary("eq", x, 3.0))
    upper = ctx.where_(at_most_3, middle, g, "f32")
    return ctx.where_(ctx.binary("lt", x, -3.0), 0.0, upper, "f32")


@lowers("aten.hardsigmoid_backward.default", ops="gt, lt, minimum (and), mul, where",
        note="PyTorch's formula: g / 6 strictly inside (-3, 3), else 0")
def _hardsigmoid_backward(ctx, node):
    a = ctx.args()
    g, x = a.grad_output, a.self
    inside = ctx.binary("minimum", ctx.binary("gt", x, -3.0), ctx.binary("lt", x, 3.0))
    return ctx.where_(inside, ctx.binary("mul", g, 1.0 / 6.0), 0.0, "f32")


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


@lowers("aten.native_dropout_backward.default", ops="cast, mul")
def _native_dropout_backward(ctx, node):
    a = ctx.args()
    return ctx.binary("mul", a.grad_output, ctx.binary("mul", ctx.cast(a.mask, "f32"), float(a.scale)))
