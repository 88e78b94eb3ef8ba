// OneDnnConvs: the cpu backend's f32 conv2d kernels and the kernels of its gradients
// (conv2d_input_grad, conv2d_weight_grad) computed by oneDNN's convolution primitives (Debian's
// libdnnl 2.6: convolution_forward, convolution_backward_data, convolution_backward_weights),
// for the kernels the compiler marked Kernel::Library::kOneDnn.
//
// What is prepared once and kept: per (graph key, node), the primitive (oneDNN picks the
// layouts, format_tag::any, except NCHW activations for a 1x1 stride-1 ungrouped unpadded
// convolution and its gradients: a GEMM; a strided such conv2d runs as that GEMM on the pixels
// its stride reads, gathered per run into the work buffer below) and, when the weight of a conv2d or a
// conv2d_input_grad is an executable parameter, the weights reordered into the primitive's
// layout. The reordered copy belongs to one weight buffer at one
// version: it is made again when the kernel is fed another buffer (identity: the buffer's
// shared ownership, held weakly, so a freed buffer's address cannot pass for it) or the same
// buffer after a run wrote into it in place (a donated output, note_written_in_place). A
// weight computed inside the graph is reordered on every run. Activations are reordered to and
// from the primitive's layout on every run when it is not the tensors' row-major NCHW (a
// conv2d's into memory of its own; a gradient's, and its scratchpad, into one work buffer
// shared by all gradient kernels and strided 1x1 conv2ds, grown to the largest and kept for the
// object's lifetime).
// The gradient primitives are made with the forward primitive of the same shapes as oneDNN's
// hint (forward_training), as its API requires; nothing of the forward pass is shared.
// The kept state is bounded: past kKeptBytes of reordered weights, everything is dropped and
// prepared again as needed. Primitives are made again when the process's thread count changed.
//
// Numerics: oneDNN sums in f32 in its own blocked order (with FMA): conv2d within the conv2d
// bound of cpu_nn_layers.h, the gradients within the GEMM bound of cpu_grad_nn_layers.h (K =
// out channels per group x kh x kw terms for conv2d_input_grad, N x OH x OW for
// conv2d_weight_grad, whose sum oneDNN may split over threads and images and add up in f32:
// still a sum of the same K terms). Results are deterministic run to run for the same sizes
// and thread count (oneDNN's kernels split work over threads in a fixed way for a given count).
//
// Threads: Debian builds oneDNN with the OpenMP runtime (libgomp; DNNL_CPU_RUNTIME = OMP in
// dnnl_config.h), so it runs on the backend's one thread team (cpu_threads.h). Every kernel binds
// the process's thread count on the calling thread (OpenMP keeps it per thread) before running,
// and a primitive made for another count is made again (its scratchpad and split depend on it).
//
// Fused kernels (replay/compile/executable.h: a kFused kernel whose library is kOneDnn): run_fused()
// computes the conv2d, then, when the kernel has one, the batch_norm reading it, then the
// elementwise chain after them, each with the same scalar formulas as the unfused kernels
// (nn::batch_norm_apply, run_fused's interpreter), so the result is bitwise what the kernels
// one by one give. What it saves: the conv2d is written in row-major NCHW into the kernel's
// output buffer (by the primitive, or by oneDNN's reorder from the primitive's layout) and read
// back once, tile by tile: the batch_norm is applied to each tile on the way and the chain
// (cpu_kernels.h's TileSource) takes it while it is in cache, writing the root's elements over
// the ones it read (in scratch instead when the root is not f32, or when a leaf of the chain is
// `out`'s own storage: a donated parameter the chain reads). Unfused, the batch_norm and the
// chain would be a pass each over arena buffers. (Reading the primitive's NHWC or channel-blocked layout directly, element by element,
// cost more than oneDNN's reorder: strided loads.)
//
// Errors: run() returns false, with nothing written, when oneDNN declines the shape or fails
// (its errors are exceptions, caught here: onednn_kept.h) or there is nothing to compute (an
// empty operand); the caller then runs the builtin kernel.
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
#include "capture/ops/nn_numerics.h"

namespace tracecache::cpu {

class OneDnnConvs {
 public:
  // Bytes of reordered weights kept before all kept state is dropped.
  static constexpr uint64_t kKeptBytes = uint64_t{512} << 20;

  OneDnnConvs();
  ~OneDnnConvs();
  OneDnnConvs(const OneDnnConvs&) = delete;
  OneDnnConvs& operator=(const OneDnnConvs&) = delete;

  // Runs conv2d, conv2d_input_grad or conv2d_weight_grad node `node` of graph `g` (whose key is
  // `key`) into `out`: inputs[k] is its k-th input's value. `weight` is the owning handle of
  // inputs[1] when that is the weight (conv2d, conv2d_input_grad) and a parameter of the run
  // (its reordered copy is kept), null otherwise. Returns false, nothing written, when oneDNN
  // cannot compute it.
  // REQUIRES: onednn_conv_node(g, g.node(node)) or onednn_conv_grad_node(g, g.node(node));
  // inputs and out as for cpu::run_op.
  bool run(const GraphKey& key, const Graph& g, NodeId node, std::span<const HostBuffer* const> inputs,
           const std::shared_ptr<const HostBuffer>* weight, HostBuffer& out);

  // Runs the fused kernel `members` of graph `g` (key `key`) into `out`, the root's buffer:
  // members[0] is the conv2d, members[1] may be a batch_norm of it, the rest (possibly none) an
  // elementwise chain ending at the root. leaf_value(id) is the buffer of a member's input that
  // is not a member; `weight` as for run(). Falls back to the builtin conv2d kernel when
  // oneDNN declines, so it cannot fail.
  // REQUIRES: the members of a kernel that passed KernelPlan::validate(); out as for run_fused.
  void run_fused(const GraphKey& key, const Graph& g, std::span<const NodeId> members,
                 const std::function<const HostBuffer*(NodeId)>& leaf_value,
                 const std::shared_ptr<const HostBuffer>* weight, HostBuffer& out);

 private:
  struct State;
  // conv2d into `out` (row-major NCHW).
  bool conv2d_into(const GraphKey& key, const Graph& g, NodeId node, std::span<const HostBuffer* const> inputs,
                   const std::shared_ptr<const HostBuffer>* weight, HostBuffer& out);
  // conv2d_input_grad or conv2d_weight_grad.
  bool gradient(const GraphKey& key, const Graph& g, NodeId node, std::span<const HostBuffer* const> inputs,
                const std::shared_ptr<const HostBuffer>* weight, HostBuffer& out);
  // Drops everything kept once the reordered weights pass kKeptBytes.
  void bound_kept();
  std::unique_ptr<State> state_;
  // run_fused's reused buffers: the conv2d's value when the root is not f32 (a chain ending in
  // a cast), the batch_norm's channels, the conv2d's inputs.
  std::vector<std::byte> scratch_;
  std::vector<nn::BatchNormChannel> bn_channels_;
  std::vector<const HostBuffer*> fused_inputs_;
};

// Tells every OneDnnConvs that `storage` was written in place, so copies reordered from it are
// stale. Costs one atomic load when no kept copy exists.
void note_written_in_place(const HostBuffer* storage);

}  // namespace tracecache::cpu
