// Element-level semantics: the single definition of what one element of every elementwise op
// computes, shared by the reference kernels (capture/ops/reference_kernels.cc) and every backend's
// kernels (replay/backends/cpu/cpu_kernels.cc), so that both give the same bits.
//
// What lives here:
//  - convert<To>(x): the conversion used wherever a value changes dtype (`cast`, operands
//    converted to an op's compute dtype, `full`/`arange` values, integer `uniform`);
//  - wrapping integer arithmetic (wrap_add/sub/mul) and int_pow;
//  - one scalar functor per elementwise op (ew::Neg ... ew::Where, then the nn activations
//    ew::GeluErf ... ew::Clamp; gelu picks its functor by its `tanh` attribute, clamp is built
//    from its `min`/`max` attributes with Clamp<T>::make);
//  - compute_dtype(): the dtype an op's operands are converted to before its functor runs.
// An elementwise op on elements a, b of any dtypes is exactly
//   out = F(convert<C>(a), convert<C>(b))   with C = compute_dtype(op, {a, b}, out),
// (for `where`, the condition is read as bool and only the two values are converted; for
// `cast`, the conversion is the whole op). docs/ops.md states the same rules in prose.
//
// Everything here is a pure function and thread-safe. Header-only so kernels inline the
// functors into their element loops.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>

#include "capture/core/dtype.h"
#include "capture/ops/ops.h"

