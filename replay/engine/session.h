// Session: the generic half of running a program in one execution mode: a backend made by name
// through the registry (replay/backends/registry/registry.h), the Runtime over it with the disk cache, and the
// LazyContext that records ops. Program-specific drivers (replay/engine/program_session.h for trace
// programs; python/py_session.h for the Python package) build on it and add what their steps are.
//
//   eager  each op runs at once on the backend's op runner (capture/trace/eager.h): no trace, no
//          cache, no Runtime. Only backends with an op runner (cpu) and "reference".
//   lazy   ops are traced, hashed at the barrier (mark_step) and run through the Runtime's graph
//          cache; on "reference" through the uncached reference evaluator instead.
//   once   like lazy, plus the driver calls CompiledFunctions (replay/engine/compiled_function.h) on
//          runtime(); needs a compiling backend, never "reference".
//
// "reference" is the session's own pseudo-backend, not a registered one: the reference
// evaluator (eager: its op runner; lazy: its graph executor), the oracle the backends are
// compared with.
// Errors: create() returns them as a Status: kInvalidArgument for a backend or mode that cannot
// be used (an unknown backend, once on "reference", eager on a backend without an op runner),
// and the backend's own errors when making it. After that nothing returns a Status: the
// context throws Error (capture/trace/tensor.h) for an op on incompatible tensors and for an
// execution failure, at mark_step (eager: at the op). A cache that cannot be read or written only costs caching
// (the Runtime records it and warns, invariant 6); it never reaches the driver as an error.
// Thread-safety: one thread. Ownership: the database and the remote client (nullable), the
// metrics registry and the backend registry belong to the caller and must outlive the session.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "replay/backends/registry/registry.h"
#include "capture/core/metrics.h"
#include "capture/trace/tensor.h"
#include "replay/engine/runtime.h"
#include "store/sqlite/cache_db.h"

namespace tracecache {

enum class SessionMode { kEager, kLazy, kOnce };

std::optional<SessionMode> parse_mode(std::string_view name);  // "eager", "lazy", "once"
std::string_view mode_name(SessionMode mode);

// The pseudo-backend of the reference evaluator.
inline constexpr std::string_view kReferenceBackend = "reference";

struct SessionOptions {
  SessionMode mode = SessionMode::kLazy;
  // A registry spec ("cpu", "sim", "sim:PRESET", "sim:SPEC_FILE", ...) or "reference".
  std::string backend = "cpu";
  BackendOptions backend_options;     // threads
  store::CacheDb* db = nullptr;       // the disk cache for lazy and once; null: memory only
  store::RedisClient* remote = nullptr;  // the remote tier after the disk (runtime.h); null: none
  bool bake_scalars = false;          // canonicalization (lazy and once)
  Metrics* metrics = nullptr;         // REQUIRED: counters and timers of every part
  const BackendRegistry* registry = nullptr;  // null: default_backend_registry()
  // The scope of the runtime's events and stored graph sources (RuntimeOptions::program,
  // function): the program or model that runs, and the compiled function (once mode).
  std::string program{};
  std::string function{};
  bool record_outcomes = false;       // RuntimeOptions::record_outcomes (per-step reports)
};

class Session {
 public:
  // Errors: an unknown backend (kInvalidArgument, listing the registered ones and "reference"),
  // once mode on "reference", eager mode on a backend without an op runner (kInvalidArgument);
  // the backend's own errors (a sim device spec that cannot be read or parsed).
  static Result<std::unique_ptr<Session>> create(SessionOptions options);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const SessionOptions& options() const { return options_; }
  SessionMode mode() const { return options_.mode; }
  // Where the driver records its ops and calls mark_step.
  LazyContext& context() { return *ctx_; }
  // Keys of the graphs the context executed (lazy mode; none in eager mode).
  const std::vector<GraphKey>& executed_keys() const { return ctx_->executed_keys(); }
  // Null in eager mode and on "reference".
  Runtime* runtime() { return runtime_.get(); }
  // Null in eager mode and on "reference". Its capability queries (backend.h) say what it can
  // record and report (a timeline, a simulated clock, device memory).
  Backend* backend() { return backend_.get(); }

 private:
  explicit Session(SessionOptions options) : options_(std::move(options)) {}

  SessionOptions options_;
  std::unique_ptr<Backend> backend_;
  // The backend's own timeline (a simulated clock's), which observes the metrics' spans while
  // this session lives.
  Timeline* own_timeline_ = nullptr;
  std::unique_ptr<Runtime> runtime_;
  std::unique_ptr<GraphExecutor> reference_;  // lazy on "reference"; eager's unused executor
  std::unique_ptr<OpRunner> op_runner_;       // eager
  std::unique_ptr<LazyContext> ctx_;
};

}  // namespace tracecache
