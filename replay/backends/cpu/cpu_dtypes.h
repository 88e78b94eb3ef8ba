// The element types the cpu backend computes in: bool, i32, i64 and f32. CpuBackend::supports
// declines a node of any other dtype (or with an input of one), so its kernels never see one;
// the Runtime then says which op and dtype (replay/engine/runtime.cc) and the graph runs on the
// reference evaluator, which computes every dtype (capture/reference/reference.h).
// Thread-safety: constexpr and pure.
#pragma once

#include <cstdint>

#include "capture/core/dtype.h"

namespace tracecache::cpu {

constexpr bool computes(DType t) {
  return t == DType::kBool || t == DType::kI32 || t == DType::kI64 || t == DType::kF32;
}

// dispatch_dtype over the four types above. REQUIRES: computes(t) (others run as f32: a bug).
template <typename Fn>
decltype(auto) dispatch_cpu_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::kBool: return fn.template operator()<bool>();
    case DType::kI32: return fn.template operator()<int32_t>();
    case DType::kI64: return fn.template operator()<int64_t>();
    default: break;
  }
  return fn.template operator()<float>();
}

}  // namespace tracecache::cpu
