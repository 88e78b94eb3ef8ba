// The `cpu` backend's kernels for the gradients of the nn layers (capture/ops/grad_nn_layers.h):
// conv2d_input_grad, conv2d_weight_grad, max_pool2d_grad, avg_pool2d_grad,
// adaptive_avg_pool2d_grad. Called from cpu::run_op (cpu_kernels.h).
//
// Numerics against the reference kernels (capture/ops/reference_kernels.h):
//
//   op                        cpu implementation                                 vs reference
//   ------------------------  -------------------------------------------------  ------------
//   conv2d_input_grad         per image and group, col = weight^T x grad_out      TOLERANCE (*)
//                             (cblas_sgemm, output columns in blocks as conv2d),
//                             then col2im adds col into the input plane in f32;
//                             1x1 stride-1 unpadded: one sgemm into the input
//   conv2d_weight_grad        per image, group and block, weight += grad_out x    TOLERANCE (*)
//                             im2col(input)^T (cblas_sgemm, beta = 1); 1x1
//                             stride-1 unpadded: the input plane is the matrix
//   max_pool2d_grad           per output row, taps outermost as max_pool2d: each  bitwise
//                             column's best value and cell by selects (vectorized),
//                             then the row's grads added to their cells in a double
//                             plane in row-major order; planes split over threads
//   avg_pool2d_grad           the reference's plane loops (capture/ops/           bitwise
//                             nn_windows.h), planes split over threads
//   adaptive_avg_pool2d_grad
//
// Executables and eager mode compute f32 conv2d_input_grad and conv2d_weight_grad with oneDNN's
// backward convolutions instead (replay/backends/cpu/onednn_conv.h, within the same bound); the
// kernels here are for what oneDNN declines (empty operands, errors) and for direct callers.
//
// (*) The GEMM bound of cpu_nn_layers.h, |cpu - ref| <= (K + 3) 2^-24 sum |terms| + one f32
// ulp, with K the number of terms of one result element: (out channels per group) x kh x kw
// for conv2d_input_grad, N x OH x OW for conv2d_weight_grad.
// Every output element is computed by one thread in a fixed order (sgemm threads inside
// OpenBLAS, deterministically for a thread count), so results are repeatable.
// Thread-safety: as cpu_kernels.h (per-call scratch only).
#pragma once

#include <span>

#include "capture/core/buffer.h"
#include "capture/ops/attrs.h"
#include "capture/ops/ops.h"

namespace tracecache::cpu {

// Runs `op` on `in` into `out` when it is one of the ops above and returns true; returns false
// (nothing written) for any other op, or when a size exceeds what BLAS can index, and the
// caller falls back to the reference kernel. `attrs` are normalized; `out` is preallocated
// with the inferred type and does not overlap the inputs.
bool run_grad_nn_layer(OpKind op, std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs,
                       HostBuffer& out);

}  // namespace tracecache::cpu
