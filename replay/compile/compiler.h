// The compiler: lowers a canonical graph to an Executable (replay/compile/executable.h).
//
// Lowering, in order:
//  0. Widening (options.widen): a graph with storage types is replaced by its widened form
//     (replay/compile/widen.h) for everything below; the executable keeps the graph and records
//     the rewrite (KernelPlan::widened()).
//  1. Fusion. An elementwise node (or a broadcast_to of a leaf) whose only consumer is an
//     elementwise node of the same shape, and which is not a graph output, is computed inside
//     that consumer's kernel. Chains of such nodes become one fused kernel: a single pass over
//     the output with no intermediate buffers.
//     Convolution epilogues (options.fuse and options.onednn_conv): an f32 conv2d whose only
//     consumer is a batch_norm (rank 4, the conv2d its input x only) takes it into its kernel;
//     then the conv2d (or that batch_norm), when used once, not a graph output, and read by an
//     elementwise node of its shape, joins that node's fused kernel. The kernel is a kFused
//     kernel with library kOneDnn whose members are the conv2d, the batch_norm if any, then the
//     chain (replay/compile/executable.h); replay/backends/cpu/onednn_conv.h computes it bitwise as the
//     kernels one by one would.
//  2. Schedule. One kernel per remaining node, in the graph's (topological) node order; an f32
//     conv2d kernel is marked for oneDNN when options.onednn_conv is set, an f32 matmul or linear
//     kernel when options.onednn_matmul is set, an f32 conv2d_input_grad or conv2d_weight_grad
//     kernel when options.onednn_conv_grad is set.
//  3. Buffer plan. Parameters stay where the caller put them; each output gets its own buffer;
//     every other value gets a range of one scratch arena. Ranges are assigned first-fit as the
//     schedule runs and freed after their last reader, so values whose lifetimes do not overlap
//     share bytes. A kernel's output never overlaps its own inputs. arena_bytes is the peak.
// The result is deterministic: the same graph and options give the same executable and bytes.
// Thread-safety: pure function.
#pragma once

#include <cstdint>
#include <string>

#include "replay/compile/executable.h"

namespace tracecache {

// Bump on any change to lowering (fusion rules, plan, kernel semantics): it is part of every
// executable key, so a stale executable is never served (docs/architecture.md invariant 2).
// 2: f32 conv2d kernels may be computed by oneDNN (Kernel::library).
// 3: a oneDNN conv2d takes its batch_norm and elementwise epilogue into its kernel.
// 4: f32 matmul and linear kernels may be computed by oneDNN (Kernel::library).
// 5: f32 conv2d_input_grad and conv2d_weight_grad kernels may be computed by oneDNN.
// 6: with options.widen, a graph with bf16, f16, i8, u8 or i16 values is planned as its
//    widened form (replay/compile/widen.h), which the plan records.
inline constexpr uint32_t kCompilerVersion = 6;

struct CompileOptions {
  bool fuse = true;
  // f32 conv2d kernels are computed by oneDNN (Kernel::Library::kOneDnn) instead of the
  // backend's im2col + GEMM. Set by the backends that run on the cpu kernels (cpu, sim).
  bool onednn_conv = false;
  // f32 matmul and linear kernels are computed by oneDNN's matmul primitive
  // (Kernel::Library::kOneDnn) instead of OpenBLAS. Set by cpu and sim.
  bool onednn_matmul = false;
  // f32 conv2d_input_grad and conv2d_weight_grad kernels are computed by oneDNN's backward
  // convolution primitives (Kernel::Library::kOneDnn) instead of im2col + OpenBLAS. Set by cpu
  // and sim.
  bool onednn_conv_grad = false;
  // Plan a graph with storage types (bf16, f16, i8, u8, i16) as widen_storage_types(graph): the
  // kernels compute in f32 and i32 between casts (replay/compile/widen.h). Set by cpu and sim.
  bool widen = false;
  uint32_t compiler_version = kCompilerVersion;
};

Executable compile_graph(const Graph& graph, const GraphKey& key, std::string backend,
                         std::string options_digest, const CompileOptions& options = {});

// True if `op` may be a member of a fused kernel (elementwise ops and broadcast_to).
bool fusible_op(OpKind op);

// True if node `bn` of `graph` is a batch_norm a fused kernel may apply to conv2d `conv`'s
// output: rank 4, reading `conv` as its input x and nowhere else.
bool conv_batch_norm(const Graph& graph, NodeId bn, NodeId conv);

// True if `node` of `graph` may be computed by oneDNN (Kernel::Library::kOneDnn): a conv2d whose
// output and inputs are f32.
bool onednn_conv_node(const Graph& graph, const Node& node);

// True if `node` of `graph` may be computed by oneDNN's matmul (Kernel::Library::kOneDnn): a
// matmul or linear whose output and inputs are f32.
bool onednn_matmul_node(const Graph& graph, const Node& node);

// True if `node` of `graph` may be computed by oneDNN's backward convolution primitives
// (Kernel::Library::kOneDnn): a conv2d_input_grad or conv2d_weight_grad whose output and inputs
// are f32.
bool onednn_conv_grad_node(const Graph& graph, const Node& node);

}  // namespace tracecache
