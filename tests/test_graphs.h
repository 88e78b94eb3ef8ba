// Test helpers: executors that record the canonical graphs a LazyContext hands them, and the
// graphs of the fixture programs.
#pragma once

#include <string>
#include <vector>

#include "frontend/program/program.h"
#include "frontend/program/program_runner.h"
#include "capture/reference/reference.h"
#include "capture/trace/tensor.h"

namespace tracecache::testing {

// Records every canonical graph; runs it on the reference evaluator, or (compute = false)
// returns zero-filled outputs of the right types without computing anything.
class RecordingExecutor final : public GraphExecutor {
 public:
  explicit RecordingExecutor(bool compute = true) : compute_(compute) {}
  Result<std::vector<DataRef>> execute(const CanonicalGraph& g, std::vector<DataRef> params) override {
    graphs.push_back(g);
    if (compute_) return evaluate_reference(g.graph, std::span<const DataRef>(params));
    std::vector<DataRef> outs;
    for (NodeId o : g.graph.outputs()) {
      outs.push_back(host_data(HostBuffer(g.graph.node(o).dtype, g.graph.node(o).shape)));
    }
    return outs;
  }
  std::vector<CanonicalGraph> graphs;

 private:
  bool compute_;
};

inline std::string fixture_path(const std::string& name) {
  return std::string(TRACECACHE_SOURCE_DIR) + "/fixtures/programs/" + name;
}

inline std::vector<std::string> all_fixture_programs() {
  return {"mlp.trace", "attention.trace", "lr_schedule.trace", "matmul_varying_batch.trace",
          "ops_tour.trace", "embedding.trace", "convnet.trace"};
}

// The canonical graph of every step of fixture program `name` (traced, not computed).
inline std::vector<CanonicalGraph> fixture_graphs(const std::string& name, int steps = -1) {
  Result<Program> p = load_program(fixture_path(name));
  if (!p.is_ok()) throw Error(p.status());
  RecordingExecutor exec(/*compute=*/false);
  LazyContext ctx(&exec);
  Result<std::vector<StepResult>> r = run_program(*p, ctx, steps);
  if (!r.is_ok()) throw Error(r.status());
  return exec.graphs;
}

}  // namespace tracecache::testing
