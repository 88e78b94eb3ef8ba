// The Tensor API of the nn activations, normalization and attention ops (capture/trace/nn.h): each
// function records one registry op. Optional operands follow PyTorch: an undefined weight is
// all ones and an undefined bias all zeros; they are only materialized (as `full` constants)
// where the op's input list has no way to leave them out.
#include <fmt/format.h>

#include <vector>

#include "capture/trace/nn.h"

namespace tracecache {

namespace {

Tensor unary(OpKind op, const Tensor& x, std::initializer_list<AttrValue> attrs = {}) {
  return x.context().record(op, {x}, attrs);
}

void require_defined(std::string_view op, std::string_view role, const Tensor& t) {
  if (!t.defined()) {
    throw Error(invalid_argument(fmt::format("op '{}': {} is an undefined tensor", op, role)));
  }
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, double eps) {
  require_defined("batch_norm", "input", x);
  require_defined("batch_norm", "running_mean", running_mean);
  require_defined("batch_norm", "running_var", running_var);
  // batch_norm always takes 5 inputs: absent affine parameters become constants shaped like
  // the running statistics (the inference rule then checks that shape against the channels).
  const Shape& per_channel = running_mean.shape();
  const Tensor w = weight.defined() ? weight : full(x.context(), per_channel, 1.0);
  const Tensor b = bias.defined() ? bias : full(x.context(), per_channel, 0.0);
  return x.context().record(OpKind::kBatchNorm, {x, running_mean, running_var, w, b},
                            {AttrValue::of_float(eps)});
}

Tensor layer_norm(const Tensor& x, int64_t normalized_dims, const Tensor& weight,
                  const Tensor& bias, double eps) {
  require_defined("layer_norm", "input", x);
  std::vector<Tensor> inputs = {x};
  if (weight.defined() || bias.defined()) {
    // A bias alone needs a weight in front of it (the op's second input is the weight): ones.
    inputs.push_back(weight.defined() ? weight : full(x.context(), bias.shape(), 1.0));
  }
  if (bias.defined()) inputs.push_back(bias);
  const AttrValue attrs[] = {AttrValue::of_int(normalized_dims), AttrValue::of_float(eps)};
  return x.context().record(OpKind::kLayerNorm, inputs, attrs);
}

Tensor softmax(const Tensor& x, int64_t axis) {
  return unary(OpKind::kSoftmax, x, {AttrValue::of_int(axis)});
}
Tensor log_softmax(const Tensor& x, int64_t axis) {
  return unary(OpKind::kLogSoftmax, x, {AttrValue::of_int(axis)});
}
Tensor gelu(const Tensor& x, bool tanh_approximation) {
  return unary(OpKind::kGelu, x, {AttrValue::of_bool(tanh_approximation)});
}
Tensor silu(const Tensor& x) { return unary(OpKind::kSilu, x); }
Tensor hardswish(const Tensor& x) { return unary(OpKind::kHardswish, x); }
Tensor hardsigmoid(const Tensor& x) { return unary(OpKind::kHardsigmoid, x); }
Tensor erf(const Tensor& x) { return unary(OpKind::kErf, x); }
Tensor clamp(const Tensor& x, double min, double max) {
  return unary(OpKind::kClamp, x, {AttrValue::of_float(min), AttrValue::of_float(max)});
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& mask, bool causal, double scale) {
  require_defined("scaled_dot_product_attention", "query", q);
  std::vector<Tensor> inputs = {q, k, v};
  if (mask.defined()) inputs.push_back(mask);
  const AttrValue attrs[] = {AttrValue::of_bool(causal), AttrValue::of_float(scale)};
  return q.context().record(OpKind::kScaledDotProductAttention, inputs, attrs);
}

}  // namespace tracecache
