#include "replay/compile/compiler.h"

#include <algorithm>
#include <cassert>
#include <map>

#include "replay/compile/widen.h"

namespace tracecache {

namespace {

constexpr uint64_t kAlignment = 64;

uint64_t align_up(uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

uint64_t value_bytes(const Node& n) {
  return static_cast<uint64_t>(n.shape.numel()) * dtype_size(n.dtype);
}

// First-fit allocator over one growing arena; freed ranges coalesce.
class ArenaPlanner {
 public:
  uint64_t allocate(uint64_t bytes) {
    bytes = std::max<uint64_t>(align_up(bytes), kAlignment);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second >= bytes) {
        uint64_t offset = it->first;
        uint64_t rest = it->second - bytes;
        free_.erase(it);
        if (rest > 0) free_.emplace(offset + bytes, rest);
        return offset;
      }
    }
    // Grow: extend a free block that ends at the top, if any.
    uint64_t offset = top_;
    if (!free_.empty()) {
      auto last = std::prev(free_.end());
      if (last->first + last->second == top_) {
        offset = last->first;
        free_.erase(last);
      }
    }
    top_ = offset + bytes;
    return offset;
  }

  void release(uint64_t offset, uint64_t bytes) {
    bytes = std::max<uint64_t>(align_up(bytes), kAlignment);
    auto [it, inserted] = free_.emplace(offset, bytes);
    assert(inserted);
    auto next = std::next(it);
    if (next != free_.end() && it->first + it->second == next->first) {
      it->second += next->second;
      free_.erase(next);
    }
    if (it != free_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_.erase(it);
      }
    }
  }

  uint64_t peak() const { return top_; }

 private:
  std::map<uint64_t, uint64_t> free_;  // offset -> size
  uint64_t top_ = 0;
};

// True if kernel `k` reads `node` from its slot (as a leaf of a member, or an input of an op).
bool reads_directly(const Graph& graph, const Kernel& k, NodeId node, const std::vector<bool>& fused) {
  auto reads = [&](NodeId member) {
    for (NodeId in : graph.inputs(graph.node(member))) {
      if (in == node && !fused[in]) return true;
    }
    return false;
  };
  if (k.kind == Kernel::Kind::kOp) return reads(k.root);
  return std::any_of(k.members.begin(), k.members.end(), reads);
}

}  // namespace

namespace {

bool f32_throughout(const Graph& graph, const Node& node) {
  if (node.dtype != DType::kF32) return false;
  for (NodeId in : graph.inputs(node)) {
    if (graph.node(in).dtype != DType::kF32) return false;
  }
  return true;
}

}  // namespace

bool onednn_conv_node(const Graph& graph, const Node& node) {
  return node.op == OpKind::kConv2d && f32_throughout(graph, node);
}

bool onednn_matmul_node(const Graph& graph, const Node& node) {
  return (node.op == OpKind::kMatmul || node.op == OpKind::kLinear) && f32_throughout(graph, node);
}

bool onednn_conv_grad_node(const Graph& graph, const Node& node) {
  return (node.op == OpKind::kConv2dInputGrad || node.op == OpKind::kConv2dWeightGrad) &&
         f32_throughout(graph, node);
}

bool conv_batch_norm(const Graph& graph, NodeId bn, NodeId conv) {
  const Node& b = graph.node(bn);
  if (b.op != OpKind::kBatchNorm || b.shape.rank() != 4) return false;
  const std::span<const NodeId> in = graph.inputs(b);
  return in[0] == conv && std::count(in.begin(), in.end(), conv) == 1;
}

bool fusible_op(OpKind op) {
  return op_info(op).elementwise() || op == OpKind::kBroadcastTo;
}

