#include "replay/backends/sim/cost_model.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tracecache {

namespace {

int64_t nbytes(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  return n.shape.numel() * static_cast<int64_t>(dtype_size(n.dtype));
}

// The registry's cost of node `id` (OpInfo::cost).
OpCost node_cost(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  std::vector<TensorType> in;
  for (NodeId i : g.inputs(n)) in.push_back(g.node(i).type());
  return op_info(n.op).cost(in, n.type(), g.attrs(n));
}

// The type contraction `id` computes in: its own, or, for an f32 contraction of a widened graph
// (replay/compile/widen.h) whose operands are all casts from one half type, that type: the
// device multiplies the halves (with f32 accumulation, what the widened graph computes).
DType contraction_dtype(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  if (n.dtype != DType::kF32) return n.dtype;
  DType from = DType::kF32;
  for (NodeId in : g.inputs(n)) {
    const Node& c = g.node(in);
    if (c.op != OpKind::kCast) return DType::kF32;
    const DType t = g.node(g.inputs(c)[0]).dtype;
    if (!is_half_float(t) || (from != DType::kF32 && from != t)) return DType::kF32;
    from = t;
  }
  return from;
}

bool matrix_unit_dtype(DType t) { return t == DType::kF32 || is_half_float(t); }

}  // namespace

int64_t op_flops(const Graph& g, NodeId id) { return node_cost(g, id).flops; }

KernelCost kernel_cost(const Graph& g, const Kernel& kernel) {
  KernelCost cost;
  std::vector<NodeId> reads;
  if (kernel.kind == Kernel::Kind::kFused) {
    // A oneDNN kernel's conv2d (its first member) runs on the matrix unit, its epilogue with it.
    cost.matrix_unit = kernel.library == Kernel::Library::kOneDnn;
    if (cost.matrix_unit) cost.matrix_dtype = contraction_dtype(g, kernel.members.front());
    for (NodeId m : kernel.members) {
      cost.flops += op_flops(g, m);
      for (NodeId in : g.inputs(g.node(m))) {
        if (std::find(kernel.members.begin(), kernel.members.end(), in) == kernel.members.end()) {
          reads.push_back(in);
        }
      }
    }
  } else {
    const OpCost op = node_cost(g, kernel.root);
    cost.flops = op.flops;
    // Only a single-op kernel of an f32, bf16 or f16 contraction runs on the matrix unit.
    cost.matrix_dtype = contraction_dtype(g, kernel.root);
    cost.matrix_unit = op.matrix && matrix_unit_dtype(cost.matrix_dtype);
    for (NodeId in : g.inputs(g.node(kernel.root))) reads.push_back(in);
  }
  std::sort(reads.begin(), reads.end());
  reads.erase(std::unique(reads.begin(), reads.end()), reads.end());
  for (NodeId r : reads) cost.bytes += nbytes(g, r);
  cost.bytes += nbytes(g, kernel.root);
  return cost;
}

namespace {

// ceil(x) as picoseconds; x >= 0.
int64_t ceil_ps(double x) { return static_cast<int64_t>(std::ceil(x)); }

}  // namespace

int64_t kernel_time_ps(const DeviceSpec& spec, const KernelCost& cost) {
  const double peak = cost.matrix_unit ? spec.matmul_peak(cost.matrix_dtype) : spec.vector_tflops;
  const int64_t compute = ceil_ps(static_cast<double>(cost.flops) / peak);
  const int64_t memory = ceil_ps(static_cast<double>(cost.bytes) * 1000.0 / spec.memory_gbps);
  return std::max(compute, memory) + ceil_ps(spec.launch_overhead_ns * 1000.0);
}

int64_t transfer_time_ps(const DeviceSpec& spec, int64_t bytes) {
  return ceil_ps(static_cast<double>(bytes) * 1000.0 / spec.link_gbps) +
         ceil_ps(spec.link_latency_ns * 1000.0);
}

}  // namespace tracecache
