// The op registry table and the inference rules.
#include "capture/ops/ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>

#include "capture/core/status.h"
#include "capture/ops/attr_views.h"
#include "capture/ops/grad_elementwise.h"
#include "capture/ops/grad_nn_ops.h"
#include "capture/ops/grad_train.h"
#include "capture/ops/grad_nn_layers.h"
#include "capture/ops/grad_onnx.h"
#include "capture/ops/random.h"
#include "capture/ops/reference_kernels.h"
#include "capture/ops/resize.h"

namespace tracecache {

namespace {

// The error of every inference rule: names the op, then what is wrong.
// Cold: error paths stay out of the checks the record hot path inlines.
[[gnu::cold]] Status fail(std::string_view op, const std::string& msg) {
  return invalid_argument(fmt::format("op '{}': {}", op, msg));
}

// The outcome of a shared check or an inference rule: nullopt if it passed, else its error.
using Check = InferError;

// Returns the error of a failed Check from the enclosing rule or check.
#define RETURN_IF_ERROR(expr)                             \
  do {                                                    \
    if (Check check_ = (expr)) return std::move(*check_); \
  } while (false)

std::string describe(const TensorType& t) { return type_to_string(t); }

// ---- attribute tables --------------------------------------------------------------------

AttrValue none_ints() { return AttrValue::of_ints({}); }

const AttrSpec kParameterAttrs[] = {{"index", AttrKind::kInt, true, AttrValue::of_int(0)}};
const AttrSpec kCastAttrs[] = {{"dtype", AttrKind::kDType, true, AttrValue::of_dtype(DType::kF32)}};
const AttrSpec kReduceAttrs[] = {{"axes", AttrKind::kInts, false, none_ints()},
                                 {"keepdim", AttrKind::kBool, false, AttrValue::of_bool(false)}};
const AttrSpec kArgmaxAttrs[] = {{"axis", AttrKind::kInt, true, AttrValue::of_int(0)},
                                 {"keepdim", AttrKind::kBool, false, AttrValue::of_bool(false)}};
const AttrSpec kArgminAttrs[] = {{"axis", AttrKind::kInt, true, AttrValue::of_int(0)},
                                 {"keepdim", AttrKind::kBool, false, AttrValue::of_bool(false)},
                                 {"select_last_index", AttrKind::kBool, false, AttrValue::of_bool(false)}};
const AttrSpec kShapeAttrs[] = {{"shape", AttrKind::kInts, true, none_ints()}};
const AttrSpec kPermuteAttrs[] = {{"perm", AttrKind::kInts, true, none_ints()}};
const AttrSpec kTransposeAttrs[] = {{"dim0", AttrKind::kInt, true, AttrValue::of_int(0)},
                                    {"dim1", AttrKind::kInt, true, AttrValue::of_int(0)}};
const AttrSpec kConcatAttrs[] = {{"axis", AttrKind::kInt, true, AttrValue::of_int(0)}};
const AttrSpec kSliceAttrs[] = {
    {"axis", AttrKind::kInt, true, AttrValue::of_int(0)},
    {"start", AttrKind::kInt, false, AttrValue::of_int(0)},
    {"end", AttrKind::kInt, false, AttrValue::of_int(std::numeric_limits<int64_t>::max())},
    {"step", AttrKind::kInt, false, AttrValue::of_int(1)}};
const AttrSpec kFullAttrs[] = {{"shape", AttrKind::kInts, true, none_ints()},
                               {"value", AttrKind::kFloat, true, AttrValue::of_float(0)},
                               {"dtype", AttrKind::kDType, false, AttrValue::of_dtype(DType::kF32)}};
const AttrSpec kArangeAttrs[] = {{"start", AttrKind::kFloat, false, AttrValue::of_float(0)},
                                 {"end", AttrKind::kFloat, true, AttrValue::of_float(0)},
                                 {"step", AttrKind::kFloat, false, AttrValue::of_float(1)},
                                 {"dtype", AttrKind::kDType, false, AttrValue::of_dtype(DType::kI64)}};
const AttrSpec kUniformAttrs[] = {{"shape", AttrKind::kInts, true, none_ints()},
                                  {"low", AttrKind::kFloat, false, AttrValue::of_float(0)},
                                  {"high", AttrKind::kFloat, false, AttrValue::of_float(1)},
                                  {"seed", AttrKind::kInt, true, AttrValue::of_int(0)},
                                  {"dtype", AttrKind::kDType, false, AttrValue::of_dtype(DType::kF32)}};
const AttrSpec kNormalAttrs[] = {{"shape", AttrKind::kInts, true, none_ints()},
                                 {"mean", AttrKind::kFloat, false, AttrValue::of_float(0)},
                                 {"std", AttrKind::kFloat, false, AttrValue::of_float(1)},
                                 {"seed", AttrKind::kInt, true, AttrValue::of_int(0)},
                                 {"dtype", AttrKind::kDType, false, AttrValue::of_dtype(DType::kF32)}};

const AttrSpec kGeluAttrs[] = {{"tanh", AttrKind::kBool, false, AttrValue::of_bool(false)}};
const AttrSpec kClampAttrs[] = {{"min", AttrKind::kFloat, true, AttrValue::of_float(0)},
                                {"max", AttrKind::kFloat, true, AttrValue::of_float(0)}};
const AttrSpec kBatchNormAttrs[] = {{"eps", AttrKind::kFloat, false, AttrValue::of_float(1e-5)}};
const AttrSpec kLayerNormAttrs[] = {{"normalized_dims", AttrKind::kInt, true, AttrValue::of_int(1)},
                                    {"eps", AttrKind::kFloat, false, AttrValue::of_float(1e-5)}};
const AttrSpec kSoftmaxAttrs[] = {{"axis", AttrKind::kInt, true, AttrValue::of_int(0)}};
const AttrSpec kAttentionAttrs[] = {{"causal", AttrKind::kBool, false, AttrValue::of_bool(false)},
                                    {"scale", AttrKind::kFloat, false, AttrValue::of_float(0)}};
// nn layers. Pairs are {height, width}; a one-entry list means both (normalized to two).
AttrValue pair_of(int64_t v) { return AttrValue::of_ints({v, v}); }
const AttrSpec kConv2dAttrs[] = {{"stride", AttrKind::kInts, false, pair_of(1)},
                                 {"padding", AttrKind::kInts, false, pair_of(0)},
                                 {"dilation", AttrKind::kInts, false, pair_of(1)},
                                 {"groups", AttrKind::kInt, false, AttrValue::of_int(1)}};
const AttrSpec kMaxPool2dAttrs[] = {{"kernel", AttrKind::kInts, true, none_ints()},
                                    {"stride", AttrKind::kInts, false, none_ints()},
                                    {"padding", AttrKind::kInts, false, pair_of(0)},
                                    {"dilation", AttrKind::kInts, false, pair_of(1)},
                                    {"ceil_mode", AttrKind::kBool, false, AttrValue::of_bool(false)}};
const AttrSpec kAvgPool2dAttrs[] = {{"kernel", AttrKind::kInts, true, none_ints()},
                                    {"stride", AttrKind::kInts, false, none_ints()},
                                    {"padding", AttrKind::kInts, false, pair_of(0)},
                                    {"ceil_mode", AttrKind::kBool, false, AttrValue::of_bool(false)},
                                    {"count_include_pad", AttrKind::kBool, false, AttrValue::of_bool(true)}};
const AttrSpec kAdaptiveAvgPool2dAttrs[] = {{"output_size", AttrKind::kInts, true, none_ints()}};
const AttrSpec kFlattenAttrs[] = {{"start_dim", AttrKind::kInt, false, AttrValue::of_int(0)},
                                  {"end_dim", AttrKind::kInt, false, AttrValue::of_int(-1)}};
const AttrSpec kPadAttrs[] = {{"pads", AttrKind::kInts, true, none_ints()},
                              {"value", AttrKind::kFloat, false, AttrValue::of_float(0)}};
const AttrSpec kDropoutAttrs[] = {{"p", AttrKind::kFloat, true, AttrValue::of_float(0.5)}};
const AttrSpec kDropoutMaskAttrs[] = {{"shape", AttrKind::kInts, true, none_ints()},
                                      {"p", AttrKind::kFloat, true, AttrValue::of_float(0.5)},
                                      {"salt", AttrKind::kInt, false, AttrValue::of_int(0)}};
const AttrSpec kIndexAxisAttrs[] = {{"axis", AttrKind::kInt, true, AttrValue::of_int(0)}};
// gradients of the nn layers: the forward op's attributes plus the size the gradient has.
const AttrSpec kConv2dInputGradAttrs[] = {{"stride", AttrKind::kInts, false, pair_of(1)},
                                          {"padding", AttrKind::kInts, false, pair_of(0)},
                                          {"dilation", AttrKind::kInts, false, pair_of(1)},
                                          {"groups", AttrKind::kInt, false, AttrValue::of_int(1)},
                                          {"input_size", AttrKind::kInts, true, none_ints()}};
const AttrSpec kConv2dWeightGradAttrs[] = {{"stride", AttrKind::kInts, false, pair_of(1)},
                                           {"padding", AttrKind::kInts, false, pair_of(0)},
                                           {"dilation", AttrKind::kInts, false, pair_of(1)},
                                           {"groups", AttrKind::kInt, false, AttrValue::of_int(1)},
                                           {"kernel", AttrKind::kInts, true, none_ints()}};
const AttrSpec kAvgPool2dGradAttrs[] = {{"kernel", AttrKind::kInts, true, none_ints()},
                                        {"stride", AttrKind::kInts, false, none_ints()},
                                        {"padding", AttrKind::kInts, false, pair_of(0)},
                                        {"count_include_pad", AttrKind::kBool, false, AttrValue::of_bool(true)},
                                        {"input_size", AttrKind::kInts, true, none_ints()}};
const AttrSpec kConvTranspose2dAttrs[] = {{"stride", AttrKind::kInts, false, pair_of(1)},
                                          {"padding", AttrKind::kInts, false, pair_of(0)},
                                          {"output_padding", AttrKind::kInts, false, pair_of(0)},
                                          {"dilation", AttrKind::kInts, false, pair_of(1)},
                                          {"groups", AttrKind::kInt, false, AttrValue::of_int(1)}};
const AttrSpec kResizeNearest2dAttrs[] = {{"size", AttrKind::kInts, true, none_ints()},
                                          {"scale_h", AttrKind::kFloat, false, AttrValue::of_float(0)},
                                          {"scale_w", AttrKind::kFloat, false, AttrValue::of_float(0)},
                                          {"coordinate_transformation_mode", AttrKind::kInt, false, AttrValue::of_int(0)},
                                          {"nearest_mode", AttrKind::kInt, false, AttrValue::of_int(0)}};
const AttrSpec kResizeLinear2dAttrs[] = {{"size", AttrKind::kInts, true, none_ints()},
                                         {"scale_h", AttrKind::kFloat, false, AttrValue::of_float(0)},
                                         {"scale_w", AttrKind::kFloat, false, AttrValue::of_float(0)},
                                         {"coordinate_transformation_mode", AttrKind::kInt, false, AttrValue::of_int(0)}};
const AttrSpec kTopkAttrs[] = {{"k", AttrKind::kInt, true, AttrValue::of_int(0)},
                               {"axis", AttrKind::kInt, false, AttrValue::of_int(-1)},
                               {"largest", AttrKind::kBool, false, AttrValue::of_bool(true)}};
const AttrSpec kScatterElementsAttrs[] = {{"axis", AttrKind::kInt, false, AttrValue::of_int(0)},
                                          {"reduction", AttrKind::kInt, false, AttrValue::of_int(0)}};
const AttrSpec kGatherNdAttrs[] = {{"batch_dims", AttrKind::kInt, false, AttrValue::of_int(0)}};
const AttrSpec kResizeNearest2dGradAttrs[] = {{"input_size", AttrKind::kInts, true, none_ints()},
                                              {"scale_h", AttrKind::kFloat, false, AttrValue::of_float(0)},
                                              {"scale_w", AttrKind::kFloat, false, AttrValue::of_float(0)},
                                              {"coordinate_transformation_mode", AttrKind::kInt, false, AttrValue::of_int(0)},
                                              {"nearest_mode", AttrKind::kInt, false, AttrValue::of_int(0)}};
const AttrSpec kResizeLinear2dGradAttrs[] = {{"input_size", AttrKind::kInts, true, none_ints()},
                                             {"scale_h", AttrKind::kFloat, false, AttrValue::of_float(0)},
                                             {"scale_w", AttrKind::kFloat, false, AttrValue::of_float(0)},
                                             {"coordinate_transformation_mode", AttrKind::kInt, false, AttrValue::of_int(0)}};
const AttrSpec kAdaptiveAvgPool2dGradAttrs[] = {{"input_size", AttrKind::kInts, true, none_ints()}};
const AttrSpec kRandAttrs[] = {{"shape", AttrKind::kInts, true, none_ints()},
                               {"stream", AttrKind::kInt, false, AttrValue::of_int(0)}};

// ---- shared checks ------------------------------------------------------------------------
// The small ones the record hot path runs on every op are forced inline (with `fail` cold, the
// passing path is a compare and a flag).

// Makes `axis` non-negative for a tensor of rank `rank`, in place; fails if out of range.
[[gnu::always_inline]] inline Check normalize_axis(std::string_view op, int64_t& axis, int rank) {
  if (axis < -rank || axis >= rank) {
    return fail(op, fmt::format("axis {} is out of range for a tensor of rank {}", axis, rank));
  }
  if (axis < 0) axis += rank;
  return std::nullopt;
}

// Sets `*product` to the product of `dims`, failing if it exceeds kMaxElements (so no later
// size arithmetic can overflow): the same check as every shape from outside (shape.h).
[[gnu::always_inline]] inline Check checked_product(std::string_view op, const IntList& dims,
                                                    int64_t* product = nullptr) {
  Result<int64_t> n = checked_numel(dims.span());
  if (!n.is_ok()) return fail(op, n.status().message());
  if (product) *product = *n;
  return std::nullopt;
}

Check check_shape_attr(std::string_view op, const IntList& shape) {
  for (int64_t d : shape) {
    if (d < 0) return fail(op, fmt::format("shape {} has a negative dim", shape.to_string()));
  }
  return checked_product(op, shape);
}

[[gnu::always_inline]] inline Check broadcast2(std::string_view op, const TensorType& a,
                                               const TensorType& b, Shape* out) {
  if (!broadcast_shapes(a.shape, b.shape, out)) {
    return fail(op, fmt::format("shapes {} and {} are not broadcastable", describe(a), describe(b)));
  }
  return std::nullopt;
}

[[gnu::always_inline]] inline Check reject_bool(std::string_view op, const TensorType& t) {
  if (t.dtype == DType::kBool) {
    return fail(op, fmt::format("operand {} is bool; cast it to a numeric dtype first", describe(t)));
  }
  return std::nullopt;
}

// ---- inference rules ----------------------------------------------------------------------

Check infer_parameter(std::span<const TensorType>, std::span<AttrValue>, TensorType*) {
  // Parameters are created with their type directly (Graph::add_parameter); never inferred.
  return fail("parameter", "a parameter cannot be recorded as an op");
}

template <OpKind K>
Check infer_unary_same(std::span<const TensorType> in, std::span<AttrValue>, TensorType* result) {
  RETURN_IF_ERROR(reject_bool(op_info(K).name, in[0]));
  *result = in[0];
  return std::nullopt;
}

Check infer_unary_float(std::span<const TensorType> in, std::span<AttrValue>, TensorType* result) {
  *result = TensorType{DType::kF32, in[0].shape};
  return std::nullopt;
}

template <OpKind K>
Check infer_arith(std::span<const TensorType> in, std::span<AttrValue>, TensorType* result) {
  std::string_view name = op_info(K).name;
  Shape s;
  RETURN_IF_ERROR(broadcast2(name, in[0], in[1], &s));
  DType t = promote(in[0].dtype, in[1].dtype);
  if (t == DType::kBool) return fail(name, "both operands are bool; cast them to a numeric dtype first");
  if (K == OpKind::kDiv) t = DType::kF32;  // true division, as in PyTorch
  *result = TensorType{t, s};
  return std::nullopt;
}

template <OpKind K>
Check infer_minmax(std::span<const TensorType> in, std::span<AttrValue>, TensorType* result) {
  Shape s;
  RETURN_IF_ERROR(broadcast2(op_info(K).name, in[0], in[1], &s));
  *result = TensorType{promote(in[0].dtype, in[1].dtype), s};
  return std::nullopt;
}

template <OpKind K>
Check infer_compare(std::span<const TensorType> in, std::span<AttrValue>, TensorType* result) {
  Shape s;
  RETURN_IF_ERROR(broadcast2(op_info(K).name, in[0], in[1], &s));
  *result = TensorType{DType::kBool, s};
  return std::nullopt;
}

Check infer_where(std::span<const TensorType> in, std::span<AttrValue>, TensorType* result) {
  if (in[0].dtype != DType::kBool) {
    return fail("where", fmt::format("condition {} must be bool", describe(in[0])));
  }
  Shape ab;
  RETURN_IF_ERROR(broadcast2("where", in[1], in[2], &ab));
  Shape s;
  if (!broadcast_shapes(in[0].shape, ab, &s)) {
    return fail("where", fmt::format("condition {} is not broadcastable with operands {} and {}",
                                     describe(in[0]), describe(in[1]), describe(in[2])));
  }
  *result = TensorType{promote(in[1].dtype, in[2].dtype), s};
  return std::nullopt;
}

Check infer_cast(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  *result = TensorType{CastAttrs(attrs).dtype(), in[0].shape};
  return std::nullopt;
}

Check infer_matmul(std::span<const TensorType> in, std::span<AttrValue>, TensorType* result) {
  const TensorType& a = in[0];
  const TensorType& b = in[1];
  RETURN_IF_ERROR(reject_bool("matmul", a));
  RETURN_IF_ERROR(reject_bool("matmul", b));
  if (a.shape.rank() < 1 || b.shape.rank() < 1) {
    return fail("matmul", fmt::format("operands {} and {} must have rank >= 1", describe(a), describe(b)));
  }
  // NumPy semantics: a 1-D left operand is a row vector, a 1-D right operand a column vector,
  // and the added dim is removed from the result.
  Shape sa = a.shape, sb = b.shape;
  if (sa.rank() == 1) sa.insert(0, 1);
  if (sb.rank() == 1) sb.push_back(1);
  int64_t k_a = sa[sa.rank() - 1], k_b = sb[sb.rank() - 2];
  if (k_a != k_b) {
    return fail("matmul", fmt::format("shapes {} and {} do not match: inner dims {} and {} differ",
                                      describe(a), describe(b), k_a, k_b));
  }
  Shape batch_a(IntList(std::span(sa.begin(), static_cast<size_t>(sa.rank() - 2))));
  Shape batch_b(IntList(std::span(sb.begin(), static_cast<size_t>(sb.rank() - 2))));
  Shape out;
  if (!broadcast_shapes(batch_a, batch_b, &out)) {
    return fail("matmul", fmt::format("batch dims of {} and {} are not broadcastable", describe(a),
                                      describe(b)));
  }
  if (a.shape.rank() > 1) out.push_back(sa[sa.rank() - 2]);
  if (b.shape.rank() > 1) out.push_back(sb[sb.rank() - 1]);
  *result = TensorType{promote(a.dtype, b.dtype), out};
  return std::nullopt;
}

// Normalizes a reduction's `axes` (empty = all; sorted; no repeats) and sets `*out` to the
// reduced shape.
Check reduce_shape(std::string_view op, const Shape& in, IntList& axes, bool keepdim, Shape* out) {
  if (axes.empty()) {
    for (int i = 0; i < in.rank(); ++i) axes.push_back(i);
  }
  for (int64_t& a : axes) RETURN_IF_ERROR(normalize_axis(op, a, in.rank()));
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) {
    return fail(op, fmt::format("axes {} name a dim twice", axes.to_string()));
  }
  for (int i = 0; i < in.rank(); ++i) {
    bool reduced = std::find(axes.begin(), axes.end(), i) != axes.end();
    if (!reduced) out->push_back(in[i]);
    else if (keepdim) out->push_back(1);
  }
  return std::nullopt;
}

Check infer_sum(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  ReduceAttrs a(attrs);
  Shape s;
  RETURN_IF_ERROR(reduce_shape("sum", in[0].shape, a.axes(), a.keepdim(), &s));
  *result = TensorType{is_floating(in[0].dtype) ? in[0].dtype : DType::kI64, s};
  return std::nullopt;
}

Check infer_mean(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  ReduceAttrs a(attrs);
  Shape s;
  RETURN_IF_ERROR(reduce_shape("mean", in[0].shape, a.axes(), a.keepdim(), &s));
  *result = TensorType{DType::kF32, s};
  return std::nullopt;
}

// max and min.
template <OpKind K>
Check infer_extreme(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  const std::string_view name = op_info(K).name;
  ReduceAttrs a(attrs);
  Shape s;
  RETURN_IF_ERROR(reduce_shape(name, in[0].shape, a.axes(), a.keepdim(), &s));
  for (int64_t axis : a.axes()) {
    if (in[0].shape[static_cast<int>(axis)] == 0) {
      return fail(name, fmt::format("cannot reduce {} over its empty dim {}", describe(in[0]), axis));
    }
  }
  *result = TensorType{in[0].dtype, s};
  return std::nullopt;
}

// argmax and argmin (ArgmaxAttrs and ArgminAttrs both lead with axis, keepdim).
template <OpKind K>
Check infer_arg_extreme(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  const std::string_view name = op_info(K).name;
  ArgmaxAttrs a(attrs.first(2));
  int rank = in[0].shape.rank();
  RETURN_IF_ERROR(normalize_axis(name, a.axis(), rank));
  const int64_t axis = a.axis();
  if (in[0].shape[static_cast<int>(axis)] == 0) {
    return fail(name, fmt::format("cannot reduce {} over its empty dim {}", describe(in[0]), axis));
  }
  Shape out;
  for (int i = 0; i < rank; ++i) {
    if (i != axis) out.push_back(in[0].shape[i]);
    else if (a.keepdim()) out.push_back(1);
  }
  *result = TensorType{DType::kI64, out};
  return std::nullopt;
}

Check infer_reshape(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  IntList& shape = ShapeAttrs(attrs).shape();
  int infer_at = -1;
  for (int i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer_at >= 0) return fail("reshape", fmt::format("shape {} has more than one -1", shape.to_string()));
      infer_at = i;
    } else if (shape[i] < 0) {
      return fail("reshape", fmt::format("shape {} has a negative dim", shape.to_string()));
    }
  }
  IntList known_dims;
  for (int64_t d : shape) {
    if (d != -1) known_dims.push_back(d);
  }
  int64_t known = 0;
  RETURN_IF_ERROR(checked_product("reshape", known_dims, &known));
  int64_t n = in[0].shape.numel();
  if (infer_at >= 0) {
    if (known == 0 || n % known != 0) {
      return fail("reshape", fmt::format("cannot reshape {} into {}", describe(in[0]), shape.to_string()));
    }
    shape[infer_at] = n / known;
  } else if (known != n) {
    return fail("reshape", fmt::format("cannot reshape {} ({} elements) into {} ({} elements)",
                                       describe(in[0]), n, shape.to_string(), known));
  }
  *result = TensorType{in[0].dtype, Shape(shape)};
  return std::nullopt;
}

