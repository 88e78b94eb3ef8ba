// The selection of topk and topk_indices (ONNX TopK): the k first elements of one row along the
// axis, in the order "larger first" (or "smaller first" with largest = false), NaN counting as
// larger than every number, equal elements (and NaNs among themselves) in increasing index
// order. The order is a strict total order on (value, index) pairs, so every correct selection
// gives the same result: the reference kernels (capture/ops/reference_onnx_ops.cc) and the cpu
// kernels (backends/cpu) share this routine and give the same bits.
// Pure functions; thread-safe.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace tracecache::topk {

// True if (a, ia) comes before (b, ib).
template <typename T>
bool before(T a, int64_t ia, T b, int64_t ib, bool largest) {
  if constexpr (std::is_floating_point_v<T>) {
    const bool na = std::isnan(a), nb = std::isnan(b);
    if (na || nb) {
      if (na && nb) return ia < ib;
      return largest ? na : nb;  // NaN is the largest value
    }
  }
  if (a != b) return largest ? a > b : a < b;
  return ia < ib;
}

// Sets order[0..k) to the indices of the k first elements of the row row[0], row[stride], ...,
// row[(len - 1) stride], in order. `order` is scratch of any size; resized to len.
template <typename T>
void select_row(const T* row, int64_t len, int64_t stride, int64_t k, bool largest, std::vector<int64_t>& order) {
  order.resize(static_cast<size_t>(len));
  for (int64_t i = 0; i < len; ++i) order[static_cast<size_t>(i)] = i;
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t i, int64_t j) {
    return before(row[i * stride], i, row[j * stride], j, largest);
  });
}

}  // namespace tracecache::topk
