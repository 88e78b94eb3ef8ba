#include "replay/engine/session.h"

#include <fmt/format.h>

#include <cassert>

#include "capture/reference/reference.h"
#include "replay/backends/timeline.h"

namespace tracecache {

std::optional<SessionMode> parse_mode(std::string_view name) {
  if (name == "eager") return SessionMode::kEager;
  if (name == "lazy") return SessionMode::kLazy;
  if (name == "once") return SessionMode::kOnce;
  return std::nullopt;
}

std::string_view mode_name(SessionMode mode) {
  switch (mode) {
    case SessionMode::kEager: return "eager";
    case SessionMode::kLazy: return "lazy";
    case SessionMode::kOnce: return "once";
  }
  return "?";
}

Session::~Session() {
  if (own_timeline_) options_.metrics->set_span_observer(nullptr);
}

Result<std::unique_ptr<Session>> Session::create(SessionOptions options) {
  assert(options.metrics != nullptr);
  const BackendRegistry& registry = options.registry ? *options.registry : default_backend_registry();
  const bool reference = options.backend == kReferenceBackend;
  const BackendEntry* entry = reference ? nullptr : registry.find(parse_backend_spec(options.backend).name);
  if (!reference && !entry) {
    const std::string also[] = {std::string(kReferenceBackend)};
    return registry.unknown_backend(options.backend, also);
  }
  if (reference && options.mode == SessionMode::kOnce) {
    return invalid_argument(
        "--mode once runs compiled executables: it needs --backend cpu or sim, not reference");
  }
  if (entry && !entry->make_op_runner && options.mode == SessionMode::kEager) {
    return invalid_argument(fmt::format(
        "the {} backend runs compiled graphs: use --mode lazy or once (eager runs ops on the host)",
        entry->name));
  }
  std::unique_ptr<Session> s(new Session(options));
  LazyOptions lazy;
  lazy.canonicalize.bake_scalars = options.bake_scalars;
  lazy.metrics = options.metrics;
  GraphExecutor* executor = nullptr;
  if (entry && options.mode != SessionMode::kEager) {
    Result<std::unique_ptr<Backend>> backend = registry.create(options.backend, options.backend_options);
    if (!backend.is_ok()) return backend.status();
    s->backend_ = std::move(*backend);
    s->own_timeline_ = s->backend_->own_timeline();
    if (s->own_timeline_) options.metrics->set_span_observer(s->own_timeline_);
    RuntimeOptions runtime_options;
    runtime_options.remote = options.remote;
    runtime_options.program = options.program;
    runtime_options.function = options.function;
    runtime_options.record_outcomes = options.record_outcomes;
    s->runtime_ = std::make_unique<Runtime>(s->backend_.get(), options.db, options.metrics, runtime_options);
    executor = s->runtime_.get();
  } else {
    s->reference_ = std::make_unique<ReferenceExecutor>();
    executor = s->reference_.get();
  }
  if (options.mode == SessionMode::kEager) {
    if (entry) {
      Result<std::unique_ptr<OpRunner>> runner = entry->make_op_runner(
          parse_backend_spec(options.backend).options, options.backend_options, options.metrics);
      if (!runner.is_ok()) return runner.status();
      s->op_runner_ = std::move(*runner);
    } else {
      s->op_runner_ = std::make_unique<ReferenceOpRunner>();
    }
    lazy.eager = s->op_runner_.get();
  }
  s->ctx_ = std::make_unique<LazyContext>(executor, lazy);
  return s;
}

}  // namespace tracecache
