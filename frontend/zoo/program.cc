#include "frontend/zoo/program.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>

#include "capture/ir/canonical.h"
#include "capture/ops/random.h"
#include "capture/trace/recording_executor.h"
#include "capture/trace/tensor.h"

namespace tracecache::zoo {

namespace {

// One zero-filled block as large as the largest tensor, from calloc: the pages are never
// written or read, so views of it cost address space, not memory. Every weight and input of a
// captured forward is a distinct view of this block.
struct ZeroBlock {
  explicit ZeroBlock(size_t bytes) : data(static_cast<std::byte*>(std::calloc(std::max<size_t>(bytes, 1), 1))) {
    if (!data) throw Error(internal_error(fmt::format("cannot reserve {} bytes", bytes)));
  }
  ~ZeroBlock() { std::free(data); }
  ZeroBlock(const ZeroBlock&) = delete;
  ZeroBlock& operator=(const ZeroBlock&) = delete;
  std::byte* data;
};

Literal literal_of(const AttrValue& v) {
  Literal l;
  switch (v.kind) {
    case AttrKind::kInt:
      l.kind = Literal::Kind::kInt;
      l.i = v.i;
      break;
    case AttrKind::kFloat:
      l.kind = Literal::Kind::kFloat;
      l.f = v.f;
      break;
    case AttrKind::kBool:
      l.kind = Literal::Kind::kBool;
      l.i = v.i;
      break;
    case AttrKind::kDType:
      l.kind = Literal::Kind::kName;
      l.name = std::string(dtype_name(v.dtype));
      break;
    case AttrKind::kInts:
      l.kind = Literal::Kind::kList;
      for (int64_t x : v.ints) {
        Literal item;
        item.kind = Literal::Kind::kInt;
        item.i = x;
        l.items.push_back(item);
      }
      break;
  }
  return l;
}

std::vector<DimRef> dims_of(const Shape& shape) {
  std::vector<DimRef> out;
  for (int64_t d : shape) out.push_back({"", d, {}});
  return out;
}

std::string spelled(const TensorSpec& t) {
  return fmt::format("{} {}", safetensors_dtype_name(t.dtype), t.shape.to_string());
}

}  // namespace

std::string program_name(const std::string& state_dict_key) {
  std::string out = state_dict_key;
  std::replace(out.begin(), out.end(), '.', '_');
  return out;
}

Result<Program> model_program(const ModelSpec& spec, const ProgramOptions& options) {
  size_t largest = 0;
  for (const TensorSpec& t : spec.tensors) {
    largest = std::max(largest, static_cast<size_t>(t.shape.numel()) * dtype_size(t.dtype));
  }
  for (const InputSpec& in : spec.inputs) {
    largest = std::max(largest, static_cast<size_t>(in.shape.numel()) * dtype_size(in.dtype));
  }
  ZeroBlock zeros(largest);

  // The forward's one graph, its parameters' data and its zero-filled results: a trace without
  // computation.
  RecordingExecutor executor({.keep_buffers = true, .max_graphs = 1});
  LazyOptions lazy;
  lazy.canonicalize.bake_scalars = true;  // constants stay ops, written as `full(...)` lines
  LazyContext ctx(&executor, lazy);
  // Which declaration each tensor's data stands for: inputs first, then the spec's tensors.
  std::map<const void*, size_t> decl_of_data;  // DeviceData::identity()
  std::vector<Tensor> inputs, weights;
  Program program;
  program.file_name = options.file_name.empty() ? spec.name + ".trace" : options.file_name;
  program.steps = 1;
  auto make = [&](DType dtype, const Shape& shape, size_t decl) {
    BufferRef data = std::make_shared<const HostBuffer>(HostBuffer::view(dtype, shape, zeros.data));
    decl_of_data.emplace(data.get(), decl);
    return ctx.from_buffer(std::move(data));
  };
  std::vector<TensorDecl> decls;
  for (const auto& [name, path] : options.input_files) {
    bool known = false;
    for (const InputSpec& in : spec.inputs) known = known || in.name == name;
    if (!known) {
      std::string names;
      for (const InputSpec& in : spec.inputs) names += (names.empty() ? "" : ", ") + in.name;
      return invalid_argument(fmt::format("{} has no input '{}' (its inputs: {})", spec.name, name, names));
    }
  }
  for (const InputSpec& in : spec.inputs) {
    inputs.push_back(make(in.dtype, in.shape, decls.size()));
    Generator init = in.init;
    for (const auto& [name, path] : options.input_files) {
      if (name != in.name) continue;
      init = Generator{};
      init.kind = Generator::Kind::kNpy;
      init.path = path;
    }
    decls.push_back({TensorDecl::Role::kInput, in.name, in.dtype, dims_of(in.shape), init, {}});
  }
  for (const TensorSpec& t : spec.tensors) {
    weights.push_back(make(t.dtype, t.shape, decls.size()));
    Generator init = t.init;
    if (!options.weights_path.empty()) {
      init = Generator{};
      init.kind = Generator::Kind::kSafetensors;
      init.path = options.weights_path;
      init.tensor = t.name;
    }
    decls.push_back({TensorDecl::Role::kParam, program_name(t.name), t.dtype, dims_of(t.shape),
                     init, {}});
  }

  std::vector<Tensor> outputs;
  try {
    Weights w(spec.tensors, weights);
    outputs = spec.forward(ctx, inputs, w);
    if (outputs.size() != spec.output_names.size()) {
      return internal_error(fmt::format("{}: the forward returned {} outputs, the spec names {}",
                                        spec.name, outputs.size(), spec.output_names.size()));
    }
    for (const Tensor& t : outputs) {
      if (t.is_materialized()) {
        return unsupported(fmt::format(
            "{}: an output is an input or a weight, not computed by an op", spec.name));
      }
    }
    ctx.mark_step();
  } catch (const Error& e) {
    return Status(e.status().code(), fmt::format("{}: {}", spec.name, e.status().message()));
  }
  if (executor.graphs().empty()) return internal_error(fmt::format("{}: the forward ran no graph", spec.name));
  const RecordedGraph& captured = executor.graphs().front();
  const Graph& g = captured.graph.graph;

  // Graph output k is whichever forward output received executor result k.
  std::vector<std::string> node_names(g.size());
  std::vector<std::string> output_names;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const DeviceData* data = outputs[k].data_ptr();
    size_t slot = 0;
    while (slot < captured.outputs.size() && captured.outputs[slot].get() != data) ++slot;
    if (slot == captured.outputs.size()) {
      return internal_error(fmt::format("{}: output {} is not a graph output", spec.name, k));
    }
    NodeId node = g.outputs()[slot];
    if (node_names[node].empty()) node_names[node] = spec.output_names[k];
    output_names.push_back(node_names[node]);
  }

