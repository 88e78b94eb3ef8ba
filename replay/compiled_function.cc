#include "replay/compiled_function.h"

#include "store/graph_codec.h"
#include "store/proto/tracecache.pb.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <bit>
#include <optional>
#include <limits>
#include <unordered_map>

namespace tracecache {

namespace {

// Where a value used by a guard entry comes from at replay time.
struct ValueSource {
  enum class Kind : uint8_t { kInput, kDynamicScalar, kSegmentOutput, kConstant };
  Kind kind = Kind::kInput;
  uint32_t a = 0;  // input / scalar / segment index
  uint32_t b = 0;  // segment output index
  BufferRef constant;  // kConstant: a lifted scalar, made once
};

// One check of a guard set. `index` names the argument; `dim` a dim or a second argument.
struct Check {
  enum class Kind : uint8_t {
    kNumTensors, kNumScalars, kOptions, kDType, kRank, kSize, kContiguous, kDevice,
    kAliasOf, kDistinct, kScalarValue,
  };
  Kind kind;
  uint32_t index = 0;
  uint32_t dim = 0;
  uint64_t expected = 0;  // dtype, rank, size, options digest, scalar bits, alias target
};

// A segment: one graph executed between two value reads of the traced function.
struct Segment {
  GraphKey key;
  std::shared_ptr<const Executable> exe;  // null until first use for an entry loaded from disk
  std::vector<ValueSource> params;
  // Contents of outputs that `fn` may have read (all outputs of a segment that ended inside
  // `fn`): output index -> XXH3-128 of dtype, shape and bytes.
  std::vector<std::pair<uint32_t, XXH128_hash_t>> value_guards;
};

struct Entry {
  std::vector<Check> checks;
  std::vector<Segment> segments;
  std::vector<ValueSource> outputs;
  int64_t db_index = -1;      // row in the functions table, -1 if not stored
  int64_t unflushed_hits = 0;
};

constexpr uint32_t kGuardEntryFormat = 1;

void source_to_proto(const ValueSource& v, proto::ValueSource* out) {
  out->set_kind(static_cast<uint32_t>(v.kind));
  out->set_a(v.a);
  out->set_b(v.b);
  if (v.kind == ValueSource::Kind::kConstant) {
    out->set_constant_dtype(static_cast<uint32_t>(v.constant->dtype()));
    out->set_constant_bits(std::bit_cast<uint64_t>(v.constant->element_as_double(0)));
  }
}

std::optional<ValueSource> source_from_proto(const proto::ValueSource& in) {
  if (in.kind() > static_cast<uint32_t>(ValueSource::Kind::kConstant)) return std::nullopt;
  ValueSource v;
  v.kind = static_cast<ValueSource::Kind>(in.kind());
  v.a = in.a();
  v.b = in.b();
  if (v.kind == ValueSource::Kind::kConstant) {
    if (in.constant_dtype() >= static_cast<uint32_t>(kDTypeCount)) return std::nullopt;
    ParamSource ps;
    ps.kind = ParamSource::Kind::kScalar;
    ps.dtype = static_cast<DType>(in.constant_dtype());
    ps.value = std::bit_cast<double>(in.constant_bits());
    v.constant = std::make_shared<const HostBuffer>(scalar_buffer(ps));
  }
  return v;
}

std::string serialize_entry(const Entry& e) {
  proto::GuardEntry pe;
  pe.set_format_version(kGuardEntryFormat);
  for (const Check& c : e.checks) {
    proto::GuardCheck* pc = pe.add_checks();
    pc->set_kind(static_cast<uint32_t>(c.kind));
    pc->set_index(c.index);
    pc->set_dim(c.dim);
    pc->set_expected(c.expected);
  }
  for (const Segment& seg : e.segments) {
    proto::Segment* ps = pe.add_segments();
    ps->set_graph_key(seg.key.to_bytes());
    for (const ValueSource& v : seg.params) source_to_proto(v, ps->add_params());
    for (const auto& [o, h] : seg.value_guards) {
      proto::ValueGuard* g = ps->add_value_guards();
      g->set_output(o);
      g->set_hash_high(h.high64);
      g->set_hash_low(h.low64);
    }
  }
  for (const ValueSource& v : e.outputs) source_to_proto(v, pe.add_outputs());
  return store::serialize_deterministic(pe);
}

// Parses and checks a stored entry so that evaluating its guards and routing its values can
// never index out of range. nullopt if anything is off.
std::optional<Entry> parse_entry(const std::string& bytes) {
  proto::GuardEntry pe;
  if (!pe.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())) ||
      pe.format_version() != kGuardEntryFormat || pe.checks_size() < 2) {
    return std::nullopt;
  }
  Entry e;
  uint64_t num_tensors = 0, num_scalars = 0;
  std::vector<int64_t> rank;  // per tensor, -1 until its rank check
  for (int i = 0; i < pe.checks_size(); ++i) {
    const proto::GuardCheck& pc = pe.checks(i);
    if (pc.kind() > static_cast<uint32_t>(Check::Kind::kScalarValue)) return std::nullopt;
    Check c{static_cast<Check::Kind>(pc.kind()), pc.index(), pc.dim(), pc.expected()};
    bool ok = true;
    switch (c.kind) {
      case Check::Kind::kNumTensors:
        ok = i == 0 && c.expected <= 4096;
        num_tensors = c.expected;
        rank.assign(num_tensors, -1);
        break;
      case Check::Kind::kNumScalars:
        ok = i == 1 && c.expected <= 4096;
        num_scalars = c.expected;
        break;
      case Check::Kind::kOptions: break;
      case Check::Kind::kRank:
        ok = c.index < num_tensors && c.expected <= kMaxRank;
        if (ok) rank[c.index] = static_cast<int64_t>(c.expected);
        break;
      case Check::Kind::kSize:
        ok = c.index < num_tensors && rank[c.index] > static_cast<int64_t>(c.dim);
        break;
      case Check::Kind::kDType: case Check::Kind::kContiguous: case Check::Kind::kDevice:
        ok = c.index < num_tensors;
        break;
      case Check::Kind::kAliasOf: case Check::Kind::kDistinct:
        ok = c.index < num_tensors && c.dim < num_tensors && c.expected < num_tensors;
        break;
      case Check::Kind::kScalarValue: ok = c.index < num_scalars; break;
    }
    if (!ok) return std::nullopt;
    e.checks.push_back(c);
  }
  auto source_ok = [&](const ValueSource& v, size_t segments_before) {
    switch (v.kind) {
      case ValueSource::Kind::kInput: return v.a < num_tensors;
      case ValueSource::Kind::kDynamicScalar: return v.a < num_scalars;
      case ValueSource::Kind::kSegmentOutput: return v.a < segments_before;  // b: checked at replay
      case ValueSource::Kind::kConstant: return v.constant != nullptr;
    }
    return false;
  };
  for (const proto::Segment& ps : pe.segments()) {
    std::optional<GraphKey> key = GraphKey::from_bytes(ps.graph_key());
    if (!key) return std::nullopt;
    Segment seg;
    seg.key = *key;
    for (const proto::ValueSource& pv : ps.params()) {
      std::optional<ValueSource> v = source_from_proto(pv);
      if (!v || !source_ok(*v, e.segments.size())) return std::nullopt;
      seg.params.push_back(std::move(*v));
    }
    for (const proto::ValueGuard& g : ps.value_guards()) {
      seg.value_guards.emplace_back(g.output(), XXH128_hash_t{g.hash_low(), g.hash_high()});
    }
    e.segments.push_back(std::move(seg));
  }
  for (const proto::ValueSource& pv : pe.outputs()) {
    std::optional<ValueSource> v = source_from_proto(pv);
    if (!v || !source_ok(*v, e.segments.size())) return std::nullopt;
    e.outputs.push_back(std::move(*v));
  }
  return e;
}

