#include "replay/engine/compiled_function.h"

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

// The one call into the Runtime that runs an executable on device data, for a replay and for
// each graph of a trace.
Result<std::vector<DataRef>> run_executable(Runtime& runtime, const Executable& exe,
                                            std::vector<DataRef>& params) {
  return runtime.run_or_fall_back(exe, params);
}

// Executes the graphs of a trace through the runtime, recording each as a segment and where
// each of its parameters came from.
class Recorder final : public GraphExecutor {
 public:
  explicit Recorder(Runtime* runtime) : runtime_(runtime) {}
  Result<std::vector<DataRef>> execute(const CanonicalGraph& cg, std::vector<DataRef> params) override {
    Segment seg;
    seg.key = cg.key;
    for (size_t p = 0; p < params.size(); ++p) {
      if (cg.sources[p].kind == ParamSource::Kind::kScalar) {
        ValueSource v;
        v.kind = ValueSource::Kind::kConstant;
        v.constant = params[p];
        seg.params.push_back(v);
        continue;
      }
      auto it = trace.origin.find(params[p]->identity());
      if (it == trace.origin.end()) {
        return invalid_argument(
            "the traced function used tensor data that is not one of its arguments; pass it as an "
            "argument (it would otherwise become a constant baked into the cache)");
      }
      seg.params.push_back(it->second);
    }
    Result<std::shared_ptr<const Executable>> exe = runtime_->prepare(cg);
    if (!exe.is_ok()) return exe.status();
    seg.exe = *exe;
    Result<std::vector<DataRef>> outs = run_executable(*runtime_, **exe, params);
    if (!outs.is_ok()) return outs;
    const uint32_t k = static_cast<uint32_t>(trace.segments.size());
    for (uint32_t o = 0; o < outs->size(); ++o) {
      ValueSource v;
      v.kind = ValueSource::Kind::kSegmentOutput;
      v.a = k;
      v.b = o;
      // An output that is an input keeps its origin. A donated output written in place would
      // have its donor's identity and wrongly keep the donor's origin; it cannot happen here:
      // every parameter of a traced graph is still held elsewhere while it runs (an argument
      // by the caller's CallArgs and the trace's proxy, an earlier segment's output by
      // last_outputs), so the runtime never gives one up and the backend writes a new buffer.
      trace.origin.try_emplace((*outs)[o]->identity(), v);
    }
    trace.segments.push_back(std::move(seg));
    last_outputs.push_back(*outs);
    return outs;
  }

  TraceRecord trace;
  std::vector<std::vector<DataRef>> last_outputs;  // per segment

 private:
  Runtime* runtime_;
};

// The values a trace's function read (LazyOptions::value_reads), each once, in order.
struct ValueReads final : ValueReadObserver {
  std::vector<DataRef> values;
  std::unordered_set<const void*> seen;
  void on_value_read(const DataRef& d) override {
    if (seen.insert(d->identity()).second) values.push_back(d);
  }
};

// Why the lookup found no entry to replay, besides failed guards.
struct LookupMisses {
  bool value_guard_failed = false;  // a value read inside the function changed
  std::string value_change;         // the first such value: "segment 0 output 1: expected 3, actual 5"
  std::string template_failure;     // a dynamic entry's template did not apply ("entry N: ...")
};

// The entry whose guards came closest to holding, and its failed guards.
struct Closest {
  size_t index = 0;
  std::vector<GuardFailure> failures;
  std::vector<GuardCheck> failed;
};

// Whether a replay's outputs (`routes`) are the last segment's outputs, all of them in order:
// then they are that segment's result as it is (`segment_outputs`: per segment, as run).
bool returns_last_segment(const std::vector<ValueSource>& routes,
                          const std::vector<std::vector<DataRef>>& segment_outputs) {
  if (segment_outputs.empty() || routes.size() != segment_outputs.back().size()) return false;
  const uint32_t last = static_cast<uint32_t>(segment_outputs.size() - 1);
  for (size_t o = 0; o < routes.size(); ++o) {
    const ValueSource& v = routes[o];
    if (v.kind != ValueSource::Kind::kSegmentOutput || v.a != last || v.b != o) return false;
  }
  return true;
}

// A value as a recompile reason shows it: "3", "[1, 2, 3]", or for more than 8 elements its type
// and checksum.
std::string value_preview(const HostBuffer& b) {
  constexpr int64_t kShown = 8;
  if (b.numel() > kShown) return fmt::format("{} (checksum {})", type_to_string({b.dtype(), b.shape()}), b.checksum());
  std::vector<std::string> items;
  for (int64_t i = 0; i < b.numel(); ++i) items.push_back(fmt::format("{}", b.element_as_double(i)));
  if (b.shape().rank() == 0 && items.size() == 1) return items[0];
  return fmt::format("[{}]", fmt::join(items, ", "));
}

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

struct CompiledFunction::Impl {
  TracedFn fn;
  Runtime* runtime;
  CompiledFunctionOptions options;
  uint64_t options_digest = 0;
  std::string options_label;  // readable form of options_digest: "sim:h100"
  store::FunctionKey key;  // key.name: the function's name
  std::vector<bool> dynamic_scalar;
  std::vector<GuardEntry> entries;
  // A segment's parameter list during replay(): its capacity is reused, its handles are
  // dropped after each run (so a call's arguments do not outlive the call).
  std::vector<DataRef> scratch;
  // replay()'s outputs per segment: the outer vector's capacity is reused, the handles are
  // dropped when each replay ends.
  std::vector<std::vector<DataRef>> segment_outputs;
  // The counters and the timer every lookup updates, found once (Metrics: no name lookup per call).
  MetricsCounter guard_checks{nullptr, counters::kGuardChecks};
  MetricsCounter guard_failures{nullptr, counters::kGuardFailures};
  MetricsTimer guard_check_timer{nullptr, timers::kGuardCheck};
  // During a call that gave its arguments up (operator()(ctx, CallArgs&&)): those arguments,
  // from which a replay takes the ones it donates; null otherwise.
  CallArgs* given = nullptr;
  // Set by a replay that took an argument to donate and then did not finish: the call's error
  // (the argument is gone, so the call can neither trace nor try another entry).
  std::optional<Status> lost;
  // last_note(): the entry that served the last call (-1: none), or the note of a trace that
  // kept no entry.
  int64_t last_entry = -1;
  std::string unkept_note;