  std::set<size_t> used_decls;
  for (size_t i = 0; i < g.params().size(); ++i) {
    const ParamSource& src = captured.graph.sources[i];
    if (src.kind != ParamSource::Kind::kTraceParam) {
      return internal_error(fmt::format("{}: a lifted scalar in a baked trace", spec.name));
    }
    auto it = decl_of_data.find(captured.params[i]->identity());
    if (it == decl_of_data.end()) {
      return internal_error(fmt::format("{}: graph parameter {} is no model tensor", spec.name, i));
    }
    used_decls.insert(it->second);
    node_names[g.params()[i]] = decls[it->second].name;
  }
  for (size_t d = 0; d < decls.size(); ++d) {
    // Every input is declared (it is the model's interface); weights only if the graph reads
    // them (num_batches_tracked never is).
    if (decls[d].role == TensorDecl::Role::kInput || used_decls.count(d)) {
      program.tensors.push_back(decls[d]);
    }
  }

  std::set<std::string> taken;
  for (const TensorDecl& d : program.tensors) taken.insert(d.name);
  int counter = 0;
  for (NodeId id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    if (n.op == OpKind::kParameter) continue;
    if (node_names[id].empty()) {
      do {
        node_names[id] = fmt::format("t{}", ++counter);
      } while (taken.count(node_names[id]));
    }
    if (!taken.insert(node_names[id]).second) {
      return internal_error(fmt::format("{}: name '{}' is used twice", spec.name, node_names[id]));
    }
    OpStmt op;
    op.result = node_names[id];
    op.op = n.op;
    for (NodeId in : g.inputs(n)) {
      Literal l;
      l.kind = Literal::Kind::kName;
      l.name = node_names[in];
      op.operands.push_back(std::move(l));
    }
    const OpInfo& info = op_info(n.op);
    std::span<const AttrValue> attrs = g.attrs(n);
    for (size_t a = 0; a < attrs.size(); ++a) {
      const AttrSpec& as = info.attrs[a];
      if (!as.required && attrs[a] == as.default_value) continue;
      op.attrs.push_back({std::string(as.name), literal_of(attrs[a]), {}});
    }
    program.ops.push_back(std::move(op));
  }
  for (const std::string& name : output_names) program.outputs.push_back({name, {}});
  return program;
}

