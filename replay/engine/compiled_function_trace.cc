// A CompiledFunction's trace of `fn`: recorded through the Runtime segment by segment, its
// host ops run, its value reads guarded, its updates donated, and (kept) a new guard entry
// (compiled_function_impl.h).
#include "replay/engine/compiled_function_impl.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_set>
#include "capture/ir/trace_template.h"
#include "replay/guards/shape_specialization.h"

namespace tracecache {

namespace {

using compiled_detail::run_executable;
using compiled_detail::value_preview;

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

}  // namespace

// Traces `fn` on `args`; appends an entry unless `keep` is false, dynamic in `dynamic_dims`
// if it can be. Returns the outputs; `note` (optional) receives what became of the dims.
Result<std::vector<DataRef>> CompiledFunction::Impl::trace(const CallArgs& args, bool keep, std::vector<DynamicDim> dynamic_dims,
                                     std::string* note) {
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
    ++entries_version;
    last_entry = static_cast<int64_t>(entries.size()) - 1;
  } else {
    unkept_note = std::move(entry_note);
  }
  return result;
}

// TraceArgs::host_op during a trace: ends the graph so far (a segment), runs the op through the
// runner on its inputs' host bytes, records it in `trace` and returns its results as tensors of
// the trace. Throws Error (see TraceArgs::host_op).
std::vector<Tensor> CompiledFunction::Impl::trace_host_op(LazyContext& tctx, TraceRecord& trace, TraceTemplate* capture, std::string payload,
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
Status CompiledFunction::Impl::record_updates(LazyContext& tctx, const CallArgs& args, TraceArgs& targs, const std::vector<Tensor>& outputs,
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
Status CompiledFunction::Impl::check_no_argument_assigned(const CallArgs& args, const TraceArgs& targs) const {
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

}  // namespace tracecache
