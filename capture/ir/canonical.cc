#include "capture/ir/canonical.h"

#include <xxhash.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <unordered_map>
#include <utility>

#include "capture/ops/attr_views.h"
#include "capture/ops/elementwise.h"

namespace tracecache {

namespace {

constexpr NodeId kUnvisited = std::numeric_limits<NodeId>::max();

// Builds the canonical graph; one instance per canonicalize() call.
class Canonicalizer {
 public:
  Canonicalizer(const Graph& trace, const CanonicalizeOptions& options)
      : trace_(trace), options_(options), canon_of_(trace.size(), kUnvisited) {}

  CanonicalGraph run(std::span<const NodeId> roots, std::span<const TraceDonation> donations,
                     std::shared_ptr<const TraceSources> trace_sources) {
    std::vector<NodeId> outputs;
    outputs.reserve(roots.size());
    for (NodeId r : roots) outputs.push_back(visit(r));
    out_.graph.set_outputs(std::move(outputs));
    for (const TraceDonation& d : donations) add_donation(roots, d);
    out_.key = hash_graph(out_.graph);
    // The locations are resolved per node only when asked (node_sources()): the walk's map,
    // built anyway, is all they need from here.
    if (trace_sources) {
      out_.trace_sources = std::move(trace_sources);
      out_.canonical_of_trace = std::move(canon_of_);
    }
    return std::move(out_);
  }

 private:
  // Iterative post-order walk (graphs can be deeper than the call stack).
  NodeId visit(NodeId root) {
    if (canon_of_[root] != kUnvisited) return canon_of_[root];
    struct Frame { NodeId node; uint32_t next_input; };
    std::vector<Frame> stack{{root, 0}};
    while (!stack.empty()) {
      Frame& f = stack.back();
      const Node& n = trace_.node(f.node);
      auto ins = trace_.inputs(n);
      if (f.next_input < ins.size()) {
        NodeId in = ins[f.next_input++];
        if (canon_of_[in] == kUnvisited) stack.push_back({in, 0});
        continue;
      }
      canon_of_[f.node] = emit(n);
      stack.pop_back();
    }
    return canon_of_[root];
  }

  NodeId emit(const Node& n) {
    if (n.op == OpKind::kParameter) {
      ParamSource src;
      src.kind = ParamSource::Kind::kTraceParam;
      src.trace_param = static_cast<uint32_t>(ParameterAttrs(trace_.attrs(n)).index());
      return add_param(n.type(), src);
    }
    auto attrs = trace_.attrs(n);
    if (n.op == OpKind::kFull && !options_.bake_scalars) {
      // Every constant becomes its own parameter, even when two hold equal values: the graph's
      // structure must not depend on the values, or a changed value could change the key.
      ParamSource src;
      src.kind = ParamSource::Kind::kScalar;
      src.dtype = n.dtype;
      src.value = FullAttrs(attrs).value();
      NodeId p = add_param({n.dtype, Shape{}}, src);
      if (n.shape.rank() == 0) return p;
      AttrValue shape = AttrValue::of_ints(n.shape);
      return add_unique(OpKind::kBroadcastTo, std::span<const NodeId>(&p, 1),
                        std::span<const AttrValue>(&shape, 1), n.type());
    }
    inputs_.clear();
    for (NodeId in : trace_.inputs(n)) inputs_.push_back(canon_of_[in]);
    return add_unique(n.op, inputs_, attrs, n.type());
  }

  void add_donation(std::span<const NodeId> roots, const TraceDonation& d) {
    const Graph& g = out_.graph;
    auto root = std::find(roots.begin(), roots.end(), d.node);
    if (root == roots.end()) return;
    const uint32_t output = static_cast<uint32_t>(root - roots.begin());
    for (uint32_t p = 0; p < out_.sources.size(); ++p) {
      const ParamSource& src = out_.sources[p];
      if (src.kind != ParamSource::Kind::kTraceParam || src.trace_param != d.trace_param) continue;
      const Node& out = g.node(g.outputs()[output]);
      const Node& param = g.node(g.params()[p]);
      const bool taken = std::any_of(g.donations().begin(), g.donations().end(), [&](const Donation& x) {
        return x.output == output || x.param == p;
      });
      if (!taken && out.op != OpKind::kParameter && out.type() == param.type()) {
        out_.graph.add_donation({output, p});
      }
      return;
    }
  }

