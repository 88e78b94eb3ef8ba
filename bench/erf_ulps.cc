// Measures how far the cpu backend's vector erf (replay/backends/cpu/vector_math.h, libmvec) is from
// glibc's scalar erff (std::erf, what the reference kernels compute) over every f32 input: the
// largest difference in ulps and how many inputs differ at all. The bound that the cpu kernels'
// erf and gelu tests use (cpu_kernels.h) rests on it. Takes about 20 s on one core; exits 1 if the
// difference exceeds that bound (2 ulp). Measures the variant this machine uses (erf_variant()).
//   build/bench/erf_ulps
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "replay/backends/cpu/vector_math.h"

namespace {

// Distance in representable floats (both finite or equal infinities; NaNs handled by the caller).
int64_t ulps_apart(float a, float b) {
  auto ordered = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, sizeof i);
    return i < 0 ? static_cast<int64_t>(INT32_MIN) - i : static_cast<int64_t>(i);
  };
  const int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

}  // namespace

int main() {
  constexpr int64_t kBlock = int64_t{1} << 16;
  std::vector<float> in(kBlock), vec(kBlock);
  int64_t max_ulps = 0, differ = 0, nan_mismatch = 0;
  float worst = 0;
  for (int64_t base = 0; base < (int64_t{1} << 32); base += kBlock) {
    for (int64_t i = 0; i < kBlock; ++i) {
      const uint32_t bits = static_cast<uint32_t>(base + i);
      std::memcpy(&in[static_cast<size_t>(i)], &bits, sizeof bits);
    }
    tracecache::cpu::erf_f32(in.data(), vec.data(), kBlock);
    for (int64_t i = 0; i < kBlock; ++i) {
      const float x = in[static_cast<size_t>(i)], v = vec[static_cast<size_t>(i)], s = std::erf(x);
      if (std::isnan(v) || std::isnan(s)) {
        nan_mismatch += std::isnan(v) != std::isnan(s);
        continue;
      }
      if (v == s) continue;
      ++differ;
      const int64_t u = ulps_apart(v, s);
      if (u > max_ulps) {
        max_ulps = u;
        worst = x;
      }
    }
  }
  std::printf("erf variant %s: %lld of 2^32 inputs differ from std::erf, by at most %lld ulp (first at x = %a); "
              "NaN mismatches %lld\n",
              tracecache::cpu::erf_variant(), static_cast<long long>(differ), static_cast<long long>(max_ulps),
              static_cast<double>(worst), static_cast<long long>(nan_mismatch));
  return max_ulps <= 2 && nan_mismatch == 0 ? 0 : 1;  // the bound cpu_kernels.h states
}
