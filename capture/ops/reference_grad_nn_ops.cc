// Reference kernels of the ops that gradients of the nn ops need: scatter_add (the backward of
// embedding, gather and index_select).
#include <algorithm>
#include <vector>

#include "capture/ops/attr_views.h"
#include "capture/ops/reference_kernels.h"

namespace tracecache::ref {

// out = x, then out[.., clamp(index[i]), ..] += src[i] for every position i of index (its
// `axis` coordinate replaced by the clamped index value), each output element summed in double
// in increasing i and rounded once.
void scatter_add(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  const HostBuffer& x = *in[0];
  const HostBuffer& index = *in[1];
  const HostBuffer& src = *in[2];
  const int axis = static_cast<int>(AxisAttrs(attrs).axis());
  const Shape& xs = x.shape();
  const Shape& is = index.shape();
  std::vector<double> acc(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) acc[static_cast<size_t>(i)] = x.data<float>()[i];
  const IntList strides = contiguous_strides(xs);
  for (int64_t i = 0; i < src.numel(); ++i) {
    // The row-major multi-index of i in index's shape, as an offset into x.
    int64_t rest = i, at = 0;
    for (int d = is.rank() - 1; d >= 0; --d) {
      int64_t coord = rest % is[d];
      rest /= is[d];
      if (d == axis) {
        const int64_t v = index.dtype() == DType::kI32 ? index.data<int32_t>()[i] : index.data<int64_t>()[i];
        coord = std::clamp<int64_t>(v, 0, xs[d] - 1);
      }
      at += coord * strides[d];
    }
    acc[static_cast<size_t>(at)] += static_cast<double>(src.data<float>()[i]);
  }
  for (int64_t i = 0; i < x.numel(); ++i) out.data<float>()[i] = static_cast<float>(acc[static_cast<size_t>(i)]);
}

}  // namespace tracecache::ref
