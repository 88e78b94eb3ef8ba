#include "runtime/compiled_function.h"

#include "capture/ir/trace_template.h"
#include "store/codec/graph_codec.h"
#include "store/codec/proto/tracecache.pb.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <array>
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
  DataRef constant;  // kConstant: a lifted scalar, made once
};

// One check of a guard set. `index` names the argument; `dim` a dim or a second argument.
struct Check {
  enum class Kind : uint8_t {
    kNumTensors, kNumScalars, kOptions, kDType, kRank, kSize, kContiguous, kDevice,
    kAliasOf, kDistinct, kScalarValue,
    kSizeRange,  // dynamic dim: expected <= size <= kMaxDynamicSize
    kSameSize,   // dynamic dim: size equals that of input expected / 256, dim expected % 256
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

// An entry's graph at one assignment of its dynamic dims.
struct Specialization {
  std::vector<int64_t> sizes;  // one per Dynamic::dims
  Segment segment;
};

// What makes an entry shape-polymorphic: its trace template and how to fill it.
struct Dynamic {
  TraceTemplate tmpl;                 // graph, sym_attrs, observed, roots
  std::vector<ValueSource> params;    // one per template parameter (inputs, dynamic scalars)
  std::vector<DynamicDim> dims;
  std::vector<Specialization> specs;  // most recently made last
};
constexpr size_t kMaxSpecializations = 32;

struct Entry {
  std::vector<Check> checks;
  std::shared_ptr<Dynamic> dynamic;  // null: a static entry (fixed segments)
  std::vector<Segment> segments;
  std::vector<ValueSource> outputs;
  // One per output: its type when traced. A dynamic entry's sizes follow its dynamic dims.
  std::vector<TensorType> output_types;
  std::string options_label;  // readable form of the options check; "" if not recorded
  // False for an entry loaded from the cache until its outputs were compared with
  // CompiledFunctionOptions::output_types (routes are the same for every call of an entry).
  bool outputs_verified = true;
  int64_t db_index = -1;      // row in the functions table, -1 if not stored
  int64_t unflushed_hits = 0;
};

void source_to_proto(const ValueSource& v, proto::ValueSource* out) {
  out->set_kind(static_cast<uint32_t>(v.kind));
  out->set_a(v.a);
  out->set_b(v.b);
  if (v.kind == ValueSource::Kind::kConstant) {
    out->set_constant_dtype(static_cast<uint32_t>(v.constant->dtype()));
    out->set_constant_bits(std::bit_cast<uint64_t>(as_host_data(*v.constant)->buffer()->element_as_double(0)));
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
    v.constant = host_data(scalar_buffer(ps));
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
  for (const TensorType& t : e.output_types) {
    proto::OutputType* pt = pe.add_output_types();
    pt->set_dtype(static_cast<uint32_t>(t.dtype));
    for (int d = 0; d < t.shape.rank(); ++d) pt->add_shape(t.shape[d]);
  }
  pe.set_options_label(e.options_label);
  if (e.dynamic) {
    const Dynamic& d = *e.dynamic;
    proto::DynamicPlan* pd = pe.mutable_dynamic();
    store::graph_to_proto(d.tmpl.graph, pd->mutable_graph());
    for (const SymAttr& a : d.tmpl.sym_attrs) {
      proto::SymAttr* pa = pd->add_sym_attrs();
      pa->set_node(a.node);
      pa->set_attr(a.attr);
      pa->set_element(a.element);
      pa->set_source(a.source);
      pa->set_dim(a.dim);
    }
    for (const ShapeObservation& o : d.tmpl.observed) {
      proto::ShapeObservation* po = pd->add_observed();
      po->set_node(o.node);
      for (int64_t x : o.shape) po->add_shape(x);
    }
    for (NodeId r : d.tmpl.roots) pd->add_roots(r);
    for (const ValueSource& v : d.params) source_to_proto(v, pd->add_params());
    for (const DynamicDim& dd : d.dims) {
      proto::DynamicDim* pdd = pd->add_dims();
      pdd->set_input(static_cast<uint32_t>(dd.input));
      pdd->set_dim(static_cast<uint32_t>(dd.dim));
    }
  }
  return store::serialize_deterministic(pe);
}

// Parses and checks a stored dynamic plan so that instantiating it can never index out of
// range: template graph re-inferred (graph codec, raw attributes), bindings point at earlier
// nodes' existing dims and at existing attribute elements in node order, observations and
// roots at existing nodes, one parameter source per template parameter.
bool parse_dynamic(const proto::DynamicPlan& pd, uint64_t num_tensors, uint64_t num_scalars,
                   const std::vector<int64_t>& rank, Entry& e) {
  auto d = std::make_shared<Dynamic>();
  Result<Graph> g = store::graph_from_proto(pd.graph(), store::AttrForm::kRaw);
  if (!g.is_ok()) return false;
  d->tmpl.graph = std::move(*g);
  const Graph& graph = d->tmpl.graph;
  NodeId last = 0;
  for (const proto::SymAttr& pa : pd.sym_attrs()) {
    SymAttr a{pa.node(), pa.attr(), pa.element(), pa.source(), pa.dim()};
    if (a.node >= graph.size() || a.node < last || a.source >= a.node) return false;
    last = a.node;
    const Node& n = graph.node(a.node);
    if (n.op == OpKind::kParameter || a.attr >= op_info(n.op).attrs.size()) return false;
    if (a.dim >= static_cast<uint32_t>(graph.node(a.source).shape.rank())) return false;
    const AttrValue& v = graph.attrs(n)[a.attr];
    bool fits = v.kind == AttrKind::kInts
                    ? a.element >= 0 && a.element < v.ints.size()
                    : (v.kind == AttrKind::kInt || v.kind == AttrKind::kFloat) && a.element == -1;
    if (!fits) return false;
    d->tmpl.sym_attrs.push_back(a);
  }
  for (const proto::ShapeObservation& po : pd.observed()) {
    if (po.node() >= graph.size() || po.shape_size() > kMaxRank) return false;
    d->tmpl.observed.push_back(
        {po.node(), Shape(IntList(std::span<const int64_t>(po.shape().data(), po.shape_size())))});
  }
  if (pd.roots_size() == 0) return false;
  for (uint32_t r : pd.roots()) {
    if (r >= graph.size()) return false;
    d->tmpl.roots.push_back(r);
  }
  if (static_cast<size_t>(pd.params_size()) != graph.params().size()) return false;
  for (const proto::ValueSource& pv : pd.params()) {
    std::optional<ValueSource> v = source_from_proto(pv);
    if (!v) return false;
    bool ok = (v->kind == ValueSource::Kind::kInput && v->a < num_tensors) ||
              (v->kind == ValueSource::Kind::kDynamicScalar && v->a < num_scalars);
    if (!ok) return false;
    d->params.push_back(std::move(*v));
  }
  if (pd.dims_size() == 0) return false;
  for (const proto::DynamicDim& pdd : pd.dims()) {
    if (pdd.input() >= num_tensors || rank[pdd.input()] <= static_cast<int64_t>(pdd.dim())) return false;
    d->dims.push_back({pdd.input(), static_cast<int>(pdd.dim())});
  }
  e.dynamic = std::move(d);
  return true;
}

// Bounds of a stored guard entry, each checked before anything is sized by it.
constexpr uint64_t kMaxArguments = 4096;  // tensor arguments, and scalar arguments
constexpr int kMaxSegments = 4096;
constexpr int kMaxRoutes = 1 << 16;       // parameters of a segment; outputs of an entry
constexpr size_t kMaxLabelBytes = 256;

// The checks an entry over `tensors` tensors and `scalars` scalars can have at most: counts and
// options, per tensor dtype, rank, contiguity, device, aliasing and two per dim, per scalar one.
constexpr uint64_t max_checks(uint64_t tensors, uint64_t scalars) {
  return 3 + tensors * (5 + 2 * static_cast<uint64_t>(kMaxRank)) + scalars;
}

std::optional<TensorType> type_from_proto(const proto::OutputType& pt) {
  if (pt.dtype() >= static_cast<uint32_t>(kDTypeCount) || pt.shape_size() > kMaxRank) return std::nullopt;
  for (int64_t d : pt.shape()) {
    if (d < 0) return std::nullopt;
  }
  return TensorType{static_cast<DType>(pt.dtype()),
                    Shape(IntList(std::span<const int64_t>(pt.shape().data(), pt.shape_size())))};
}

// Parses and checks a stored entry so that evaluating its guards and routing its values can
// never index out of range, and so that what it promises is consistent with what it guards:
// every count bounded before it sizes anything; the counts first, then the options, then for
// every tensor a dtype, a rank and a size (or range) for each dim; every index and route in
// range; one recorded type per output, equal to the guarded type of an input it returns, to
// the template's root type (dynamic), or to a constant's type. Routes into segment outputs are
// checked against each segment's executable when it is fetched (check_segment). kCorruption
// with what failed.
Result<Entry> parse_entry(const std::string& bytes) {
  proto::GuardEntry pe;
  if (!pe.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return corruption("guard entry does not parse");
  }
  if (pe.format_version() != kGuardEntryFormat) {
    return corruption(fmt::format("guard entry has format {}, expected {}", pe.format_version(), kGuardEntryFormat));
  }
  if (pe.checks_size() < 3 || pe.checks(0).kind() != static_cast<uint32_t>(Check::Kind::kNumTensors) ||
      pe.checks(1).kind() != static_cast<uint32_t>(Check::Kind::kNumScalars) ||
      pe.checks(2).kind() != static_cast<uint32_t>(Check::Kind::kOptions)) {
    return corruption("guard entry does not start with its count and options checks");
  }
  const uint64_t num_tensors = pe.checks(0).expected(), num_scalars = pe.checks(1).expected();
  if (num_tensors > kMaxArguments || num_scalars > kMaxArguments) {
    return corruption(fmt::format("guard entry has {} tensor and {} scalar arguments (at most {} each)",
                                  num_tensors, num_scalars, kMaxArguments));
  }
  if (static_cast<uint64_t>(pe.checks_size()) > max_checks(num_tensors, num_scalars) ||
      pe.segments_size() > kMaxSegments || pe.outputs_size() > kMaxRoutes ||
      pe.options_label().size() > kMaxLabelBytes) {
    return corruption("guard entry has more checks, segments or outputs than its arguments allow");
  }
  Entry e;
  e.options_label = pe.options_label();
  // What the checks guard, per tensor: dtype, rank, and each dim's size (-1: dynamic).
  std::vector<int64_t> dtype(num_tensors, -1), rank(num_tensors, -1);
  std::vector<std::array<int64_t, kMaxRank>> size(num_tensors);
  std::vector<std::array<bool, kMaxRank>> sized(num_tensors);
  for (int i = 0; i < pe.checks_size(); ++i) {
    const proto::GuardCheck& pc = pe.checks(i);
    if (pc.kind() > static_cast<uint32_t>(Check::Kind::kSameSize)) return corruption("guard entry has an unknown check");
    Check c{static_cast<Check::Kind>(pc.kind()), pc.index(), pc.dim(), pc.expected()};
    const bool tensor = c.index < num_tensors;
    const bool dim = tensor && rank[c.index] > static_cast<int64_t>(c.dim);
    bool ok = true;
    switch (c.kind) {
      case Check::Kind::kNumTensors: ok = i == 0; break;
      case Check::Kind::kNumScalars: ok = i == 1; break;
      case Check::Kind::kOptions: ok = i == 2; break;
      case Check::Kind::kDType:
        ok = tensor && c.expected < static_cast<uint64_t>(kDTypeCount) && dtype[c.index] < 0;
        if (ok) dtype[c.index] = static_cast<int64_t>(c.expected);
        break;
      case Check::Kind::kRank:
        ok = tensor && c.expected <= kMaxRank && rank[c.index] < 0;
        if (ok) rank[c.index] = static_cast<int64_t>(c.expected);
        break;
      case Check::Kind::kSize:
        ok = dim && c.expected <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) && !sized[c.index][c.dim];
        if (ok) size[c.index][c.dim] = static_cast<int64_t>(c.expected), sized[c.index][c.dim] = true;
        break;
      case Check::Kind::kSizeRange:
        ok = dim && c.expected >= 1 && !sized[c.index][c.dim];
        if (ok) size[c.index][c.dim] = -1, sized[c.index][c.dim] = true;
        break;
      case Check::Kind::kContiguous: case Check::Kind::kDevice:
        ok = tensor;
        break;
      case Check::Kind::kAliasOf: case Check::Kind::kDistinct:
        ok = tensor && c.dim < num_tensors && c.expected < num_tensors;
        break;
      case Check::Kind::kScalarValue: ok = c.index < num_scalars; break;
      case Check::Kind::kSameSize: {
        const uint64_t other = c.expected / 256, other_dim = c.expected % 256;
        ok = dim && other < num_tensors && rank[other] > static_cast<int64_t>(other_dim);
        break;
      }
    }
    if (!ok) return corruption(fmt::format("guard entry check {} is out of range or out of order", i));
    e.checks.push_back(c);
  }
  for (uint64_t t = 0; t < num_tensors; ++t) {
    bool complete = dtype[t] >= 0 && rank[t] >= 0;
    for (int64_t d = 0; complete && d < rank[t]; ++d) complete = sized[t][static_cast<size_t>(d)];
    if (!complete) return corruption(fmt::format("guard entry does not guard the type of input {}", t));
  }
  auto source_ok = [&](const ValueSource& v, size_t segments_before) {
    switch (v.kind) {
      case ValueSource::Kind::kInput: return v.a < num_tensors;
      case ValueSource::Kind::kDynamicScalar: return v.a < num_scalars;
      case ValueSource::Kind::kSegmentOutput: return v.a < segments_before;  // b: check_segment
      case ValueSource::Kind::kConstant: return v.constant != nullptr;
    }
    return false;
  };
  for (const proto::Segment& ps : pe.segments()) {
    std::optional<GraphKey> key = GraphKey::from_bytes(ps.graph_key());
    if (!key) return corruption("guard entry has a malformed graph key");
    if (ps.params_size() > kMaxRoutes || ps.value_guards_size() > kMaxRoutes) {
      return corruption("guard entry segment has too many parameters or value guards");
    }
    Segment seg;
    seg.key = *key;
    for (const proto::ValueSource& pv : ps.params()) {
      std::optional<ValueSource> v = source_from_proto(pv);
      if (!v || !source_ok(*v, e.segments.size())) return corruption("guard entry routes a parameter out of range");
      seg.params.push_back(std::move(*v));
    }
    for (const proto::ValueGuard& g : ps.value_guards()) {
      seg.value_guards.emplace_back(g.output(), XXH128_hash_t{g.hash_low(), g.hash_high()});
    }
    e.segments.push_back(std::move(seg));
  }
  if (pe.has_dynamic()) {
    if (!e.segments.empty() || !parse_dynamic(pe.dynamic(), num_tensors, num_scalars, rank, e)) {
      return corruption("guard entry has a malformed dynamic plan");
    }
  }
  if (pe.output_types_size() != pe.outputs_size()) {
    return corruption(fmt::format("guard entry has {} outputs but {} output types", pe.outputs_size(),
                                  pe.output_types_size()));
  }
  // A dynamic entry's outputs route from its one (specialized) segment: root indices.
  const size_t segments = e.dynamic ? 1 : e.segments.size();
  for (int o = 0; o < pe.outputs_size(); ++o) {
    std::optional<ValueSource> v = source_from_proto(pe.outputs(o));
    std::optional<TensorType> type = type_from_proto(pe.output_types(o));
    if (!v || !type || !source_ok(*v, segments)) return corruption(fmt::format("guard entry output {} is out of range", o));
    // The type this output has when the entry's guards hold (dynamic dims: any size).
    bool fits = true;
    switch (v->kind) {
      case ValueSource::Kind::kInput: {
        fits = static_cast<int64_t>(type->dtype) == dtype[v->a] && type->shape.rank() == rank[v->a];
        for (int d = 0; fits && d < type->shape.rank(); ++d) {
          fits = size[v->a][static_cast<size_t>(d)] < 0 || size[v->a][static_cast<size_t>(d)] == type->shape[d];
        }
        break;
      }
      case ValueSource::Kind::kDynamicScalar: fits = *type == TensorType{DType::kF32, Shape{}}; break;
      case ValueSource::Kind::kConstant: fits = *type == TensorType{v->constant->dtype(), Shape{}}; break;
      case ValueSource::Kind::kSegmentOutput:
        if (e.dynamic) {
          const std::vector<NodeId>& roots = e.dynamic->tmpl.roots;
          if (v->b >= roots.size()) return corruption(fmt::format("guard entry output {} is out of range", o));
          const Node& n = e.dynamic->tmpl.graph.node(roots[v->b]);
          fits = type->dtype == n.dtype && type->shape == n.shape;
        }
        break;
    }
    if (!fits) {
      return corruption(fmt::format("guard entry output {} does not have its recorded type {}", o, type_to_string(*type)));
    }
    e.outputs.push_back(std::move(*v));
    e.output_types.push_back(std::move(*type));
  }
  return e;
}

// Checks that segment `k` of a static entry fits `exe`, its executable fetched from the cache:
// one parameter per graph parameter, value guards and every route into its outputs in range,
// and each entry output it provides of the type the entry recorded. kCorruption otherwise.
Status check_segment(const Entry& e, size_t k, const Executable& exe) {
  const Segment& seg = e.segments[k];
  const std::span<const NodeId> outs = exe.graph.outputs();
  if (seg.params.size() != exe.graph.params().size()) {
    return corruption(fmt::format("guard entry segment {} passes {} parameters, its graph has {}", k,
                                  seg.params.size(), exe.graph.params().size()));
  }
  for (const auto& [o, hash] : seg.value_guards) {
    if (o >= outs.size()) return corruption("guard entry checks an output that does not exist");
  }
  auto in_range = [&](const ValueSource& v) {
    return v.kind != ValueSource::Kind::kSegmentOutput || v.a != k || v.b < outs.size();
  };
  for (size_t j = k + 1; j < e.segments.size(); ++j) {
    for (const ValueSource& v : e.segments[j].params) {
      if (!in_range(v)) return corruption("guard entry routes a value that does not exist");
    }
  }
  for (size_t o = 0; o < e.outputs.size(); ++o) {
    const ValueSource& v = e.outputs[o];
    if (!in_range(v)) return corruption("guard entry routes a value that does not exist");
    if (v.kind != ValueSource::Kind::kSegmentOutput || v.a != k) continue;
    const Node& n = exe.graph.node(outs[v.b]);
    const TensorType actual{n.dtype, n.shape};
    if (actual != e.output_types[o]) {
      return corruption(fmt::format("guard entry output {} is recorded as {}, its executable gives {}", o,
                                    type_to_string(e.output_types[o]), type_to_string(actual)));
    }
  }
  return Status::ok();
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

Status validate_guard_entry(const std::string& bytes) {
  Result<Entry> e = parse_entry(bytes);
  return e.is_ok() ? Status::ok() : e.status();
}

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
  std::string options_label;  // readable form of options_digest: "sim:h100"
  std::vector<bool> dynamic_scalar;
  std::vector<Entry> entries;
  std::vector<DataRef> scratch;  // per-call parameter list, reused

  // A value guard's read of a segment output: its host bytes, counted as Tensor::buffer() counts.
  BufferRef read_value(const DataRef& d) const {
    Result<BufferRef> b = d->read();
    if (!b.is_ok()) throw Error(b.status());
    if (!d->in_host_memory()) runtime->metrics().add(counters::kBytesToHost, static_cast<int64_t>(d->nbytes()));
    return std::move(b).value();
  }

  std::string input_name(uint32_t i) const {
    return i < options.input_names.size() ? fmt::format("input {} '{}'", i, options.input_names[i])
                                          : fmt::format("input {}", i);
  }

  // ---- guards ---------------------------------------------------------------------------

  static const void* data(const CallArgs& args, uint32_t i) { return args.tensors[i].data_ptr()->identity(); }

  // The first tensor argument that shares data with argument j (j itself if none).
  static uint64_t first_alias(const CallArgs& args, uint32_t j) {
    const void* p = data(args, j);
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
      case Check::Kind::kSize: return static_cast<uint64_t>(args.tensors[c.index].peek_shape()[static_cast<int>(c.dim)]);
      case Check::Kind::kContiguous: return 1;  // HostBuffers are dense row-major
      case Check::Kind::kDevice: return 0;      // host memory
      case Check::Kind::kAliasOf: return first_alias(args, c.index);
      case Check::Kind::kDistinct: return data(args, c.index) == data(args, c.dim) ? 0 : 1;  // unused since guards1
      case Check::Kind::kScalarValue: return scalar_bits(args.scalars[c.index]);
      case Check::Kind::kSizeRange: case Check::Kind::kSameSize:
        return static_cast<uint64_t>(args.tensors[c.index].peek_shape()[static_cast<int>(c.dim)]);
    }
    return 0;
  }