namespace {

// ---- compile_graph's phases ------------------------------------------------------------------

// Distinct consumers of each node (the same input twice counts once), the last one seen, and
// whether the node is an output.
struct Uses {
  std::vector<uint32_t> consumers;
  std::vector<NodeId> only_consumer;
  std::vector<bool> is_output;
};

Uses count_uses(const Graph& graph) {
  const size_t n = graph.size();
  Uses uses{std::vector<uint32_t>(n, 0), std::vector<NodeId>(n, 0), std::vector<bool>(n, false)};
  std::vector<uint32_t>& consumers = uses.consumers;
  std::vector<NodeId>& only_consumer = uses.only_consumer;
  std::vector<bool>& is_output = uses.is_output;
  for (NodeId id = 0; id < n; ++id) {
    auto ins = graph.inputs(graph.node(id));
    for (size_t k = 0; k < ins.size(); ++k) {
      if (std::find(ins.begin(), ins.begin() + static_cast<std::ptrdiff_t>(k), ins[k]) !=
          ins.begin() + static_cast<std::ptrdiff_t>(k)) {
        continue;  // the same input twice counts once
      }
      ++consumers[ins[k]];
      only_consumer[ins[k]] = id;
    }
  }
  for (NodeId o : graph.outputs()) is_output[o] = true;
  return uses;
}

// 1. Fusion: fused[v] when v is computed by the kernel of the node that reads it (an elementwise
// chain's member that is not its root).
std::vector<bool> fuse_elementwise(const Graph& graph, const Uses& uses, const CompileOptions& options) {
  const size_t n = graph.size();
  const std::vector<uint32_t>& consumers = uses.consumers;
  const std::vector<NodeId>& only_consumer = uses.only_consumer;
  const std::vector<bool>& is_output = uses.is_output;
  std::vector<bool> fused(n, false);
  if (options.fuse) {
    for (NodeId id = 0; id < n; ++id) {
      const Node& v = graph.node(id);
      if (!fusible_op(v.op) || is_output[id] || consumers[id] != 1) continue;
      const Node& c = graph.node(only_consumer[id]);
      // broadcast_to reads its input as a leaf, so nothing fuses into it.
      if (!op_info(c.op).elementwise() || !(c.shape == v.shape)) continue;
      fused[id] = true;
    }
  }
  return fused;
}

// 1b. Convolution epilogues: an f32 conv2d computed by oneDNN takes the batch_norm reading it,
// and then the elementwise chain reading that, into its kernel (compiler.h). Marks them fused
// and conv_head[m] for a kernel's conv2d or its batch_norm.
void fuse_conv_epilogues(const Graph& graph, const Uses& uses, std::vector<bool>& fused,
                         std::vector<bool>& conv_head) {
  const size_t n = graph.size();
  const std::vector<uint32_t>& consumers = uses.consumers;
  const std::vector<NodeId>& only_consumer = uses.only_consumer;
  const std::vector<bool>& is_output = uses.is_output;
  std::vector<bool> chain_has_conv(n, false);  // by the root of the elementwise kernel
  // True if `head`, a single-use non-output value, is consumed by a kernel `id` may join.
  auto takes = [&](NodeId head) { return consumers[head] == 1 && !is_output[head]; };
  for (NodeId id = 0; id < n; ++id) {
    if (!onednn_conv_node(graph, graph.node(id)) || !takes(id)) continue;
    NodeId head = id;
    const NodeId bn = only_consumer[id];
    if (conv_batch_norm(graph, bn, id)) {
      fused[id] = conv_head[id] = true;
      head = bn;
      if (!takes(bn)) continue;
    }
    const Node& c = graph.node(only_consumer[head]);
    if (!op_info(c.op).elementwise() || !(c.shape == graph.node(head).shape)) continue;
    // One conv2d per kernel (a residual add of two convolutions takes the first).
    NodeId root = only_consumer[head];
    while (fused[root]) root = only_consumer[root];
    if (chain_has_conv[root]) continue;
    chain_has_conv[root] = true;
    fused[head] = conv_head[head] = true;
    fused[id] = conv_head[id] = true;
  }
}

// 2. Schedule: every non-parameter node that is not fused is a kernel root. Members of a fused
// kernel are the root plus the fused nodes that reach it through fused nodes only.
void schedule_kernels(const Graph& graph, const Uses& uses, const std::vector<bool>& fused,
                      const std::vector<bool>& conv_head, const CompileOptions& options, KernelPlan& plan) {
  const size_t n = graph.size();
  const std::vector<NodeId>& only_consumer = uses.only_consumer;
  std::vector<NodeId> owner(n);
  for (NodeId id = static_cast<NodeId>(n); id-- > 0;) {
    owner[id] = fused[id] ? owner[only_consumer[id]] : id;
  }
  std::vector<std::vector<NodeId>> members_of(n);
  for (NodeId id = 0; id < n; ++id) {
    if (fused[id]) members_of[owner[id]].push_back(id);
  }
  for (NodeId id = 0; id < n; ++id) {
    const Node& v = graph.node(id);
    if (v.op == OpKind::kParameter || fused[id]) continue;
    Kernel k;
    k.root = id;
    bool has_members = !members_of[id].empty();
    k.members = std::move(members_of[id]);
    if (has_members || op_info(v.op).elementwise()) {
      k.kind = Kernel::Kind::kFused;
      k.members.push_back(id);
      // A convolution epilogue's conv2d (and batch_norm) come first; nothing else in the chain
      // is an input of theirs, so the order stays topological.
      if (std::any_of(k.members.begin(), k.members.end(), [&](NodeId m) { return conv_head[m]; })) {
        std::stable_partition(k.members.begin(), k.members.end(), [&](NodeId m) { return conv_head[m]; });
        k.library = Kernel::Library::kOneDnn;
      }
    } else {
      k.kind = Kernel::Kind::kOp;
      if ((options.onednn_conv && onednn_conv_node(graph, v)) ||
          (options.onednn_matmul && onednn_matmul_node(graph, v)) ||
          (options.onednn_conv_grad && onednn_conv_grad_node(graph, v))) {
        k.library = Kernel::Library::kOneDnn;
      }
    }
    plan.kernels.push_back(std::move(k));
  }
}

// 3a. The slots of parameters, outputs and fused values (every other value: the arena's).
void assign_slots(const Graph& graph, const std::vector<bool>& fused, KernelPlan& plan) {
  const size_t n = graph.size();
  plan.slots.assign(n, Slot{});
  for (size_t p = 0; p < graph.params().size(); ++p) {
    Slot& s = plan.slots[graph.params()[p]];
    s.kind = Slot::Kind::kParam;
    s.index = static_cast<uint32_t>(p);
  }
  for (size_t o = 0; o < graph.outputs().size(); ++o) {
    NodeId id = graph.outputs()[o];
    Slot& s = plan.slots[id];
    if (s.kind == Slot::Kind::kParam || s.kind == Slot::Kind::kOutput) continue;
    s.kind = Slot::Kind::kOutput;
    s.index = static_cast<uint32_t>(o);
    s.nbytes = value_bytes(graph.node(id));
  }
  for (NodeId id = 0; id < n; ++id) {
    if (fused[id]) plan.slots[id].kind = Slot::Kind::kFused;
  }
}

// 3b. The last kernel reading each value.
std::vector<size_t> last_reads(const Graph& graph, const std::vector<bool>& fused, const KernelPlan& plan) {
  const size_t n = graph.size();
  std::vector<size_t> last_read(n, 0);
  for (size_t k = 0; k < plan.kernels.size(); ++k) {
    const Kernel& kern = plan.kernels[k];
    auto note_reads = [&](NodeId member) {
      for (NodeId in : graph.inputs(graph.node(member))) {
        if (!fused[in]) last_read[in] = k;
      }
    };
    if (kern.kind == Kernel::Kind::kFused) {
      for (NodeId m : kern.members) note_reads(m);
    } else {
      note_reads(kern.root);
    }
  }
  return last_read;
}

// 3c. A donated output is written in place when that is safe (replay/compile/executable.h,
// kDonated); otherwise it stays a fresh output buffer and the donation costs a copy, nothing else.
void place_donations(const Graph& graph, const Uses& uses, const std::vector<bool>& fused,
                     const std::vector<bool>& conv_head, const std::vector<size_t>& last_read, KernelPlan& plan) {
  const std::vector<bool>& is_output = uses.is_output;
  for (const Donation& d : graph.donations()) {
    const NodeId out = graph.outputs()[d.output];
    const NodeId param = graph.params()[d.param];
    Slot& s = plan.slots[out];
    if (s.kind != Slot::Kind::kOutput || s.index != d.output || is_output[param]) continue;
    const auto k = std::find_if(plan.kernels.begin(), plan.kernels.end(),
                                [&](const Kernel& kern) { return kern.root == out; });
    const size_t at = static_cast<size_t>(k - plan.kernels.begin());
    // The writer may read the parameter only elementwise: not as a kOp's input, nor as an
    // input of a convolution epilogue's conv2d or batch_norm.
    bool reads_whole = false;
    if (k->kind == Kernel::Kind::kOp) {
      reads_whole = reads_directly(graph, *k, param, fused);
    } else if (k->library == Kernel::Library::kOneDnn) {
      for (NodeId m : k->members) {
        const auto ins = graph.inputs(graph.node(m));
        reads_whole = reads_whole || (conv_head[m] && std::find(ins.begin(), ins.end(), param) != ins.end());
      }
    }
    if (last_read[param] > at || (last_read[param] == at && reads_whole)) {
      continue;
    }
    s.kind = Slot::Kind::kDonated;
  }
}

// 3d. Arena offsets: first fit, each value freed after its last reader placed its output.
void place_in_arena(const Graph& graph, const std::vector<size_t>& last_read, KernelPlan& plan) {
  std::vector<std::vector<NodeId>> dies_at(plan.kernels.size());
  ArenaPlanner planner;
  for (size_t k = 0; k < plan.kernels.size(); ++k) {
    NodeId root = plan.kernels[k].root;
    Slot& s = plan.slots[root];
    if (s.kind == Slot::Kind::kArena) {
      s.nbytes = value_bytes(graph.node(root));
      s.offset = planner.allocate(s.nbytes);
      dies_at[last_read[root]].push_back(root);
    }
    // Inputs whose last reader is this kernel are freed only now, after its output was placed.
    // (A value nobody reads cannot occur in a canonical graph; it would simply never be freed.)
    for (NodeId dead : dies_at[k]) planner.release(plan.slots[dead].offset, plan.slots[dead].nbytes);
  }
  plan.arena_bytes = planner.peak();
}

}  // namespace

