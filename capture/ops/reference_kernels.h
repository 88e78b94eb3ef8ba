// Reference kernels: the naive, obviously-correct implementation of every op, one function per
// op, referenced from the op registry table (ops.cc). They are the oracle every backend is
// tested against, so clarity beats speed: plain index loops, broadcasting by explicit index
// arithmetic, float reductions accumulated in double (documented in docs/ops.md).
//
// Contract for each kernel (see ReferenceKernel in ops.h): `in` holds the op's tensor inputs,
// `attrs` its normalized attributes in registry order, `out` is preallocated with the inferred
// dtype and shape and is fully overwritten. Thread-safe: no shared state.
#pragma once

#include <array>
#include <span>

#include "capture/ops/attrs.h"
#include "capture/core/buffer.h"

namespace tracecache::ref {

#define TRACECACHE_REF_KERNEL(name) \
  void name(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out)

TRACECACHE_REF_KERNEL(neg);
TRACECACHE_REF_KERNEL(abs);
TRACECACHE_REF_KERNEL(exp);
TRACECACHE_REF_KERNEL(log);
TRACECACHE_REF_KERNEL(sqrt);
TRACECACHE_REF_KERNEL(rsqrt);
TRACECACHE_REF_KERNEL(tanh);
TRACECACHE_REF_KERNEL(sigmoid);
TRACECACHE_REF_KERNEL(relu);
TRACECACHE_REF_KERNEL(add);
TRACECACHE_REF_KERNEL(sub);
TRACECACHE_REF_KERNEL(mul);
TRACECACHE_REF_KERNEL(div);
TRACECACHE_REF_KERNEL(pow);
TRACECACHE_REF_KERNEL(maximum);
TRACECACHE_REF_KERNEL(minimum);
TRACECACHE_REF_KERNEL(eq);
TRACECACHE_REF_KERNEL(lt);
TRACECACHE_REF_KERNEL(gt);
TRACECACHE_REF_KERNEL(where);
TRACECACHE_REF_KERNEL(cast);
TRACECACHE_REF_KERNEL(matmul);
TRACECACHE_REF_KERNEL(sum);
TRACECACHE_REF_KERNEL(mean);
TRACECACHE_REF_KERNEL(max);
TRACECACHE_REF_KERNEL(argmax);
TRACECACHE_REF_KERNEL(reshape);
TRACECACHE_REF_KERNEL(permute);
TRACECACHE_REF_KERNEL(transpose);
TRACECACHE_REF_KERNEL(broadcast_to);
TRACECACHE_REF_KERNEL(concat);
TRACECACHE_REF_KERNEL(slice);
TRACECACHE_REF_KERNEL(full);
TRACECACHE_REF_KERNEL(arange);
TRACECACHE_REF_KERNEL(uniform);
TRACECACHE_REF_KERNEL(normal);

// nn activations, normalization, attention (capture/trace/nn.h). The elementwise activations live
// in reference_kernels.cc with the other unary ops; the rest in reference_nn_ops.cc, with the
// per-element formulas of capture/ops/nn_numerics.h.
TRACECACHE_REF_KERNEL(gelu);
TRACECACHE_REF_KERNEL(silu);
TRACECACHE_REF_KERNEL(hardswish);
TRACECACHE_REF_KERNEL(hardsigmoid);
TRACECACHE_REF_KERNEL(erf);
TRACECACHE_REF_KERNEL(clamp);
TRACECACHE_REF_KERNEL(batch_norm);
TRACECACHE_REF_KERNEL(layer_norm);
TRACECACHE_REF_KERNEL(softmax);
TRACECACHE_REF_KERNEL(log_softmax);
TRACECACHE_REF_KERNEL(scaled_dot_product_attention);
// nn layers (capture/trace/nn.h); in capture/ops/reference_nn_layers.cc. conv2d and linear accumulate in
// double and round once (as matmul); pools are exact up to the one rounding of an average.
// Out-of-range indices of embedding, gather and index_select are clamped (docs/ops.md).
TRACECACHE_REF_KERNEL(conv2d);
TRACECACHE_REF_KERNEL(max_pool2d);
TRACECACHE_REF_KERNEL(avg_pool2d);
TRACECACHE_REF_KERNEL(adaptive_avg_pool2d);
TRACECACHE_REF_KERNEL(linear);
TRACECACHE_REF_KERNEL(flatten);
TRACECACHE_REF_KERNEL(pad);
TRACECACHE_REF_KERNEL(dropout);
TRACECACHE_REF_KERNEL(embedding);
TRACECACHE_REF_KERNEL(gather);
TRACECACHE_REF_KERNEL(index_select);
// Gradients of the lookups; in capture/ops/reference_grad_nn_ops.cc. scatter_add clamps indices as
// the lookups do and sums each output element in double (x first, then src in increasing index),
// rounded once (docs/ops.md).
TRACECACHE_REF_KERNEL(scatter_add);
// training ops; in capture/ops/reference_nn_layers.cc.
TRACECACHE_REF_KERNEL(dropout_mask);
// gradients of the nn layers; in capture/ops/reference_grad_nn_layers.cc. Every input element's
// gradient is one sum in double over the forward outputs it reached, in row-major output order
// (conv2d_input_grad: in (out channel, kernel row, kernel column) order), rounded once.
TRACECACHE_REF_KERNEL(conv2d_input_grad);
TRACECACHE_REF_KERNEL(conv2d_weight_grad);
TRACECACHE_REF_KERNEL(max_pool2d_grad);
TRACECACHE_REF_KERNEL(avg_pool2d_grad);
TRACECACHE_REF_KERNEL(adaptive_avg_pool2d_grad);

// the ops ONNX models need (issue 16). The elementwise ones and min/argmin live in
// reference_kernels.cc beside their families.
TRACECACHE_REF_KERNEL(floor);
TRACECACHE_REF_KERNEL(ceil);
TRACECACHE_REF_KERNEL(round);
TRACECACHE_REF_KERNEL(sin);
TRACECACHE_REF_KERNEL(cos);
TRACECACHE_REF_KERNEL(remainder);
TRACECACHE_REF_KERNEL(fmod);
TRACECACHE_REF_KERNEL(trunc_div);
TRACECACHE_REF_KERNEL(min);
TRACECACHE_REF_KERNEL(argmin);
// In capture/ops/reference_onnx_ops.cc. conv_transpose2d is conv2d_input_grad (sums in double,
// rounded once) plus the bias in f32.
TRACECACHE_REF_KERNEL(conv_transpose2d);
// The attributes of the conv2d_input_grad that computes a conv_transpose2d with these attributes
// and this output shape (shared by the reference and cpu kernels).
std::array<AttrValue, 5> conv_transpose2d_input_grad_attrs(std::span<const AttrValue> attrs, const Shape& out);
// resize: plane by plane with the taps and plane loops of capture/ops/resize.h.
TRACECACHE_REF_KERNEL(resize_nearest2d);
TRACECACHE_REF_KERNEL(resize_linear2d);
// topk: row by row with the selection of capture/ops/topk.h.
TRACECACHE_REF_KERNEL(topk);
TRACECACHE_REF_KERNEL(topk_indices);
// scatter_elements and gather_nd: negative indices count from the end of their dim (ONNX), then
// out-of-range ones are clamped as the lookups' are. scatter_elements applies the updates in
// row-major order of the index (the last of duplicate indices wins with reduction none; add and
// mul accumulate in the dtype, in that order).
TRACECACHE_REF_KERNEL(scatter_elements);
TRACECACHE_REF_KERNEL(gather_nd);
// The resize gradients: each input element sums, in double, grad_out times the weight with which
// every output read it (row-major output order), rounded once. The cpu backend runs these.
TRACECACHE_REF_KERNEL(resize_nearest2d_grad);
TRACECACHE_REF_KERNEL(resize_linear2d_grad);
// Random numbers from a seed tensor; in capture/ops/reference_nn_layers.cc: element by element,
// each computed alone by capture/ops/random.h's rand_uniform_at / rand_normal_at.
TRACECACHE_REF_KERNEL(rand_uniform);
TRACECACHE_REF_KERNEL(rand_normal);
// Quantization, in capture/ops/reference_kernels.cc, element by element in f32 with NumPy
// broadcasting of scale and zero point (docs/ops.md): quantize_linear is
// clamp(round_half_even(x / scale) + zero_point) to the zero point's range, NaN giving the zero
// point; dequantize_linear is (x - zero_point) * scale, the difference exact in f32 for i8/u8.
TRACECACHE_REF_KERNEL(quantize_linear);
TRACECACHE_REF_KERNEL(dequantize_linear);
// `from` element by element into `to` (same numel) through float: exact from bf16, f16, i8 and u8
// to f32 (for i32 the one rounding ONNX's reference makes), one rounding from f32 to a half.
// Unlike the kernels' own conversion, it takes the half types: the reference evaluator widens
// halves with it (capture/reference/reference.h), and the quantization kernels read and write
// them directly (the cpu backend does not widen them, replay/compile/widen.h).
void convert_through_float(const HostBuffer& from, HostBuffer& to);

#undef TRACECACHE_REF_KERNEL

}  // namespace tracecache::ref
