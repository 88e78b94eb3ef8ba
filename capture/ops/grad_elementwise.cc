#include "capture/ops/grad_elementwise.h"

#include "capture/ops/attr_views.h"
#include "capture/ops/ops.h"

namespace tracecache::grad {

namespace {

const Shape& shape_of(GradBuilder& b, GradValue v) { return b.type(v).shape; }

// `g` (the result's gradient) brought back to the shape of input i by summing broadcast dims.
void set_summed(GradBuilder& b, const GradArgs& a, std::span<GradValue> grads, size_t i, GradValue g) {
  if (a.wanted[i]) grads[i] = b.sum_to(g, shape_of(b, a.inputs[i]));
}

// `g` of a reduction over `axes` (normalized), broadcast back to the input's shape.
GradValue unreduce(GradBuilder& b, GradValue g, const Shape& in, const IntList& axes, bool keepdim) {
  if (!keepdim) {
    Shape kept = in;
    for (int64_t axis : axes) kept[static_cast<int>(axis)] = 1;
    g = b.reshape(g, kept);
  }
  return b.broadcast_to(g, in);
}

}  // namespace

TRACECACHE_GRAD_RULE(neg) { grads[0] = b.neg(a.grad); }

// d exp(x) = exp(x): the result itself.
TRACECACHE_GRAD_RULE(exp) { grads[0] = b.mul(a.grad, a.output); }

TRACECACHE_GRAD_RULE(log) { grads[0] = b.div(a.grad, a.inputs[0]); }

// 1 - tanh(x)^2, from the result.
TRACECACHE_GRAD_RULE(tanh) {
  grads[0] = b.mul(a.grad, b.sub(b.scalar(1), b.mul(a.output, a.output)));
}

// sigmoid(x) (1 - sigmoid(x)), from the result.
TRACECACHE_GRAD_RULE(sigmoid) {
  grads[0] = b.mul(a.grad, b.mul(a.output, b.sub(b.scalar(1), a.output)));
}

// PyTorch's threshold_backward: the gradient passes where the result is > 0 (so 0 at x = 0).
TRACECACHE_GRAD_RULE(relu) {
  GradValue positive = b.op(OpKind::kGt, {a.output, b.scalar(0, b.type(a.output).dtype)});
  grads[0] = b.where(positive, a.grad, b.scalar(0));
}

TRACECACHE_GRAD_RULE(add) {
  set_summed(b, a, grads, 0, a.grad);
  set_summed(b, a, grads, 1, a.grad);
}

TRACECACHE_GRAD_RULE(sub) {
  set_summed(b, a, grads, 0, a.grad);
  if (a.wanted[1]) set_summed(b, a, grads, 1, b.neg(a.grad));
}

TRACECACHE_GRAD_RULE(mul) {
  if (a.wanted[0]) set_summed(b, a, grads, 0, b.mul(a.grad, a.inputs[1]));
  if (a.wanted[1]) set_summed(b, a, grads, 1, b.mul(a.grad, a.inputs[0]));
}

// d(x / y) = g / y and -g x / y^2 (PyTorch's div backward).
TRACECACHE_GRAD_RULE(div) {
  if (a.wanted[0]) set_summed(b, a, grads, 0, b.div(a.grad, a.inputs[1]));
  if (a.wanted[1]) {
    GradValue y = a.inputs[1];
    set_summed(b, a, grads, 1, b.neg(b.div(b.mul(a.grad, a.inputs[0]), b.mul(y, y))));
  }
}

// C = A @ B with NumPy's 1-D promotion and broadcast batch dims: dA = dC @ B^T and
// dB = A^T @ dC on the promoted (rank >= 2) forms, summed over broadcast batch dims, reshaped back.
TRACECACHE_GRAD_RULE(matmul) {
  const Shape& sa = shape_of(b, a.inputs[0]);
  const Shape& sb = shape_of(b, a.inputs[1]);
  Shape pa = sa, pb = sb;
  if (pa.rank() == 1) pa.insert(0, 1);
  if (pb.rank() == 1) pb.push_back(1);
  GradValue A = b.reshape(a.inputs[0], pa);
  GradValue B = b.reshape(a.inputs[1], pb);
  // The result's gradient with the removed dims put back.
  Shape pc = shape_of(b, a.grad);
  if (sa.rank() == 1) pc.insert(pc.rank() - (sb.rank() == 1 ? 0 : 1), 1);
  if (sb.rank() == 1) pc.push_back(1);
  GradValue G = b.reshape(a.grad, pc);
  auto t = [&](GradValue v) {
    const int r = b.type(v).shape.rank();
    return b.op(OpKind::kTranspose, {v}, {AttrValue::of_int(r - 2), AttrValue::of_int(r - 1)});
  };
  if (a.wanted[0]) grads[0] = b.reshape(b.sum_to(b.op(OpKind::kMatmul, {G, t(B)}), pa), sa);
  if (a.wanted[1]) grads[1] = b.reshape(b.sum_to(b.op(OpKind::kMatmul, {t(A), G}), pb), sb);
}

TRACECACHE_GRAD_RULE(sum) {
  ReduceAttrs r(a.attrs);
  grads[0] = unreduce(b, a.grad, shape_of(b, a.inputs[0]), r.axes(), r.keepdim());
}

TRACECACHE_GRAD_RULE(mean) {
  ReduceAttrs r(a.attrs);
  const Shape& in = shape_of(b, a.inputs[0]);
  int64_t count = 1;
  for (int64_t axis : r.axes()) count *= in[static_cast<int>(axis)];
  // An empty reduction's mean is NaN and so is its gradient (PyTorch: 0 / 0).
  const double inv = count == 0 ? 0.0 : 1.0 / static_cast<double>(count);
  grads[0] = b.scale(unreduce(b, a.grad, in, r.axes(), r.keepdim()), inv);
}

TRACECACHE_GRAD_RULE(reshape) { grads[0] = b.reshape(a.grad, shape_of(b, a.inputs[0])); }

TRACECACHE_GRAD_RULE(transpose) {
  TransposeAttrs t(a.attrs);
  grads[0] = b.op(OpKind::kTranspose, {a.grad}, {AttrValue::of_int(t.dim0()), AttrValue::of_int(t.dim1())});
}

TRACECACHE_GRAD_RULE(permute) {
  PermuteAttrs p(a.attrs);
  IntList inverse = p.perm();
  for (int i = 0; i < p.perm().size(); ++i) inverse[static_cast<int>(p.perm()[i])] = i;
  grads[0] = b.op(OpKind::kPermute, {a.grad}, {AttrValue::of_ints(inverse)});
}

TRACECACHE_GRAD_RULE(broadcast_to) { grads[0] = b.sum_to(a.grad, shape_of(b, a.inputs[0])); }

}  // namespace tracecache::grad
