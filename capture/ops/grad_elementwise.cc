#include "capture/ops/grad_elementwise.h"

#include <numbers>

#include "capture/ops/attr_views.h"
#include "capture/ops/ops.h"

namespace tracecache::grad {

namespace {

const Shape& shape_of(GradBuilder& b, GradValue v) { return b.type(v).shape; }

// `g` (the result's gradient) brought back to the shape of input i by summing broadcast dims.
void set_summed(GradBuilder& b, const GradArgs& a, std::span<GradValue> grads, size_t i, GradValue g) {
  if (a.wanted[i]) grads[i] = b.sum_to(g, shape_of(b, a.inputs[i]));
}

// `v`, a result of a reduction over `axes` (normalized), with the reduced dims put back as 1.
GradValue keep_dims(GradBuilder& b, GradValue v, const Shape& in, const IntList& axes) {
  Shape kept = in;
  for (int64_t axis : axes) kept[static_cast<int>(axis)] = 1;
  return b.reshape(v, kept);
}

// `g` of a reduction over `axes` (normalized), broadcast back to the input's shape.
GradValue unreduce(GradBuilder& b, GradValue g, const Shape& in, const IntList& axes, bool keepdim) {
  if (!keepdim) g = keep_dims(b, g, in, axes);
  return b.broadcast_to(g, in);
}

GradValue lt(GradBuilder& b, GradValue x, GradValue y) { return b.op(OpKind::kLt, {x, y}); }
GradValue gt(GradBuilder& b, GradValue x, GradValue y) { return b.op(OpKind::kGt, {x, y}); }
GradValue eq(GradBuilder& b, GradValue x, GradValue y) { return b.op(OpKind::kEq, {x, y}); }
// Logical and of two bool values (minimum on bool).
GradValue both(GradBuilder& b, GradValue x, GradValue y) { return b.op(OpKind::kMinimum, {x, y}); }
GradValue unary(GradBuilder& b, OpKind op, GradValue x) { return b.op(op, {x}); }

// `x` as an [outer, n, inner] view with `axis` (of size n) in the middle.
Shape around_axis(const Shape& s, int axis) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= s[d];
  for (int d = axis + 1; d < s.rank(); ++d) inner *= s[d];
  return Shape{outer, s[axis], inner};
}

// pad's attributes padding dim `dim` of a rank-`rank` value by `before` and `after` (negative
// crops): pad lists pairs from the last dim backwards.
AttrValue pads_of_dim(int rank, int dim, int64_t before, int64_t after) {
  IntList pads;
  for (int d = rank - 1; d >= dim; --d) {
    pads.push_back(d == dim ? before : 0);
    pads.push_back(d == dim ? after : 0);
  }
  return AttrValue::of_ints(pads);
}

GradValue pad(GradBuilder& b, GradValue v, int dim, int64_t before, int64_t after) {
  return b.op(OpKind::kPad, {v}, {pads_of_dim(b.type(v).shape.rank(), dim, before, after), AttrValue::of_float(0)});
}

}  // namespace

TRACECACHE_GRAD_RULE(neg) { grads[0] = b.neg(a.grad); }

// g * sign(x), PyTorch's sgn: 0 at x = 0 (and at NaN).
TRACECACHE_GRAD_RULE(abs) {
  GradValue x = a.inputs[0];
  GradValue zero = b.scalar(0);
  GradValue sign = b.sub(b.mask_to_float(gt(b, x, zero)), b.mask_to_float(lt(b, x, zero)));
  grads[0] = b.mul(a.grad, sign);
}

// d exp(x) = exp(x): the result itself.
TRACECACHE_GRAD_RULE(exp) { grads[0] = b.mul(a.grad, a.output); }

TRACECACHE_GRAD_RULE(log) { grads[0] = b.div(a.grad, a.inputs[0]); }

// g / (2 sqrt(x)), from the result (PyTorch's formula): inf at x = 0.
TRACECACHE_GRAD_RULE(sqrt) { grads[0] = b.div(a.grad, b.scale(a.output, 2)); }

// -0.5 g rsqrt(x)^3, from the result (PyTorch's formula): -inf at x = 0.
TRACECACHE_GRAD_RULE(rsqrt) {
  GradValue r = a.output;
  grads[0] = b.mul(b.scale(a.grad, -0.5), b.mul(b.mul(r, r), r));
}

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

