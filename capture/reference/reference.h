// The reference evaluator: runs a graph node by node with the reference kernels of the op
// registry. It is the correctness oracle for every backend and every execution mode, and the
// GraphExecutor `mark_step` uses when no compiled backend is attached.
//
// Thread-safe: evaluate_reference is a pure function; a ReferenceExecutor and a
// ReferenceOpRunner have no state.
#pragma once

#include <span>
#include <vector>

#include "capture/trace/eager.h"
#include "capture/ir/graph.h"
#include "capture/trace/tensor.h"

namespace tracecache {

// Runs one op's reference kernel into `out` (whose dtype and shape are the op's inferred type).
// bf16 and f16 are computed in f32: half inputs are widened (exactly), the kernel writes an f32
// result, and that is rounded once into `out` (to nearest even), which is how PyTorch computes
// a bf16/f16 op on the CPU; every other dtype is the kernel's own. Every reference evaluation
// goes through here.
void evaluate_op(OpKind op, std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out);

// Evaluates `graph` with `params[i]` bound to parameter i; returns one buffer per output.
// Intermediate buffers are freed after their last use. Fails (kInvalidArgument) if a
// parameter's dtype or shape differs from the graph's.
Result<std::vector<BufferRef>> evaluate_reference(const Graph& graph,
                                                  std::span<const BufferRef> params);
// The same on data handles: reads each parameter (a value read for device data) and returns
// host data (HostData). Donations are ignored: the values are the same. Fails with the read's
// Status if a parameter cannot be read.
Result<std::vector<DataRef>> evaluate_reference(const Graph& graph, std::span<const DataRef> params);

class ReferenceExecutor final : public GraphExecutor {
 public:
  Result<std::vector<DataRef>> execute(const CanonicalGraph& graph,
                                       std::vector<DataRef> params) override {
    return evaluate_reference(graph.graph, params);
  }
};

// Eager mode on the reference kernels: each op runs as it is issued (capture/trace/eager.h). Gives
// the same bits as lazy mode on the ReferenceExecutor.
class ReferenceOpRunner final : public OpRunner {
 public:
  Result<BufferRef> run_op(OpKind op, std::span<const BufferRef> inputs,
                           std::span<const AttrValue> attrs, const TensorType& out) override;
};

}  // namespace tracecache
