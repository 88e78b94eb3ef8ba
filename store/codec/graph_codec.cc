#include "store/codec/graph_codec.h"

#include <fmt/format.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <algorithm>
#include <bit>

#include "capture/ir/hash.h"
#include "capture/core/shape.h"
#include "capture/ops/attr_views.h"
#include "store/codec/proto/tracecache.pb.h"

namespace tracecache::store {

namespace {

Status bad(size_t node, const std::string& what) {
  return corruption(fmt::format("stored graph, node {}: {}", node, what));
}

void attr_to_proto(const AttrValue& a, proto::Attr* out) {
  out->set_kind(static_cast<uint32_t>(a.kind));
  switch (a.kind) {
    case AttrKind::kInt:
    case AttrKind::kBool: out->set_i(a.i); break;
    case AttrKind::kFloat: out->set_f_bits(std::bit_cast<uint64_t>(a.f)); break;
    case AttrKind::kDType: out->set_dtype(static_cast<uint32_t>(a.dtype)); break;
    case AttrKind::kInts:
      for (int64_t v : a.ints) out->add_ints(v);
      break;
  }
}

std::optional<DType> dtype_from(uint32_t v) {
  if (v >= static_cast<uint32_t>(kDTypeCount)) return std::nullopt;
  return static_cast<DType>(v);
}

Result<AttrValue> attr_from_proto(const proto::Attr& in) {
  AttrValue a;
  switch (in.kind()) {
    case static_cast<uint32_t>(AttrKind::kInt): a = AttrValue::of_int(in.i()); break;
    case static_cast<uint32_t>(AttrKind::kBool):
      if (in.i() != 0 && in.i() != 1) return corruption("bool attribute is neither 0 nor 1");
      a = AttrValue::of_bool(in.i() != 0);
      break;
    case static_cast<uint32_t>(AttrKind::kFloat):
      a = AttrValue::of_float(std::bit_cast<double>(in.f_bits()));
      break;
    case static_cast<uint32_t>(AttrKind::kDType): {
      auto t = dtype_from(in.dtype());
      if (!t) return corruption(fmt::format("unknown dtype {}", in.dtype()));
      a = AttrValue::of_dtype(*t);
      break;
    }
    case static_cast<uint32_t>(AttrKind::kInts):
      if (in.ints_size() > kMaxRank) return corruption("int list attribute too long");
      a = AttrValue::of_ints(IntList(std::span<const int64_t>(in.ints().data(), in.ints_size())));
      break;
    default: return corruption(fmt::format("unknown attribute kind {}", in.kind()));
  }
  return a;
}

}  // namespace

std::string serialize_deterministic(const google::protobuf::MessageLite& message) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream raw(&out);
    google::protobuf::io::CodedOutputStream coded(&raw);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }
  return out;
}

void graph_to_proto(const Graph& graph, proto::Graph* out) {
  out->set_ir_version(kIrFormatVersion);
  for (NodeId id = 0; id < graph.size(); ++id) {
    const Node& n = graph.node(id);
    proto::Node* pn = out->add_nodes();
    pn->set_op(std::string(op_info(n.op).name));
    pn->set_dtype(static_cast<uint32_t>(n.dtype));
    for (int64_t d : n.shape) pn->add_shape(d);
    for (NodeId in : graph.inputs(n)) pn->add_inputs(in);
    for (const AttrValue& a : graph.attrs(n)) attr_to_proto(a, pn->add_attrs());
  }
  for (NodeId o : graph.outputs()) out->add_outputs(o);
  for (const Donation& d : graph.donations()) {
    proto::Donation* pd = out->add_donations();
    pd->set_output(d.output);
    pd->set_param(d.param);
  }
}

