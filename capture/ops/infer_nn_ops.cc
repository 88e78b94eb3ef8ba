// Inference rules of the nn ops, the lookups' gradients, the training ops and the random
// numbers (their registry rows: ops.cc; the contract: InferFn in ops.h).
#include "capture/ops/infer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "capture/ops/attr_views.h"
#include "capture/ops/infer_checks.h"
#include "capture/ops/random.h"

namespace tracecache::infer {

// ---- nn ops (capture/trace/nn.h) -----------------------------------------------------------------

Check infer_clamp(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  RETURN_IF_ERROR(reject_bool("clamp", in[0]));
  ClampAttrs a(attrs);
  const double lo = a.min(), hi = a.max();
  if (!(lo <= hi)) {
    return fail("clamp", fmt::format("min {} must be <= max {} (and neither NaN)", lo, hi));
  }
  // An integer clamp keeps the integers in [min, max]; there must be one.
  if (!is_floating(in[0].dtype) && std::ceil(lo) > std::floor(hi)) {
    return fail("clamp", fmt::format("no integer lies in [min {}, max {}] for the {} operand {}", lo, hi,
                                     dtype_name(in[0].dtype), describe(in[0])));
  }
  *result = in[0];
  return std::nullopt;
}

Check check_eps(std::string_view op, double eps) {
  if (!(eps >= 0) || !std::isfinite(eps)) {
    return fail(op, fmt::format("eps must be finite and >= 0, got {}", eps));
  }
  return std::nullopt;
}

Check infer_batch_norm(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  const TensorType& x = in[0];
  RETURN_IF_ERROR(require_f32("batch_norm", "input", x));
  if (x.shape.rank() < 2) {
    return fail("batch_norm", fmt::format("input {} must have rank >= 2 ([N, C, ...])", describe(x)));
  }
  const int64_t channels = x.shape[1];
  static constexpr std::string_view kRoles[] = {"running_mean", "running_var", "weight", "bias"};
  for (size_t k = 1; k < 5; ++k) {
    RETURN_IF_ERROR(require_f32("batch_norm", kRoles[k - 1], in[k]));
    if (!(in[k].shape == Shape{channels})) {
      return fail("batch_norm", fmt::format("{} {} must have shape [{}] (the channels of input {})",
                                            kRoles[k - 1], describe(in[k]), channels, describe(x)));
    }
  }
  RETURN_IF_ERROR(check_eps("batch_norm", BatchNormAttrs(attrs).eps()));
  *result = x;
  return std::nullopt;
}

Check infer_layer_norm(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  const TensorType& x = in[0];
  RETURN_IF_ERROR(require_f32("layer_norm", "input", x));
  LayerNormAttrs a(attrs);
  const int rank = x.shape.rank();
  const int64_t dims = a.normalized_dims();
  if (dims < 1 || dims > rank) {
    return fail("layer_norm", fmt::format("normalized_dims {} must be in [1, {}] for input {}", dims,
                                          rank, describe(x)));
  }
  Shape normalized(IntList(std::span(x.shape.begin() + (rank - dims), static_cast<size_t>(dims))));
  static constexpr std::string_view kRoles[] = {"weight", "bias"};
  for (size_t k = 1; k < in.size(); ++k) {
    RETURN_IF_ERROR(require_f32("layer_norm", kRoles[k - 1], in[k]));
    if (!(in[k].shape == normalized)) {
      return fail("layer_norm", fmt::format("{} {} must have the normalized shape {} of input {}",
                                            kRoles[k - 1], describe(in[k]), normalized.to_string(),
                                            describe(x)));
    }
  }
  RETURN_IF_ERROR(check_eps("layer_norm", a.eps()));
  *result = x;
  return std::nullopt;
}

template <OpKind K>
Check infer_softmax(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  std::string_view name = op_info(K).name;
  RETURN_IF_ERROR(require_f32(name, "input", in[0]));
  if (in[0].shape.rank() == 0) return fail(name, fmt::format("input {} must have rank >= 1", describe(in[0])));
  RETURN_IF_ERROR(normalize_axis(name, AxisAttrs(attrs).axis(), in[0].shape.rank()));
  *result = in[0];
  return std::nullopt;
}

Check infer_attention(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  constexpr std::string_view kOp = "scaled_dot_product_attention";
  const TensorType &q = in[0], &k = in[1], &v = in[2];
  RETURN_IF_ERROR(require_f32(kOp, "query", q));
  RETURN_IF_ERROR(require_f32(kOp, "key", k));
  RETURN_IF_ERROR(require_f32(kOp, "value", v));
  const int rank = q.shape.rank();
  if (rank < 2 || k.shape.rank() != rank || v.shape.rank() != rank) {
    return fail(kOp, fmt::format("query {}, key {} and value {} must have the same rank >= 2",
                                 describe(q), describe(k), describe(v)));
  }
  bool batch_equal = true;
  for (int d = 0; d < rank - 2; ++d) {
    batch_equal = batch_equal && q.shape[d] == k.shape[d] && q.shape[d] == v.shape[d];
  }
  if (!batch_equal) {
    return fail(kOp, fmt::format("leading dims of query {}, key {} and value {} must be equal",
                                 describe(q), describe(k), describe(v)));
  }
  const int64_t e = q.shape[rank - 1];
  const int64_t lk = k.shape[rank - 2], ev = v.shape[rank - 1];
  if (k.shape[rank - 1] != e) {
    return fail(kOp, fmt::format("key {} must have the embedding dim {} of query {}", describe(k), e,
                                 describe(q)));
  }
  if (v.shape[rank - 2] != lk) {
    return fail(kOp, fmt::format("value {} must have the {} positions of key {}", describe(v), lk,
                                 describe(k)));
  }
  Shape out = q.shape;
  out[rank - 1] = ev;
  if (in.size() == 4) {
    const TensorType& mask = in[3];
    RETURN_IF_ERROR(require_f32(kOp, "mask", mask));
    Shape scores = q.shape;
    scores[rank - 1] = lk;
    Shape b;
    if (!broadcast_shapes(mask.shape, scores, &b) || !(b == scores)) {
      return fail(kOp, fmt::format("mask {} does not broadcast to the scores' shape {}", describe(mask),
                                   scores.to_string()));
    }
  }
  const double scale = AttentionAttrs(attrs).scale();
  if (!std::isfinite(scale)) {
    return fail(kOp, fmt::format("scale must be finite (0 means 1/sqrt(E)), got {}", scale));
  }
  *result = TensorType{DType::kF32, out};
  return std::nullopt;
}


// ---- gradients of the lookups ----------------------------------------------------------------

Check infer_scatter_add(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  constexpr std::string_view kOp = "scatter_add";
  const TensorType &x = in[0], &idx = in[1], &src = in[2];
  RETURN_IF_ERROR(require_f32(kOp, "input", x));
  RETURN_IF_ERROR(require_index(kOp, idx));
  RETURN_IF_ERROR(require_f32(kOp, "src", src));
  RETURN_IF_ERROR(check_scatter(kOp, x, idx, src, AxisAttrs(attrs).axis()));
  *result = x;
  return std::nullopt;
}

// ---- training ops ----------------------------------------------------------------------------

Check infer_dropout_mask(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  DropoutMaskAttrs a(attrs);
  const TensorType& seed = in[0];
  if (seed.shape.rank() != 0 || (seed.dtype != DType::kI32 && seed.dtype != DType::kI64)) {
    return fail("dropout_mask", fmt::format("the seed must be an i32 or i64 scalar (rank 0), got {}", describe(seed)));
  }
  if (!(a.p() >= 0 && a.p() <= 1)) return fail("dropout_mask", fmt::format("p must be in [0, 1], got {}", a.p()));
  RETURN_IF_ERROR(check_shape_attr("dropout_mask", a.shape()));
  *result = TensorType{DType::kF32, Shape(a.shape())};
  return std::nullopt;
}

// ---- random numbers from a seed tensor ---------------------------------------------------------

// rand_uniform and rand_normal: the seed is a tensor (a graph input, so a new seed never
// recompiles) holding (seed, offset); `stream` separates the draws of one seed and offset.
template <OpKind K>
Check infer_rand(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  const std::string_view op = op_info(K).name;
  const RandAttrs a(attrs);
  const TensorType& seed = in[0];
  if (seed.dtype != DType::kI64 || seed.shape != Shape{2}) {
    return fail(op, fmt::format("the seed must be an i64 tensor of shape [2] holding (seed, offset), got {}",
                                describe(seed)));
  }
  if (a.stream() < 0 || a.stream() > kMaxRandStream) {
    return fail(op, fmt::format("stream must be in [0, {}], got {}", kMaxRandStream, a.stream()));
  }
  RETURN_IF_ERROR(check_shape_attr(op, a.shape()));
  *result = TensorType{DType::kF32, Shape(a.shape())};
  return std::nullopt;
}

// The instances the registry table names.
template TRACECACHE_INFER_RULE(infer_softmax<OpKind::kLogSoftmax>);
template TRACECACHE_INFER_RULE(infer_softmax<OpKind::kSoftmax>);
template TRACECACHE_INFER_RULE(infer_rand<OpKind::kRandNormal>);
template TRACECACHE_INFER_RULE(infer_rand<OpKind::kRandUniform>);

}  // namespace tracecache::infer
