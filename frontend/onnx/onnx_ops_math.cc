// ONNX op handlers: linear algebra and reductions (the handler contract: onnx_lowering.h).
#include "frontend/onnx/onnx_lowering.h"

#include <algorithm>

#include <fmt/format.h>

namespace tracecache::onnx_import::detail {

// ---- handlers: linear algebra and reductions ------------------------------------------------------

void Importer::matmul() { out(0, op(OpKind::kMatmul, {in(0), in(1)})); }

void Importer::gemm() {
  V a = in(0), w = in(1);
  const double alpha = attr_float("alpha", 1.0f), beta = attr_float("beta", 1.0f);
  const bool ta = attr_int("transA", 0) != 0, tb = attr_int("transB", 0) != 0;
  V c = has_in(2) ? in(2) : nullptr;
  if (a->type.shape.rank() != 2 || w->type.shape.rank() != 2) fail_invalid(where_() + ": Gemm needs rank-2 A and B");
  const int64_t n = w->type.shape[tb ? 0 : 1];
  if (!ta && tb && alpha == 1 && (!c || beta == 1) && a->type.dtype == DType::kF32 && w->type.dtype == DType::kF32 &&
      (!c || (c->type.dtype == DType::kF32 && dims_of(c->type.shape) == std::vector<int64_t>{n}))) {
    out(0, c ? op(OpKind::kLinear, {a, w, c}) : op(OpKind::kLinear, {a, w}));
    return;
  }
  if (ta) a = op(OpKind::kTranspose, {a}, {{"dim0", i(0)}, {"dim1", i(1)}});
  if (tb) w = op(OpKind::kTranspose, {w}, {{"dim0", i(0)}, {"dim1", i(1)}});
  V y = op(OpKind::kMatmul, {a, w});
  if (alpha != 1) y = op(OpKind::kMul, {y, alpha});
  if (c) y = op(OpKind::kAdd, {y, beta == 1 ? c : op(OpKind::kMul, {c, beta})});
  out(0, cast_to(y, in(0)->type.dtype));
}

// Halving: the first half of the axis times the second, an odd last slice carried along, until
// one slice is left; ceil(log2(n)) rounds of at most four ops for any n (every output is a
// product tree of its n inputs, one rounding per multiply as in a sequential product; integers
// wrap as ONNX's). An empty axis gives ones.
V Importer::product_along(V x, int64_t axis) {
  int64_t n = x->type.shape[static_cast<int>(axis)];
  if (n == 0) {
    std::vector<int64_t> dims = dims_of(x->type.shape);
    dims[static_cast<size_t>(axis)] = 1;
    return op(OpKind::kFull, {}, {{"shape", ints(dims)}, {"value", f(1)}, {"dtype", AttrValue::of_dtype(x->type.dtype)}});
  }
  auto part = [&](const V& v, int64_t start, int64_t end) {
    return op(OpKind::kSlice, {v}, {{"axis", i(axis)}, {"start", i(start)}, {"end", i(end)}});
  };
  while (n > 1) {
    const int64_t half = n / 2;
    V p = op(OpKind::kMul, {part(x, 0, half), part(x, half, 2 * half)});
    if (n % 2 != 0) p = op(OpKind::kConcat, {p, part(x, 2 * half, n)}, {{"axis", i(axis)}});
    x = p;
    n = half + n % 2;
  }
  return x;
}

void Importer::reduce() {
  V x = in(0);
  const int r = x->type.shape.rank();
  const bool keep = attr_int("keepdims", 1) != 0;
  const bool noop = attr_int("noop_with_empty_axes", 0) != 0;
  std::vector<int64_t> axes;
  if (node_->op_type() == "ReduceSum") {
    if (has_in(1)) axes = ints_of(in(1), "axes");
  } else if (std::optional<std::vector<int64_t>> a = attr_ints("axes")) {
    axes = *a;
  }
  if (axes.empty() && noop) {
    out(0, x);
    return;
  }
  for (int64_t& a : axes) a = axis_of(a, std::max(r, 1), "axis");
  if (r == 0) axes.clear();
  const std::string& t = node_->op_type();
  V y;
  if (t == "ReduceProd") {
    if (axes.empty()) for (int k = 0; k < r; ++k) axes.push_back(k);
    y = x;
    for (int64_t a : axes) y = product_along(y, a);
    if (!keep) {
      std::vector<int64_t> dims;
      for (int k = 0; k < r; ++k) {
        if (std::find(axes.begin(), axes.end(), k) == axes.end()) dims.push_back(x->type.shape[k]);
      }
      y = reshape_to(y, dims);
    }
    out(0, y);
    return;
  }
  if (t == "ReduceSum") y = reduce_with(OpKind::kSum, x, axes, keep);
  else if (t == "ReduceMean") y = reduce_with(OpKind::kMean, x, axes, keep);
  else if (t == "ReduceMax") y = reduce_with(OpKind::kMax, x, axes, keep);
  else if (t == "ReduceMin") y = reduce_with(OpKind::kMin, x, axes, keep);
  else if (t == "ReduceL1") y = reduce_with(OpKind::kSum, op(OpKind::kAbs, {x}), axes, keep);
  else if (t == "ReduceSumSquare") y = reduce_with(OpKind::kSum, op(OpKind::kMul, {x, x}), axes, keep);
  else if (t == "ReduceL2") y = op(OpKind::kSqrt, {reduce_with(OpKind::kSum, op(OpKind::kMul, {x, x}), axes, keep)});
  else if (t == "ReduceLogSum") y = op(OpKind::kLog, {reduce_with(OpKind::kSum, x, axes, keep)});
  else y = op(OpKind::kLog, {reduce_with(OpKind::kSum, op(OpKind::kExp, {x}), axes, keep)});  // ReduceLogSumExp
  out(0, cast_to(y, x->type.dtype));
}

// The inclusive scan by doubling (Hillis and Steele): y += y shifted by 1, 2, 4, ... along the
// axis, ceil(log2(n)) adds; exclusive shifts the result by one more, reverse shifts the other
// way. Integers are exact (wrapping as ONNX's); a float output is a sum of the same terms in a
// tree order (about log2(n) roundings, a sequential sum has up to n).
void Importer::cumsum() {
  V x = in(0);
  const int r = x->type.shape.rank();
  if (r == 0) fail_invalid(where_() + ": CumSum needs rank >= 1");
  const std::vector<int64_t> axis_v = ints_of(in(1), "axis");
  if (axis_v.size() != 1) fail_invalid(where_() + ": 'axis' must hold one value");
  const int64_t axis = axis_of(axis_v[0], r);
  const bool exclusive = attr_int("exclusive", 0) != 0, reverse = attr_int("reverse", 0) != 0;
  const int64_t n = x->type.shape[static_cast<int>(axis)];
  V y = x;
  for (int64_t s = 1; s < n; s *= 2) y = op(OpKind::kAdd, {y, shift_along(y, axis, s, reverse)});
  if (exclusive && n > 0) y = shift_along(y, axis, 1, reverse);
  out(0, y);
}

// Det of [..., n, n] for n <= 3: the Leibniz formula (ad - bc; Sarrus' rule), from the
// entries as slices. Larger matrices need pivoting (data-dependent): refused.
void Importer::det() {
  V x = in(0);
  require_floating(x, "input");
  const Shape& s = x->type.shape;
  const int r = s.rank();
  if (r < 2 || s[r - 1] != s[r - 2]) fail_invalid(where_() + ": Det needs [..., n, n]");
  const int64_t n = s[r - 1];
  if (n > 3) node_unsupported(fmt::format("{} x {} matrices (Leibniz formula up to 3 x 3)", n, n));
  std::vector<int64_t> batch(s.begin(), s.end() - 2), flat_dims = batch;
  flat_dims.push_back(n * n);
  V flat = reshape_to(x, flat_dims);
  const int64_t last = static_cast<int64_t>(flat_dims.size()) - 1;
  auto e = [&](int64_t row, int64_t col) {
    const int64_t k = row * n + col;
    return reshape_to(op(OpKind::kSlice, {flat}, {{"axis", i(last)}, {"start", i(k)}, {"end", i(k + 1)}}), batch);
  };
  auto mul = [&](const V& a, const V& b) { return op(OpKind::kMul, {a, b}); };
  V d;
  if (n == 0) {
    d = op(OpKind::kFull, {}, {{"shape", ints(batch)}, {"value", f(1)}, {"dtype", AttrValue::of_dtype(x->type.dtype)}});
  } else if (n == 1) {
    d = e(0, 0);
  } else if (n == 2) {
    d = op(OpKind::kSub, {mul(e(0, 0), e(1, 1)), mul(e(0, 1), e(1, 0))});
  } else {
    V plus = op(OpKind::kAdd, {op(OpKind::kAdd, {mul(mul(e(0, 0), e(1, 1)), e(2, 2)), mul(mul(e(0, 1), e(1, 2)), e(2, 0))}),
                               mul(mul(e(0, 2), e(1, 0)), e(2, 1))});
    V minus = op(OpKind::kAdd, {op(OpKind::kAdd, {mul(mul(e(0, 2), e(1, 1)), e(2, 0)), mul(mul(e(0, 0), e(1, 2)), e(2, 1))}),
                                mul(mul(e(0, 1), e(1, 0)), e(2, 2))});
    d = op(OpKind::kSub, {plus, minus});
  }
  out(0, d);
}

void Importer::arg_extreme() {
  V x = in(0);
  const int64_t axis = axis_of(attr_int("axis", 0), x->type.shape.rank());
  const bool keep = attr_int("keepdims", 1) != 0, last = attr_int("select_last_index", 0) != 0;
  if (node_->op_type() == "ArgMax") {
    if (!last) {
      out(0, op(OpKind::kArgmax, {x}, {{"axis", i(axis)}, {"keepdim", b(keep)}}));
      return;
    }
    // The last maximum: the first one of the reversed axis, counted back from the end.
    const int64_t dim = x->type.shape[static_cast<int>(axis)];
    V flipped = op(OpKind::kIndexSelect, {x, arange(dim - 1, -1, -1)}, {{"axis", i(axis)}});
    V first = op(OpKind::kArgmax, {flipped}, {{"axis", i(axis)}, {"keepdim", b(keep)}});
    out(0, op(OpKind::kSub, {static_cast<double>(dim - 1), first}));
  } else {
    out(0, op(OpKind::kArgmin, {x}, {{"axis", i(axis)}, {"keepdim", b(keep)}, {"select_last_index", b(last)}}));
  }
}

void Importer::hardmax() {
  V x = in(0);
  const int r = x->type.shape.rank();
  const int64_t axis = axis_of(attr_int("axis", -1), r);
  const int64_t dim = x->type.shape[static_cast<int>(axis)];
  V first = op(OpKind::kArgmax, {x}, {{"axis", i(axis)}, {"keepdim", b(true)}});
  std::vector<int64_t> pos_shape(static_cast<size_t>(r), 1);
  pos_shape[static_cast<size_t>(axis)] = dim;
  out(0, cast_to(op(OpKind::kEq, {first, reshape_to(arange(0, dim, 1), pos_shape)}), x->type.dtype));
}

void Importer::softmax() {
  V x = in(0);
  const int64_t axis = axis_of(attr_int("axis", -1), std::max(x->type.shape.rank(), 1));
  out(0, op(node_->op_type() == "Softmax" ? OpKind::kSoftmax : OpKind::kLogSoftmax, {x}, {{"axis", i(axis)}}));
}

void Importer::topk() {
  V x = in(0);
  const int64_t k = ints_of(in(1), "K").at(0);
  const int64_t axis = axis_of(attr_int("axis", -1), x->type.shape.rank());
  const bool largest = attr_int("largest", 1) != 0;
  attr_int("sorted", 1);
  const Attrs a = {{"k", i(k)}, {"axis", i(axis)}, {"largest", b(largest)}};
  if (out_used(0)) out(0, op(OpKind::kTopk, {x}, a));
  if (out_used(1)) out(1, op(OpKind::kTopkIndices, {x}, a));
}

// The losses: NegativeLogLikelihoodLoss on log-probabilities x [N, C, d1..dk] and integer
// targets t [N, d1..dk]: loss = -x[n, t, d..] * w[t] (w = 1 without a weight input), 0 where t is
// ignore_index; reduction "none" keeps it, "sum" sums it, "mean" divides the sum by the sum of the
// weights taken (ONNX's definition; without weights, by the count of targets not ignored).
// SoftmaxCrossEntropyLoss is the same on log_softmax(scores, axis 1), which is its second output.
V Importer::nll(const V& x, const V& target, const V* weight) {
  const Shape& xs = x->type.shape;
  const Shape& ts = target->type.shape;
  if (xs.rank() < 2 || ts.rank() != xs.rank() - 1) {
    node_unsupported(fmt::format("input of rank {} with target of rank {} (want [N, C, d...] and [N, d...])",
                                 xs.rank(), ts.rank()));
  }
  if (!is_integral(target->type.dtype)) node_unsupported("a non-integer target");
  require_float(x, "input");
  const std::string reduction = attr_string("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean") node_unsupported("reduction=" + reduction);
  std::optional<int64_t> ignore;
  if (attr("ignore_index") != nullptr) ignore = attr_int("ignore_index", 0);
  V safe = target;
  std::optional<V> keep;  // 1 where the target counts, in x's dtype
  if (ignore) {
    V kept = op(OpKind::kEq, {op(OpKind::kEq, {target, static_cast<double>(*ignore)}), 0.0});
    safe = op(OpKind::kMul, {target, cast_to(kept, target->type.dtype)});  // an ignored target reads class 0
    keep = cast_to(kept, x->type.dtype);
  }
  const V classes = normalize_index(cast_to(safe, DType::kI64), xs[1]);
  std::vector<int64_t> index_dims{ts[0], 1};
  for (int k = 1; k < ts.rank(); ++k) index_dims.push_back(ts[k]);
  V index = reshape_to(classes, index_dims);
  std::vector<int64_t> target_dims(ts.begin(), ts.end());
  V loss = op(OpKind::kNeg, {reshape_to(op(OpKind::kGather, {x, index}, {{"axis", i(1)}}), target_dims)});
  std::optional<V> w;
  if (weight) {
    V flat = reshape_to(classes, {ts.numel()});
    w = reshape_to(op(OpKind::kIndexSelect, {*weight, flat}, {{"axis", i(0)}}), target_dims);
  }
  if (keep) w = w ? op(OpKind::kMul, {*w, *keep}) : *keep;
  if (w) loss = op(OpKind::kMul, {loss, *w});
  if (reduction == "none") return loss;
  std::vector<int64_t> all(static_cast<size_t>(ts.rank()));
  for (int k = 0; k < ts.rank(); ++k) all[static_cast<size_t>(k)] = k;
  V total = reduce_with(OpKind::kSum, loss, all, false);
  if (reduction == "sum") return total;
  if (!w) return op(OpKind::kDiv, {total, static_cast<double>(ts.numel())});
  return op(OpKind::kDiv, {total, reduce_with(OpKind::kSum, *w, all, false)});
}

void Importer::nll_loss() {
  std::optional<V> weight;
  if (has_in(2)) weight = in(2);
  out(0, nll(in(0), in(1), weight ? &*weight : nullptr));
}

void Importer::softmax_cross_entropy() {
  V log_prob = op(OpKind::kLogSoftmax, {in(0)}, {{"axis", i(1)}});
  std::optional<V> weight;
  if (has_in(2)) weight = in(2);
  out(0, nll(log_prob, in(1), weight ? &*weight : nullptr));
  if (out_used(1)) out(1, log_prob);
}

}  // namespace tracecache::onnx_import::detail