  static uint64_t other_size(const Check& c, const CallArgs& args) {
    return static_cast<uint64_t>(
        args.tensors[c.expected / 256].peek_shape()[static_cast<int>(c.expected % 256)]);
  }

  bool passes(const Check& c, const CallArgs& args) const {
    const uint64_t got = actual(c, args);
    switch (c.kind) {
      case Check::Kind::kSizeRange: return got >= c.expected && got <= static_cast<uint64_t>(kMaxDynamicSize);
      case Check::Kind::kSameSize: return got == other_size(c, args);
      default: return got == c.expected;
    }
  }

  // Checks in order; a count or rank failure stops the walk (later checks index by them).
  bool holds(const Entry& e, const CallArgs& args) const {
    for (const Check& c : e.checks) {
      if (c.kind == Check::Kind::kSize) {  // most checks: inline
        if (static_cast<uint64_t>(args.tensors[c.index].peek_shape()[static_cast<int>(c.dim)]) != c.expected) {
          return false;
        }
      } else if (!passes(c, args)) {
        return false;
      }
    }
    return true;
  }

  // The failed guards of `e`, described; `failed` (optional) receives the failed checks.
  std::vector<GuardFailure> explain(const Entry& e, const CallArgs& args,
                                    std::vector<Check>* failed = nullptr) const {
    std::vector<GuardFailure> out;
    for (const Check& c : e.checks) {
      if (passes(c, args)) continue;
      const uint64_t got = actual(c, args);
      if (failed) failed->push_back(c);
      GuardFailure f;
      switch (c.kind) {
        case Check::Kind::kNumTensors:
          f = {"number of tensor arguments", fmt::format("{}", c.expected), fmt::format("{}", got)};
          break;
        case Check::Kind::kNumScalars:
          f = {"number of scalar arguments", fmt::format("{}", c.expected), fmt::format("{}", got)};
          break;
        case Check::Kind::kOptions:
          // Entries stored before the label was recorded name only the digest.
          if (!e.options_label.empty() && e.options_label != options_label) {
            f = {"backend", e.options_label, options_label};
          } else {
            f = {"lowering options digest", fmt::format("{:016x}", c.expected), fmt::format("{:016x}", got)};
          }
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
        case Check::Kind::kSizeRange:
          f = {fmt::format("{}: size of dim {} (dynamic)", input_name(c.index), c.dim),
               fmt::format("in [{}, {}]", c.expected, kMaxDynamicSize), fmt::format("{}", got)};
          break;
        case Check::Kind::kSameSize:
          f = {fmt::format("{}: size of dim {} (dynamic)", input_name(c.index), c.dim),
               fmt::format("equal to {} dim {} ({})", input_name(static_cast<uint32_t>(c.expected / 256)),
                           c.expected % 256, other_size(c, args)),
               fmt::format("{}", got)};
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

  static bool is_dynamic(std::span<const DynamicDim> dims, size_t input, int dim) {
    return std::find(dims.begin(), dims.end(), DynamicDim{input, dim}) != dims.end();
  }

  std::vector<Check> make_checks(const CallArgs& args, std::span<const DynamicDim> dynamic) const {
    std::vector<Check> checks;
    checks.push_back({Check::Kind::kNumTensors, 0, 0, args.tensors.size()});
    checks.push_back({Check::Kind::kNumScalars, 0, 0, args.scalars.size()});
    checks.push_back({Check::Kind::kOptions, 0, 0, options_digest});
    for (uint32_t i = 0; i < args.tensors.size(); ++i) {
      const Tensor& t = args.tensors[i];
      checks.push_back({Check::Kind::kDType, i, 0, static_cast<uint64_t>(t.dtype())});
      checks.push_back({Check::Kind::kRank, i, 0, static_cast<uint64_t>(t.rank())});
      for (int d = 0; d < t.rank(); ++d) {
        const uint64_t size = static_cast<uint64_t>(t.peek_shape()[d]);
        if (!is_dynamic(dynamic, i, d)) {
          checks.push_back({Check::Kind::kSize, i, static_cast<uint32_t>(d), size});
          continue;
        }
        checks.push_back({Check::Kind::kSizeRange, i, static_cast<uint32_t>(d), 1});
        // Dynamic dims equal now stay equal: relate this one to the first equal one before it.
        for (const DynamicDim& o : dynamic) {
          if (o.input > i || (o.input == i && o.dim >= d)) continue;
          if (args.tensors[o.input].peek_shape()[o.dim] != t.peek_shape()[d]) continue;
          checks.push_back({Check::Kind::kSameSize, i, static_cast<uint32_t>(d),
                            o.input * 256 + static_cast<uint64_t>(o.dim)});
          break;
        }
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

  // The type a template parameter has in this call.
  static TensorType type_of(const ValueSource& v, const CallArgs& args) {
    if (v.kind == ValueSource::Kind::kInput) {
      const Tensor& t = args.tensors[v.a];
      return {t.dtype(), t.peek_shape()};
    }
    return {DType::kF32, Shape{}};  // a dynamic scalar
  }

  // The segment of dynamic entry `e` for this call's sizes: kept from before, or instantiated
  // from the template now (no trace), compiled through the runtime (so the graph cache serves
  // it when it can) and kept. nullptr with `why` set if the template does not apply at these
  // sizes.
  Result<Segment*> specialize(Entry& e, const CallArgs& args, std::string* why) {
    Dynamic& d = *e.dynamic;
    for (Specialization& sp : d.specs) {
      bool same = true;
      for (size_t k = 0; k < d.dims.size() && same; ++k) {
        same = sp.sizes[k] == args.tensors[d.dims[k].input].peek_shape()[d.dims[k].dim];
      }
      if (same) return &sp.segment;
    }
    std::vector<TensorType> types;
    types.reserve(d.params.size());
    for (const ValueSource& v : d.params) types.push_back(type_of(v, args));
    Result<Graph> g = instantiate(d.tmpl, types);
    if (!g.is_ok()) {
      *why = g.status().message();
      return static_cast<Segment*>(nullptr);
    }
    ScopedTimer timer(&runtime->metrics(), timers::kCanonicalizeHash);
    CanonicalGraph cg = canonicalize(*g, g->outputs(), options.canonicalize);
    timer.stop();
    Specialization sp;
    for (const DynamicDim& dd : d.dims) sp.sizes.push_back(args.tensors[dd.input].peek_shape()[dd.dim]);
    sp.segment.key = cg.key;
    for (const ParamSource& ps : cg.sources) {
      if (ps.kind == ParamSource::Kind::kTraceParam) {
        sp.segment.params.push_back(d.params[ps.trace_param]);
      } else {
        ValueSource v;
        v.kind = ValueSource::Kind::kConstant;
        v.constant = host_data(scalar_buffer(ps));
        sp.segment.params.push_back(std::move(v));
      }
    }
    Result<std::shared_ptr<const Executable>> exe = runtime->prepare(cg);
    if (!exe.is_ok()) return exe.status();
    sp.segment.exe = *exe;
    if (d.specs.size() >= kMaxSpecializations) d.specs.erase(d.specs.begin());
    d.specs.push_back(std::move(sp));
    ++specializations;
    runtime->metrics().add(counters::kSpecializations);
    return &d.specs.back().segment;
  }

  // Runs entry `e`. Returns nullopt (not an error) if a value guard between segments fails or
  // a dynamic entry's template does not apply (then `why` says why).
  Result<std::optional<std::vector<DataRef>>> replay(Entry& e, const CallArgs& args, std::string* why) {
    std::span<Segment> segments(e.segments);
    if (e.dynamic) {
      Result<Segment*> seg = specialize(e, args, why);
      if (!seg.is_ok()) return seg.status();
      if (*seg == nullptr) return std::optional<std::vector<DataRef>>();
      segments = std::span<Segment>(*seg, 1);
    }
    std::vector<std::vector<DataRef>> seg_out(segments.size());
    auto value_of = [&](const ValueSource& v) -> DataRef {
      switch (v.kind) {
        case ValueSource::Kind::kInput: return args.tensors[v.a].data();
        case ValueSource::Kind::kDynamicScalar: {
          HostBuffer b(DType::kF32, Shape{});
          *b.data<float>() = static_cast<float>(args.scalars[v.a]);
          return host_data(std::move(b));
        }
        case ValueSource::Kind::kSegmentOutput: return seg_out[v.a][v.b];
        case ValueSource::Kind::kConstant: return v.constant;
      }
      return nullptr;
    };
    auto routed = [&](const ValueSource& v) {
      return v.kind != ValueSource::Kind::kSegmentOutput || v.b < seg_out[v.a].size();
    };
    for (size_t k = 0; k < segments.size(); ++k) {
      Segment& seg = segments[k];
      if (!seg.exe) {  // an entry loaded from the cache: fetch its executable by key
        Result<std::shared_ptr<const Executable>> exe = runtime->prepare_by_key(seg.key);
        if (!exe.is_ok()) return exe.status();
        if (Status fits = check_segment(e, k, **exe); !fits.is_ok()) return fits;
        seg.exe = *exe;
      }
      scratch.clear();
      for (const ValueSource& v : seg.params) {
        if (!routed(v)) return corruption("guard entry routes a value that does not exist");
        scratch.push_back(value_of(v));
      }
      Result<std::vector<DataRef>> outs = runtime->run_or_fall_back(*seg.exe, scratch);
      if (!outs.is_ok()) return corruption("guard entry does not fit its executable: " + outs.status().message());
      seg_out[k] = std::move(*outs);
      for (const auto& [o, expected] : seg.value_guards) {
        if (o >= seg_out[k].size()) return corruption("guard entry checks an output that does not exist");
        if (!XXH128_isEqual(content_hash(*read_value(seg_out[k][o])), expected)) return std::optional<std::vector<DataRef>>();
      }
    }
    std::vector<DataRef> outputs;
    outputs.reserve(e.outputs.size());
    // The outputs are what the entry promises (its recorded types; a dynamic entry's sizes
    // follow the call), whatever a stored entry routes: never a value of another type.
    for (size_t o = 0; o < e.outputs.size(); ++o) {
      const ValueSource& v = e.outputs[o];
      if (!routed(v)) return corruption("guard entry routes a value that does not exist");
      DataRef b = value_of(v);
      const TensorType& promised = e.output_types[o];
      const bool fits = b->dtype() == promised.dtype &&
                        (e.dynamic ? b->shape().rank() == promised.shape.rank() : b->shape() == promised.shape);
      if (!fits) {
        return corruption(fmt::format("guard entry output {} is recorded as {}, the replay gave {}", o,
                                      type_to_string(promised), type_to_string({b->dtype(), b->shape()})));
      }
      outputs.push_back(std::move(b));
    }
    return std::optional<std::vector<DataRef>>(std::move(outputs));
  }

  // Compares a stored entry's replayed outputs with the types `fn` returns for `args`
  // (CompiledFunctionOptions::output_types; ok when it is not set). kCorruption on a mismatch.
  Status verify_outputs(const std::vector<DataRef>& outputs, const CallArgs& args) const {
    if (!options.output_types) return Status::ok();
    Result<std::vector<TensorType>> want = options.output_types(args);
    if (!want.is_ok()) return want.status();
    if (want->size() != outputs.size()) {
      return corruption(fmt::format("guard entry returns {} outputs, the function {}", outputs.size(), want->size()));
    }
    for (size_t o = 0; o < outputs.size(); ++o) {
      const TensorType got{outputs[o]->dtype(), outputs[o]->shape()};
      if (got != (*want)[o]) {
        return corruption(fmt::format("guard entry output {} is {}, the function returns {}", o, type_to_string(got),
                                      type_to_string((*want)[o])));
      }
    }
    return Status::ok();
  }

  // ---- tracing ------------------------------------------------------------------------------

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
        auto it = origin.find(params[p]->identity());
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
      Result<std::vector<DataRef>> outs = runtime_->run_or_fall_back(**exe, params);
      if (!outs.is_ok()) return outs;
      const uint32_t k = static_cast<uint32_t>(segments.size());
      for (uint32_t o = 0; o < outs->size(); ++o) {
        ValueSource v;
        v.kind = ValueSource::Kind::kSegmentOutput;
        v.a = k;
        v.b = o;
        origin.try_emplace((*outs)[o]->identity(), v);  // an output that is an input keeps its origin
      }
      segments.push_back(std::move(seg));
      last_outputs.push_back(*outs);
      return outs;
    }

    std::unordered_map<const void*, ValueSource> origin;  // DeviceData::identity(), this trace only
    std::vector<Segment> segments;
    std::vector<std::vector<DataRef>> last_outputs;

   private:
    Runtime* runtime_;
  };

  // Makes `entry` shape-polymorphic in `dims` from the template of its trace, if the trace
  // allows it (one graph, every parameter an argument); the dims of an input whose shape `fn`
  // read become static again. Returns a note for the recompile reason.
  std::string make_dynamic(Entry& entry, TraceTemplate& tmpl, Recorder& rec, size_t segments_inside_fn,
                           std::vector<DynamicDim> dims, const CallArgs& args) {
    if (!tmpl.usable) return "dims stay static: " + tmpl.unusable_reason;
    if (rec.segments.size() != 1 || segments_inside_fn != 0 || tmpl.barriers != 1) {
      return "dims stay static: the traced code read a value (more than one graph)";
    }
    auto d = std::make_shared<Dynamic>();
    for (const DataRef& b : tmpl.param_data) {
      auto it = rec.origin.find(b->identity());
      if (it == rec.origin.end() || (it->second.kind != ValueSource::Kind::kInput &&
                                     it->second.kind != ValueSource::Kind::kDynamicScalar)) {
        return "dims stay static: the graph reads data that is not an argument";
      }
      d->params.push_back(it->second);
    }
    std::string note;
    for (const auto& [data, shape] : tmpl.observed_data) {
      auto it = rec.origin.find(data);
      if (it == rec.origin.end()) continue;
      const ValueSource& v = it->second;
      if (v.kind == ValueSource::Kind::kInput) {
        size_t before = dims.size();
        std::erase_if(dims, [&](const DynamicDim& dd) { return dd.input == v.a; });
        if (dims.size() != before) note += fmt::format("; {} stays static: the function read its shape", input_name(v.a));
      } else if (v.kind == ValueSource::Kind::kSegmentOutput && v.b < tmpl.roots.size()) {
        tmpl.observed.push_back({tmpl.roots[v.b], shape});
      }
    }
    if (dims.empty()) return note.empty() ? note : note.substr(2);
    std::string made;
    for (const DynamicDim& dd : dims) {
      made += fmt::format("{}{} dim {}", made.empty() ? "" : ", ", input_name(static_cast<uint32_t>(dd.input)), dd.dim);
    }
    d->tmpl.graph = std::move(tmpl.graph);
    d->tmpl.sym_attrs = std::move(tmpl.sym_attrs);
    d->tmpl.observed = std::move(tmpl.observed);
    d->tmpl.roots = std::move(tmpl.roots);
    Specialization sp;
    for (const DynamicDim& dd : dims) sp.sizes.push_back(args.tensors[dd.input].peek_shape()[dd.dim]);
    sp.segment = std::move(rec.segments[0]);
    d->specs.push_back(std::move(sp));
    d->dims = std::move(dims);
    entry.dynamic = std::move(d);
    return "dynamic: " + made + note;
  }

  // Traces `fn` on `args`; appends an entry unless `keep` is false, dynamic in `dynamic_dims`
  // if it can be. Returns the outputs; `note` (optional) receives what became of the dims.
  Result<std::vector<DataRef>> trace(const CallArgs& args, bool keep,
                                       std::vector<DynamicDim> dynamic_dims = {},
                                       std::string* note = nullptr) {
    Recorder rec(runtime);
    TraceTemplate tmpl;
    LazyOptions lo;
    lo.canonicalize = options.canonicalize;
    lo.metrics = &runtime->metrics();
    if (keep && !dynamic_dims.empty()) lo.capture = &tmpl;
    std::vector<Tensor> outputs;
    size_t segments_inside_fn = 0;
    {
      LazyContext tctx(&rec, lo);
      TraceArgs targs;
      for (uint32_t i = 0; i < args.tensors.size(); ++i) {
        DataRef b = args.tensors[i].data();
        targs.tensors_.push_back(tctx.from_data(b));
        rec.origin.try_emplace(b->identity(), ValueSource{ValueSource::Kind::kInput, i, 0, nullptr});
      }
      targs.scalars_ = args.scalars;
      targs.scalar_tensors_.resize(args.scalars.size());
      for (uint32_t s = 0; s < args.scalars.size(); ++s) {
        if (!dynamic_scalar[s]) continue;
        HostBuffer b(DType::kF32, Shape{});
        *b.data<float>() = static_cast<float>(args.scalars[s]);
        DataRef ref = host_data(std::move(b));
        rec.origin.try_emplace(ref->identity(), ValueSource{ValueSource::Kind::kDynamicScalar, s, 0, nullptr});
        targs.scalar_tensors_[s] = tctx.from_data(ref);
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
    std::vector<DataRef> result;
    for (size_t o = 0; o < outputs.size(); ++o) {
      if (!outputs[o].defined()) return invalid_argument(fmt::format("output {} of the traced function is undefined", o));
      DataRef b = outputs[o].data();
      auto it = rec.origin.find(b->identity());
      if (it == rec.origin.end()) {
        return invalid_argument(fmt::format(
            "output {} of the traced function is tensor data that is not one of its arguments", o));
      }
      entry.outputs.push_back(it->second);
      entry.output_types.push_back({b->dtype(), b->shape()});
      result.push_back(std::move(b));
    }
    // Everything materialized while fn ran may have been read by it: guard the contents.
    for (size_t k = 0; k < segments_inside_fn; ++k) {
      for (uint32_t o = 0; o < rec.last_outputs[k].size(); ++o) {
        rec.segments[k].value_guards.emplace_back(o, content_hash(*read_value(rec.last_outputs[k][o])));
      }
    }
    if (keep) {
      if (!dynamic_dims.empty()) {
        std::string n = make_dynamic(entry, tmpl, rec, segments_inside_fn, std::move(dynamic_dims), args);
        if (note) *note = std::move(n);
      }
      if (!entry.dynamic) entry.segments = std::move(rec.segments);
      entry.options_label = options_label;
      entry.checks = make_checks(args, entry.dynamic ? std::span<const DynamicDim>(entry.dynamic->dims)
                                                     : std::span<const DynamicDim>());
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
      Result<Entry> e = row.corrupt ? Result<Entry>(corruption("stored guard entry failed its checksum"))
                                    : parse_entry(row.blob);
      if (!e.is_ok()) {
        drop_stored(row.entry, e.status().message());
        continue;
      }
      e->db_index = row.entry;
      e->outputs_verified = false;
      entries.push_back(std::move(*e));
    }
  }

  // An entry that could not be used: a `corrupt` event for a malformed entry or cache row, a
  // `miss` event for anything else (say, its graph is no longer in the cache). Its stored row is
  // removed unless the failure may pass (a locked or unreadable database).
  void drop_entry(const Entry& e, const Status& why) {
    const StatusCode code = why.code();
    if (code == StatusCode::kCorruption) {
      drop_stored(e.db_index, why.message());
      return;
    }
    const bool permanent = code == StatusCode::kNotFound;
    runtime->function_event(store::EventKind::kMiss, key.name,
                            fmt::format("entry {} could not be used ({}); the call traces{}", e.db_index,
                                        why.message(), permanent ? "" : ", the stored entry is kept"));
    if (store::CacheDb* d = db(); d && permanent && e.db_index >= 0) (void)d->remove_function_entry(key, e.db_index);
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
  int64_t specializations = 0;
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
  impl_->options_label = runtime->backend().display_name() +
                         (impl_->options.canonicalize.bake_scalars ? " (scalars baked)" : "");
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

  auto wrap = [&ctx](std::vector<DataRef> bufs) {
    std::vector<Tensor> out;
    out.reserve(bufs.size());
    for (DataRef& b : bufs) out.push_back(ctx.from_data(std::move(b)));
    return out;
  };

  if (stats_.fell_back_to_lazy) {
    ++stats_.traces;
    Result<std::vector<DataRef>> r = impl_->trace(args, /*keep=*/false);
    if (!r.is_ok()) return r.status();
    return wrap(std::move(*r));
  }

  bool value_guard_failed = false;
  std::string template_failure;  // why a dynamic entry whose guards held did not apply
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
    std::string why;
    Result<std::optional<std::vector<DataRef>>> r = impl_->replay(impl_->entries[e], args, &why);
    stats_.specializations = impl_->specializations;
    if (r.is_ok() && r->has_value() && !impl_->entries[e].outputs_verified) {
      Status verified = impl_->verify_outputs(**r, args);
      if (verified.is_ok()) {
        impl_->entries[e].outputs_verified = true;
      } else {
        r = verified;
      }
    }
    if (!r.is_ok()) {
      // Any failure to use a cached entry (a malformed entry, its graph or executable missing or
      // unreadable in the cache) is a miss, never an error: drop the entry and look further;
      // the call traces if nothing else holds (docs/architecture.md invariants 5 and 6).
      impl_->drop_entry(impl_->entries[e], r.status());
      impl_->entries.erase(impl_->entries.begin() + static_cast<std::ptrdiff_t>(e));
      stats_.hits_per_entry.erase(stats_.hits_per_entry.begin() + static_cast<std::ptrdiff_t>(e));
      --e;
      continue;
    }
    if (!r->has_value()) {
      if (why.empty()) {
        value_guard_failed = true;
      } else if (template_failure.empty()) {
        template_failure = fmt::format("entry {}: {}", e, why);
      }
      ++stats_.guard_failures;
      m.add(counters::kGuardFailures);
      continue;
    }
    ++stats_.hits_per_entry[e];
    ++impl_->entries[e].unflushed_hits;
    return wrap(std::move(**r));
  }

  // The dims the next entry makes dynamic: those marked, and (automatic_dynamic) those whose
  // size alone failed the closest entry, with the closest entry's own dynamic dims.
  std::vector<DynamicDim> dynamic;
  auto add_dynamic = [&](size_t input, int dim) {
    if (input < args.tensors.size() && dim >= 0 && dim < args.tensors[input].rank() &&
        !Impl::is_dynamic(dynamic, input, dim)) {
      dynamic.push_back({input, dim});
    }
  };
  for (const DynamicDim& d : impl_->options.dynamic_dims) add_dynamic(d.input, d.dim);

  // No entry holds: trace (the first time) or recompile, saying why.
  std::string reason;
  if (!impl_->entries.empty()) {
    size_t closest = 0;
    std::vector<GuardFailure> best;
    std::vector<Check> best_failed;
    for (size_t e = 0; e < impl_->entries.size(); ++e) {
      std::vector<Check> failed;
      std::vector<GuardFailure> f = impl_->explain(impl_->entries[e], args, &failed);
      if (e == 0 || f.size() < best.size()) {
        best = std::move(f);
        best_failed = std::move(failed);
        closest = e;
      }
    }
    reason = fmt::format("entry {}: ", closest);
    if (best.empty() && !template_failure.empty()) {
      reason = template_failure;
    } else if (best.empty() && value_guard_failed) {
      reason += "a value read inside the function changed";
    }
    for (size_t i = 0; i < best.size(); ++i) reason += (i ? "; " : "") + best[i].to_string();
    const bool sizes_only = !best_failed.empty() && std::all_of(best_failed.begin(), best_failed.end(), [](const Check& c) {
      return c.kind == Check::Kind::kSize || c.kind == Check::Kind::kSizeRange || c.kind == Check::Kind::kSameSize;
    });
    if (impl_->options.automatic_dynamic && sizes_only) {
      for (const Check& c : best_failed) add_dynamic(c.index, static_cast<int>(c.dim));
      if (const auto& d = impl_->entries[closest].dynamic) {
        for (const DynamicDim& dd : d->dims) add_dynamic(dd.input, dd.dim);
      }
    }
    if (static_cast<int>(impl_->entries.size()) >= impl_->options.recompile_limit) {
      ++stats_.recompiles;
      m.add(counters::kRecompiles);
      stats_.recompile_reasons.push_back(reason);
      impl_->runtime->function_event(store::EventKind::kRecompile, name_, reason);
      stats_.fell_back_to_lazy = true;
      std::string why = fmt::format("'{}' recompiled {} times (limit {}); it now runs in lazy mode",
                                    name_, impl_->entries.size(), impl_->options.recompile_limit);
      impl_->runtime->add_warning(why);
      impl_->runtime->function_event(store::EventKind::kFallback, name_, why);
      ++stats_.traces;
      Result<std::vector<DataRef>> r = impl_->trace(args, /*keep=*/false);
      if (!r.is_ok()) return r.status();
      return wrap(std::move(*r));
    }
  }
  ++stats_.traces;
  std::string note;
  Result<std::vector<DataRef>> r = impl_->trace(args, /*keep=*/true, std::move(dynamic), &note);
  if (!impl_->entries.empty() && !reason.empty()) {
    // A recompile: recorded with what became of the dims (after tracing, which decides it).
    if (!note.empty()) reason += " [" + note + "]";
    ++stats_.recompiles;
    m.add(counters::kRecompiles);
    stats_.recompile_reasons.push_back(reason);
    impl_->runtime->function_event(store::EventKind::kRecompile, name_, reason);
  }
  if (!r.is_ok()) return r.status();
  stats_.hits_per_entry.push_back(0);
  return wrap(std::move(*r));
}

void CompiledFunction::mark_dynamic(size_t input, int dim) {
  DynamicDim d{input, dim};
  auto& dims = impl_->options.dynamic_dims;
  if (std::find(dims.begin(), dims.end(), d) == dims.end()) dims.push_back(d);
}

}  // namespace tracecache
