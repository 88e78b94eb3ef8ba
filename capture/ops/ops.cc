// The op registry table and the inference rules.
#include "capture/ops/ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "capture/ops/reference_kernels.h"
#include "capture/core/status.h"

namespace tracecache {

namespace {

[[noreturn]] void fail(std::string_view op, const std::string& msg) {
  throw Error(invalid_argument(fmt::format("op '{}': {}", op, msg)));
}

std::string describe(const TensorType& t) { return type_to_string(t); }

// ---- attribute tables --------------------------------------------------------------------

AttrValue none_ints() { return AttrValue::of_ints({}); }

const AttrSpec kParameterAttrs[] = {{"index", AttrKind::kInt, true, AttrValue::of_int(0)}};
const AttrSpec kCastAttrs[] = {{"dtype", AttrKind::kDType, true, AttrValue::of_dtype(DType::kF32)}};
const AttrSpec kReduceAttrs[] = {{"axes", AttrKind::kInts, false, none_ints()},
                                 {"keepdim", AttrKind::kBool, false, AttrValue::of_bool(false)}};
const AttrSpec kArgmaxAttrs[] = {{"axis", AttrKind::kInt, true, AttrValue::of_int(0)},
                                 {"keepdim", AttrKind::kBool, false, AttrValue::of_bool(false)}};
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
const AttrSpec kIndexAxisAttrs[] = {{"axis", AttrKind::kInt, true, AttrValue::of_int(0)}};

// ---- shared checks ------------------------------------------------------------------------

// Makes `axis` non-negative for a tensor of rank `rank`; fails if out of range.
int64_t normalize_axis(std::string_view op, int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) {
    fail(op, fmt::format("axis {} is out of range for a tensor of rank {}", axis, rank));
  }
  return axis < 0 ? axis + rank : axis;
}

// The product of `dims`, failing if it exceeds kMaxElements (so no later size arithmetic
// can overflow): the same check as every shape from outside (shape.h).
int64_t checked_product(std::string_view op, const IntList& dims) {
  Result<int64_t> n = checked_numel(dims.span());
  if (!n.is_ok()) fail(op, n.status().message());
  return *n;
}

void check_shape_attr(std::string_view op, const IntList& shape) {
  for (int64_t d : shape) {
    if (d < 0) fail(op, fmt::format("shape {} has a negative dim", shape.to_string()));
  }
  checked_product(op, shape);
}

Shape broadcast2(std::string_view op, const TensorType& a, const TensorType& b) {
  Shape out;
  if (!broadcast_shapes(a.shape, b.shape, &out)) {
    fail(op, fmt::format("shapes {} and {} are not broadcastable", describe(a), describe(b)));
  }
  return out;
}

void reject_bool(std::string_view op, const TensorType& t) {
  if (t.dtype == DType::kBool) {
    fail(op, fmt::format("operand {} is bool; cast it to a numeric dtype first", describe(t)));
  }
}

// ---- inference rules ----------------------------------------------------------------------

TensorType infer_parameter(std::span<const TensorType>, std::span<AttrValue>) {
  // Parameters are created with their type directly (Graph::add_parameter); never inferred.
  fail("parameter", "a parameter cannot be recorded as an op");
}

template <OpKind K>
TensorType infer_unary_same(std::span<const TensorType> in, std::span<AttrValue>) {
  reject_bool(op_info(K).name, in[0]);
  return in[0];
}

TensorType infer_unary_float(std::span<const TensorType> in, std::span<AttrValue>) {
  return {DType::kF32, in[0].shape};
}

template <OpKind K>
TensorType infer_arith(std::span<const TensorType> in, std::span<AttrValue>) {
  std::string_view name = op_info(K).name;
  Shape s = broadcast2(name, in[0], in[1]);
  DType t = promote(in[0].dtype, in[1].dtype);
  if (t == DType::kBool) fail(name, "both operands are bool; cast them to a numeric dtype first");
  if (K == OpKind::kDiv) t = DType::kF32;  // true division, as in PyTorch
  return {t, s};
}

template <OpKind K>
TensorType infer_minmax(std::span<const TensorType> in, std::span<AttrValue>) {
  return {promote(in[0].dtype, in[1].dtype), broadcast2(op_info(K).name, in[0], in[1])};
}

template <OpKind K>
TensorType infer_compare(std::span<const TensorType> in, std::span<AttrValue>) {
  return {DType::kBool, broadcast2(op_info(K).name, in[0], in[1])};
}

TensorType infer_where(std::span<const TensorType> in, std::span<AttrValue>) {
  if (in[0].dtype != DType::kBool) {
    fail("where", fmt::format("condition {} must be bool", describe(in[0])));
  }
  Shape ab = broadcast2("where", in[1], in[2]);
  Shape s;
  if (!broadcast_shapes(in[0].shape, ab, &s)) {
    fail("where", fmt::format("condition {} is not broadcastable with operands {} and {}",
                              describe(in[0]), describe(in[1]), describe(in[2])));
  }
  return {promote(in[1].dtype, in[2].dtype), s};
}

TensorType infer_cast(std::span<const TensorType> in, std::span<AttrValue> attrs) {
  return {attrs[0].dtype, in[0].shape};
}

TensorType infer_matmul(std::span<const TensorType> in, std::span<AttrValue>) {
  const TensorType& a = in[0];
  const TensorType& b = in[1];
  reject_bool("matmul", a);
  reject_bool("matmul", b);
  if (a.shape.rank() < 1 || b.shape.rank() < 1) {
    fail("matmul", fmt::format("operands {} and {} must have rank >= 1", describe(a), describe(b)));
  }
  // NumPy semantics: a 1-D left operand is a row vector, a 1-D right operand a column vector,
  // and the added dim is removed from the result.
  Shape sa = a.shape, sb = b.shape;
  if (sa.rank() == 1) sa.insert(0, 1);
  if (sb.rank() == 1) sb.push_back(1);
  int64_t k_a = sa[sa.rank() - 1], k_b = sb[sb.rank() - 2];
  if (k_a != k_b) {
    fail("matmul", fmt::format("shapes {} and {} do not match: inner dims {} and {} differ",
                               describe(a), describe(b), k_a, k_b));
  }
  Shape batch_a(IntList(std::span(sa.begin(), static_cast<size_t>(sa.rank() - 2))));
  Shape batch_b(IntList(std::span(sb.begin(), static_cast<size_t>(sb.rank() - 2))));
  Shape out;
  if (!broadcast_shapes(batch_a, batch_b, &out)) {
    fail("matmul", fmt::format("batch dims of {} and {} are not broadcastable", describe(a),
                               describe(b)));
  }
  if (a.shape.rank() > 1) out.push_back(sa[sa.rank() - 2]);
  if (b.shape.rank() > 1) out.push_back(sb[sb.rank() - 1]);
  return {promote(a.dtype, b.dtype), out};
}

// Normalizes a reduction's `axes` (empty = all; sorted; no repeats) and returns the shape.
Shape reduce_shape(std::string_view op, const Shape& in, AttrValue& axes_attr, bool keepdim) {
  IntList& axes = axes_attr.ints;
  if (axes.empty()) {
    for (int i = 0; i < in.rank(); ++i) axes.push_back(i);
  }
  for (int64_t& a : axes) a = normalize_axis(op, a, in.rank());
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) {
    fail(op, fmt::format("axes {} name a dim twice", axes.to_string()));
  }
  Shape out;
  for (int i = 0; i < in.rank(); ++i) {
    bool reduced = std::find(axes.begin(), axes.end(), i) != axes.end();
    if (!reduced) out.push_back(in[i]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

TensorType infer_sum(std::span<const TensorType> in, std::span<AttrValue> attrs) {
  Shape s = reduce_shape("sum", in[0].shape, attrs[0], attrs[1].as_bool());
  return {is_floating(in[0].dtype) ? in[0].dtype : DType::kI64, s};
}

TensorType infer_mean(std::span<const TensorType> in, std::span<AttrValue> attrs) {
  return {DType::kF32, reduce_shape("mean", in[0].shape, attrs[0], attrs[1].as_bool())};
}

TensorType infer_max(std::span<const TensorType> in, std::span<AttrValue> attrs) {
  Shape s = reduce_shape("max", in[0].shape, attrs[0], attrs[1].as_bool());
  for (int64_t a : attrs[0].ints) {
    if (in[0].shape[static_cast<int>(a)] == 0) {
      fail("max", fmt::format("cannot reduce {} over its empty dim {}", describe(in[0]), a));
    }
  }
  return {in[0].dtype, s};
}

TensorType infer_argmax(std::span<const TensorType> in, std::span<AttrValue> attrs) {
  int rank = in[0].shape.rank();
  int64_t axis = normalize_axis("argmax", attrs[0].i, rank);
  attrs[0].i = axis;
  if (in[0].shape[static_cast<int>(axis)] == 0) {
    fail("argmax", fmt::format("cannot reduce {} over its empty dim {}", describe(in[0]), axis));
  }
  Shape out;
  for (int i = 0; i < rank; ++i) {
    if (i != axis) out.push_back(in[0].shape[i]);
    else if (attrs[1].as_bool()) out.push_back(1);
  }
  return {DType::kI64, out};
}

TensorType infer_reshape(std::span<const TensorType> in, std::span<AttrValue> attrs) {
  IntList& shape = attrs[0].ints;
  int infer_at = -1;
  for (int i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer_at >= 0) fail("reshape", fmt::format("shape {} has more than one -1", shape.to_string()));
      infer_at = i;
    } else if (shape[i] < 0) {
      fail("reshape", fmt::format("shape {} has a negative dim", shape.to_string()));
    }
  }
  IntList known_dims;
  for (int64_t d : shape) {
    if (d != -1) known_dims.push_back(d);
  }
  int64_t known = checked_product("reshape", known_dims);
  int64_t n = in[0].shape.numel();
  if (infer_at >= 0) {
    if (known == 0 || n % known != 0) {
      fail("reshape", fmt::format("cannot reshape {} into {}", describe(in[0]), shape.to_string()));
    }
    shape[infer_at] = n / known;
  } else if (known != n) {
    fail("reshape", fmt::format("cannot reshape {} ({} elements) into {} ({} elements)",
                                describe(in[0]), n, shape.to_string(), known));
  }
  return {in[0].dtype, Shape(shape)};
}

TensorType infer_permute(std::span<const TensorType> in, std::span<AttrValue> attrs) {
  IntList& perm = attrs[0].ints;
  int rank = in[0].shape.rank();
  if (perm.size() != rank) {
    fail("permute", fmt::format("perm {} has {} entries but the operand {} has rank {}",
                                perm.to_string(), perm.size(), describe(in[0]), rank));
  }
  std::array<bool, kMaxRank> seen{};
  Shape out;
  const IntList written = perm;
  for (int64_t& p : perm) {
    p = normalize_axis("permute", p, rank);
    if (seen[static_cast<size_t>(p)]) {
      fail("permute", fmt::format("perm {} names dim {} twice", written.to_string(), p));
    }
    seen[static_cast<size_t>(p)] = true;
    out.push_back(in[0].shape[static_cast<int>(p)]);
  }
  return {in[0].dtype, out};
}

TensorType infer_transpose(std::span<const TensorType> in, std::span<AttrValue> attrs) {
  int rank = in[0].shape.rank();
  int64_t d0 = normalize_axis("transpose", attrs[0].i, rank);
  int64_t d1 = normalize_axis("transpose", attrs[1].i, rank);
  attrs[0].i = std::min(d0, d1);
  attrs[1].i = std::max(d0, d1);
  Shape out = in[0].shape;
  std::swap(out[static_cast<int>(d0)], out[static_cast<int>(d1)]);
  return {in[0].dtype, out};
}

TensorType infer_broadcast_to(std::span<const TensorType> in, std::span<AttrValue> attrs) {
  Shape target(attrs[0].ints);
  check_shape_attr("broadcast_to", target);
  Shape b;
  if (!broadcast_shapes(in[0].shape, target, &b) || !(b == target)) {
    fail("broadcast_to", fmt::format("cannot broadcast {} to {}", describe(in[0]), target.to_string()));
  }
  return {in[0].dtype, target};
}

TensorType infer_concat(std::span<const TensorType> in, std::span<AttrValue> attrs) {
  const TensorType& first = in[0];
  int rank = first.shape.rank();
  if (rank == 0) fail("concat", "cannot concatenate scalars (rank 0)");
  int64_t axis = normalize_axis("concat", attrs[0].i, rank);
  attrs[0].i = axis;
  Shape out = first.shape;
  for (size_t k = 1; k < in.size(); ++k) {
    const TensorType& t = in[k];
    if (t.dtype != first.dtype) {
      fail("concat", fmt::format("operands {} and {} have different dtypes; cast one first",
                                 describe(first), describe(t)));
    }
    bool ok = t.shape.rank() == rank;
    for (int i = 0; ok && i < rank; ++i) ok = i == axis || t.shape[i] == first.shape[i];
    if (!ok) {
      fail("concat", fmt::format("operands {} and {} do not match outside axis {}", describe(first),
                                 describe(t), axis));
    }
    out[static_cast<int>(axis)] += t.shape[static_cast<int>(axis)];
  }
  return {first.dtype, out};
}

TensorType infer_slice(std::span<const TensorType> in, std::span<AttrValue> attrs) {
  int rank = in[0].shape.rank();
  int64_t axis = normalize_axis("slice", attrs[0].i, rank);
  int64_t dim = in[0].shape[static_cast<int>(axis)];
  int64_t step = attrs[3].i;
  if (step < 1) fail("slice", fmt::format("step must be >= 1, got {}", step));
  // Python slice semantics: negative bounds count from the end, then clamp to [0, dim].
  auto clamp = [dim](int64_t v) {
    if (v < 0) v = std::max<int64_t>(0, v + dim);
    return std::min(v, dim);
  };
  int64_t start = clamp(attrs[1].i);
  int64_t end = std::max(start, clamp(attrs[2].i));
  int64_t len = end == start ? 0 : (end - start - 1) / step + 1;
  attrs[0].i = axis;
  attrs[1].i = start;
  attrs[2].i = end;
  Shape out = in[0].shape;
  out[static_cast<int>(axis)] = len;
  return {in[0].dtype, out};
}

// ---- nn layers (capture/trace/nn.h) -------------------------------------------------------------

// Bound on window attributes (kernel, stride, padding, dilation, output size): far beyond any
// real layer, small enough that products of two of them with a dim (< 2^48) cannot overflow.
constexpr int64_t kMaxWindowAttr = int64_t{1} << 24;

// Normalizes the pair attribute `name` (one entry means both) to {height, width} and checks
// each entry is in [min_value, kMaxWindowAttr].
IntList& normalize_pair(std::string_view op, std::string_view name, AttrValue& attr, int64_t min_value) {
  IntList& v = attr.ints;
  if (v.size() == 1) v.push_back(v[0]);
  if (v.size() != 2) {
    fail(op, fmt::format("{} {} must have 2 entries (height, width)", name, v.to_string()));
  }
  for (int64_t e : v) {
    if (e < min_value || e > kMaxWindowAttr) {
      fail(op, fmt::format("{} {} must have entries >= {} and <= 2^24", name, v.to_string(), min_value));
    }
  }
  return v;
}

void require_f32(std::string_view op, std::string_view what, const TensorType& t) {
  if (t.dtype != DType::kF32) fail(op, fmt::format("{} {} must be f32; cast it first", what, describe(t)));
}

void require_nchw(std::string_view op, const TensorType& x) {
  require_f32(op, "input", x);
  if (x.shape.rank() != 4) {
    fail(op, fmt::format("input {} must have rank 4 (N, C, H, W)", describe(x)));
  }
}

void require_index(std::string_view op, const TensorType& t) {
  if (t.dtype != DType::kI32 && t.dtype != DType::kI64) {
    fail(op, fmt::format("index {} must be i32 or i64", describe(t)));
  }
}

// Rounds toward negative infinity (num may be negative). REQUIRES: den > 0.
int64_t floor_div(int64_t num, int64_t den) {
  return num >= 0 ? num / den : -((-num + den - 1) / den);
}

TensorType infer_conv2d(std::span<const TensorType> in, std::span<AttrValue> attrs) {
  const TensorType& x = in[0];
  const TensorType& w = in[1];
  require_nchw("conv2d", x);
  require_f32("conv2d", "weight", w);
  if (w.shape.rank() != 4) {
    fail("conv2d", fmt::format("weight {} must have rank 4 (out channels, in channels / groups, "
                               "kernel height, kernel width)", describe(w)));
  }
  const IntList& stride = normalize_pair("conv2d", "stride", attrs[0], 1);
  const IntList& padding = normalize_pair("conv2d", "padding", attrs[1], 0);
  const IntList& dilation = normalize_pair("conv2d", "dilation", attrs[2], 1);
  const int64_t groups = attrs[3].i;
  const int64_t c = x.shape[1], o = w.shape[0];
  if (groups < 1) fail("conv2d", fmt::format("groups must be >= 1, got {}", groups));
  if (c % groups != 0) {
    fail("conv2d", fmt::format("input {} has {} channels, not divisible by groups={}", describe(x),
                               c, groups));
  }
  if (w.shape[1] != c / groups) {
    fail("conv2d", fmt::format("weight {} must have {} input channels in dim 1 (input {} has {} "
                               "channels, groups={})", describe(w), c / groups, describe(x), c, groups));
  }
  if (o % groups != 0) {
    fail("conv2d", fmt::format("weight {} has {} output channels, not divisible by groups={}",
                               describe(w), o, groups));
  }
  if (w.shape[2] < 1 || w.shape[3] < 1 || w.shape[2] > kMaxWindowAttr || w.shape[3] > kMaxWindowAttr) {
    fail("conv2d", fmt::format("weight {} has an empty or oversized kernel", describe(w)));
  }
  if (in.size() == 3) {
    const TensorType& b = in[2];
    require_f32("conv2d", "bias", b);
    if (b.shape.rank() != 1 || b.shape[0] != o) {
      fail("conv2d", fmt::format("bias {} must be [{}] (one per output channel of weight {})",
                                 describe(b), o, describe(w)));
    }
  }
  Shape out{x.shape[0], o, 0, 0};
  for (int d = 0; d < 2; ++d) {
    const int64_t padded = x.shape[2 + d] + 2 * padding[d];
    const int64_t extent = dilation[d] * (w.shape[2 + d] - 1) + 1;
    if (padded < extent) {
      fail("conv2d", fmt::format("kernel {}x{} (dilation {}) is larger than the input {} padded "
                                 "by {}", w.shape[2], w.shape[3], dilation.to_string(),
                                 describe(x), padding.to_string()));
    }
    out[2 + d] = (padded - extent) / stride[d] + 1;
  }
  return {DType::kF32, out};
}

// The pools' shared checks and PyTorch's output size (pooling_output_shape): floor or ceil of
// (in + 2 pad - extent) / stride, plus one; with ceil_mode the last window must start inside
// the input or the left padding. Normalizes kernel/stride/padding(/dilation) in place.
Shape pool_shape(std::string_view op, const TensorType& x, AttrValue& kernel_attr,
                 AttrValue& stride_attr, AttrValue& padding_attr, AttrValue* dilation_attr,
                 bool ceil_mode) {
  require_nchw(op, x);
  const IntList& kernel = normalize_pair(op, "kernel", kernel_attr, 1);
  if (stride_attr.ints.empty()) stride_attr.ints = kernel;
  const IntList& stride = normalize_pair(op, "stride", stride_attr, 1);
  const IntList& padding = normalize_pair(op, "padding", padding_attr, 0);
  IntList dilation{1, 1};
  if (dilation_attr) dilation = normalize_pair(op, "dilation", *dilation_attr, 1);
  Shape out = x.shape;
  for (int d = 0; d < 2; ++d) {
    if (padding[d] > kernel[d] / 2) {
      fail(op, fmt::format("padding {} must be at most half the kernel {}", padding.to_string(),
                           kernel.to_string()));
    }
    const int64_t size = x.shape[2 + d];
    const int64_t extent = dilation[d] * (kernel[d] - 1) + 1;
    int64_t n = floor_div(size + 2 * padding[d] - extent + (ceil_mode ? stride[d] - 1 : 0), stride[d]) + 1;
    if (ceil_mode && (n - 1) * stride[d] >= size + padding[d]) --n;
    if (n < 1) {
      fail(op, fmt::format("kernel {} (dilation {}) does not fit the input {} padded by {}",
                           kernel.to_string(), dilation.to_string(), describe(x), padding.to_string()));
    }
    out[2 + d] = n;
  }
  return out;
}

TensorType infer_max_pool2d(std::span<const TensorType> in, std::span<AttrValue> attrs) {
  return {DType::kF32, pool_shape("max_pool2d", in[0], attrs[0], attrs[1], attrs[2], &attrs[3],
                                  attrs[4].as_bool())};
}

TensorType infer_avg_pool2d(std::span<const TensorType> in, std::span<AttrValue> attrs) {
  return {DType::kF32, pool_shape("avg_pool2d", in[0], attrs[0], attrs[1], attrs[2], nullptr,
                                  attrs[3].as_bool())};
}

TensorType infer_adaptive_avg_pool2d(std::span<const TensorType> in, std::span<AttrValue> attrs) {
  const TensorType& x = in[0];
  require_nchw("adaptive_avg_pool2d", x);
  const IntList& size = normalize_pair("adaptive_avg_pool2d", "output_size", attrs[0], 1);
  if (x.shape[2] == 0 || x.shape[3] == 0) {
    fail("adaptive_avg_pool2d", fmt::format("input {} has an empty spatial dim", describe(x)));
  }
  // The kernels compute window bounds as i * H / output_size.
  if (size[0] > kMaxElements / x.shape[2] || size[1] > kMaxElements / x.shape[3]) {
    fail("adaptive_avg_pool2d", fmt::format("output_size {} is too large for the input {}",
                                            size.to_string(), describe(x)));
  }
  return {DType::kF32, Shape{x.shape[0], x.shape[1], size[0], size[1]}};
}

TensorType infer_linear(std::span<const TensorType> in, std::span<AttrValue>) {
  const TensorType& x = in[0];
  const TensorType& w = in[1];
  require_f32("linear", "input", x);
  require_f32("linear", "weight", w);
  if (x.shape.rank() < 1 || w.shape.rank() != 2) {
    fail("linear", fmt::format("input {} needs rank >= 1 and weight {} rank 2 (out, in)",
                               describe(x), describe(w)));
  }
  if (x.shape[x.shape.rank() - 1] != w.shape[1]) {
    fail("linear", fmt::format("input {} has {} features but weight {} expects {}", describe(x),
                               x.shape[x.shape.rank() - 1], describe(w), w.shape[1]));
  }
  if (in.size() == 3) {
    const TensorType& b = in[2];
    require_f32("linear", "bias", b);
    if (b.shape.rank() != 1 || b.shape[0] != w.shape[0]) {
      fail("linear", fmt::format("bias {} must be [{}] (one per output feature of weight {})",
                                 describe(b), w.shape[0], describe(w)));
    }
  }
  Shape out = x.shape;
  out[out.rank() - 1] = w.shape[0];
  return {DType::kF32, out};
}

TensorType infer_flatten(std::span<const TensorType> in, std::span<AttrValue> attrs) {
  const Shape& s = in[0].shape;
  // As torch.flatten, a scalar flattens to [1] and takes dims as if it had rank 1.
  const int rank = std::max(s.rank(), 1);
  const int64_t start = normalize_axis("flatten", attrs[0].i, rank);
  const int64_t end = normalize_axis("flatten", attrs[1].i, rank);
  if (start > end) {
    fail("flatten", fmt::format("start_dim {} comes after end_dim {} for {}", attrs[0].i,
                                attrs[1].i, describe(in[0])));
  }
  attrs[0].i = start;
  attrs[1].i = end;
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
  return {in[0].dtype, out};
}

TensorType infer_pad(std::span<const TensorType> in, std::span<AttrValue> attrs) {
  const Shape& s = in[0].shape;
  IntList& pads = attrs[0].ints;
  if (pads.size() % 2 != 0 || pads.size() > 2 * s.rank()) {
    fail("pad", fmt::format("pads {} must have an even number of entries, at most 2 x rank of {}",
                            pads.to_string(), describe(in[0])));
  }
  Shape out = s;
  for (int k = 0; k < pads.size(); ++k) {
    const int64_t p = pads[k];
    if (p < -kMaxElements || p > kMaxElements) {
      fail("pad", fmt::format("pads {} has an out-of-range entry", pads.to_string()));
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
      fail("pad", fmt::format("pads {} crop dim {} of {} to a negative size", pads.to_string(), d,
                              describe(in[0])));
    }
  }
  return {in[0].dtype, out};
}

TensorType infer_dropout(std::span<const TensorType> in, std::span<AttrValue> attrs) {
  if (!(attrs[0].f >= 0 && attrs[0].f <= 1)) {
    fail("dropout", fmt::format("p must be in [0, 1], got {}", attrs[0].f));
  }
  return in[0];
}

TensorType infer_embedding(std::span<const TensorType> in, std::span<AttrValue>) {
  const TensorType& w = in[0];
  const TensorType& idx = in[1];
  if (w.shape.rank() != 2) {
    fail("embedding", fmt::format("weight {} must have rank 2 (rows, dim)", describe(w)));
  }
  require_index("embedding", idx);
  if (idx.shape.rank() >= kMaxRank) {
    fail("embedding", fmt::format("index {} has rank {}; the result would exceed rank {}",
                                  describe(idx), idx.shape.rank(), kMaxRank));
  }
  if (w.shape[0] == 0 && idx.shape.numel() > 0) {
    fail("embedding", fmt::format("weight {} has no rows to look up", describe(w)));
  }
  Shape out = idx.shape;
  out.push_back(w.shape[1]);
  return {w.dtype, out};
}

TensorType infer_gather(std::span<const TensorType> in, std::span<AttrValue> attrs) {
  const TensorType& x = in[0];
  const TensorType& idx = in[1];
  const int rank = x.shape.rank();
  const int64_t axis = normalize_axis("gather", attrs[0].i, rank);
  attrs[0].i = axis;
  require_index("gather", idx);
  bool fits = idx.shape.rank() == rank;
  for (int d = 0; fits && d < rank; ++d) fits = d == axis || idx.shape[d] <= x.shape[d];
  if (!fits) {
    fail("gather", fmt::format("index {} must have the rank of the input {} and no dim larger "
                               "than the input's outside axis {}", describe(idx), describe(x), axis));
  }
  if (x.shape[static_cast<int>(axis)] == 0 && idx.shape.numel() > 0) {
    fail("gather", fmt::format("input {} is empty along axis {}", describe(x), axis));
  }
  return {x.dtype, idx.shape};
}

TensorType infer_index_select(std::span<const TensorType> in, std::span<AttrValue> attrs) {
  const TensorType& x = in[0];
  const TensorType& idx = in[1];
  const int64_t axis = normalize_axis("index_select", attrs[0].i, x.shape.rank());
  attrs[0].i = axis;
  require_index("index_select", idx);
  if (idx.shape.rank() != 1) {
    fail("index_select", fmt::format("index {} must have rank 1", describe(idx)));
  }
  if (x.shape[static_cast<int>(axis)] == 0 && idx.shape[0] > 0) {
    fail("index_select", fmt::format("input {} is empty along axis {}", describe(x), axis));
  }
  Shape out = x.shape;
  out[static_cast<int>(axis)] = idx.shape[0];
  return {x.dtype, out};
}

TensorType infer_full(std::span<const TensorType>, std::span<AttrValue> attrs) {
  check_shape_attr("full", attrs[0].ints);
  return {attrs[2].dtype, Shape(attrs[0].ints)};
}

TensorType infer_arange(std::span<const TensorType>, std::span<AttrValue> attrs) {
  double start = attrs[0].f, end = attrs[1].f, step = attrs[2].f;
  if (step == 0 || !std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step)) {
    fail("arange", fmt::format("start {}, end {}, step {} do not describe a finite range", start, end, step));
  }
  double n = std::ceil((end - start) / step);
  if (n > 1e12) fail("arange", fmt::format("range of {} elements is too large", n));
  Shape s;
  s.push_back(n > 0 ? static_cast<int64_t>(n) : 0);
  return {attrs[3].dtype, s};
}

