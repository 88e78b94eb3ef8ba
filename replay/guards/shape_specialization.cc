#include "replay/guards/shape_specialization.h"

#include <fmt/format.h>

#include <algorithm>

namespace tracecache {

namespace {

bool is_dynamic(std::span<const DynamicDim> dims, size_t input, int dim) {
  return std::find(dims.begin(), dims.end(), DynamicDim{input, dim}) != dims.end();
}

// The type a template parameter has in this call.
TensorType type_of(const ValueSource& v, const CallArgs& args) {
  if (v.kind == ValueSource::Kind::kInput) {
    const Tensor& t = args.tensors[v.a];
    return {t.dtype(), t.peek_shape()};
  }
  return {DType::kF32, Shape{}};  // a dynamic scalar
}

std::vector<int64_t> sizes_of(std::span<const DynamicDim> dims, const CallArgs& args) {
  std::vector<int64_t> sizes;
  sizes.reserve(dims.size());
  for (const DynamicDim& dd : dims) sizes.push_back(args.tensors[dd.input].peek_shape()[dd.dim]);
  return sizes;
}

}  // namespace

std::vector<DynamicDim> dims_to_make_dynamic(const CallArgs& args, std::span<const DynamicDim> marked, bool automatic,
                                             std::span<const GuardCheck> closest_failed,
                                             const DynamicPlan* closest_dynamic) {
  std::vector<DynamicDim> dims;
  auto add = [&](size_t input, int dim) {
    if (input < args.tensors.size() && dim >= 0 && dim < args.tensors[input].rank() && !is_dynamic(dims, input, dim)) {
      dims.push_back({input, dim});
    }
  };
  for (const DynamicDim& d : marked) add(d.input, d.dim);
  const bool sizes_only = !closest_failed.empty() &&
                          std::all_of(closest_failed.begin(), closest_failed.end(), [](const GuardCheck& c) { return c.on_size(); });
  if (automatic && sizes_only) {
    for (const GuardCheck& c : closest_failed) add(c.arg, static_cast<int>(c.dim));
    if (closest_dynamic) {
      for (const DynamicDim& dd : closest_dynamic->dims) add(dd.input, dd.dim);
    }
  }
  return dims;
}

std::string make_dynamic(GuardEntry& entry, TraceTemplate& tmpl, TraceRecord& trace, std::vector<DynamicDim> dims,
                         const CallArgs& args, const GuardEnvironment& env) {
  if (!tmpl.usable) return "dims stay static: " + tmpl.unusable_reason;
  if (!trace.host_ops.empty()) return "dims stay static: the traced code has a graph break (a host op)";
  if (trace.segments.size() != 1 || trace.segments_inside_fn != 0 || tmpl.barriers != 1 || trace.read_values) {
    return "dims stay static: the traced code read a value (more than one graph)";
  }
  auto d = std::make_shared<DynamicPlan>();
  for (const DataRef& b : tmpl.param_data) {
    auto it = trace.origin.find(b->identity());
    if (it == trace.origin.end() || (it->second.kind != ValueSource::Kind::kInput &&
                                     it->second.kind != ValueSource::Kind::kDynamicScalar)) {
      return "dims stay static: the graph reads data that is not an argument";
    }
    d->params.push_back(it->second);
  }
  std::string note;
  for (const auto& [data, shape] : tmpl.observed_data) {
    auto it = trace.origin.find(data);
    if (it == trace.origin.end()) continue;
    const ValueSource& v = it->second;
    if (v.kind == ValueSource::Kind::kInput) {
      size_t before = dims.size();
      std::erase_if(dims, [&](const DynamicDim& dd) { return dd.input == v.a; });
      if (dims.size() != before) note += fmt::format("; {} stays static: the function read its shape", env.input_name(v.a));
    } else if (v.kind == ValueSource::Kind::kSegmentOutput && v.b < tmpl.roots.size()) {
      tmpl.observed.push_back({tmpl.roots[v.b], shape});
    }
  }
  if (dims.empty()) return note.empty() ? note : note.substr(2);
  std::string made;
  for (const DynamicDim& dd : dims) {
    made += fmt::format("{}{} dim {}", made.empty() ? "" : ", ", env.input_name(static_cast<uint32_t>(dd.input)), dd.dim);
  }
  d->tmpl.graph = std::move(tmpl.graph);
  d->tmpl.sym_attrs = std::move(tmpl.sym_attrs);
  d->tmpl.observed = std::move(tmpl.observed);
  d->tmpl.roots = std::move(tmpl.roots);
  d->specs.push_back({sizes_of(dims, args), std::move(trace.segments[0])});
  d->dims = std::move(dims);
  entry.dynamic = std::move(d);
  return "dynamic: " + made + note;
}

Result<Specialized> specialize(DynamicPlan& plan, const CallArgs& args, const PrepareExecutable& prepare,
                               Metrics& metrics, const CanonicalizeOptions& canonicalize_options) {
  for (Specialization& sp : plan.specs) {
    bool same = true;
    for (size_t k = 0; k < plan.dims.size() && same; ++k) {
      same = sp.sizes[k] == args.tensors[plan.dims[k].input].peek_shape()[plan.dims[k].dim];
    }
    if (same) return Specialized{&sp.segment, false, {}};
  }
  std::vector<TensorType> types;
  types.reserve(plan.params.size());
  for (const ValueSource& v : plan.params) types.push_back(type_of(v, args));
  Result<Graph> g = instantiate(plan.tmpl, types);
  if (!g.is_ok()) return Specialized{nullptr, false, g.status().message()};
  ScopedTimer timer(&metrics, timers::kCanonicalizeHash);
  CanonicalGraph cg = canonicalize(*g, g->outputs(), canonicalize_options);
  timer.stop();
  Specialization sp;
  sp.sizes = sizes_of(plan.dims, args);
  sp.segment.key = cg.key;
  for (const ParamSource& ps : cg.sources) {
    if (ps.kind == ParamSource::Kind::kTraceParam) {
      sp.segment.params.push_back(plan.params[ps.trace_param]);
    } else {
      ValueSource v;
      v.kind = ValueSource::Kind::kConstant;
      v.constant = host_data(scalar_buffer(ps));
      sp.segment.params.push_back(std::move(v));
    }
  }
  Result<std::shared_ptr<const Executable>> exe = prepare(cg);
  if (!exe.is_ok()) return exe.status();
  sp.segment.exe = *exe;
  if (plan.specs.size() >= kMaxSpecializations) plan.specs.erase(plan.specs.begin());
  plan.specs.push_back(std::move(sp));
  return Specialized{&plan.specs.back().segment, true, {}};
}

}  // namespace tracecache
