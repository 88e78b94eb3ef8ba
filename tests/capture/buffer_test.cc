// HostBuffer storage: zero-initialized always; large buffers reused from their own mappings
// (capture/core/buffer.h), within a bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "capture/core/buffer.h"

namespace tracecache {
namespace {

bool all_zero(const HostBuffer& b) {
  const std::byte* p = b.bytes();
  return std::all_of(p, p + b.nbytes(), [](std::byte x) { return x == std::byte{0}; });
}

HostBuffer floats(int64_t n) { return HostBuffer(DType::kF32, Shape{IntList{n}}); }

TEST(LargeBuffers, AFreedBufferIsReusedZeroedByTheNextOfItsSizeClass) {
  const int64_t n = 200'000;  // 800 KB, above kLargeBufferBytes
  const std::byte* first = nullptr;
  {
    HostBuffer b = floats(n);
    EXPECT_TRUE(all_zero(b));
    std::fill_n(b.data<float>(), n, 3.0f);
    first = b.bytes();
  }
  HostBuffer again = floats(n - 1000);  // a little smaller: the same size class
  EXPECT_TRUE(all_zero(again));         // the old values are gone
  if (large_buffers_are_mapped()) {
    EXPECT_EQ(again.bytes(), first);
  }
}

TEST(LargeBuffers, SmallBuffersAreZeroedToo) {
  for (int i = 0; i < 3; ++i) {
    HostBuffer b = floats(100);
    EXPECT_TRUE(all_zero(b));
    std::fill_n(b.data<float>(), 100, 1.0f);
  }
}

TEST(LargeBuffers, TheKeptBytesStayWithinTheirBound) {
  const size_t bound = large_buffer_cache_bytes();
  const int64_t n = 8 << 20;  // 32 MiB of floats each; fresh mappings are not touched
  std::vector<std::unique_ptr<HostBuffer>> held;
  for (size_t bytes = 0; bytes <= bound + (64u << 20); bytes += static_cast<size_t>(n) * 4) {
    held.push_back(std::make_unique<HostBuffer>(DType::kF32, Shape{IntList{n}}));
  }
  held.clear();
  if (large_buffers_are_mapped()) {
    EXPECT_GT(large_buffer_cached_bytes(), 0u);
    EXPECT_LE(large_buffer_cached_bytes(), bound);
  } else {  // AddressSanitizer: heap memory, nothing kept
    EXPECT_EQ(large_buffer_cached_bytes(), 0u);
  }
}

}  // namespace
}  // namespace tracecache
