// The state of a CompiledFunction (compiled_function.h) and its call's phases, one file each:
// the call (compiled_function.cc: look up, else trace or fall back), the lookup and its
// recompile reasons (compiled_function_lookup.cc), the replay of an entry
// (compiled_function_replay.cc), the trace of `fn` into a new entry (compiled_function_trace.cc)
// and the entries' persistence in the cache (compiled_function_store.cc). Internal to
// replay/engine/.
// Thread-safety: one Impl is one CompiledFunction's, used by one thread at a time (the
// function's own rule). Errors: as compiled_function.h says; a stored entry that cannot be used
// is a miss (dropped), never an error. Ownership: the Impl owns its entries and options; it
// borrows the Runtime, which outlives it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <xxhash.h>

#include "replay/engine/compiled_function.h"
#include "replay/guards/guard_entry.h"
#include "replay/guards/shape_specialization.h"

namespace tracecache {

namespace compiled_detail {

// The one call into the Runtime that runs an executable on device data, for a replay and for
// each graph of a trace.
inline Result<std::vector<DataRef>> run_executable(Runtime& runtime, const Executable& exe,
                                                   std::vector<DataRef>& params) {
  return runtime.run_or_fall_back(exe, params);
}

// A value as a recompile reason shows it: "3", "[1, 2, 3]", or for more than 8 elements its type
// and checksum.
std::string value_preview(const HostBuffer& b);

}  // namespace compiled_detail

struct CompiledFunction::Impl {
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

  TracedFn fn;
  Runtime* runtime;
  CompiledFunctionOptions options;
  uint64_t options_digest = 0;
  std::string options_label;  // readable form of options_digest: "sim:h100"
  store::FunctionKey key;  // key.name: the function's name
  std::vector<bool> dynamic_scalar;
  std::vector<GuardEntry> entries;
  // Changed whenever an entry is added to or dropped from `entries` (the replay memo names an
  // entry by index, valid while this is unchanged).
  uint64_t entries_version = 0;
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

  Result<std::vector<DataRef>> call(const CallArgs& args);

  // Look up: the first entry whose guards hold and that replays (value guards between segments
  // and a dynamic entry's template are checked while replaying). An entry that cannot be used
  // is dropped (a miss, never an error; invariants 5 and 6). nullopt if no entry served.
  std::optional<std::vector<DataRef>> look_up_and_replay(const CallArgs& args, LookupMisses& misses);

  // The replay memo of replay_only() (compiled_function_memo.cc): what the guards of the entry
  // that served a call established about the caller's state (the first arguments, which the
  // caller passes again call after call: tracecache.torch passes a module's state, the same
  // handles), so that a call with the same state checks and gathers only the other arguments.
  // It holds the state tensors (their identities stay theirs) and the segment's parameter list
  // with their data in place; the other arguments' slots are emptied after each call, so no
  // call's own arguments outlive it.
  struct ReplayMemo {
    bool valid = false;
    size_t entry = 0;                  // index into `entries` ...
    uint64_t entries_version = 0;      // ... while entries_version is this
    const LazyContext* ctx = nullptr;  // the context of the held tensors ...
    uint64_t assignments = 0;          // ... and its assignments() when made: no data changed since
    std::vector<Tensor> held;          // per argument: the repeated tensor, or undefined
    std::vector<uint32_t> others;      // the arguments not held, checked on every call
    std::vector<const void*> held_data;  // the held tensors' data identities, sorted
    std::vector<DataRef> params;       // the segment's parameters; the others' slots empty
    std::vector<std::pair<uint32_t, uint32_t>> other_params;  // (parameter, argument) of the others
  };
  ReplayMemo memo;
  // The call through the memo: nullopt when the memo does not apply to `args` (then the full
  // lookup runs), else the outcome as replay_only() returns it.
  std::optional<Result<std::optional<std::vector<DataRef>>>> replay_memoized(LazyContext& ctx, const CallArgs& args);
  // After a replay_only() call that entry `last_entry` served through the full lookup: the memo
  // for the next calls, holding the first `state` tensors of `args` (none: no memo).
  void remember(LazyContext& ctx, const CallArgs& args, size_t state);

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
  Closest closest_entry(const CallArgs& args) const;

  static std::string recompile_reason(const Closest& closest, const LookupMisses& misses);

  void record_recompile(std::string reason);

  // Trace (the first call, or a recompile when `reason` is set): a new entry, dynamic in
  // `dynamic` if the trace allows; the recompile is recorded with what became of the dims.
  Result<std::vector<DataRef>> trace_new_entry(const CallArgs& args, std::vector<DynamicDim> dynamic,
                                                 std::string reason);

  // Fall back: past the recompile limit, every call traces (lazy mode), said once.
  Result<std::vector<DataRef>> fall_back(const CallArgs& args);

  // ---- replay -------------------------------------------------------------------------------

  // Clears the replay's parameter list on every way out (its handles must not outlive the call).
  struct ClearScratch {
    std::vector<DataRef>& scratch;
    ~ClearScratch() { scratch.clear(); }
  };

  // The outputs are what the entry promises (its recorded types; a dynamic entry's sizes follow
  // the call), whatever a stored entry routes: never a value of another type.
  static bool as_promised(const GuardEntry& e, size_t o, const DataRef& b);
  static Status not_as_promised(const GuardEntry& e, size_t o, const DataRef& b);
  // Outputs taken as they are from the run (a replay's last segment): each as promised.
  static Status check_promised(const GuardEntry& e, const std::vector<DataRef>& outputs);

