// The cpu backend's kernels for the non-elementwise nn ops: batch_norm, layer_norm, softmax,
// log_softmax and scaled_dot_product_attention (the nn activations are elementwise and run in
// the fused interpreter of cpu_kernels.h).
//
// Numerics (the table in cpu_kernels.h):
//  - batch_norm, layer_norm, softmax, log_softmax: the per-element formulas of
//    capture/ops/nn_numerics.h, every sum in double in increasing index along the normalized axis,
//    as the reference kernels do: BITWISE equal to them. Only the loop structure differs (rows
//    split over threads; softmax over a non-last axis walks a block of columns at once, each
//    column still in its own order).
//  - scaled_dot_product_attention: per batch, S = q k^T with cblas_sgemm, then in f32
//    s = S * scale + mask (causal: -inf above the diagonal), p = exp(s - max) with the row sum in
//    double, O = p v with cblas_sgemm, each output row divided by its sum. Differs from the
//    reference (all in double) by summation order and f32 rounding; the tested bound
//    (tests/capture/nn_ops_test.cc) is, per output element,
//      |cpu - ref| <= 2^-24 * ((Lk + 8) + 4 * (E + 4) * max_j |scale| sum_e |q_e k_je|) * max_j |v_j|
//    plus one ulp of the result. Deterministic run to run, so replay equals eager.
// Thread-safe (per-call scratch only).
#pragma once

#include <span>

#include "capture/ops/attrs.h"
#include "capture/core/buffer.h"
#include "capture/ops/ops.h"

namespace tracecache::cpu {

// Runs nn op `op` (an OpClass::kNn op) on `inputs` with normalized `attrs` into `out`
// (preallocated with the inferred type, fully overwritten). Returns false, writing nothing, for
// an op it does not handle or dims beyond BLAS's int range; the caller then runs the reference
// kernel. REQUIRES: inputs and attrs as the op's inference rule accepted them; `out` does not
// overlap any input.
bool run_nn_op(OpKind op, std::span<const HostBuffer* const> inputs,
               std::span<const AttrValue> attrs, HostBuffer& out);

}  // namespace tracecache::cpu