namespace tracecache {

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<bool>() { return DType::kBool; }
template <> constexpr DType dtype_of<int32_t>() { return DType::kI32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::kI64; }
template <> constexpr DType dtype_of<float>() { return DType::kF32; }
template <> constexpr DType dtype_of<double>() { return DType::kF64; }
template <> constexpr DType dtype_of<int8_t>() { return DType::kI8; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::kU8; }
template <> constexpr DType dtype_of<int16_t>() { return DType::kI16; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::kBF16; }
template <> constexpr DType dtype_of<Half>() { return DType::kF16; }

// ---- conversion -------------------------------------------------------------------------------

// One element converted from From to To with `cast` semantics: anything -> bool is x != 0;
// float -> integer truncates toward zero, saturates at the integer range, NaN -> 0 (the C++
// conversion is undefined there); integer -> narrower integer wraps modulo 2^bits; everything
// else (integer -> float rounds to nearest, double -> float rounds or overflows to ±inf) is
// static_cast. From may be double (attribute values).
//
// The types added for mixed precision: bf16 and f16 convert through float (exact from them;
// to them rounds to nearest even, capture/core/half.h); float -> i8, u8 or i16 truncates toward
// zero to i64 (saturating there, NaN -> 0) and then wraps modulo 2^bits, which is what
// PyTorch's x86 builds give for values inside i32 (-1.0 -> u8 255, 300.0 -> i8 44).
template <typename To, typename From>
To convert(From x) {
  if constexpr (std::is_same_v<From, BFloat16> || std::is_same_v<From, Half>) {
    return convert<To>(static_cast<float>(x));
  } else if constexpr (std::is_same_v<To, BFloat16> || std::is_same_v<To, Half>) {
    return To(convert<float>(x));
  } else if constexpr (std::is_same_v<To, bool>) {
    return x != From{0};
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To> && sizeof(To) < 4) {
    return static_cast<To>(static_cast<std::make_unsigned_t<To>>(static_cast<uint64_t>(convert<int64_t>(x))));
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    double d = static_cast<double>(x);
    if (std::isnan(d)) return To{0};
    // 2^(bits-1) is exact in double; every double strictly inside (-limit, limit) truncates to
    // a value the integer type can hold.
    constexpr double limit = static_cast<double>(uint64_t{1} << std::numeric_limits<To>::digits);
    if (d >= limit) return std::numeric_limits<To>::max();
    if (d <= -limit) return std::numeric_limits<To>::min();
    return static_cast<To>(d);
  } else {
    return static_cast<To>(x);
  }
}

// ---- wrapping integer arithmetic --------------------------------------------------------------

// Computed in the unsigned type so that overflow wraps modulo 2^bits instead of being undefined.
template <typename T> using Unsigned = std::make_unsigned_t<T>;

template <typename T> T wrap_add(T a, T b) {
  return static_cast<T>(static_cast<Unsigned<T>>(static_cast<Unsigned<T>>(a) + static_cast<Unsigned<T>>(b)));
}
template <typename T> T wrap_sub(T a, T b) {
  return static_cast<T>(static_cast<Unsigned<T>>(static_cast<Unsigned<T>>(a) - static_cast<Unsigned<T>>(b)));
}
template <typename T> T wrap_mul(T a, T b) {
  // uint64 so that uint32 * uint32 cannot be promoted to (signed) int and overflow.
  return static_cast<T>(static_cast<Unsigned<T>>(static_cast<uint64_t>(static_cast<Unsigned<T>>(a)) *
                                                 static_cast<uint64_t>(static_cast<Unsigned<T>>(b))));
}

// Integer power by squaring, wrapping. A negative exponent gives 0 unless the base is 1 or -1
// (PyTorch's integer pow behaves the same way); 0 to a negative power is 0, not an error.
template <typename T> T int_pow(T base, T e) {
  if (e < 0) {
    if (base == 1) return 1;
    if (base == -1) return (e % 2 == 0) ? T{1} : static_cast<T>(-1);
    return 0;
  }
  T result = 1;
  while (e > 0) {
    if (e & 1) result = wrap_mul(result, base);
    base = wrap_mul(base, base);
    e >>= 1;
  }
  return result;
}

// ---- scalar functors --------------------------------------------------------------------------
//
// Each takes its operands already converted to the compute dtype. Same-dtype ops (neg, abs,
// relu, add, sub, mul, pow, maximum, minimum, where) are templates over that dtype; the f32-only
// ops take and return float; comparisons return bool.
namespace ew {

struct Neg {
  template <typename T> T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return -x;
    else return wrap_sub(T{0}, x);
  }
};
// abs(INT_MIN) wraps to INT_MIN, as in PyTorch; abs(-0.0) is +0.0.
struct Abs {
  template <typename T> T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return std::fabs(x);
    else return x < 0 ? wrap_sub(T{0}, x) : x;
  }
};
// NaN propagates; -0.0 becomes +0.0. (Floats: one select on a non-short-circuit `|`, so
// element loops vectorize without branches; same values as "NaN ? x : x > 0 ? x : 0".)
struct Relu {
  template <typename T> T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return ((x > T{0}) | std::isnan(x)) ? x : T{0};
    else return x > 0 ? x : T{0};
  }
};
// The float ops (exp ... cos, div, the activations) compute in f32, or in f64 for f64 operands:
// templates over float and double only.
struct Exp { template <typename T> T operator()(T x) const { return std::exp(x); } };
struct Log { template <typename T> T operator()(T x) const { return std::log(x); } };
struct Sqrt { template <typename T> T operator()(T x) const { return std::sqrt(x); } };
// Two roundings (not a fused reciprocal square root).
struct Rsqrt { template <typename T> T operator()(T x) const { return T{1} / std::sqrt(x); } };
struct Tanh { template <typename T> T operator()(T x) const { return std::tanh(x); } };
struct Sigmoid { template <typename T> T operator()(T x) const { return T{1} / (T{1} + std::exp(-x)); } };

struct Add {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) return a + b;
    else return wrap_add(a, b);
  }
};
struct Sub {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) return a - b;
    else return wrap_sub(a, b);
  }
};
struct Mul {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) return a * b;
    else return wrap_mul(a, b);
  }
};
// True division in f32: x / 0 is ±inf or NaN, never a trap.
struct Div { template <typename T> T operator()(T a, T b) const { return a / b; } };
struct Pow {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) return std::pow(a, b);
    else return int_pow(a, b);
  }
};
// NaN in either operand gives that NaN (the first one if both); on a tie the first operand is
// returned (so maximum(-0.0, 0.0) is -0.0).
// (Floats written as selects, as for Relu: "a is NaN ? a : b is NaN or b wins ? b : a".)
struct Maximum {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) return std::isnan(a) ? a : (std::isnan(b) | (b > a)) ? b : a;
    else return b > a ? b : a;
  }
};
struct Minimum {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) return std::isnan(a) ? a : (std::isnan(b) | (b < a)) ? b : a;
    else return b < a ? b : a;
  }
};
// Comparisons with NaN are false.
struct Eq { template <typename T> bool operator()(T a, T b) const { return a == b; } };
struct Lt { template <typename T> bool operator()(T a, T b) const { return a < b; } };
struct Gt { template <typename T> bool operator()(T a, T b) const { return a > b; } };
struct Where { template <typename T> T operator()(bool c, T a, T b) const { return c ? a : b; } };

