// The compute kernels of the `cpu` backend: a tiled interpreter for fused elementwise chains,
// and one entry point for every other single node (BLAS GEMM, ordered fast reductions, strided
// copies for layout ops, the reference kernels for the rest).
//
// Numerics. Element-level semantics come from capture/ops/elementwise.h, the same definitions the
// reference kernels use, and kernels here keep the reference's operation order wherever the
// result could depend on it, so results are BITWISE EQUAL to the reference kernels
// (capture/ops/reference_kernels.h) except where the table says otherwise:
//
//   op                                   cpu implementation                      vs reference
//   ----------------------------------   -------------------------------------   ------------
//   neg abs exp log sqrt rsqrt tanh      tiled interpreter (run_fused with one   bitwise
//   sigmoid relu add sub mul div pow     member), operands converted with
//   maximum minimum eq lt gt where cast  convert<C>, C = compute_dtype()
//   gelu (tanh form) silu hardswish
//   hardsigmoid clamp
//   erf, gelu (erf form)                 tiled interpreter; erf by libmvec's     TOLERANCE (**)
//                                        vector erff (vector_math.h)
//   broadcast_to                         tiled interpreter (a broadcast load)    bitwise
//   matmul, f32 output                   OpenBLAS cblas_sgemm per batch (batch   TOLERANCE (*)
//                                        folded into M when b has no batch);
//                                        executables and eager mode use oneDNN's
//                                        matmul for f32 operands (onednn_matmul.h)
//   matmul, i32/i64 output               reference kernel                        bitwise
//   sum, mean, max, min                  loops over the kept and the reduced     bitwise
//                                        dims (any axis set, merged), same per-
//                                        output order (f32 in double, in index
//                                        order); several outputs' chains
//                                        interleaved, never reassociated
//   argmax                               [outer, len, inner] loops, vectorized   bitwise
//                                        across `inner`
//   reshape                              memcpy                                  bitwise
//   permute transpose slice              strided copy (merged dims)              bitwise
//   concat                               block memcpy                            bitwise
//   full arange uniform normal           reference kernel                        bitwise
//   batch_norm layer_norm softmax        replay/backends/cpu/cpu_nn_ops.h: loops over the     bitwise
//   log_softmax                          normalized axis, formulas and order of
//                                        capture/ops/nn_numerics.h
//   scaled_dot_product_attention         cpu_nn_ops.h: cblas_sgemm for q.k^T     TOLERANCE
//                                        and p.v, softmax in f32 (see there)
//   nn layers (conv2d, pools, linear...) replay/backends/cpu/cpu_nn_layers.h                  see there
//
// (*) GEMM sums in f32 in OpenBLAS's blocked order (possibly with FMA) instead of the
// reference's sequential double sum. Tested bound, a rigorous one for any f32 summation order:
//   |cpu - ref| <= (K + 2) * 2^-24 * sum_p |a[i,p] * b[p,j]|      (K = inner dim)
// plus one f32 ulp of the result. Results are deterministic run to run (same sizes, same
// thread count), so replay still equals eager on this backend.
//
// (**) libmvec's erff is within 2 ulp of glibc's scalar erff (std::erf, the reference's), measured
// over every f32 input (bench/erf_ulps.cc). erf: |cpu - ref| <= 2 ulp; gelu's erf form,
// x * 0.5 * (1 + erf(x / sqrt 2)) in the same f32 steps: |cpu - ref| <= 2^-22 |x| + 2 ulp(ref)
// (the erf's ulp carried through 1 + erf and the product). Every element goes through the same
// vector function wherever it sits in a tile, so fused, unfused, eager and replayed results are
// the same bits on this backend.
//
// "Bitwise" treats NaN like any other value except for its payload: when two different NaNs
// meet in one operation (add(NaN_a, NaN_b), or a sum over both), which payload survives is up
// to the compiler's operand order for a commutative op, in the reference and here alike (seen
// in add, mul, sum and mean); tests accept any NaN where the reference has a NaN.
//
// Threading: kernels split large work (>= kParallelThreshold elements) into chunks run by the
// backend's one thread team (cpu_threads.h: libgomp's, shared with OpenBLAS and oneDNN), whose
// members claim chunks from one counter. Chunking never changes results: every output element is
// computed by exactly one thread in the order described above. sgemm threads inside OpenBLAS on
// the same team. The functions are thread-safe (per-thread scratch only; concurrent callers get a
// team each).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "capture/core/buffer.h"
#include "capture/ir/graph.h"