  // Whether entry `e` replays through replay_direct(): static, one segment whose executable is at
  // hand and whose parameters are all arguments or constants, no value guards, no argument
  // updated in place (so nothing donated), the segment's outputs returned as they are, in order,
  // and its outputs verified (replay_verified). Asked once, after the first replay() of `e`
  // succeeded; none of it changes later. Most entries: a traced function that reads no value
  // mid-trace.
  bool direct_replay_applies(const GuardEntry& e) const;

  // replay() of an entry direct_replay_applies() accepted, without the routing it does not need:
  // one run of the segment's executable on the call's arguments, its outputs checked as replay()
  // checks them (same errors). On the mlp fixture replay()'s general machinery was about a sixth
  // of once mode's host overhead (bench/results/host-overhead-footprint-2026-11-28.md).
  Result<std::optional<std::vector<DataRef>>> replay_direct(GuardEntry& e, const CallArgs& args);
  // A direct run's outcome as replay_direct() returns it: `outs` when they are what `e`
  // promises, else why the entry does not fit its executable (kCorruption).
  static Result<std::optional<std::vector<DataRef>>> direct_outputs(const GuardEntry& e, Result<std::vector<DataRef>> outs);

  // replay(), and for an entry loaded from the cache the first time, verify_outputs().
  // The types to verify are found before the replay, which may give arguments up.
  Result<std::optional<std::vector<DataRef>>> replay_verified(GuardEntry& e, const CallArgs& args, std::string* why);

  // The segments entry `e` runs for this call: its own, or a dynamic entry's specialization at
  // this call's sizes (empty with `why` set when its template does not apply).
  Result<std::span<Segment>> segments_for(GuardEntry& e, const CallArgs& args, std::string* why);

  // Runs entry `e`. Returns nullopt (not an error) if a value guard between segments fails or
  // a dynamic entry's template does not apply (then `why` says why).
  Result<std::optional<std::vector<DataRef>>> replay(GuardEntry& e, const CallArgs& args, std::string* why);

  // Whether `read` is the value a guard expects (hash); if not, `value_change` says which value
  // (`what`) changed from what (`traced`, the preview kept when traced; empty for a stored entry).
  bool value_matches(const HostBuffer& read, const XXH128_hash_t& expected, const std::string& what,
                     const std::string& traced);

  std::string input_label(const ValueSource& v) const;

  // Runs host op `h` of entry `e` during a replay (its inputs are routed, their values computed).
  // False (not an error) when its results are not of the types traced or a value guard on them
  // fails (`value_change` says which); an error when the runner fails or the entry cannot be run.
  template <typename ValueOf, typename Routed>
  Result<bool> run_host_op(const GuardEntry& e, size_t h, const ValueOf& value_of, const Routed& routed,
                           std::vector<std::vector<DataRef>>& host_out);

  // Whether parameter `p` of a segment, argument `a` of the call, is to be given to its run to
  // donate: the entry updates `a`, the graph donates `p`, and the call still holds `a` (whether
  // the run may overwrite it is the Runtime's rule: no other owner).
  bool takes_to_donate(const GuardEntry& e, const Executable& exe, uint32_t p, uint32_t a) const;

  // Compares a stored entry's replayed outputs with the types `fn` returns for the call
  // (CompiledFunctionOptions::output_types). kCorruption on a mismatch.
  Status verify_outputs(const std::vector<DataRef>& outputs, const std::vector<TensorType>& want) const;

  // ---- tracing ------------------------------------------------------------------------------

  // Traces `fn` on `args`; appends an entry unless `keep` is false, dynamic in `dynamic_dims`
  // if it can be. Returns the outputs; `note` (optional) receives what became of the dims.
  Result<std::vector<DataRef>> trace(const CallArgs& args, bool keep, std::vector<DynamicDim> dynamic_dims = {},
                                       std::string* note = nullptr);

  // TraceArgs::host_op during a trace: ends the graph so far (a segment), runs the op through the
  // runner on its inputs' host bytes, records it in `trace` and returns its results as tensors of
  // the trace. Throws Error (see TraceArgs::host_op).
  std::vector<Tensor> trace_host_op(LazyContext& tctx, TraceRecord& trace, TraceTemplate* capture, std::string payload,
                                    std::span<const Tensor> inputs, std::string description);

  // Records CompiledFunctionOptions::updates on the trace: each output that replaces an argument
  // is assigned to the argument's proxy, so the graph donates the argument's storage to it
  // (LazyContext::assign), unless donating is refused (see the header: a shape-polymorphic
  // trace, an output the graph does not compute, an argument passed twice or returned as it
  // is); `donated` receives the updates recorded. Errors: updates that do not fit the outputs.
  Status record_updates(LazyContext& tctx, const CallArgs& args, TraceArgs& targs, const std::vector<Tensor>& outputs,
                        bool capturing, std::vector<ArgumentUpdate>& donated) const;

  // An argument assigned in place inside fn (Tensor::assign) would update only the trace's
  // proxy, never the caller's tensor, so once mode would differ from eager: refused (return the
  // new value and name it in CompiledFunctionOptions::updates). The proxy of an argument still
  // holds the caller's data unless it was assigned.
  Status check_no_argument_assigned(const CallArgs& args, const TraceArgs& targs) const;

  // ---- persistence ---------------------------------------------------------------------------

  // The store guard entries are written to: none if not persisting or read-only.
  store::GuardEntryStore* writable_store() const;

  void save(GuardEntry& e);

  void load();

  // Entry `index`, which could not be used, leaves `entries`: a `corrupt` event for a malformed
  // entry or cache row, a `miss` event for anything else (say, its graph is no longer in the
  // cache). Its stored row is removed unless the failure may pass (a locked or unreadable
  // database).
  void drop_entry(size_t index, const Status& why);

  void drop_stored(int64_t db_index, const std::string& why);

  void flush_hits();
};

}  // namespace tracecache
