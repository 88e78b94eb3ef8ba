// Inference rules of the nn layers (capture/trace/nn.h) and the creation ops (full, arange,
// uniform, normal) (their registry rows: ops.cc; the contract: InferFn in ops.h).
#include "capture/ops/infer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "capture/ops/attr_views.h"
#include "capture/ops/infer_checks.h"

namespace tracecache::infer {

// ---- nn layers (capture/trace/nn.h) -------------------------------------------------------------

Check infer_conv2d(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  const TensorType& x = in[0];
  const TensorType& w = in[1];
  RETURN_IF_ERROR(require_nchw("conv2d", x));
  RETURN_IF_ERROR(require_f32("conv2d", "weight", w));
  if (w.shape.rank() != 4) {
    return fail("conv2d", fmt::format("weight {} must have rank 4 (out channels, in channels / groups, "
                                      "kernel height, kernel width)", describe(w)));
  }
  Conv2dAttrs a(attrs);
  RETURN_IF_ERROR(normalize_pair("conv2d", "stride", a.stride(), 1));
  RETURN_IF_ERROR(normalize_pair("conv2d", "padding", a.padding(), 0));
  RETURN_IF_ERROR(normalize_pair("conv2d", "dilation", a.dilation(), 1));
  const IntList& stride = a.stride();
  const IntList& padding = a.padding();
  const IntList& dilation = a.dilation();
  const int64_t groups = a.groups();
  const int64_t c = x.shape[1], o = w.shape[0];
  if (groups < 1) return fail("conv2d", fmt::format("groups must be >= 1, got {}", groups));
  if (c % groups != 0) {
    return fail("conv2d", fmt::format("input {} has {} channels, not divisible by groups={}", describe(x),
                                      c, groups));
  }
  if (w.shape[1] != c / groups) {
    return fail("conv2d", fmt::format("weight {} must have {} input channels in dim 1 (input {} has {} "
                                      "channels, groups={})", describe(w), c / groups, describe(x), c, groups));
  }
  if (o % groups != 0) {
    return fail("conv2d", fmt::format("weight {} has {} output channels, not divisible by groups={}",
                                      describe(w), o, groups));
  }
  if (w.shape[2] < 1 || w.shape[3] < 1 || w.shape[2] > kMaxWindowAttr || w.shape[3] > kMaxWindowAttr) {
    return fail("conv2d", fmt::format("weight {} has an empty or oversized kernel", describe(w)));
  }
  if (in.size() == 3) {
    const TensorType& b = in[2];
    RETURN_IF_ERROR(require_f32("conv2d", "bias", b));
    if (b.shape.rank() != 1 || b.shape[0] != o) {
      return fail("conv2d", fmt::format("bias {} must be [{}] (one per output channel of weight {})",
                                        describe(b), o, describe(w)));
    }
  }
  Shape out{x.shape[0], o, 0, 0};
  for (int d = 0; d < 2; ++d) {
    const int64_t padded = x.shape[2 + d] + 2 * padding[d];
    const int64_t extent = dilation[d] * (w.shape[2 + d] - 1) + 1;
    if (padded < extent) {
      return fail("conv2d", fmt::format("kernel {}x{} (dilation {}) is larger than the input {} padded "
                                        "by {}", w.shape[2], w.shape[3], dilation.to_string(),
                                        describe(x), padding.to_string()));
    }
    out[2 + d] = (padded - extent) / stride[d] + 1;
  }
  *result = TensorType{DType::kF32, out};
  return std::nullopt;
}

Check infer_max_pool2d(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  MaxPool2dAttrs a(attrs);
  Shape out;
  RETURN_IF_ERROR(pool_shape("max_pool2d", in[0], a.kernel(), a.stride(), a.padding(),
                             &a.dilation(), a.ceil_mode(), &out));
  *result = TensorType{DType::kF32, out};
  return std::nullopt;
}

Check infer_avg_pool2d(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  AvgPool2dAttrs a(attrs);
  Shape out;
  RETURN_IF_ERROR(pool_shape("avg_pool2d", in[0], a.kernel(), a.stride(), a.padding(), nullptr,
                             a.ceil_mode(), &out));
  *result = TensorType{DType::kF32, out};
  return std::nullopt;
}

Check infer_adaptive_avg_pool2d(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  const TensorType& x = in[0];
  RETURN_IF_ERROR(require_nchw("adaptive_avg_pool2d", x));
  IntList& size = AdaptiveAvgPool2dAttrs(attrs).output_size();
  RETURN_IF_ERROR(normalize_pair("adaptive_avg_pool2d", "output_size", size, 1));
  if (x.shape[2] == 0 || x.shape[3] == 0) {
    return fail("adaptive_avg_pool2d", fmt::format("input {} has an empty spatial dim", describe(x)));
  }
  // The kernels compute window bounds as i * H / output_size.
  if (size[0] > kMaxElements / x.shape[2] || size[1] > kMaxElements / x.shape[3]) {
    return fail("adaptive_avg_pool2d", fmt::format("output_size {} is too large for the input {}",
                                                   size.to_string(), describe(x)));
  }
  *result = TensorType{DType::kF32, Shape{x.shape[0], x.shape[1], size[0], size[1]}};
  return std::nullopt;
}

Check infer_linear(std::span<const TensorType> in, std::span<AttrValue>, TensorType* result) {
  const TensorType& x = in[0];
  const TensorType& w = in[1];
  RETURN_IF_ERROR(require_f32("linear", "input", x));
  RETURN_IF_ERROR(require_f32("linear", "weight", w));
  if (x.shape.rank() < 1 || w.shape.rank() != 2) {
    return fail("linear", fmt::format("input {} needs rank >= 1 and weight {} rank 2 (out, in)",
                                      describe(x), describe(w)));
  }
  if (x.shape[x.shape.rank() - 1] != w.shape[1]) {
    return fail("linear", fmt::format("input {} has {} features but weight {} expects {}", describe(x),
                                      x.shape[x.shape.rank() - 1], describe(w), w.shape[1]));
  }
  if (in.size() == 3) {
    const TensorType& b = in[2];
    RETURN_IF_ERROR(require_f32("linear", "bias", b));
    if (b.shape.rank() != 1 || b.shape[0] != w.shape[0]) {
      return fail("linear", fmt::format("bias {} must be [{}] (one per output feature of weight {})",
                                        describe(b), w.shape[0], describe(w)));
    }
  }
  Shape out = x.shape;
  out[out.rank() - 1] = w.shape[0];
  *result = TensorType{DType::kF32, out};
  return std::nullopt;
}

Check infer_flatten(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  const Shape& s = in[0].shape;
  // As torch.flatten, a scalar flattens to [1] and takes dims as if it had rank 1.
  const int rank = std::max(s.rank(), 1);
  FlattenAttrs a(attrs);
  int64_t start = a.start_dim(), end = a.end_dim();
  RETURN_IF_ERROR(normalize_axis("flatten", start, rank));
  RETURN_IF_ERROR(normalize_axis("flatten", end, rank));
  if (start > end) {
    return fail("flatten", fmt::format("start_dim {} comes after end_dim {} for {}", a.start_dim(),
                                       a.end_dim(), describe(in[0])));
  }
  a.start_dim() = start;
  a.end_dim() = end;
  Shape out;
  int64_t merged = 1;
  for (int d = 0; d < s.rank(); ++d) {
    if (d < start || d > end) {
      out.push_back(s[d]);
      continue;
    }
    merged *= s[d];
    if (d == end) out.push_back(merged);
  }
  if (s.rank() == 0) out.push_back(1);
  *result = TensorType{in[0].dtype, out};
  return std::nullopt;
}

Check infer_pad(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  const Shape& s = in[0].shape;
  IntList& pads = PadAttrs(attrs).pads();
  if (pads.size() % 2 != 0 || pads.size() > 2 * s.rank()) {
    return fail("pad", fmt::format("pads {} must have an even number of entries, at most 2 x rank of {}",
                                   pads.to_string(), describe(in[0])));
  }
  Shape out = s;
  for (int k = 0; k < pads.size(); ++k) {
    const int64_t p = pads[k];
    if (p < -kMaxElements || p > kMaxElements) {
      return fail("pad", fmt::format("pads {} has an out-of-range entry", pads.to_string()));
    }
    const int d = s.rank() - 1 - k / 2;
    out[d] += p;
  }
  // Normal form: no trailing (0, 0) pairs (they pad the leading dims by nothing).
  while (pads.size() >= 2 && pads[pads.size() - 1] == 0 && pads[pads.size() - 2] == 0) {
    pads.erase(pads.size() - 1);
    pads.erase(pads.size() - 1);
  }
  for (int d = 0; d < s.rank(); ++d) {
    if (out[d] < 0) {
      return fail("pad", fmt::format("pads {} crop dim {} of {} to a negative size", pads.to_string(), d,
                                     describe(in[0])));
    }
  }
  *result = TensorType{in[0].dtype, out};
  return std::nullopt;
}

Check infer_dropout(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  const double p = DropoutAttrs(attrs).p();
  if (!(p >= 0 && p <= 1)) {
    return fail("dropout", fmt::format("p must be in [0, 1], got {}", p));
  }
  *result = in[0];
  return std::nullopt;
}

Check infer_embedding(std::span<const TensorType> in, std::span<AttrValue>, TensorType* result) {
  const TensorType& w = in[0];
  const TensorType& idx = in[1];
  if (w.shape.rank() != 2) {
    return fail("embedding", fmt::format("weight {} must have rank 2 (rows, dim)", describe(w)));
  }
  RETURN_IF_ERROR(require_index("embedding", idx));
  if (idx.shape.rank() >= kMaxRank) {
    return fail("embedding", fmt::format("index {} has rank {}; the result would exceed rank {}",
                                         describe(idx), idx.shape.rank(), kMaxRank));
  }
  if (w.shape[0] == 0 && idx.shape.numel() > 0) {
    return fail("embedding", fmt::format("weight {} has no rows to look up", describe(w)));
  }
  Shape out = idx.shape;
  out.push_back(w.shape[1]);
  *result = TensorType{w.dtype, out};
  return std::nullopt;
}

Check infer_gather(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  const TensorType& x = in[0];
  const TensorType& idx = in[1];
  const int rank = x.shape.rank();
  int64_t& axis = AxisAttrs(attrs).axis();
  RETURN_IF_ERROR(normalize_axis("gather", axis, rank));
  RETURN_IF_ERROR(require_index("gather", idx));
  bool fits = idx.shape.rank() == rank;
  for (int d = 0; fits && d < rank; ++d) fits = d == axis || idx.shape[d] <= x.shape[d];
  if (!fits) {
    return fail("gather", fmt::format("index {} must have the rank of the input {} and no dim larger "
                                      "than the input's outside axis {}", describe(idx), describe(x), axis));
  }
  if (x.shape[static_cast<int>(axis)] == 0 && idx.shape.numel() > 0) {
    return fail("gather", fmt::format("input {} is empty along axis {}", describe(x), axis));
  }
  *result = TensorType{x.dtype, idx.shape};
  return std::nullopt;
}

Check infer_index_select(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  const TensorType& x = in[0];
  const TensorType& idx = in[1];
  int64_t& axis = AxisAttrs(attrs).axis();
  RETURN_IF_ERROR(normalize_axis("index_select", axis, x.shape.rank()));
  RETURN_IF_ERROR(require_index("index_select", idx));
  if (idx.shape.rank() != 1) {
    return fail("index_select", fmt::format("index {} must have rank 1", describe(idx)));
  }
  if (x.shape[static_cast<int>(axis)] == 0 && idx.shape[0] > 0) {
    return fail("index_select", fmt::format("input {} is empty along axis {}", describe(x), axis));
  }
  Shape out = x.shape;
  out[static_cast<int>(axis)] = idx.shape[0];
  *result = TensorType{x.dtype, out};
  return std::nullopt;
}

Check infer_full(std::span<const TensorType>, std::span<AttrValue> attrs, TensorType* result) {
  FullAttrs a(attrs);
  RETURN_IF_ERROR(check_shape_attr("full", a.shape()));
  *result = TensorType{a.dtype(), Shape(a.shape())};
  return std::nullopt;
}

Check infer_arange(std::span<const TensorType>, std::span<AttrValue> attrs, TensorType* result) {
  ArangeAttrs a(attrs);
  double start = a.start(), end = a.end(), step = a.step();
  if (step == 0 || !std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step)) {
    return fail("arange", fmt::format("start {}, end {}, step {} do not describe a finite range", start, end, step));
  }
  double n = std::ceil((end - start) / step);
  if (n > 1e12) return fail("arange", fmt::format("range of {} elements is too large", n));
  Shape s;
  s.push_back(n > 0 ? static_cast<int64_t>(n) : 0);
  *result = TensorType{a.dtype(), s};
  return std::nullopt;
}

