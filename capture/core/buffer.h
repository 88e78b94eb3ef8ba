// HostBuffer: a dense, row-major, 64-byte-aligned block of host memory holding one tensor's
// elements, with its dtype and shape.
//
// Ownership: a HostBuffer owns its bytes, except a view (HostBuffer::view), which borrows bytes
// owned by someone else (e.g. a slice of a backend's scratch arena) and never frees them; both
// are move-only. Tensors share finished buffers through `std::shared_ptr<const HostBuffer>` (a
// value, once produced, is never written again).
// Thread-compatible: concurrent reads are safe, writes need external synchronization.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "capture/core/dtype.h"
#include "capture/core/shape.h"

namespace tracecache {

// This machine's physical memory in bytes (sysconf), or UINT64_MAX if it cannot be told. A
// buffer larger than this is refused before it is allocated, whatever its element count.
uint64_t physical_memory_bytes();

// Storage of kLargeBufferBytes or more comes from its own anonymous mapping, and a freed one is
// kept (up to large_buffer_cache_bytes() in all) for the next buffer of its size class: a
// step's buffers are reused by the next step without page faults, and never sit in malloc's
// heap between small allocations (where they could not be returned: `run --steps 1000` of a 256
// KB output once peaked at 271 MB). malloc's own settings are left alone, so the rest of the
// process (PyTorch in the same interpreter) keeps glibc's defaults. Thread-safe.
inline constexpr size_t kLargeBufferBytes = 128 * 1024;
// The bound on the bytes of freed large buffers kept: 256 MiB, or an eighth of physical memory.
size_t large_buffer_cache_bytes();
// The bytes of freed large buffers kept now.
size_t large_buffer_cached_bytes();
// False under AddressSanitizer, which checks heap memory only: large buffers then stay on the heap.
bool large_buffers_are_mapped();

namespace detail {
// HostBuffer's deleter: frees owned storage, leaves a view's borrowed bytes alone.
struct BufferFree {
  bool owned = true;
  size_t mapped = 0;  // non-zero: a large buffer's mapping of this many bytes (kLargeBufferBytes)
  void operator()(std::byte* p) const;
};
}  // namespace detail

class HostBuffer {
 public:
  HostBuffer() = default;
  // Zero-initialized storage for `shape` elements of `dtype`. Throws Error (kInvalidArgument)
  // before allocating if the shape has more than kMaxElements elements (checked_nbytes), so
  // nbytes() of any buffer is exact, or more bytes than physical_memory_bytes(): a program's
  // sizes, never an allocator's abort or a bad_alloc.
  HostBuffer(DType dtype, const Shape& shape);
  // A non-owning view of `data` as `shape` elements of `dtype`: no allocation, no copy, no
  // initialization; the destructor does not free `data`. The caller keeps `data` alive and
  // unmoved for the view's lifetime. clone() of a view is an owning copy.
  // REQUIRES: data != nullptr, aligned to dtype_size(dtype), with nbytes() bytes available.
  static HostBuffer view(DType dtype, const Shape& shape, std::byte* data);
  // False for a view.
  bool owns_data() const { return data_.get_deleter().owned; }

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
  DType dtype_ = DType::kF32;
  Shape shape_;
  std::unique_ptr<std::byte[], detail::BufferFree> data_;
};

using BufferRef = std::shared_ptr<const HostBuffer>;

// Hex spelling of a 64-bit value, 16 lowercase digits.
std::string hex64(uint64_t v);

}  // namespace tracecache
