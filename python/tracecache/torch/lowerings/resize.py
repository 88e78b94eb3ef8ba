"""Upsampling (`F.interpolate` with mode bilinear or nearest, `nn.Upsample`) and its backward.

Bilinear is the registry's `resize_linear2d`, whose per-element formula is PyTorch's CPU
kernel's (`wy0 (wx0 a + wx1 b) + wy1 (wx0 c + wx1 d)` in f32, both taps clamped into the
input) with PyTorch's source coordinates: align_corners=True is its `align_corners` mode
(`o (in - 1) / (out - 1)`, 0 for an output of length 1); align_corners=False is `half_pixel`,
`(o + 0.5) / s - 0.5` with `s` the scale factor when one is given (PyTorch uses 1 / scale_factor,
not in / out, then) and `out / in` otherwise; a negative coordinate reads the first row with
weights summing to 1, as PyTorch's clamp to 0 does; an axis whose output length equals its
input length is copied, as PyTorch does even when a scale factor says otherwise. The one
difference is rounding: PyTorch rounds the scale and the coordinate to f32 where the registry
keeps them in double, so an interpolation weight differs by at most about `(c + 1) 2^-23` for a
coordinate `c`, and an output by that times the difference of its two taps.

Nearest is exact: PyTorch 1.13's source index, `min(floor(f32(o) * s), in - 1)` in f32 with
`s = f32(1 / scale_factor)` or `f32(in) / out`, is computed with the same f32 ops (`arange`,
`mul`, `floor`), and the rows and columns are picked with `index_select`. PyTorch's
channels-last kernel (taken for any input that is channels-last contiguous, also one with a
single channel) and its backward kernel first take the output index itself when the lengths are
equal and `o >> 1` when the output is twice the input (`nearest_idx`), which differs from the
formula when a scale factor disagrees with the sizes (2.1 for 5 -> 10); the lowering follows
the kernel PyTorch runs, by the input's strides as captured. The backward adds the gradient
back with `scatter_add`.

Part of the one mapping from ATen ops to tracecache registry ops (`tracecache.torch.lowering`
has the Lowerer and the contract every lowering follows). Read-only after import.
"""

import numpy as np
import torch

from ..lowering import DType, lowers


def _scales(a):
    """The (h, w) scale factors of an upsample call (`.vec`: scale_factors; else scales_h/_w)."""
    if hasattr(a, "scale_factors"):
        factors = a.scale_factors
        return (None, None) if factors is None else (factors[0], factors[1])
    return a.scales_h, a.scales_w


def _linear_scale(scale, in_len, out_len):
    """resize_linear2d's scale attribute for PyTorch's scale factor (0 means out / in)."""
    if out_len == in_len or scale is None or scale <= 0:
        return 0.0
    return float(scale)


@lowers("aten.upsample_bilinear2d.vec", "aten.upsample_bilinear2d.default", ops="resize_linear2d",
        note="PyTorch's coordinates and formula; the weights rounded once from double, not twice in f32")
def _upsample_bilinear(ctx, node):
    a = ctx.args()
    x = a.input if hasattr(a, "input") else a.self
    dtype, shape = ctx.meta()
    if x.dtype != "f32":
        ctx.fail(f"bilinear upsampling of a {x.dtype} tensor")
    sh, sw = _scales(a)
    h, w = x.shape[2:]
    oh, ow = shape[2:]
    return ctx.op("resize_linear2d", [x], dtype, shape, size=[oh, ow], scale_h=_linear_scale(sh, h, oh),
                  scale_w=_linear_scale(sw, w, ow), coordinate_transformation_mode=2 if a.align_corners else 0)


@lowers("aten.upsample_bilinear2d_backward.vec", "aten.upsample_bilinear2d_backward.default",
        ops="resize_linear2d_grad", note="the adjoint of the forward's sampling")
def _upsample_bilinear_backward(ctx, node):
    a = ctx.args()
    g = a.grad_output
    h, w = a.input_size[2:]
    oh, ow = g.shape[2:]
    sh, sw = _scales(a)
    return ctx.op("resize_linear2d_grad", [g], "f32", tuple(a.input_size), input_size=[h, w],
                  scale_h=_linear_scale(sh, h, oh), scale_w=_linear_scale(sw, w, ow),
                  coordinate_transformation_mode=2 if a.align_corners else 0)