Result<Graph> graph_from_proto(const proto::Graph& in, AttrForm form) {
  if (in.ir_version() != kIrFormatVersion) {
    return corruption(fmt::format("stored graph has IR version {}, expected {}", in.ir_version(),
                                  kIrFormatVersion));
  }
  Graph g;
  std::vector<NodeId> inputs;
  std::vector<TensorType> types;
  std::vector<AttrValue> attrs;
  for (int i = 0; i < in.nodes_size(); ++i) {
    const size_t id = static_cast<size_t>(i);
    const proto::Node& pn = in.nodes(i);
    const OpInfo* info = find_op(pn.op());
    if (!info) return bad(id, fmt::format("unknown op '{}'", pn.op()));
    auto dtype = dtype_from(pn.dtype());
    if (!dtype) return bad(id, fmt::format("unknown dtype {}", pn.dtype()));
    if (pn.shape_size() > kMaxRank) return bad(id, "rank too large");
    Shape shape(IntList(std::span<const int64_t>(pn.shape().data(), pn.shape_size())));
    inputs.clear();
    types.clear();
    for (uint32_t src : pn.inputs()) {
      if (src >= id) return bad(id, fmt::format("input {} does not precede the node", src));
      inputs.push_back(src);
      types.push_back(g.node(src).type());
    }
    if (static_cast<size_t>(pn.attrs_size()) != info->attrs.size()) {
      return bad(id, fmt::format("op '{}' has {} attributes, expected {}", pn.op(),
                                 pn.attrs_size(), info->attrs.size()));
    }
    attrs.clear();
    for (const proto::Attr& pa : pn.attrs()) {
      Result<AttrValue> a = attr_from_proto(pa);
      if (!a.is_ok()) return bad(id, a.status().message());
      attrs.push_back(*a);
    }
    TensorType stored{*dtype, shape};
    if (info->kind == OpKind::kParameter) {
      const bool kinds_match =
          std::equal(attrs.begin(), attrs.end(), info->attrs.begin(), info->attrs.end(),
                     [](const AttrValue& a, const AttrSpec& spec) { return a.kind == spec.kind; });
      if (!inputs.empty() || !kinds_match ||
          ParameterAttrs(std::span<const AttrValue>(attrs)).index() !=
              static_cast<int64_t>(g.params().size())) {
        return bad(id, "parameter out of order");
      }
      // The same bound every recorded shape obeys (capture/core/shape.h), so no size arithmetic
      // overflows.
      if (Result<int64_t> n = checked_numel(shape); !n.is_ok()) return bad(id, n.status().message());
      g.add_parameter(stored);
      continue;
    }
    std::vector<AttrValue> normalized = attrs;
    Result<TensorType> inferred = infer_op(info->kind, types, normalized);
    if (!inferred.is_ok()) return bad(id, inferred.status().message());
    if (!(*inferred == stored)) {
      return bad(id, fmt::format("stored type {} but its op computes {}", type_to_string(stored),
                                 type_to_string(*inferred)));
    }
    if (form == AttrForm::kNormalized &&
        !std::equal(attrs.begin(), attrs.end(), normalized.begin(), normalized.end())) {
      return bad(id, "attributes are not in normal form");
    }
    g.add_node(info->kind, inputs, attrs, stored);
  }
  std::vector<NodeId> outputs;
  for (uint32_t o : in.outputs()) {
    if (o >= g.size()) return corruption(fmt::format("stored graph: output {} out of range", o));
    outputs.push_back(o);
  }
  g.set_outputs(std::move(outputs));
  for (const proto::Donation& pd : in.donations()) g.add_donation({pd.output(), pd.param()});
  if (std::string why; !g.check_donations(&why)) return corruption("stored graph: " + why);
  return g;
}

std::string serialize_graph(const Graph& graph) {
  proto::Graph pg;
  graph_to_proto(graph, &pg);
  return serialize_deterministic(pg);
}

Result<Graph> parse_graph(std::string_view bytes) {
  proto::Graph pg;
  if (!pg.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return corruption("stored graph does not parse");
  }
  return graph_from_proto(pg);
}

}  // namespace tracecache::store
