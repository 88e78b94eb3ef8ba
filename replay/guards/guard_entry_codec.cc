#include "replay/guards/guard_entry_codec.h"

#include <fmt/format.h>

#include <array>
#include <bit>
#include <limits>
#include <optional>

#include "replay/guards/shape_specialization.h"
#include "store/codec/graph_codec.h"
#include "store/codec/proto/tracecache.pb.h"

namespace tracecache {

namespace {

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
  if (in.kind() > static_cast<uint32_t>(ValueSource::Kind::kHostOutput)) return std::nullopt;
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


// Parses and checks a stored dynamic plan so that instantiating it can never index out of
// range: template graph re-inferred (graph codec, raw attributes), bindings point at earlier
// nodes' existing dims and at existing attribute elements in node order, observations and
// roots at existing nodes, one parameter source per template parameter.
bool parse_dynamic(const proto::DynamicPlan& pd, uint64_t num_tensors, uint64_t num_scalars,
                   const std::vector<int64_t>& rank, GuardEntry& e) {
  auto d = std::make_shared<DynamicPlan>();
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
constexpr int kMaxHostOps = 4096;
constexpr int kMaxRoutes = 1 << 16;       // parameters of a segment; outputs of an entry
constexpr size_t kMaxLabelBytes = 256;

// The checks an entry over `tensors` tensors and `scalars` scalars can have at most: counts and
// options, per tensor dtype, rank, contiguity, device, aliasing and two per dim, per scalar one.
constexpr uint64_t max_checks(uint64_t tensors, uint64_t scalars) {
  return 3 + tensors * (5 + 2 * static_cast<uint64_t>(kMaxRank)) + scalars;
}

void type_to_proto(const TensorType& t, proto::OutputType* pt) {
  pt->set_dtype(static_cast<uint32_t>(t.dtype));
  for (int d = 0; d < t.shape.rank(); ++d) pt->add_shape(t.shape[d]);
}

std::optional<TensorType> type_from_proto(const proto::OutputType& pt) {
  if (pt.dtype() >= static_cast<uint32_t>(kDTypeCount) || pt.shape_size() > kMaxRank) return std::nullopt;
  for (int64_t d : pt.shape()) {
    if (d < 0) return std::nullopt;
  }
  return TensorType{static_cast<DType>(pt.dtype()),
                    Shape(IntList(std::span<const int64_t>(pt.shape().data(), pt.shape_size())))};
}

// A kSameSize check's other dim, as stored in its `expected` field (format 3): tensor * 256 + dim.
uint64_t same_size_to_wire(TensorDim d) { return uint64_t{d.tensor} * 256 + d.dim; }
TensorDim same_size_from_wire(uint64_t expected) {
  return {static_cast<uint32_t>(expected / 256), static_cast<uint32_t>(expected % 256)};
}

// The check kind stored as `kind`, if it is one this format has (9, "distinct", was last
// written before format 2, so no entry of this format carries it).
std::optional<GuardCheck::Kind> kind_from_wire(uint32_t kind) {
  if (kind > GuardCheck::kLastKind || kind == 9) return std::nullopt;
  return static_cast<GuardCheck::Kind>(kind);
}

}  // namespace

std::string encode_guard_entry(const GuardEntry& e) {
  proto::GuardEntry pe;
  pe.set_format_version(kGuardEntryFormat);
  for (const GuardCheck& c : e.guards.checks()) {
    proto::GuardCheck* pc = pe.add_checks();
    pc->set_kind(static_cast<uint32_t>(c.kind));
    pc->set_index(c.arg);
    pc->set_dim(c.dim);
    pc->set_expected(c.kind == GuardCheck::Kind::kSameSize ? same_size_to_wire(c.same_as) : c.expected);
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
  for (const TensorType& t : e.output_types) type_to_proto(t, pe.add_output_types());
  for (const HostOp& op : e.host_ops) {
    proto::HostOp* ph = pe.add_host_ops();
    ph->set_payload(op.payload);
    ph->set_description(op.description);
    ph->set_position(op.position);
    for (const ValueSource& v : op.inputs) source_to_proto(v, ph->add_inputs());
    for (const TensorType& t : op.output_types) type_to_proto(t, ph->add_output_types());
    for (const auto& [o, h] : op.value_guards) {
      proto::ValueGuard* g = ph->add_value_guards();
      g->set_output(o);
      g->set_hash_high(h.high64);
      g->set_hash_low(h.low64);
    }
  }
  for (const InputValueGuard& g : e.input_value_guards) {
    proto::InputValueGuard* pg = pe.add_input_value_guards();
    source_to_proto(g.source, pg->mutable_source());
    pg->set_hash_high(g.hash.high64);
    pg->set_hash_low(g.hash.low64);
  }
  pe.set_options_label(e.guards.options_label());
  for (const ArgumentUpdate& u : e.updates) {
    proto::ArgumentUpdate* pu = pe.add_updates();
    pu->set_output(u.output);
    pu->set_argument(u.argument);
  }
  pe.set_note(e.note);
  if (e.dynamic) {
    const DynamicPlan& d = *e.dynamic;
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

namespace {

// decode_guard_entry's phases, in order; each checks what it reads (kCorruption naming what
// failed) against what earlier phases decoded, and fills `e`.
class EntryDecoder {
 public:
  explicit EntryDecoder(const proto::GuardEntry& entry) : pe(entry) {}

  Status read_counts_and_limits();
  Status read_checks();
  Status read_host_ops();
  Status read_input_value_guards();
  Status read_segments();
  Status read_dynamic_plan();
  Status read_outputs();
  Status read_updates();

  GuardEntry take() { return std::move(e); }

 private:
  using Kind = GuardCheck::Kind;

  // Whether `v` reads a value that exists when it is read: before `segments_before` segments and
  // `host_ops_before` host ops have run (host ops are decoded before the segments, each after the
  // segments it reads, so a value a segment or an output reads from a host op is checked).
  bool source_ok(const ValueSource& v, size_t segments_before, size_t host_ops_before) const {
    switch (v.kind) {
      case ValueSource::Kind::kInput: return v.a < num_tensors;
      case ValueSource::Kind::kDynamicScalar: return v.a < num_scalars;
      case ValueSource::Kind::kSegmentOutput: return v.a < segments_before;  // b: check_segment
      case ValueSource::Kind::kConstant: return v.constant != nullptr;
      case ValueSource::Kind::kHostOutput:
        return v.a < host_ops_before && v.b < e.host_ops[v.a].output_types.size();
    }
    return false;
  }
  // The host ops that run before segment k: those with position <= k.
  size_t host_ops_before(size_t k) const {
    size_t n = 0;
    while (n < e.host_ops.size() && e.host_ops[n].position <= k) ++n;
    return n;
  }

  const proto::GuardEntry& pe;
  uint64_t num_tensors = 0, num_scalars = 0;
  GuardEntry e;
  // What the checks guard, per tensor: dtype, rank, and each dim's size (-1: dynamic).
  std::vector<int64_t> dtype, rank;
  std::vector<std::array<int64_t, kMaxRank>> size;
  std::vector<std::array<bool, kMaxRank>> sized;
};

// The format, the counts and options checks first, and every count within its bound.
Status EntryDecoder::read_counts_and_limits() {
  if (pe.format_version() != kGuardEntryFormat) {
    return corruption(fmt::format("guard entry has format {}, expected {}", pe.format_version(), kGuardEntryFormat));
  }
  auto wire_kind = [](Kind k) { return static_cast<uint32_t>(k); };
  if (pe.checks_size() < 3 || pe.checks(0).kind() != wire_kind(Kind::kNumTensors) ||
      pe.checks(1).kind() != wire_kind(Kind::kNumScalars) || pe.checks(2).kind() != wire_kind(Kind::kOptions)) {
    return corruption("guard entry does not start with its count and options checks");
  }
  num_tensors = pe.checks(0).expected();
  num_scalars = pe.checks(1).expected();
  if (num_tensors > kMaxArguments || num_scalars > kMaxArguments) {
    return corruption(fmt::format("guard entry has {} tensor and {} scalar arguments (at most {} each)",
                                  num_tensors, num_scalars, kMaxArguments));
  }
  if (static_cast<uint64_t>(pe.checks_size()) > max_checks(num_tensors, num_scalars) ||
      pe.segments_size() > kMaxSegments || pe.outputs_size() > kMaxRoutes ||
      pe.options_label().size() > kMaxLabelBytes || pe.note().size() > kMaxGuardEntryNoteBytes ||
      pe.host_ops_size() > kMaxHostOps || pe.input_value_guards_size() > kMaxRoutes) {
    return corruption("guard entry has more checks, segments, outputs or note bytes than it may");
  }
  return Status::ok();
}

// The guard checks: each in range and in order; every tensor's type guarded whole.
Status EntryDecoder::read_checks() {
  e.note = pe.note();
  std::vector<GuardCheck> checks;
  dtype.assign(num_tensors, -1);
  rank.assign(num_tensors, -1);
  size.resize(num_tensors);
  sized.resize(num_tensors);
  for (int i = 0; i < pe.checks_size(); ++i) {
    const proto::GuardCheck& pc = pe.checks(i);
    const std::optional<Kind> kind = kind_from_wire(pc.kind());
    if (!kind) return corruption("guard entry has an unknown check");
    GuardCheck c{*kind, pc.index(), pc.dim(), pc.expected(), {}};
    const bool tensor = c.arg < num_tensors;
    const bool dim = tensor && rank[c.arg] > static_cast<int64_t>(c.dim);
    bool ok = true;
    switch (c.kind) {
      case Kind::kNumTensors: ok = i == 0; break;
      case Kind::kNumScalars: ok = i == 1; break;
      case Kind::kOptions: ok = i == 2; break;
      case Kind::kDType:
        ok = tensor && c.expected < static_cast<uint64_t>(kDTypeCount) && dtype[c.arg] < 0;
        if (ok) dtype[c.arg] = static_cast<int64_t>(c.expected);
        break;
      case Kind::kRank:
        ok = tensor && c.expected <= kMaxRank && rank[c.arg] < 0;
        if (ok) rank[c.arg] = static_cast<int64_t>(c.expected);
        break;
      case Kind::kSize:
        ok = dim && c.expected <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) && !sized[c.arg][c.dim];
        if (ok) size[c.arg][c.dim] = static_cast<int64_t>(c.expected), sized[c.arg][c.dim] = true;
        break;
      case Kind::kSizeRange:
        ok = dim && c.expected >= 1 && !sized[c.arg][c.dim];
        if (ok) size[c.arg][c.dim] = -1, sized[c.arg][c.dim] = true;
        break;
      case Kind::kContiguous: case Kind::kDevice:
        ok = tensor;
        break;
      case Kind::kAliasOf:
        ok = tensor && c.dim < num_tensors && c.expected < num_tensors;
        break;
      case Kind::kScalarValue: ok = c.arg < num_scalars; break;
      case Kind::kSameSize: {
        c.same_as = same_size_from_wire(c.expected);
        c.expected = 0;
        ok = dim && c.same_as.tensor < num_tensors && rank[c.same_as.tensor] > static_cast<int64_t>(c.same_as.dim);
        break;
      }
    }
    if (!ok) return corruption(fmt::format("guard entry check {} is out of range or out of order", i));
    checks.push_back(c);
  }
  e.guards = GuardSet(std::move(checks), pe.options_label());
  for (uint64_t t = 0; t < num_tensors; ++t) {
    bool complete = dtype[t] >= 0 && rank[t] >= 0;
    for (int64_t d = 0; complete && d < rank[t]; ++d) complete = sized[t][static_cast<size_t>(d)];
    if (!complete) return corruption(fmt::format("guard entry does not guard the type of input {}", t));
  }
  return Status::ok();
}

// The host ops (graph breaks): bounded, in order, each reading only values computed before it.
Status EntryDecoder::read_host_ops() {
  for (int h = 0; h < pe.host_ops_size(); ++h) {
    const proto::HostOp& ph = pe.host_ops(h);
    if (ph.payload().size() > kMaxHostOpPayloadBytes || ph.description().size() > kMaxHostOpPayloadBytes ||
        ph.inputs_size() > kMaxRoutes || ph.output_types_size() > kMaxRoutes || ph.value_guards_size() > kMaxRoutes) {
      return corruption(fmt::format("guard entry host op {} is larger than it may be", h));
    }
    if (ph.position() > static_cast<uint32_t>(pe.segments_size()) ||
        (!e.host_ops.empty() && ph.position() < e.host_ops.back().position)) {
      return corruption(fmt::format("guard entry host op {} runs at a position out of range or out of order", h));
    }
    HostOp op;
    op.payload = ph.payload();
    op.description = ph.description();
    op.position = ph.position();
    for (const proto::ValueSource& pv : ph.inputs()) {
      std::optional<ValueSource> v = source_from_proto(pv);
      if (!v || !source_ok(*v, op.position, static_cast<size_t>(h))) {
        return corruption(fmt::format("guard entry host op {} reads a value out of range", h));
      }
      op.inputs.push_back(std::move(*v));
    }
    for (const proto::OutputType& pt : ph.output_types()) {
      std::optional<TensorType> t = type_from_proto(pt);
      if (!t || !checked_numel(t->shape.span()).is_ok()) {
        return corruption(fmt::format("guard entry host op {} has a malformed result type", h));
      }
      op.output_types.push_back(std::move(*t));
    }
    for (const proto::ValueGuard& g : ph.value_guards()) {
      if (g.output() >= op.output_types.size()) return corruption("guard entry checks an output that does not exist");
      op.value_guards.emplace_back(g.output(), XXH128_hash_t{g.hash_low(), g.hash_high()});
    }
    e.host_ops.push_back(std::move(op));
  }
  return Status::ok();
}

// The value guards on arguments: on arguments that exist.
Status EntryDecoder::read_input_value_guards() {
  for (const proto::InputValueGuard& pg : pe.input_value_guards()) {
    std::optional<ValueSource> v = source_from_proto(pg.source());
    if (!v || (v->kind != ValueSource::Kind::kInput && v->kind != ValueSource::Kind::kDynamicScalar) ||
        !source_ok(*v, 0, 0)) {
      return corruption("guard entry guards the value of an argument out of range");
    }
    e.input_value_guards.push_back({std::move(*v), XXH128_hash_t{pg.hash_low(), pg.hash_high()}, {}});
  }
  return Status::ok();
}

// The segments: their keys and parameter routes (what depends on the executables is
// check_segment's, when each one is fetched).
Status EntryDecoder::read_segments() {
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
      if (!v || !source_ok(*v, e.segments.size(), host_ops_before(e.segments.size()))) {
        return corruption("guard entry routes a parameter out of range");
      }
      seg.params.push_back(std::move(*v));
    }
    for (const proto::ValueGuard& g : ps.value_guards()) {
      seg.value_guards.emplace_back(g.output(), XXH128_hash_t{g.hash_low(), g.hash_high()});
    }
    e.segments.push_back(std::move(seg));
  }
  return Status::ok();
}

// A dynamic entry's plan (parse_dynamic), only in an entry with nothing else to replay.
Status EntryDecoder::read_dynamic_plan() {
  if (pe.has_dynamic()) {
    if (!e.segments.empty() || !e.host_ops.empty() || !e.input_value_guards.empty() ||
        !parse_dynamic(pe.dynamic(), num_tensors, num_scalars, rank, e)) {
      return corruption("guard entry has a malformed dynamic plan");
    }
  }
  return Status::ok();
}

// The outputs: in range, each of the type it has when the entry's guards hold.
Status EntryDecoder::read_outputs() {
  if (pe.output_types_size() != pe.outputs_size()) {
    return corruption(fmt::format("guard entry has {} outputs but {} output types", pe.outputs_size(),
                                  pe.output_types_size()));
  }
  // A dynamic entry's outputs route from its one (specialized) segment: root indices.
  const size_t segments = e.dynamic ? 1 : e.segments.size();
  for (int o = 0; o < pe.outputs_size(); ++o) {
    std::optional<ValueSource> v = source_from_proto(pe.outputs(o));
    std::optional<TensorType> type = type_from_proto(pe.output_types(o));
    if (!v || !type || !source_ok(*v, segments, e.host_ops.size())) {
      return corruption(fmt::format("guard entry output {} is out of range", o));
    }
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
      case ValueSource::Kind::kHostOutput: fits = *type == e.host_ops[v->a].output_types[v->b]; break;
    }
    if (!fits) {
      return corruption(fmt::format("guard entry output {} does not have its recorded type {}", o, type_to_string(*type)));
    }
    e.outputs.push_back(std::move(*v));
    e.output_types.push_back(std::move(*type));
  }
  return Status::ok();
}

// Updates: a static entry's, each argument and output once, the output of the argument's type.
Status EntryDecoder::read_updates() {
  if (pe.updates_size() > 0 && e.dynamic) return corruption("guard entry of a dynamic plan updates arguments");
  if (pe.updates_size() > pe.outputs_size()) return corruption("guard entry updates more arguments than it has outputs");
  std::vector<bool> updated(num_tensors, false), replacing(e.outputs.size(), false);
  for (const proto::ArgumentUpdate& pu : pe.updates()) {
    const ArgumentUpdate u{pu.output(), pu.argument()};
    if (u.argument >= num_tensors || u.output >= e.outputs.size() || updated[u.argument] || replacing[u.output]) {
      return corruption("guard entry updates an argument out of range or twice");
    }
    updated[u.argument] = replacing[u.output] = true;
    const TensorType& t = e.output_types[u.output];
    bool fits = static_cast<int64_t>(t.dtype) == dtype[u.argument] && t.shape.rank() == rank[u.argument];
    for (int d = 0; fits && d < t.shape.rank(); ++d) fits = size[u.argument][static_cast<size_t>(d)] == t.shape[d];
    if (!fits) return corruption(fmt::format("guard entry output {} replaces input {} of another type", u.output, u.argument));
    e.updates.push_back(u);
  }
  return Status::ok();
}

}  // namespace

Result<GuardEntry> decode_guard_entry(const std::string& bytes) {
  proto::GuardEntry pe;
  if (!pe.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return corruption("guard entry does not parse");
  }
  EntryDecoder decoder(pe);
  for (Status (EntryDecoder::*phase)() : {&EntryDecoder::read_counts_and_limits, &EntryDecoder::read_checks,
                                          &EntryDecoder::read_host_ops, &EntryDecoder::read_input_value_guards,
                                          &EntryDecoder::read_segments, &EntryDecoder::read_dynamic_plan,
                                          &EntryDecoder::read_outputs, &EntryDecoder::read_updates}) {
    if (Status s = (decoder.*phase)(); !s.is_ok()) return s;
  }
  return decoder.take();
}

Status check_segment(const GuardEntry& e, size_t k, const Executable& exe) {
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
  for (const HostOp& op : e.host_ops) {
    for (const ValueSource& v : op.inputs) {
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

Status validate_guard_entry(const std::string& bytes) {
  Result<GuardEntry> e = decode_guard_entry(bytes);
  return e.is_ok() ? Status::ok() : e.status();
}

}  // namespace tracecache
