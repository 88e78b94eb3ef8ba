#include "capture/core/buffer.h"

#include <malloc.h>

#include <fmt/format.h>
#include <xxhash.h>

#include <cassert>
#include <cstring>
#include <limits>
#include <new>

#include <unistd.h>

namespace tracecache {

namespace {
constexpr std::align_val_t kAlign{64};
}

uint64_t physical_memory_bytes() {
  static const uint64_t bytes = [] {
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long page_size = ::sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page_size <= 0) return std::numeric_limits<uint64_t>::max();
    uint64_t total = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(pages), static_cast<uint64_t>(page_size), &total)) {
      return std::numeric_limits<uint64_t>::max();
    }
    return total;
  }();
  return bytes;
}

void detail::BufferFree::operator()(std::byte* p) const {
  if (owned) ::operator delete[](p, kAlign);
}

HostBuffer::HostBuffer(DType dtype, const Shape& shape) : dtype_(dtype), shape_(shape) {
  size_t n = checked_nbytes(shape.span(), dtype_size(dtype)).value_or_throw();
  if (n > physical_memory_bytes()) {
    throw Error(invalid_argument(fmt::format(
        "a {}{} tensor needs {} bytes, more than this machine's memory ({} bytes); use smaller "
        "shapes", dtype_name(dtype), shape.to_string(), n, physical_memory_bytes())));
  }
  // Always allocate at least one byte so bytes() is never null.
  data_.reset(static_cast<std::byte*>(::operator new[](n == 0 ? 1 : n, kAlign)));
  std::memset(data_.get(), 0, n == 0 ? 1 : n);
}

HostBuffer HostBuffer::view(DType dtype, const Shape& shape, std::byte* data) {
  assert(data != nullptr);
  assert(reinterpret_cast<uintptr_t>(data) % dtype_size(dtype) == 0);
  HostBuffer b;
  b.dtype_ = dtype;
  b.shape_ = shape;
  b.data_ = std::unique_ptr<std::byte[], detail::BufferFree>(data, detail::BufferFree{false});
  return b;
}

HostBuffer HostBuffer::clone() const {
  HostBuffer b(dtype_, shape_);
  std::memcpy(b.bytes(), bytes(), nbytes());
  return b;
}

double HostBuffer::element_as_double(int64_t i) const {
  return dispatch_dtype(dtype_, [&]<typename T>() { return static_cast<double>(data<T>()[i]); });
}

std::string HostBuffer::checksum() const { return hex64(XXH3_64bits(bytes(), nbytes())); }

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

void pin_large_allocations_to_mmap() {
  static const bool pinned = mallopt(M_MMAP_THRESHOLD, 128 * 1024) == 1;
  (void)pinned;
}

}  // namespace tracecache
