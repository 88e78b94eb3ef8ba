// Trace once: a C++ function of tensors (and scalars) compiled into guarded cache entries.
//
//   CompiledFunction f("mlp_step", fn, &runtime, options);
//   std::vector<Tensor> out = f(ctx, {.tensors = {x, w}, .scalars = {0.1}}).value_or_throw();
//
// The first call traces `fn` on lazy tensors once, derives guards from the call's arguments,
// compiles each graph (through the Runtime, so the graph cache and its audit apply) and keeps a
// guard entry. Later calls check the entries' guards in order; when one holds, its executables
// run directly and `fn` is not called. When none holds, `fn` is traced again (a recompile) and
// the reason is recorded, naming each failed guard of the closest entry with expected vs
// actual, e.g. "input 0 'x': size of dim 0 expected 8, actual 16". Past `recompile_limit`
// recompiles the function falls back to lazy mode (trace every call) with one warning.
//
// Guards (docs/architecture.md invariant 3: every input property the graphs depend on is guarded):
//  - per tensor argument: dtype, rank, sizes, contiguity, device;
//  - per scalar argument: its exact value, unless declared dynamic (then it is a rank-0 f32
//    graph input read with TraceArgs::scalar_tensor);
//  - aliasing: which tensor arguments share data;
//  - the options that change lowering (canonicalization options, backend and its options);
//  - values read inside `fn` (item(), to_vector(), buffer()): the trace is split there into
//    segments (a value that is still pending is materialized first), and the contents of every
//    value `fn` read are guarded: an argument's before anything runs, a segment's or a host op's
//    result as soon as it is computed during replay, before anything after it runs; a mismatch
//    falls back to tracing the call (a second path: a new entry, the first keeps replaying).
//    Values materialized without being read (mark_step() mid-function, a host op's inputs) are
//    not guarded: `fn` cannot have branched on them.
//
// Graph breaks (host ops). `fn` may hand a step to the caller's own framework with
// TraceArgs::host_op(payload, inputs): an op no backend has (torch's cumsum), run by
// CompiledFunctionOptions::host_op on the inputs' host bytes. The graph so far ends there (every
// pending value is materialized: a segment), the op runs, and its results are tensors of the
// trace again, feeding later graphs. The entry records the op (payload, where its inputs come
// from, its results' types) and a replay runs it at the same point between the segments, on that
// call's values, without tracing. Each host op is a `graph_break` event when traced (not on
// replays). A host op's results must have the types they had when traced: otherwise the entry
// does not serve the call (as a failed value guard), since the graphs after it were traced for
// those types. An entry with host ops stays static (no dynamic dims) and replays through the
// general path.
// A guard set is a flat list of checks; checking allocates nothing (replay/guards/guard_set.h).
//
// Dynamic dims (shape polymorphism). A dim marked dynamic (CompiledFunctionOptions::
// dynamic_dims, mark_dynamic()), or, with automatic_dynamic, a dim whose size alone made the
// closest entry fail, is not guarded by its size in the next entry but by a range check
// (1 <= size <= kMaxDynamicSize) and by relation checks (dynamic dims that were equal when
// traced must stay equal). Such an entry keeps the trace template (capture/ir/trace_template.h):
// a call with new sizes re-infers the template at those sizes (no call of `fn`, no tracing),
// which gives the graph for the sizes; it is compiled (or found in the cache) and kept per size
// in the entry (replay/guards/shape_specialization.h). The template records the shapes `fn` read; where a read shape would differ at
// the new sizes the entry does not apply and the call recompiles, saying so. A trace that read
// a value (more than one segment) cannot be a template: its entry stays static.
//
// Donation (in-place updates of arguments, JAX's donate_argnums). CompiledFunctionOptions::
// updates names outputs that are the new values of arguments ("output k replaces argument i"),
// as an optimizer step returns its updated params. The trace records each as a donation in the
// graph (LazyContext::assign: output k may reuse argument i's storage; part of the graph's key)
// and the guard entry records which arguments its graphs update, so a replay, also in a new
// process, donates too. A replay gives an updated argument's storage to the backend when the
// caller passed the argument's only reference: the call took its CallArgs by rvalue and no
// other tensor shares the data (the rule of Runtime::run_on_backend); the backend then writes
// output k in place. Otherwise output k is a fresh buffer and the argument keeps its value.
// The values are identical either way; only device memory differs. `fn` returns the new value
// as output k as usual and never assign()s an argument itself (refused: the caller's tensor
// would not change). No donation is recorded (the values are the same, the memory is not
// saved) for an argument passed twice (aliasing), for an argument that another output returns
// as it is, for an output that is not computed by the graph (an argument or constant), and in
// a trace that makes dims dynamic (its template cannot carry a donation; the entry records
// none even when the template then proves unusable and the entry stays static, as for a
// training step whose gradient rules read shapes). The trace itself (the first
// call, a recompile, lazy fallback) never donates: the trace's proxies hold the arguments.
//
// `fn` must build its result only from its arguments (and constants it creates): tensor data
// captured from elsewhere is an error at trace time, as it would silently become a constant.
// Thread-safety: one thread at a time. Ownership: the runtime (and metrics) must outlive this.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "capture/trace/tensor.h"
#include "replay/guards/call_args.h"
#include "replay/guards/guard_set.h"
#include "replay/engine/runtime.h"
#include "replay/engine/toolkit_version.h"

