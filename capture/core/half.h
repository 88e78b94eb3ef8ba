// BFloat16 and Half: the two 16-bit floating storage types (DType::kBF16, DType::kF16).
//
// Each holds its IEEE bits (`bits`, little-endian in buffers, as PyTorch, safetensors and numpy
// store them) and converts to and from float:
//  - to float is exact (every bf16 and f16 value is a float);
//  - from float rounds to nearest, ties to even, as PyTorch's conversions do (c10::BFloat16's
//    round_to_nearest_even, and IEEE's float -> half); NaN stays NaN (quiet, sign kept),
//    values beyond the largest finite become infinity, f16's tiny values become subnormals or
//    zero with their sign.
// Arithmetic happens in float: `a + b` converts both and gives a float, and storing a float
// back rounds once. Code that must not round between steps (sums, dot products) widens first;
// the reference evaluator computes every bf16/f16 op in f32 and rounds its result once
// (capture/reference/reference.h).
//
// Thread-safety: value types, constexpr-friendly, no state.
#pragma once

#include <cstdint>
#include <type_traits>

namespace tracecache {

namespace half_detail {

// std::bit_cast, also where this header is compiled as C++17 (the torch bridge includes it
// through dtype.h, and libtorch 1.13's headers build only as C++17 with clang 14).
template <typename To, typename From>
constexpr To bit_cast(const From& from) {
  static_assert(sizeof(To) == sizeof(From));
  return __builtin_bit_cast(To, from);
}

constexpr uint16_t bf16_from_float(float f) {
  const uint32_t u = bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN: quiet
  const uint32_t bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + bias) >> 16);
}

constexpr float bf16_to_float(uint16_t b) { return bit_cast<float>(static_cast<uint32_t>(b) << 16); }

constexpr uint16_t f16_from_float(float f) {
  const uint32_t u = bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x03ffu));  // NaN: quiet
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to 65520 or more: inf
  if (a < 0x38800000u) {
    // Below f16's smallest normal (2^-14): a subnormal multiple of 2^-24, rounded to even.
    if (a < 0x33000000u) return sign;  // at most 2^-25: rounds to zero
    const uint32_t exp = a >> 23, mant = (a & 0x007fffffu) | 0x00800000u;
    const uint32_t shift = 126u - exp;  // so that mant >> shift counts units of 2^-24
    const uint32_t q = mant >> shift, rest = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    const uint32_t r = q + ((rest > half || (rest == half && (q & 1u))) ? 1u : 0u);
    return static_cast<uint16_t>(sign | r);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to even.
  const uint32_t r = a - 0x38000000u;
  const uint32_t rounded = r + 0x0fffu + ((r >> 13) & 1u);
  return static_cast<uint16_t>(sign | (rounded >> 13));
}

constexpr float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x03ffu;
  if (exp == 0x1f) return bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf, NaN
  if (exp != 0) return bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return bit_cast<float>(sign);
  // Subnormal: mant * 2^-24, exact in float.
  const float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
  return sign ? -v : v;
}

}  // namespace half_detail

// A 16-bit float stored as its bits: made from a float by `round` (to nearest, ties to even, as a
// float store would), read back as a float exactly by `widen`.
template <uint16_t (*round)(float), float (*widen)(uint16_t)>
struct Float16Storage {
  uint16_t bits = 0;
  constexpr Float16Storage() = default;
  constexpr Float16Storage(float f) : bits(round(f)) {}  // NOLINT: rounds, as a float store would
  constexpr operator float() const { return widen(bits); }  // NOLINT: exact
  static constexpr Float16Storage from_bits(uint16_t b) {
    Float16Storage v;
    v.bits = b;
    return v;
  }
};

// A bfloat16 value: float's sign, exponent and top 7 mantissa bits.
using BFloat16 = Float16Storage<half_detail::bf16_from_float, half_detail::bf16_to_float>;
// An IEEE binary16 value: 5 exponent bits, 10 mantissa bits, subnormals, inf and NaN.
using Half = Float16Storage<half_detail::f16_from_float, half_detail::f16_to_float>;

static_assert(sizeof(BFloat16) == 2 && sizeof(Half) == 2);

// True for float, double, BFloat16 and Half: element types that hold real numbers.
template <typename T>
inline constexpr bool is_real_v = std::is_floating_point_v<T> || std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>;

}  // namespace tracecache
