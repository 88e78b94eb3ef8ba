#include "capture/core/shape.h"

#include <fmt/format.h>

#include <algorithm>

#include "capture/core/status.h"

namespace tracecache {

IntList::IntList(std::span<const int64_t> v) {
  if (v.size() > static_cast<size_t>(kMaxRank)) {
    throw Error(unsupported(fmt::format("{} dims or list entries given; at most {} are supported",
                                        v.size(), kMaxRank)));
  }
  for (size_t i = 0; i < v.size(); ++i) v_[i] = v[i];
  size_ = static_cast<int>(v.size());
}

void IntList::push_back(int64_t x) {
  if (size_ == kMaxRank) {
    throw Error(unsupported(fmt::format("more than {} dims or list entries", kMaxRank)));
  }
  v_[static_cast<size_t>(size_++)] = x;
}

void IntList::erase(int i) {
  for (int j = i; j + 1 < size_; ++j) v_[j] = v_[j + 1];
  --size_;
}

void IntList::insert(int i, int64_t x) {
  push_back(0);
  for (int j = size_ - 1; j > i; --j) v_[j] = v_[j - 1];
  v_[i] = x;
}

std::string IntList::to_string() const { return fmt::format("[{}]", fmt::join(span(), ", ")); }

int64_t Shape::numel() const {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t d : *this) {
    if (d == 0) return 0;
    overflow = overflow || __builtin_mul_overflow(n, d, &n);
  }
  if (overflow) {
    throw Error(invalid_argument(
        fmt::format("shape {} has more elements than a 64-bit count holds", to_string())));
  }
  return n;
}

Result<int64_t> checked_numel(std::span<const int64_t> dims) {
  auto spelled = [&] { return fmt::format("[{}]", fmt::join(dims, ", ")); };
  int64_t nonzero = 1;  // the product of the non-zero dims, bounded by kMaxElements
  bool empty = false;
  for (int64_t d : dims) {
    if (d < 0) return invalid_argument(fmt::format("shape {} has a negative dim", spelled()));
    if (d == 0) {
      empty = true;
      continue;
    }
    if (__builtin_mul_overflow(nonzero, d, &nonzero) || nonzero > kMaxElements) {
      bool has_zero = std::find(dims.begin(), dims.end(), 0) != dims.end();
      return invalid_argument(fmt::format(
          "shape {} {} more than 2^48 elements (the limit is {})", spelled(),
          has_zero ? "is empty, but its other dims multiply to" : "has", kMaxElements));
    }
  }
  return empty ? 0 : nonzero;
}

Result<uint64_t> checked_nbytes(std::span<const int64_t> dims, size_t element_size) {
  Result<int64_t> n = checked_numel(dims);
  if (!n.is_ok()) return n.status();
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(*n), element_size, &bytes)) {
    return invalid_argument(fmt::format("shape [{}] of {}-byte elements has more bytes than a "
                                        "64-bit count holds",
                                        fmt::join(dims, ", "), element_size));
  }
  return bytes;
}

IntList contiguous_strides(const Shape& s) {
  IntList st = s;
  int64_t acc = 1;
  for (int i = s.rank() - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

IntList broadcast_strides(const Shape& s, const Shape& to) {
  IntList contiguous = contiguous_strides(s);
  IntList out;
  const int lead = to.rank() - s.rank();
  for (int d = 0; d < to.rank(); ++d) {
    int sd = d - lead;
    out.push_back(sd >= 0 && s[sd] != 1 ? contiguous[sd] : 0);
  }
  return out;
}

AxisSplit split_at_axis(const Shape& s, int axis) {
  AxisSplit a;
  for (int d = 0; d < axis; ++d) a.outer *= s[d];
  a.len = s[axis];
  for (int d = axis + 1; d < s.rank(); ++d) a.inner *= s[d];
  return a;
}

bool broadcast_shapes(const Shape& a, const Shape& b, Shape* out) {
  int r = std::max(a.rank(), b.rank());
  Shape s;
  for (int i = 0; i < r; ++i) {
    int ia = a.rank() - r + i, ib = b.rank() - r + i;
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1) return false;
    s.push_back(da == 1 ? db : da);
  }
  *out = s;
  return true;
}

}  // namespace tracecache
