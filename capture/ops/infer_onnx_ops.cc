// Inference rules of the ops ONNX models need (issue 16) (their registry rows: ops.cc; the
// contract: InferFn in ops.h).
#include "capture/ops/infer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "capture/ops/attr_views.h"
#include "capture/ops/infer_checks.h"
#include "capture/ops/resize.h"

namespace tracecache::infer {

// ---- the ops ONNX models need (issue 16) ------------------------------------------------------

// conv_transpose2d(x [N, C, H, W], weight [C, O / groups, kh, kw], bias [O]?) -> [N, O, OH, OW]
// with OH = (H - 1) stride - 2 padding + dilation (kh - 1) + output_padding + 1 (ONNX
// ConvTranspose with explicit symmetric pads): conv2d_input_grad of a conv2d from [N, O, OH, OW]
// to x's plane, plus the bias.
Check infer_conv_transpose2d(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  constexpr std::string_view kOp = "conv_transpose2d";
  const TensorType& x = in[0];
  const TensorType& w = in[1];
  RETURN_IF_ERROR(require_nchw(kOp, x));
  RETURN_IF_ERROR(require_f32(kOp, "weight", w));
  ConvTranspose2dAttrs a(attrs);
  RETURN_IF_ERROR(normalize_pair(kOp, "stride", a.stride(), 1));
  RETURN_IF_ERROR(normalize_pair(kOp, "padding", a.padding(), 0));
  RETURN_IF_ERROR(normalize_pair(kOp, "output_padding", a.output_padding(), 0));
  RETURN_IF_ERROR(normalize_pair(kOp, "dilation", a.dilation(), 1));
  const int64_t groups = a.groups();
  if (groups < 1) return fail(kOp, fmt::format("groups must be >= 1, got {}", groups));
  const int64_t c = x.shape[1];
  if (w.shape.rank() != 4 || w.shape[0] != c || c % groups != 0 || w.shape[2] < 1 || w.shape[3] < 1 ||
      w.shape[2] > kMaxWindowAttr || w.shape[3] > kMaxWindowAttr) {
    return fail(kOp, fmt::format("weight {} must be [C, O / groups, kh, kw] with C = {} (the channels of "
                                 "input {}) divisible by groups={}", describe(w), c, describe(x), groups));
  }
  if (w.shape[1] > kMaxElements / groups) {
    return fail(kOp, fmt::format("weight {} with groups={} has too many output channels", describe(w), groups));
  }
  const int64_t o = w.shape[1] * groups;
  if (in.size() == 3) {
    const TensorType& b = in[2];
    RETURN_IF_ERROR(require_f32(kOp, "bias", b));
    if (b.shape.rank() != 1 || b.shape[0] != o) {
      return fail(kOp, fmt::format("bias {} must be [{}] (one per output channel of weight {} with groups={})",
                                   describe(b), o, describe(w), groups));
    }
  }
  Shape out{x.shape[0], o, 0, 0};
  for (int d = 0; d < 2; ++d) {
    const int64_t stride = a.stride()[d], pad = a.output_padding()[d];
    if (pad >= stride) {
      return fail(kOp, fmt::format("output_padding {} must be smaller than stride {} in each dim",
                                   a.output_padding().to_string(), a.stride().to_string()));
    }
    if (x.shape[2 + d] < 1 || x.shape[2 + d] > kMaxWindowAttr) {
      return fail(kOp, fmt::format("input {} must have spatial dims in [1, 2^24]", describe(x)));
    }
    const int64_t size = (x.shape[2 + d] - 1) * stride - 2 * a.padding()[d] +
                         a.dilation()[d] * (w.shape[2 + d] - 1) + pad + 1;
    if (size < 1 || size > kMaxWindowAttr) {
      return fail(kOp, fmt::format("input {} with weight {}, stride {} and padding {} gives an output dim of "
                                   "{}; it must be in [1, 2^24]", describe(x), describe(w),
                                   a.stride().to_string(), a.padding().to_string(), size));
    }
    out[2 + d] = size;
  }
  *result = TensorType{DType::kF32, out};
  return std::nullopt;
}

// resize_nearest2d and resize_linear2d (capture/ops/resize.h): x [N, C, H, W] (H, W >= 1) ->
// [N, C, size]. The attributes shared by both lead their tables; nearest_mode is checked by
// infer_resize_nearest2d.
template <OpKind K>
Check check_resize(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  const std::string_view name = op_info(K).name;
  const TensorType& x = in[0];
  ResizeLinear2dAttrs a(attrs.first(4));
  if (x.shape.rank() != 4) return fail(name, fmt::format("input {} must have rank 4 (N, C, H, W)", describe(x)));
  if (x.shape[2] < 1 || x.shape[3] < 1) {
    return fail(name, fmt::format("input {} has an empty spatial dim: there is nothing to sample", describe(x)));
  }
  RETURN_IF_ERROR(normalize_pair(name, "size", a.size(), 1));
  for (double scale : {a.scale_h(), a.scale_w()}) {
    if (!std::isfinite(scale) || scale < 0) {
      return fail(name, fmt::format("scales must be finite and > 0 (or 0: size / input size), got {} and {}",
                                    a.scale_h(), a.scale_w()));
    }
  }
  const int64_t mode = a.coordinate_transformation_mode();
  if (mode < 0 || mode >= resize::kCoordModes) {
    return fail(name, fmt::format("coordinate_transformation_mode must be 0 (half_pixel), 1 (asymmetric), "
                                  "2 (align_corners), 3 (pytorch_half_pixel) or 4 "
                                  "(tf_half_pixel_for_nearest), got {}", mode));
  }
  *result = TensorType{x.dtype, Shape{x.shape[0], x.shape[1], a.size()[0], a.size()[1]}};
  return std::nullopt;
}

Check infer_resize_nearest2d(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  RETURN_IF_ERROR(check_resize<OpKind::kResizeNearest2d>(in, attrs, result));
  const int64_t mode = ResizeNearest2dAttrs(attrs).nearest_mode();
  if (mode < 0 || mode >= resize::kNearestModes) {
    return fail("resize_nearest2d", fmt::format("nearest_mode must be 0 (round_prefer_floor), 1 "
                                                "(round_prefer_ceil), 2 (floor) or 3 (ceil), got {}", mode));
  }
  return std::nullopt;
}

Check infer_resize_linear2d(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  RETURN_IF_ERROR(require_f32("resize_linear2d", "input", in[0]));
  return check_resize<OpKind::kResizeLinear2d>(in, attrs, result);
}

// resize_nearest2d_grad and resize_linear2d_grad (grad_out [N, C, OH, OW] -> [N, C, input_size]):
// the forward's checks on the forward's input type, with the plane of grad_out as its size.
template <OpKind K, OpKind Forward>
Check infer_resize_grad(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  const std::string_view name = op_info(K).name;
  const TensorType& g = in[0];
  RETURN_IF_ERROR(require_grad_out(name, g));
  IntList& input_size = ResizeLinear2dGradAttrs(attrs.first(4)).input_size();
  RETURN_IF_ERROR(normalize_pair(name, "input_size", input_size, 1));
  const TensorType x{DType::kF32, Shape{g.shape[0], g.shape[1], input_size[0], input_size[1]}};
  std::array<AttrValue, 5> forward;
  std::copy(attrs.begin(), attrs.end(), forward.begin());
  forward[0] = AttrValue::of_ints({g.shape[2], g.shape[3]});
  const std::span<AttrValue> forward_attrs(forward.data(), attrs.size());
  TensorType y;
  RETURN_IF_ERROR(op_info(Forward).infer(std::span(&x, 1), forward_attrs, &y));
  *result = x;
  return std::nullopt;
}

// topk (values, x's dtype) and topk_indices (i64): x's shape with `axis` of size k.
template <OpKind K>
Check infer_topk(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  const std::string_view name = op_info(K).name;
  const TensorType& x = in[0];
  TopkAttrs a(attrs);
  if (x.shape.rank() == 0) return fail(name, fmt::format("input {} must have rank >= 1", describe(x)));
  RETURN_IF_ERROR(normalize_axis(name, a.axis(), x.shape.rank()));
  const int axis = static_cast<int>(a.axis());
  if (a.k() < 0 || a.k() > x.shape[axis]) {
    return fail(name, fmt::format("k must be in [0, {}] (dim {} of input {}), got {}", x.shape[axis], axis,
                                  describe(x), a.k()));
  }
  Shape out = x.shape;
  out[axis] = a.k();
  *result = TensorType{K == OpKind::kTopk ? x.dtype : DType::kI64, out};
  return std::nullopt;
}

// scatter_elements(x, index, updates; axis, reduction): ONNX ScatterElements (opset 16:
// reduction 0 none, 1 add, 2 mul). x and updates of one dtype.
Check infer_scatter_elements(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  constexpr std::string_view kOp = "scatter_elements";
  const TensorType &x = in[0], &idx = in[1], &src = in[2];
  RETURN_IF_ERROR(require_index(kOp, idx));
  if (src.dtype != x.dtype) {
    return fail(kOp, fmt::format("updates {} must have the dtype of the input {}", describe(src), describe(x)));
  }
  ScatterElementsAttrs a(attrs);
  RETURN_IF_ERROR(check_scatter(kOp, x, idx, src, a.axis()));
  if (a.reduction() < 0 || a.reduction() > 2) {
    return fail(kOp, fmt::format("reduction must be 0 (none), 1 (add) or 2 (mul), got {}", a.reduction()));
  }
  if (a.reduction() != 0) RETURN_IF_ERROR(reject_bool(kOp, x));
  *result = x;
  return std::nullopt;
}

// gather_nd(data, indices; batch_dims): ONNX GatherND. With b = batch_dims and k the last dim of
// indices: [indices dims but the last] + data.shape[b + k:].
Check infer_gather_nd(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  constexpr std::string_view kOp = "gather_nd";
  const TensorType &x = in[0], &idx = in[1];
  RETURN_IF_ERROR(require_index(kOp, idx));
  const int r = x.shape.rank(), q = idx.shape.rank();
  const int64_t b = GatherNdAttrs(attrs).batch_dims();
  if (r < 1 || q < 1) return fail(kOp, fmt::format("data {} and indices {} must have rank >= 1", describe(x), describe(idx)));
  if (b < 0 || b >= std::min(r, q)) {
    return fail(kOp, fmt::format("batch_dims must be in [0, {}) for data {} and indices {}, got {}", std::min(r, q),
                                 describe(x), describe(idx), b));
  }
  const int64_t k = idx.shape[q - 1];
  if (k < 1 || k > r - b) {
    return fail(kOp, fmt::format("the last dim of indices {} must be in [1, {}] (data {} after {} batch dims)",
                                 describe(idx), r - b, describe(x), b));
  }
  for (int d = 0; d < b; ++d) {
    if (x.shape[d] != idx.shape[d]) {
      return fail(kOp, fmt::format("data {} and indices {} must agree on their {} batch dims", describe(x),
                                   describe(idx), b));
    }
  }
  if (q - 1 + r - b - k > kMaxRank) {
    return fail(kOp, fmt::format("data {} and indices {} give a result of rank above {}", describe(x), describe(idx),
                                 kMaxRank));
  }
  Shape out;
  for (int d = 0; d < q - 1; ++d) out.push_back(idx.shape[d]);
  for (int d = static_cast<int>(b + k); d < r; ++d) out.push_back(x.shape[d]);
  if (idx.shape.numel() > 0) {
    for (int d = static_cast<int>(b); d < b + k; ++d) {
      if (x.shape[d] == 0) return fail(kOp, fmt::format("data {} is empty along indexed dim {}", describe(x), d));
    }
  }
  *result = TensorType{x.dtype, out};
  return std::nullopt;
}

// ---- quantization (issue 37) -------------------------------------------------------------------

namespace {

// The scale and zero point of quantize_linear / dequantize_linear: the scale a float, both
// broadcastable to x's shape without growing it (a per-channel scale is shaped along its axis:
// [C, 1, 1] for the channels of an NCHW x).
Check check_quant_params(std::string_view op, const TensorType& x, const TensorType& scale, const TensorType& zp) {
  if (!is_floating(scale.dtype) || scale.dtype == DType::kF64) {
    return fail(op, fmt::format("scale {} must be f32, bf16 or f16", describe(scale)));
  }
  Shape s;
  if (!broadcast_shapes(x.shape, scale.shape, &s) || !(s == x.shape) || !broadcast_shapes(x.shape, zp.shape, &s) ||
      !(s == x.shape)) {
    return fail(op, fmt::format("scale {} and zero point {} must broadcast to x {} (a per-channel scale is shaped "
                                "along its axis, e.g. [C, 1, 1])", describe(scale), describe(zp), describe(x)));
  }
  return std::nullopt;
}

bool quantized_dtype(DType t) { return t == DType::kI8 || t == DType::kU8; }

}  // namespace

// quantize_linear(x, scale, zero_point) -> zero_point's dtype (i8 or u8), x's shape.
Check infer_quantize_linear(std::span<const TensorType> in, std::span<AttrValue>, TensorType* result) {
  constexpr std::string_view kOp = "quantize_linear";
  const TensorType& x = in[0];
  if (!(is_floating(x.dtype) && x.dtype != DType::kF64) && x.dtype != DType::kI32) {
    return fail(kOp, fmt::format("x {} must be f32, bf16, f16 or i32", describe(x)));
  }
  if (!quantized_dtype(in[2].dtype)) {
    return fail(kOp, fmt::format("zero point {} must be i8 or u8 (it gives the result's dtype)", describe(in[2])));
  }
  RETURN_IF_ERROR(check_quant_params(kOp, x, in[1], in[2]));
  *result = TensorType{in[2].dtype, x.shape};
  return std::nullopt;
}

// dequantize_linear(x, scale, zero_point) -> scale's dtype, x's shape.
Check infer_dequantize_linear(std::span<const TensorType> in, std::span<AttrValue>, TensorType* result) {
  constexpr std::string_view kOp = "dequantize_linear";
  const TensorType& x = in[0];
  if (!quantized_dtype(x.dtype) && x.dtype != DType::kI32) {
    return fail(kOp, fmt::format("x {} must be i8, u8 or i32", describe(x)));
  }
  if (in[2].dtype != x.dtype) {
    return fail(kOp, fmt::format("zero point {} must have x's dtype {}", describe(in[2]), dtype_name(x.dtype)));
  }
  RETURN_IF_ERROR(check_quant_params(kOp, x, in[1], in[2]));
  *result = TensorType{in[1].dtype, x.shape};
  return std::nullopt;
}

// The instances the registry table names.
template TRACECACHE_INFER_RULE(infer_resize_grad<OpKind::kResizeLinear2dGrad, OpKind::kResizeLinear2d>);
template TRACECACHE_INFER_RULE(infer_resize_grad<OpKind::kResizeNearest2dGrad, OpKind::kResizeNearest2d>);
template TRACECACHE_INFER_RULE(infer_topk<OpKind::kTopk>);
template TRACECACHE_INFER_RULE(infer_topk<OpKind::kTopkIndices>);

}  // namespace tracecache::infer
