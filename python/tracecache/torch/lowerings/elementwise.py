"""Elementwise ops: unary, arithmetic, comparisons, logical ops, where, casts and fills.

Part of the one mapping from ATen ops to tracecache registry ops (`tracecache.torch.lowering`
has the Lowerer and the contract every lowering follows). Read-only after import.
"""

import math

from ..lowering import Value, _promote, lowers


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
