#include "capture/ops/grad_nn_layers.h"

#include "capture/ops/attr_views.h"
#include "capture/ops/ops.h"

namespace tracecache::grad {

namespace {

const Shape& shape_of(GradBuilder& b, GradValue v) { return b.type(v).shape; }

AttrValue ints(IntList v) { return AttrValue::of_ints(std::move(v)); }

GradValue sum_over(GradBuilder& b, GradValue v, IntList axes) {
  return b.op(OpKind::kSum, {v}, {ints(std::move(axes)), AttrValue::of_bool(false)});
}

}  // namespace

// x: conv2d_input_grad (the transposed convolution of the gradient with the weight),
// weight: conv2d_weight_grad (the correlation of the gradient with the input), bias: the
// gradient summed over N, OH, OW.
TRACECACHE_GRAD_RULE(conv2d) {
  const Conv2dAttrs c(a.attrs);
  const Shape& x = shape_of(b, a.inputs[0]);
  const Shape& w = shape_of(b, a.inputs[1]);
  if (a.wanted[0]) {
    grads[0] = b.op(OpKind::kConv2dInputGrad, {a.grad, a.inputs[1]},
                    {ints(c.stride()), ints(c.padding()), ints(c.dilation()), AttrValue::of_int(c.groups()),
                     ints({x[2], x[3]})});
  }
  if (a.wanted[1]) {
    grads[1] = b.op(OpKind::kConv2dWeightGrad, {a.grad, a.inputs[0]},
                    {ints(c.stride()), ints(c.padding()), ints(c.dilation()), AttrValue::of_int(c.groups()),
                     ints({w[2], w[3]})});
  }
  if (a.inputs.size() == 3 && a.wanted[2]) grads[2] = sum_over(b, a.grad, {0, 2, 3});
}

// Each window's gradient goes to the first maximum of the window in row-major scan order
// (PyTorch's max_pool2d_with_indices: `v > max || isnan(v)`, so among NaNs the last one).
TRACECACHE_GRAD_RULE(max_pool2d) {
  grads[0] = b.op(OpKind::kMaxPool2dGrad, std::span<const GradValue>({a.grad, a.inputs[0]}), a.attrs);
}

// Each window's gradient divided by the window's divisor (as the forward pass) to every cell of
// the window inside the input.
TRACECACHE_GRAD_RULE(avg_pool2d) {
  const AvgPool2dAttrs p(a.attrs);
  const Shape& x = shape_of(b, a.inputs[0]);
  grads[0] = b.op(OpKind::kAvgPool2dGrad, {a.grad},
                  {ints(p.kernel()), ints(p.stride()), ints(p.padding()), AttrValue::of_bool(p.count_include_pad()),
                   ints({x[2], x[3]})});
}

TRACECACHE_GRAD_RULE(adaptive_avg_pool2d) {
  const Shape& x = shape_of(b, a.inputs[0]);
  grads[0] = b.op(OpKind::kAdaptiveAvgPool2dGrad, {a.grad}, {ints({x[2], x[3]})});
}

// y = x W^T + b over rows r: dx = g W, dW = g^T x (rows flattened), db = g summed over rows.
TRACECACHE_GRAD_RULE(linear) {
  const Shape& x = shape_of(b, a.inputs[0]);
  const Shape& w = shape_of(b, a.inputs[1]);
  const int64_t n_out = w[0], n_in = w[1];
  int64_t rows = 1;
  for (int d = 0; d + 1 < x.rank(); ++d) rows *= x[d];
  if (a.wanted[0]) grads[0] = b.op(OpKind::kMatmul, {a.grad, a.inputs[1]});
  const bool want_bias = a.inputs.size() == 3 && a.wanted[2];
  if (!a.wanted[1] && !want_bias) return;
  const GradValue g2 = b.reshape(a.grad, Shape{rows, n_out});
  if (a.wanted[1]) {
    const GradValue gt = b.op(OpKind::kTranspose, {g2}, {AttrValue::of_int(0), AttrValue::of_int(1)});
    grads[1] = b.op(OpKind::kMatmul, {gt, b.reshape(a.inputs[0], Shape{rows, n_in})});
  }
  if (want_bias) grads[2] = sum_over(b, g2, {0});
}

TRACECACHE_GRAD_RULE(flatten) { grads[0] = b.reshape(a.grad, shape_of(b, a.inputs[0])); }

// pad with the pads negated: crops what was padded and pads (with zeros) what was cropped.
TRACECACHE_GRAD_RULE(pad) {
  IntList pads = PadAttrs(a.attrs).pads();
  for (int64_t& p : pads) p = -p;
  grads[0] = b.op(OpKind::kPad, {a.grad}, {ints(std::move(pads)), AttrValue::of_float(0)});
}

// y = (x - mean) r weight + bias with r = rsqrt(var + eps), per channel (dim 1); the sums run
// over every dim but the channel's:
//   dx = g weight r, dweight = r sum(g (x - mean)), dbias = sum(g),
//   dmean = -weight r sum(g), dvar = -weight r^3 sum(g (x - mean)) / 2.
TRACECACHE_GRAD_RULE(batch_norm) {
  const Shape& x = shape_of(b, a.inputs[0]);
  const Shape channels{x[1]};
  Shape per_channel = x;  // [1, C, 1, ...]: a channel vector broadcast against x
  for (int d = 0; d < per_channel.rank(); ++d) {
    if (d != 1) per_channel[d] = 1;
  }
  const GradValue mean = a.inputs[1], var = a.inputs[2], weight = a.inputs[3];
  const double eps = BatchNormAttrs(a.attrs).eps();
  const GradValue r = b.op(OpKind::kRsqrt, {b.add(var, b.scalar(eps))});
  auto channel_sum = [&](GradValue v) { return b.reshape(b.sum_to(v, per_channel), channels); };
  if (a.wanted[0]) grads[0] = b.mul(a.grad, b.reshape(b.mul(weight, r), per_channel));
  GradValue sum_g = kNoGrad, sum_gc = kNoGrad;
  if (a.wanted[1] || a.wanted[4]) sum_g = channel_sum(a.grad);
  if (a.wanted[2] || a.wanted[3]) {
    sum_gc = channel_sum(b.mul(a.grad, b.sub(a.inputs[0], b.reshape(mean, per_channel))));
  }
  if (a.wanted[1]) grads[1] = b.neg(b.mul(sum_g, b.mul(weight, r)));
  if (a.wanted[2]) {
    grads[2] = b.scale(b.mul(sum_gc, b.mul(weight, b.mul(r, b.mul(r, r)))), -0.5);
  }
  if (a.wanted[3]) grads[3] = b.mul(sum_gc, r);
  if (a.wanted[4]) grads[4] = sum_g;
}

}  // namespace tracecache::grad
