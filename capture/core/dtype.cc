#include "capture/core/dtype.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace tracecache {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kBool: return "bool";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI8: return "i8";
    case DType::kU8: return "u8";
    case DType::kI16: return "i16";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (int i = 0; i < kDTypeCount; ++i) {
    auto t = static_cast<DType>(i);
    if (dtype_name(t) == name) return t;
  }
  return std::nullopt;
}

void half_dtype_in_kernel(DType t) {
  std::fprintf(stderr, "tracecache: internal error: a kernel was given %s data; bf16 and f16 are computed in f32\n",
               std::string(dtype_name(t)).c_str());
  std::abort();
}

}  // namespace tracecache
