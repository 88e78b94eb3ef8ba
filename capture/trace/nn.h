// The neural-network op API: convolution, pooling, normalization, activations, lookups and
// attention, as used by the model zoo (frontend/zoo/). Each function records one registry op (see
// docs/ops.md for exact semantics, which follow PyTorch 1.13's torch.nn.functional); optional
// tensor operands (bias, mask) may be passed as an undefined Tensor.
//
// Layout is NCHW for the 2-d ops; pairs (stride, padding, dilation, kernel) are {height, width}.
// Errors: like every op, bad operands or attributes throw Error at record time naming the op.
#pragma once

#include <cstdint>

#include "capture/trace/tensor.h"

namespace tracecache {

// ---- convolution, pooling, linear, layout -------------------------------------------------

// x [N, C, H, W], weight [O, C / groups, kh, kw], bias [O] or undefined.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, IntList stride = {1, 1},
              IntList padding = {0, 0}, IntList dilation = {1, 1}, int64_t groups = 1);
// An empty `stride` means stride = kernel. Padding pads with -infinity.
Tensor max_pool2d(const Tensor& x, IntList kernel, IntList stride = {}, IntList padding = {0, 0},
                  IntList dilation = {1, 1}, bool ceil_mode = false);
Tensor avg_pool2d(const Tensor& x, IntList kernel, IntList stride = {}, IntList padding = {0, 0},
                  bool ceil_mode = false, bool count_include_pad = true);
Tensor adaptive_avg_pool2d(const Tensor& x, IntList output_size);
// y = x @ weight^T + bias; weight [out, in], bias [out] or undefined; x [..., in].
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
// Constant padding; `pads` as torch.nn.functional.pad: (last-dim before, last-dim after,
// second-to-last before, ...). Negative pads crop.
Tensor pad(const Tensor& x, IntList pads, double value = 0);
// Inference: the identity (recorded, so the graph keeps the model's structure).
Tensor dropout(const Tensor& x, double p);
// weight [num, dim], indices integer of any shape -> [*indices.shape, dim].
Tensor embedding(const Tensor& weight, const Tensor& indices);
// torch.gather: out[i][j][k] = x[index[i][j][k]][j][k] for axis 0, etc.
Tensor gather(const Tensor& x, int64_t axis, const Tensor& index);
// torch.index_select: index is a rank-1 integer tensor.
Tensor index_select(const Tensor& x, int64_t axis, const Tensor& index);
// torch.scatter_add, out of place: x plus each src element added at its index along `axis`
// (index and src of one shape; indices clamped as gather's; duplicates accumulate). The
// backward of the lookups (capture/ops/grad_nn_ops.h).
Tensor scatter_add(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src);

// ---- normalization, activations, attention ------------------------------------------------

// Inference batch norm over channel dim 1: (x - mean) / sqrt(var + eps) * weight + bias.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// Normalizes over the last `normalized_dims` dims; weight and bias (optional) have those dims.
Tensor layer_norm(const Tensor& x, int64_t normalized_dims, const Tensor& weight,
                  const Tensor& bias, double eps = 1e-5);
Tensor softmax(const Tensor& x, int64_t axis);
Tensor log_softmax(const Tensor& x, int64_t axis);
// approximate = false: x * Phi(x) with erf; true: the tanh form.
Tensor gelu(const Tensor& x, bool tanh_approximation = false);
Tensor silu(const Tensor& x);
Tensor hardswish(const Tensor& x);
Tensor hardsigmoid(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor clamp(const Tensor& x, double min, double max);
inline Tensor relu6(const Tensor& x) { return clamp(x, 0, 6); }
// softmax(q k^T * scale + mask) v over the last two dims; q [..., Lq, E], k [..., Lk, E],
// v [..., Lk, Ev]; mask additive f32 broadcastable to [..., Lq, Lk] or undefined; scale 0 means
// 1 / sqrt(E); causal masks out keys after the query position.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& mask = {}, bool causal = false,
                                    double scale = 0);

}  // namespace tracecache