namespace tracecache {

// What `fn` sees while it is traced.
class TraceArgs {
 public:
  size_t num_tensors() const { return tensors_.size(); }
  size_t num_scalars() const { return scalars_.size(); }
  const Tensor& tensor(size_t i) const { return tensors_.at(i); }
  // The value of static scalar `i` (guarded). Throws Error for a dynamic scalar.
  double scalar(size_t i) const;
  // Dynamic scalar `i` as a rank-0 f32 graph input. Throws Error for a static scalar.
  const Tensor& scalar_tensor(size_t i) const;
  // A graph break: runs the op `payload` describes on `inputs` through
  // CompiledFunctionOptions::host_op (see the header comment) and returns its results as tensors
  // of this trace. `description` names it in events and messages ("aten.cumsum.default at
  // model.py:6"). Throws Error (kInvalidArgument) when the function has no host_op runner, an
  // input is not a tensor of this trace or is data the function was not given, or the payload
  // is larger than kMaxHostOpPayloadBytes; the runner's error as it is.
  std::vector<Tensor> host_op(std::string payload, std::span<const Tensor> inputs, std::string description) const;

 private:
  friend class CompiledFunction;
  std::vector<Tensor> tensors_;
  std::vector<double> scalars_;
  std::vector<Tensor> scalar_tensors_;  // defined for dynamic scalars only
  std::function<std::vector<Tensor>(std::string, std::span<const Tensor>, std::string)> host_op_;
};

// Runs a host op (a graph break; see the header comment) on its inputs' host bytes: the results,
// or an error, which fails the call (a trace) or makes the entry unusable for it (a replay: the
// call traces, and the trace's run of the op reports the error). Called with no lock of
// tracecache's held beyond the compiled function's own (one thread at a time).
using HostOpRunner = std::function<Result<std::vector<BufferRef>>(const std::string& payload,
                                                                   std::span<const BufferRef> inputs)>;

using TracedFn = std::function<std::vector<Tensor>(LazyContext& ctx, const TraceArgs& args)>;

// Guard entries persist in the runtime's guard entry store (Runtime::guard_entries(): the cache
// database, or any store::GuardEntryStore), keyed by function name + user version + the toolkit
// version (kToolkitVersion, replay/engine/toolkit_version.h), so a new process with a warm cache runs
// its first call with zero traces and zero compiles. The user version must change whenever
// `fn`'s code does: entries are only as sound as that promise (tracecache cannot see `fn`'s
// code).
// Stored entries are untrusted (invariant 5 in docs/architecture.md): each is checked on load
// (bounds, a complete guard set, routes, recorded output types), against each executable when it
// is fetched, and its replayed outputs against its recorded types (and against
// CompiledFunctionOptions::output_types, when set, on first use). A failed check is a `corrupt`
// event; any other failure to use an entry (its graph or executable gone from the cache) is a
// `miss` event; either way the entry is dropped and the call traces: never an error, never a
// wrong result. Stored entries are decoded and checked by replay/guards/guard_entry_codec.h
// (validate_guard_entry).

struct CompiledFunctionOptions {
  std::string user_version;  // identifies fn's code; part of the persistent key
  bool persist = true;       // store and load guard entries (needs a runtime with a guard entry store)
  std::vector<size_t> dynamic_scalars;  // scalar argument indices fed as graph inputs
  int recompile_limit = 8;
  // Dims that are dynamic from the first trace on (see the header comment).
  std::vector<DynamicDim> dynamic_dims;
  // Dims that never become dynamic (automatic_dynamic leaves them static).
  std::vector<DynamicDim> static_dims;
  // Make a dim dynamic when its size alone failed the closest entry's guards. When false, stored
  // entries that are dynamic in dims not listed in dynamic_dims are not loaded (they were made
  // by automatic dynamism in another run).
  bool automatic_dynamic = true;
  CanonicalizeOptions canonicalize;     // changes lowering: guarded
  std::vector<std::string> input_names; // for guard messages ("input 0 'x'"); optional
  // Optional: the types of the outputs `fn` returns for `args`, found without running it (for
  // a trace program, its inference rules). When set, the first replay of every entry loaded
  // from the cache compares its outputs with these; a stored entry that routes its outputs
  // differently (even consistently with the types it records) is then a `corrupt` event and
  // the call traces. An error from it counts as a failure to use the entry (a miss).
  std::function<Result<std::vector<TensorType>>(const CallArgs& args)> output_types;
  // Outputs that replace arguments (donation, see the header comment). Each output and each
  // argument at most once; output k and argument i must have the same type (else the trace is
  // an error).
  std::vector<ArgumentUpdate> updates;
  // For messages: the scalar arguments' names ("scalar 0 'N'"; optional), and what a call is
  // called in the recompile events the audit log keeps ("step 3: entry 0: ...").
  std::vector<std::string> scalar_names{};
  std::string call_name = "call";
  // Optional: called after each trace of `fn` (which may set what it returns); the result is
  // stored with the entry the trace makes (also in the cache) and returned by last_note() for
  // every call that entry serves. For a caller's own record of a traced call that the graphs do
  // not hold (tracecache.torch keeps the Python structure of the outputs there). At most
  // kMaxGuardEntryNoteBytes (replay/guards/guard_entry_codec.h), else the trace fails.
  std::function<std::string()> entry_note;
  // Runs the host ops `fn` asks for (TraceArgs::host_op) and replays them; a function without
  // one cannot have graph breaks.
  HostOpRunner host_op;
  // The program the function belongs to (a Python module, "torchvision.models.resnet"): while
  // it runs, the runtime's events and the graphs it compiles are scoped to this program and the
  // function's name (Runtime::swap_scope). Empty: the runtime's own scope.
  std::string program;
};

// What a compiled function did in this process; derived from its entries and counters.
struct FunctionStats {
  int64_t calls = 0;
  int64_t traces = 0;          // calls that ran fn
  int64_t guard_checks = 0;    // entries checked
  int64_t guard_failures = 0;  // entries whose guards failed
  int64_t recompiles = 0;      // traces after the first
  int64_t specializations = 0; // dynamic entries instantiated at new sizes (no trace)
  int64_t host_op_runs = 0;    // host ops run by replays (graph breaks served without a trace)
  int64_t memoized_replays = 0;  // replay_only calls whose repeated arguments the memo vouched for
  bool fell_back_to_lazy = false;
  std::vector<int64_t> hits_per_entry;        // one per current entry, in lookup order
  std::vector<std::string> recompile_reasons;  // one line per recompile, all failures joined
};

class CompiledFunction {
 public:
  CompiledFunction(std::string name, TracedFn fn, Runtime* runtime,
                   CompiledFunctionOptions options = {});
  ~CompiledFunction();
  CompiledFunction(const CompiledFunction&) = delete;
  CompiledFunction& operator=(const CompiledFunction&) = delete;