Executable compile_graph(const Graph& source, const GraphKey& key, std::string backend,
                         std::string options_digest, const CompileOptions& options) {
  Executable exe;
  exe.graph_key = key;
  exe.backend = std::move(backend);
  exe.options_digest = std::move(options_digest);
  exe.compiler_version = options.compiler_version;
  exe.graph = source;
  KernelPlan& plan = exe.payload.emplace<KernelPlan>();
  if (options.widen && needs_widening(source)) {
    plan.lowered = std::make_shared<const Graph>(widen_storage_types(source));
  }
  const Graph& graph = plan.run_graph(source);
  const size_t n = graph.size();
  const Uses uses = count_uses(graph);
  std::vector<bool> fused = fuse_elementwise(graph, uses, options);
  std::vector<bool> conv_head(n, false);  // a kernel's conv2d or its batch_norm
  if (options.fuse && options.onednn_conv) fuse_conv_epilogues(graph, uses, fused, conv_head);
  schedule_kernels(graph, uses, fused, conv_head, options, plan);
  assign_slots(graph, fused, plan);
  const std::vector<size_t> last_read = last_reads(graph, fused, plan);
  place_donations(graph, uses, fused, conv_head, last_read, plan);
  place_in_arena(graph, last_read, plan);
  return exe;
}

}  // namespace tracecache
