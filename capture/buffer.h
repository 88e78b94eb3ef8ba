// HostBuffer: a dense, row-major, 64-byte-aligned block of host memory holding one tensor's
// elements, with its dtype and shape.
//
// Ownership: a HostBuffer owns its bytes; move-only. Tensors share finished buffers through
// `std::shared_ptr<const HostBuffer>` (a value, once produced, is never written again).
// Thread-compatible: concurrent reads are safe, writes need external synchronization.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "capture/dtype.h"
#include "capture/shape.h"

namespace tracecache {

class HostBuffer {
 public:
  HostBuffer() = default;
  // Zero-initialized storage for `shape` elements of `dtype`.
  HostBuffer(DType dtype, const Shape& shape);

  HostBuffer(HostBuffer&&) noexcept = default;
  HostBuffer& operator=(HostBuffer&&) noexcept = default;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  HostBuffer clone() const;

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  std::byte* bytes() { return data_.get(); }
  const std::byte* bytes() const { return data_.get(); }
  // REQUIRES: T is the C++ type of dtype() (bool for kBool).
  template <typename T> T* data() { return reinterpret_cast<T*>(data_.get()); }
  template <typename T> const T* data() const { return reinterpret_cast<const T*>(data_.get()); }
  template <typename T> std::span<T> span() { return {data<T>(), static_cast<size_t>(numel())}; }
  template <typename T> std::span<const T> span() const {
    return {data<T>(), static_cast<size_t>(numel())};
  }

  // Element i converted to double (bool -> 0/1). For printing and tests.
  double element_as_double(int64_t i) const;
  // Hex XXH3-64 of the element bytes: the output checksum reported by `tracecache run`.
  std::string checksum() const;

 private:
  struct Free { void operator()(std::byte* p) const; };
  DType dtype_ = DType::kF32;
  Shape shape_;
  std::unique_ptr<std::byte[], Free> data_;
};

using BufferRef = std::shared_ptr<const HostBuffer>;

// Hex spelling of a 64-bit value, 16 lowercase digits.
std::string hex64(uint64_t v);

}  // namespace tracecache
