// Test helpers: an executor that records the canonical graphs a LazyContext hands it and
// computes them, and the graphs of the fixture programs.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "capture/reference/reference.h"
#include "capture/trace/recording_executor.h"
#include "capture/trace/tensor.h"
#include "frontend/program/program.h"
#include "frontend/program/program_runner.h"

namespace tracecache::testing {

// Records every canonical graph like RecordingExecutor (capture/trace/recording_executor.h), but
// computes: each graph runs on the reference evaluator, so a test can read the step's values
// (RecordingExecutor returns zeros; it cannot compute, capture/trace sits below
// capture/reference). Use RecordingExecutor where the values are not read.
class ComputingRecorder final : public GraphExecutor {
 public:
  Result<std::vector<DataRef>> execute(const CanonicalGraph& g, std::vector<DataRef> params) override {
    graphs.push_back(g);
    return evaluate_reference(g.graph, std::span<const DataRef>(params));
  }
  std::vector<CanonicalGraph> graphs;
};

inline std::string fixture_path(const std::string& name) {
  return std::string(TRACECACHE_SOURCE_DIR) + "/fixtures/programs/" + name;
}

inline std::vector<std::string> all_fixture_programs() {
  return {"mlp.trace", "attention.trace", "lr_schedule.trace", "matmul_varying_batch.trace",
          "ops_tour.trace", "embedding.trace", "convnet.trace", "random_ops.trace"};
}

// The canonical graph of every step of fixture program `name` (traced, not computed).
inline std::vector<CanonicalGraph> fixture_graphs(const std::string& name, int steps = -1) {
  Result<Program> p = load_program(fixture_path(name));
  if (!p.is_ok()) throw Error(p.status());
  RecordingExecutor exec;
  LazyContext ctx(&exec);
  Result<std::vector<StepResult>> r = run_program(*p, ctx, steps);
  if (!r.is_ok()) throw Error(r.status());
  std::vector<CanonicalGraph> graphs;
  for (const RecordedGraph& g : exec.graphs()) graphs.push_back(g.graph);
  return graphs;
}

}  // namespace tracecache::testing
