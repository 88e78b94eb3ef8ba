// The convolution, pooling, linear, layout and lookup functions of capture/trace/nn.h: each records
// one registry op. An undefined optional operand (bias) is simply not passed as an input, so
// conv2d and linear record 2 or 3 inputs.
#include <initializer_list>
#include <span>

#include "capture/trace/nn.h"
#include "capture/ops/ops.h"

namespace tracecache {

namespace {

// Records `op` on (x, weight) or, when `bias` is defined, (x, weight, bias).
Tensor with_optional_bias(OpKind op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                          std::initializer_list<AttrValue> attrs = {}) {
  const Tensor inputs[] = {x, weight, bias};
  return x.context().record(op, std::span<const Tensor>(inputs, bias.defined() ? 3 : 2),
                            std::span<const AttrValue>(attrs.begin(), attrs.size()));
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, IntList stride, IntList padding,
              IntList dilation, int64_t groups) {
  return with_optional_bias(OpKind::kConv2d, x, weight, bias,
                            {AttrValue::of_ints(stride), AttrValue::of_ints(padding),
                             AttrValue::of_ints(dilation), AttrValue::of_int(groups)});
}

Tensor max_pool2d(const Tensor& x, IntList kernel, IntList stride, IntList padding, IntList dilation,
                  bool ceil_mode) {
  return x.context().record(
      OpKind::kMaxPool2d, {x},
      {AttrValue::of_ints(kernel), AttrValue::of_ints(stride), AttrValue::of_ints(padding),
       AttrValue::of_ints(dilation), AttrValue::of_bool(ceil_mode)});
}

Tensor avg_pool2d(const Tensor& x, IntList kernel, IntList stride, IntList padding, bool ceil_mode,
                  bool count_include_pad) {
  return x.context().record(
      OpKind::kAvgPool2d, {x},
      {AttrValue::of_ints(kernel), AttrValue::of_ints(stride), AttrValue::of_ints(padding),
       AttrValue::of_bool(ceil_mode), AttrValue::of_bool(count_include_pad)});
}

Tensor adaptive_avg_pool2d(const Tensor& x, IntList output_size) {
  return x.context().record(OpKind::kAdaptiveAvgPool2d, {x}, {AttrValue::of_ints(output_size)});
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return with_optional_bias(OpKind::kLinear, x, weight, bias);
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  return x.context().record(OpKind::kFlatten, {x},
                            {AttrValue::of_int(start_dim), AttrValue::of_int(end_dim)});
}

Tensor pad(const Tensor& x, IntList pads, double value) {
  return x.context().record(OpKind::kPad, {x}, {AttrValue::of_ints(pads), AttrValue::of_float(value)});
}

Tensor dropout(const Tensor& x, double p) {
  return x.context().record(OpKind::kDropout, {x}, {AttrValue::of_float(p)});
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  return weight.context().record(OpKind::kEmbedding, {weight, indices});
}

Tensor gather(const Tensor& x, int64_t axis, const Tensor& index) {
  return x.context().record(OpKind::kGather, {x, index}, {AttrValue::of_int(axis)});
}

Tensor index_select(const Tensor& x, int64_t axis, const Tensor& index) {
  return x.context().record(OpKind::kIndexSelect, {x, index}, {AttrValue::of_int(axis)});
}

Tensor scatter_add(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src) {
  return x.context().record(OpKind::kScatterAdd, {x, index, src}, {AttrValue::of_int(axis)});
}

}  // namespace tracecache