uint64_t scalar_bits(double v) { return normalized_float_bits(v); }

// Hash of a value's dtype, shape and bytes; allocates nothing.
XXH128_hash_t content_hash(const HostBuffer& b) {
  uint64_t type[kMaxRank + 2] = {static_cast<uint64_t>(b.dtype()), static_cast<uint64_t>(b.shape().rank())};
  for (int d = 0; d < b.shape().rank(); ++d) type[2 + d] = static_cast<uint64_t>(b.shape()[d]);
  uint64_t seed = XXH3_64bits(type, sizeof type);
  return XXH3_128bits_withSeed(b.bytes(), b.nbytes(), seed);
}

}  // namespace

std::string GuardFailure::to_string() const {
  return fmt::format("{} expected {}, actual {}", what, expected, actual);
}

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

struct CompiledFunction::Impl {
  TracedFn fn;
  Runtime* runtime;
  CompiledFunctionOptions options;
  uint64_t options_digest = 0;
  std::vector<bool> dynamic_scalar;
  std::vector<Entry> entries;
  std::vector<BufferRef> scratch;  // per-call parameter list, reused

  std::string input_name(uint32_t i) const {
    return i < options.input_names.size() ? fmt::format("input {} '{}'", i, options.input_names[i])
                                          : fmt::format("input {}", i);
  }

