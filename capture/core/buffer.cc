#include "capture/core/buffer.h"

#include <sys/mman.h>

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

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

namespace {

// AddressSanitizer checks heap memory only: under it, large buffers stay on the heap.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// The mappings of large buffers, and the freed ones kept for reuse per size class (four classes
// per power of two, whole pages). Never destroyed: buffers may be freed during exit.
class LargeBlocks {
 public:
  static LargeBlocks& instance() {
    static LargeBlocks* blocks = new LargeBlocks;
    return *blocks;
  }

  static size_t size_class(size_t n) {
    const size_t step = std::max<size_t>(std::bit_floor(n) / 4, 4096);
    return (n + step - 1) / step * step;
  }

  // A mapping of `size` bytes (a size class); all zero when `*zeroed`.
  std::byte* take(size_t size, bool* zeroed) {
    {
      std::lock_guard lock(mu_);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        std::byte* p = it->second.back();
        it->second.pop_back();
        cached_ -= size;
        *zeroed = false;
        return p;
      }
    }
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    *zeroed = true;
    return static_cast<std::byte*>(p);
  }

  size_t cached() {
    std::lock_guard lock(mu_);
    return cached_;
  }

  // Keeps `p` for reuse, making room by unmapping blocks of other size classes (a process that
  // moved on to other shapes must not find the cache full of sizes it no longer uses).
  void give(std::byte* p, size_t size) {
    const size_t bound = large_buffer_cache_bytes();
    std::vector<std::pair<std::byte*, size_t>> unmap;
    {
      std::lock_guard lock(mu_);
      for (auto it = free_.begin(); cached_ + size > bound && size <= bound && it != free_.end(); ++it) {
        while (it->first != size && !it->second.empty() && cached_ + size > bound) {
          unmap.emplace_back(it->second.back(), it->first);
          it->second.pop_back();
          cached_ -= it->first;
        }
      }
      if (cached_ + size <= bound) {
        free_[size].push_back(p);
        cached_ += size;
      } else {
        unmap.emplace_back(p, size);
      }
    }
    for (const auto& [block, bytes] : unmap) ::munmap(block, bytes);
  }

 private:
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<std::byte*>> free_;
  size_t cached_ = 0;
};

}  // namespace

size_t large_buffer_cache_bytes() {
  static const size_t bytes = static_cast<size_t>(std::min<uint64_t>(256u << 20, physical_memory_bytes() / 8));
  return bytes;
}

size_t large_buffer_cached_bytes() { return LargeBlocks::instance().cached(); }

bool large_buffers_are_mapped() { return !kSanitized; }

void detail::BufferFree::operator()(std::byte* p) const {
  if (!owned) return;
  if (mapped) {
    LargeBlocks::instance().give(p, mapped);
  } else {
    ::operator delete[](p, kAlign);
  }
}

HostBuffer::HostBuffer(DType dtype, const Shape& shape) : dtype_(dtype), shape_(shape) {
  size_t n = checked_nbytes(shape.span(), dtype_size(dtype)).value_or_throw();
  if (n > physical_memory_bytes()) {
    throw Error(invalid_argument(fmt::format(
        "a {}{} tensor needs {} bytes, more than this machine's memory ({} bytes); use smaller "
        "shapes", dtype_name(dtype), shape.to_string(), n, physical_memory_bytes())));
  }
  if (n >= kLargeBufferBytes && !kSanitized) {
    const size_t size = LargeBlocks::size_class(n);
    bool zeroed = false;
    std::byte* p = LargeBlocks::instance().take(size, &zeroed);
    data_ = std::unique_ptr<std::byte[], detail::BufferFree>(p, detail::BufferFree{true, size});
    if (!zeroed) std::memset(p, 0, n);
    return;
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

}  // namespace tracecache
