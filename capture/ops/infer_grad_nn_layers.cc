// Inference rules of the nn layers' gradients (capture/ops/grad_nn_layers.h) (their registry rows:
// ops.cc; the contract: InferFn in ops.h).
#include "capture/ops/infer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "capture/ops/attr_views.h"
#include "capture/ops/infer_checks.h"

namespace tracecache::infer {

// ---- gradients of the nn layers (capture/ops/grad_nn_layers.h) -----------------------------

// conv2d's output plane for an input plane `size` and kernel `kernel` (attributes normalized);
// fails like conv2d when the dilated kernel does not fit, or when `grad_out`'s plane differs.
Check check_conv_plane(std::string_view op, const IntList& size, const IntList& kernel, const IntList& stride,
                       const IntList& padding, const IntList& dilation, const TensorType& g) {
  for (int d = 0; d < 2; ++d) {
    const int64_t padded = size[d] + 2 * padding[d];
    const int64_t extent = dilation[d] * (kernel[d] - 1) + 1;
    if (padded < extent || (padded - extent) / stride[d] + 1 != g.shape[2 + d]) {
      return fail(op, fmt::format("grad_out {} is not conv2d's output for an input plane {}, kernel {}, "
                                  "stride {}, padding {}, dilation {}", describe(g), size.to_string(),
                                  kernel.to_string(), stride.to_string(), padding.to_string(),
                                  dilation.to_string()));
    }
  }
  return std::nullopt;
}

template <typename View>
Check normalize_conv_attrs(std::string_view op, View& a) {
  RETURN_IF_ERROR(normalize_pair(op, "stride", a.stride(), 1));
  RETURN_IF_ERROR(normalize_pair(op, "padding", a.padding(), 0));
  RETURN_IF_ERROR(normalize_pair(op, "dilation", a.dilation(), 1));
  if (a.groups() < 1) return fail(op, fmt::format("groups must be >= 1, got {}", a.groups()));
  return std::nullopt;
}

// conv2d_input_grad(grad_out [N, O, OH, OW], weight [O, C/groups, kh, kw]) -> [N, C, H, W].
Check infer_conv2d_input_grad(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  constexpr std::string_view kOp = "conv2d_input_grad";
  const TensorType& g = in[0];
  const TensorType& w = in[1];
  RETURN_IF_ERROR(require_grad_out(kOp, g));
  RETURN_IF_ERROR(require_f32(kOp, "weight", w));
  Conv2dInputGradAttrs a(attrs);
  RETURN_IF_ERROR(normalize_conv_attrs(kOp, a));
  RETURN_IF_ERROR(normalize_pair(kOp, "input_size", a.input_size(), 0));
  if (w.shape.rank() != 4 || w.shape[0] != g.shape[1] || w.shape[0] % a.groups() != 0 || w.shape[2] < 1 ||
      w.shape[3] < 1 || w.shape[2] > kMaxWindowAttr || w.shape[3] > kMaxWindowAttr) {
    return fail(kOp, fmt::format("weight {} must be [O, C / groups, kh, kw] with O = {} (grad_out {}) "
                                 "divisible by groups={}", describe(w), g.shape[1], describe(g), a.groups()));
  }
  if (w.shape[1] > kMaxElements / a.groups()) {
    return fail(kOp, fmt::format("weight {} with groups={} has too many input channels", describe(w), a.groups()));
  }
  RETURN_IF_ERROR(check_conv_plane(kOp, a.input_size(), IntList{w.shape[2], w.shape[3]}, a.stride(),
                                   a.padding(), a.dilation(), g));
  *result = TensorType{DType::kF32, Shape{g.shape[0], w.shape[1] * a.groups(), a.input_size()[0],
                                          a.input_size()[1]}};
  return std::nullopt;
}

// conv2d_weight_grad(grad_out [N, O, OH, OW], input [N, C, H, W]) -> [O, C/groups, kh, kw].
Check infer_conv2d_weight_grad(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  constexpr std::string_view kOp = "conv2d_weight_grad";
  const TensorType& g = in[0];
  const TensorType& x = in[1];
  RETURN_IF_ERROR(require_grad_out(kOp, g));
  RETURN_IF_ERROR(require_nchw(kOp, x));
  Conv2dWeightGradAttrs a(attrs);
  RETURN_IF_ERROR(normalize_conv_attrs(kOp, a));
  RETURN_IF_ERROR(normalize_pair(kOp, "kernel", a.kernel(), 1));
  const int64_t groups = a.groups();
  if (g.shape[0] != x.shape[0] || x.shape[1] % groups != 0 || g.shape[1] % groups != 0) {
    return fail(kOp, fmt::format("grad_out {} and input {} must have the same batch and channel counts "
                                 "divisible by groups={}", describe(g), describe(x), groups));
  }
  RETURN_IF_ERROR(check_conv_plane(kOp, IntList{x.shape[2], x.shape[3]}, a.kernel(), a.stride(), a.padding(),
                                   a.dilation(), g));
  *result = TensorType{DType::kF32, Shape{g.shape[1], x.shape[1] / groups, a.kernel()[0], a.kernel()[1]}};
  return std::nullopt;
}

// max_pool2d_grad(grad_out, input) -> input's type; grad_out must be max_pool2d's output type.
Check infer_max_pool2d_grad(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  constexpr std::string_view kOp = "max_pool2d_grad";
  RETURN_IF_ERROR(require_grad_out(kOp, in[0]));
  MaxPool2dAttrs a(attrs);
  Shape out;
  RETURN_IF_ERROR(pool_shape(kOp, in[1], a.kernel(), a.stride(), a.padding(), &a.dilation(), a.ceil_mode(), &out));
  if (!(in[0].shape == out)) {
    return fail(kOp, fmt::format("grad_out {} must have the pool's output shape {} for input {}",
                                 describe(in[0]), out.to_string(), describe(in[1])));
  }
  *result = in[1];
  return std::nullopt;
}

// avg_pool2d_grad(grad_out [N, C, OH, OW]) -> [N, C, input_size]; (OH, OW) must be avg_pool2d's
// output plane for that input, with or without ceil_mode (which changes nothing else).
Check infer_avg_pool2d_grad(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  constexpr std::string_view kOp = "avg_pool2d_grad";
  const TensorType& g = in[0];
  RETURN_IF_ERROR(require_grad_out(kOp, g));
  AvgPool2dGradAttrs a(attrs);
  RETURN_IF_ERROR(normalize_pair(kOp, "input_size", a.input_size(), 0));
  const TensorType x{DType::kF32, Shape{g.shape[0], g.shape[1], a.input_size()[0], a.input_size()[1]}};
  Shape floor_out, ceil_out;
  RETURN_IF_ERROR(pool_shape(kOp, x, a.kernel(), a.stride(), a.padding(), nullptr, false, &floor_out));
  RETURN_IF_ERROR(pool_shape(kOp, x, a.kernel(), a.stride(), a.padding(), nullptr, true, &ceil_out));
  if (!(g.shape == floor_out) && !(g.shape == ceil_out)) {
    return fail(kOp, fmt::format("grad_out {} must have the pool's output shape {} (or {} with ceil_mode) "
                                 "for input size {}", describe(g), floor_out.to_string(),
                                 ceil_out.to_string(), a.input_size().to_string()));
  }
  *result = x;
  return std::nullopt;
}

// adaptive_avg_pool2d_grad(grad_out [N, C, OH, OW]) -> [N, C, input_size].
Check infer_adaptive_avg_pool2d_grad(std::span<const TensorType> in, std::span<AttrValue> attrs,
                                     TensorType* result) {
  constexpr std::string_view kOp = "adaptive_avg_pool2d_grad";
  const TensorType& g = in[0];
  RETURN_IF_ERROR(require_grad_out(kOp, g));
  IntList& size = AdaptiveAvgPool2dGradAttrs(attrs).input_size();
  RETURN_IF_ERROR(normalize_pair(kOp, "input_size", size, 1));
  if (g.shape[2] < 1 || g.shape[3] < 1 || g.shape[2] > kMaxElements / size[0] ||
      g.shape[3] > kMaxElements / size[1]) {
    return fail(kOp, fmt::format("grad_out {} must have a non-empty plane no larger than the pool allows "
                                 "for input size {}", describe(g), size.to_string()));
  }
  *result = TensorType{DType::kF32, Shape{g.shape[0], g.shape[1], size[0], size[1]}};
  return std::nullopt;
}

}  // namespace tracecache::infer
