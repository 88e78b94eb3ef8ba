// The cpu kernel of scatter_add. See cpu_grad_nn_ops.h for the numerics.
#include "backends/cpu/cpu_grad_nn_ops.h"

#include <algorithm>
#include <vector>

#include "capture/ops/attr_views.h"

namespace tracecache::cpu {

namespace {

template <typename Index>
void scatter_add(const HostBuffer& x, const Index* index, const HostBuffer& src, int axis, HostBuffer& out) {
  const Shape& xs = x.shape();
  const Shape& is = src.shape();
  const int rank = is.rank();
  const int64_t total = src.numel();
  const float* px = x.data<float>();
  std::vector<double> acc(px, px + x.numel());
  if (total > 0) {
    const IntList strides = contiguous_strides(xs);
    const int64_t axis_stride = strides[axis], axis_dim = xs[axis];
    const float* ps = src.data<float>();
    // coord: src's multi-index; base: its offset in x without the axis coordinate.
    IntList coord = is;
    for (int d = 0; d < rank; ++d) coord[d] = 0;
    int64_t base = 0;
    for (int64_t i = 0; i < total; ++i) {
      const int64_t row = std::clamp<int64_t>(static_cast<int64_t>(index[i]), 0, axis_dim - 1);
      acc[static_cast<size_t>(base + row * axis_stride)] += static_cast<double>(ps[i]);
      for (int d = rank - 1; d >= 0; --d) {
        if (++coord[d] < is[d]) {
          if (d != axis) base += strides[d];
          break;
        }
        if (d != axis) base -= (is[d] - 1) * strides[d];
        coord[d] = 0;
      }
    }
  }
  float* po = out.data<float>();
  for (size_t i = 0; i < acc.size(); ++i) po[i] = static_cast<float>(acc[i]);
}

}  // namespace

bool run_grad_nn_op(OpKind op, std::span<const HostBuffer* const> inputs, std::span<const AttrValue> attrs,
                    HostBuffer& out) {
  if (op != OpKind::kScatterAdd) return false;
  const int axis = static_cast<int>(AxisAttrs(attrs).axis());
  const HostBuffer& index = *inputs[1];
  if (index.dtype() == DType::kI32) {
    scatter_add(*inputs[0], index.data<int32_t>(), *inputs[2], axis, out);
  } else {
    scatter_add(*inputs[0], index.data<int64_t>(), *inputs[2], axis, out);
  }
  return true;
}

}  // namespace tracecache::cpu
