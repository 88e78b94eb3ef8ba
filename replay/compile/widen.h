// Widening: how the cpu kernels compute the storage types. bf16 and f16 are stored in 16 bits and
// computed in f32; i8, u8 and i16 are computed in i32. widen_storage_types() rewrites a graph so
// that every op other than those of reads_storage_types() (cast, quantize_linear,
// dequantize_linear) computes in the wide type: each input of a storage type is
// cast to its wide type, the op runs there, and a result of a storage type is cast back. That is
// the reference evaluator's own rule for halves (capture/reference/reference.h, evaluate_op:
// compute in f32, round the result once), so the rewritten graph gives the same bits; for the
// small integers, arithmetic in i32 followed by the wrapping cast is arithmetic modulo 2^bits,
// what the reference's int8_t/uint8_t/int16_t arithmetic gives.
//
// The rewritten graph has the same parameters, in order, and the same outputs (an output of a
// storage type is the cast back), and the same donations. It is a pure function of the graph,
// so an executable stores only that it was widened (replay/compile/executable.h) and a loader
// derives the graph again. Its kernels are compiled against it, never hashed: the executable's
// key stays the original graph's. Thread-safety: pure functions.
#pragma once

#include <span>

#include "capture/core/dtype.h"
#include "capture/ir/graph.h"

namespace tracecache {

// The type `t` computes in on the cpu kernels: f32 for bf16/f16, i32 for i8/u8/i16, else t.
constexpr DType widened_dtype(DType t) {
  if (is_half_float(t)) return DType::kF32;
  if (t == DType::kI8 || t == DType::kU8 || t == DType::kI16) return DType::kI32;
  return t;
}

// A storage type: one that widened_dtype() changes.
constexpr bool storage_dtype(DType t) { return widened_dtype(t) != t; }

// The ops whose kernels read and write the storage types themselves, left as they are by the
// rewrite: cast (between any two types), and quantize_linear and dequantize_linear, whose
// result type is their zero point's or scale's (an i8 result computed as i32 would not
// saturate to i8's range).
constexpr bool reads_storage_types(OpKind op) {
  return op == OpKind::kCast || op == OpKind::kQuantizeLinear || op == OpKind::kDequantizeLinear;
}

// An op's attributes as its widened form takes them: a source op's dtype attribute (full,
// arange, uniform, normal) names its result's type, `result`, and becomes the widened one.
inline void widen_dtype_attrs(std::span<AttrValue> attrs, DType result) {
  for (AttrValue& a : attrs) {
    if (a.kind == AttrKind::kDType && a.dtype == result) a.dtype = widened_dtype(result);
  }
}

// True if some node of `graph` other than a parameter or a cast has a storage type or reads one.
bool needs_widening(const Graph& graph);

// The graph with every op but `cast` computed in widened types (see above).
Graph widen_storage_types(const Graph& graph);

}  // namespace tracecache
