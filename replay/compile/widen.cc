#include "replay/compile/widen.h"

#include <vector>

namespace tracecache {
namespace {

// Nodes the rewrite leaves alone: parameters, and the ops whose kernels run on any held types
// (casts: cpu_fused.cc, convert_fn; quantization: its reference kernels).
bool kept(const Node& n) { return n.op == OpKind::kParameter || reads_storage_types(n.op); }

bool touches_storage(const Graph& graph, const Node& n) {
  if (storage_dtype(n.dtype)) return true;
  for (NodeId in : graph.inputs(n)) {
    if (storage_dtype(graph.node(in).dtype)) return true;
  }
  return false;
}

AttrValue cast_to(DType t) { return AttrValue::of_dtype(t); }

}  // namespace

bool needs_widening(const Graph& graph) {
  for (NodeId id = 0; id < graph.size(); ++id) {
    const Node& n = graph.node(id);
    if (!kept(n) && touches_storage(graph, n)) return true;
  }
  return false;
}

Graph widen_storage_types(const Graph& graph) {
  Graph out;
  std::vector<NodeId> now(graph.size());           // a node's value in `out`, of its own type
  std::vector<NodeId> wide(graph.size(), UINT32_MAX);  // its value cast to the wide type, once
  auto wide_of = [&](NodeId id) {
    const Node& n = graph.node(id);
    if (!storage_dtype(n.dtype)) return now[id];
    if (wide[id] == UINT32_MAX) {
      const AttrValue to = cast_to(widened_dtype(n.dtype));
      wide[id] = out.add_node(OpKind::kCast, std::span<const NodeId>(&now[id], 1), std::span(&to, 1),
                              {widened_dtype(n.dtype), n.shape});
    }
    return wide[id];
  };
  std::vector<NodeId> ins;
  std::vector<AttrValue> attrs;
  for (NodeId id = 0; id < graph.size(); ++id) {
    const Node& n = graph.node(id);
    if (n.op == OpKind::kParameter) {
      now[id] = out.add_parameter(n.type());
      continue;
    }
    ins.clear();
    for (NodeId in : graph.inputs(n)) ins.push_back(now[in]);
    attrs.assign(graph.attrs(n).begin(), graph.attrs(n).end());
    if (kept(n) || !touches_storage(graph, n)) {
      now[id] = out.add_node(n.op, ins, attrs, n.type());
      continue;
    }
    ins.clear();
    for (NodeId in : graph.inputs(n)) ins.push_back(wide_of(in));
    widen_dtype_attrs(attrs, n.dtype);
    const NodeId computed = out.add_node(n.op, ins, attrs, {widened_dtype(n.dtype), n.shape});
    if (!storage_dtype(n.dtype)) {
      now[id] = computed;
      continue;
    }
    const AttrValue back = cast_to(n.dtype);
    now[id] = out.add_node(OpKind::kCast, std::span<const NodeId>(&computed, 1), std::span(&back, 1), n.type());
    // Readers widen the rounded (or wrapped) value again, as the reference reads it.
  }
  std::vector<NodeId> outputs;
  for (NodeId o : graph.outputs()) outputs.push_back(now[o]);
  out.set_outputs(std::move(outputs));
  for (const Donation& d : graph.donations()) out.add_donation(d);
  return out;
}

}  // namespace tracecache