TensorType infer_uniform(std::span<const TensorType>, std::span<AttrValue> attrs) {
  check_shape_attr("uniform", attrs[0].ints);
  if (!std::isfinite(attrs[1].f) || !std::isfinite(attrs[2].f) || !(attrs[1].f <= attrs[2].f)) {
    fail("uniform", fmt::format("low {} and high {} must be finite with low <= high", attrs[1].f,
                                attrs[2].f));
  }
  if (attrs[4].dtype == DType::kBool) fail("uniform", "dtype bool is not supported");
  return {attrs[4].dtype, Shape(attrs[0].ints)};
}

TensorType infer_normal(std::span<const TensorType>, std::span<AttrValue> attrs) {
  check_shape_attr("normal", attrs[0].ints);
  if (!(attrs[2].f >= 0)) fail("normal", fmt::format("std must be >= 0, got {}", attrs[2].f));
  if (!is_floating(attrs[4].dtype)) {
    fail("normal", fmt::format("dtype {} is not floating", dtype_name(attrs[4].dtype)));
  }
  return {attrs[4].dtype, Shape(attrs[0].ints)};
}

// ---- nn ops (capture/trace/nn.h) -----------------------------------------------------------------

TensorType infer_clamp(std::span<const TensorType> in, std::span<AttrValue> attrs) {
  reject_bool("clamp", in[0]);
  const double lo = attrs[0].f, hi = attrs[1].f;
  if (!(lo <= hi)) {
    fail("clamp", fmt::format("min {} must be <= max {} (and neither NaN)", lo, hi));
  }
  // An integer clamp keeps the integers in [min, max]; there must be one.
  if (!is_floating(in[0].dtype) && std::ceil(lo) > std::floor(hi)) {
    fail("clamp", fmt::format("no integer lies in [min {}, max {}] for the {} operand {}", lo, hi,
                              dtype_name(in[0].dtype), describe(in[0])));
  }
  return in[0];
}

