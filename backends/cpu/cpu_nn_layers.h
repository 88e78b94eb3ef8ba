// The `cpu` backend's kernels for the nn layers of capture/trace/nn.h: convolution, pooling, linear,
// flatten, pad, dropout, the index lookups and the training op dropout_mask. Called from
// cpu::run_op (cpu_kernels.h).
//
// Numerics against the reference kernels (capture/ops/reference_kernels.h):
//
//   op                     cpu implementation                                   vs reference
//   ---------------------  ---------------------------------------------------  ------------
//   conv2d                 im2col (skipped for 1x1, stride 1, no padding) and   TOLERANCE (*)
//                          cblas_sgemm per image and group, output columns in
//                          blocks to bound the scratch; groups == channels
//                          (depthwise) as a direct loop: one pass per kernel
//                          tap over the output plane, accumulating in f32
//   linear                 cblas_sgemm with the weight transposed, bias as the  TOLERANCE (*)
//                          initial C (beta = 1)
//   max_pool2d avg_pool2d  per output row, one vectorizable pass per kernel tap  bitwise
//                          over the outputs it reaches: each output sees its
//                          cells in the reference's order (sums in double)
//   adaptive_avg_pool2d    the reference's loops, window bounds hoisted          bitwise
//   flatten dropout        memcpy                                               bitwise
//   dropout_mask           the reference's per-element formula (random.h) over  bitwise
//                          ranges of the mask, split over parallel_for
//   pad                    fill, then one memcpy per kept innermost row         bitwise
//   embedding gather       row memcpy / strided element copies, indices         bitwise
//   index_select           clamped as in the reference
//
// (*) The bound of matmul (cpu_kernels.h) with K = in channels per group x kernel height x
// kernel width (conv2d) or in features (linear), and the bias counted as one more term:
//   |cpu - ref| <= (K + 3) * 2^-24 * (|bias| + sum |x * w|)  plus one f32 ulp of the result.
// Results are deterministic run to run for the same sizes and thread count.
//
// Threading: im2col (over channels), the depthwise loop and the pools (over planes) split over
// cpu::parallel_for's helper pool; sgemm threads inside OpenBLAS. Every output element is
// computed by one thread in a fixed order, so the thread count never changes a result.
// Thread-safety: as cpu_kernels.h (per-call scratch only).
#pragma once

#include <span>

#include "capture/ops/attrs.h"
#include "capture/core/buffer.h"
#include "capture/ops/ops.h"

namespace tracecache::cpu {

// Runs `op` on `in` into `out` when it is one of the ops above and returns true; returns false
// (nothing written) for any other op, or when a size exceeds what BLAS can index, and the
// caller falls back to the reference kernel. `attrs` are normalized; `out` is preallocated
// with the inferred type and does not overlap the inputs.
bool run_nn_layer(OpKind op, std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs,
                  HostBuffer& out);

}  // namespace tracecache::cpu