  // ---- guards ---------------------------------------------------------------------------

  static const std::byte* data(const CallArgs& args, uint32_t i) { return args.tensors[i].data_ptr()->bytes(); }

  // The first tensor argument that shares data with argument j (j itself if none).
  static uint64_t first_alias(const CallArgs& args, uint32_t j) {
    const std::byte* p = data(args, j);
    for (uint32_t i = 0; i < j; ++i) {
      if (data(args, i) == p) return i;
    }
    return j;
  }

  // Value of the property `c` checks, for this call. REQUIRES: counts already checked.
  uint64_t actual(const Check& c, const CallArgs& args) const {
    switch (c.kind) {
      case Check::Kind::kNumTensors: return args.tensors.size();
      case Check::Kind::kNumScalars: return args.scalars.size();
      case Check::Kind::kOptions: return options_digest;
      case Check::Kind::kDType: return static_cast<uint64_t>(args.tensors[c.index].dtype());
      case Check::Kind::kRank: return static_cast<uint64_t>(args.tensors[c.index].rank());
      case Check::Kind::kSize: return static_cast<uint64_t>(args.tensors[c.index].shape()[static_cast<int>(c.dim)]);
      case Check::Kind::kContiguous: return 1;  // HostBuffers are dense row-major
      case Check::Kind::kDevice: return 0;      // host memory
      case Check::Kind::kAliasOf: return first_alias(args, c.index);
      case Check::Kind::kDistinct: return data(args, c.index) == data(args, c.dim) ? 0 : 1;  // unused since guards1
      case Check::Kind::kScalarValue: return scalar_bits(args.scalars[c.index]);
    }
    return 0;
  }

  // Checks in order; a count or rank failure stops the walk (later checks index by them).
  bool holds(const Entry& e, const CallArgs& args) const {
    for (const Check& c : e.checks) {
      if (actual(c, args) != c.expected) return false;
    }
    return true;
  }

  std::vector<GuardFailure> explain(const Entry& e, const CallArgs& args) const {
    std::vector<GuardFailure> out;
    for (const Check& c : e.checks) {
      uint64_t got = actual(c, args);
      if (got == c.expected) continue;
      GuardFailure f;
      switch (c.kind) {
        case Check::Kind::kNumTensors:
          f = {"number of tensor arguments", fmt::format("{}", c.expected), fmt::format("{}", got)};
          break;
        case Check::Kind::kNumScalars:
          f = {"number of scalar arguments", fmt::format("{}", c.expected), fmt::format("{}", got)};
          break;
        case Check::Kind::kOptions:
          f = {"lowering options digest", fmt::format("{:016x}", c.expected), fmt::format("{:016x}", got)};
          break;
        case Check::Kind::kDType:
          f = {input_name(c.index) + ": dtype", std::string(dtype_name(static_cast<DType>(c.expected))),
               std::string(dtype_name(static_cast<DType>(got)))};
          break;
        case Check::Kind::kRank:
          f = {input_name(c.index) + ": rank", fmt::format("{}", c.expected), fmt::format("{}", got)};
          break;
        case Check::Kind::kSize:
          f = {fmt::format("{}: size of dim {}", input_name(c.index), c.dim), fmt::format("{}", c.expected),
               fmt::format("{}", got)};
          break;
        case Check::Kind::kContiguous:
          f = {input_name(c.index) + ": contiguous", "true", "false"};
          break;
        case Check::Kind::kDevice:
          f = {input_name(c.index) + ": device", "host", "other"};
          break;
        case Check::Kind::kAliasOf: {
          auto describe = [&](uint64_t first) {
            return first == c.index ? std::string("its own data") : fmt::format("same data as input {}", first);
          };
          f = {fmt::format("{}: aliasing", input_name(c.index)), describe(c.expected), describe(got)};
          break;
        }
        case Check::Kind::kDistinct:
          f = {fmt::format("{}: aliasing", input_name(c.index)), fmt::format("distinct from input {}", c.dim),
               fmt::format("same data as input {}", c.dim)};
          break;
        case Check::Kind::kScalarValue:
          f = {fmt::format("scalar {}: value", c.index), fmt::format("{}", std::bit_cast<double>(c.expected)),
               fmt::format("{}", args.scalars[c.index])};
          break;
      }
      out.push_back(std::move(f));
      // Later checks index tensors by count and dims by rank: stop once those differ.
      if (c.kind == Check::Kind::kNumTensors || c.kind == Check::Kind::kNumScalars ||
          c.kind == Check::Kind::kRank) {
        break;
      }
    }
    return out;
  }

