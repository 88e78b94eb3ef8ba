"""Matrix products: mm, bmm, matmul, addmm, baddbmm (linear where the weight is transposed).

Part of the one mapping from ATen ops to tracecache registry ops (`tracecache.torch.lowering`
has the Lowerer and the contract every lowering follows). Read-only after import.
"""

import torch

from ..lowering import lowers


def _transposed_param(node):
    """The tensor node whose transpose `node` is, if `node` is `aten.t` of a 2-d tensor."""
    if isinstance(node, torch.fx.Node) and node.op == "call_function" and \
            str(node.target) in ("aten.t.default", "aten.t_copy.default"):
        return node.args[0]
    return None


@lowers("aten.addmm.default", ops="linear, or matmul and add",
        note="bias + x @ t(w) is one linear; other operands a matmul and an add")
def _addmm(ctx, node):
    a = ctx.args()
    dtype, shape = ctx.meta()
    weight = _transposed_param(node.args[2])
    if weight is not None and a.beta == 1 and a.alpha == 1 and len(a.self.shape) == 1:
        w = ctx.env[weight]
        return ctx.op("linear", [a.mat1, w, a.self], dtype, shape)
    product = ctx.scale(ctx.matmul(a.mat1, a.mat2), a.alpha)
    return ctx.binary("add", product, ctx.scale(a.self, a.beta))


@lowers("aten.mm.default", "aten.bmm.default", "aten.matmul.default", ops="matmul; linear for x @ t(w)",
        note="x @ t(w) is a linear without bias (no transposed copy of the weight)")
def _mm(ctx, node):
    a = ctx.args()
    other = getattr(a, "mat2", None)
    other = other if other is not None else a.other
    weight = _transposed_param(node.args[1])
    if weight is not None and len(a.self.shape) >= 1 and len(other.shape) == 2:
        dtype, shape = ctx.meta()
        return ctx.op("linear", [a.self, ctx.env[weight]], dtype, shape)
    return ctx.matmul(a.self, other)


@lowers("aten.baddbmm.default", ops="matmul, mul, add")
def _baddbmm(ctx, node):
    a = ctx.args()
    product = ctx.scale(ctx.matmul(a.batch1, a.batch2), a.alpha)
    if a.beta == 0:
        return product
    return ctx.binary("add", ctx.scale(a.self, a.beta), product)