void check_eps(std::string_view op, double eps) {
  if (!(eps >= 0) || !std::isfinite(eps)) {
    fail(op, fmt::format("eps must be finite and >= 0, got {}", eps));
  }
}

TensorType infer_batch_norm(std::span<const TensorType> in, std::span<AttrValue> attrs) {
  const TensorType& x = in[0];
  require_f32("batch_norm", "input", x);
  if (x.shape.rank() < 2) {
    fail("batch_norm", fmt::format("input {} must have rank >= 2 ([N, C, ...])", describe(x)));
  }
  const int64_t channels = x.shape[1];
  static constexpr std::string_view kRoles[] = {"running_mean", "running_var", "weight", "bias"};
  for (size_t k = 1; k < 5; ++k) {
    require_f32("batch_norm", kRoles[k - 1], in[k]);
    if (!(in[k].shape == Shape{channels})) {
      fail("batch_norm", fmt::format("{} {} must have shape [{}] (the channels of input {})",
                                     kRoles[k - 1], describe(in[k]), channels, describe(x)));
    }
  }
  check_eps("batch_norm", attrs[0].f);
  return x;
}

TensorType infer_layer_norm(std::span<const TensorType> in, std::span<AttrValue> attrs) {
  const TensorType& x = in[0];
  require_f32("layer_norm", "input", x);
  const int rank = x.shape.rank();
  const int64_t dims = attrs[0].i;
  if (dims < 1 || dims > rank) {
    fail("layer_norm", fmt::format("normalized_dims {} must be in [1, {}] for input {}", dims,
                                   rank, describe(x)));
  }
  Shape normalized(IntList(std::span(x.shape.begin() + (rank - dims), static_cast<size_t>(dims))));
  static constexpr std::string_view kRoles[] = {"weight", "bias"};
  for (size_t k = 1; k < in.size(); ++k) {
    require_f32("layer_norm", kRoles[k - 1], in[k]);
    if (!(in[k].shape == normalized)) {
      fail("layer_norm", fmt::format("{} {} must have the normalized shape {} of input {}",
                                     kRoles[k - 1], describe(in[k]), normalized.to_string(),
                                     describe(x)));
    }
  }
  check_eps("layer_norm", attrs[1].f);
  return x;
}

