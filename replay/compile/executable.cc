#include "replay/compile/executable.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <map>
#include <variant>

#include "replay/compile/compiler.h"
#include "replay/compile/widen.h"
#include "store/codec/graph_codec.h"
#include "store/codec/proto/tracecache.pb.h"

namespace tracecache {

namespace {

constexpr uint32_t kExecutableFormatVersion = 1;
constexpr uint64_t kArenaAlignment = 64;  // the compiler's alignment (replay/compile/compiler.cc)

Status bad(const std::string& what) { return corruption("executable: " + what); }

uint64_t value_bytes(const Node& n) {
  return static_cast<uint64_t>(n.shape.numel()) * dtype_size(n.dtype);
}

// The heads of oneDNN fused kernel `k` (`kern`): members[0] an f32 conv2d, then optionally a
// batch_norm of it (conv_batch_norm), then at least one chain member unless the batch_norm is
// the root; the chain has the heads' shape. Sets *heads to their count.
Status check_conv_heads(const Graph& graph, const Kernel& kern, size_t k, size_t* heads) {
  const std::vector<NodeId>& m = kern.members;
  const size_t n = graph.size();
  if (m.size() < 2 || m[0] >= n || m[1] >= n || !onednn_conv_node(graph, graph.node(m[0]))) {
    return bad(fmt::format("oneDNN kernel {} does not start with an f32 conv2d and its epilogue", k));
  }
  *heads = conv_batch_norm(graph, m[1], m[0]) ? 2 : 1;
  if (graph.node(m[1]).op == OpKind::kBatchNorm && *heads != 2) {
    return bad(fmt::format("oneDNN kernel {} has a batch_norm it cannot apply", k));
  }
  const Shape& shape = graph.node(m[*heads - 1]).shape;
  if (!(graph.node(kern.root).shape == shape) || !(graph.node(m[0]).shape == shape)) {
    return bad(fmt::format("oneDNN kernel {}'s epilogue does not have its conv2d's shape", k));
  }
  return Status::ok();
}

// What check_schedule learns for the later phases: the kernel computing each value (born) and the
// last kernel reading it (last).
struct Liveness {
  std::vector<size_t> born, last;
};

// Phase 1: every slot agrees with the graph (parameters, outputs, donations, arena ranges inside
// the arena and aligned, fused nodes fusible). Returns where the arena's slots end.
Result<uint64_t> check_slots(const Graph& graph, const KernelPlan& plan) {
  const size_t n = graph.size();
  const std::vector<Slot>& slots = plan.slots;
  const uint64_t arena_bytes = plan.arena_bytes;
  std::vector<bool> is_output(n, false);
  for (NodeId o : graph.outputs()) is_output[o] = true;
  for (size_t p = 0; p < graph.params().size(); ++p) {
    const Slot& s = slots[graph.params()[p]];
    if (s.kind != Slot::Kind::kParam || s.index != p) return bad(fmt::format("parameter {} slot", p));
  }
  for (size_t o = 0; o < graph.outputs().size(); ++o) {
    NodeId id = graph.outputs()[o];
    const Slot& s = slots[id];
    if (s.kind == Slot::Kind::kParam) continue;
    if (s.kind != Slot::Kind::kOutput && s.kind != Slot::Kind::kDonated) return bad(fmt::format("output {} is not in an output slot", o));
    if (s.index > o || graph.outputs()[s.index] != id) return bad(fmt::format("output {} slot index", o));
  }
  uint64_t arena_end = 0;
  for (NodeId id = 0; id < n; ++id) {
    const Node& node = graph.node(id);
    const Slot& s = slots[id];
    switch (s.kind) {
      case Slot::Kind::kParam:
        if (node.op != OpKind::kParameter) return bad(fmt::format("node {} is not a parameter", id));
        break;
      case Slot::Kind::kOutput:
        if (!is_output[id] || s.nbytes != value_bytes(node)) return bad(fmt::format("node {} output slot", id));
        break;
      case Slot::Kind::kArena:
        if (node.op == OpKind::kParameter || is_output[id] || s.nbytes != value_bytes(node) ||
            s.offset > arena_bytes || s.nbytes > arena_bytes - s.offset) {
          return bad(fmt::format("node {} arena slot [{}, +{}) outside the arena of {} bytes", id,
                                 s.offset, s.nbytes, arena_bytes));
        }
        if (s.offset % kArenaAlignment != 0) {
          return bad(fmt::format("node {} arena offset {} is not {}-byte aligned", id, s.offset, kArenaAlignment));
        }
        // The planner's peak is the end of its highest (aligned, at least one unit) range.
        arena_end = std::max(arena_end, s.offset + std::max<uint64_t>(
            (s.nbytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment, kArenaAlignment));
        break;
      case Slot::Kind::kDonated: {
        const int64_t p = s.index < graph.outputs().size() ? graph.donated_param(s.index) : -1;
        if (!is_output[id] || s.nbytes != value_bytes(node) || p < 0 || is_output[graph.params()[p]]) {
          return bad(fmt::format("node {} donated slot", id));
        }
        break;
      }
      case Slot::Kind::kFused:
        // A conv2d or batch_norm is fused only at the head of a oneDNN kernel (checked below).
        if (node.op == OpKind::kParameter || is_output[id] ||
            !(fusible_op(node.op) || node.op == OpKind::kConv2d || node.op == OpKind::kBatchNorm)) {
          return bad(fmt::format("node {} cannot be fused", id));
        }
        break;
      default: return bad(fmt::format("node {} has an unknown slot kind", id));
    }
  }

  return arena_end;
}

// Phase 2: the schedule computes every non-parameter value exactly once, after its inputs; fused
// members are single-use, same-shape, elementwise chains ending at their root.
Result<Liveness> check_schedule(const Graph& graph, const KernelPlan& plan) {
  const size_t n = graph.size();
  const std::vector<Slot>& slots = plan.slots;
  const std::vector<Kernel>& kernels = plan.kernels;
  std::vector<bool> ready(n, false);
  std::vector<bool> in_kernel(n, false);
  std::vector<size_t> kernel_of(n, SIZE_MAX);  // kernel that computes a fused member
  for (NodeId p : graph.params()) ready[p] = true;
  // Arena liveness: [first kernel, last kernel reading it].
  std::vector<size_t> born(n, 0), last(n, 0);
  for (size_t k = 0; k < kernels.size(); ++k) {
    const Kernel& kern = kernels[k];
    if (kern.root >= n) return bad(fmt::format("kernel {} root out of range", k));
    NodeId root = kern.root;
    const Slot::Kind root_kind = slots[root].kind;
    if (root_kind == Slot::Kind::kParam || root_kind == Slot::Kind::kFused || in_kernel[root]) {
      return bad(fmt::format("kernel {} computes node {} wrongly or twice", k, root));
    }
    std::vector<NodeId> members;
    size_t heads = 0;  // a oneDNN kernel's conv2d and batch_norm, computed before the chain
    if (kern.kind == Kernel::Kind::kFused) {
      if (kern.members.empty() || kern.members.back() != root) return bad(fmt::format("kernel {} members", k));
      if (kern.library == Kernel::Library::kOneDnn) {
        Status st = check_conv_heads(graph, kern, k, &heads);
        if (!st.is_ok()) return st;
      } else if (kern.library != Kernel::Library::kBuiltin) {
        return bad(fmt::format("fused kernel {} names an unknown library", k));
      }
      members = kern.members;
    } else if (kern.kind == Kernel::Kind::kOp) {
      if (!kern.members.empty()) return bad(fmt::format("kernel {} has members", k));
      if (kern.library == Kernel::Library::kOneDnn && !onednn_conv_node(graph, graph.node(root)) &&
          !onednn_matmul_node(graph, graph.node(root)) && !onednn_conv_grad_node(graph, graph.node(root))) {
        return bad(fmt::format("kernel {} runs node {} on oneDNN, which computes f32 conv2d, its gradients, matmul "
                               "and linear only",
                               k, root));
      }
      members = {root};
    } else {
      return bad(fmt::format("kernel {} has an unknown kind", k));
    }
    const Shape& root_shape = graph.node(root).shape;
    for (size_t i = 0; i < members.size(); ++i) {
      NodeId m = members[i];
      if (m >= n || in_kernel[m]) return bad(fmt::format("kernel {} member {} invalid", k, m));
      const Node& mn = graph.node(m);
      bool is_root = i + 1 == members.size();
      if (kern.kind == Kernel::Kind::kFused) {
        if (i >= heads && (!fusible_op(mn.op) || !(mn.shape == root_shape))) {
          return bad(fmt::format("kernel {} member {} not fusible", k, m));
        }
        if (!is_root && slots[m].kind != Slot::Kind::kFused) return bad(fmt::format("kernel {} member {} not fused", k, m));
      }
      for (NodeId in : graph.inputs(mn)) {
        if (slots[in].kind == Slot::Kind::kFused) {
          // Must be an earlier member of this kernel (members are marked as they are checked),
          // broadcast_to reads only leaves, and the chain after a oneDNN kernel's heads reads
          // the last head only (a conv2d followed by a batch_norm is the batch_norm's alone).
          const bool hidden_head = heads == 2 && in == kern.members[0] && m != kern.members[1];
          if (kernel_of[in] != k || !in_kernel[in] || mn.op == OpKind::kBroadcastTo || hidden_head) {
            return bad(fmt::format("kernel {} reads fused node {} it does not compute", k, in));
          }
        } else {
          if (!ready[in]) return bad(fmt::format("kernel {} reads node {} before it is computed", k, in));
          last[in] = k;
        }
      }
      in_kernel[m] = true;
      kernel_of[m] = k;
    }
    ready[root] = true;
    born[root] = k;
    last[root] = std::max(last[root], k);
  }
  for (NodeId id = 0; id < n; ++id) {
    if (slots[id].kind == Slot::Kind::kFused) {
      // A fused value is used only inside its own kernel: no later kernel may read it (checked
      // above) and it must belong to some kernel.
      if (!in_kernel[id]) return bad(fmt::format("fused node {} is never computed", id));
    } else if (graph.node(id).op != OpKind::kParameter && !ready[id]) {
      return bad(fmt::format("node {} is never computed", id));
    }
  }

  return Liveness{.born = std::move(born), .last = std::move(last)};
}

// Phase 3: a donated output is written into its parameter's storage: no kernel may read the
// parameter after the one writing the output, and that one only elementwise (a fused kernel).
Status check_donated_writes(const Graph& graph, const KernelPlan& plan, const Liveness& live_range) {
  const size_t n = graph.size();
  const std::vector<Slot>& slots = plan.slots;
  const std::vector<size_t>& born = live_range.born;
  const std::vector<size_t>& last = live_range.last;
  for (NodeId id = 0; id < n; ++id) {
    if (slots[id].kind != Slot::Kind::kDonated) continue;
    const NodeId param = graph.params()[static_cast<size_t>(graph.donated_param(slots[id].index))];
    const Kernel& writer = plan.kernels[born[id]];
    // Read whole (not elementwise): by a kOp kernel, or by a oneDNN kernel's conv2d or batch_norm.
    bool reads_whole = false;
    for (NodeId m : writer.kind == Kernel::Kind::kFused ? writer.members : std::vector<NodeId>{writer.root}) {
      const OpKind op = graph.node(m).op;
      const bool whole = writer.kind == Kernel::Kind::kOp || op == OpKind::kConv2d || op == OpKind::kBatchNorm;
      for (NodeId in : graph.inputs(graph.node(m))) reads_whole = reads_whole || (whole && in == param);
    }
    if ((last[param] > born[id]) || reads_whole) {
      return bad(fmt::format("node {} is donated to parameter {}, which is read after it is written", id, param));
    }
  }

  return Status::ok();
}

// Phase 4: no two arena values that are live at the same time may share bytes. Sweep over
// kernels: at kernel k, values whose last reader is before k are dead; the output of k must not
// overlap anything still live (including k's own inputs).
Status check_arena_overlaps(const Graph& graph, const KernelPlan& plan, const Liveness& live_range) {
  const size_t n = graph.size();
  const std::vector<Slot>& slots = plan.slots;
  const std::vector<Kernel>& kernels = plan.kernels;
  const std::vector<size_t>& born = live_range.born;
  const std::vector<size_t>& last = live_range.last;
  std::vector<std::vector<NodeId>> born_at(kernels.size());
  for (NodeId id = 0; id < n; ++id) {
    if (slots[id].kind == Slot::Kind::kArena) born_at[born[id]].push_back(id);
  }
  std::map<uint64_t, std::pair<uint64_t, size_t>> live;  // offset -> (end, last reader)
  for (size_t k = 0; k < kernels.size(); ++k) {
    for (auto it = live.begin(); it != live.end();) {
      it = it->second.second < k ? live.erase(it) : std::next(it);
    }
    for (NodeId id : born_at[k]) {
      uint64_t begin = slots[id].offset, end = begin + slots[id].nbytes;
      auto next = live.lower_bound(begin);
      bool overlaps = (next != live.end() && next->first < end) ||
                      (next != live.begin() && std::prev(next)->second.first > begin);
      if (overlaps && slots[id].nbytes > 0) {
        return bad(fmt::format("node {} shares arena bytes with a live value", id));
      }
      if (slots[id].nbytes > 0) live[begin] = {end, last[id]};
    }
  }
  return Status::ok();
}

}  // namespace

Status Executable::validate() const {
  if (hash_graph(graph) != graph_key) return bad("its graph does not hash to its key");
  if (std::string why; !graph.check_donations(&why)) return bad(why);
  return std::visit(
      [&](const auto& plan) { return plan.validate(plan.run_graph(graph)); },
      payload);
}

Status KernelPlan::validate(const Graph& graph) const {
  if (slots.size() != graph.size()) return bad(fmt::format("{} slots for {} nodes", slots.size(), graph.size()));
  Result<uint64_t> arena_end = check_slots(graph, *this);
  if (!arena_end.is_ok()) return arena_end.status();
  // An arena no larger than its slots need: a crafted size must not make the backend allocate
  // more than the plan uses.
  if (arena_bytes != *arena_end) {
    return bad(fmt::format("arena of {} bytes, but its slots end at {}", arena_bytes, *arena_end));
  }
  Result<Liveness> live = check_schedule(graph, *this);
  if (!live.is_ok()) return live.status();
  if (Status st = check_donated_writes(graph, *this, *live); !st.is_ok()) return st;
  return check_arena_overlaps(graph, *this, *live);
}

uint64_t KernelPlan::footprint_bytes() const {
  uint64_t bytes = slots.size() * sizeof(Slot);
  if (lowered) bytes += lowered->size() * (sizeof(Node) + 2 * sizeof(AttrValue));
  for (const Kernel& k : kernels) bytes += sizeof(Kernel) + k.members.size() * sizeof(NodeId);
  return bytes;
}

uint64_t Executable::footprint_bytes() const {
  uint64_t bytes = sizeof(Executable) + graph.size() * (sizeof(Node) + 2 * sizeof(AttrValue));
  return bytes + std::visit([](const auto& plan) { return plan.footprint_bytes(); }, payload);
}

std::string serialize_executable(const Executable& exe) {
  proto::Executable pe;
  pe.set_format_version(kExecutableFormatVersion);
  pe.set_graph_key(exe.graph_key.to_bytes());
  pe.set_backend(exe.backend);
  pe.set_options_digest(exe.options_digest);
  pe.set_compiler_version(exe.compiler_version);
  store::graph_to_proto(exe.graph, pe.mutable_graph());
  const KernelPlan& plan = std::get<KernelPlan>(exe.payload);
  for (const Slot& s : plan.slots) {
    proto::Slot* ps = pe.add_slots();
    ps->set_kind(static_cast<uint32_t>(s.kind));
    ps->set_index(s.index);
    ps->set_offset(s.offset);
    ps->set_nbytes(s.nbytes);
  }
  for (const Kernel& k : plan.kernels) {
    proto::Kernel* pk = pe.add_kernels();
    pk->set_kind(static_cast<uint32_t>(k.kind));
    pk->set_root(k.root);
    for (NodeId m : k.members) pk->add_members(m);
    if (k.library != Kernel::Library::kBuiltin) pk->set_library(static_cast<uint32_t>(k.library));
  }
  pe.set_arena_bytes(plan.arena_bytes);
  pe.set_widened(plan.widened());
  return store::serialize_deterministic(pe);
}

Result<Executable> parse_executable(std::string_view bytes) {
  proto::Executable pe;
  if (!pe.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return bad("bytes do not parse");
  }
  if (pe.format_version() != kExecutableFormatVersion) {
    return bad(fmt::format("format version {} is not {}", pe.format_version(), kExecutableFormatVersion));
  }
  std::optional<GraphKey> key = GraphKey::from_bytes(pe.graph_key());
  if (!key) return bad("graph key is not 16 bytes");
  Executable exe;
  exe.graph_key = *key;
  exe.backend = pe.backend();
  exe.options_digest = pe.options_digest();
  exe.compiler_version = pe.compiler_version();
  Result<Graph> g = store::graph_from_proto(pe.graph());
  if (!g.is_ok()) return g.status();
  exe.graph = std::move(*g);
  KernelPlan& plan = exe.payload.emplace<KernelPlan>();
  for (const proto::Slot& ps : pe.slots()) {
    if (ps.kind() > static_cast<uint32_t>(Slot::Kind::kDonated)) return bad("unknown slot kind");
    plan.slots.push_back(Slot{static_cast<Slot::Kind>(ps.kind()), ps.index(), ps.offset(), ps.nbytes()});
  }
  for (const proto::Kernel& pk : pe.kernels()) {
    if (pk.kind() > static_cast<uint32_t>(Kernel::Kind::kFused)) return bad("unknown kernel kind");
    Kernel k;
    k.kind = static_cast<Kernel::Kind>(pk.kind());
    k.root = pk.root();
    k.members.assign(pk.members().begin(), pk.members().end());
    if (pk.library() > static_cast<uint32_t>(Kernel::Library::kOneDnn)) return bad("unknown kernel library");
    k.library = static_cast<Kernel::Library>(pk.library());
    plan.kernels.push_back(std::move(k));
  }
  plan.arena_bytes = pe.arena_bytes();
  if (pe.widened()) plan.lowered = std::make_shared<const Graph>(widen_storage_types(exe.graph));
  Status st = exe.validate();
  if (!st.is_ok()) return st;
  return exe;
}

}  // namespace tracecache
