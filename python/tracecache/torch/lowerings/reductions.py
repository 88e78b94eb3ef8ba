"""Reductions, norms and a few pointwise compositions built on them.

Part of the one mapping from ATen ops to tracecache registry ops (`tracecache.torch.lowering`
has the Lowerer and the contract every lowering follows). Read-only after import.
"""

import math

from ..lowering import lowers


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
