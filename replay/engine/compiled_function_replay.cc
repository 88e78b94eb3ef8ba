// A CompiledFunction entry's replay: its segments run on the call's arguments, its value guards
// and host ops checked and run between them, its outputs routed and checked as promised
// (compiled_function_impl.h).
#include "replay/engine/compiled_function_impl.h"

#include <fmt/format.h>

#include <algorithm>
#include <span>
#include "replay/guards/guard_entry_codec.h"
#include "replay/guards/shape_specialization.h"

namespace tracecache {

namespace {

using compiled_detail::run_executable;

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

}  // namespace

namespace compiled_detail {

std::string value_preview(const HostBuffer& b) {
  constexpr int64_t kShown = 8;
  if (b.numel() > kShown) return fmt::format("{} (checksum {})", type_to_string({b.dtype(), b.shape()}), b.checksum());
  std::vector<std::string> items;
  for (int64_t i = 0; i < b.numel(); ++i) items.push_back(fmt::format("{}", b.element_as_double(i)));
  if (b.shape().rank() == 0 && items.size() == 1) return items[0];
  return fmt::format("[{}]", fmt::join(items, ", "));
}

}  // namespace compiled_detail

using compiled_detail::value_preview;

// The outputs are what the entry promises (its recorded types; a dynamic entry's sizes follow
// the call), whatever a stored entry routes: never a value of another type.
bool CompiledFunction::Impl::as_promised(const GuardEntry& e, size_t o, const DataRef& b) {
  if (!b) return false;
  const TensorType& promised = e.output_types[o];
  return b->dtype() == promised.dtype &&
         (e.dynamic ? b->shape().rank() == promised.shape.rank() : b->shape() == promised.shape);
}

Status CompiledFunction::Impl::not_as_promised(const GuardEntry& e, size_t o, const DataRef& b) {
  if (!b) return corruption("guard entry returns an argument it gave up to update in place");
  return corruption(fmt::format("guard entry output {} is recorded as {}, the replay gave {}", o,
                                type_to_string(e.output_types[o]), type_to_string({b->dtype(), b->shape()})));
}

// Outputs taken as they are from the run (a replay's last segment): each as promised.
Status CompiledFunction::Impl::check_promised(const GuardEntry& e, const std::vector<DataRef>& outputs) {
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
bool CompiledFunction::Impl::direct_replay_applies(const GuardEntry& e) const {
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
Result<std::optional<std::vector<DataRef>>> CompiledFunction::Impl::replay_direct(GuardEntry& e, const CallArgs& args) {
  const Segment& seg = e.segments[0];
  ClearScratch clear_scratch{scratch};
  scratch.clear();
  for (const ValueSource& v : seg.params) {
    scratch.push_back(v.kind == ValueSource::Kind::kInput ? args.tensors[v.a].data() : v.constant);
  }
  Result<std::vector<DataRef>> outs = run_executable(*runtime, *seg.exe, scratch);
  scratch.clear();
  return direct_outputs(e, std::move(outs));
}

Result<std::optional<std::vector<DataRef>>> CompiledFunction::Impl::direct_outputs(const GuardEntry& e,
                                                                                 Result<std::vector<DataRef>> outs) {
  if (!outs.is_ok()) return corruption("guard entry does not fit its executable: " + outs.status().message());
  if (outs->size() != e.outputs.size()) return corruption("guard entry routes a value that does not exist");
  if (Status promised = check_promised(e, *outs); !promised.is_ok()) return promised;
  return std::optional<std::vector<DataRef>>(std::move(*outs));
}

// replay(), and for an entry loaded from the cache the first time, verify_outputs().
// The types to verify are found before the replay, which may give arguments up.
Result<std::optional<std::vector<DataRef>>> CompiledFunction::Impl::replay_verified(GuardEntry& e, const CallArgs& args, std::string* why) {
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
Result<std::span<Segment>> CompiledFunction::Impl::segments_for(GuardEntry& e, const CallArgs& args, std::string* why) {
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
Result<std::optional<std::vector<DataRef>>> CompiledFunction::Impl::replay(GuardEntry& e, const CallArgs& args, std::string* why) {
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
bool CompiledFunction::Impl::value_matches(const HostBuffer& read, const XXH128_hash_t& expected, const std::string& what,
                   const std::string& traced) {
  if (XXH128_isEqual(value_hash(read), expected)) return true;
  value_change = fmt::format("{}: expected {}, actual {}", what,
                             traced.empty() ? std::string("the value traced (not kept in a stored entry)") : traced,
                             value_preview(read));
  return false;
}

std::string CompiledFunction::Impl::input_label(const ValueSource& v) const {
  return v.kind == ValueSource::Kind::kDynamicScalar ? fmt::format("scalar {}", v.a) : env().input_name(v.a);
}

// Runs host op `h` of entry `e` during a replay (its inputs are routed, their values computed).
// False (not an error) when its results are not of the types traced or a value guard on them
// fails (`value_change` says which); an error when the runner fails or the entry cannot be run.
template <typename ValueOf, typename Routed>
Result<bool> CompiledFunction::Impl::run_host_op(const GuardEntry& e, size_t h, const ValueOf& value_of, const Routed& routed,
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
bool CompiledFunction::Impl::takes_to_donate(const GuardEntry& e, const Executable& exe, uint32_t p, uint32_t a) const {
  const std::span<const Donation> d = exe.graph.donations();
  return std::any_of(e.updates.begin(), e.updates.end(), [a](const ArgumentUpdate& u) { return u.argument == a; }) &&
         std::any_of(d.begin(), d.end(), [p](const Donation& x) { return x.param == p; }) &&
         given->tensors[a].defined();
}

// Compares a stored entry's replayed outputs with the types `fn` returns for the call
// (CompiledFunctionOptions::output_types). kCorruption on a mismatch.
Status CompiledFunction::Impl::verify_outputs(const std::vector<DataRef>& outputs, const std::vector<TensorType>& want) const {
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

}  // namespace tracecache