  NodeId add_param(const TensorType& type, const ParamSource& src) {
    out_.sources.push_back(src);
    return out_.graph.add_parameter(type);
  }

  // Common-subexpression elimination: returns an existing node with the same op, type, inputs
  // and attributes, or adds one.
  NodeId add_unique(OpKind op, std::span<const NodeId> inputs, std::span<const AttrValue> attrs,
                    const TensorType& type) {
    uint64_t h = identity_hash(op, inputs, attrs, type);
    auto [lo, hi] = cse_.equal_range(h);
    for (auto it = lo; it != hi; ++it) {
      const Graph& g = out_.graph;
      const Node& c = g.node(it->second);
      if (c.op != op || !(c.type() == type)) continue;
      auto ci = g.inputs(c);
      auto ca = g.attrs(c);
      if (std::equal(ci.begin(), ci.end(), inputs.begin(), inputs.end()) &&
          std::equal(ca.begin(), ca.end(), attrs.begin(), attrs.end())) {
        return it->second;
      }
    }
    NodeId id = out_.graph.add_node(op, inputs, attrs, type);
    cse_.emplace(h, id);
    return id;
  }

  // In-process identity hash for the CSE map (never persisted).
  static uint64_t identity_hash(OpKind op, std::span<const NodeId> inputs,
                                std::span<const AttrValue> attrs, const TensorType& type) {
    uint64_t h = static_cast<uint64_t>(op) * 0x9e3779b97f4a7c15ULL ^ static_cast<uint64_t>(type.dtype);
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 0x100000001b3ULL + 0x7f4a7c15ULL; };
    for (int64_t d : type.shape) mix(static_cast<uint64_t>(d));
    for (NodeId in : inputs) mix(in);
    for (const AttrValue& a : attrs) {
      mix(static_cast<uint64_t>(a.kind));
      switch (a.kind) {
        case AttrKind::kFloat: mix(normalized_float_bits(a.f)); break;
        case AttrKind::kDType: mix(static_cast<uint64_t>(a.dtype)); break;
        case AttrKind::kInts:
          for (int64_t v : a.ints) mix(static_cast<uint64_t>(v));
          break;
        default: mix(static_cast<uint64_t>(a.i));
      }
    }
    return h;
  }

  const Graph& trace_;
  const CanonicalizeOptions& options_;
  std::vector<NodeId> canon_of_;  // trace node -> canonical node
  std::vector<NodeId> inputs_;    // scratch
  std::unordered_multimap<uint64_t, NodeId> cse_;
  CanonicalGraph out_;
};

}  // namespace

CanonicalGraph canonicalize(const Graph& trace, std::span<const NodeId> roots,
                            const CanonicalizeOptions& options,
                            std::span<const TraceDonation> donations,
                            std::shared_ptr<const TraceSources> trace_sources) {
  return Canonicalizer(trace, options).run(roots, donations, std::move(trace_sources));
}

// Each canonical node takes the location of the first traced node it stands for.
std::vector<uint32_t> CanonicalGraph::node_sources() const {
  std::vector<uint32_t> out;
  if (!trace_sources) return out;
  out.assign(graph.size(), kNoSource);
  const std::vector<uint32_t>& traced = trace_sources->nodes;
  for (NodeId t = 0; t < canonical_of_trace.size() && t < traced.size(); ++t) {
    const NodeId c = canonical_of_trace[t];
    if (c < out.size() && out[c] == kNoSource) out[c] = traced[t];
  }
  return out;
}

GraphSources graph_sources(const CanonicalGraph& graph) {
  GraphSources s;
  const std::vector<uint32_t> ids = graph.node_sources();
  if (ids.empty()) return s;
  const std::vector<std::string>& names = graph.trace_sources->names;
  s.nodes.reserve(ids.size());
  for (uint32_t id : ids) {
    s.nodes.push_back(id < names.size() ? names[id] : std::string());
  }
  return s;
}

HostBuffer scalar_buffer(const ParamSource& source) {
  HostBuffer b(source.dtype, Shape{});
  dispatch_dtype(source.dtype, [&]<typename T>() { *b.data<T>() = convert<T>(source.value); });
  return b;
}

}  // namespace tracecache
