// The selection of topk and topk_indices (ONNX TopK): the k first elements of one row along the
// axis, in the order "larger first" (or "smaller first" with largest = false), NaN counting as
// larger than every number, equal elements (and NaNs among themselves) in increasing index
// order. The order is a strict total order on (value, index) pairs, so every correct selection
// gives the same result: the reference kernels (capture/ops/reference_onnx_ops.cc) and the cpu
// kernels (replay/backends/cpu) share this routine and give the same bits.
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

// Row r of x (x's elements along the axis: `len` of them, `inner` apart; row r = o * inner + c
// starts at x + o * len * inner + c) into out, whose axis has k elements: its k first values
// (kIndices false, Out = T) or their indices along the axis (kIndices true, Out = int64_t).
// `order` is scratch, as select_row's.
template <bool kIndices, typename T, typename Out>
void write_row(const T* x, int64_t len, int64_t inner, int64_t r, int64_t k, bool largest,
               std::vector<int64_t>& order, Out* out) {
  const int64_t o = r / inner, c = r % inner;
  const T* row = x + o * len * inner + c;
  select_row(row, len, inner, k, largest, order);
  for (int64_t j = 0; j < k; ++j) {
    const int64_t i = order[static_cast<size_t>(j)];
    if constexpr (kIndices) out[(o * k + j) * inner + c] = i;
    else out[(o * k + j) * inner + c] = row[i * inner];
  }
}

}  // namespace tracecache::topk
