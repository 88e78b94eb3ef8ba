// ProgramSession: runs a trace program's steps (frontend/program/program.h) in one execution
// mode on a Session (replay/engine/session.h), for `run` and `bench`. The Session is the generic part
// (backend, runtime, context, mode); this adds what a trace program's step is:
//
//   eager, lazy  a step's ops are recorded on the session's context; lazy mode executes them at
//                the step's mark_step
//   once         every step is one call of a CompiledFunction (replay/engine/compiled_function.h) named
//                "<program file name>:step" whose arguments are the step's tensors (parameters
//                and inputs, in declaration order) and, as static scalars, the step's dim values:
//                a step's graph can depend on dims that appear only in attributes
//                (arange(end=N), reshape(shape=[B, -1])), so the dims must be guarded by value,
//                not only through the shapes of the tensors. A param that the program updates
//                (`update w = w2`) is returned by the step after its outputs and becomes the
//                argument of the next call (StepArguments::set_param); the function names it
//                as an update of the param (CompiledFunctionOptions::updates), so its graph
//                donates the param's storage. run() takes each updated param from the step's
//                arguments (StepArguments::take_param) and gives the call its only handle, so a
//                replay writes the new value in place: one copy of every updated param, as in
//                lazy mode (LazyContext::assign). The first call (the trace) and a retrace
//                write fresh buffers (the trace holds the params while it runs).
//
// A step is split in two so callers can time the second half alone: prepare() makes the step's
// arguments (input generation), run() records or checks guards, executes and materializes the
// outputs.
// Errors: every method returns them as a Status (none is thrown): create() those of
// Session::create; prepare() a bad dim reference or an npy file that cannot be read or does not
// match its declaration (StepArguments::make); run() shape and attribute errors
// ("FILE:LINE:COL: ...") and execution failures ("FILE: step N: ...", caught from the context or
// returned by the compiled function).
// Thread-safety: one thread. Ownership: the program, the database (nullable) and the session's
// metrics registry belong to the caller and must outlive the session.
#pragma once

#include <memory>
#include <vector>

#include "frontend/program/program.h"
#include "frontend/program/program_runner.h"
#include "replay/engine/compiled_function.h"
#include "replay/engine/session.h"

namespace tracecache {

struct ProgramSessionOptions {
  SessionOptions session;
  bool automatic_dynamic = true;  // once: CompiledFunctionOptions::automatic_dynamic
};

class ProgramSession {
 public:
  // Errors: as Session::create.
  static Result<std::unique_ptr<ProgramSession>> create(const Program& program,
                                                        ProgramSessionOptions options);
  ~ProgramSession();

  struct PreparedStep {
    int step = 0;
    std::vector<int64_t> dims;  // one per program.dims entry
    // tensors: the step's arguments; scalars: the dims. In once mode the updated params are
    // left undefined here: run() takes them from the session's arguments, so that the call
    // holds their only handle (donation).
    CallArgs call;
  };
  // Makes step `step`'s arguments. Errors: as StepArguments::make.
  Result<PreparedStep> prepare(int step);
  // Runs a prepared step; returns its outputs (materialized), in the program's output order.
  // Errors: shape and attribute errors ("FILE:LINE:COL: ..."), execution failures
  // ("FILE: step N: ..."). In once mode an updated param given to a run that failed while
  // updating it in place is gone: later steps fail saying so.
  Result<std::vector<BufferRef>> run(const PreparedStep& step);

  Session& session() { return *session_; }
  SessionMode mode() const { return session_->mode(); }
  // Keys of the graphs the session's context executed (lazy mode; none in eager and once).
  const std::vector<GraphKey>& executed_keys() const { return session_->executed_keys(); }
  // The compiled function (once mode), else null.
  const CompiledFunction* function() const { return function_.get(); }
  // Null in eager mode and on the reference backend.
  Runtime* runtime() { return session_->runtime(); }
  // Null in eager mode and on the reference backend (Session::backend).
  Backend* backend() { return session_->backend(); }

 private:
  ProgramSession(const Program& program, std::unique_ptr<Session> session);

  const Program& program_;
  std::unique_ptr<Session> session_;
  // once: where each dim's value comes from (an argument's size; else a guarded scalar).
  std::vector<DimSource> dim_sources_;
  std::unique_ptr<StepArguments> arguments_;
  std::unique_ptr<CompiledFunction> function_;  // once
  std::vector<size_t> updated_params_;  // once: the updated params' indices, in program.updates order
};

}  // namespace tracecache
