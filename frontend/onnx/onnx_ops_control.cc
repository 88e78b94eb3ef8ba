// ONNX op handlers: control flow (If, Loop, Scan) inlined into the program (the handler
// contract: onnx_lowering.h). If needs its condition known and lowers the branch taken; Loop
// needs its trip count or condition known at every iteration and is unrolled (at most
// kMaxUnrolledIterations); Scan is unrolled over its scan axis. The subgraph's nodes are lowered
// as the model's own, reading outer values by name (ONNX's scoping: names are unique across
// scopes), each iteration binding the body's inputs afresh.
#include "frontend/onnx/onnx_lowering.h"

#include <algorithm>

#include <fmt/format.h>

namespace tracecache::onnx_import::detail {

namespace {

constexpr int64_t kMaxUnrolledIterations = 1024;

const ::onnx::GraphProto& graph_attr(const AttributeProto* a, std::string_view name, const std::string& where) {
  if (!a || !a->has_g()) fail_invalid(fmt::format("{}: the graph attribute '{}' is missing", where, name));
  return a->g();
}

}  // namespace

std::vector<V> Importer::inline_graph(const ::onnx::GraphProto& g, const std::vector<V>& inputs) {
  if (static_cast<int>(inputs.size()) != g.input_size()) {
    fail_invalid(fmt::format("{}: the subgraph '{}' takes {} inputs, {} are given", where_(), g.name(), g.input_size(), inputs.size()));
  }
  if (g.sparse_initializer_size() > 0) fail_unsupported("sparse initializer", where_() + ": a subgraph's sparse initializers");
  for (const TensorProto& t : g.initializer()) initializers_[t.name()] = &t;
  for (int k = 0; k < g.input_size(); ++k) values_[g.input(k).name()] = inputs[static_cast<size_t>(k)];
  // The outer node's state, which lowering the subgraph's nodes replaces.
  const NodeProto* node = node_;
  const int index = node_index_;
  const OpRow* row = row_;
  const std::set<std::string> read = attrs_read_;
  for (int k = 0; k < g.node_size(); ++k) lower_node(index, g.node(k));
  node_ = node;
  node_index_ = index;
  row_ = row;
  attrs_read_ = read;
  std::vector<V> outputs;
  for (const ::onnx::ValueInfoProto& o : g.output()) {
    auto it = values_.find(o.name());
    if (it == values_.end()) fail_invalid(fmt::format("{}: the subgraph output '{}' is computed by no node", where_(), o.name()));
    outputs.push_back(it->second);
  }
  return outputs;
}

void Importer::if_() {
  V cond = in(0);
  const ::onnx::GraphProto& then_g = graph_attr(attr("then_branch"), "then_branch", where_());
  const ::onnx::GraphProto& else_g = graph_attr(attr("else_branch"), "else_branch", where_());
  if (!cond->known) needs_constant("cond");
  if (cond->known->numel() != 1) fail_invalid(where_() + ": cond must hold one value");
  std::vector<V> outs = inline_graph(cond->known->element_as_double(0) != 0 ? then_g : else_g, {});
  if (static_cast<int>(outs.size()) < node_->output_size()) fail_invalid(where_() + ": the branch has too few outputs");
  for (int k = 0; k < node_->output_size(); ++k) out(k, outs[static_cast<size_t>(k)]);
}

// Loop: inputs M (trip count), cond, and the loop-carried values; the body takes (iteration,
// cond, carried...) and gives (cond, carried..., scan outputs...); the node's outputs are the
// final carried values, then each scan output stacked along a new axis 0.
void Importer::loop() {
  const ::onnx::GraphProto& body = graph_attr(attr("body"), "body", where_());
  std::optional<int64_t> trips;
  if (has_in(0)) trips = ints_of(in(0), "M").at(0);
  bool go = true;
  if (has_in(1)) {
    V c = in(1);
    if (!c->known) needs_constant("cond");
    go = c->known->element_as_double(0) != 0;
  }
  std::vector<V> carried;
  for (int k = 2; k < node_->input_size(); ++k) carried.push_back(in(k));
  const size_t n_carried = carried.size();
  const int n_scan = body.output_size() - 1 - static_cast<int>(n_carried);
  if (n_scan < 0) fail_invalid(where_() + ": the body has fewer outputs than loop-carried values");
  std::vector<std::vector<V>> scans(static_cast<size_t>(n_scan));
  for (int64_t it = 0; go && (!trips || it < *trips); ++it) {
    if (it >= kMaxUnrolledIterations) node_unsupported(fmt::format("more than {} iterations (unrolled)", kMaxUnrolledIterations));
    HostBuffer iteration(DType::kI64, Shape{});
    iteration.data<int64_t>()[0] = it;
    HostBuffer cond_in(DType::kBool, Shape{});
    cond_in.data<bool>()[0] = true;
    std::vector<V> inputs = {known(std::move(iteration)), known(std::move(cond_in))};
    inputs.insert(inputs.end(), carried.begin(), carried.end());
    std::vector<V> outs = inline_graph(body, inputs);
    V cond_out = outs[0];
    if (!cond_out->known) node_unsupported("a loop condition computed from data");
    go = cond_out->known->element_as_double(0) != 0;
    for (size_t k = 0; k < n_carried; ++k) carried[k] = outs[1 + k];
    for (int k = 0; k < n_scan; ++k) scans[static_cast<size_t>(k)].push_back(outs[1 + n_carried + static_cast<size_t>(k)]);
  }
  for (size_t k = 0; k < n_carried; ++k) out(static_cast<int>(k), carried[k]);
  for (int k = 0; k < n_scan; ++k) {
    const int at = static_cast<int>(n_carried) + k;
    if (!out_used(at)) continue;
    std::vector<V>& parts = scans[static_cast<size_t>(k)];
    if (parts.empty()) node_unsupported("a scan output of a loop that runs no iteration (its shape is unknown)");
    std::vector<Arg> stacked;
    for (const V& p : parts) {
      std::vector<int64_t> dims = dims_of(p->type.shape);
      dims.insert(dims.begin(), 1);
      stacked.emplace_back(reshape_to(p, dims));
    }
    out(at, stacked.size() == 1 ? stacked[0].v : op(OpKind::kConcat, std::move(stacked), {{"axis", i(0)}}));
  }
}

// Scan (opset 9+): inputs the N state values, then the M scan inputs; the body takes (state...,
// one slice of each scan input...) and gives (state..., K scan output slices...); the node's
// outputs are the final state, then the scan outputs stacked along their axes.
void Importer::scan() {
  const ::onnx::GraphProto& body = graph_attr(attr("body"), "body", where_());
  const int64_t m = attr_int("num_scan_inputs", 0);
  const int n = node_->input_size() - static_cast<int>(m);
  if (m < 1 || n < 0) fail_invalid(where_() + ": num_scan_inputs does not match the inputs");
  const auto get_list = [&](std::string_view name, int64_t count) {
    std::vector<int64_t> v = attr_ints(name).value_or(std::vector<int64_t>(static_cast<size_t>(count), 0));
    if (static_cast<int64_t>(v.size()) != count) fail_invalid(fmt::format("{}: '{}' needs {} entries", where_(), name, count));
    return v;
  };
  const std::vector<int64_t> in_axes = get_list("scan_input_axes", m), in_dirs = get_list("scan_input_directions", m);
  const int k_out = body.output_size() - n;
  if (k_out < 0) fail_invalid(where_() + ": the body has fewer outputs than state values");
  const std::vector<int64_t> out_axes = get_list("scan_output_axes", k_out), out_dirs = get_list("scan_output_directions", k_out);
  std::vector<V> state;
  for (int k = 0; k < n; ++k) state.push_back(in(k));
  std::vector<V> xs;
  std::vector<int64_t> axes;
  int64_t steps = -1;
  for (int64_t k = 0; k < m; ++k) {
    V x = in(n + static_cast<int>(k));
    const int64_t axis = axis_of(in_axes[static_cast<size_t>(k)], x->type.shape.rank(), "scan_input_axes");
    const int64_t len = x->type.shape[static_cast<int>(axis)];
    if (steps >= 0 && len != steps) fail_invalid(where_() + ": the scan inputs differ in length");
    steps = len;
    xs.push_back(x);
    axes.push_back(axis);
  }
  if (steps > kMaxUnrolledIterations) node_unsupported(fmt::format("more than {} iterations (unrolled)", kMaxUnrolledIterations));
  std::vector<std::vector<V>> scans(static_cast<size_t>(k_out));
  for (int64_t t = 0; t < steps; ++t) {
    std::vector<V> inputs = state;
    for (int64_t k = 0; k < m; ++k) {
      const auto u = static_cast<size_t>(k);
      const int64_t at = in_dirs[u] != 0 ? steps - 1 - t : t;
      std::vector<int64_t> dims = dims_of(xs[u]->type.shape);
      dims.erase(dims.begin() + axes[u]);
      inputs.push_back(reshape_to(op(OpKind::kSlice, {xs[u]}, {{"axis", i(axes[u])}, {"start", i(at)}, {"end", i(at + 1)}}), dims));
    }
    std::vector<V> outs = inline_graph(body, inputs);
    for (int k = 0; k < n; ++k) state[static_cast<size_t>(k)] = outs[static_cast<size_t>(k)];
    for (int k = 0; k < k_out; ++k) scans[static_cast<size_t>(k)].push_back(outs[static_cast<size_t>(n + k)]);
  }
  for (int k = 0; k < n; ++k) out(k, state[static_cast<size_t>(k)]);
  for (int k = 0; k < k_out; ++k) {
    if (!out_used(n + k)) continue;
    std::vector<V>& parts = scans[static_cast<size_t>(k)];
    if (parts.empty()) node_unsupported("a scan output of an empty scan (its shape is unknown)");
    if (out_dirs[static_cast<size_t>(k)] != 0) std::reverse(parts.begin(), parts.end());
    const int64_t axis = axis_of(out_axes[static_cast<size_t>(k)], parts[0]->type.shape.rank() + 1, "scan_output_axes");
    std::vector<Arg> stacked;
    for (const V& p : parts) {
      std::vector<int64_t> dims = dims_of(p->type.shape);
      dims.insert(dims.begin() + axis, 1);
      stacked.emplace_back(reshape_to(p, dims));
    }
    out(n + k, stacked.size() == 1 ? stacked[0].v : op(OpKind::kConcat, std::move(stacked), {{"axis", i(axis)}}));
  }
}

}  // namespace tracecache::onnx_import::detail
