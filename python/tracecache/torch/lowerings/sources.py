"""Tensors made from nothing: zeros, ones, full, arange.

Part of the one mapping from ATen ops to tracecache registry ops (`tracecache.torch.lowering`
has the Lowerer and the contract every lowering follows). Read-only after import.
"""

from ..lowering import DType, lowers


@lowers("aten.zeros.default", "aten.zeros_like.default", "aten.empty.memory_format", "aten.empty_like.default",
        "aten.new_zeros.default", "aten.new_empty.default", "aten.empty_strided.default",
        "aten.new_empty_strided.default", ops="full",
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