namespace tracecache::cpu {

// Output elements processed per tile of the fused interpreter.
inline constexpr int64_t kTileElements = 512;
// Work (elements) from which a kernel splits over threads.
inline constexpr int64_t kParallelThreshold = int64_t{1} << 16;

// Runs the fused elementwise chain `members` of `g` into `out`.
// REQUIRES (guaranteed by the compiler, replay/compile/compiler.h):
//  - `members` is in topological order and non-empty; its last entry is the root, whose value
//    goes to `out` (out has the root's dtype and shape);
//  - every member is elementwise (OpInfo::elementwise()) or a broadcast_to, and has the root's
//    shape; every member except the root is used only by later members;
//  - for each input of a member that is not itself a member (a "leaf"), leaf_value(id) returns
//    its buffer, whose shape broadcasts (NumPy rules) to the root's shape;
//  - `out` shares bytes with a leaf only as that leaf's own storage at the same positions (a
//    donated parameter the chain reads elementwise: every tile reads its elements before the root
//    writes them).
// Result: bitwise what running the members one by one with the reference kernels gives.
//
// A TileSource stands for one leaf whose value is not in a buffer of its own but computed tile by
// tile (a convolution's epilogue: the conv2d's output read back with the batch_norm applied,
// onednn_conv.h): leaf_value is not asked for `id`; instead fill(start, len, dst)
// writes that leaf's elements [start, start + len) in the root's row-major order, as `dtype`
// (the leaf has the root's shape), before any member of the tile reads it. fill is called
// concurrently for disjoint ranges, and for each range before the root's elements of the range
// are written, so it may read `out`'s own bytes at the same positions (in place); whoever wrote
// the source's values into `out` before the call must know that no leaf shares `out`'s bytes
// (onednn_conv.cc stages them elsewhere when one does).
struct TileSource {
  NodeId id;
  DType dtype;
  std::function<void(int64_t start, int64_t len, std::byte* dst)> fill;
};
void run_fused(const Graph& g, std::span<const NodeId> members,
               const std::function<const HostBuffer*(NodeId)>& leaf_value, HostBuffer& out,
               const TileSource* source = nullptr);

// What run_fused compiles a chain into, for tests and tools: instructions and registers (both
// linear in the chain's length), the scratch bytes each thread needs per tile (bounded by the
// values live at once, not by the length), and the bytes of the instruction and register lists.
struct FusedPlanSize {
  size_t instructions = 0;
  size_t registers = 0;
  size_t scratch_bytes = 0;
  size_t program_bytes = 0;
};
// Compiles the chain as run_fused would, without running it. Same REQUIRES as run_fused.
FusedPlanSize plan_fused(const Graph& g, std::span<const NodeId> members,
                         const std::function<const HostBuffer*(NodeId)>& leaf_value, HostBuffer& out);

// out[i] = src[base + offset(i)] over out's row-major order, offset(i) the sum of i's index
// times `strides` (in elements, one per out dim): permute, transpose, broadcast_to and slice,
// split over the thread team. REQUIRES: src and out of one dtype; every offset within src.
void strided_gather(const HostBuffer& src, const IntList& strides, int64_t base, HostBuffer& out);

// Calls fn(begin, end) on disjoint ranges covering [0, items), on this thread and the helper
// team when `work` (elements touched in total) reaches kParallelThreshold, on this thread
// alone otherwise (see Threading above). For kernels outside this file (cpu_nn_ops.cc,
// cpu_nn_layers.cc); fn must not depend on how [0, items) is split.
void parallel_for(int64_t items, int64_t work, const std::function<void(int64_t, int64_t)>& fn);

// Thread counts (cpu_threads.h's set_threads) never change the kernels' own loops' bits (every
// chunk computes the same elements the same way whichever thread runs it); OpenBLAS's sgemm's do
// change (its threaded path blocks the sum differently: measured on 8x784x256 and 256^3), so
// matmul-based results are bitwise reproducible for one thread count and agree across thread
// counts within the matmul bound above.

// Runs the single node `node` of `g`: inputs[k] is the value of its k-th input; `out` is
// preallocated with the node's dtype and shape and fully overwritten.
// REQUIRES: node is not a parameter; inputs match the node's input types; `out` does not
// overlap any input. Numerics per the table above.
void run_op(const Graph& g, NodeId node, std::span<const HostBuffer* const> inputs, HostBuffer& out);

}  // namespace tracecache::cpu