template <OpKind K>
TensorType infer_softmax(std::span<const TensorType> in, std::span<AttrValue> attrs) {
  std::string_view name = op_info(K).name;
  require_f32(name, "input", in[0]);
  if (in[0].shape.rank() == 0) fail(name, fmt::format("input {} must have rank >= 1", describe(in[0])));
  attrs[0].i = normalize_axis(name, attrs[0].i, in[0].shape.rank());
  return in[0];
}

TensorType infer_attention(std::span<const TensorType> in, std::span<AttrValue> attrs) {
  constexpr std::string_view kOp = "scaled_dot_product_attention";
  const TensorType &q = in[0], &k = in[1], &v = in[2];
  require_f32(kOp, "query", q);
  require_f32(kOp, "key", k);
  require_f32(kOp, "value", v);
  const int rank = q.shape.rank();
  if (rank < 2 || k.shape.rank() != rank || v.shape.rank() != rank) {
    fail(kOp, fmt::format("query {}, key {} and value {} must have the same rank >= 2",
                          describe(q), describe(k), describe(v)));
  }
  bool batch_equal = true;
  for (int d = 0; d < rank - 2; ++d) {
    batch_equal = batch_equal && q.shape[d] == k.shape[d] && q.shape[d] == v.shape[d];
  }
  if (!batch_equal) {
    fail(kOp, fmt::format("leading dims of query {}, key {} and value {} must be equal",
                          describe(q), describe(k), describe(v)));
  }
  const int64_t e = q.shape[rank - 1];
  const int64_t lk = k.shape[rank - 2], ev = v.shape[rank - 1];
  if (k.shape[rank - 1] != e) {
    fail(kOp, fmt::format("key {} must have the embedding dim {} of query {}", describe(k), e,
                          describe(q)));
  }
  if (v.shape[rank - 2] != lk) {
    fail(kOp, fmt::format("value {} must have the {} positions of key {}", describe(v), lk,
                          describe(k)));
  }
  Shape out = q.shape;
  out[rank - 1] = ev;
  if (in.size() == 4) {
    const TensorType& mask = in[3];
    require_f32(kOp, "mask", mask);
    Shape scores = q.shape;
    scores[rank - 1] = lk;
    Shape b;
    if (!broadcast_shapes(mask.shape, scores, &b) || !(b == scores)) {
      fail(kOp, fmt::format("mask {} does not broadcast to the scores' shape {}", describe(mask),
                            scores.to_string()));
    }
  }
  if (!std::isfinite(attrs[1].f)) {
    fail(kOp, fmt::format("scale must be finite (0 means 1/sqrt(E)), got {}", attrs[1].f));
  }
  return {DType::kF32, out};
}

