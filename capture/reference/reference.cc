#include "capture/reference/reference.h"

#include <fmt/format.h>

#include "capture/ops/reference_kernels.h"

namespace tracecache {

void evaluate_op(OpKind op, std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  bool half = is_half_float(out.dtype());
  for (const HostBuffer* b : in) half = half || is_half_float(b->dtype());
  if (!half) {
    op_info(op).reference(in, attrs, out);
    return;
  }
  std::vector<HostBuffer> wide;
  wide.reserve(in.size());  // no reallocation: the pointers below stay valid
  std::vector<const HostBuffer*> ptrs;
  for (const HostBuffer* b : in) {
    if (!is_half_float(b->dtype())) {
      ptrs.push_back(b);
      continue;
    }
    wide.emplace_back(DType::kF32, b->shape());
    ref::convert_through_float(*b, wide.back());
    ptrs.push_back(&wide.back());
  }
  if (!is_half_float(out.dtype())) {
    op_info(op).reference(ptrs, attrs, out);
    return;
  }
  HostBuffer result(DType::kF32, out.shape());
  op_info(op).reference(ptrs, attrs, result);
  ref::convert_through_float(result, out);
}

Result<std::vector<BufferRef>> evaluate_reference(const Graph& graph,
                                                  std::span<const BufferRef> params) {
  if (params.size() != graph.params().size()) {
    return invalid_argument(fmt::format("graph has {} parameters, {} given",
                                        graph.params().size(), params.size()));
  }
  std::vector<BufferRef> values(graph.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const Node& p = graph.node(graph.params()[i]);
    if (!params[i] || params[i]->dtype() != p.dtype || !(params[i]->shape() == p.shape)) {
      return invalid_argument(fmt::format(
          "parameter {} must be {}, got {}", i, type_to_string(p.type()),
          params[i] ? type_to_string({params[i]->dtype(), params[i]->shape()}) : "nothing"));
    }
    values[graph.params()[i]] = params[i];
  }

  // Free each intermediate after its last reader; outputs are kept.
  std::vector<NodeId> last_use(graph.size(), 0);
  std::vector<bool> is_output(graph.size(), false);
  for (NodeId id = 0; id < graph.size(); ++id) {
    for (NodeId in : graph.inputs(graph.node(id))) last_use[in] = id;
  }
  for (NodeId o : graph.outputs()) is_output[o] = true;

  std::vector<const HostBuffer*> ins;
  for (NodeId id = 0; id < graph.size(); ++id) {
    const Node& n = graph.node(id);
    if (n.op == OpKind::kParameter) continue;
    ins.clear();
    for (NodeId in : graph.inputs(n)) ins.push_back(values[in].get());
    HostBuffer out(n.dtype, n.shape);
    evaluate_op(n.op, ins, graph.attrs(n), out);
    values[id] = std::make_shared<const HostBuffer>(std::move(out));
    for (NodeId in : graph.inputs(n)) {
      if (last_use[in] == id && !is_output[in]) values[in].reset();
    }
  }
  std::vector<BufferRef> outputs;
  outputs.reserve(graph.outputs().size());
  for (NodeId o : graph.outputs()) outputs.push_back(values[o]);
  return outputs;
}

Result<std::vector<DataRef>> evaluate_reference(const Graph& graph, std::span<const DataRef> params) {
  std::vector<BufferRef> host;
  host.reserve(params.size());
  for (const DataRef& p : params) {
    if (!p) {
      host.push_back(nullptr);
      continue;
    }
    Result<BufferRef> b = p->read();
    if (!b.is_ok()) return b.status();
    host.push_back(std::move(b).value());
  }
  Result<std::vector<BufferRef>> outs = evaluate_reference(graph, std::span<const BufferRef>(host));
  if (!outs.is_ok()) return outs.status();
  std::vector<DataRef> data;
  data.reserve(outs->size());
  for (BufferRef& b : *outs) data.push_back(host_data(std::move(b)));
  return data;
}

Result<BufferRef> ReferenceOpRunner::run_op(OpKind op, std::span<const BufferRef> inputs,
                                            std::span<const AttrValue> attrs,
                                            const TensorType& out) {
  if (op == OpKind::kParameter) {
    return invalid_argument("eager mode: 'parameter' is not an op that runs");
  }
  std::vector<const HostBuffer*> ins;
  ins.reserve(inputs.size());
  for (const BufferRef& b : inputs) ins.push_back(b.get());
  HostBuffer result(out.dtype, out.shape);
  evaluate_op(op, ins, attrs, result);
  return BufferRef(std::make_shared<const HostBuffer>(std::move(result)));
}

}  // namespace tracecache