Check infer_permute(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  IntList& perm = PermuteAttrs(attrs).perm();
  int rank = in[0].shape.rank();
  if (perm.size() != rank) {
    return fail("permute", fmt::format("perm {} has {} entries but the operand {} has rank {}",
                                       perm.to_string(), perm.size(), describe(in[0]), rank));
  }
  std::array<bool, kMaxRank> seen{};
  Shape out;
  const IntList written = perm;
  for (int64_t& p : perm) {
    RETURN_IF_ERROR(normalize_axis("permute", p, rank));
    if (seen[static_cast<size_t>(p)]) {
      return fail("permute", fmt::format("perm {} names dim {} twice", written.to_string(), p));
    }
    seen[static_cast<size_t>(p)] = true;
    out.push_back(in[0].shape[static_cast<int>(p)]);
  }
  *result = TensorType{in[0].dtype, out};
  return std::nullopt;
}

Check infer_transpose(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  int rank = in[0].shape.rank();
  TransposeAttrs a(attrs);
  int64_t d0 = a.dim0(), d1 = a.dim1();
  RETURN_IF_ERROR(normalize_axis("transpose", d0, rank));
  RETURN_IF_ERROR(normalize_axis("transpose", d1, rank));
  a.dim0() = std::min(d0, d1);
  a.dim1() = std::max(d0, d1);
  Shape out = in[0].shape;
  std::swap(out[static_cast<int>(d0)], out[static_cast<int>(d1)]);
  *result = TensorType{in[0].dtype, out};
  return std::nullopt;
}

