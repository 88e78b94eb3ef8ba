// The element types the cpu backend computes in: bool, i32, i64 and f32. It also holds the
// storage types bf16, f16, i8, u8 and i16 (`holds`): its compiler widens a graph of them so that
// every op but `cast` computes in f32 or i32 (replay/compile/widen.h), and its eager runner does
// the same per op; only cast kernels read or write them (cpu_fused.cc, convert_fn). f64 is neither:
// CpuBackend::supports declines it, the Runtime says which op and dtype
// (replay/engine/runtime.cc) and the graph runs on the reference evaluator, which computes every
// dtype (capture/reference/reference.h). Thread-safety: constexpr and pure.
#pragma once

#include <cstdint>

#include "capture/core/dtype.h"
#include "replay/compile/widen.h"

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

// The types the backend accepts: those it computes and the storage types it widens.
constexpr bool holds(DType t) {
  return computes(t) || storage_dtype(t);
}

}  // namespace tracecache::cpu