  // Runs the function: replays a guard entry, or traces. Outputs are materialized tensors of
  // `ctx`. Errors: argument problems (a pending tensor argument, a tensor from another context)
  // and errors thrown by `fn` are returned as Status.
  Result<std::vector<Tensor>> operator()(LazyContext& ctx, const CallArgs& args);
  // The same, giving the arguments up: a replay may donate the storage of an argument that
  // CompiledFunctionOptions::updates names when `args` holds the only reference to it; such an
  // argument's tensor in `args` is then left undefined (its data became output k). Every other
  // argument stays in `args`. Errors: as above; and when a run fails after it was given an
  // argument to overwrite, an error (kInternal) saying so, never a retrace or a fallback over a
  // value that may be half updated: that argument is left undefined in `args`.
  Result<std::vector<Tensor>> operator()(LazyContext& ctx, CallArgs&& args);
  // The same two calls, returning each output as its device data (the handle the output tensor
  // would hold) instead of a tensor of `ctx`: for a caller that only reads the values
  // (ProgramSession), which then makes no tensor per output. Errors: as above.
  Result<std::vector<DataRef>> call_data(LazyContext& ctx, const CallArgs& args);
  Result<std::vector<DataRef>> call_data(LazyContext& ctx, CallArgs&& args);

  // The lookup and replay of a call without a trace: the outputs when an entry's guards hold
  // and it replays (counted as a call, as operator() would), nullopt when the call would trace
  // (no entry holds, a value guard fails, the function fell back to lazy mode, or an argument is
  // not a materialized tensor of `ctx`; nothing is counted as a call then). For a caller with a
  // faster path of its own for replays (tracecache.torch), which makes the full call on nullopt.
  // `state`: the number of leading tensors of `args` that are the caller's state, which it
  // passes again call after call as the same handles (a module's parameters). They are checked
  // once: the function remembers what the guards of the entry that served established about
  // them and holds them (compiled_function_memo.cc) until a call passes other handles there;
  // the other arguments are checked on every call and never held. Results are the same as
  // with `state` 0, which remembers nothing.
  // REQUIRES: `ctx` outlives this function, or no call since the context's last call of it.
  // Errors: as operator()'s replays (a run that failed after it was given an argument).
  Result<std::optional<std::vector<DataRef>>> replay_only(LazyContext& ctx, const CallArgs& args, size_t state = 0);

