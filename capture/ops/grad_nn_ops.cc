#include "capture/ops/grad_nn_ops.h"

#include <limits>

#include "capture/ops/attr_views.h"
#include "capture/ops/nn_numerics.h"
#include "capture/ops/ops.h"

namespace tracecache::grad {

namespace {

const Shape& shape_of(GradBuilder& b, GradValue v) { return b.type(v).shape; }

GradValue zeros(GradBuilder& b, const Shape& shape) { return b.full(shape, 0.0); }

GradValue scatter_add(GradBuilder& b, GradValue x, GradValue index, GradValue src, int64_t axis) {
  return b.op(OpKind::kScatterAdd, {x, index, src}, {AttrValue::of_int(axis)});
}

// A reduction of `v` over `axes`, keeping them as size-1 dims (so the result broadcasts back).
GradValue reduce_keep(GradBuilder& b, OpKind op, GradValue v, const IntList& axes) {
  return b.op(op, {v}, {AttrValue::of_ints(axes), AttrValue::of_bool(true)});
}

GradValue sum_along(GradBuilder& b, GradValue v, int64_t axis) {
  return reduce_keep(b, OpKind::kSum, v, IntList{axis});
}

// `v` with its last two dims swapped.
GradValue transpose_last(GradBuilder& b, GradValue v) {
  const int r = shape_of(b, v).rank();
  return b.op(OpKind::kTranspose, {v}, {AttrValue::of_int(r - 2), AttrValue::of_int(r - 1)});
}

GradValue matmul(GradBuilder& b, GradValue x, GradValue y) { return b.op(OpKind::kMatmul, {x, y}); }

// The gradient of softmax along `axis` from its result y: y (g - sum(g y)).
GradValue softmax_backward(GradBuilder& b, GradValue y, GradValue g, int64_t axis) {
  return b.mul(y, b.sub(g, sum_along(b, b.mul(g, y), axis)));
}

// arange(n) as i64 reshaped to `shape` (n elements).
GradValue positions(GradBuilder& b, int64_t n, const Shape& shape) {
  GradValue r = b.op(OpKind::kArange, {}, {AttrValue::of_float(0), AttrValue::of_float(static_cast<double>(n)),
                                          AttrValue::of_float(1), AttrValue::of_dtype(DType::kI64)});
  return b.reshape(r, shape);
}

}  // namespace

// weight [num, dim], indices of any shape: the rows of g, one per index, summed into the rows
// they were read from (clamped as the forward reads): scatter_add along axis 0 of zeros
// [num, dim], the indices flattened and broadcast across dim.
TRACECACHE_GRAD_RULE(embedding) {
  const Shape& w = shape_of(b, a.inputs[0]);
  const int64_t n = shape_of(b, a.inputs[1]).numel();
  const Shape rows{n, w[1]};
  GradValue index = b.broadcast_to(b.reshape(a.inputs[1], Shape{n, 1}), rows);
  grads[0] = scatter_add(b, zeros(b, w), index, b.reshape(a.grad, rows), 0);
}

// The inverse map of gather: g scattered back to where each element was read, duplicates summed.
TRACECACHE_GRAD_RULE(gather) {
  const int64_t axis = AxisAttrs(a.attrs).axis();
  grads[0] = scatter_add(b, zeros(b, shape_of(b, a.inputs[0])), a.inputs[1], a.grad, axis);
}

// As gather, with the rank-1 index broadcast to g's shape along `axis`.
TRACECACHE_GRAD_RULE(index_select) {
  const int64_t axis = AxisAttrs(a.attrs).axis();
  const Shape& g = shape_of(b, a.grad);
  Shape line;
  for (int d = 0; d < g.rank(); ++d) line.push_back(d == axis ? g[d] : 1);
  GradValue index = b.broadcast_to(b.reshape(a.inputs[1], line), g);
  grads[0] = scatter_add(b, zeros(b, shape_of(b, a.inputs[0])), index, a.grad, axis);
}

// PyTorch's layer_norm backward, with the statistics recomputed in f32 ops over the normalized
// dims: xhat = (x - mean) rstd, gw = g * weight (or g),
//   dx = rstd (gw - mean(gw) - xhat mean(gw xhat)),  dweight = sum(g xhat),  dbias = sum(g)
// (the last two over the leading dims).
TRACECACHE_GRAD_RULE(layer_norm) {
  const LayerNormAttrs attrs(a.attrs);
  GradValue x = a.inputs[0];
  const int rank = shape_of(b, x).rank();
  IntList axes;
  for (int d = rank - static_cast<int>(attrs.normalized_dims()); d < rank; ++d) axes.push_back(d);
  const bool has_weight = a.inputs.size() > 1, has_bias = a.inputs.size() > 2;
  if (has_bias && a.wanted[2]) grads[2] = b.sum_to(a.grad, shape_of(b, a.inputs[2]));
  const bool want_weight = has_weight && a.wanted[1];
  if (!a.wanted[0] && !want_weight) return;
  GradValue centered = b.sub(x, reduce_keep(b, OpKind::kMean, x, axes));
  GradValue var = reduce_keep(b, OpKind::kMean, b.mul(centered, centered), axes);
  GradValue rstd = b.op(OpKind::kRsqrt, {b.add(var, b.scalar(attrs.eps()))});
  GradValue xhat = b.mul(centered, rstd);
  if (a.wanted[0]) {
    GradValue gw = has_weight ? b.mul(a.grad, a.inputs[1]) : a.grad;
    GradValue inner = b.sub(b.sub(gw, reduce_keep(b, OpKind::kMean, gw, axes)),
                            b.mul(xhat, reduce_keep(b, OpKind::kMean, b.mul(gw, xhat), axes)));
    grads[0] = b.mul(rstd, inner);
  }
  if (want_weight) grads[1] = b.sum_to(b.mul(a.grad, xhat), shape_of(b, a.inputs[1]));
}

// From the result y: y (g - sum(g y)) along the axis.
TRACECACHE_GRAD_RULE(softmax) {
  grads[0] = softmax_backward(b, a.output, a.grad, AxisAttrs(a.attrs).axis());
}

// From the result y: g - exp(y) sum(g) along the axis.
TRACECACHE_GRAD_RULE(log_softmax) {
  const int64_t axis = AxisAttrs(a.attrs).axis();
  grads[0] = b.sub(a.grad, b.mul(b.op(OpKind::kExp, {a.output}), sum_along(b, a.grad, axis)));
}

// The probabilities recomputed with ops: S = q k^T scale (+ mask) (-inf where causal hides a
// key), P = softmax(S). Then dv = P^T g, dP = g v^T, dS = P (dP - sum(dP P)),
// dq = dS k scale, dk = dS^T q scale, dmask = dS summed to the mask's shape.
TRACECACHE_GRAD_RULE(scaled_dot_product_attention) {
  const AttentionAttrs attrs(a.attrs);
  GradValue q = a.inputs[0], k = a.inputs[1], v = a.inputs[2];
  const Shape& qs = shape_of(b, q);
  const int rank = qs.rank();
  const int64_t lq = qs[rank - 2], lk = shape_of(b, k)[rank - 2];
  const double scale = nn::attention_scale(attrs.scale(), qs[rank - 1]);
  const bool has_mask = a.inputs.size() > 3;
  GradValue s = b.scale(matmul(b, q, transpose_last(b, k)), scale);
  if (has_mask) s = b.add(s, a.inputs[3]);
  if (attrs.causal()) {
    GradValue hidden = b.op(OpKind::kGt, {positions(b, lk, Shape{1, lk}), positions(b, lq, Shape{lq, 1})});
    s = b.where(hidden, b.scalar(-std::numeric_limits<double>::infinity()), s);
  }
  const int64_t last = rank - 1;
  GradValue p = b.op(OpKind::kSoftmax, {s}, {AttrValue::of_int(last)});
  if (a.wanted[2]) grads[2] = matmul(b, transpose_last(b, p), a.grad);
  if (!a.wanted[0] && !a.wanted[1] && !(has_mask && a.wanted[3])) return;
  GradValue ds = softmax_backward(b, p, matmul(b, a.grad, transpose_last(b, v)), last);
  if (a.wanted[0]) grads[0] = b.scale(matmul(b, ds, k), scale);
  if (a.wanted[1]) grads[1] = b.scale(matmul(b, transpose_last(b, ds), q), scale);
  if (has_mask && a.wanted[3]) grads[3] = b.sum_to(ds, shape_of(b, a.inputs[3]));
}

// out = x + scattered src: dx = g, dsrc = g read back where each src element went (gather clamps
// the same way).
TRACECACHE_GRAD_RULE(scatter_add) {
  if (a.wanted[0]) grads[0] = a.grad;
  if (a.wanted[2]) {
    grads[2] = b.op(OpKind::kGather, {a.grad, a.inputs[1]}, {AttrValue::of_int(AxisAttrs(a.attrs).axis())});
  }
}

}  // namespace tracecache::grad
