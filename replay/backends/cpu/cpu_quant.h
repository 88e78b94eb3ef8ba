// The cpu backend's kernels for quantize_linear and dequantize_linear (docs/ops.md): element by
// element with the reference's functors (capture/ops/elementwise.h, QuantizeLinear and
// DequantizeLinear) on the same f32 values, so BITWISE the reference kernels' results. What
// differs is the loop: the output is walked in runs over which the scale and zero point are
// constant (the whole tensor per tensor; H x W per channel of an NCHW x with a [C, 1, 1] scale),
// the two read once per run, the runs split over the backend's threads, and no converted copy of
// x is made. The element types are read and written as stored (bf16, f16, i8, u8, i32, f32):
// the compiler does not widen these ops (replay/compile/widen.h).
// Thread-safe (no state).
#pragma once

#include <span>

#include "capture/core/buffer.h"
#include "capture/ops/ops.h"

namespace tracecache::cpu {

// Runs quantize_linear or dequantize_linear into `out` (preallocated with the inferred type,
// fully overwritten) and returns true; false, writing nothing, for any other op.
// REQUIRES: inputs as the op's inference rule accepted them; `out` overlaps none.
bool run_quant_op(OpKind op, std::span<const HostBuffer* const> inputs, HostBuffer& out);

}  // namespace tracecache::cpu
