// Small literal buffers for kernel tests: make(dtype, shape, values) and f32/i32/i64 shorthands,
// and seeded random values. A value count that does not fit the shape is a test failure, not a
// crash.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "capture/core/buffer.h"

namespace tracecache::test {

template <typename T>
HostBuffer make(DType dtype, const Shape& shape, const std::vector<T>& values) {
  HostBuffer b(dtype, shape);
  EXPECT_EQ(static_cast<int64_t>(values.size()), b.numel()) << "test data does not fit " << shape.to_string();
  for (size_t i = 0; i < values.size() && static_cast<int64_t>(i) < b.numel(); ++i) {
    dispatch_dtype(dtype, [&]<typename U>() { b.data<U>()[i] = static_cast<U>(values[i]); });
  }
  return b;
}
inline HostBuffer f32(const Shape& s, const std::vector<float>& v) { return make(DType::kF32, s, v); }
inline HostBuffer i32(const Shape& s, const std::vector<int32_t>& v) { return make(DType::kI32, s, v); }
inline HostBuffer i64(const Shape& s, const std::vector<int64_t>& v) { return make(DType::kI64, s, v); }

// n values uniform in [lo, hi), the same for the same seed (std::mt19937).
inline std::vector<float> random_values(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace tracecache::test
