// The costs of the ops (the `cost` column of the registry table, ops.cc; CostFn and OpCost in
// ops.h say what they count). Internal to capture/ops/.
// Inputs are as the inference rule accepted them (so arities and ranks hold) and `attrs` are
// normalized. Thread-safety: pure functions. Errors: none. Ownership: nothing is kept.
#pragma once

#include <cstdint>
#include <span>

#include "capture/ops/attr_views.h"
#include "capture/ops/ops.h"
#include "capture/ops/random.h"

namespace tracecache::cost {

OpCost cost_free(std::span<const TensorType>, const TensorType&, std::span<const AttrValue>);

template <int64_t kPerElement>
OpCost cost_per_out(std::span<const TensorType>, const TensorType& out, std::span<const AttrValue>) {
  return {kPerElement * out.shape.numel(), false};
}

template <int64_t kPerElement>
OpCost cost_per_in(std::span<const TensorType> in, const TensorType&, std::span<const AttrValue>) {
  return {kPerElement * in[0].shape.numel(), false};
}

// matmul and linear: every output element is a dot product over the left operand's last dim.
OpCost cost_contract_last_dim(std::span<const TensorType> in, const TensorType& out, std::span<const AttrValue>);
OpCost cost_conv2d(std::span<const TensorType> in, const TensorType& out, std::span<const AttrValue>);
OpCost cost_attention(std::span<const TensorType> in, const TensorType&, std::span<const AttrValue>);

// max_pool2d and avg_pool2d: one flop per window element per output element.
template <template <typename> class View>
OpCost cost_pool(std::span<const TensorType>, const TensorType& out, std::span<const AttrValue> attrs) {
  int64_t window = 1;
  for (int64_t k : View<const AttrValue>(attrs).kernel()) window *= k;
  return {out.shape.numel() * window, false};
}

// scatter_add: one add per src element.
OpCost cost_scatter_add(std::span<const TensorType> in, const TensorType&, std::span<const AttrValue>);
// The conv2d gradients: the forward's contraction again, 2 * grad_out * (C/groups) * kh * kw
// (the weight is input 1 of conv2d_input_grad and the output of conv2d_weight_grad).
OpCost cost_conv2d_input_grad(std::span<const TensorType> in, const TensorType&, std::span<const AttrValue>);
OpCost cost_conv2d_weight_grad(std::span<const TensorType> in, const TensorType& out, std::span<const AttrValue>);

// max_pool2d_grad and avg_pool2d_grad: the forward's window walk, per grad_out element.
template <template <typename> class View>
OpCost cost_pool_grad(std::span<const TensorType> in, const TensorType&, std::span<const AttrValue> attrs) {
  int64_t window = 1;
  for (int64_t k : View<const AttrValue>(attrs).kernel()) window *= k;
  return {in[0].shape.numel() * window, false};
}

// conv_transpose2d: conv2d_input_grad's contraction, 2 * input * (O/groups) * kh * kw.
OpCost cost_conv_transpose2d(std::span<const TensorType> in, const TensorType&, std::span<const AttrValue>);
// scatter_elements: one per output element (the copy) and one per update.
OpCost cost_scatter_elements(std::span<const TensorType> in, const TensorType& out, std::span<const AttrValue>);

constexpr CostFn kPerOut = cost_per_out<1>;
constexpr CostFn kTranscendental = cost_per_out<kTranscendentalFlops>;
constexpr CostFn kPerIn = cost_per_in<1>;
constexpr CostFn kSoftmaxCost = cost_per_in<kTranscendentalFlops + 3>;  // max, subtract, exp, sum, divide
constexpr CostFn kRandUniformCost = cost_per_out<kPhiloxFlops>;
constexpr CostFn kRandNormalCost = cost_per_out<kPhiloxFlops + 2 * kTranscendentalFlops>;  // see OpCost

}  // namespace tracecache::cost
