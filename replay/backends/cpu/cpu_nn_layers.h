// The `cpu` backend's kernels for the nn layers of capture/trace/nn.h: convolution, pooling, linear,
// flatten, pad, dropout, the index lookups, the training op dropout_mask and the random ops
// rand_uniform and rand_normal. Called from cpu::run_op (cpu_kernels.h).
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
//                          initial C (beta = 1); executables and eager mode use
//                          oneDNN's matmul with the bias in it (onednn_matmul.h)
//   max_pool2d avg_pool2d  per output row, one vectorizable pass per kernel tap  bitwise
//                          over the outputs it reaches: each output sees its
//                          cells in the reference's order (sums in double)
//   adaptive_avg_pool2d    the reference's loops, window bounds hoisted          bitwise
//   flatten dropout        memcpy                                               bitwise
//   dropout_mask           the reference's per-element formula (random.h) over  bitwise
//                          ranges of the mask, split over parallel_for
//   rand_uniform           random.h's fill_rand_uniform / fill_rand_normal      bitwise
//   rand_normal            (one Philox block per four elements) over ranges of
//                          the output, split over parallel_for; the reference
//                          computes each element alone (rand_*_at)
//   pad                    fill, then one memcpy per kept innermost row         bitwise
//   embedding gather       row memcpy / strided element copies, indices         bitwise
//   index_select           clamped as in the reference
//
// Executables and eager mode compute f32 conv2d with oneDNN instead (replay/backends/cpu/onednn_conv.h,
// within the same bound); the kernel here is for what oneDNN declines and for direct callers.
//
// (*) The bound of matmul (cpu_kernels.h) with K = in channels per group x kernel height x
// kernel width (conv2d) or in features (linear), and the bias counted as one more term:
//   |cpu - ref| <= (K + 3) * 2^-24 * (|bias| + sum |x * w|)  plus one f32 ulp of the result.
// Results are deterministic run to run for the same sizes and thread count.
//
// Threading: im2col (over channels), the depthwise loop and the pools (over planes) split over
// cpu::parallel_for (the backend's thread team, cpu_threads.h); sgemm threads inside OpenBLAS. Every output element is
// computed by one thread in a fixed order, so the thread count never changes a result.
// Thread-safety: as cpu_kernels.h (per-call scratch only).
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>

#include "capture/ops/attrs.h"
#include "capture/core/buffer.h"
#include "capture/ops/nn_windows.h"
#include "capture/ops/ops.h"

namespace tracecache::cpu {

// Runs `op` on `in` into `out` when it is one of the ops above and returns true; returns false
// (nothing written) for any other op, or when a size exceeds what BLAS can index, and the
// caller falls back to the reference kernel. `attrs` are normalized; `out` is preallocated
// with the inferred type and does not overlap the inputs.
bool run_nn_layer(OpKind op, std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs,
                  HostBuffer& out);

// ---- the GEMM lowering of conv2d, shared with its gradients (cpu_grad_nn_layers.cc) ----

// Floats of im2col scratch per block (8 MiB): large enough that each GEMM has hundreds of
// columns even for K in the thousands.
inline constexpr int64_t kColBudget = int64_t{1} << 21;
// Fewest output positions per im2col block (unless the image has fewer).
inline constexpr int64_t kMinBlockColumns = 256;

inline bool fits_blas(std::initializer_list<int64_t> dims) {
  for (int64_t d : dims) {
    if (d > INT_MAX) return false;
  }
  return true;
}

inline int blas_int(int64_t v) { return static_cast<int>(v); }

// How conv2d and its gradients cut each (image, group) into GEMMs: `per_group` out channels,
// K = `k` (in channels per group x kh x kw) rows of the im2col matrix, `plane_out` output
// positions taken `block` at a time (all at once when `direct`: a 1x1, stride-1, unpadded
// convolution, whose input plane already is the im2col matrix, or when k == 0).
struct ConvGemm {
  int64_t per_group, k, plane_out, block;
  bool direct;
};
ConvGemm conv_gemm(const nn::ConvShape& s);
inline bool fits_blas(const ConvGemm& p) { return fits_blas({p.per_group, p.k, p.plane_out, p.block}); }
// The im2col scratch of one block (k x block floats), or null when direct.
std::unique_ptr<float[]> col_scratch(const ConvGemm& p);

// Calls block(n, g, q0, q1) for each image n, group g and block [q0, q1) of output positions,
// in that order (one block [0, plane_out) when direct; none when plane_out == 0).
template <typename Block>
void for_each_conv_block(const nn::ConvShape& s, const ConvGemm& p, Block&& block) {
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t g = 0; g < s.groups; ++g) {
      for (int64_t q0 = 0; q0 < p.plane_out; q0 += p.block)
        block(n, g, q0, std::min(p.plane_out, q0 + p.block));
    }
  }
}

// Rows (c, i, j) of the im2col matrix for output positions [q0, q1) of one image and group:
// col[((c * kh + i) * kw + j) * (q1 - q0) + (q - q0)]. `xg` is the group's first input plane.
void im2col(const float* xg, const nn::ConvShape& s, int64_t q0, int64_t q1, float* col);
// Its transpose: adds each entry of such a col into the input cell it was read from (entries
// that fell in the padding are dropped), channel by channel, taps in (i, j) order, positions in
// increasing order (conv2d_input_grad).
void col2im_add(const float* col, const nn::ConvShape& s, int64_t q0, int64_t q1, float* xg);

}  // namespace tracecache::cpu
