// Shape: the dims of a tensor, stored inline (no allocation) up to kMaxRank dims.
//
// Also used for any short list of integers (axes, permutations, slice bounds) via IntList.
// A value type; thread-compatible. Rank above kMaxRank is rejected with Error at construction.
//
// Sizes from outside (trace programs, npy and safetensors headers, the cache) are untrusted:
// checked_numel() and checked_nbytes() are the one place their element and byte counts are
// computed, overflow-checked against kMaxElements, before anything is allocated. Every shape
// that passed them (and every shape an op's inference rule produces: ops.cc uses the same
// check) is safe for numel(), nbytes and stride arithmetic.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "capture/core/status.h"

namespace tracecache {

inline constexpr int kMaxRank = 8;

// Largest element count a tensor may have: far beyond any real tensor, far below the point
// where element, byte or stride arithmetic overflows 64 bits.
inline constexpr int64_t kMaxElements = int64_t{1} << 48;

class IntList {
 public:
  IntList() = default;
  IntList(std::initializer_list<int64_t> v) : IntList(std::span<const int64_t>(v.begin(), v.size())) {}
  // Throws Error if v has more than kMaxRank entries.
  explicit IntList(std::span<const int64_t> v);

  int size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t operator[](int i) const { return v_[static_cast<size_t>(i)]; }
  int64_t& operator[](int i) { return v_[static_cast<size_t>(i)]; }
  const int64_t* begin() const { return v_.data(); }
  const int64_t* end() const { return v_.data() + size_; }
  int64_t* begin() { return v_.data(); }
  int64_t* end() { return v_.data() + size_; }
  std::span<const int64_t> span() const { return {v_.data(), static_cast<size_t>(size_)}; }
  // Throws Error when full.
  void push_back(int64_t x);
  void erase(int i);
  void insert(int i, int64_t x);

  friend bool operator==(const IntList& a, const IntList& b) {
    if (a.size_ != b.size_) return false;
    for (int i = 0; i < a.size_; ++i) if (a.v_[i] != b.v_[i]) return false;
    return true;
  }
  // "[2, 3, 4]".
  std::string to_string() const;

 private:
  std::array<int64_t, kMaxRank> v_{};
  int size_ = 0;
};

// A tensor's dims. Every dim is >= 0; rank 0 is a scalar.
class Shape : public IntList {
 public:
  using IntList::IntList;
  Shape() = default;
  explicit Shape(const IntList& l) : IntList(l) {}
  int rank() const { return size(); }
  // The product of the dims. Throws Error (kInvalidArgument) if it does not fit int64_t, which
  // only a shape that never went through checked_numel() can do.
  int64_t numel() const;
  int64_t dim(int i) const { return (*this)[i]; }
};

// The element count of a tensor with `dims`, computed without overflow.
// Errors (kInvalidArgument): a negative dim ("shape [2, -1] has a negative dim"); more than
// kMaxElements elements, where dims of size 0 count as 1 so that no stride of the shape can
// overflow either ("shape [..] has more than 2^48 elements (the limit is 281474976710656)").
Result<int64_t> checked_numel(std::span<const int64_t> dims);
// The byte size of `dims` elements of `element_size` bytes each: checked_numel(dims) times
// `element_size`, checked. Same errors.
Result<uint64_t> checked_nbytes(std::span<const int64_t> dims, size_t element_size);

// Row-major contiguous strides (in elements) for `s`.
IntList contiguous_strides(const Shape& s);

// Strides (in elements) that read a contiguous operand of shape `s` as if broadcast to `to`
// (NumPy rules): missing leading dims and dims of size 1 get stride 0.
// REQUIRES: `s` broadcasts to `to`.
IntList broadcast_strides(const Shape& s, const Shape& to);

// A shape viewed as [outer, len, inner] around `axis`: the product of the dims before it, the
// axis's own size, and the product of the dims after it. REQUIRES: 0 <= axis < rank.
struct AxisSplit {
  int64_t outer = 1, len = 1, inner = 1;
};
AxisSplit split_at_axis(const Shape& s, int axis);

// NumPy broadcasting of two shapes; false when incompatible.
bool broadcast_shapes(const Shape& a, const Shape& b, Shape* out);

}  // namespace tracecache
