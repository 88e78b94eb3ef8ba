// DType: the element types tracecache tensors can hold, and the promotion rule between them.
//
// The numeric values of the enumerators are persisted (graph hashes, executables): never
// renumber them, only append. Thread-safe: everything here is constexpr or pure.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <type_traits>

#include "capture/core/half.h"

namespace tracecache {

enum class DType : uint8_t {
  kBool = 0,
  kI32 = 1,
  kI64 = 2,
  kF32 = 3,
  kF64 = 4,
  kBF16 = 5,
  kF16 = 6,
  kI8 = 7,
  kU8 = 8,
  kI16 = 9,
};
inline constexpr int kDTypeCount = 10;

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kBool: return 1;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kF32: return 4;
    case DType::kF64: return 8;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kI8: return 1;
    case DType::kU8: return 1;
    case DType::kI16: return 2;
  }
  return 0;
}

constexpr bool is_floating(DType t) {
  return t == DType::kF32 || t == DType::kF64 || t == DType::kBF16 || t == DType::kF16;
}
constexpr bool is_integral(DType t) {
  return t == DType::kI32 || t == DType::kI64 || t == DType::kI8 || t == DType::kU8 || t == DType::kI16;
}
// bf16 and f16: stored in 16 bits, computed in f32 (capture/core/half.h).
constexpr bool is_half_float(DType t) { return t == DType::kBF16 || t == DType::kF16; }
// The type an op on `t` computes in: f32 for bf16/f16, else `t` itself.
constexpr DType arithmetic_dtype(DType t) { return is_half_float(t) ? DType::kF32 : t; }

// "bool", "i8", "u8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64": the spelling used by the
// trace format and all output.
std::string_view dtype_name(DType t);
std::optional<DType> parse_dtype(std::string_view name);

namespace dtype_detail {
// Rank within a category: bool 0; integers by width (u8 and i8 both 1); floats f16 = bf16 < f32 < f64.
constexpr int category(DType t) { return t == DType::kBool ? 0 : is_integral(t) ? 1 : 2; }
constexpr int width(DType t) { return t == DType::kBool ? 0 : static_cast<int>(dtype_size(t)); }
}  // namespace dtype_detail

// The result type of a binary arithmetic op, as torch.promote_types defines it: the higher
// category wins (bool < integers < floats: i64 with f16 gives f16); within a category the wider
// type, except that u8 with i8 gives i16 and bf16 with f16 gives f32. On the original four types
// this is the lattice bool < i32 < i64 < f32.
constexpr DType promote(DType a, DType b) {
  using namespace dtype_detail;
  if (a == b) return a;
  if (category(a) != category(b)) return category(a) > category(b) ? a : b;
  if (width(a) != width(b)) {
    return width(a) > width(b) ? a : b;  // u8 with i16 is i16, i8 with i32 is i32, bf16 with f64 is f64
  }
  // Same width, different types: {u8, i8} -> i16, {bf16, f16} -> f32.
  return category(a) == 1 ? DType::kI16 : DType::kF32;
}

// Maps a DType to its C++ element type; `bool` tensors store one byte per element.
template <DType T> struct DTypeTraits;
template <> struct DTypeTraits<DType::kBool> { using type = bool; };
template <> struct DTypeTraits<DType::kI32> { using type = int32_t; };
template <> struct DTypeTraits<DType::kI64> { using type = int64_t; };
template <> struct DTypeTraits<DType::kF32> { using type = float; };
template <> struct DTypeTraits<DType::kF64> { using type = double; };
template <> struct DTypeTraits<DType::kBF16> { using type = BFloat16; };
template <> struct DTypeTraits<DType::kF16> { using type = Half; };
template <> struct DTypeTraits<DType::kI8> { using type = int8_t; };
template <> struct DTypeTraits<DType::kU8> { using type = uint8_t; };
template <> struct DTypeTraits<DType::kI16> { using type = int16_t; };
template <DType T> using ctype_t = typename DTypeTraits<T>::type;

// Calls fn(std::integral_constant-like tag) with the C++ type for `t`:
//   dispatch_dtype(t, [&]<typename T>() { ... });
template <typename Fn>
decltype(auto) dispatch_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::kBool: return fn.template operator()<bool>();
    case DType::kI32: return fn.template operator()<int32_t>();
    case DType::kI64: return fn.template operator()<int64_t>();
    case DType::kF64: return fn.template operator()<double>();
    case DType::kBF16: return fn.template operator()<BFloat16>();
    case DType::kF16: return fn.template operator()<Half>();
    case DType::kI8: return fn.template operator()<int8_t>();
    case DType::kU8: return fn.template operator()<uint8_t>();
    case DType::kI16: return fn.template operator()<int16_t>();
    case DType::kF32: break;
  }
  return fn.template operator()<float>();
}

// dispatch_dtype for kernels, which compute: every type but bf16 and f16, which are storage only
// (callers widen them to f32 first, see arithmetic_dtype). A half type here is a caller's bug: it
// aborts rather than read 2-byte elements as 4-byte ones.
[[noreturn]] void half_dtype_in_kernel(DType t);
template <typename Fn>
decltype(auto) dispatch_compute_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::kBool: return fn.template operator()<bool>();
    case DType::kI32: return fn.template operator()<int32_t>();
    case DType::kI64: return fn.template operator()<int64_t>();
    case DType::kF64: return fn.template operator()<double>();
    case DType::kI8: return fn.template operator()<int8_t>();
    case DType::kU8: return fn.template operator()<uint8_t>();
    case DType::kI16: return fn.template operator()<int16_t>();
    case DType::kBF16:
    case DType::kF16: half_dtype_in_kernel(t);
    case DType::kF32: break;
  }
  return fn.template operator()<float>();
}

}  // namespace tracecache