def _nearest_step(in_len, out_len, scale):
    """PyTorch's f32 step between the source positions of consecutive outputs."""
    step = np.float32(1.0 / scale) if scale is not None and scale > 0 else np.float32(in_len) / np.float32(out_len)
    return float(step)


def _copies(in_len, out_len, scale, shortcuts):
    """Whether nearest sampling along an axis reads every input index in order."""
    if out_len != in_len:
        return False
    step = np.float32(_nearest_step(in_len, out_len, scale))
    return shortcuts or bool(np.all(np.floor(np.arange(out_len, dtype=np.float32) * step) == np.arange(out_len)))


def _nearest_index(ctx, in_len, out_len, scale, shortcuts):
    """PyTorch 1.13's nearest source index for each output index, as i64[out]; `shortcuts`:
    nearest_idx's, for equal lengths and twice the length."""
    if shortcuts and (out_len == in_len or out_len == 2 * in_len):
        index = ctx.op("arange", [], "i64", (out_len,), start=0.0, end=float(out_len), step=1.0, dtype=DType("i64"))
        return index if out_len == in_len else ctx.op("trunc_div", [index, ctx.full(2, "i64")], "i64", (out_len,))
    step = _nearest_step(in_len, out_len, scale)
    positions = ctx.op("arange", [], "f32", (out_len,), start=0.0, end=float(out_len), step=1.0, dtype=DType("f32"))
    source = ctx.unary("floor", ctx.binary("mul", positions, ctx.full(step, "f32")))
    return ctx.binary("minimum", ctx.cast(source, "i64"), in_len - 1)


@lowers("aten.upsample_nearest2d.vec", "aten.upsample_nearest2d.default",
        ops="arange, mul, floor, cast, minimum, trunc_div (the source indices), index_select",
        note="PyTorch's source indices, computed in f32 as PyTorch does")
def _upsample_nearest(ctx, node):
    a = ctx.args()
    x = a.input if hasattr(a, "input") else a.self
    dtype, shape = ctx.meta()
    sh, sw = _scales(a)
    n, c, h, w = x.shape
    oh, ow = shape[2:]
    meta = node.args[0].meta.get("tensor_meta")
    if meta is None:
        ctx.fail("the capture recorded no strides for the input of nearest upsampling")
    layout = torch.empty_strided(tuple(meta.shape), tuple(meta.stride), device="meta")
    shortcuts = layout.is_contiguous(memory_format=torch.channels_last)
    rows = x
    if not _copies(h, oh, sh, shortcuts):
        rows = ctx.op("index_select", [x, _nearest_index(ctx, h, oh, sh, shortcuts)], x.dtype, (n, c, oh, w), axis=2)
    if _copies(w, ow, sw, shortcuts):
        return rows
    return ctx.op("index_select", [rows, _nearest_index(ctx, w, ow, sw, shortcuts)], x.dtype, shape, axis=3)


@lowers("aten.upsample_nearest2d_backward.vec", "aten.upsample_nearest2d_backward.default",
        ops="arange, mul, floor, cast, minimum, trunc_div (the source indices), scatter_add",
        note="each output's gradient added to the input element it copies")
def _upsample_nearest_backward(ctx, node):
    a = ctx.args()
    g = a.grad_output
    n, c, h, w = a.input_size
    oh, ow = g.shape[2:]
    sh, sw = _scales(a)
    if ow != w:
        index = ctx.broadcast_to(ctx.reshape(_nearest_index(ctx, w, ow, sw, True), (1, 1, 1, ow)), g.shape)
        g = ctx.op("scatter_add", [ctx.full(0, "f32", (n, c, oh, w)), index, g], "f32", (n, c, oh, w), axis=3)
    if oh != h:
        index = ctx.broadcast_to(ctx.reshape(_nearest_index(ctx, h, oh, sh, True), (1, 1, oh, 1)), g.shape)
        g = ctx.op("scatter_add", [ctx.full(0, "f32", (n, c, h, w)), index, g], "f32", (n, c, h, w), axis=2)
    return g
