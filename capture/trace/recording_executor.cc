#include "capture/trace/recording_executor.h"

#include <fmt/format.h>

namespace tracecache {

Result<std::vector<DataRef>> RecordingExecutor::execute(const CanonicalGraph& graph,
                                                        std::vector<DataRef> params) {
  if (graphs_.size() >= options_.max_graphs) {
    return internal_error(fmt::format("the program ran more than {} graph{}", options_.max_graphs,
                                      options_.max_graphs == 1 ? "" : "s"));
  }
  std::vector<DataRef> outs;
  outs.reserve(graph.graph.outputs().size());
  for (NodeId o : graph.graph.outputs()) {
    const Node& n = graph.graph.node(o);
    outs.push_back(host_data(HostBuffer(n.dtype, n.shape)));
  }
  RecordedGraph& r = graphs_.emplace_back();
  r.graph = graph;
  if (options_.keep_buffers) {
    r.params = std::move(params);
    r.outputs = outs;
  }
  return outs;
}

}  // namespace tracecache