// PyTorch's pow_backward_self and pow_backward_exponent:
//   d/dx x^y = y x^(y-1), and 0 wherever y == 0 (also at x = 0, where y x^(y-1) is 0 * inf);
//   d/dy x^y = x^y log(x), and 0 where x == 0 and y >= 0 (0^y is flat or 1 there; for y < 0
//   the formula's inf * -inf = -inf is kept, as PyTorch keeps it).
TRACECACHE_GRAD_RULE(pow) {
  GradValue x = a.inputs[0], y = a.inputs[1];
  GradValue zero = b.scalar(0);
  if (a.wanted[0]) {
    GradValue d = b.mul(a.grad, b.mul(y, b.op(OpKind::kPow, {x, b.sub(y, b.scalar(1))})));
    set_summed(b, a, grads, 0, b.where(eq(b, y, zero), zero, d));
  }
  if (a.wanted[1]) {
    GradValue d = b.mul(a.output, unary(b, OpKind::kLog, x));
    GradValue masked = b.where(lt(b, y, zero), d, b.where(eq(b, x, zero), zero, d));
    set_summed(b, a, grads, 1, b.mul(a.grad, masked));
  }
}

namespace {

// PyTorch 1.13's maximum/minimum backward: where the operands tie, each gets half the
// gradient; otherwise the one that was chosen gets all of it.
void minmax_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> grads, bool is_max) {
  GradValue x = a.inputs[0], y = a.inputs[1];
  GradValue zero = b.scalar(0);
  GradValue shared = b.where(eq(b, x, y), b.scale(a.grad, 0.5), a.grad);
  // x loses where it is below y (maximum) or above it (minimum), and y the other way round.
  GradValue x_loses = is_max ? lt(b, x, y) : gt(b, x, y);
  GradValue y_loses = is_max ? gt(b, x, y) : lt(b, x, y);
  if (a.wanted[0]) set_summed(b, a, grads, 0, b.where(x_loses, zero, shared));
  if (a.wanted[1]) set_summed(b, a, grads, 1, b.where(y_loses, zero, shared));
}

}  // namespace

// Ties (x == y): g / 2 to each operand (PyTorch 1.13).
TRACECACHE_GRAD_RULE(maximum) { minmax_grad(b, a, grads, /*is_max=*/true); }
TRACECACHE_GRAD_RULE(minimum) { minmax_grad(b, a, grads, /*is_max=*/false); }

// where(cond, x, y): the condition (bool) gets nothing; x gets g where cond holds and y where it
// does not, each summed back over its broadcast dims.
TRACECACHE_GRAD_RULE(where) {
  GradValue cond = a.inputs[0];
  GradValue zero = b.scalar(0);
  if (a.wanted[1]) set_summed(b, a, grads, 1, b.where(cond, a.grad, zero));
  if (a.wanted[2]) set_summed(b, a, grads, 2, b.where(cond, zero, a.grad));
}

// Only f32 is floating, so a wanted input is f32 and the result that carried a gradient is f32
// too (a cast to an integer or bool result carries none): the identity. A cast from an integer
// or bool input is never wanted.
TRACECACHE_GRAD_RULE(cast) {
  (void)b;  // records nothing
  grads[0] = a.grad;
}

