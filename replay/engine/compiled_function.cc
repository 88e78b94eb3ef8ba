#include "replay/engine/compiled_function.h"

#include "replay/engine/compiled_function_impl.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <optional>
#include <unordered_set>

#include "capture/ir/trace_template.h"
#include "replay/guards/guard_entry.h"
#include "replay/guards/guard_entry_codec.h"
#include "replay/guards/shape_specialization.h"

namespace tracecache {

namespace {

// A call's outputs as materialized tensors of `ctx`.
Result<std::vector<Tensor>> as_tensors(LazyContext& ctx, Result<std::vector<DataRef>> bufs) {
  if (!bufs.is_ok()) return bufs.status();
  std::vector<Tensor> out;
  out.reserve(bufs->size());
  for (DataRef& b : *bufs) out.push_back(ctx.from_data(std::move(b)));
  return out;
}

}  // namespace

double TraceArgs::scalar(size_t i) const {
  if (scalar_tensors_.at(i).defined()) {
    throw Error(invalid_argument(fmt::format(
        "scalar argument {} is declared dynamic: read it with scalar_tensor({})", i, i)));
  }
  return scalars_.at(i);
}

const Tensor& TraceArgs::scalar_tensor(size_t i) const {
  if (!scalar_tensors_.at(i).defined()) {
    throw Error(invalid_argument(fmt::format(
        "scalar argument {} is static: read it with scalar({}), or declare it dynamic", i, i)));
  }
  return scalar_tensors_[i];
}

std::vector<Tensor> TraceArgs::host_op(std::string payload, std::span<const Tensor> inputs,
                                       std::string description) const {
  if (!host_op_) throw Error(invalid_argument("host_op: only a traced function's arguments can run a graph break"));
  return host_op_(std::move(payload), inputs, std::move(description));
}
Result<std::vector<DataRef>> CompiledFunction::Impl::call(const CallArgs& args) {
  ScopedRuntime scope(*this);
  last_entry = -1;
  unkept_note.clear();
  if (stats.fell_back_to_lazy) return trace(args, /*keep=*/false);
  LookupMisses misses;
  if (std::optional<std::vector<DataRef>> out = look_up_and_replay(args, misses)) return std::move(*out);
  if (lost) {
    Status why = std::move(*lost);
    lost.reset();
    return why;
  }
  if (entries.empty()) {  // the first call (or every entry was dropped): trace, no recompile
    return trace_new_entry(args, dims_to_make_dynamic(args, options.dynamic_dims, false, {}, nullptr), "");
  }
  // No entry holds: a recompile, explained by the closest entry; past the limit, fall back.
  Closest closest = closest_entry(args);
  std::string reason = recompile_reason(closest, misses);
  if (static_cast<int>(entries.size()) >= options.recompile_limit) {
    record_recompile(std::move(reason));
    return fall_back(args);
  }
  std::vector<DynamicDim> dynamic =
      dims_to_make_dynamic(args, options.dynamic_dims, options.automatic_dynamic, closest.failed,
                           entries[closest.index].dynamic.get());
  std::erase_if(dynamic, [this](const DynamicDim& d) {
    return std::find(options.static_dims.begin(), options.static_dims.end(), d) != options.static_dims.end();
  });
  return trace_new_entry(args, std::move(dynamic), std::move(reason));
}

CompiledFunction::CompiledFunction(std::string name, TracedFn fn, Runtime* runtime,
                                   CompiledFunctionOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->fn = std::move(fn);
  impl_->runtime = runtime;
  impl_->options = std::move(options);
  std::string spec = fmt::format("bake_scalars={};backend={};options={}",
                                 impl_->options.canonicalize.bake_scalars ? 1 : 0,
                                 runtime->backend().name(), runtime->backend().options_digest());
  impl_->options_digest = XXH3_64bits(spec.data(), spec.size());
  impl_->options_label = runtime->backend().display_name() +
                         (impl_->options.canonicalize.bake_scalars ? " (scalars baked)" : "");
  impl_->key = {std::move(name), impl_->options.user_version, std::string(kToolkitVersion)};
  impl_->scope_program = impl_->options.program;
  impl_->scope_function = impl_->key.name;
  Metrics* metrics = &runtime->metrics();
  impl_->guard_checks = MetricsCounter(metrics, counters::kGuardChecks);
  impl_->guard_failures = MetricsCounter(metrics, counters::kGuardFailures);
  impl_->guard_check_timer = MetricsTimer(metrics, timers::kGuardCheck);
  Impl::ScopedRuntime scope(*impl_);
  impl_->load();
}

CompiledFunction::~CompiledFunction() { flush(); }

void CompiledFunction::flush() { impl_->flush_hits(); }

int CompiledFunction::find_entry(const CallArgs& args) const {
  for (size_t e = 0; e < impl_->entries.size(); ++e) {
    if (impl_->entries[e].guards.holds(args, impl_->options_digest)) return static_cast<int>(e);
  }
  return -1;
}

const std::string& CompiledFunction::name() const { return impl_->key.name; }

const std::string& CompiledFunction::last_note() const {
  const Impl& i = *impl_;
  return i.last_entry >= 0 && static_cast<size_t>(i.last_entry) < i.entries.size()
             ? i.entries[static_cast<size_t>(i.last_entry)].note
             : i.unkept_note;
}

size_t CompiledFunction::num_entries() const { return impl_->entries.size(); }

const FunctionStats& CompiledFunction::stats() const {
  FunctionStats& s = impl_->stats;
  s.recompiles = static_cast<int64_t>(s.recompile_reasons.size());
  s.hits_per_entry.resize(impl_->entries.size());
  for (size_t e = 0; e < impl_->entries.size(); ++e) s.hits_per_entry[e] = impl_->entries[e].hits;
  return s;
}

Result<std::vector<Tensor>> CompiledFunction::operator()(LazyContext& ctx, CallArgs&& args) {
  return as_tensors(ctx, call_data(ctx, std::move(args)));
}

Result<std::vector<Tensor>> CompiledFunction::operator()(LazyContext& ctx, const CallArgs& args) {
  return as_tensors(ctx, call_data(ctx, args));
}

Result<std::vector<DataRef>> CompiledFunction::call_data(LazyContext& ctx, CallArgs&& args) {
  struct Given {
    Impl& impl;
    ~Given() { impl.given = nullptr; }
  } given{*impl_};
  impl_->given = &args;
  return call_data(ctx, static_cast<const CallArgs&>(args));
}

Result<std::optional<std::vector<DataRef>>> CompiledFunction::replay_only(LazyContext& ctx, const CallArgs& args, size_t state) {
  Impl& i = *impl_;
  if (i.dynamic_scalar.size() != args.scalars.size() || i.stats.fell_back_to_lazy) {
    return std::optional<std::vector<DataRef>>();
  }
  Impl::ScopedRuntime scope(i);
  i.last_entry = -1;
  i.unkept_note.clear();
  if (auto memoized = i.replay_memoized(ctx, args)) return std::move(*memoized);
  for (const Tensor& t : args.tensors) {
    if (!t.defined() || !t.is_materialized() || &t.context() != &ctx) return std::optional<std::vector<DataRef>>();
  }
  Impl::LookupMisses misses;
  if (std::optional<std::vector<DataRef>> out = i.look_up_and_replay(args, misses)) {
    ++i.stats.calls;
    i.remember(ctx, args, state);
    return out;
  }
  if (i.lost) {
    ++i.stats.calls;
    Status why = std::move(*i.lost);
    i.lost.reset();
    return why;
  }
  return std::optional<std::vector<DataRef>>();
}

Result<std::vector<DataRef>> CompiledFunction::call_data(LazyContext& ctx, const CallArgs& args) {
  ++impl_->stats.calls;
  for (size_t i = 0; i < args.tensors.size(); ++i) {
    const Tensor& t = args.tensors[i];
    if (!t.defined() || !t.is_materialized() || &t.context() != &ctx) {
      return invalid_argument(fmt::format("{}: {} must be a materialized tensor of the calling context", name(),
                                          impl_->env().input_name(static_cast<uint32_t>(i))));
    }
  }
  for (uint32_t s : impl_->options.dynamic_scalars) {
    if (s >= args.scalars.size()) {
      return invalid_argument(fmt::format("{}: dynamic scalar {} not passed", name(), s));
    }
  }
  // Which scalars are dynamic depends only on their number (the options are fixed).
  if (impl_->dynamic_scalar.size() != args.scalars.size()) {
    impl_->dynamic_scalar.assign(args.scalars.size(), false);
    for (uint32_t s : impl_->options.dynamic_scalars) impl_->dynamic_scalar[s] = true;
  }
  return impl_->call(args);
}

void CompiledFunction::mark_dynamic(size_t input, int dim) {
  DynamicDim d{input, dim};
  auto& dims = impl_->options.dynamic_dims;
  if (std::find(dims.begin(), dims.end(), d) == dims.end()) dims.push_back(d);
  std::erase(impl_->options.static_dims, d);
}

void CompiledFunction::mark_static(size_t input, int dim) {
  DynamicDim d{input, dim};
  auto& dims = impl_->options.static_dims;
  if (std::find(dims.begin(), dims.end(), d) == dims.end()) dims.push_back(d);
  std::erase(impl_->options.dynamic_dims, d);
}

bool CompiledFunction::discard_last_entry(const std::string& why) {
  Impl& i = *impl_;
  if (i.last_entry < 0 || static_cast<size_t>(i.last_entry) >= i.entries.size()) return false;
  Impl::ScopedRuntime scope(i);
  GuardEntry& e = i.entries[static_cast<size_t>(i.last_entry)];
  i.runtime->function_event(store::EventKind::kMiss, i.key.name,
                            fmt::format("entry {} discarded by the caller: {}", e.db_index, why));
  if (store::GuardEntryStore* d = i.writable_store(); d && e.db_index >= 0) (void)d->remove_function_entry(i.key, e.db_index);
  i.entries.erase(i.entries.begin() + i.last_entry);
  ++i.entries_version;
  i.last_entry = -1;
  return true;
}

}  // namespace tracecache
