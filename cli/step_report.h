// StepReport: what `run` says about each step's cache decisions (issue 14, PyTorch/XLA's
// PT_XLA_DEBUG): with -v (or TRACECACHE_VERBOSE=1, read in main), one line per step and graph on
// stderr as each step ends: a hit and the tier that served it, or a miss with its reason, the
// compile time and what differs from the closest cached graph (replay/engine/closest_graph.h); in once
// mode, the guard entry that served the step or the recompile's reason. The same, structured, as
// "steps_detail" in `run --json`. After the run, a warning when lazy mode kept compiling (N
// distinct graphs in M steps), naming what varies between them.
// Thread-safety: one thread. Ownership: keeps copies of what it reports; the session it reads
// after each step belongs to the caller.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "replay/audit/json.h"
#include "replay/engine/program_session.h"

namespace tracecache::cli {

using audit::JsonWriter;

class StepReport {
 public:
  // verbose: print each step's lines as it ends; keep: keep the steps for write_json().
  StepReport(bool verbose, bool keep) : verbose_(verbose), keep_(keep) {}

  // Before step `step` runs on `session` (once mode: notes the function's counters).
  void before_step(ProgramSession& session);
  // After step `step` ran: takes the runtime's outcomes (RuntimeOptions::record_outcomes) and
  // what the compiled function did.
  void after_step(int step, ProgramSession& session);
  // The lazy-mode warning (stderr) when `steps` steps compiled at least kKeepsCompiling graphs.
  void finish(SessionMode mode, size_t steps) const;
  // "steps_detail": one object per step (see docs/cache.md, `run -v`).
  void write_json(JsonWriter& j) const;

  static constexpr size_t kKeepsCompiling = 3;

 private:
  struct OnceStep {
    bool traced = false;
    int entry = -1;          // the entry that served the step (-1: traced, or lazy fallback)
    std::string recompile;   // the recompile's reason ("" if none)
  };
  struct Step {
    int step = 0;
    std::vector<GraphOutcome> graphs;
    std::optional<OnceStep> once;
  };
  void print(const Step& s) const;

  bool verbose_;
  bool keep_;
  std::vector<Step> steps_;  // keep_
  // once: the function's counters before the step.
  int64_t traces_before_ = 0;
  size_t recompiles_before_ = 0;
  std::vector<int64_t> hits_before_;
  // Compiled misses, and what varied in them ("input 0 shape (mlp.trace:8 input x)"), first few.
  size_t compiled_ = 0;
  std::vector<std::string> varies_;
};

// One graph difference as a JSON object: kind, node_a, node_b (when present), op, what, a, b,
// source_a, source_b (shared by `run --json` and `diff --json`).
void write_difference(JsonWriter& j, const NodeDifference& d);

}  // namespace tracecache::cli