// ---- quantization (ONNX QuantizeLinear / DequantizeLinear) ----
//
// In f32, as ONNX's reference computes: round_half_even(x / scale) + zero_point clamped to Q's
// range (infinities clamp to its ends; NaN gives the zero point); (x - zero_point) * scale.
template <typename Q>
struct QuantizeLinear {
  Q operator()(float x, float scale, float zero_point) const {
    const float v = std::nearbyint(x / scale) + zero_point;
    if (std::isnan(v)) return static_cast<Q>(zero_point);
    constexpr float lo = std::numeric_limits<Q>::min(), hi = std::numeric_limits<Q>::max();
    return static_cast<Q>(v < lo ? lo : (v > hi ? hi : v));
  }
};
struct DequantizeLinear {
  float operator()(float x, float scale, float zero_point) const { return (x - zero_point) * scale; }
};

// ---- nn activations (capture/trace/nn.h) ----
//
// All f32 except Clamp. Written as PyTorch 1.13's CPU kernels write them, operation for
// operation, in float; docs/ops.md spells out the edge cases (gelu(-inf) and silu(-inf) are NaN,
// as in PyTorch, because the formulas compute -inf * 0).

// gelu, erf form: x * 0.5 * (1 + erf(x / sqrt(2))).
inline constexpr float kGeluErfScale = 0.70710678118654752f;  // 1 / sqrt(2)
inline constexpr double kGeluErfScaleF64 = 0.70710678118654752440;
struct GeluErf {
  // gelu from erf(x * kGeluErfScale): the cpu backend computes that erf elsewhere (vectorized).
  template <typename T> static T from_erf(T x, T erf_value) { return x * T{0.5} * (T{1} + erf_value); }
  float operator()(float x) const { return from_erf(x, std::erf(x * kGeluErfScale)); }
  double operator()(double x) const { return from_erf(x, std::erf(x * kGeluErfScaleF64)); }
};
// gelu, tanh form (PyTorch's approximate='tanh'):
// 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))).
struct GeluTanh {
  float operator()(float x) const {
    const float cube = x * x * x;
    const float inner = 0.79788456080286536f * (x + 0.044715f * cube);
    return 0.5f * x * (1.0f + std::tanh(inner));
  }
  double operator()(double x) const {
    const double cube = x * x * x;
    const double inner = 0.79788456080286537604 * (x + 0.044715 * cube);
    return 0.5 * x * (1.0 + std::tanh(inner));
  }
};
// x * sigmoid(x), computed as x / (1 + exp(-x)).
struct Silu { template <typename T> T operator()(T x) const { return x / (T{1} + std::exp(-x)); } };
// relu6(x + 3) / 6, NaN propagating (the selects are false for NaN).
struct Hardsigmoid {
  template <typename T> T operator()(T x) const {
    T t = x + T{3};
    t = t < T{0} ? T{0} : t;
    t = t > T{6} ? T{6} : t;
    return t / T{6};
  }
};
// x * relu6(x + 3) / 6, multiplied before dividing (as PyTorch).
struct Hardswish {
  template <typename T> T operator()(T x) const {
    T t = x + T{3};
    t = t < T{0} ? T{0} : t;
    t = t > T{6} ? T{6} : t;
    return x * t / T{6};
  }
};
struct Erf { template <typename T> T operator()(T x) const { return std::erf(x); } };

// clamp(x, min, max) in x's dtype; the bounds are attributes (doubles) converted once by
// make(). Floats: the bounds round to nearest f32; NaN propagates (both selects are false);
// -0.0 inside the range stays -0.0. Integers: the bounds become the integers inside
// [min, max], i.e. ceil(min) and floor(max), saturated to the type's range, so integer clamp
// gives exactly the in-range integer nearest to x. REQUIRES (the inference rule checks it):
// make()'s bounds satisfy lo <= hi.
template <typename T>
struct Clamp {
  T lo, hi;
  static Clamp make(double min, double max) {
    if constexpr (std::is_floating_point_v<T>) return {convert<T>(min), convert<T>(max)};
    else return {convert<T>(std::ceil(min)), convert<T>(std::floor(max))};
  }
  T operator()(T x) const { return x < lo ? lo : x > hi ? hi : x; }
};

