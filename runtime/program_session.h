// ProgramSession: runs a trace program's steps in one execution mode, for `run` and `bench`.
//
//   eager  each op runs at once on the backend's op runner (capture/trace/eager.h); no trace, no cache
//   lazy   every step is traced, hashed at the barrier and run through the graph cache
//   once   every step is one call of a CompiledFunction (runtime/compiled_function.h) named
//          "<program file name>:step" whose arguments are the step's tensors (parameters and
//          inputs, in declaration order) and, as static scalars, the step's dim values: a
//          step's graph can depend on dims that appear only in attributes (arange(end=N),
//          reshape(shape=[B, -1])), so the dims must be guarded by value, not only through the
//          shapes of the tensors.
//
// A step is split in two so callers can time the second half alone: prepare() makes the step's
// arguments (input generation), run() records or checks guards, executes and materializes the
// outputs.
// Thread-safety: one thread. Ownership: the program, the database (nullable) and the session's
// metrics registry belong to the caller and must outlive the session.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "capture/core/metrics.h"
#include "frontend/program/program.h"
#include "frontend/program/program_runner.h"
#include "runtime/compiled_function.h"
#include "backends/sim/sim_backend.h"
#include "store/sqlite/cache_db.h"

namespace tracecache::cli {

enum class Mode { kEager, kLazy, kOnce };

std::optional<Mode> parse_mode(std::string_view name);  // "eager", "lazy", "once"
std::string_view mode_name(Mode mode);

struct SessionOptions {
  Mode mode = Mode::kLazy;
  // "cpu", "reference" (eager and lazy only), or "sim:PRESET" / "sim:SPEC_FILE" / "sim" (=
  // sim:h100; lazy and once only), see backends/sim/sim_backend.h.
  std::string backend = "cpu";
  store::CacheDb* db = nullptr;       // the disk cache for lazy and once; null: memory only
  bool bake_scalars = false;          // canonicalization (lazy and once)
  bool automatic_dynamic = true;      // once: CompiledFunctionOptions::automatic_dynamic
  Metrics* metrics = nullptr;         // REQUIRED: counters and timers of every part
  int threads = 0;                    // cpu kernels and OpenBLAS: CpuBackendOptions::threads
};

class ProgramSession {
 public:
  // Errors: an unknown backend, once mode on the reference backend, eager mode on sim
  // (kInvalidArgument); a sim device spec that cannot be read or parsed.
  static Result<std::unique_ptr<ProgramSession>> create(const Program& program,
                                                        SessionOptions options);
  ~ProgramSession();

  struct PreparedStep {
    int step = 0;
    std::vector<int64_t> dims;  // one per program.dims entry
    CallArgs call;              // tensors: the step's arguments; scalars: the dims
  };
  // Makes step `step`'s arguments. Errors: as StepArguments::make.
  Result<PreparedStep> prepare(int step);
  // Runs a prepared step; returns its outputs (materialized), in the program's output order.
  // Errors: shape and attribute errors ("FILE:LINE:COL: ..."), execution failures
  // ("FILE: step N: ...").
  Result<std::vector<BufferRef>> run(const PreparedStep& step);

  Mode mode() const { return options_.mode; }
  // Keys of the graphs the session's context executed (lazy mode; none in eager and once).
  const std::vector<GraphKey>& executed_keys() const;
  // The compiled function (once mode), else null.
  const CompiledFunction* function() const { return function_.get(); }
  // Null in eager mode and on the reference backend.
  Runtime* runtime() { return runtime_.get(); }
  // The sim backend, else null.
  SimBackend* sim() { return sim_; }

 private:
  ProgramSession(const Program& program, SessionOptions options);

  const Program& program_;
  SessionOptions options_;
  std::unique_ptr<Backend> backend_;
  SimBackend* sim_ = nullptr;  // backend_, when it is sim
  std::unique_ptr<Runtime> runtime_;
  std::unique_ptr<GraphExecutor> reference_;  // lazy on the reference backend; eager's unused executor
  std::unique_ptr<OpRunner> op_runner_;       // eager
  std::unique_ptr<LazyContext> ctx_;
  // once: where each dim's value comes from (an argument's size; else a guarded scalar).
  std::vector<DimSource> dim_sources_;
  std::unique_ptr<StepArguments> arguments_;
  std::unique_ptr<CompiledFunction> function_;  // once
};

}  // namespace tracecache::cli