// C = A @ B with NumPy's 1-D promotion and broadcast batch dims: dA = dC @ B^T and
// dB = A^T @ dC on the promoted (rank >= 2) forms, summed over broadcast batch dims, reshaped back.
TRACECACHE_GRAD_RULE(matmul) {
  const Shape& sa = shape_of(b, a.inputs[0]);
  const Shape& sb = shape_of(b, a.inputs[1]);
  Shape pa = sa, pb = sb;
  if (pa.rank() == 1) pa.insert(0, 1);
  if (pb.rank() == 1) pb.push_back(1);
  // The result's gradient with the removed dims put back.
  Shape pc = shape_of(b, a.grad);
  if (sa.rank() == 1) pc.insert(pc.rank() - (sb.rank() == 1 ? 0 : 1), 1);
  if (sb.rank() == 1) pc.push_back(1);
  GradValue G = b.reshape(a.grad, pc);
  auto t = [&](GradValue v) {
    const int r = b.type(v).shape.rank();
    return b.op(OpKind::kTranspose, {v}, {AttrValue::of_int(r - 2), AttrValue::of_int(r - 1)});
  };
  // dA needs only B and dB only A: nothing is recorded for an operand that is not wanted.
  if (a.wanted[0]) {
    GradValue B = b.reshape(a.inputs[1], pb);
    grads[0] = b.reshape(b.sum_to(b.op(OpKind::kMatmul, {G, t(B)}), pa), sa);
  }
  if (a.wanted[1]) {
    GradValue A = b.reshape(a.inputs[0], pa);
    grads[1] = b.reshape(b.sum_to(b.op(OpKind::kMatmul, {t(A), G}), pb), sb);
  }
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
  // An empty reduction (count 0) has an input of no elements: its gradient is empty.
  const double inv = count == 0 ? 0.0 : 1.0 / static_cast<double>(count);
  grads[0] = b.scale(unreduce(b, a.grad, in, r.axes(), r.keepdim()), inv);
}

// torch.amax's backward: the gradient of each result is split evenly among the elements equal
// to it (ties share: (g / count) * mask, PyTorch's scale_grad_by_count), so k tied maxima get
// g / k each. (torch.max(x, dim), the index-returning form, instead gives all of it to one
// element; the `max` op is amax.)
TRACECACHE_GRAD_RULE(max) {
  ReduceAttrs r(a.attrs);
  const Shape& in = shape_of(b, a.inputs[0]);
  GradValue result = r.keepdim() ? a.output : keep_dims(b, a.output, in, r.axes());
  GradValue mask = b.mask_to_float(eq(b, a.inputs[0], result));
  GradValue count = b.op(OpKind::kSum, {mask}, {AttrValue::of_ints(r.axes()), AttrValue::of_bool(true)});
  GradValue g = r.keepdim() ? a.grad : keep_dims(b, a.grad, in, r.axes());
  grads[0] = b.mul(b.div(g, count), mask);
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

// Each operand gets its slice of the gradient along the axis.
TRACECACHE_GRAD_RULE(concat) {
  const int64_t axis = AxisAttrs(a.attrs).axis();
  int64_t offset = 0;
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    const int64_t size = shape_of(b, a.inputs[i])[static_cast<int>(axis)];
    if (a.wanted[i]) {
      grads[i] = b.op(OpKind::kSlice, {a.grad}, {AttrValue::of_int(axis), AttrValue::of_int(offset),
                                                 AttrValue::of_int(offset + size), AttrValue::of_int(1)});
    }
    offset += size;
  }
}

// The gradient scattered back into zeros: element i of the result came from start + i * step.
// On the [outer, m, inner] view of g (m results along the axis): with step > 1 each element is
// followed by step - 1 zeros (pad a new axis after it, then merge the two), then the axis is
// padded by `start` zeros before and cut or padded after to the input's length.
TRACECACHE_GRAD_RULE(slice) {
  SliceAttrs s(a.attrs);
  const Shape& in = shape_of(b, a.inputs[0]);
  const int axis = static_cast<int>(s.axis());
  const Shape view = around_axis(shape_of(b, a.grad), axis);
  const int64_t outer = view[0], m = view[1], inner = view[2];
  GradValue g = b.reshape(a.grad, view);
  if (s.step() > 1) {
    g = pad(b, b.reshape(g, Shape{outer, m, 1, inner}), 2, 0, s.step() - 1);
    g = b.reshape(g, Shape{outer, m * s.step(), inner});
  }
  const int64_t placed = b.type(g).shape[1];
  g = pad(b, g, 1, s.start(), in[axis] - s.start() - placed);
  grads[0] = b.reshape(g, in);
}

