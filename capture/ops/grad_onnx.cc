#include "capture/ops/grad_onnx.h"

#include "capture/core/status.h"
#include "capture/ops/attr_views.h"
#include "capture/ops/ops.h"

namespace tracecache::grad {

namespace {

// `g` brought back to the shape of input i by summing broadcast dims, if input i is wanted.
void set_summed(GradBuilder& b, const GradArgs& a, std::span<GradValue> grads, size_t i, GradValue g) {
  if (a.wanted[i]) grads[i] = b.sum_to(g, b.type(a.inputs[i]).shape);
}

// remainder and fmod: d/da = g; d/db = -g * q, q the quotient rounded as the op rounds.
void mod_grads(GradBuilder& b, const GradArgs& a, std::span<GradValue> grads, GradValue q) {
  set_summed(b, a, grads, 0, a.grad);
  if (a.wanted[1]) set_summed(b, a, grads, 1, b.neg(b.mul(a.grad, q)));
}

}  // namespace

// Piecewise constant: zero gradient everywhere (PyTorch's, also at the jumps), so every wanted
// gradient stays kNoGrad.
void floor(GradBuilder&, const GradArgs&, std::span<GradValue>) {}
void ceil(GradBuilder&, const GradArgs&, std::span<GradValue>) {}
void round(GradBuilder&, const GradArgs&, std::span<GradValue>) {}
void trunc_div(GradBuilder&, const GradArgs&, std::span<GradValue>) {}

TRACECACHE_GRAD_RULE(sin) { grads[0] = b.mul(a.grad, b.op(OpKind::kCos, {a.inputs[0]})); }

TRACECACHE_GRAD_RULE(cos) { grads[0] = b.neg(b.mul(a.grad, b.op(OpKind::kSin, {a.inputs[0]}))); }

// PyTorch: other's gradient is -g * self.div(other, rounding_mode="floor").
TRACECACHE_GRAD_RULE(remainder) {
  GradValue q = a.wanted[1] ? b.op(OpKind::kFloor, {b.div(a.inputs[0], a.inputs[1])}) : kNoGrad;
  mod_grads(b, a, grads, q);
}

// PyTorch: other's gradient is -g * self.div(other, rounding_mode="trunc").
TRACECACHE_GRAD_RULE(fmod) {
  GradValue q = a.wanted[1] ? b.op(OpKind::kTruncDiv, {a.inputs[0], a.inputs[1]}) : kNoGrad;
  mod_grads(b, a, grads, q);
}

// As max: the gradient is shared equally among the elements equal to the minimum.
TRACECACHE_GRAD_RULE(min) { max(b, a, grads); }

// y = conv_transpose2d(x, w) is C_w^T x, C_w the conv2d with w from y's plane to x's; so
// dx = C_w g = conv2d(g, w), and dw = conv2d_weight_grad(grad_out = x, input = g) (the
// gradient of <x, conv2d(g, w)> in w); the bias gets g summed over N, H, W (as PyTorch).
TRACECACHE_GRAD_RULE(conv_transpose2d) {
  const ConvTranspose2dAttrs c(a.attrs);
  const AttrValue stride = AttrValue::of_ints(c.stride()), padding = AttrValue::of_ints(c.padding());
  const AttrValue dilation = AttrValue::of_ints(c.dilation()), groups = AttrValue::of_int(c.groups());
  if (a.wanted[0]) grads[0] = b.op(OpKind::kConv2d, {a.grad, a.inputs[1]}, {stride, padding, dilation, groups});
  if (a.wanted[1]) {
    const Shape& w = b.type(a.inputs[1]).shape;
    grads[1] = b.op(OpKind::kConv2dWeightGrad, {a.inputs[0], a.grad},
                    {stride, padding, dilation, groups, AttrValue::of_ints({w[2], w[3]})});
  }
  if (a.inputs.size() == 3 && a.wanted[2]) {
    grads[2] = b.op(OpKind::kSum, {a.grad}, {AttrValue::of_ints({0, 2, 3}), AttrValue::of_bool(false)});
  }
}

// Each selected element gets its value's gradient, the others 0 (PyTorch's topk backward):
// scatter_add of g into zeros at topk_indices (the indices of one row are distinct).
TRACECACHE_GRAD_RULE(topk) {
  const TopkAttrs t(a.attrs);
  const Shape& x = b.type(a.inputs[0]).shape;
  GradValue index = b.op(OpKind::kTopkIndices, {a.inputs[0]},
                         {AttrValue::of_int(t.k()), AttrValue::of_int(t.axis()), AttrValue::of_bool(t.largest())});
  grads[0] = b.op(OpKind::kScatterAdd, {b.full(x, 0), index, a.grad}, {AttrValue::of_int(t.axis())});
}

// PyTorch's scatter (reduction none) and scatter_add backward: x gets g, with the scattered
// positions zeroed for none; updates get g gathered at the index (also updates a later
// duplicate overwrote, as PyTorch). Negative indices are wrapped first, as the forward does.
TRACECACHE_GRAD_RULE(scatter_elements) {
  const ScatterElementsAttrs s(a.attrs);
  if (s.reduction() == 2) {
    throw Error(invalid_argument("op 'scatter_elements': no gradient for reduction mul (2)"));
  }
  const AttrValue axis = AttrValue::of_int(s.axis());
  GradValue index = a.inputs[1];
  if (a.wanted[0]) {
    grads[0] = s.reduction() == 1 ? a.grad
                                  : b.op(OpKind::kScatterElements,
                                         {a.grad, index, b.full(b.type(a.inputs[2]).shape, 0)},
                                         {axis, AttrValue::of_int(0)});
  }
  if (a.wanted[2]) {
    const DType dtype = b.type(index).dtype;
    const int64_t dim = b.type(a.inputs[0]).shape[static_cast<int>(s.axis())];
    GradValue negative = b.op(OpKind::kLt, {index, b.scalar(0, dtype)});
    GradValue wrapped = b.where(negative, b.add(index, b.scalar(static_cast<double>(dim), dtype)), index);
    grads[2] = b.op(OpKind::kGather, {a.grad, wrapped}, {axis});
  }
}

// The adjoint of the sampling: each input element gets grad_out times the weight with which each
// output read it.
TRACECACHE_GRAD_RULE(resize_nearest2d) {
  const ResizeNearest2dAttrs r(a.attrs);
  const Shape& x = b.type(a.inputs[0]).shape;
  grads[0] = b.op(OpKind::kResizeNearest2dGrad, {a.grad},
                  {AttrValue::of_ints({x[2], x[3]}), AttrValue::of_float(r.scale_h()), AttrValue::of_float(r.scale_w()),
                   AttrValue::of_int(r.coordinate_transformation_mode()), AttrValue::of_int(r.nearest_mode())});
}

TRACECACHE_GRAD_RULE(resize_linear2d) {
  const ResizeLinear2dAttrs r(a.attrs);
  const Shape& x = b.type(a.inputs[0]).shape;
  grads[0] = b.op(OpKind::kResizeLinear2dGrad, {a.grad},
                  {AttrValue::of_ints({x[2], x[3]}), AttrValue::of_float(r.scale_h()), AttrValue::of_float(r.scale_w()),
                   AttrValue::of_int(r.coordinate_transformation_mode())});
}

}  // namespace tracecache::grad