Check infer_broadcast_to(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  const IntList& shape = ShapeAttrs(attrs).shape();
  const Shape target(shape);
  RETURN_IF_ERROR(check_shape_attr("broadcast_to", target));
  Shape b;
  if (!broadcast_shapes(in[0].shape, target, &b) || !(b == target)) {
    return fail("broadcast_to", fmt::format("cannot broadcast {} to {}", describe(in[0]), target.to_string()));
  }
  *result = TensorType{in[0].dtype, target};
  return std::nullopt;
}

Check infer_concat(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  const TensorType& first = in[0];
  int rank = first.shape.rank();
  if (rank == 0) return fail("concat", "cannot concatenate scalars (rank 0)");
  int64_t& axis = AxisAttrs(attrs).axis();
  RETURN_IF_ERROR(normalize_axis("concat", axis, rank));
  Shape out = first.shape;
  for (size_t k = 1; k < in.size(); ++k) {
    const TensorType& t = in[k];
    if (t.dtype != first.dtype) {
      return fail("concat", fmt::format("operands {} and {} have different dtypes; cast one first",
                                        describe(first), describe(t)));
    }
    bool ok = t.shape.rank() == rank;
    for (int i = 0; ok && i < rank; ++i) ok = i == axis || t.shape[i] == first.shape[i];
    if (!ok) {
      return fail("concat", fmt::format("operands {} and {} do not match outside axis {}", describe(first),
                                        describe(t), axis));
    }
    out[static_cast<int>(axis)] += t.shape[static_cast<int>(axis)];
  }
  *result = TensorType{first.dtype, out};
  return std::nullopt;
}