// PyTorch's GeluBackward (CPU kernel formulas).
//   exact: g (Phi(x) + x phi(x)), Phi(x) = (1 + erf(x / sqrt 2)) / 2, phi(x) = exp(-x^2 / 2) / sqrt(2 pi);
//   tanh:  with u = sqrt(2 / pi) (x + 0.044715 x^3) and t = tanh(u),
//          g ((1 + t) / 2 + (x / 2)(1 - t^2) sqrt(2 / pi)(1 + 3 * 0.044715 x^2)).
// Smooth: no ties.
TRACECACHE_GRAD_RULE(gelu) {
  GradValue x = a.inputs[0];
  GradValue one = b.scalar(1);
  if (!GeluAttrs(a.attrs).tanh()) {
    GradValue cdf = b.scale(b.add(one, unary(b, OpKind::kErf, b.scale(x, std::numbers::sqrt2 / 2))), 0.5);
    GradValue pdf = b.scale(unary(b, OpKind::kExp, b.scale(b.mul(x, x), -0.5)), 0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2);
    grads[0] = b.mul(a.grad, b.add(cdf, b.mul(x, pdf)));
    return;
  }
  const double beta = std::numbers::sqrt2 * std::numbers::inv_sqrtpi;  // sqrt(2 / pi)
  const double kappa = 0.044715;
  GradValue x2 = b.mul(x, x);
  GradValue t = unary(b, OpKind::kTanh, b.scale(b.add(x, b.scale(b.mul(x2, x), kappa)), beta));
  GradValue left_derivative = b.scale(b.add(one, t), 0.5);
  GradValue tanh_derivative = b.sub(one, b.mul(t, t));
  GradValue inner_derivative = b.scale(b.add(one, b.scale(x2, 3 * kappa)), beta);
  GradValue right_derivative = b.mul(b.mul(b.scale(x, 0.5), tanh_derivative), inner_derivative);
  grads[0] = b.mul(a.grad, b.add(left_derivative, right_derivative));
}

// g s (1 + x (1 - s)) with s = sigmoid(x) (PyTorch's formula). Smooth.
TRACECACHE_GRAD_RULE(silu) {
  GradValue x = a.inputs[0];
  GradValue one = b.scalar(1);
  GradValue s = unary(b, OpKind::kSigmoid, x);
  grads[0] = b.mul(b.mul(a.grad, s), b.add(one, b.mul(x, b.sub(one, s))));
}

// PyTorch 1.13's hardswish_backward: 0 for x < -3, g (x / 3 + 1/2) for -3 <= x <= 3, g for
// x > 3. Boundaries: x = -3 gives -g/2 and x = 3 gives 3g/2 (the middle piece, both ends
// included).
TRACECACHE_GRAD_RULE(hardswish) {
  GradValue x = a.inputs[0];
  GradValue middle = b.mul(a.grad, b.add(b.div(x, b.scalar(3)), b.scalar(0.5)));
  grads[0] = b.where(lt(b, x, b.scalar(-3)), b.scalar(0), b.where(gt(b, x, b.scalar(3)), a.grad, middle));
}

// PyTorch 1.13's hardsigmoid_backward: g / 6 for -3 < x < 3, else 0; both ends excluded
// (0 at x = -3 and x = 3).
TRACECACHE_GRAD_RULE(hardsigmoid) {
  GradValue x = a.inputs[0];
  GradValue inside = both(b, gt(b, x, b.scalar(-3)), lt(b, x, b.scalar(3)));
  grads[0] = b.where(inside, b.scale(a.grad, 1.0 / 6.0), b.scalar(0));
}

// g 2 / sqrt(pi) exp(-x^2). Smooth.
TRACECACHE_GRAD_RULE(erf) {
  GradValue x = a.inputs[0];
  GradValue d = b.scale(unary(b, OpKind::kExp, b.neg(b.mul(x, x))), 2 * std::numbers::inv_sqrtpi);
  grads[0] = b.mul(d, a.grad);
}

// PyTorch's clamp_backward: the gradient passes where min <= x <= max, both bounds included
// (so at x == min or x == max it passes), else 0. The bounds compare as the forward does, as
// f32. (PyTorch's relu6 is hardtanh, whose gradient excludes 0 and 6; nn.h's relu6 is this
// clamp, so at exactly 0 and 6 its gradient is g.)
TRACECACHE_GRAD_RULE(clamp) {
  ClampAttrs c(a.attrs);
  GradValue x = a.inputs[0];
  GradValue outside = b.op(OpKind::kMaximum, {lt(b, x, b.scalar(c.min())), gt(b, x, b.scalar(c.max()))});
  grads[0] = b.where(outside, b.scalar(0), a.grad);
}

}  // namespace tracecache::grad
