// RecordingExecutor: a GraphExecutor that computes nothing. It records every canonical graph a
// LazyContext hands it and returns zero-filled outputs of the graph's output types, so a program
// can be traced without running it (`tracecache show`, the zoo's capture of a model's forward).
//
// What is kept per graph: the canonical graph, and, when RecordingOptions::keep_buffers is set,
// the parameter buffers it was given and the output buffers it returned (so a caller can tell
// which of its tensors became which parameter or output). Without it nothing but the graphs is
// held, and memory grows with the graphs only.
// Errors: execute() returns kInternal once `max_graphs` graphs are recorded (a capture that
// expects one graph learns at once that the program ran more).
// Thread-safety: one thread at a time.
// Ownership: the recorder owns copies of the graphs. With keep_buffers it also holds a handle
// (a shared DataRef) on every parameter and output of every graph, so their data lives as long
// as the recorder: a parameter the graph donates, whose only handle the context gave up
// (GraphExecutor::execute), is kept, never reused for an output, so recording blocks donation.
// Without keep_buffers the parameter handles are dropped when execute() returns.
#pragma once

#include <cstddef>
#include <limits>
#include <vector>

#include "capture/trace/tensor.h"

namespace tracecache {

struct RecordingOptions {
  bool keep_buffers = false;
  size_t max_graphs = std::numeric_limits<size_t>::max();
};

struct RecordedGraph {
  CanonicalGraph graph;
  std::vector<DataRef> params;   // keep_buffers only
  std::vector<DataRef> outputs;  // keep_buffers only: the zero-filled host data returned
};

class RecordingExecutor final : public GraphExecutor {
 public:
  explicit RecordingExecutor(RecordingOptions options = {}) : options_(options) {}

  Result<std::vector<DataRef>> execute(const CanonicalGraph& graph,
                                       std::vector<DataRef> params) override;

  // Every graph executed so far, in order.
  const std::vector<RecordedGraph>& graphs() const { return graphs_; }

 private:
  RecordingOptions options_;
  std::vector<RecordedGraph> graphs_;
};

}  // namespace tracecache