Check infer_slice(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result) {
  SliceAttrs a(attrs);
  int rank = in[0].shape.rank();
  int64_t axis = a.axis();
  RETURN_IF_ERROR(normalize_axis("slice", axis, rank));
  int64_t dim = in[0].shape[static_cast<int>(axis)];
  int64_t step = a.step();
  if (step < 1) return fail("slice", fmt::format("step must be >= 1, got {}", step));
  // Python slice semantics: negative bounds count from the end, then clamp to [0, dim].
  auto clamp = [dim](int64_t v) {
    if (v < 0) v = std::max<int64_t>(0, v + dim);
    return std::min(v, dim);
  };
  int64_t start = clamp(a.start());
  int64_t end = std::max(start, clamp(a.end()));
  int64_t len = end == start ? 0 : (end - start - 1) / step + 1;
  a.axis() = axis;
  a.start() = start;
  a.end() = end;
  Shape out = in[0].shape;
  out[static_cast<int>(axis)] = len;
  *result = TensorType{in[0].dtype, out};
  return std::nullopt;
}

// ---- nn layers (capture/trace/nn.h) -------------------------------------------------------------

// Bound on window attributes (kernel, stride, padding, dilation, output size): far beyond any
// real layer, small enough that products of two of them with a dim (< 2^48) cannot overflow.
constexpr int64_t kMaxWindowAttr = int64_t{1} << 24;

// Normalizes the pair attribute `name` (one entry means both) to {height, width} and checks
// each entry is in [min_value, kMaxWindowAttr].
Check normalize_pair(std::string_view op, std::string_view name, IntList& v, int64_t min_value) {
  if (v.size() == 1) v.push_back(v[0]);
  if (v.size() != 2) {
    return fail(op, fmt::format("{} {} must have 2 entries (height, width)", name, v.to_string()));
  }
  for (int64_t e : v) {
    if (e < min_value || e > kMaxWindowAttr) {
      return fail(op, fmt::format("{} {} must have entries >= {} and <= 2^24", name, v.to_string(), min_value));
    }
  }
  return std::nullopt;
}