// ---- the ops ONNX models need (issue 16) ----

// floor, ceil, round: integers are unchanged; NaN and ±inf stay. round is half to even
// (std::nearbyint in the default rounding mode), as ONNX Round and torch.round.
struct Floor {
  template <typename T> T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return std::floor(x);
    else return x;
  }
};
struct Ceil {
  template <typename T> T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return std::ceil(x);
    else return x;
  }
};
struct Round {
  template <typename T> T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return std::nearbyint(x);
    else return x;
  }
};
struct Sin { template <typename T> T operator()(T x) const { return std::sin(x); } };
struct Cos { template <typename T> T operator()(T x) const { return std::cos(x); } };

// remainder: the result has the sign of the divisor (Python's %, ONNX Mod with fmod=0). Floats
// as NumPy's np.mod (ONNX's reference): fmod, plus the divisor when the signs differ, and a
// zero result takes the divisor's sign; x % 0 is NaN. Integers: x % 0 is 0 (ONNX leaves it
// undefined; NumPy gives 0), and x % -1 is 0 (no INT_MIN overflow).
struct Remainder {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      T m = std::fmod(a, b);
      if (b == T{0}) return m;
      if (m != T{0}) {
        if ((b < T{0}) != (m < T{0})) m += b;
      } else {
        m = std::copysign(T{0}, b);
      }
      return m;
    } else {
      if (b == 0 || b == -1) return T{0};
      T m = static_cast<T>(a % b);
      if (m != 0 && ((m < 0) != (b < 0))) m = static_cast<T>(m + b);
      return m;
    }
  }
};
// fmod: the result has the sign of the dividend (C's fmod, ONNX Mod with fmod=1). Integers:
// x fmod 0 is 0, x fmod -1 is 0.
struct Fmod {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) return std::fmod(a, b);
    else return (b == 0 || b == -1) ? T{0} : static_cast<T>(a % b);
  }
};
// Division rounded toward zero (ONNX Div on integers, torch.div(rounding_mode='trunc')).
// Integers: x / 0 is 0 (ONNX leaves it undefined), INT_MIN / -1 wraps to INT_MIN. Floats:
// trunc(a / b), the quotient rounded once first.
struct TruncDiv {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) return std::trunc(a / b);
    else return b == 0 ? T{0} : b == -1 ? wrap_sub(T{0}, a) : static_cast<T>(a / b);
  }
};

}  // namespace ew

// True for unary ops whose output (and compute) dtype is always f32.
constexpr bool is_float_unary(OpKind op) {
  switch (op) {
    case OpKind::kExp: case OpKind::kLog: case OpKind::kSqrt: case OpKind::kRsqrt:
    case OpKind::kTanh: case OpKind::kSigmoid: case OpKind::kGelu: case OpKind::kSilu:
    case OpKind::kHardswish: case OpKind::kHardsigmoid: case OpKind::kErf: case OpKind::kSin:
    case OpKind::kCos:
      return true;
    default:
      return false;
  }
}

// The dtype elementwise op `op` computes in, given its input dtypes and its output dtype (as
// inferred): comparisons compute in promote(a, b); the f32 unary ops (exp, log, sqrt, rsqrt,
// tanh, sigmoid, gelu, silu, hardswish, hardsigmoid, erf, sin, cos) and div in f32 (their output
// dtype); every other op (neg, abs, relu, clamp, floor, ceil, round, add, sub, mul, pow, maximum,
// minimum, remainder, fmod, trunc_div, where, cast) in its output dtype. For `where` this is the dtype of
// the two values (the condition is bool); for `cast` it is the target dtype.
// REQUIRES: op_info(op).elementwise().
constexpr DType compute_dtype(OpKind op, std::span<const DType> in, DType out) {
  switch (op) {
    case OpKind::kEq: case OpKind::kLt: case OpKind::kGt:
      return promote(in[0], in[1]);
    case OpKind::kDiv:
      return out == DType::kF64 ? DType::kF64 : DType::kF32;
    default:
      return is_float_unary(op) ? (out == DType::kF64 ? DType::kF64 : DType::kF32) : out;
  }
}

}  // namespace tracecache
