// OneDnnConvs: the cpu backend's f32 conv2d kernels computed by oneDNN's convolution primitive
// (Debian's libdnnl 2.6), for the kernels the compiler marked Kernel::Library::kOneDnn.
//
// What is prepared once and kept: per (graph key, node), the primitive (oneDNN picks the
// layouts, format_tag::any, except NCHW activations for a 1x1 stride-1 convolution: a GEMM)
// and, when the weight is an executable parameter, the weights reordered into the primitive's
// layout. The reordered copy belongs to one weight buffer at one
// version: it is made again when the kernel is fed another buffer (identity: the buffer's
// shared ownership, held weakly, so a freed buffer's address cannot pass for it) or the same
// buffer after a run wrote into it in place (a donated output, note_written_in_place). A
// weight computed inside the graph is reordered on every run. Activations are reordered to and
// from the primitive's layout on every run when it is not the tensors' row-major NCHW.
// The kept state is bounded: past kKeptBytes of reordered weights, everything is dropped and
// prepared again as needed.
//
// Numerics: oneDNN sums in f32 in its own blocked order (with FMA), within the conv2d bound of
// cpu_nn_layers.h; results are deterministic run to run for the same sizes and thread count
// (oneDNN's kernels split work over threads without changing any output's summation order for
// a given thread count).
//
// Threads: Debian builds oneDNN with the OpenMP runtime (libgomp; DNNL_CPU_RUNTIME = OMP in
// dnnl_config.h), so it runs on the backend's one thread team (cpu_threads.h). Every conv2d binds
// the process's thread count on the calling thread (OpenMP keeps it per thread) before running,
// and a primitive made for another count is made again (its scratchpad and split depend on it).
//
// Fused kernels (compile/executable.h: a kFused kernel whose library is kOneDnn): run_fused()
// computes the conv2d, then, when the kernel has one, the batch_norm reading it, then the
// elementwise chain after them, each with the same scalar formulas as the unfused kernels
// (nn::batch_norm_apply, run_fused's interpreter), so the result is bitwise what the kernels
// one by one give. What it saves: the conv2d's output is written once in row-major NCHW with
// the batch_norm applied while it is read from the primitive's layout (NHWC here), instead of
// reorder, batch_norm and chain as three passes over arena buffers; the chain then reads it
// from this object's scratch while it is still in cache (one buffer, grown to the largest such
// value and kept for the object's lifetime).
//
// Errors: conv2d() returns false, with nothing written, when oneDNN declines the shape or fails
// (its errors are exceptions, caught here); the caller then runs the builtin kernel.
// Thread-safety: an OneDnnConvs is used by one thread at a time (its owner CpuBackend's rule);
// note_written_in_place is thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "capture/core/buffer.h"
#include "capture/ir/graph.h"
#include "capture/ir/hash.h"

namespace tracecache::cpu {

class OneDnnConvs {
 public:
  // Bytes of reordered weights kept before all kept state is dropped.
  static constexpr uint64_t kKeptBytes = uint64_t{512} << 20;

  OneDnnConvs();
  ~OneDnnConvs();
  OneDnnConvs(const OneDnnConvs&) = delete;
  OneDnnConvs& operator=(const OneDnnConvs&) = delete;

  // Runs conv2d node `node` of graph `g` (whose key is `key`) into `out`: inputs[k] is its k-th
  // input's value. `weight` is the weight's owning handle when the weight is a parameter of the
  // run (its reordered copy is kept), null otherwise. Returns false, nothing written, when
  // oneDNN cannot compute it.
  // REQUIRES: onednn_conv_node(g, g.node(node)); inputs and out as for cpu::run_op.
  bool conv2d(const GraphKey& key, const Graph& g, NodeId node, std::span<const HostBuffer* const> inputs,
              const std::shared_ptr<const HostBuffer>* weight, HostBuffer& out);

  // Runs the fused kernel `members` of graph `g` (key `key`) into `out`, the root's buffer:
  // members[0] is the conv2d, members[1] may be a batch_norm of it, the rest (possibly none) an
  // elementwise chain ending at the root. leaf_value(id) is the buffer of a member's input that
  // is not a member; `weight` as for conv2d(). Falls back to the builtin conv2d kernel when
  // oneDNN declines, so it cannot fail.
  // REQUIRES: the members of a kernel that passed KernelPlan::validate(); out as for run_fused.
  void run_fused(const GraphKey& key, const Graph& g, std::span<const NodeId> members,
                 const std::function<const HostBuffer*(NodeId)>& leaf_value,
                 const std::shared_ptr<const HostBuffer>* weight, HostBuffer& out);

 private:
  struct State;
  struct BatchNorm;
  // conv2d() writing into `out` (row-major NCHW) with `bn`, when not null, applied on the way.
  bool conv2d_into(const GraphKey& key, const Graph& g, NodeId node, std::span<const HostBuffer* const> inputs,
                   const std::shared_ptr<const HostBuffer>* weight, const BatchNorm* bn, HostBuffer& out);
  std::unique_ptr<State> state_;
  std::vector<std::byte> scratch_;  // a fused kernel's conv2d (or batch_norm) value, when not the root
};

// Tells every OneDnnConvs that `storage` was written in place, so copies reordered from it are
// stale. Costs one atomic load when no kept copy exists.
void note_written_in_place(const HostBuffer* storage);

}  // namespace tracecache::cpu
