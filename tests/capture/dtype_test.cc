// The dtypes added for mixed precision (capture/core/dtype.h, capture/core/half.h): bf16 and
// f16 conversions against a brute-force oracle (the nearest of all 65536 values, ties to the
// even bit pattern), promotion as torch.promote_types defines it, names, and the reference
// evaluator computing a half op in f32 and rounding once (capture/reference/reference.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "capture/core/dtype.h"
#include "capture/core/half.h"
#include "capture/ops/elementwise.h"
#include "capture/reference/reference.h"

namespace tracecache {
namespace {

// Every finite value of a 16-bit format, sorted, with its bits.
template <typename H>
std::vector<std::pair<double, uint16_t>> finite_values() {
  std::vector<std::pair<double, uint16_t>> v;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = H::from_bits(static_cast<uint16_t>(b));
    if (std::isfinite(f) && !(f == 0 && std::signbit(f))) v.emplace_back(f, static_cast<uint16_t>(b));
  }
  std::sort(v.begin(), v.end());
  return v;
}

// The oracle: the nearest finite value (ties to the even bit pattern); beyond the largest
// finite value by half an ulp or more, infinity. Signs of zero follow the input.
template <typename H>
uint16_t nearest(float x, const std::vector<std::pair<double, uint16_t>>& values, double max_ulp) {
  const double d = x;
  const double top = values.back().first;
  if (std::fabs(d) >= top + max_ulp / 2) return H(std::copysign(std::numeric_limits<float>::infinity(), x)).bits;
  auto it = std::lower_bound(values.begin(), values.end(), std::make_pair(d, uint16_t{0}));
  uint16_t best;
  if (it == values.begin()) {
    best = it->second;
  } else if (it == values.end()) {
    best = std::prev(it)->second;
  } else {
    const auto lo = *std::prev(it), hi = *it;
    const double dl = d - lo.first, dh = hi.first - d;
    best = dl < dh ? lo.second : dh < dl ? hi.second : ((lo.second & 1) == 0 ? lo.second : hi.second);
  }
  const float r = H::from_bits(best);
  if (r == 0) return H(std::signbit(x) ? -0.0f : 0.0f).bits;  // zero keeps the input's sign
  return best;
}

template <typename H>
void check_against_oracle(double max_ulp) {
  const auto values = finite_values<H>();
  // Every bit pattern goes to float and back unchanged (NaNs stay NaN).
  for (uint32_t b = 0; b < 65536; ++b) {
    const H h = H::from_bits(static_cast<uint16_t>(b));
    const float f = h;
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(static_cast<float>(H(f)))) << b;
    } else {
      ASSERT_EQ(H(f).bits, b) << "bits " << b;
    }
  }
  // Midpoints between neighbours (ties), their float neighbours, and random floats.
  std::vector<float> xs;
  for (size_t i = 0; i + 1 < values.size(); ++i) {
    const float mid = static_cast<float>((values[i].first + values[i + 1].first) / 2);
    xs.push_back(mid);
    xs.push_back(std::nextafter(mid, 0.0f));
    xs.push_back(std::nextafter(mid, std::numeric_limits<float>::infinity()));
  }
  std::mt19937 gen(7);
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = gen();
    const float f = std::bit_cast<float>(u);
    if (std::isfinite(f)) xs.push_back(f);
  }
  for (float x : {1e-10f, -1e-10f, 65504.0f, 65519.99f, 65520.0f, 1e38f, -3.4e38f, 5.96e-8f, 2.98e-8f, 2.99e-8f}) {
    xs.push_back(x);
  }
  for (float x : xs) ASSERT_EQ(H(x).bits, nearest<H>(x, values, max_ulp)) << "x = " << x;
  EXPECT_TRUE(std::isinf(static_cast<float>(H(std::numeric_limits<float>::infinity()))));
  EXPECT_TRUE(std::isnan(static_cast<float>(H(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(HalfTypes, Bf16RoundsToNearestEvenAsTheOracle) {
  check_against_oracle<BFloat16>(std::ldexp(1.0, 127 - 7));  // bf16's ulp at its top binade
}

TEST(HalfTypes, F16RoundsToNearestEvenAsTheOracle) {
  check_against_oracle<Half>(32.0);  // f16's ulp at 32768..65504
}

TEST(HalfTypes, KnownValues) {
  EXPECT_EQ(BFloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(Half(1.0f).bits, 0x3c00);
  EXPECT_EQ(Half(65504.0f).bits, 0x7bff);
  EXPECT_EQ(Half(-2.0f).bits, 0xc000);
  EXPECT_EQ(Half::from_bits(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(BFloat16(3.14159265f).bits, 0x4049);              // torch.tensor(3.14159265).bfloat16()
}

TEST(DTypes, PromotionAsTorchPromoteTypes) {
  using enum DType;
  // torch.promote_types on the pairs the new types add (PyTorch 1.13).
  const std::vector<std::tuple<DType, DType, DType>> cases = {
      {kU8, kI8, kI16},   {kU8, kI16, kI16},   {kI8, kI32, kI32},  {kU8, kBool, kU8},
      {kBF16, kF16, kF32}, {kBF16, kF32, kF32}, {kF16, kF64, kF64}, {kI64, kF16, kF16},
      {kI64, kBF16, kBF16}, {kBool, kBF16, kBF16}, {kF32, kF64, kF64}, {kI64, kF64, kF64},
      {kBool, kI32, kI32}, {kI32, kI64, kI64},   {kI64, kF32, kF32}, {kI16, kI16, kI16}};
  for (auto [a, b, want] : cases) {
    EXPECT_EQ(promote(a, b), want) << dtype_name(a) << " " << dtype_name(b);
    EXPECT_EQ(promote(b, a), want) << dtype_name(b) << " " << dtype_name(a);
  }
}

TEST(DTypes, NamesRoundTripAndSizes) {
  for (int i = 0; i < kDTypeCount; ++i) {
    const auto t = static_cast<DType>(i);
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
    EXPECT_GT(dtype_size(t), 0u);
  }
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(parse_dtype("u16"), std::nullopt);
}

TEST(DTypes, FloatToSmallIntegersWrapsAsPyTorchOnX86) {
  EXPECT_EQ(convert<uint8_t>(-1.0f), 255);
  EXPECT_EQ(convert<int8_t>(300.0f), 44);
  EXPECT_EQ(convert<int16_t>(40000.5), -25536);
  EXPECT_EQ(convert<uint8_t>(std::nanf("")), 0);
  EXPECT_EQ(convert<BFloat16>(int64_t{257}).bits, BFloat16(256.0f).bits);  // 257 rounds to even
}

// A half op is computed in f32 and rounded once: bf16 1 + 2^-8 (not representable) rounds to 1,
// while f32 arithmetic on widened operands followed by one rounding gives the nearest bf16.
TEST(DTypes, ReferenceComputesHalvesInF32AndRoundsOnce) {
  HostBuffer a(DType::kBF16, Shape{3}), b(DType::kBF16, Shape{3}), out(DType::kBF16, Shape{3});
  const float av[] = {1.0f, 3.0f, 100.0f}, bv[] = {0.00390625f, 0.0078125f, 0.3f};
  for (int i = 0; i < 3; ++i) {
    a.data<BFloat16>()[i] = BFloat16(av[i]);
    b.data<BFloat16>()[i] = BFloat16(bv[i]);
  }
  const HostBuffer* ins[] = {&a, &b};
  evaluate_op(OpKind::kAdd, ins, {}, out);
  EXPECT_EQ(infer_op(OpKind::kAdd, std::vector<TensorType>{{DType::kBF16, Shape{3}}, {DType::kBF16, Shape{3}}}, {})
                .value_or_throw()
                .dtype,
            DType::kBF16);
  for (int i = 0; i < 3; ++i) {
    const float want = BFloat16(static_cast<float>(a.data<BFloat16>()[i]) + static_cast<float>(b.data<BFloat16>()[i]));
    EXPECT_EQ(static_cast<float>(out.data<BFloat16>()[i]), want) << i;
  }
  // Sum of 1000 ones in bf16: f32 accumulation gives 1000 exactly (rounded once: 1000 is a bf16).
  HostBuffer ones(DType::kBF16, Shape{1000});
  for (int i = 0; i < 1000; ++i) ones.data<BFloat16>()[i] = BFloat16(1.0f);
  const HostBuffer* in1[] = {&ones};
  std::vector<AttrValue> attrs;
  for (const AttrSpec& spec : op_info(OpKind::kSum).attrs) attrs.push_back(spec.default_value);
  attrs[static_cast<size_t>(op_info(OpKind::kSum).attr_index("axes"))] = AttrValue::of_ints({0});
  const TensorType t = infer_op(OpKind::kSum, std::vector<TensorType>{{DType::kBF16, Shape{1000}}}, attrs).value_or_throw();
  ASSERT_EQ(t.dtype, DType::kBF16);
  ASSERT_EQ(t.shape.rank(), 0);
  HostBuffer total(t.dtype, t.shape);
  evaluate_op(OpKind::kSum, in1, attrs, total);
  EXPECT_EQ(static_cast<float>(total.data<BFloat16>()[0]), 1000.0f);
}

}  // namespace
}  // namespace tracecache