Check infer_uniform(std::span<const TensorType>, std::span<AttrValue> attrs, TensorType* result) {
  UniformAttrs a(attrs);
  RETURN_IF_ERROR(check_shape_attr("uniform", a.shape()));
  if (!std::isfinite(a.low()) || !std::isfinite(a.high()) || !(a.low() <= a.high())) {
    return fail("uniform", fmt::format("low {} and high {} must be finite with low <= high", a.low(),
                                       a.high()));
  }
  if (a.dtype() == DType::kBool) return fail("uniform", "dtype bool is not supported");
  *result = TensorType{a.dtype(), Shape(a.shape())};
  return std::nullopt;
}

Check infer_normal(std::span<const TensorType>, std::span<AttrValue> attrs, TensorType* result) {
  NormalAttrs a(attrs);
  RETURN_IF_ERROR(check_shape_attr("normal", a.shape()));
  if (!(a.stddev() >= 0)) return fail("normal", fmt::format("std must be >= 0, got {}", a.stddev()));
  if (!is_floating(a.dtype())) {
    return fail("normal", fmt::format("dtype {} is not floating", dtype_name(a.dtype())));
  }
  *result = TensorType{a.dtype(), Shape(a.shape())};
  return std::nullopt;
}

}  // namespace tracecache::infer