  std::vector<Check> make_checks(const CallArgs& args) const {
    std::vector<Check> checks;
    checks.push_back({Check::Kind::kNumTensors, 0, 0, args.tensors.size()});
    checks.push_back({Check::Kind::kNumScalars, 0, 0, args.scalars.size()});
    checks.push_back({Check::Kind::kOptions, 0, 0, options_digest});
    for (uint32_t i = 0; i < args.tensors.size(); ++i) {
      const Tensor& t = args.tensors[i];
      checks.push_back({Check::Kind::kDType, i, 0, static_cast<uint64_t>(t.dtype())});
      checks.push_back({Check::Kind::kRank, i, 0, static_cast<uint64_t>(t.rank())});
      for (int d = 0; d < t.rank(); ++d) {
        checks.push_back({Check::Kind::kSize, i, static_cast<uint32_t>(d), static_cast<uint64_t>(t.shape()[d])});
      }
      checks.push_back({Check::Kind::kContiguous, i, 0, 1});
      checks.push_back({Check::Kind::kDevice, i, 0, 0});
    }
    // Aliasing: for each tensor, the first argument whose data it shares (itself if none).
    for (uint32_t j = 1; j < args.tensors.size(); ++j) {
      checks.push_back({Check::Kind::kAliasOf, j, 0, first_alias(args, j)});
    }
    for (uint32_t s = 0; s < args.scalars.size(); ++s) {
      if (!dynamic_scalar[s]) checks.push_back({Check::Kind::kScalarValue, s, 0, scalar_bits(args.scalars[s])});
    }
    return checks;
  }

  // ---- replay -----------------------------------------------------------------------------

  // Runs entry `e`. Returns nullopt (not an error) if a value guard between segments fails.
  Result<std::optional<std::vector<BufferRef>>> replay(Entry& e, const CallArgs& args) {
    std::vector<std::vector<BufferRef>> seg_out(e.segments.size());
    auto value_of = [&](const ValueSource& v) -> BufferRef {
      switch (v.kind) {
        case ValueSource::Kind::kInput: return args.tensors[v.a].buffer();
        case ValueSource::Kind::kDynamicScalar: {
          HostBuffer b(DType::kF32, Shape{});
          *b.data<float>() = static_cast<float>(args.scalars[v.a]);
          return std::make_shared<const HostBuffer>(std::move(b));
        }
        case ValueSource::Kind::kSegmentOutput: return seg_out[v.a][v.b];
        case ValueSource::Kind::kConstant: return v.constant;
      }
      return nullptr;
    };
    auto routed = [&](const ValueSource& v) {
      return v.kind != ValueSource::Kind::kSegmentOutput || v.b < seg_out[v.a].size();
    };
    for (size_t k = 0; k < e.segments.size(); ++k) {
      Segment& seg = e.segments[k];
      if (!seg.exe) {  // an entry loaded from the cache: fetch its executable by key
        Result<std::shared_ptr<const Executable>> exe = runtime->prepare_by_key(seg.key);
        if (!exe.is_ok()) return exe.status();
        seg.exe = *exe;
      }
      scratch.clear();
      for (const ValueSource& v : seg.params) {
        if (!routed(v)) return corruption("guard entry routes a value that does not exist");
        scratch.push_back(value_of(v));
      }
      Result<std::vector<BufferRef>> outs = runtime->run_prepared(*seg.exe, scratch);
      if (!outs.is_ok()) return corruption("guard entry does not fit its executable: " + outs.status().message());
      seg_out[k] = std::move(*outs);
      for (const auto& [o, expected] : seg.value_guards) {
        if (o >= seg_out[k].size()) return corruption("guard entry checks an output that does not exist");
        if (!XXH128_isEqual(content_hash(*seg_out[k][o]), expected)) return std::optional<std::vector<BufferRef>>();
      }
    }
    std::vector<BufferRef> outputs;
    outputs.reserve(e.outputs.size());
    for (const ValueSource& v : e.outputs) {
      if (!routed(v)) return corruption("guard entry routes a value that does not exist");
      outputs.push_back(value_of(v));
    }
    return std::optional<std::vector<BufferRef>>(std::move(outputs));
  }

