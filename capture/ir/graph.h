// Graph: the IR. A DAG of op nodes stored in one arena, in topological order (a node's inputs
// always have smaller ids than the node).
//
// The same type serves the tracer's growing op stream and the canonical graph it is reduced to
// at a barrier (canonical.h). Nodes refer to their inputs and attributes through offsets into
// pooled arrays, so appending a node allocates nothing once the pools have grown.
// Parameters (graph inputs) are nodes of OpKind::kParameter, listed in `params()` in parameter
// order; `outputs()` lists the nodes the graph returns, in order (duplicates allowed).
// `donations()` lists outputs that may reuse a parameter's storage (an in-place update such as
// an optimizer's `param = param - lr * grad`): output `output` may be written into parameter
// `param`'s storage when the caller gives the parameter up. Like aliasing, donation is part of
// the canonical form and the key (hash.h); a graph without donations encodes as before.
// Thread-compatible.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "capture/ops/attrs.h"
#include "capture/ops/ops.h"

namespace tracecache {

using NodeId = uint32_t;

struct Node {
  OpKind op;
  DType dtype;
  uint32_t first_input;
  uint32_t num_inputs;
  uint32_t first_attr;  // op_info(op).attrs.size() values start here
  Shape shape;

  TensorType type() const { return {dtype, shape}; }
};

// Output `output` may be written into the storage of parameter `param` (indices into outputs()
// and params()). Valid when both exist and have the same type, the output node is not a
// parameter, and no output or parameter is donated twice (Graph::check_donations).
struct Donation {
  uint32_t output = 0;
  uint32_t param = 0;
  friend bool operator==(const Donation&, const Donation&) = default;
};

class Graph {
 public:
  // Appends a node. REQUIRES: every input < size(); attrs.size() equals the op's declared
  // attribute count and `attrs` are normalized (see infer_op); `type` is the inferred type.
  NodeId add_node(OpKind op, std::span<const NodeId> inputs, std::span<const AttrValue> attrs,
                  const TensorType& type);
  // Appends a parameter node whose index is the current number of parameters.
  NodeId add_parameter(const TensorType& type);
  void add_output(NodeId id) { outputs_.push_back(id); }
  void set_outputs(std::vector<NodeId> outputs) { outputs_ = std::move(outputs); }
  // Appends a donation. REQUIRES: it keeps the donations valid (see Donation).
  void add_donation(Donation d) { donations_.push_back(d); }
  // Removes everything, keeping the pools' capacity.
  void clear();

  size_t size() const { return nodes_.size(); }
  bool empty() const { return nodes_.empty(); }
  const Node& node(NodeId id) const { return nodes_[id]; }
  std::span<const NodeId> inputs(const Node& n) const {
    return {input_pool_.data() + n.first_input, n.num_inputs};
  }
  std::span<const AttrValue> attrs(const Node& n) const {
    return {attr_pool_.data() + n.first_attr, op_info(n.op).attrs.size()};
  }
  // Attribute `name` of node `n`. REQUIRES: the op declares it.
  const AttrValue& attr(const Node& n, std::string_view name) const;
  std::span<const NodeId> params() const { return params_; }
  std::span<const NodeId> outputs() const { return outputs_; }
  std::span<const Donation> donations() const { return donations_; }
  // The parameter output `output` is donated to, or -1.
  int64_t donated_param(uint32_t output) const;
  // False, with `why`, if the donations are not valid (see Donation); for decoded graphs.
  bool check_donations(std::string* why) const;

  // A readable listing, one node a line in trace-program syntax:
  //   params: %0 : f32[2, 3]
  //   %2 : f32[2, 3] = add(%0, %1)
  //   outputs: %2
  //   donates: output 0 -> param 0        (only when there are donations)
  std::string to_text() const;

 private:
  std::vector<Node> nodes_;
  std::vector<NodeId> input_pool_;
  std::vector<AttrValue> attr_pool_;
  std::vector<NodeId> params_;
  std::vector<NodeId> outputs_;
  std::vector<Donation> donations_;
};

}  // namespace tracecache