  // The note (CompiledFunctionOptions::entry_note) of the entry that served or was made by the
  // last successful call; after a call that traced without keeping an entry (lazy fallback),
  // that trace's note; empty before the first call and after a failed one. The reference stays
  // valid until the next call.
  const std::string& last_note() const;

  // Marks dim `dim` of tensor argument `input` dynamic for the traces that follow.
  void mark_dynamic(size_t input, int dim);
  // Marks it static: automatic_dynamic never makes it dynamic (a new size recompiles), and a
  // mark_dynamic of it is undone.
  void mark_static(size_t input, int dim);
  // Drops the entry that served or was made by the last call (from this process and the cache),
  // with a `miss` event saying `why`: for a caller that found the entry's results wrong for its
  // purpose (tracecache.torch checks a shape specialization against eager PyTorch once). False
  // when there is no such entry.
  bool discard_last_entry(const std::string& why);

  const std::string& name() const;
  // Counters of this process; recompiles and hits_per_entry are derived from the recompile
  // reasons and the current entries when this is called. The reference stays valid while this
  // function lives; its contents change with later calls.
  const FunctionStats& stats() const;
  size_t num_entries() const;
  // Adds the hits since the last flush to the stored entries (also done on destruction).
  void flush();
  // Index of the first entry whose guards hold for `args` (value guards between segments are
  // checked during replay, not here), or -1. Allocates nothing. For tools and benchmarks.
  int find_entry(const CallArgs& args) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Metrics counters added by compiled functions.
namespace counters {
inline constexpr std::string_view kGuardChecks = "guard_checks";
inline constexpr std::string_view kGuardFailures = "guard_failures";
inline constexpr std::string_view kRecompiles = "recompiles";
inline constexpr std::string_view kSpecializations = "shape_specializations";
}  // namespace counters

// The guard checks timed into timers::kGuardCheck: a function's first kTimedGuardChecks, then one
// in kGuardCheckSamplePeriod, and all of them while a SpanObserver watches the metrics (a
// timeline). counters::kGuardChecks counts every check.
inline constexpr int64_t kTimedGuardChecks = 64;
inline constexpr int64_t kGuardCheckSamplePeriod = 64;

}  // namespace tracecache
