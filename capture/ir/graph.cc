#include "capture/ir/graph.h"

#include <fmt/format.h>

#include <cassert>

namespace tracecache {

NodeId Graph::add_node(OpKind op, std::span<const NodeId> inputs, std::span<const AttrValue> attrs,
                       const TensorType& type) {
  assert(attrs.size() == op_info(op).attrs.size());
  Node n;
  n.op = op;
  n.dtype = type.dtype;
  n.shape = type.shape;
  n.first_input = static_cast<uint32_t>(input_pool_.size());
  n.num_inputs = static_cast<uint32_t>(inputs.size());
  n.first_attr = static_cast<uint32_t>(attr_pool_.size());
  for (NodeId in : inputs) {
    assert(in < nodes_.size());
    input_pool_.push_back(in);
  }
  attr_pool_.insert(attr_pool_.end(), attrs.begin(), attrs.end());
  nodes_.push_back(n);
  return static_cast<NodeId>(nodes_.size() - 1);
}

NodeId Graph::add_parameter(const TensorType& type) {
  AttrValue index = AttrValue::of_int(static_cast<int64_t>(params_.size()));
  NodeId id = add_node(OpKind::kParameter, {}, std::span<const AttrValue>(&index, 1), type);
  params_.push_back(id);
  return id;
}

void Graph::clear() {
  nodes_.clear();
  input_pool_.clear();
  attr_pool_.clear();
  params_.clear();
  outputs_.clear();
  donations_.clear();
}

const AttrValue& Graph::attr(const Node& n, std::string_view name) const {
  int i = op_info(n.op).attr_index(name);
  assert(i >= 0 && "op does not declare this attribute");
  return attr_pool_[n.first_attr + static_cast<uint32_t>(i)];
}

std::string Graph::to_text() const {
  std::string out;
  for (NodeId p : params_) {
    out += fmt::format("param %{} : {}\n", p, type_to_string(nodes_[p].type()));
  }
  for (NodeId id = 0; id < nodes_.size(); ++id) {
    const Node& n = nodes_[id];
    if (n.op == OpKind::kParameter) continue;
    const OpInfo& info = op_info(n.op);
    std::vector<std::string> args;
    for (NodeId in : inputs(n)) args.push_back(fmt::format("%{}", in));
    auto a = attrs(n);
    for (size_t i = 0; i < a.size(); ++i) {
      args.push_back(fmt::format("{}={}", info.attrs[i].name, a[i].to_string()));
    }
    out += fmt::format("%{} : {} = {}({})\n", id, type_to_string(n.type()), info.name,
                       fmt::join(args, ", "));
  }
  std::vector<std::string> outs;
  for (NodeId o : outputs_) outs.push_back(fmt::format("%{}", o));
  out += fmt::format("outputs: {}\n", fmt::join(outs, ", "));
  for (const Donation& d : donations_) out += fmt::format("donates: output {} -> param {}\n", d.output, d.param);
  return out;
}

int64_t Graph::donated_param(uint32_t output) const {
  for (const Donation& d : donations_) {
    if (d.output == output) return d.param;
  }
  return -1;
}

bool Graph::check_donations(std::string* why) const {
  std::vector<bool> output_taken(outputs_.size(), false), param_taken(params_.size(), false);
  for (const Donation& d : donations_) {
    if (d.output >= outputs_.size() || d.param >= params_.size()) {
      *why = fmt::format("donation output {} -> param {} is out of range", d.output, d.param);
      return false;
    }
    const Node& out = nodes_[outputs_[d.output]];
    const Node& param = nodes_[params_[d.param]];
    if (out.op == OpKind::kParameter || out.dtype != param.dtype || !(out.shape == param.shape)) {
      *why = fmt::format("output {} cannot be donated to param {}", d.output, d.param);
      return false;
    }
    if (output_taken[d.output] || param_taken[d.param]) {
      *why = fmt::format("output {} or param {} is donated twice", d.output, d.param);
      return false;
    }
    output_taken[d.output] = param_taken[d.param] = true;
  }
  return true;
}

}  // namespace tracecache
