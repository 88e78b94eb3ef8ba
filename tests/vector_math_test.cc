// backends/cpu/vector_math.h: batch_norm_f32 (AVX-512, AVX2 or scalar, whichever this CPU has)
// gives nn::batch_norm_apply's bits for every element, in place or not, whatever the run's
// length (full vectors and the scalar tail), on values of every class. Only the variant this
// CPU dispatches to is run.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/vector_math.h"
#include "capture/ops/nn_numerics.h"

namespace tracecache {
namespace {

// Floats of every class: random bit patterns (NaNs, infinities, subnormals, both zeros among
// them), values near the channel's mean, and large ones whose product overflows f32.
std::vector<float> inputs(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(),
                            3.0e38f, -1.5f, 0.25f};
  for (size_t i = 0; i < n; ++i) {
    switch (rng() % 3) {
      case 0: v[i] = std::bit_cast<float>(static_cast<uint32_t>(rng())); break;
      case 1: v[i] = specials[rng() % std::size(specials)]; break;
      default: v[i] = std::uniform_real_distribution<float>(-4.0f, 4.0f)(rng); break;
    }
  }
  return v;
}

::testing::AssertionResult same_bits(float got, float want) {
  if (std::bit_cast<uint32_t>(got) == std::bit_cast<uint32_t>(want)) return ::testing::AssertionSuccess();
  if (std::isnan(got) && std::isnan(want)) return ::testing::AssertionSuccess();  // any NaN payload
  return ::testing::AssertionFailure() << got << " != " << want;
}

TEST(VectorMath, BatchNormIsTheScalarFormulaBitwise) {
  SCOPED_TRACE(cpu::batch_norm_variant());
  const std::vector<nn::BatchNormChannel> channels = {
      nn::batch_norm_channel(0.5f, 2.0f, 1.5f, -0.25f, 1e-5),
      nn::batch_norm_channel(-3.0f, 1e-6f, 7.0f, 100.0f, 1e-5),
      nn::batch_norm_channel(1e20f, 1e30f, -2.0f, 0.0f, 1e-3),
  };
  for (const nn::BatchNormChannel& c : channels) {
    for (int64_t n : {0, 1, 3, 4, 7, 8, 9, 15, 16, 17, 64, 301}) {
      const std::vector<float> in = inputs(static_cast<size_t>(n), static_cast<uint32_t>(n * 7 + 1));
      std::vector<float> out(static_cast<size_t>(n) + 1, -7.0f);
      cpu::batch_norm_f32(in.data(), c, out.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(same_bits(out[i], nn::batch_norm_apply(in[i], c))) << "n " << n << " i " << i;
      }
      EXPECT_EQ(out[n], -7.0f) << "wrote past the run";
      std::vector<float> inplace = in;
      cpu::batch_norm_f32(inplace.data(), c, inplace.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(inplace[i], out[i])) << "in place, n " << n << " i " << i;
    }
  }
}

}  // namespace
}  // namespace tracecache
