"""Random numbers: dropout, bernoulli, rand/randn/randint and in-place uniform_/normal_ on
tracecache's own generator (the `rand_uniform` and `rand_normal` registry ops, Philox4x32-10).

The graph reads a seed input (i64[2]: seed, offset) that the compiled module passes with every
call (`tracecache.next_seed()`, seeded by `tracecache.manual_seed`), so a new seed never
recompiles; each draw of a graph takes its own stream of that seed. The numbers are not those of
PyTorch's generator (as on PyTorch/XLA); their distributions are. Dropout and bernoulli with
probability 0 (or dropout in eval mode) draw nothing and equal eager PyTorch exactly.

Part of the one mapping from ATen ops to tracecache registry ops (`tracecache.torch.lowering`).
Read-only after import.
"""

from ..lowering import lowers

# The ATen ops that draw random numbers (those lowered here and their in-place forms).
RANDOM_OPS = {"aten.native_dropout.default", "aten.bernoulli.p", "aten.bernoulli_.float", "aten.bernoulli.default",
              "aten.bernoulli_.Tensor", "aten.rand.default", "aten.rand_like.default", "aten.randn.default",
              "aten.randn_like.default", "aten.uniform.default", "aten.uniform_.default", "aten.normal.default",
              "aten.normal_.default", "aten.randint.low", "aten.randint.default", "aten.randint_like.low_dtype",
              "aten.randint_like.default", "aten.randperm.default"}


@lowers("aten.native_dropout.default", ops="rand_uniform, lt, mul, cast (identity at p = 0 or eval)",
        note="keep = rand_uniform < 1 - p; y = x * keep / (1 - p); the mask is keep")
def _native_dropout(ctx, node):
    a = ctx.args()
    x = a.self
    if not a.train or a.p == 0:
        return (x, ctx.full(1, "bool", x.shape))
    if a.p >= 1:
        return (ctx.full(0, x.dtype, x.shape), ctx.full(0, "bool", x.shape))
    keep = ctx.binary("lt", ctx.draw("rand_uniform", x.shape), 1.0 - float(a.p))
    y = ctx.binary("mul", ctx.binary("mul", x, ctx.cast(keep, x.dtype)), 1.0 / (1.0 - float(a.p)))
    return (y, keep)


def _bernoulli(ctx, shape, p, dtype):
    """1 with probability p (a number or a Value broadcast to shape), else 0, as `dtype`."""
    if not hasattr(p, "handle") and float(p) <= 0:
        return ctx.full(0, dtype, shape)
    if not hasattr(p, "handle") and float(p) >= 1:
        return ctx.full(1, dtype, shape)
    return ctx.cast(ctx.binary("lt", ctx.draw("rand_uniform", shape), p, compute="f32"), dtype)


@lowers("aten.bernoulli.p", "aten.bernoulli_.float", ops="rand_uniform, lt, cast",
        note="1 where rand_uniform < p (stochastic depth, dropout's mask)")
def _bernoulli_p(ctx, node):
    a = ctx.args()
    dtype, shape = ctx.meta()
    return _bernoulli(ctx, shape, a.p, dtype)


@lowers("aten.bernoulli.default", "aten.bernoulli_.Tensor", ops="rand_uniform, lt, cast",
        note="1 where rand_uniform < the probability tensor")
def _bernoulli_tensor(ctx, node):
    a = ctx.args()
    dtype, shape = ctx.meta()
    p = a.self if str(node.target) == "aten.bernoulli.default" else a.p
    return _bernoulli(ctx, shape, ctx.broadcast_to(ctx.cast(p, "f32"), shape), dtype)


@lowers("aten.rand.default", "aten.rand_like.default", ops="rand_uniform")
def _rand(ctx, node):
    dtype, shape = ctx.meta()
    return ctx.cast(ctx.draw("rand_uniform", shape), dtype)


@lowers("aten.randn.default", "aten.randn_like.default", ops="rand_normal")
def _randn(ctx, node):
    dtype, shape = ctx.meta()
    return ctx.cast(ctx.draw("rand_normal", shape), dtype)


@lowers("aten.uniform.default", "aten.uniform_.default", ops="rand_uniform, mul, add",
        note="from + (to - from) * rand_uniform")
def _uniform(ctx, node):
    a = ctx.args()
    dtype, shape = ctx.meta()
    lo, hi = float(getattr(a, "from")), float(a.to)
    u = ctx.draw("rand_uniform", shape)
    return ctx.cast(ctx.binary("add", ctx.binary("mul", u, hi - lo), lo), dtype)


@lowers("aten.normal.default", "aten.normal_.default", ops="rand_normal, mul, add",
        note="mean + std * rand_normal")
def _normal(ctx, node):
    a = ctx.args()
    dtype, shape = ctx.meta()
    n = ctx.draw("rand_normal", shape)
    return ctx.cast(ctx.binary("add", ctx.binary("mul", n, float(a.std)), float(a.mean)), dtype)


@lowers("aten.randint.low", "aten.randint.default", "aten.randint_like.low_dtype", "aten.randint_like.default",
        ops="rand_uniform, mul, add, floor (cast)",
        note="low + floor((high - low) * rand_uniform); uniform for ranges up to 2^24")
def _randint(ctx, node):
    a = ctx.args()
    dtype, shape = ctx.meta()
    lo = int(getattr(a, "low", 0) or 0)
    hi = int(a.high)
    if hi - lo > (1 << 24):
        ctx.fail(f"randint over {hi - lo} values: tracecache's uniform numbers have 24 bits")
    u = ctx.draw("rand_uniform", shape)
    scaled = ctx.binary("mul", u, float(hi - lo))  # in [0, hi - lo): its integer part is uniform
    return ctx.binary("add", ctx.cast(scaled, "i64"), lo, dtype="i64") if dtype == "i64" else \
        ctx.cast(ctx.binary("add", ctx.cast(scaled, "i64"), lo, dtype="i64"), dtype)
