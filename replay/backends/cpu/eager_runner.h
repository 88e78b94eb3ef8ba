// CpuOpRunner: eager mode on the cpu backend's kernels (capture/trace/eager.h).
//
// Each op runs as a one-node graph through cpu::run_op, the same kernels compiled replay uses
// for unfused nodes, and an f32 conv2d or conv2d gradient through oneDNN as the cpu backend's executables run it
// (replay/backends/cpu/onednn_conv.h; the weights are reordered per op unless the same buffer comes
// again), an f32 matmul or linear through oneDNN's matmul likewise (onednn_matmul.h); an elementwise op goes through the fused interpreter with one member,
// which is bitwise equal to a fused chain of the same ops (replay/backends/cpu/cpu_kernels.h). So eager
// results equal lazy and once results on the cpu backend bit for bit (invariant 4).
//
// Kernel time (cpu::run_op only: not building the node or allocating the output) is recorded
// into the Metrics timer "run" (timers::kRun), one sample per op, when metrics are given.
// Thread-safety: one thread at a time (the one-node graph is reused). Ownership: metrics
// (nullable) is not owned and must outlive the runner.
#pragma once

#include "replay/backends/cpu/onednn_conv.h"
#include "replay/backends/cpu/onednn_matmul.h"
#include "capture/trace/eager.h"
#include "capture/ir/graph.h"
#include "capture/core/metrics.h"

namespace tracecache {

class CpuOpRunner final : public OpRunner {
 public:
  explicit CpuOpRunner(Metrics* metrics = nullptr) : metrics_(metrics) {}

  Result<BufferRef> run_op(OpKind op, std::span<const BufferRef> inputs,
                           std::span<const AttrValue> attrs, const TensorType& out) override;

 private:
  // run_op for an op on a storage type: computed in the widened types (replay/compile/widen.h).
  Result<BufferRef> run_widened(OpKind op, std::span<const BufferRef> inputs, std::span<const AttrValue> attrs,
                                const TensorType& out);
  Metrics* metrics_;
  Graph node_;  // parameters for the inputs, then the op; cleared per call, pools kept
  cpu::OneDnnConvs onednn_;
  cpu::OneDnnMatmuls onednn_matmuls_;
};

}  // namespace tracecache
