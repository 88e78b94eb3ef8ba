// OneDnnMatmuls: the cpu backend's f32 matmul and linear kernels computed by oneDNN's matmul
// primitive (Debian's libdnnl 2.6), for the kernels the compiler marked
// Kernel::Library::kOneDnn (CompileOptions::onednn_matmul, replay/compile/compiler.h).
//
// Layouts: all plain row-major, as the graph holds the tensors, so nothing is reordered or kept
// besides the primitive. matmul: a [batch_a.., M, K] x b [batch_b.., K, N] -> [batch.., M, N]
// with 1-D operands lifted as the op's inference rule does and batch dims broadcast (oneDNN
// broadcasts size-1 batch dims; a batch with b unbatched is folded into M). linear: x [.., K]
// viewed as [rows, K] times the weight [N, K] read transposed (strides {1, K}), plus the bias
// [N] when the op has one, in the primitive.
//
// What is kept: per (graph key, node), the primitive and its scratchpad, made again when the
// shapes or the process's thread count change (oneDNN sizes and splits its work for the count).
// The kept state is bounded: past kKeptPrimitives nodes, everything is dropped and made again
// as needed.
//
// Numerics: oneDNN sums in f32 in its own blocked order (with FMA), within the matmul bound of
// cpu_kernels.h (the bias counted as one more term for linear, as cpu_nn_layers.h says);
// results are deterministic run to run for the same sizes and thread count, so eager mode,
// which runs the same primitive for the same shapes, equals replay bitwise.
//
// Threads: oneDNN runs on the backend's one OpenMP team (cpu_threads.h); every call binds the
// process's thread count on the calling thread first.
//
// Errors: run() returns false, with nothing written, when oneDNN declines the shapes or fails
// (its errors are exceptions, caught here: onednn_kept.h) or there is nothing to multiply (an empty output or
// K = 0); the caller then runs the builtin kernel.
// Thread-safety: an OneDnnMatmuls is used by one thread at a time (its owner CpuBackend's rule).
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "capture/core/buffer.h"
#include "capture/ir/graph.h"
#include "capture/ir/hash.h"

namespace tracecache::cpu {

class OneDnnMatmuls {
 public:
  // Nodes whose primitive is kept before all kept state is dropped.
  static constexpr size_t kKeptPrimitives = 4096;

  OneDnnMatmuls();
  ~OneDnnMatmuls();
  OneDnnMatmuls(const OneDnnMatmuls&) = delete;
  OneDnnMatmuls& operator=(const OneDnnMatmuls&) = delete;

  // Runs matmul or linear node `node` of graph `g` (whose key is `key`) into `out`: inputs[k] is
  // its k-th input's value. Returns false, nothing written, when oneDNN does not compute it.
  // REQUIRES: onednn_matmul_node(g, g.node(node)); inputs and out as for cpu::run_op.
  bool run(const GraphKey& key, const Graph& g, NodeId node, std::span<const HostBuffer* const> inputs,
           HostBuffer& out);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tracecache::cpu
