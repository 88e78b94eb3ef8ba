// The cpu kernel of scatter_add. See cpu_grad_nn_ops.h for the numerics.
#include "replay/backends/cpu/cpu_grad_nn_ops.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "replay/backends/cpu/cpu_kernels.h"
#include "capture/ops/attr_views.h"

namespace tracecache::cpu {

namespace {

// x's element offsets split at `axis`: offset = (o * axis_dim + row) * inner + i. A src element
// is bucketed by its (clamped) row, in increasing src index (a stable counting sort), and a
// row's elements are summed into a double accumulator over the (o, i) plane ("slot" o * inner +
// i), started from x at the first element that reaches a slot. So every output element is x
// plus its src elements in increasing src index, in double, rounded once: the reference's sum,
// touching only the rows that src reaches rather than a double copy of all of x. `Pos` holds a
// src index or a slot (uint32_t when both fit: the per-element scratch is what costs here, in
// page faults, not the adds).
template <typename Pos, typename Index>
void scatter_add_rows(const HostBuffer& x, const Index* index, const HostBuffer& src, int axis, HostBuffer& out) {
  const Shape& xs = x.shape();
  const Shape& is = src.shape();
  const int rank = is.rank();
  const int64_t total = src.numel();
  const int64_t axis_dim = xs[axis];
  int64_t inner = 1;
  for (int d = axis + 1; d < rank; ++d) inner *= xs[d];
  // A slot's stride per src dim: x's stride, divided by axis_dim above the axis (whole planes).
  const IntList strides = contiguous_strides(xs);
  IntList slot_strides = strides;
  for (int d = 0; d < axis; ++d) slot_strides[d] = strides[d] / axis_dim;
  auto row_of = [&](int64_t i) { return std::clamp<int64_t>(static_cast<int64_t>(index[i]), 0, axis_dim - 1); };

  // Pass 1: each src element's slot (an incremental walk of src's multi-index), rows counted.
  auto slot_of = std::make_unique_for_overwrite<Pos[]>(static_cast<size_t>(total));
  std::vector<int64_t> start(static_cast<size_t>(axis_dim) + 1, 0);
  IntList coord = is;
  for (int d = 0; d < rank; ++d) coord[d] = 0;
  int64_t slot = 0;
  for (int64_t i = 0; i < total; ++i) {
    slot_of[static_cast<size_t>(i)] = static_cast<Pos>(slot);
    ++start[static_cast<size_t>(row_of(i)) + 1];
    for (int d = rank - 1; d >= 0; --d) {
      if (++coord[d] < is[d]) {
        if (d != axis) slot += slot_strides[d];
        break;
      }
      if (d != axis) slot -= (is[d] - 1) * slot_strides[d];
      coord[d] = 0;
    }
  }
  for (size_t r = 0; r < static_cast<size_t>(axis_dim); ++r) start[r + 1] += start[r];

  // Pass 2: the stable counting sort (src indices per row, in increasing order).
  auto order = std::make_unique_for_overwrite<Pos[]>(static_cast<size_t>(total));
  {
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < total; ++i) order[static_cast<size_t>(next[static_cast<size_t>(row_of(i))]++)] = static_cast<Pos>(i);
  }

  // Pass 3: per row, the sums in double, then rounded into out. `seen[slot]` holds the last row
  // (+1) that started the slot's accumulator.
  const int64_t slots = x.numel() / axis_dim;
  std::vector<double> acc(static_cast<size_t>(slots));
  std::vector<int64_t> seen(static_cast<size_t>(slots), 0);
  const float* px = x.data<float>();
  const float* ps = src.data<float>();
  float* po = out.data<float>();
  for (int64_t r = 0; r < axis_dim; ++r) {
    const int64_t begin = start[static_cast<size_t>(r)], end = start[static_cast<size_t>(r) + 1];
    if (begin == end) continue;
    auto offset = [&](int64_t at) { return (at / inner * axis_dim + r) * inner + at % inner; };
    for (int64_t k = begin; k < end; ++k) {
      const Pos i = order[static_cast<size_t>(k)];
      const size_t at = slot_of[i];
      if (seen[at] != r + 1) {
        seen[at] = r + 1;
        acc[at] = static_cast<double>(px[offset(static_cast<int64_t>(at))]);
      }
      acc[at] += static_cast<double>(ps[i]);
    }
    for (int64_t k = begin; k < end; ++k) {
      const size_t at = slot_of[order[static_cast<size_t>(k)]];
      po[offset(static_cast<int64_t>(at))] = static_cast<float>(acc[at]);
    }
  }
}

template <typename Index>
void scatter_add(const HostBuffer& x, const Index* index, const HostBuffer& src, int axis, HostBuffer& out) {
  // out = x, split over the team (the embedding gradient's x is a whole table).
  const float* from = x.data<float>();
  float* to = out.data<float>();
  parallel_for(x.numel(), x.numel(), [&](int64_t begin, int64_t end) {
    std::memcpy(to + begin, from + begin, static_cast<size_t>(end - begin) * sizeof(float));
  });
  if (src.numel() == 0) return;
  constexpr int64_t kNarrow = std::numeric_limits<uint32_t>::max();
  if (src.numel() <= kNarrow && x.numel() / x.shape()[axis] <= kNarrow) {
    scatter_add_rows<uint32_t>(x, index, src, axis, out);
  } else {
    scatter_add_rows<uint64_t>(x, index, src, axis, out);
  }
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
