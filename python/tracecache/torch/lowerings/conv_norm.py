"""Convolutions, batch norm and layer norm (forward and backward).

Part of the one mapping from ATen ops to tracecache registry ops (`tracecache.torch.lowering`
has the Lowerer and the contract every lowering follows). Read-only after import.
"""

import math
import operator

from ..lowering import lowers, pair as _pair
from .volumetric import convolution3d


@lowers("aten.convolution.default", ops="conv2d; pad, slice, concat, permute, reshape for 3-d",
        note="1-d convolutions as conv2d over a [N, C, 1, L] view; 3-d as one conv2d with time folded into the "
             "batch and the temporal taps stacked along the channels")
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
    elif rank == 5:
        return convolution3d(ctx, a, dtype, shape)
    else:
        ctx.fail(f"only 1-d, 2-d and 3-d convolutions are supported, the input is rank {rank}")
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