  // ---- tracing ------------------------------------------------------------------------------

  // Executes the graphs of a trace through the runtime, recording each as a segment and where
  // each of its parameters came from.
  class Recorder final : public GraphExecutor {
   public:
    explicit Recorder(Runtime* runtime) : runtime_(runtime) {}
    Result<std::vector<BufferRef>> execute(const CanonicalGraph& cg, std::span<const BufferRef> params) override {
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
        auto it = origin.find(params[p].get());
        if (it == origin.end()) {
          return invalid_argument(
              "the traced function used tensor data that is not one of its arguments; pass it as an "
              "argument (it would otherwise become a constant baked into the cache)");
        }
        seg.params.push_back(it->second);
      }
      Result<std::shared_ptr<const Executable>> exe = runtime_->prepare(cg);
      if (!exe.is_ok()) return exe.status();
      seg.exe = *exe;
      Result<std::vector<BufferRef>> outs = runtime_->run_prepared(**exe, params);
      if (!outs.is_ok()) return outs;
      const uint32_t k = static_cast<uint32_t>(segments.size());
      for (uint32_t o = 0; o < outs->size(); ++o) {
        ValueSource v;
        v.kind = ValueSource::Kind::kSegmentOutput;
        v.a = k;
        v.b = o;
        origin.try_emplace((*outs)[o].get(), v);  // an output that is an input keeps its origin
      }
      segments.push_back(std::move(seg));
      last_outputs.push_back(*outs);
      return outs;
    }

    std::unordered_map<const HostBuffer*, ValueSource> origin;  // identity map, this trace only
    std::vector<Segment> segments;
    std::vector<std::vector<BufferRef>> last_outputs;

