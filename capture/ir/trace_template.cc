#include "capture/ir/trace_template.h"

#include <fmt/format.h>

#include <array>

namespace tracecache {

Result<Graph> instantiate(const TraceTemplate& tmpl, std::span<const TensorType> params) {
  const Graph& t = tmpl.graph;
  if (params.size() != t.params().size()) {
    return invalid_argument(fmt::format("template has {} parameters, {} types given",
                                        t.params().size(), params.size()));
  }
  Graph g;
  std::vector<TensorType> in_types;
  std::array<AttrValue, kMaxOpAttrs> attrs;
  size_t next_sym = 0;
  for (NodeId id = 0; id < t.size(); ++id) {
    const Node& n = t.node(id);
    if (n.op == OpKind::kParameter) {
      g.add_parameter(params[g.params().size()]);
      continue;
    }
    std::span<const AttrValue> raw = t.attrs(n);
    std::copy(raw.begin(), raw.end(), attrs.begin());
    for (; next_sym < tmpl.sym_attrs.size() && tmpl.sym_attrs[next_sym].node == id; ++next_sym) {
      const SymAttr& s = tmpl.sym_attrs[next_sym];
      const int64_t size = g.node(s.source).shape[static_cast<int>(s.dim)];
      AttrValue& a = attrs[s.attr];
      if (a.kind == AttrKind::kInts) {
        a.ints[s.element] = size;
      } else if (a.kind == AttrKind::kFloat) {
        a.f = static_cast<double>(size);
      } else {
        a.i = size;
      }
    }
    in_types.clear();
    for (NodeId in : t.inputs(n)) in_types.push_back(g.node(in).type());
    std::span<AttrValue> normalized(attrs.data(), raw.size());
    Result<TensorType> type = infer_op(n.op, in_types, normalized);
    if (!type.is_ok()) {
      return invalid_argument(fmt::format("at the new sizes, {}", type.status().message()));
    }
    std::vector<NodeId> inputs(t.inputs(n).begin(), t.inputs(n).end());
    g.add_node(n.op, inputs, normalized, *type);
  }
  for (const ShapeObservation& o : tmpl.observed) {
    if (!(g.node(o.node).shape == o.shape)) {
      return invalid_argument(fmt::format(
          "the traced code read the shape {} of a value that is now {}",
          type_to_string({g.node(o.node).dtype, o.shape}), type_to_string(g.node(o.node).type())));
    }
  }
  g.set_outputs(tmpl.roots);
  return g;
}

}  // namespace tracecache