[[gnu::always_inline]] inline Check require_f32(std::string_view op, std::string_view what,
                                                const TensorType& t) {
  if (t.dtype != DType::kF32) return fail(op, fmt::format("{} {} must be f32; cast it first", what, describe(t)));
  return std::nullopt;
}

Check require_nchw(std::string_view op, const TensorType& x) {
  RETURN_IF_ERROR(require_f32(op, "input", x));
  if (x.shape.rank() != 4) {
    return fail(op, fmt::format("input {} must have rank 4 (N, C, H, W)", describe(x)));
  }
  return std::nullopt;
}

Check require_index(std::string_view op, const TensorType& t) {
  if (t.dtype != DType::kI32 && t.dtype != DType::kI64) {
    return fail(op, fmt::format("index {} must be i32 or i64", describe(t)));
  }
  return std::nullopt;
}

// Rounds toward negative infinity (num may be negative). REQUIRES: den > 0.
int64_t floor_div(int64_t num, int64_t den) {
  return num >= 0 ? num / den : -((-num + den - 1) / den);
}

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

// The pools' shared checks and PyTorch's output size (pooling_output_shape): floor or ceil of
// (in + 2 pad - extent) / stride, plus one; with ceil_mode the last window must start inside
// the input or the left padding. Normalizes kernel/stride/padding(/dilation) in place and sets
// `*out` to the output shape.
Check pool_shape(std::string_view op, const TensorType& x, IntList& kernel, IntList& stride,
                  IntList& padding, IntList* dilation_attr, bool ceil_mode, Shape* out) {
  RETURN_IF_ERROR(require_nchw(op, x));
  RETURN_IF_ERROR(normalize_pair(op, "kernel", kernel, 1));
  if (stride.empty()) stride = kernel;
  RETURN_IF_ERROR(normalize_pair(op, "stride", stride, 1));
  RETURN_IF_ERROR(normalize_pair(op, "padding", padding, 0));
  IntList dilation{1, 1};
  if (dilation_attr) {
    RETURN_IF_ERROR(normalize_pair(op, "dilation", *dilation_attr, 1));
    dilation = *dilation_attr;
  }
  *out = x.shape;
  for (int d = 0; d < 2; ++d) {
    if (padding[d] > kernel[d] / 2) {
      return fail(op, fmt::format("padding {} must be at most half the kernel {}", padding.to_string(),
                                  kernel.to_string()));
    }
    const int64_t size = x.shape[2 + d];
    const int64_t extent = dilation[d] * (kernel[d] - 1) + 1;
    int64_t n = floor_div(size + 2 * padding[d] - extent + (ceil_mode ? stride[d] - 1 : 0), stride[d]) + 1;
    if (ceil_mode && (n - 1) * stride[d] >= size + padding[d]) --n;
    if (n < 1) {
      return fail(op, fmt::format("kernel {} (dilation {}) does not fit the input {} padded by {}",
                                  kernel.to_string(), dilation.to_string(), describe(x), padding.to_string()));
    }
    (*out)[2 + d] = n;
  }
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

// The checks scatter_add and scatter_elements share: `axis` normalized; `src` has the shape of
// `index`, which has the rank of `x` and no dim larger than x's outside `axis`.
Check check_scatter(std::string_view op, const TensorType& x, const TensorType& idx, const TensorType& src,
                    int64_t& axis) {
  const int rank = x.shape.rank();
  RETURN_IF_ERROR(normalize_axis(op, axis, rank));
  if (!(src.shape == idx.shape)) {
    return fail(op, fmt::format("src {} must have the shape of index {}", describe(src), describe(idx)));
  }
  bool fits = idx.shape.rank() == rank;
  for (int d = 0; fits && d < rank; ++d) fits = d == axis || idx.shape[d] <= x.shape[d];
  if (!fits) {
    return fail(op, fmt::format("index {} must have the rank of the input {} and no dim larger than "
                                "the input's outside axis {}", describe(idx), describe(x), axis));
  }
  if (x.shape[static_cast<int>(axis)] == 0 && idx.shape.numel() > 0) {
    return fail(op, fmt::format("input {} is empty along axis {}", describe(x), axis));
  }
  return std::nullopt;
}

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

// ---- gradients of the nn layers (capture/ops/grad_nn_layers.h) -----------------------------

// grad_out of a conv2d or pool: f32 [N, C, OH, OW].
Check require_grad_out(std::string_view op, const TensorType& g) {
  RETURN_IF_ERROR(require_f32(op, "grad_out", g));
  if (g.shape.rank() != 4) {
    return fail(op, fmt::format("grad_out {} must have rank 4 (N, C, OH, OW)", describe(g)));
  }
  return std::nullopt;
}

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

// scatter_elements: one per output element (the copy) and one per update.
OpCost cost_scatter_elements(std::span<const TensorType> in, const TensorType& out, std::span<const AttrValue>) {
  return {out.shape.numel() + in[2].shape.numel(), false};
}

// ---- costs (see OpCost in ops.h) ------------------------------------------------------------
// Inputs are as the inference rule accepted them (so arities and ranks hold) and `attrs` are
// normalized.

OpCost cost_free(std::span<const TensorType>, const TensorType&, std::span<const AttrValue>) {
  return {};
}

template <int64_t kPerElement>
OpCost cost_per_out(std::span<const TensorType>, const TensorType& out, std::span<const AttrValue>) {
  return {kPerElement * out.shape.numel(), false};
}

template <int64_t kPerElement>
OpCost cost_per_in(std::span<const TensorType> in, const TensorType&, std::span<const AttrValue>) {
  return {kPerElement * in[0].shape.numel(), false};
}

// Last dim of `t`, or 1 for a scalar.
int64_t last_dim(const TensorType& t) {
  return t.shape.rank() == 0 ? 1 : t.shape[t.shape.rank() - 1];
}

// matmul and linear: every output element is a dot product over the left operand's last dim.
OpCost cost_contract_last_dim(std::span<const TensorType> in, const TensorType& out,
                              std::span<const AttrValue>) {
  return {2 * out.shape.numel() * last_dim(in[0]), true};
}

OpCost cost_conv2d(std::span<const TensorType> in, const TensorType& out, std::span<const AttrValue>) {
  // weight [O, C/groups, kh, kw]: every output element is a dot product of C/groups*kh*kw.
  const Shape& w = in[1].shape;
  const int64_t per_out = w[0] == 0 ? 0 : w.numel() / w[0];
  return {2 * out.shape.numel() * per_out, true};
}

OpCost cost_attention(std::span<const TensorType> in, const TensorType&, std::span<const AttrValue>) {
  // q [..., Lq, E], k [..., Lk, E], v [..., Lk, Ev]: two contractions over the scores
  // [..., Lq, Lk], and the softmax over them.
  const Shape& q = in[0].shape;
  const Shape& k = in[1].shape;
  const int64_t lq = q[q.rank() - 2], e = q[q.rank() - 1], lk = k[k.rank() - 2];
  const int64_t ev = last_dim(in[2]);
  const int64_t batch = lq * e == 0 ? 0 : q.numel() / (lq * e);
  const int64_t scores = batch * lq * lk;
  return {2 * scores * (e + ev) + (kTranscendentalFlops + 3) * scores, true};
}

// max_pool2d and avg_pool2d: one flop per window element per output element.
template <template <typename> class View>
OpCost cost_pool(std::span<const TensorType>, const TensorType& out, std::span<const AttrValue> attrs) {
  int64_t window = 1;
  for (int64_t k : View<const AttrValue>(attrs).kernel()) window *= k;
  return {out.shape.numel() * window, false};
}

// scatter_add: one add per src element.
OpCost cost_scatter_add(std::span<const TensorType> in, const TensorType&, std::span<const AttrValue>) {
  return {in[2].shape.numel(), false};
}

// The conv2d gradients: the forward's contraction again, 2 * grad_out * (C/groups) * kh * kw
// (the weight is input 1 of conv2d_input_grad and the output of conv2d_weight_grad).
OpCost cost_conv2d_input_grad(std::span<const TensorType> in, const TensorType&, std::span<const AttrValue>) {
  const Shape& w = in[1].shape;
  return {2 * in[0].shape.numel() * (w[0] == 0 ? 0 : w.numel() / w[0]), true};
}
OpCost cost_conv2d_weight_grad(std::span<const TensorType> in, const TensorType& out, std::span<const AttrValue>) {
  const Shape& w = out.shape;
  return {2 * in[0].shape.numel() * (w[0] == 0 ? 0 : w.numel() / w[0]), true};
}

// max_pool2d_grad and avg_pool2d_grad: the forward's window walk, per grad_out element.
template <template <typename> class View>
OpCost cost_pool_grad(std::span<const TensorType> in, const TensorType&, std::span<const AttrValue> attrs) {
  int64_t window = 1;
  for (int64_t k : View<const AttrValue>(attrs).kernel()) window *= k;
  return {in[0].shape.numel() * window, false};
}

// conv_transpose2d: conv2d_input_grad's contraction, 2 * input * (O/groups) * kh * kw.
OpCost cost_conv_transpose2d(std::span<const TensorType> in, const TensorType&, std::span<const AttrValue>) {
  const Shape& w = in[1].shape;
  return {2 * in[0].shape.numel() * (w[0] == 0 ? 0 : w.numel() / w[0]), true};
}

constexpr CostFn kPerOut = cost_per_out<1>;
constexpr CostFn kTranscendental = cost_per_out<kTranscendentalFlops>;
constexpr CostFn kPerIn = cost_per_in<1>;
constexpr CostFn kSoftmaxCost = cost_per_in<kTranscendentalFlops + 3>;  // max, subtract, exp, sum, divide
constexpr CostFn kRandUniformCost = cost_per_out<kPhiloxFlops>;
constexpr CostFn kRandNormalCost = cost_per_out<kPhiloxFlops + 2 * kTranscendentalFlops>;  // see OpCost

// ---- the table ----------------------------------------------------------------------------

using C = OpClass;
constexpr std::span<const AttrSpec> kNoAttrs{};

const OpInfo kOps[] = {
    {OpKind::kParameter, "parameter", C::kParameter, 0, 0, kParameterAttrs, infer_parameter, nullptr, cost_free, nullptr},
    {OpKind::kNeg, "neg", C::kUnary, 1, 1, kNoAttrs, infer_unary_same<OpKind::kNeg>, ref::neg, kPerOut, grad::neg},
    {OpKind::kAbs, "abs", C::kUnary, 1, 1, kNoAttrs, infer_unary_same<OpKind::kAbs>, ref::abs, kPerOut, grad::abs},
    {OpKind::kExp, "exp", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::exp, kTranscendental, grad::exp},
    {OpKind::kLog, "log", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::log, kTranscendental, grad::log},
    {OpKind::kSqrt, "sqrt", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::sqrt, kTranscendental, grad::sqrt},
    {OpKind::kRsqrt, "rsqrt", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::rsqrt, kTranscendental, grad::rsqrt},
    {OpKind::kTanh, "tanh", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::tanh, kTranscendental, grad::tanh},
    {OpKind::kSigmoid, "sigmoid", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::sigmoid, kTranscendental, grad::sigmoid},
    {OpKind::kRelu, "relu", C::kUnary, 1, 1, kNoAttrs, infer_unary_same<OpKind::kRelu>, ref::relu, kPerOut, grad::relu},
    {OpKind::kAdd, "add", C::kBinary, 2, 2, kNoAttrs, infer_arith<OpKind::kAdd>, ref::add, kPerOut, grad::add},
    {OpKind::kSub, "sub", C::kBinary, 2, 2, kNoAttrs, infer_arith<OpKind::kSub>, ref::sub, kPerOut, grad::sub},
    {OpKind::kMul, "mul", C::kBinary, 2, 2, kNoAttrs, infer_arith<OpKind::kMul>, ref::mul, kPerOut, grad::mul},
    {OpKind::kDiv, "div", C::kBinary, 2, 2, kNoAttrs, infer_arith<OpKind::kDiv>, ref::div, kPerOut, grad::div},
    {OpKind::kPow, "pow", C::kBinary, 2, 2, kNoAttrs, infer_arith<OpKind::kPow>, ref::pow, kTranscendental, grad::pow},
    {OpKind::kMaximum, "maximum", C::kBinary, 2, 2, kNoAttrs, infer_minmax<OpKind::kMaximum>, ref::maximum, kPerOut, grad::maximum},
    {OpKind::kMinimum, "minimum", C::kBinary, 2, 2, kNoAttrs, infer_minmax<OpKind::kMinimum>, ref::minimum, kPerOut, grad::minimum},
    {OpKind::kEq, "eq", C::kCompare, 2, 2, kNoAttrs, infer_compare<OpKind::kEq>, ref::eq, kPerOut, nullptr},
    {OpKind::kLt, "lt", C::kCompare, 2, 2, kNoAttrs, infer_compare<OpKind::kLt>, ref::lt, kPerOut, nullptr},
    {OpKind::kGt, "gt", C::kCompare, 2, 2, kNoAttrs, infer_compare<OpKind::kGt>, ref::gt, kPerOut, nullptr},
    {OpKind::kWhere, "where", C::kWhere, 3, 3, kNoAttrs, infer_where, ref::where, kPerOut, grad::where},
    {OpKind::kCast, "cast", C::kCast, 1, 1, kCastAttrs, infer_cast, ref::cast, kPerOut, grad::cast},
    {OpKind::kMatmul, "matmul", C::kMatmul, 2, 2, kNoAttrs, infer_matmul, ref::matmul, cost_contract_last_dim, grad::matmul},
    {OpKind::kSum, "sum", C::kReduce, 1, 1, kReduceAttrs, infer_sum, ref::sum, kPerIn, grad::sum},
    {OpKind::kMean, "mean", C::kReduce, 1, 1, kReduceAttrs, infer_mean, ref::mean, kPerIn, grad::mean},
    {OpKind::kMax, "max", C::kReduce, 1, 1, kReduceAttrs, infer_extreme<OpKind::kMax>, ref::max, kPerIn, grad::max},
    {OpKind::kArgmax, "argmax", C::kReduce, 1, 1, kArgmaxAttrs, infer_arg_extreme<OpKind::kArgmax>, ref::argmax, kPerIn, nullptr},
    {OpKind::kReshape, "reshape", C::kLayout, 1, 1, kShapeAttrs, infer_reshape, ref::reshape, cost_free, grad::reshape},
    {OpKind::kPermute, "permute", C::kLayout, 1, 1, kPermuteAttrs, infer_permute, ref::permute, cost_free, grad::permute},
    {OpKind::kTranspose, "transpose", C::kLayout, 1, 1, kTransposeAttrs, infer_transpose, ref::transpose, cost_free, grad::transpose},
    {OpKind::kBroadcastTo, "broadcast_to", C::kLayout, 1, 1, kShapeAttrs, infer_broadcast_to, ref::broadcast_to, cost_free, grad::broadcast_to},
    {OpKind::kConcat, "concat", C::kLayout, 1, kVariadic, kConcatAttrs, infer_concat, ref::concat, cost_free, grad::concat},
    {OpKind::kSlice, "slice", C::kLayout, 1, 1, kSliceAttrs, infer_slice, ref::slice, cost_free, grad::slice},
    {OpKind::kConv2d, "conv2d", C::kNn, 2, 3, kConv2dAttrs, infer_conv2d, ref::conv2d, cost_conv2d, grad::conv2d},
    {OpKind::kMaxPool2d, "max_pool2d", C::kNn, 1, 1, kMaxPool2dAttrs, infer_max_pool2d, ref::max_pool2d, cost_pool<MaxPool2dAttrs>, grad::max_pool2d},
    {OpKind::kAvgPool2d, "avg_pool2d", C::kNn, 1, 1, kAvgPool2dAttrs, infer_avg_pool2d, ref::avg_pool2d, cost_pool<AvgPool2dAttrs>, grad::avg_pool2d},
    {OpKind::kAdaptiveAvgPool2d, "adaptive_avg_pool2d", C::kNn, 1, 1, kAdaptiveAvgPool2dAttrs, infer_adaptive_avg_pool2d, ref::adaptive_avg_pool2d, kPerIn, grad::adaptive_avg_pool2d},
    {OpKind::kLinear, "linear", C::kNn, 2, 3, kNoAttrs, infer_linear, ref::linear, cost_contract_last_dim, grad::linear},
    {OpKind::kFlatten, "flatten", C::kNn, 1, 1, kFlattenAttrs, infer_flatten, ref::flatten, kPerOut, grad::flatten},
    {OpKind::kPad, "pad", C::kNn, 1, 1, kPadAttrs, infer_pad, ref::pad, kPerOut, grad::pad},
    {OpKind::kDropout, "dropout", C::kNn, 1, 1, kDropoutAttrs, infer_dropout, ref::dropout, kPerOut, grad::dropout},
    {OpKind::kEmbedding, "embedding", C::kNn, 2, 2, kNoAttrs, infer_embedding, ref::embedding, kPerOut, grad::embedding},
    {OpKind::kGather, "gather", C::kNn, 2, 2, kIndexAxisAttrs, infer_gather, ref::gather, kPerOut, grad::gather},
    {OpKind::kIndexSelect, "index_select", C::kNn, 2, 2, kIndexAxisAttrs, infer_index_select, ref::index_select, kPerOut, grad::index_select},
    {OpKind::kFull, "full", C::kSource, 0, 0, kFullAttrs, infer_full, ref::full, kPerOut, nullptr},
    {OpKind::kArange, "arange", C::kSource, 0, 0, kArangeAttrs, infer_arange, ref::arange, kPerOut, nullptr},
    {OpKind::kUniform, "uniform", C::kSource, 0, 0, kUniformAttrs, infer_uniform, ref::uniform, kPerOut, nullptr},
    {OpKind::kNormal, "normal", C::kSource, 0, 0, kNormalAttrs, infer_normal, ref::normal, kTranscendental, nullptr},
    {OpKind::kGelu, "gelu", C::kUnary, 1, 1, kGeluAttrs, infer_unary_float, ref::gelu, kTranscendental, grad::gelu},
    {OpKind::kSilu, "silu", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::silu, kTranscendental, grad::silu},
    {OpKind::kHardswish, "hardswish", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::hardswish, kPerOut, grad::hardswish},
    {OpKind::kHardsigmoid, "hardsigmoid", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::hardsigmoid, kPerOut, grad::hardsigmoid},
    {OpKind::kErf, "erf", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::erf, kTranscendental, grad::erf},
    {OpKind::kClamp, "clamp", C::kUnary, 1, 1, kClampAttrs, infer_clamp, ref::clamp, kPerOut, grad::clamp},
    {OpKind::kBatchNorm, "batch_norm", C::kNn, 5, 5, kBatchNormAttrs, infer_batch_norm, ref::batch_norm, cost_per_out<2>, grad::batch_norm},
    {OpKind::kLayerNorm, "layer_norm", C::kNn, 1, 3, kLayerNormAttrs, infer_layer_norm, ref::layer_norm, cost_per_in<8>, grad::layer_norm},
    {OpKind::kSoftmax, "softmax", C::kNn, 1, 1, kSoftmaxAttrs, infer_softmax<OpKind::kSoftmax>, ref::softmax, kSoftmaxCost, grad::softmax},
    {OpKind::kLogSoftmax, "log_softmax", C::kNn, 1, 1, kSoftmaxAttrs, infer_softmax<OpKind::kLogSoftmax>, ref::log_softmax, kSoftmaxCost, grad::log_softmax},
    {OpKind::kScaledDotProductAttention, "scaled_dot_product_attention", C::kNn, 3, 4, kAttentionAttrs,
     infer_attention, ref::scaled_dot_product_attention, cost_attention, grad::scaled_dot_product_attention},
    {OpKind::kScatterAdd, "scatter_add", C::kNn, 3, 3, kIndexAxisAttrs, infer_scatter_add, ref::scatter_add, cost_scatter_add, grad::scatter_add},
    // training
    {OpKind::kDropoutMask, "dropout_mask", C::kNn, 1, 1, kDropoutMaskAttrs, infer_dropout_mask, ref::dropout_mask, kPerOut, nullptr},
    // gradients of the nn layers (not differentiable themselves: no higher-order gradients)
    {OpKind::kConv2dInputGrad, "conv2d_input_grad", C::kNn, 2, 2, kConv2dInputGradAttrs, infer_conv2d_input_grad,
     ref::conv2d_input_grad, cost_conv2d_input_grad, nullptr},
    {OpKind::kConv2dWeightGrad, "conv2d_weight_grad", C::kNn, 2, 2, kConv2dWeightGradAttrs, infer_conv2d_weight_grad,
     ref::conv2d_weight_grad, cost_conv2d_weight_grad, nullptr},
    {OpKind::kMaxPool2dGrad, "max_pool2d_grad", C::kNn, 2, 2, kMaxPool2dAttrs, infer_max_pool2d_grad,
     ref::max_pool2d_grad, cost_pool_grad<MaxPool2dAttrs>, nullptr},
    {OpKind::kAvgPool2dGrad, "avg_pool2d_grad", C::kNn, 1, 1, kAvgPool2dGradAttrs, infer_avg_pool2d_grad,
     ref::avg_pool2d_grad, cost_pool_grad<AvgPool2dGradAttrs>, nullptr},
    {OpKind::kAdaptiveAvgPool2dGrad, "adaptive_avg_pool2d_grad", C::kNn, 1, 1, kAdaptiveAvgPool2dGradAttrs,
     infer_adaptive_avg_pool2d_grad, ref::adaptive_avg_pool2d_grad, kPerOut, nullptr},
    // the ops ONNX models need (issue 16)
    {OpKind::kFloor, "floor", C::kUnary, 1, 1, kNoAttrs, infer_unary_same<OpKind::kFloor>, ref::floor, kPerOut, grad::floor},
    {OpKind::kCeil, "ceil", C::kUnary, 1, 1, kNoAttrs, infer_unary_same<OpKind::kCeil>, ref::ceil, kPerOut, grad::ceil},
    {OpKind::kRound, "round", C::kUnary, 1, 1, kNoAttrs, infer_unary_same<OpKind::kRound>, ref::round, kPerOut, grad::round},
    {OpKind::kSin, "sin", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::sin, kTranscendental, grad::sin},
    {OpKind::kCos, "cos", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::cos, kTranscendental, grad::cos},
    {OpKind::kRemainder, "remainder", C::kBinary, 2, 2, kNoAttrs, infer_arith<OpKind::kRemainder>, ref::remainder, kPerOut, grad::remainder},
    {OpKind::kFmod, "fmod", C::kBinary, 2, 2, kNoAttrs, infer_arith<OpKind::kFmod>, ref::fmod, kPerOut, grad::fmod},
    {OpKind::kTruncDiv, "trunc_div", C::kBinary, 2, 2, kNoAttrs, infer_arith<OpKind::kTruncDiv>, ref::trunc_div, kPerOut, grad::trunc_div},
    {OpKind::kMin, "min", C::kReduce, 1, 1, kReduceAttrs, infer_extreme<OpKind::kMin>, ref::min, kPerIn, grad::min},
    {OpKind::kArgmin, "argmin", C::kReduce, 1, 1, kArgminAttrs, infer_arg_extreme<OpKind::kArgmin>, ref::argmin, kPerIn, nullptr},
    {OpKind::kConvTranspose2d, "conv_transpose2d", C::kNn, 2, 3, kConvTranspose2dAttrs, infer_conv_transpose2d,
     ref::conv_transpose2d, cost_conv_transpose2d, grad::conv_transpose2d},
    {OpKind::kResizeNearest2d, "resize_nearest2d", C::kNn, 1, 1, kResizeNearest2dAttrs, infer_resize_nearest2d,
     ref::resize_nearest2d, kPerOut, grad::resize_nearest2d},
    {OpKind::kResizeLinear2d, "resize_linear2d", C::kNn, 1, 1, kResizeLinear2dAttrs, infer_resize_linear2d,
     ref::resize_linear2d, cost_per_out<6>, grad::resize_linear2d},
    {OpKind::kTopk, "topk", C::kNn, 1, 1, kTopkAttrs, infer_topk<OpKind::kTopk>, ref::topk, kPerIn, grad::topk},
    {OpKind::kTopkIndices, "topk_indices", C::kNn, 1, 1, kTopkAttrs, infer_topk<OpKind::kTopkIndices>,
     ref::topk_indices, kPerIn, nullptr},
    {OpKind::kScatterElements, "scatter_elements", C::kNn, 3, 3, kScatterElementsAttrs, infer_scatter_elements,
     ref::scatter_elements, cost_scatter_elements, grad::scatter_elements},
    {OpKind::kGatherNd, "gather_nd", C::kNn, 2, 2, kGatherNdAttrs, infer_gather_nd, ref::gather_nd, kPerOut, nullptr},
    {OpKind::kResizeNearest2dGrad, "resize_nearest2d_grad", C::kNn, 1, 1, kResizeNearest2dGradAttrs,
     infer_resize_grad<OpKind::kResizeNearest2dGrad, OpKind::kResizeNearest2d>, ref::resize_nearest2d_grad,
     cost_per_in<1>, nullptr},
    {OpKind::kResizeLinear2dGrad, "resize_linear2d_grad", C::kNn, 1, 1, kResizeLinear2dGradAttrs,
     infer_resize_grad<OpKind::kResizeLinear2dGrad, OpKind::kResizeLinear2d>, ref::resize_linear2d_grad,
     cost_per_in<8>, nullptr},
    // random numbers from a seed tensor: not differentiable (the only input is the integer seed)
    {OpKind::kRandUniform, "rand_uniform", C::kNn, 1, 1, kRandAttrs, infer_rand<OpKind::kRandUniform>,
     ref::rand_uniform, kRandUniformCost, nullptr},
    {OpKind::kRandNormal, "rand_normal", C::kNn, 1, 1, kRandAttrs, infer_rand<OpKind::kRandNormal>,
     ref::rand_normal, kRandNormalCost, nullptr},
};
static_assert(std::size(kOps) == kOpCount, "every OpKind needs exactly one registry row");

bool table_in_enum_order() {
  for (int i = 0; i < kOpCount; ++i) {
    if (static_cast<int>(kOps[i].kind) != i) return false;
  }
  return true;
}

}  // namespace