   private:
    Runtime* runtime_;
  };

  // Traces `fn` on `args`; appends an entry unless `keep` is false. Returns the outputs.
  Result<std::vector<BufferRef>> trace(const CallArgs& args, bool keep) {
    Recorder rec(runtime);
    LazyOptions lo;
    lo.canonicalize = options.canonicalize;
    lo.metrics = &runtime->metrics();
    std::vector<Tensor> outputs;
    size_t segments_inside_fn = 0;
    {
      LazyContext tctx(&rec, lo);
      TraceArgs targs;
      for (uint32_t i = 0; i < args.tensors.size(); ++i) {
        BufferRef b = args.tensors[i].buffer();
        targs.tensors_.push_back(tctx.from_buffer(b));
        rec.origin.try_emplace(b.get(), ValueSource{ValueSource::Kind::kInput, i, 0, nullptr});
      }
      targs.scalars_ = args.scalars;
      targs.scalar_tensors_.resize(args.scalars.size());
      for (uint32_t s = 0; s < args.scalars.size(); ++s) {
        if (!dynamic_scalar[s]) continue;
        HostBuffer b(DType::kF32, Shape{});
        *b.data<float>() = static_cast<float>(args.scalars[s]);
        auto ref = std::make_shared<const HostBuffer>(std::move(b));
        rec.origin.try_emplace(ref.get(), ValueSource{ValueSource::Kind::kDynamicScalar, s, 0, nullptr});
        targs.scalar_tensors_[s] = tctx.from_buffer(ref);
      }
      try {
        outputs = fn(tctx, targs);
        segments_inside_fn = rec.segments.size();
        tctx.mark_step();
      } catch (const Error& e) {
        return e.status();
      }
    }
    Entry entry;
    std::vector<BufferRef> result;
    for (size_t o = 0; o < outputs.size(); ++o) {
      if (!outputs[o].defined()) return invalid_argument(fmt::format("output {} of the traced function is undefined", o));
      BufferRef b = outputs[o].buffer();
      auto it = rec.origin.find(b.get());
      if (it == rec.origin.end()) {
        return invalid_argument(fmt::format(
            "output {} of the traced function is tensor data that is not one of its arguments", o));
      }
      entry.outputs.push_back(it->second);
      result.push_back(std::move(b));
    }
    // Everything materialized while fn ran may have been read by it: guard the contents.
    for (size_t k = 0; k < segments_inside_fn; ++k) {
      for (uint32_t o = 0; o < rec.last_outputs[k].size(); ++o) {
        rec.segments[k].value_guards.emplace_back(o, content_hash(*rec.last_outputs[k][o]));
      }
    }
    if (keep) {
      entry.segments = std::move(rec.segments);
      entry.checks = make_checks(args);
      save(entry);
      entries.push_back(std::move(entry));
    }
    return result;
  }

  // ---- persistence ---------------------------------------------------------------------------

  store::CacheDb* db() const {
    store::CacheDb* d = options.persist ? runtime->db() : nullptr;
    return d && !d->read_only() ? d : nullptr;
  }

  void save(Entry& e) {
    store::CacheDb* d = db();
    if (!d) return;
    e.db_index = next_db_index++;
    Status st = d->put_function_entry(key, e.db_index, serialize_entry(e));
    if (!st.is_ok()) {
      e.db_index = -1;
      runtime->add_warning(fmt::format("could not store a guard entry of '{}': {}", key.name, st.message()));
    }
  }

  void load() {
    store::CacheDb* d = options.persist ? runtime->db() : nullptr;
    if (!d) return;
    Result<std::vector<store::StoredFunctionEntry>> rows = d->function_entries(key);
    if (!rows.is_ok()) {
      runtime->add_warning(fmt::format("could not read the guard entries of '{}': {}", key.name, rows.status().message()));
      return;
    }
    for (store::StoredFunctionEntry& row : *rows) {
      next_db_index = std::max(next_db_index, row.entry + 1);
      std::optional<Entry> e = row.corrupt ? std::nullopt : parse_entry(row.blob);
      if (!e) {
        drop_stored(row.entry, "stored guard entry failed its checksum or checks");
        continue;
      }
      e->db_index = row.entry;
      entries.push_back(std::move(*e));
    }
  }

  void drop_stored(int64_t db_index, const std::string& why) {
    runtime->function_event(store::EventKind::kCorrupt, key.name, fmt::format("entry {}: {}", db_index, why));
    if (store::CacheDb* d = db()) (void)d->remove_function_entry(key, db_index);
  }

  void flush_hits() {
    store::CacheDb* d = db();
    for (Entry& e : entries) {
      if (e.unflushed_hits == 0 || e.db_index < 0) continue;
      if (d && d->add_function_hits(key, e.db_index, e.unflushed_hits).is_ok()) e.unflushed_hits = 0;
    }
  }

  store::FunctionKey key;
  int64_t next_db_index = 0;
};

CompiledFunction::CompiledFunction(std::string name, TracedFn fn, Runtime* runtime,
                                   CompiledFunctionOptions options)
    : name_(std::move(name)), impl_(std::make_unique<Impl>()) {
  impl_->fn = std::move(fn);
  impl_->runtime = runtime;
  impl_->options = std::move(options);
  std::string spec = fmt::format("bake_scalars={};backend={};options={}",
                                 impl_->options.canonicalize.bake_scalars ? 1 : 0,
                                 runtime->backend().name(), runtime->backend().options_digest());
  impl_->options_digest = XXH3_64bits(spec.data(), spec.size());
  impl_->key = {name_, impl_->options.user_version, std::string(kToolkitVersion)};
  impl_->load();
  stats_.hits_per_entry.assign(impl_->entries.size(), 0);
}

CompiledFunction::~CompiledFunction() { flush(); }

void CompiledFunction::flush() { impl_->flush_hits(); }

int CompiledFunction::find_entry(const CallArgs& args) const {
  for (size_t e = 0; e < impl_->entries.size(); ++e) {
    if (impl_->holds(impl_->entries[e], args)) return static_cast<int>(e);
  }
  return -1;
}

size_t CompiledFunction::num_entries() const { return impl_->entries.size(); }