// ---- the table ----------------------------------------------------------------------------

using C = OpClass;
constexpr std::span<const AttrSpec> kNoAttrs{};

const OpInfo kOps[] = {
    {OpKind::kParameter, "parameter", C::kParameter, 0, 0, kParameterAttrs, infer_parameter, nullptr},
    {OpKind::kNeg, "neg", C::kUnary, 1, 1, kNoAttrs, infer_unary_same<OpKind::kNeg>, ref::neg},
    {OpKind::kAbs, "abs", C::kUnary, 1, 1, kNoAttrs, infer_unary_same<OpKind::kAbs>, ref::abs},
    {OpKind::kExp, "exp", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::exp},
    {OpKind::kLog, "log", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::log},
    {OpKind::kSqrt, "sqrt", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::sqrt},
    {OpKind::kRsqrt, "rsqrt", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::rsqrt},
    {OpKind::kTanh, "tanh", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::tanh},
    {OpKind::kSigmoid, "sigmoid", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::sigmoid},
    {OpKind::kRelu, "relu", C::kUnary, 1, 1, kNoAttrs, infer_unary_same<OpKind::kRelu>, ref::relu},
    {OpKind::kAdd, "add", C::kBinary, 2, 2, kNoAttrs, infer_arith<OpKind::kAdd>, ref::add},
    {OpKind::kSub, "sub", C::kBinary, 2, 2, kNoAttrs, infer_arith<OpKind::kSub>, ref::sub},
    {OpKind::kMul, "mul", C::kBinary, 2, 2, kNoAttrs, infer_arith<OpKind::kMul>, ref::mul},
    {OpKind::kDiv, "div", C::kBinary, 2, 2, kNoAttrs, infer_arith<OpKind::kDiv>, ref::div},
    {OpKind::kPow, "pow", C::kBinary, 2, 2, kNoAttrs, infer_arith<OpKind::kPow>, ref::pow},
    {OpKind::kMaximum, "maximum", C::kBinary, 2, 2, kNoAttrs, infer_minmax<OpKind::kMaximum>, ref::maximum},
    {OpKind::kMinimum, "minimum", C::kBinary, 2, 2, kNoAttrs, infer_minmax<OpKind::kMinimum>, ref::minimum},
    {OpKind::kEq, "eq", C::kCompare, 2, 2, kNoAttrs, infer_compare<OpKind::kEq>, ref::eq},
    {OpKind::kLt, "lt", C::kCompare, 2, 2, kNoAttrs, infer_compare<OpKind::kLt>, ref::lt},
    {OpKind::kGt, "gt", C::kCompare, 2, 2, kNoAttrs, infer_compare<OpKind::kGt>, ref::gt},
    {OpKind::kWhere, "where", C::kWhere, 3, 3, kNoAttrs, infer_where, ref::where},
    {OpKind::kCast, "cast", C::kCast, 1, 1, kCastAttrs, infer_cast, ref::cast},
    {OpKind::kMatmul, "matmul", C::kMatmul, 2, 2, kNoAttrs, infer_matmul, ref::matmul},
    {OpKind::kSum, "sum", C::kReduce, 1, 1, kReduceAttrs, infer_sum, ref::sum},
    {OpKind::kMean, "mean", C::kReduce, 1, 1, kReduceAttrs, infer_mean, ref::mean},
    {OpKind::kMax, "max", C::kReduce, 1, 1, kReduceAttrs, infer_max, ref::max},
    {OpKind::kArgmax, "argmax", C::kReduce, 1, 1, kArgmaxAttrs, infer_argmax, ref::argmax},
    {OpKind::kReshape, "reshape", C::kLayout, 1, 1, kShapeAttrs, infer_reshape, ref::reshape},
    {OpKind::kPermute, "permute", C::kLayout, 1, 1, kPermuteAttrs, infer_permute, ref::permute},
    {OpKind::kTranspose, "transpose", C::kLayout, 1, 1, kTransposeAttrs, infer_transpose, ref::transpose},
    {OpKind::kBroadcastTo, "broadcast_to", C::kLayout, 1, 1, kShapeAttrs, infer_broadcast_to, ref::broadcast_to},
    {OpKind::kConcat, "concat", C::kLayout, 1, kVariadic, kConcatAttrs, infer_concat, ref::concat},
    {OpKind::kSlice, "slice", C::kLayout, 1, 1, kSliceAttrs, infer_slice, ref::slice},
    {OpKind::kConv2d, "conv2d", C::kNn, 2, 3, kConv2dAttrs, infer_conv2d, ref::conv2d},
    {OpKind::kMaxPool2d, "max_pool2d", C::kNn, 1, 1, kMaxPool2dAttrs, infer_max_pool2d, ref::max_pool2d},
    {OpKind::kAvgPool2d, "avg_pool2d", C::kNn, 1, 1, kAvgPool2dAttrs, infer_avg_pool2d, ref::avg_pool2d},
    {OpKind::kAdaptiveAvgPool2d, "adaptive_avg_pool2d", C::kNn, 1, 1, kAdaptiveAvgPool2dAttrs, infer_adaptive_avg_pool2d, ref::adaptive_avg_pool2d},
    {OpKind::kLinear, "linear", C::kNn, 2, 3, kNoAttrs, infer_linear, ref::linear},
    {OpKind::kFlatten, "flatten", C::kNn, 1, 1, kFlattenAttrs, infer_flatten, ref::flatten},
    {OpKind::kPad, "pad", C::kNn, 1, 1, kPadAttrs, infer_pad, ref::pad},
    {OpKind::kDropout, "dropout", C::kNn, 1, 1, kDropoutAttrs, infer_dropout, ref::dropout},
    {OpKind::kEmbedding, "embedding", C::kNn, 2, 2, kNoAttrs, infer_embedding, ref::embedding},
    {OpKind::kGather, "gather", C::kNn, 2, 2, kIndexAxisAttrs, infer_gather, ref::gather},
    {OpKind::kIndexSelect, "index_select", C::kNn, 2, 2, kIndexAxisAttrs, infer_index_select, ref::index_select},
    {OpKind::kFull, "full", C::kSource, 0, 0, kFullAttrs, infer_full, ref::full},
    {OpKind::kArange, "arange", C::kSource, 0, 0, kArangeAttrs, infer_arange, ref::arange},
    {OpKind::kUniform, "uniform", C::kSource, 0, 0, kUniformAttrs, infer_uniform, ref::uniform},
    {OpKind::kNormal, "normal", C::kSource, 0, 0, kNormalAttrs, infer_normal, ref::normal},
    {OpKind::kGelu, "gelu", C::kUnary, 1, 1, kGeluAttrs, infer_unary_float, ref::gelu},
    {OpKind::kSilu, "silu", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::silu},
    {OpKind::kHardswish, "hardswish", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::hardswish},
    {OpKind::kHardsigmoid, "hardsigmoid", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::hardsigmoid},
    {OpKind::kErf, "erf", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::erf},
    {OpKind::kClamp, "clamp", C::kUnary, 1, 1, kClampAttrs, infer_clamp, ref::clamp},
    {OpKind::kBatchNorm, "batch_norm", C::kNn, 5, 5, kBatchNormAttrs, infer_batch_norm, ref::batch_norm},
    {OpKind::kLayerNorm, "layer_norm", C::kNn, 1, 3, kLayerNormAttrs, infer_layer_norm, ref::layer_norm},
    {OpKind::kSoftmax, "softmax", C::kNn, 1, 1, kSoftmaxAttrs, infer_softmax<OpKind::kSoftmax>, ref::softmax},
    {OpKind::kLogSoftmax, "log_softmax", C::kNn, 1, 1, kSoftmaxAttrs, infer_softmax<OpKind::kLogSoftmax>, ref::log_softmax},
    {OpKind::kScaledDotProductAttention, "scaled_dot_product_attention", C::kNn, 3, 4, kAttentionAttrs,
     infer_attention, ref::scaled_dot_product_attention},
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

TensorType infer_op(OpKind kind, std::span<const TensorType> in, std::span<AttrValue> attrs) {
  const OpInfo& info = op_info(kind);
  int n = static_cast<int>(in.size());
  if (n < info.min_inputs || (info.max_inputs != kVariadic && n > info.max_inputs)) {
    std::string want = info.max_inputs == kVariadic
                           ? fmt::format("at least {}", info.min_inputs)
                           : info.min_inputs == info.max_inputs
                                 ? fmt::format("{}", info.min_inputs)
                                 : fmt::format("{} to {}", info.min_inputs, info.max_inputs);
    fail(info.name, fmt::format("takes {} tensor inputs, got {}", want, n));
  }
  if (attrs.size() != info.attrs.size()) {
    fail(info.name, fmt::format("expects {} attributes, got {}", info.attrs.size(), attrs.size()));
  }
  for (size_t i = 0; i < attrs.size(); ++i) {
    if (attrs[i].kind != info.attrs[i].kind) {
      fail(info.name, fmt::format("attribute '{}' must be {}, got {}", info.attrs[i].name,
                                  attr_kind_name(info.attrs[i].kind), attr_kind_name(attrs[i].kind)));
    }
  }
  TensorType out = info.infer(in, attrs);
  checked_product(info.name, out.shape);  // e.g. broadcasting [2^30, 1] with [1, 2^30]
  return out;
}

}  // namespace tracecache
