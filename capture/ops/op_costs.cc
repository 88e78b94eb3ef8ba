// The costs of the ops (op_costs.h).
#include "capture/ops/op_costs.h"

namespace tracecache::cost {

namespace {

// Last dim of `t`, or 1 for a scalar.
int64_t last_dim(const TensorType& t) {
  return t.shape.rank() == 0 ? 1 : t.shape[t.shape.rank() - 1];
}

}  // namespace

OpCost cost_free(std::span<const TensorType>, const TensorType&, std::span<const AttrValue>) {
  return {};
}

// matmul and linear: every output element is a dot product over the left operand's last dim.
OpCost cost_contract_last_dim(std::span<const TensorType> in, const TensorType& out,
                              std::span<const AttrValue>) {
  return {2 * out.shape.numel() * last_dim(in[0]), true};
}

OpCost cost_conv2d(std::span<const TensorType> in, const TensorType& out, std::span<const AttrValue>) {
  // weight [O, C/groups, kh, kw]: every output element is a dot product of C/groups*kh*kw.
  const Shape& w = in[1].shape;
  const int64_t per_out = w[0] == 0 ? 0 : w.numel() / w[0];
  return {2 * out.shape.numel() * per_out, true};
}

OpCost cost_attention(std::span<const TensorType> in, const TensorType&, std::span<const AttrValue>) {
  // q [..., Lq, E], k [..., Lk, E], v [..., Lk, Ev]: two contractions over the scores
  // [..., Lq, Lk], and the softmax over them.
  const Shape& q = in[0].shape;
  const Shape& k = in[1].shape;
  const int64_t lq = q[q.rank() - 2], e = q[q.rank() - 1], lk = k[k.rank() - 2];
  const int64_t ev = last_dim(in[2]);
  const int64_t batch = lq * e == 0 ? 0 : q.numel() / (lq * e);
  const int64_t scores = batch * lq * lk;
  return {2 * scores * (e + ev) + (kTranscendentalFlops + 3) * scores, true};
}

// scatter_add: one add per src element.
OpCost cost_scatter_add(std::span<const TensorType> in, const TensorType&, std::span<const AttrValue>) {
  return {in[2].shape.numel(), false};
}

// The conv2d gradients: the forward's contraction again, 2 * grad_out * (C/groups) * kh * kw
// (the weight is input 1 of conv2d_input_grad and the output of conv2d_weight_grad).
OpCost cost_conv2d_input_grad(std::span<const TensorType> in, const TensorType&, std::span<const AttrValue>) {
  const Shape& w = in[1].shape;
  return {2 * in[0].shape.numel() * (w[0] == 0 ? 0 : w.numel() / w[0]), true};
}
OpCost cost_conv2d_weight_grad(std::span<const TensorType> in, const TensorType& out, std::span<const AttrValue>) {
  const Shape& w = out.shape;
  return {2 * in[0].shape.numel() * (w[0] == 0 ? 0 : w.numel() / w[0]), true};
}

// conv_transpose2d: conv2d_input_grad's contraction, 2 * input * (O/groups) * kh * kw.
OpCost cost_conv_transpose2d(std::span<const TensorType> in, const TensorType&, std::span<const AttrValue>) {
  const Shape& w = in[1].shape;
  return {2 * in[0].shape.numel() * (w[0] == 0 ? 0 : w.numel() / w[0]), true};
}

// scatter_elements: one per output element (the copy) and one per update.
OpCost cost_scatter_elements(std::span<const TensorType> in, const TensorType& out, std::span<const AttrValue>) {
  return {out.shape.numel() + in[2].shape.numel(), false};
}

}  // namespace tracecache::cost