HostBuffer initial_value(const TensorSpec& tensor) {
  HostBuffer b(tensor.dtype, tensor.shape);
  const Generator& g = tensor.init;
  switch (g.kind) {
    case Generator::Kind::kNormal: fill_normal(b, g.seed, g.mean, g.stddev); break;
    case Generator::Kind::kUniform: fill_uniform(b, g.seed, g.low, g.high); break;
    default:
      dispatch_dtype(b.dtype(), [&]<typename T>() {
        for (T& x : b.span<T>()) x = static_cast<T>(g.value);
      });
      break;
  }
  return b;
}

Status write_initial_weights(const ModelSpec& spec, const std::string& path) {
  std::vector<HostBuffer> values;
  values.reserve(spec.tensors.size());
  std::vector<NamedBuffer> named;
  for (const TensorSpec& t : spec.tensors) {
    values.push_back(initial_value(t));
    named.push_back({t.name, &values.back()});
  }
  return write_safetensors(path, named, {{"model", spec.name},
                                         {"preset", std::string(preset_name(spec.preset))}});
}

Status check_weights(const ModelSpec& spec, const SafetensorsFile& file) {
  constexpr size_t kShown = 8;
  std::vector<std::string> missing, extra, mismatched;
  for (const TensorSpec& t : spec.tensors) {
    const SafetensorsEntry* e = file.find(t.name);
    if (!e) {
      missing.push_back(t.name);
      continue;
    }
    std::vector<int64_t> want(t.shape.begin(), t.shape.end());
    if (e->dtype_name != safetensors_dtype_name(t.dtype) || e->shape != want) {
      mismatched.push_back(fmt::format("{} is {} [{}] in the file, {} in the model", t.name,
                                       e->dtype_name, fmt::join(e->shape, ", "), spelled(t)));
    }
  }
  for (const SafetensorsEntry& e : file.entries()) {
    if (!spec.find_tensor(e.name)) extra.push_back(e.name);
  }
  if (missing.empty() && extra.empty() && mismatched.empty()) return Status::ok();
  std::string message = fmt::format("{}: the weights do not fit {} ({} preset):", file.name(),
                                    spec.name, preset_name(spec.preset));
  auto list = [&](std::string_view what, const std::vector<std::string>& items) {
    if (items.empty()) return;
    message += fmt::format(" {} {}: ", items.size(), what);
    for (size_t i = 0; i < std::min(items.size(), kShown); ++i) {
      message += (i ? "; " : "") + items[i];
    }
    if (items.size() > kShown) message += fmt::format("; and {} more", items.size() - kShown);
    message += ".";
  };
  list("missing", missing);
  list("unexpected", extra);
  list("mismatched", mismatched);
  return invalid_argument(message);
}

}  // namespace tracecache::zoo
