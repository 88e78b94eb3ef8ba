#include "backends/sim/cost_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string_view>
#include <vector>

namespace tracecache {

namespace {

int64_t numel(const Graph& g, NodeId id) { return g.node(id).shape.numel(); }

int64_t nbytes(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  return n.shape.numel() * static_cast<int64_t>(dtype_size(n.dtype));
}

// Last dim of input `k` of `n`, or 1 if it has no such input or is a scalar.
int64_t last_dim(const Graph& g, const Node& n, size_t k) {
  std::span<const NodeId> in = g.inputs(n);
  if (k >= in.size()) return 1;
  const Shape& s = g.node(in[k]).shape;
  return s.rank() == 0 ? 1 : s[s.rank() - 1];
}

int64_t input_numel(const Graph& g, const Node& n, size_t k) {
  std::span<const NodeId> in = g.inputs(n);
  return k < in.size() ? numel(g, in[k]) : 0;
}

bool transcendental(OpKind op) {
  switch (op) {
    case OpKind::kExp: case OpKind::kLog: case OpKind::kSqrt: case OpKind::kRsqrt:
    case OpKind::kTanh: case OpKind::kSigmoid: case OpKind::kPow: case OpKind::kNormal:
      return true;
    default:
      return false;
  }
}

// The model-zoo ops, known by registry name only (they may not exist in this build); nullopt
// for any other name.
std::optional<int64_t> flops_by_name(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  const std::string_view name = op_info(n.op).name;
  const int64_t out = numel(g, id);
  const int64_t in0 = input_numel(g, n, 0);
  if (name == "conv2d") {
    // weight [O, C/groups, kh, kw]: every output element is a dot product of C/groups*kh*kw.
    std::span<const NodeId> in = g.inputs(n);
    if (in.size() < 2) return out;
    const Shape& w = g.node(in[1]).shape;
    const int64_t per_out = w.rank() == 0 || w[0] == 0 ? 0 : w.numel() / w[0];
    return 2 * out * per_out;
  }
  if (name == "linear") return 2 * out * last_dim(g, n, 0);
  if (name == "scaled_dot_product_attention") {
    // q [..., Lq, E], k [..., Lk, E], v [..., Lk, Ev]; out [..., Lq, Ev].
    std::span<const NodeId> in = g.inputs(n);
    if (in.size() < 3) return out;
    const Shape& q = g.node(in[0]).shape;
    const Shape& k = g.node(in[1]).shape;
    if (q.rank() < 2 || k.rank() < 2) return out;
    const int64_t lq = q[q.rank() - 2], e = q[q.rank() - 1], lk = k[k.rank() - 2];
    const int64_t ev = last_dim(g, n, 2);
    const int64_t batch = lq * e == 0 ? 0 : q.numel() / (lq * e);
    const int64_t scores = batch * lq * lk;
    return 2 * scores * (e + ev) + (kTranscendentalFlops + 3) * scores;
  }
  if (name == "max_pool2d" || name == "avg_pool2d") {
    const int idx = op_info(n.op).attr_index("kernel");
    if (idx < 0) return out;
    const AttrValue& kernel = g.attrs(n)[static_cast<size_t>(idx)];
    if (kernel.kind != AttrKind::kInts) return out;
    int64_t window = 1;
    for (int d = 0; d < kernel.ints.size(); ++d) window *= kernel.ints[d];
    return out * window;
  }
  if (name == "adaptive_avg_pool2d") return in0;
  if (name == "batch_norm") return 2 * out;
  if (name == "layer_norm") return 8 * in0;
  if (name == "softmax" || name == "log_softmax") return (kTranscendentalFlops + 3) * in0;
  if (name == "gelu" || name == "silu" || name == "erf") return kTranscendentalFlops * out;
  if (name == "hardswish" || name == "hardsigmoid" || name == "clamp") return out;
  return std::nullopt;
}

}  // namespace

int64_t op_flops(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  const OpInfo& info = op_info(n.op);
  const int64_t out = numel(g, id);
  if (std::optional<int64_t> by_name = flops_by_name(g, id)) return *by_name;
  switch (info.op_class) {
    case OpClass::kParameter:
    case OpClass::kLayout:
      return 0;
    case OpClass::kUnary:
    case OpClass::kBinary:
    case OpClass::kCompare:
    case OpClass::kWhere:
    case OpClass::kCast:
    case OpClass::kSource:
      return transcendental(n.op) ? kTranscendentalFlops * out : out;
    case OpClass::kMatmul:
      return 2 * out * last_dim(g, n, 0);
    case OpClass::kReduce:
      return input_numel(g, n, 0);
    default:  // an op class added after this table: one flop per output element
      return out;
  }
}

KernelCost kernel_cost(const Graph& g, const Kernel& kernel) {
  KernelCost cost;
  std::vector<NodeId> reads;
  if (kernel.kind == Kernel::Kind::kFused) {
    for (NodeId m : kernel.members) {
      cost.flops += op_flops(g, m);
      for (NodeId in : g.inputs(g.node(m))) {
        if (std::find(kernel.members.begin(), kernel.members.end(), in) == kernel.members.end()) {
          reads.push_back(in);
        }
      }
    }
  } else {
    cost.flops = op_flops(g, kernel.root);
    for (NodeId in : g.inputs(g.node(kernel.root))) reads.push_back(in);
  }
  std::sort(reads.begin(), reads.end());
  reads.erase(std::unique(reads.begin(), reads.end()), reads.end());
  for (NodeId r : reads) cost.bytes += nbytes(g, r);
  cost.bytes += nbytes(g, kernel.root);

  const Node& root = g.node(kernel.root);
  const std::string_view name = op_info(root.op).name;
  const bool matrix_op = root.op == OpKind::kMatmul || name == "conv2d" || name == "linear" ||
                         name == "scaled_dot_product_attention";
  cost.matrix_unit = kernel.kind == Kernel::Kind::kOp && matrix_op && root.dtype == DType::kF32;
  return cost;
}

namespace {

// ceil(x) as picoseconds; x >= 0.
int64_t ceil_ps(double x) { return static_cast<int64_t>(std::ceil(x)); }

}  // namespace

int64_t kernel_time_ps(const DeviceSpec& spec, const KernelCost& cost) {
  const double peak = cost.matrix_unit ? spec.matmul_tflops : spec.vector_tflops;
  const int64_t compute = ceil_ps(static_cast<double>(cost.flops) / peak);
  const int64_t memory = ceil_ps(static_cast<double>(cost.bytes) * 1000.0 / spec.memory_gbps);
  return std::max(compute, memory) + ceil_ps(spec.launch_overhead_ns * 1000.0);
}

int64_t transfer_time_ps(const DeviceSpec& spec, int64_t bytes) {
  return ceil_ps(static_cast<double>(bytes) * 1000.0 / spec.link_gbps) +
         ceil_ps(spec.link_latency_ns * 1000.0);
}

std::string kernel_name(const Graph& g, const Kernel& kernel) {
  if (kernel.kind == Kernel::Kind::kOp) return std::string(op_info(g.node(kernel.root).op).name);
  std::vector<std::string_view> names;
  for (NodeId m : kernel.members) names.push_back(op_info(g.node(m).op).name);
  return fmt::format("fused({})", fmt::join(names, ","));
}

}  // namespace tracecache
