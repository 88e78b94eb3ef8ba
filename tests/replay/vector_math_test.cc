// replay/backends/cpu/vector_math.h: every variant this CPU can run, not only the one it dispatches to
// (an AVX2 machine runs the AVX2 ones, which an AVX-512 machine would otherwise never test):
// batch_norm_f32's (AVX-512, AVX2, scalar) give nn::batch_norm_apply's bits for every element,
// in place or not, whatever the run's length (full vectors and the scalar tail), on values of
// every class; erf_f32's (AVX2, SSE) are within 2 ulp of the scalar erff, and a value's result
// does not depend on where it sits in a run (a partial vector is padded).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "replay/backends/cpu/vector_math.h"
#include "capture/core/buffer.h"
#include "capture/ops/nn_numerics.h"
#include "tests/backend_compare.h"

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
  const std::vector<cpu::BatchNormVariant> variants = cpu::batch_norm_variants();
  ASSERT_FALSE(variants.empty());
  EXPECT_STREQ(variants.front().name, cpu::batch_norm_variant());
  EXPECT_STREQ(variants.back().name, "scalar");
  const std::vector<nn::BatchNormChannel> channels = {
      nn::batch_norm_channel(0.5f, 2.0f, 1.5f, -0.25f, 1e-5),
      nn::batch_norm_channel(-3.0f, 1e-6f, 7.0f, 100.0f, 1e-5),
      nn::batch_norm_channel(1e20f, 1e30f, -2.0f, 0.0f, 1e-3),
  };
  for (const cpu::BatchNormVariant& v : variants) {
    SCOPED_TRACE(v.name);
    for (const nn::BatchNormChannel& c : channels) {
      for (int64_t n : {0, 1, 3, 4, 7, 8, 9, 15, 16, 17, 64, 301}) {
        const std::vector<float> in = inputs(static_cast<size_t>(n), static_cast<uint32_t>(n * 7 + 1));
        std::vector<float> out(static_cast<size_t>(n) + 1, -7.0f);
        v.fn(in.data(), c, out.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_TRUE(same_bits(out[i], nn::batch_norm_apply(in[i], c))) << "n " << n << " i " << i;
        }
        EXPECT_EQ(out[n], -7.0f) << "wrote past the run";
        std::vector<float> inplace = in;
        v.fn(inplace.data(), c, inplace.data(), n);
        for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(inplace[i], out[i])) << "in place, n " << n << " i " << i;
      }
    }
  }
}

TEST(VectorMath, EveryErfVariantIsWithinTwoUlpAndIndependentOfPosition) {
  const std::vector<cpu::ErfVariant> variants = cpu::erf_variants();
  ASSERT_FALSE(variants.empty());
  EXPECT_STREQ(variants.front().name, cpu::erf_variant());
  EXPECT_STREQ(variants.back().name, "sse");
  constexpr int64_t kN = 4099;
  std::mt19937 rng(5);
  std::vector<float> in(kN);
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = i % 7 == 0 ? std::bit_cast<float>(static_cast<uint32_t>(rng()))  // any class, NaN too
                       : std::uniform_real_distribution<float>(-6.0f, 6.0f)(rng);
  }
  const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min(), 1e-30f};
  std::copy(std::begin(specials), std::end(specials), in.begin());
  for (const cpu::ErfVariant& v : variants) {
    SCOPED_TRACE(v.name);
    for (float scale : {1.0f, 0.70710678f}) {
      std::vector<float> out(in.size() + 1, -7.0f);
      v.fn(in.data(), scale, out.data(), kN);
      EXPECT_EQ(out[kN], -7.0f) << "wrote past the run";
      // The cpu kernels' erf bound (tests/backend_compare.h), against erff of the same product.
      HostBuffer x(DType::kF32, Shape{kN}), got(DType::kF32, Shape{kN}), want(DType::kF32, Shape{kN});
      for (int64_t i = 0; i < kN; ++i) {
        x.data<float>()[i] = in[i] * scale;
        got.data<float>()[i] = out[i];
        want.data<float>()[i] = std::erf(x.data<float>()[i]);
      }
      ASSERT_TRUE(testing::within_erf_bound(got, want, x, /*gelu=*/false));
      // Each value alone (a run of one, padded) and in place: the same bits as in the long run.
      for (size_t i = 0; i < in.size(); i += 97) {
        float alone = in[i];
        v.fn(&alone, scale, &alone, 1);
        ASSERT_TRUE(same_bits(alone, out[i])) << "position " << i;
      }
    }
  }
}

}  // namespace
}  // namespace tracecache