  // A value guard's read of a segment output: its host bytes, counted as Tensor::buffer() counts.
  BufferRef read_value(const DataRef& d) const {
    Result<BufferRef> b = d->read();
    if (!b.is_ok()) throw Error(b.status());
    if (!d->in_host_memory()) runtime->metrics().add(counters::kBytesToHost, static_cast<int64_t>(d->nbytes()));
    return std::move(b).value();
  }
  int64_t next_db_index = 0;

  // What happened in this process, each fact counted once: calls, traces, guard checks and
  // failures, specializations, the fallback and the recompile reasons. stats() derives the
  // rest (recompiles, hits_per_entry) from the reasons and `entries`.
  FunctionStats stats;

  GuardEnvironment env() const { return {options_digest, options_label, options.input_names, options.scalar_names}; }
  // Set by replay() when a value guard failed: which value, read and expected.
  std::string value_change;

  // ---- the call, phase by phase --------------------------------------------------------------

  // The scope this function puts into the runtime while it runs (options.program, its name);
  // between calls these hold the runtime's own scope.
  std::string scope_program, scope_function;
  struct ScopedRuntime {
    Impl& impl;
    bool on;
    explicit ScopedRuntime(Impl& i) : impl(i), on(!i.options.program.empty()) {
      if (on) impl.runtime->swap_scope(impl.scope_program, impl.scope_function);
    }
    ~ScopedRuntime() {
      if (on) impl.runtime->swap_scope(impl.scope_program, impl.scope_function);
    }
  };