std::string type_to_string(const TensorType& t) {
  return fmt::format("{}{}", dtype_name(t.dtype), t.shape.to_string());
}

int OpInfo::attr_index(std::string_view attr) const {
  for (size_t i = 0; i < attrs.size(); ++i) {
    if (attrs[i].name == attr) return static_cast<int>(i);
  }
  return -1;
}

const OpInfo& op_info(OpKind kind) {
  static const bool ordered = table_in_enum_order();
  assert(ordered && "registry rows must follow OpKind order");
  (void)ordered;
  return kOps[static_cast<size_t>(kind)];
}

const OpInfo* find_op(std::string_view name) {
  for (const OpInfo& op : kOps) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

std::span<const OpInfo> all_ops() { return kOps; }

InferError infer_op(OpKind kind, std::span<const TensorType> in, std::span<AttrValue> attrs,
                    TensorType* out) {
  const OpInfo& info = op_info(kind);
  int n = static_cast<int>(in.size());
  if (n < info.min_inputs || (info.max_inputs != kVariadic && n > info.max_inputs)) {
    std::string want = info.max_inputs == kVariadic
                           ? fmt::format("at least {}", info.min_inputs)
                           : info.min_inputs == info.max_inputs
                                 ? fmt::format("{}", info.min_inputs)
                                 : fmt::format("{} to {}", info.min_inputs, info.max_inputs);
    return fail(info.name, fmt::format("takes {} tensor inputs, got {}", want, n));
  }
  if (attrs.size() != info.attrs.size()) {
    return fail(info.name, fmt::format("expects {} attributes, got {}", info.attrs.size(), attrs.size()));
  }
  for (size_t i = 0; i < attrs.size(); ++i) {
    if (attrs[i].kind != info.attrs[i].kind) {
      return fail(info.name, fmt::format("attribute '{}' must be {}, got {}", info.attrs[i].name,
                                         attr_kind_name(info.attrs[i].kind), attr_kind_name(attrs[i].kind)));
    }
  }
  if (Check error = info.infer(in, attrs, out)) return std::move(*error);
  // e.g. broadcasting [2^30, 1] with [1, 2^30]
  if (Result<int64_t> numel = checked_numel(out->shape.span()); !numel.is_ok()) {
    return fail(info.name, numel.status().message());
  }
  return std::nullopt;
}

Result<TensorType> infer_op(OpKind kind, std::span<const TensorType> in, std::span<AttrValue> attrs) {
  TensorType out;
  if (InferError error = infer_op(kind, in, attrs, &out)) return std::move(*error);
  return out;
}

#undef RETURN_IF_ERROR

}  // namespace tracecache
