// Inference rules of the elementwise, matmul, reduction and layout ops (their registry rows:
// ops.cc; the contract: InferFn in ops.h).
#include "capture/ops/infer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "capture/ops/attr_views.h"
#include "capture/ops/infer_checks.h"

namespace tracecache::infer {

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

// exp, log, tanh, ...: a floating operand keeps its dtype (f64 computes in f64, bf16 and f16 in
// f32 and round); integers and bool give f32, as PyTorch's default dtype.
Check infer_unary_float(std::span<const TensorType> in, std::span<AttrValue>, TensorType* result) {
  *result = TensorType{is_floating(in[0].dtype) ? in[0].dtype : DType::kF32, in[0].shape};
  return std::nullopt;
}

template <OpKind K>
Check infer_arith(std::span<const TensorType> in, std::span<AttrValue>, TensorType* result) {
  std::string_view name = op_info(K).name;
  Shape s;
  RETURN_IF_ERROR(broadcast2(name, in[0], in[1], &s));
  DType t = promote(in[0].dtype, in[1].dtype);
  if (t == DType::kBool) return fail(name, "both operands are bool; cast them to a numeric dtype first");
  if (K == OpKind::kDiv && !is_floating(t)) t = DType::kF32;  // true division, as in PyTorch
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
  *result = TensorType{is_floating(in[0].dtype) ? in[0].dtype : DType::kF32, s};
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

// The instances the registry table names.
template TRACECACHE_INFER_RULE(infer_unary_same<OpKind::kAbs>);
template TRACECACHE_INFER_RULE(infer_unary_same<OpKind::kCeil>);
template TRACECACHE_INFER_RULE(infer_unary_same<OpKind::kFloor>);
template TRACECACHE_INFER_RULE(infer_unary_same<OpKind::kNeg>);
template TRACECACHE_INFER_RULE(infer_unary_same<OpKind::kRelu>);
template TRACECACHE_INFER_RULE(infer_unary_same<OpKind::kRound>);
template TRACECACHE_INFER_RULE(infer_arith<OpKind::kAdd>);
template TRACECACHE_INFER_RULE(infer_arith<OpKind::kDiv>);
template TRACECACHE_INFER_RULE(infer_arith<OpKind::kFmod>);
template TRACECACHE_INFER_RULE(infer_arith<OpKind::kMul>);
template TRACECACHE_INFER_RULE(infer_arith<OpKind::kPow>);
template TRACECACHE_INFER_RULE(infer_arith<OpKind::kRemainder>);
template TRACECACHE_INFER_RULE(infer_arith<OpKind::kSub>);
template TRACECACHE_INFER_RULE(infer_arith<OpKind::kTruncDiv>);
template TRACECACHE_INFER_RULE(infer_minmax<OpKind::kMaximum>);
template TRACECACHE_INFER_RULE(infer_minmax<OpKind::kMinimum>);
template TRACECACHE_INFER_RULE(infer_compare<OpKind::kEq>);
template TRACECACHE_INFER_RULE(infer_compare<OpKind::kGt>);
template TRACECACHE_INFER_RULE(infer_compare<OpKind::kLt>);
template TRACECACHE_INFER_RULE(infer_extreme<OpKind::kMax>);
template TRACECACHE_INFER_RULE(infer_extreme<OpKind::kMin>);
template TRACECACHE_INFER_RULE(infer_arg_extreme<OpKind::kArgmax>);
template TRACECACHE_INFER_RULE(infer_arg_extreme<OpKind::kArgmin>);

}  // namespace tracecache::infer