  Result<std::vector<DataRef>> call(const CallArgs& args) {
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

  // Look up: the first entry whose guards hold and that replays (value guards between segments
  // and a dynamic entry's template are checked while replaying). An entry that cannot be used
  // is dropped (a miss, never an error; invariants 5 and 6). nullopt if no entry served.
  std::optional<std::vector<DataRef>> look_up_and_replay(const CallArgs& args, LookupMisses& misses) {
    for (size_t e = 0; e < entries.size(); ++e) {
      ++stats.guard_checks;
      guard_checks.add();
      const bool holds =
          timed_guard_check() ? holds_timed(entries[e], args) : entries[e].guards.holds(args, options_digest);
      if (!holds) {
        count_guard_failure();
        continue;
      }
      std::string why;
      Result<std::optional<std::vector<DataRef>>> r = entries[e].replay_path == GuardEntry::ReplayPath::kDirect
                                                           ? replay_direct(entries[e], args)
                                                           : replay_verified(entries[e], args, &why);
      if (lost) return std::nullopt;
      if (!r.is_ok()) {
        drop_entry(entries[e], r.status());
        entries.erase(entries.begin() + static_cast<std::ptrdiff_t>(e));
        --e;
        continue;
      }
      if (!r->has_value()) {
        if (why.empty()) {
          if (!misses.value_guard_failed) misses.value_change = std::move(value_change);
          misses.value_guard_failed = true;
        } else if (misses.template_failure.empty()) {
          misses.template_failure = fmt::format("entry {}: {}", e, why);
        }
        count_guard_failure();
        continue;
      }
      ++entries[e].hits;
      ++entries[e].unflushed_hits;
      if (entries[e].replay_path == GuardEntry::ReplayPath::kUndecided) {
        entries[e].replay_path =
            direct_replay_applies(entries[e]) ? GuardEntry::ReplayPath::kDirect : GuardEntry::ReplayPath::kGeneral;
      }
      last_entry = static_cast<int64_t>(e);
      return std::move(**r);
    }
    return std::nullopt;
  }

  // Whether this guard check is timed (timers::kGuardCheck): the function's first
  // kTimedGuardChecks, then one in kGuardCheckSamplePeriod, and all while a timeline is drawn.
  // Timing every check cost about 0.08 µs per call on the mlp fixture (two ordered clock reads
  // each wait for the loads before them), a fifth of once mode's host overhead there
  // (bench/results/host-overhead-footprint-2026-11-28.md).
  bool timed_guard_check() const {
    return stats.guard_checks <= kTimedGuardChecks || stats.guard_checks % kGuardCheckSamplePeriod == 0 ||
           guard_check_timer.observed();
  }
  bool holds_timed(const GuardEntry& e, const CallArgs& args) {
    ScopedTimer timer(&guard_check_timer);
    return e.guards.holds(args, options_digest);
  }

  void count_guard_failure() {
    ++stats.guard_failures;
    guard_failures.add();
  }

  // The entry with the fewest failed guards for `args` (the first of equals).
  Closest closest_entry(const CallArgs& args) const {
    Closest best;
    for (size_t e = 0; e < entries.size(); ++e) {
      std::vector<GuardCheck> failed;
      std::vector<GuardFailure> f = entries[e].guards.explain(args, env(), &failed);
      if (e == 0 || f.size() < best.failures.size()) best = {e, std::move(f), std::move(failed)};
    }
    return best;
  }

  static std::string recompile_reason(const Closest& closest, const LookupMisses& misses) {
    std::string reason = fmt::format("entry {}: ", closest.index);
    if (closest.failures.empty() && !misses.template_failure.empty()) {
      reason = misses.template_failure;
    } else if (closest.failures.empty() && misses.value_guard_failed) {
      reason += "a value read inside the function changed";
      if (!misses.value_change.empty()) reason += " (" + misses.value_change + ")";
    }
    for (size_t i = 0; i < closest.failures.size(); ++i) reason += (i ? "; " : "") + closest.failures[i].to_string();
    return reason;
  }

  void record_recompile(std::string reason) {
    runtime->metrics().add(counters::kRecompiles);
    runtime->function_event(store::EventKind::kRecompile, key.name,
                            fmt::format("{} {}: {}", options.call_name, stats.calls - 1, reason));
    stats.recompile_reasons.push_back(std::move(reason));
  }

  // Trace (the first call, or a recompile when `reason` is set): a new entry, dynamic in
  // `dynamic` if the trace allows; the recompile is recorded with what became of the dims.
  Result<std::vector<DataRef>> trace_new_entry(const CallArgs& args, std::vector<DynamicDim> dynamic,
                                                 std::string reason) {
    std::string note;
    Result<std::vector<DataRef>> r = trace(args, /*keep=*/true, std::move(dynamic), &note);
    if (!reason.empty()) {
      if (!note.empty()) reason += " [" + note + "]";
      record_recompile(std::move(reason));
    }
    return r;
  }

  // Fall back: past the recompile limit, every call traces (lazy mode), said once.
  Result<std::vector<DataRef>> fall_back(const CallArgs& args) {
    stats.fell_back_to_lazy = true;
    std::string why = fmt::format("'{}' recompiled {} times (limit {}); it now runs in lazy mode", key.name,
                                  entries.size(), options.recompile_limit);
    runtime->add_warning(why);
    runtime->function_event(store::EventKind::kFallback, key.name, why);
    return trace(args, /*keep=*/false);
  }

  // ---- replay -------------------------------------------------------------------------------

  // Clears the replay's parameter list on every way out (its handles must not outlive the call).
  struct ClearScratch {
    std::vector<DataRef>& scratch;
    ~ClearScratch() { scratch.clear(); }
  };

  // The outputs are what the entry promises (its recorded types; a dynamic entry's sizes follow
  // the call), whatever a stored entry routes: never a value of another type.
  static bool as_promised(const GuardEntry& e, size_t o, const DataRef& b) {
    if (!b) return false;
    const TensorType& promised = e.output_types[o];
    return b->dtype() == promised.dtype &&
           (e.dynamic ? b->shape().rank() == promised.shape.rank() : b->shape() == promised.shape);
  }
  static Status not_as_promised(const GuardEntry& e, size_t o, const DataRef& b) {
    if (!b) return corruption("guard entry returns an argument it gave up to update in place");
    return corruption(fmt::format("guard entry output {} is recorded as {}, the replay gave {}", o,
                                  type_to_string(e.output_types[o]), type_to_string({b->dtype(), b->shape()})));
  }
  // Outputs taken as they are from the run (a replay's last segment): each as promised.
  static Status check_promised(const GuardEntry& e, const std::vector<DataRef>& outputs) {
    for (size_t o = 0; o < outputs.size(); ++o) {
      if (!as_promised(e, o, outputs[o])) return not_as_promised(e, o, outputs[o]);
    }
    return Status::ok();
  }

  // Whether entry `e` replays through replay_direct(): static, one segment whose executable is at
  // hand and whose parameters are all arguments or constants, no value guards, no argument
  // updated in place (so nothing donated), the segment's outputs returned as they are, in order,
  // and its outputs verified (replay_verified). Asked once, after the first replay() of `e`
  // succeeded; none of it changes later. Most entries: a traced function that reads no value
  // mid-trace.
  bool direct_replay_applies(const GuardEntry& e) const {
    if (e.dynamic || e.segments.size() != 1 || !e.updates.empty() || !e.host_ops.empty() ||
        !e.input_value_guards.empty()) {
      return false;
    }
    if (!e.outputs_verified && options.output_types) return false;
    const Segment& seg = e.segments[0];
    if (!seg.exe || !seg.value_guards.empty()) return false;
    for (const ValueSource& v : seg.params) {
      if (v.kind != ValueSource::Kind::kInput && v.kind != ValueSource::Kind::kConstant) return false;
    }
    for (size_t o = 0; o < e.outputs.size(); ++o) {
      const ValueSource& v = e.outputs[o];
      if (v.kind != ValueSource::Kind::kSegmentOutput || v.a != 0 || v.b != o) return false;
    }
    return true;
  }

  // replay() of an entry direct_replay_applies() accepted, without the routing it does not need:
  // one run of the segment's executable on the call's arguments, its outputs checked as replay()
  // checks them (same errors). On the mlp fixture replay()'s general machinery was about a sixth
  // of once mode's host overhead (bench/results/host-overhead-footprint-2026-11-28.md).
  Result<std::optional<std::vector<DataRef>>> replay_direct(GuardEntry& e, const CallArgs& args) {
    const Segment& seg = e.segments[0];
    ClearScratch clear_scratch{scratch};
    scratch.clear();
    for (const ValueSource& v : seg.params) {
      scratch.push_back(v.kind == ValueSource::Kind::kInput ? args.tensors[v.a].data() : v.constant);
    }
    Result<std::vector<DataRef>> outs = run_executable(*runtime, *seg.exe, scratch);
    scratch.clear();
    if (!outs.is_ok()) return corruption("guard entry does not fit its executable: " + outs.status().message());
    if (outs->size() != e.outputs.size()) return corruption("guard entry routes a value that does not exist");
    if (Status promised = check_promised(e, *outs); !promised.is_ok()) return promised;
    return std::optional<std::vector<DataRef>>(std::move(*outs));
  }

  // replay(), and for an entry loaded from the cache the first time, verify_outputs().
  // The types to verify are found before the replay, which may give arguments up.
  Result<std::optional<std::vector<DataRef>>> replay_verified(GuardEntry& e, const CallArgs& args, std::string* why) {
    if (e.outputs_verified || !options.output_types) return replay(e, args, why);
    Result<std::vector<TensorType>> want = options.output_types(args);
    if (!want.is_ok()) return want.status();
    Result<std::optional<std::vector<DataRef>>> r = replay(e, args, why);
    if (!r.is_ok() || !r->has_value()) return r;
    if (Status verified = verify_outputs(**r, *want); !verified.is_ok()) {
      const bool took = given && std::any_of(e.updates.begin(), e.updates.end(), [this](const ArgumentUpdate& u) {
        return !given->tensors[u.argument].defined();
      });
      if (took) {
        lost = Status(verified.code(), fmt::format("{}: {} (found after the replay updated an argument in place, so "
                                                   "the call is not traced again)", key.name, verified.message()));
      }
      return verified;
    }
    e.outputs_verified = true;
    return r;
  }

  // The segments entry `e` runs for this call: its own, or a dynamic entry's specialization at
  // this call's sizes (empty with `why` set when its template does not apply).
  Result<std::span<Segment>> segments_for(GuardEntry& e, const CallArgs& args, std::string* why) {
    if (!e.dynamic) return std::span<Segment>(e.segments);
    Result<Specialized> s = specialize(
        *e.dynamic, args, [this](const CanonicalGraph& cg) { return runtime->prepare(cg); }, runtime->metrics(),
        options.canonicalize);
    if (!s.is_ok()) return s.status();
    if (s->made) {
      ++stats.specializations;
      runtime->metrics().add(counters::kSpecializations);
    }
    if (s->segment == nullptr) {
      *why = std::move(s->why);
      return std::span<Segment>();
    }
    return std::span<Segment>(s->segment, 1);
  }

  // Runs entry `e`. Returns nullopt (not an error) if a value guard between segments fails or
  // a dynamic entry's template does not apply (then `why` says why).
  Result<std::optional<std::vector<DataRef>>> replay(GuardEntry& e, const CallArgs& args, std::string* why) {
    Result<std::span<Segment>> found = segments_for(e, args, why);
    if (!found.is_ok()) return found.status();
    std::span<Segment> segments = *found;
    if (e.dynamic && segments.empty()) return std::optional<std::vector<DataRef>>();  // the template does not apply
    struct SegmentOutputs {  // the scratch, taken for this replay (and so safe from a nested one)
      std::vector<std::vector<DataRef>>& scratch;
      std::vector<std::vector<DataRef>> outs = std::move(scratch);
      ~SegmentOutputs() {
        for (std::vector<DataRef>& o : outs) o.clear();
        scratch = std::move(outs);
      }
    } segment_outs{segment_outputs};
    std::vector<std::vector<DataRef>>& seg_out = segment_outs.outs;
    seg_out.resize(segments.size());
    std::vector<std::vector<DataRef>> host_out(e.host_ops.size());  // no allocation without host ops
    auto value_of = [&](const ValueSource& v) -> DataRef {
      switch (v.kind) {
        case ValueSource::Kind::kInput: return args.tensors[v.a].defined() ? args.tensors[v.a].data() : nullptr;
        case ValueSource::Kind::kDynamicScalar: {
          HostBuffer b(DType::kF32, Shape{});
          *b.data<float>() = static_cast<float>(args.scalars[v.a]);
          return host_data(std::move(b));
        }
        case ValueSource::Kind::kSegmentOutput: return seg_out[v.a][v.b];
        case ValueSource::Kind::kConstant: return v.constant;
        case ValueSource::Kind::kHostOutput: return host_out[v.a][v.b];
      }
      return nullptr;
    };
    auto routed = [&](const ValueSource& v) {
      if (v.kind == ValueSource::Kind::kHostOutput) return v.b < host_out[v.a].size();
      return v.kind != ValueSource::Kind::kSegmentOutput || v.b < seg_out[v.a].size();
    };
    // The values `fn` read from its arguments, checked before anything runs.
    for (const InputValueGuard& g : e.input_value_guards) {
      DataRef d = value_of(g.source);
      if (!d) return corruption("guard entry reads an argument it gave up to update in place");
      if (!value_matches(*read_value(d), g.hash, fmt::format("{}", input_label(g.source)), g.preview)) {
        return std::optional<std::vector<DataRef>>();
      }
    }
    // Host ops run before segment `position`; the rest after the last segment.
    size_t next_host_op = 0;
    auto run_host_ops = [&](size_t before_segment) -> Result<bool> {
      for (; next_host_op < e.host_ops.size() && e.host_ops[next_host_op].position <= before_segment; ++next_host_op) {
        Result<bool> served = run_host_op(e, next_host_op, value_of, routed, host_out);
        if (!served.is_ok() || !*served) return served;
      }
      return true;
    };
    ClearScratch clear_scratch{scratch};
    // Arguments this replay took from the caller to donate; a replay that took one and does
    // not finish cannot be retried (see `lost`).
    struct LoseTakenOnFailure {
      Impl& impl;
      const std::string& name;
      std::vector<uint32_t> taken;
      bool finished = false;
      ~LoseTakenOnFailure() {
        if (finished || taken.empty() || impl.lost) return;
        impl.lost = internal_error(fmt::format(
            "{}: a replay failed after it was given argument {} to update in place; that argument's "
            "data is gone, so the call is not traced again", name, taken.front()));
      }
    } lose_taken{*this, key.name, {}};
    const bool may_donate = given != nullptr && !e.updates.empty() && !e.dynamic;
    for (size_t k = 0; k < segments.size(); ++k) {
      if (!e.host_ops.empty()) {
        Result<bool> served = run_host_ops(k);
        if (!served.is_ok()) return served.status();
        if (!*served) return std::optional<std::vector<DataRef>>();
      }
      Segment& seg = segments[k];
      if (!seg.exe) {  // an entry loaded from the cache: fetch its executable by key
        Result<std::shared_ptr<const Executable>> exe = runtime->prepare_by_key(seg.key);
        if (!exe.is_ok()) return exe.status();
        if (Status fits = check_segment(e, k, **exe); !fits.is_ok()) return fits;
        seg.exe = *exe;
      }
      scratch.clear();
      for (uint32_t p = 0; p < seg.params.size(); ++p) {
        const ValueSource& v = seg.params[p];
        if (!routed(v)) return corruption("guard entry routes a value that does not exist");
        if (may_donate && v.kind == ValueSource::Kind::kInput && takes_to_donate(e, *seg.exe, p, v.a)) {
          // The call's only handle goes into the run (Runtime::run_on_backend's rule decides).
          Tensor& arg = given->tensors[v.a];
          scratch.push_back(arg.data());
          arg = Tensor();
          lose_taken.taken.push_back(v.a);
          continue;
        }
        if (v.kind == ValueSource::Kind::kInput && args.tensors[v.a].defined()) {  // most: no temporary handle
          scratch.push_back(args.tensors[v.a].data());
          continue;
        }
        DataRef d = value_of(v);
        if (!d) return corruption("guard entry reads an argument it gave up to update in place");
        scratch.push_back(std::move(d));
      }
      Result<std::vector<DataRef>> outs = run_executable(*runtime, *seg.exe, scratch);
      scratch.clear();
      if (!outs.is_ok() && !lose_taken.taken.empty()) {
        lost = Status(outs.status().code(),
                      fmt::format("{}: a run failed after it was given argument {} to update in place; that "
                                  "argument's data is gone: {}", key.name, lose_taken.taken.front(),
                                  outs.status().message()));
        return outs.status();
      }
      if (!outs.is_ok()) return corruption("guard entry does not fit its executable: " + outs.status().message());
      seg_out[k] = std::move(*outs);
      for (size_t g = 0; g < seg.value_guards.size(); ++g) {
        const auto& [o, expected] = seg.value_guards[g];
        if (o >= seg_out[k].size()) return corruption("guard entry checks an output that does not exist");
        if (!value_matches(*read_value(seg_out[k][o]), expected, fmt::format("segment {} output {}", k, o),
                           g < seg.value_previews.size() ? seg.value_previews[g] : std::string())) {
          return std::optional<std::vector<DataRef>>();
        }
      }
    }
    if (!e.host_ops.empty()) {
      Result<bool> served = run_host_ops(segments.size());
      if (!served.is_ok()) return served.status();
      if (!*served) return std::optional<std::vector<DataRef>>();
    }
    std::vector<DataRef> outputs;
    if (returns_last_segment(e.outputs, seg_out)) {  // the common case: taken, not copied
      outputs = std::move(seg_out.back());
      if (Status promised = check_promised(e, outputs); !promised.is_ok()) return promised;
    } else {
      outputs.reserve(e.outputs.size());
      for (size_t o = 0; o < e.outputs.size(); ++o) {
        const ValueSource& v = e.outputs[o];
        if (!routed(v)) return corruption("guard entry routes a value that does not exist");
        DataRef b = value_of(v);
        if (!as_promised(e, o, b)) return not_as_promised(e, o, b);
        outputs.push_back(std::move(b));
      }
    }
    lose_taken.finished = true;
    return std::optional<std::vector<DataRef>>(std::move(outputs));
  }

  // Whether `read` is the value a guard expects (hash); if not, `value_change` says which value
  // (`what`) changed from what (`traced`, the preview kept when traced; empty for a stored entry).
  bool value_matches(const HostBuffer& read, const XXH128_hash_t& expected, const std::string& what,
                     const std::string& traced) {
    if (XXH128_isEqual(value_hash(read), expected)) return true;
    value_change = fmt::format("{}: expected {}, actual {}", what,
                               traced.empty() ? std::string("the value traced (not kept in a stored entry)") : traced,
                               value_preview(read));
    return false;
  }

  std::string input_label(const ValueSource& v) const {
    return v.kind == ValueSource::Kind::kDynamicScalar ? fmt::format("scalar {}", v.a) : env().input_name(v.a);
  }

  // Runs host op `h` of entry `e` during a replay (its inputs are routed, their values computed).
  // False (not an error) when its results are not of the types traced or a value guard on them
  // fails (`value_change` says which); an error when the runner fails or the entry cannot be run.
  template <typename ValueOf, typename Routed>
  Result<bool> run_host_op(const GuardEntry& e, size_t h, const ValueOf& value_of, const Routed& routed,
                           std::vector<std::vector<DataRef>>& host_out) {
    const HostOp& op = e.host_ops[h];
    if (!options.host_op) {
      return unsupported(fmt::format("the entry has a graph break ({}) but '{}' has no host op runner",
                                             op.description, key.name));
    }
    std::vector<BufferRef> inputs;
    inputs.reserve(op.inputs.size());
    for (const ValueSource& v : op.inputs) {
      if (!routed(v)) return corruption("guard entry routes a value that does not exist");
      DataRef d = value_of(v);
      if (!d) return corruption("guard entry reads an argument it gave up to update in place");
      inputs.push_back(read_value(d));
    }
    Result<std::vector<BufferRef>> outs = options.host_op(op.payload, inputs);
    if (!outs.is_ok()) return outs.status();
    ++stats.host_op_runs;
    if (outs->size() != op.output_types.size()) {
      value_change = fmt::format("graph break {} ({}): {} results, traced {}", h, op.description, outs->size(),
                                 op.output_types.size());
      return false;
    }
    std::vector<DataRef>& out = host_out[h];
    out.clear();
    for (size_t o = 0; o < outs->size(); ++o) {
      const BufferRef& b = (*outs)[o];
      const TensorType got = b ? TensorType{b->dtype(), b->shape()} : TensorType{};
      if (!b || got != op.output_types[o]) {
        value_change = fmt::format("graph break {} ({}): result {} is {}, traced {}", h, op.description, o,
                                   b ? type_to_string(got) : std::string("missing"), type_to_string(op.output_types[o]));
        return false;
      }
      out.push_back(host_data(b));
    }
    for (size_t g = 0; g < op.value_guards.size(); ++g) {
      const auto& [o, expected] = op.value_guards[g];
      if (o >= out.size()) return corruption("guard entry checks an output that does not exist");
      if (!value_matches(*(*outs)[o], expected,
                         fmt::format("graph break {} result {}", h, o),
                         g < op.value_previews.size() ? op.value_previews[g] : std::string())) {
        return false;
      }
    }
    return true;
  }

  // Whether parameter `p` of a segment, argument `a` of the call, is to be given to its run to
  // donate: the entry updates `a`, the graph donates `p`, and the call still holds `a` (whether
  // the run may overwrite it is the Runtime's rule: no other owner).
  bool takes_to_donate(const GuardEntry& e, const Executable& exe, uint32_t p, uint32_t a) const {
    const std::span<const Donation> d = exe.graph.donations();
    return std::any_of(e.updates.begin(), e.updates.end(), [a](const ArgumentUpdate& u) { return u.argument == a; }) &&
           std::any_of(d.begin(), d.end(), [p](const Donation& x) { return x.param == p; }) &&
           given->tensors[a].defined();
  }

  // Compares a stored entry's replayed outputs with the types `fn` returns for the call
  // (CompiledFunctionOptions::output_types). kCorruption on a mismatch.
  Status verify_outputs(const std::vector<DataRef>& outputs, const std::vector<TensorType>& want) const {
    if (want.size() != outputs.size()) {
      return corruption(fmt::format("guard entry returns {} outputs, the function {}", outputs.size(), want.size()));
    }
    for (size_t o = 0; o < outputs.size(); ++o) {
      const TensorType got{outputs[o]->dtype(), outputs[o]->shape()};
      if (got != want[o]) {
        return corruption(fmt::format("guard entry output {} is {}, the function returns {}", o, type_to_string(got),
                                      type_to_string(want[o])));
      }
    }
    return Status::ok();
  }

  // ---- tracing ------------------------------------------------------------------------------

  // Traces `fn` on `args`; appends an entry unless `keep` is false, dynamic in `dynamic_dims`
  // if it can be. Returns the outputs; `note` (optional) receives what became of the dims.
  Result<std::vector<DataRef>> trace(const CallArgs& args, bool keep, std::vector<DynamicDim> dynamic_dims = {},
                                       std::string* note = nullptr) {
    ++stats.traces;
    Recorder rec(runtime);
    TraceTemplate tmpl;
    LazyOptions lo;
    lo.canonicalize = options.canonicalize;
    lo.metrics = &runtime->metrics();
    if (keep && !dynamic_dims.empty()) lo.capture = &tmpl;
    ValueReads reads;
    lo.value_reads = &reads;
    std::vector<Tensor> outputs;
    std::vector<ArgumentUpdate> donated;
    std::string entry_note;
    {
      LazyContext tctx(&rec, lo);
      TraceArgs targs;
      for (uint32_t i = 0; i < args.tensors.size(); ++i) {
        DataRef b = args.tensors[i].data();
        targs.tensors_.push_back(tctx.from_data(b));
        rec.trace.origin.try_emplace(b->identity(), ValueSource{ValueSource::Kind::kInput, i, 0, nullptr});
      }
      targs.scalars_ = args.scalars;
      targs.scalar_tensors_.resize(args.scalars.size());
      for (uint32_t s = 0; s < args.scalars.size(); ++s) {
        if (!dynamic_scalar[s]) continue;
        HostBuffer b(DType::kF32, Shape{});
        *b.data<float>() = static_cast<float>(args.scalars[s]);
        DataRef ref = host_data(std::move(b));
        rec.trace.origin.try_emplace(ref->identity(), ValueSource{ValueSource::Kind::kDynamicScalar, s, 0, nullptr});
        targs.scalar_tensors_[s] = tctx.from_data(ref);
      }
      targs.host_op_ = [&](std::string payload, std::span<const Tensor> inputs, std::string description) {
        return trace_host_op(tctx, rec.trace, lo.capture, std::move(payload), inputs, std::move(description));
      };
      try {
        outputs = fn(tctx, targs);
        if (Status st = check_no_argument_assigned(args, targs); !st.is_ok()) return st;
        if (Status st = record_updates(tctx, args, targs, outputs, lo.capture != nullptr, donated); !st.is_ok()) {
          return st;
        }
        if (options.entry_note) entry_note = options.entry_note();
        if (entry_note.size() > kMaxGuardEntryNoteBytes) {
          return invalid_argument(fmt::format("{}: the note on its entry has {} bytes (at most {})", key.name,
                                              entry_note.size(), kMaxGuardEntryNoteBytes));
        }
        rec.trace.segments_inside_fn = rec.trace.segments.size();
        tctx.mark_step();
      } catch (const Error& e) {
        return e.status();
      }
    }
    GuardEntry entry;
    std::vector<DataRef> result;
    for (size_t o = 0; o < outputs.size(); ++o) {
      if (!outputs[o].defined()) return invalid_argument(fmt::format("output {} of the traced function is undefined", o));
      DataRef b = outputs[o].data();
      auto it = rec.trace.origin.find(b->identity());
      if (it == rec.trace.origin.end()) {
        return invalid_argument(fmt::format(
            "output {} of the traced function is tensor data that is not one of its arguments", o));
      }
      entry.outputs.push_back(it->second);
      entry.output_types.push_back({b->dtype(), b->shape()});
      result.push_back(std::move(b));
    }
    // Every value fn read: guard its contents where it comes from.
    for (const DataRef& d : reads.values) {
      auto it = rec.trace.origin.find(d->identity());
      if (it == rec.trace.origin.end()) continue;  // data fn made itself (a constant): nothing to guard
      const ValueSource& v = it->second;
      if (v.kind == ValueSource::Kind::kConstant) continue;
      BufferRef read = read_value(d);
      const XXH128_hash_t hash = value_hash(*read);
      rec.trace.read_values = true;
      switch (v.kind) {
        case ValueSource::Kind::kSegmentOutput:
          rec.trace.segments[v.a].value_guards.emplace_back(v.b, hash);
          rec.trace.segments[v.a].value_previews.push_back(value_preview(*read));
          break;
        case ValueSource::Kind::kHostOutput:
          rec.trace.host_ops[v.a].value_guards.emplace_back(v.b, hash);
          rec.trace.host_ops[v.a].value_previews.push_back(value_preview(*read));
          break;
        case ValueSource::Kind::kInput:
        case ValueSource::Kind::kDynamicScalar:
          entry.input_value_guards.push_back({v, hash, value_preview(*read)});
          break;
        case ValueSource::Kind::kConstant: break;
      }
    }
    if (keep) {
      if (!dynamic_dims.empty()) {
        std::string n = make_dynamic(entry, tmpl, rec.trace, std::move(dynamic_dims), args, env());
        if (note) *note = std::move(n);
      }
      if (!entry.dynamic) {
        entry.segments = std::move(rec.trace.segments);
        entry.host_ops = std::move(rec.trace.host_ops);
        entry.updates = std::move(donated);
      }
      entry.guards = GuardSet::record(args, env(),
                                      entry.dynamic ? std::span<const DynamicDim>(entry.dynamic->dims)
                                                    : std::span<const DynamicDim>(),
                                      dynamic_scalar);
      entry.note = std::move(entry_note);
      save(entry);
      entries.push_back(std::move(entry));
      last_entry = static_cast<int64_t>(entries.size()) - 1;
    } else {
      unkept_note = std::move(entry_note);
    }
    return result;
  }

  // TraceArgs::host_op during a trace: ends the graph so far (a segment), runs the op through the
  // runner on its inputs' host bytes, records it in `trace` and returns its results as tensors of
  // the trace. Throws Error (see TraceArgs::host_op).
  std::vector<Tensor> trace_host_op(LazyContext& tctx, TraceRecord& trace, TraceTemplate* capture, std::string payload,
                                    std::span<const Tensor> inputs, std::string description) {
    if (!options.host_op) {
      throw Error(invalid_argument(fmt::format("{}: a graph break ({}) needs a host op runner "
                                               "(CompiledFunctionOptions::host_op)", key.name, description)));
    }
    if (payload.size() > kMaxHostOpPayloadBytes || description.size() > kMaxHostOpPayloadBytes) {
      throw Error(invalid_argument(fmt::format("{}: a graph break's payload has {} bytes (at most {})", key.name,
                                               payload.size(), kMaxHostOpPayloadBytes)));
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].defined() || &inputs[i].context() != &tctx) {
        throw Error(invalid_argument(fmt::format("{}: input {} of a graph break ({}) is not a tensor of the trace",
                                                 key.name, i, description)));
      }
    }
    if (capture) capture->mark_unusable("the traced code has a graph break (a host op)");
    tctx.mark_step();  // the graph so far: every pending value, the op's inputs among them
    HostOp op;
    op.payload = std::move(payload);
    op.description = std::move(description);
    op.position = static_cast<uint32_t>(trace.segments.size());
    std::vector<BufferRef> bufs;
    for (const Tensor& t : inputs) {
      const DataRef& d = t.data();
      auto it = trace.origin.find(d->identity());
      if (it == trace.origin.end()) {
        throw Error(invalid_argument(fmt::format(
            "{}: a graph break ({}) reads tensor data that is not one of the function's arguments; pass it as an "
            "argument", key.name, op.description)));
      }
      op.inputs.push_back(it->second);
      bufs.push_back(read_value(d));
    }
    Result<std::vector<BufferRef>> outs = options.host_op(op.payload, bufs);
    if (!outs.is_ok()) throw Error(outs.status());
    const uint32_t h = static_cast<uint32_t>(trace.host_ops.size());
    std::vector<Tensor> result;
    for (uint32_t o = 0; o < outs->size(); ++o) {
      BufferRef& b = (*outs)[o];
      if (!b) throw Error(internal_error(fmt::format("{}: graph break {} ({}) gave no result {}", key.name, h, op.description, o)));
      op.output_types.push_back({b->dtype(), b->shape()});
      Tensor t = tctx.from_buffer(std::move(b));
      trace.origin.try_emplace(t.data()->identity(), ValueSource{ValueSource::Kind::kHostOutput, h, o, nullptr});
      result.push_back(std::move(t));
    }
    runtime->function_event(store::EventKind::kGraphBreak, key.name,
                            fmt::format("{} {}: {}", options.call_name, stats.calls - 1, op.description));
    trace.host_ops.push_back(std::move(op));
    return result;
  }

  // Records CompiledFunctionOptions::updates on the trace: each output that replaces an argument
  // is assigned to the argument's proxy, so the graph donates the argument's storage to it
  // (LazyContext::assign), unless donating is refused (see the header: a shape-polymorphic
  // trace, an output the graph does not compute, an argument passed twice or returned as it
  // is); `donated` receives the updates recorded. Errors: updates that do not fit the outputs.
  Status record_updates(LazyContext& tctx, const CallArgs& args, TraceArgs& targs, const std::vector<Tensor>& outputs,
                        bool capturing, std::vector<ArgumentUpdate>& donated) const {
    const std::vector<ArgumentUpdate>& updates = options.updates;
    for (size_t k = 0; k < updates.size(); ++k) {
      const ArgumentUpdate& u = updates[k];
      if (u.output >= outputs.size() || u.argument >= args.tensors.size() || !outputs[u.output].defined()) {
        return invalid_argument(fmt::format("{}: update {} names output {} and argument {}, but the function "
                                            "returned {} outputs of {} tensor arguments", key.name, k, u.output,
                                            u.argument, outputs.size(), args.tensors.size()));
      }
      for (size_t j = 0; j < k; ++j) {
        if (updates[j].output == u.output || updates[j].argument == u.argument) {
          return invalid_argument(fmt::format("{}: updates {} and {} name the same output or argument", key.name, j, k));
        }
      }
      const Tensor& value = outputs[u.output];
      Tensor& proxy = targs.tensors_[u.argument];
      const TensorType want{proxy.dtype(), proxy.peek_shape()}, got{value.dtype(), value.peek_shape()};
      if (want != got) {
        return invalid_argument(fmt::format("{}: output {} replaces {}, but it is {}, the argument {}", key.name,
                                            u.output, env().input_name(u.argument), type_to_string(got),
                                            type_to_string(want)));
      }
      if (capturing || value.is_materialized()) continue;
      const void* data = args.tensors[u.argument].data_ptr();
      bool shared = false;
      for (size_t j = 0; j < args.tensors.size(); ++j) shared |= j != u.argument && args.tensors[j].data_ptr() == data;
      for (size_t o = 0; o < outputs.size(); ++o) {
        shared |= o != u.output && outputs[o].is_materialized() && outputs[o].data_ptr() == data;
      }
      if (shared) continue;
      tctx.assign(proxy, value);
      donated.push_back(u);
    }
    return Status::ok();
  }

  // An argument assigned in place inside fn (Tensor::assign) would update only the trace's
  // proxy, never the caller's tensor, so once mode would differ from eager: refused (return the
  // new value and name it in CompiledFunctionOptions::updates). The proxy of an argument still
  // holds the caller's data unless it was assigned.
  Status check_no_argument_assigned(const CallArgs& args, const TraceArgs& targs) const {
    for (size_t i = 0; i < args.tensors.size(); ++i) {
      const Tensor& proxy = targs.tensors_[i];
      if (proxy.is_materialized() && proxy.data_ptr() == args.tensors[i].data_ptr()) continue;
      return invalid_argument(fmt::format(
          "{}: assign to argument {} inside a compiled function is not supported ({}): the "
          "caller's tensor would not be updated; return the new value and name it in "
          "CompiledFunctionOptions::updates (it then replaces the argument in place when the caller gives it up)",
          key.name, i, env().input_name(static_cast<uint32_t>(i))));
    }
    return Status::ok();
  }

  // ---- persistence ---------------------------------------------------------------------------

  // The store guard entries are written to: none if not persisting or read-only.
  store::GuardEntryStore* writable_store() const {
    store::GuardEntryStore* d = options.persist ? runtime->guard_entries() : nullptr;
    return d && !d->read_only() ? d : nullptr;
  }

  void save(GuardEntry& e) {
    store::GuardEntryStore* d = writable_store();
    if (!d) return;
    e.db_index = next_db_index++;
    Status st = d->put_function_entry(key, e.db_index, encode_guard_entry(e));
    if (!st.is_ok()) {
      e.db_index = -1;
      runtime->add_warning(fmt::format("could not store a guard entry of '{}': {}", key.name, st.message()));
    }
  }

  void load() {
    store::GuardEntryStore* d = options.persist ? runtime->guard_entries() : nullptr;
    if (!d) return;
    Result<std::vector<store::StoredFunctionEntry>> rows = d->function_entries(key);
    if (!rows.is_ok()) {
      runtime->add_warning(fmt::format("could not read the guard entries of '{}': {}", key.name, rows.status().message()));
      return;
    }
    for (store::StoredFunctionEntry& row : *rows) {
      next_db_index = std::max(next_db_index, row.entry + 1);
      Result<GuardEntry> e = row.corrupt ? Result<GuardEntry>(corruption("stored guard entry failed its checksum"))
                                         : decode_guard_entry(row.blob);
      if (!e.is_ok()) {
        drop_stored(row.entry, e.status().message());
        continue;
      }
      e->db_index = row.entry;
      e->outputs_verified = false;
      // Without automatic dynamism, an entry made dynamic by it (in a run that had it) is not
      // used: each new size recompiles, as it would on a fresh cache. Static entries, and dynamic
      // ones whose dims are all marked dynamic here, serve as usual. The stored row stays.
      if (!options.automatic_dynamic && e->dynamic &&
          !std::all_of(e->dynamic->dims.begin(), e->dynamic->dims.end(), [this](const DynamicDim& dim) {
            return std::find(options.dynamic_dims.begin(), options.dynamic_dims.end(), dim) != options.dynamic_dims.end();
          })) {
        continue;
      }
      entries.push_back(std::move(*e));
    }
  }

  // An entry that could not be used: a `corrupt` event for a malformed entry or cache row, a
  // `miss` event for anything else (say, its graph is no longer in the cache). Its stored row is
  // removed unless the failure may pass (a locked or unreadable database).
  void drop_entry(const GuardEntry& e, const Status& why) {
    const StatusCode code = why.code();
    if (code == StatusCode::kCorruption) {
      drop_stored(e.db_index, why.message());
      return;
    }
    const bool permanent = code == StatusCode::kNotFound;
    runtime->function_event(store::EventKind::kMiss, key.name,
                            fmt::format("entry {} could not be used ({}); the call traces{}", e.db_index,
                                        why.message(), permanent ? "" : ", the stored entry is kept"));
    if (store::GuardEntryStore* d = writable_store(); d && permanent && e.db_index >= 0) (void)d->remove_function_entry(key, e.db_index);
  }

  void drop_stored(int64_t db_index, const std::string& why) {
    runtime->function_event(store::EventKind::kCorrupt, key.name, fmt::format("entry {}: {}", db_index, why));
    if (store::GuardEntryStore* d = writable_store()) (void)d->remove_function_entry(key, db_index);
  }

  void flush_hits() {
    store::GuardEntryStore* d = writable_store();
    for (GuardEntry& e : entries) {
      if (e.unflushed_hits == 0 || e.db_index < 0) continue;
      if (d && d->add_function_hits(key, e.db_index, e.unflushed_hits).is_ok()) e.unflushed_hits = 0;
    }
  }
};

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

Result<std::optional<std::vector<DataRef>>> CompiledFunction::replay_only(LazyContext& ctx, const CallArgs& args) {
  Impl& i = *impl_;
  for (const Tensor& t : args.tensors) {
    if (!t.defined() || !t.is_materialized() || &t.context() != &ctx) return std::optional<std::vector<DataRef>>();
  }
  if (i.dynamic_scalar.size() != args.scalars.size() || i.stats.fell_back_to_lazy) {
    return std::optional<std::vector<DataRef>>();
  }
  Impl::ScopedRuntime scope(i);
  i.last_entry = -1;
  i.unkept_note.clear();
  LookupMisses misses;
  if (std::optional<std::vector<DataRef>> out = i.look_up_and_replay(args, misses)) {
    ++i.stats.calls;
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
  i.last_entry = -1;
  return true;
}

}  // namespace tracecache
