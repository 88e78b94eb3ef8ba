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

namespace tracecache {

enum class DType : uint8_t {
  kBool = 0,
  kI32 = 1,
  kI64 = 2,
  kF32 = 3,
};
inline constexpr int kDTypeCount = 4;

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kBool: return 1;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kF32: return 4;
  }
  return 0;
}

constexpr bool is_floating(DType t) { return t == DType::kF32; }
constexpr bool is_integral(DType t) { return t == DType::kI32 || t == DType::kI64; }

// "f32", "i32", "i64", "bool": the spelling used by the trace format and all output.
std::string_view dtype_name(DType t);
std::optional<DType> parse_dtype(std::string_view name);

// The result type of a binary arithmetic op, PyTorch-style category promotion on the lattice
// bool < i32 < i64 < f32 (so i64 with f32 gives f32).
constexpr DType promote(DType a, DType b) {
  return static_cast<uint8_t>(a) >= static_cast<uint8_t>(b) ? a : b;
}

// Maps a DType to its C++ element type; `bool` tensors store one byte per element.
template <DType T> struct DTypeTraits;
template <> struct DTypeTraits<DType::kBool> { using type = bool; };
template <> struct DTypeTraits<DType::kI32> { using type = int32_t; };
template <> struct DTypeTraits<DType::kI64> { using type = int64_t; };
template <> struct DTypeTraits<DType::kF32> { using type = float; };
template <DType T> using ctype_t = typename DTypeTraits<T>::type;

// Calls fn(std::integral_constant-like tag) with the C++ type for `t`:
//   dispatch_dtype(t, [&]<typename T>() { ... });
template <typename Fn>
decltype(auto) dispatch_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::kBool: return fn.template operator()<bool>();
    case DType::kI32: return fn.template operator()<int32_t>();
    case DType::kI64: return fn.template operator()<int64_t>();
    case DType::kF32: break;
  }
  return fn.template operator()<float>();
}

}  // namespace tracecache