Result<std::vector<Tensor>> CompiledFunction::operator()(LazyContext& ctx, const CallArgs& args) {
  ++stats_.calls;
  Metrics& m = impl_->runtime->metrics();
  for (size_t i = 0; i < args.tensors.size(); ++i) {
    const Tensor& t = args.tensors[i];
    if (!t.defined() || !t.is_materialized() || &t.context() != &ctx) {
      return invalid_argument(fmt::format(
          "{}: {} must be a materialized tensor of the calling context", name_, impl_->input_name(static_cast<uint32_t>(i))));
    }
  }
  for (uint32_t s : impl_->options.dynamic_scalars) {
    if (s >= args.scalars.size()) {
      return invalid_argument(fmt::format("{}: dynamic scalar {} not passed", name_, s));
    }
  }
  impl_->dynamic_scalar.assign(args.scalars.size(), false);
  for (uint32_t s : impl_->options.dynamic_scalars) impl_->dynamic_scalar[s] = true;

  auto wrap = [&ctx](std::vector<BufferRef> bufs) {
    std::vector<Tensor> out;
    out.reserve(bufs.size());
    for (BufferRef& b : bufs) out.push_back(ctx.from_buffer(std::move(b)));
    return out;
  };

  if (stats_.fell_back_to_lazy) {
    ++stats_.traces;
    Result<std::vector<BufferRef>> r = impl_->trace(args, /*keep=*/false);
    if (!r.is_ok()) return r.status();
    return wrap(std::move(*r));
  }

  bool value_guard_failed = false;
  for (size_t e = 0; e < impl_->entries.size(); ++e) {
    ++stats_.guard_checks;
    m.add(counters::kGuardChecks);
    ScopedTimer guard_timer(&m, timers::kGuardCheck);
    const bool holds = impl_->holds(impl_->entries[e], args);
    guard_timer.stop();
    if (!holds) {
      ++stats_.guard_failures;
      m.add(counters::kGuardFailures);
      continue;
    }
    Result<std::optional<std::vector<BufferRef>>> r = impl_->replay(impl_->entries[e], args);
    if (!r.is_ok() && r.status().code() == StatusCode::kCorruption) {
      // Only a stored entry can be malformed: drop it and look further.
      impl_->drop_stored(impl_->entries[e].db_index, r.status().message());
      impl_->entries.erase(impl_->entries.begin() + static_cast<std::ptrdiff_t>(e));
      stats_.hits_per_entry.erase(stats_.hits_per_entry.begin() + static_cast<std::ptrdiff_t>(e));
      --e;
      continue;
    }
    if (!r.is_ok()) return r.status();
    if (!r->has_value()) {
      value_guard_failed = true;
      ++stats_.guard_failures;
      m.add(counters::kGuardFailures);
      continue;
    }
    ++stats_.hits_per_entry[e];
    ++impl_->entries[e].unflushed_hits;
    return wrap(std::move(**r));
  }

  // No entry holds: trace (the first time) or recompile, saying why.
  if (!impl_->entries.empty()) {
    size_t closest = 0;
    std::vector<GuardFailure> best;
    for (size_t e = 0; e < impl_->entries.size(); ++e) {
      std::vector<GuardFailure> f = impl_->explain(impl_->entries[e], args);
      if (e == 0 || f.size() < best.size()) {
        best = std::move(f);
        closest = e;
      }
    }
    std::string reason = fmt::format("entry {}: ", closest);
    if (best.empty() && value_guard_failed) reason += "a value read inside the function changed";
    for (size_t i = 0; i < best.size(); ++i) reason += (i ? "; " : "") + best[i].to_string();
    ++stats_.recompiles;
    m.add(counters::kRecompiles);
    stats_.recompile_reasons.push_back(reason);
    impl_->runtime->function_event(store::EventKind::kRecompile, name_, reason);
    if (static_cast<int>(impl_->entries.size()) >= impl_->options.recompile_limit) {
      stats_.fell_back_to_lazy = true;
      std::string why = fmt::format("'{}' recompiled {} times (limit {}); it now runs in lazy mode",
                                    name_, impl_->entries.size(), impl_->options.recompile_limit);
      impl_->runtime->add_warning(why);
      impl_->runtime->function_event(store::EventKind::kFallback, name_, why);
      ++stats_.traces;
      Result<std::vector<BufferRef>> r = impl_->trace(args, /*keep=*/false);
      if (!r.is_ok()) return r.status();
      return wrap(std::move(*r));
    }
  }
  ++stats_.traces;
  Result<std::vector<BufferRef>> r = impl_->trace(args, /*keep=*/true);
  if (!r.is_ok()) return r.status();
  stats_.hits_per_entry.push_back(0);
  return wrap(std::move(*r));
}

}  // namespace tracecache
