#include "frontend/zoo/program.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
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

// The seeds of the generators a training program adds.
constexpr uint64_t kLabelsGenerator = 2;
constexpr uint64_t kDropoutSeedGenerator = 3;

std::string spelled(const TensorSpec& t) {
  return fmt::format("{} {}", safetensors_dtype_name(t.dtype), t.shape.to_string());
}

}  // namespace

std::string program_name(const std::string& state_dict_key) {
  std::string out = state_dict_key;
  std::replace(out.begin(), out.end(), '.', '_');
  return out;
}

namespace {

// What a training capture adds to the forward: the names (in the program) of the model tensor
// the loss reads and of each running statistic's new value, by the buffer's program name.
struct TrainingCapture {
  std::string logits;
  Shape logits_shape;
  std::vector<std::pair<std::string, std::string>> buffer_updates;  // (param, value)
  std::vector<std::string> parameters;  // the trainable params the graph reads, in spec order
};

// The forward as a trace program; with `training`, in training mode: the inputs become params
// (one fixed batch), a `dropout_seed` input feeds the dropout layers, the graph's outputs are the
// tensor the loss reads (the last model output named "logits", else the last one) and the new
// running statistics; `training` receives their names.
Result<Program> capture_program(const ModelSpec& spec, const ProgramOptions& options,
                                TrainingCapture* training) {
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
  const TensorDecl::Role input_role = training ? TensorDecl::Role::kParam : TensorDecl::Role::kInput;
  for (const InputSpec& in : spec.inputs) {
    inputs.push_back(make(in.dtype, in.shape, decls.size()));
    Generator init = in.init;
    for (const auto& [name, path] : options.input_files) {
      if (name != in.name) continue;
      init = Generator{};
      init.kind = Generator::Kind::kNpy;
      init.path = path;
    }
    decls.push_back({input_role, in.name, in.dtype, dims_of(in.shape), init, {}});
  }
  const size_t seed_decl = decls.size();
  TrainingState state;
  if (training) {
    Generator seed;
    seed.kind = Generator::Kind::kUniform;
    seed.seed = kDropoutSeedGenerator;
    seed.high = 2147483647;  // an input's generator mixes in the step: a fresh seed every step
    state.dropout_seed = make(DType::kI64, Shape{}, seed_decl);
    decls.push_back({TensorDecl::Role::kInput, "dropout_seed", DType::kI64, {}, seed, {}});
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
  std::vector<std::string> output_names = spec.output_names;
  try {
    Weights w(spec.tensors, weights, training ? &state : nullptr);
    outputs = spec.forward(ctx, inputs, w);
    if (outputs.size() != spec.output_names.size()) {
      return internal_error(fmt::format("{}: the forward returned {} outputs, the spec names {}",
                                        spec.name, outputs.size(), spec.output_names.size()));
    }
    if (training) {
      size_t chosen = outputs.size() - 1;
      for (size_t k = 0; k < outputs.size(); ++k) {
        if (spec.output_names[k] == "logits") chosen = k;
      }
      training->logits = spec.output_names[chosen];
      training->logits_shape = outputs[chosen].shape();
      if (training->logits_shape.rank() != 2) {
        return internal_error(fmt::format("{}: the loss needs [N, C] logits, got {}", spec.name,
                                          training->logits_shape.to_string()));
      }
      outputs = {outputs[chosen]};
      output_names = {training->logits};
      for (const auto& [buffer, value] : state.buffer_updates) {
        outputs.push_back(value);
        output_names.push_back(program_name(buffer) + "_next");
      }
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
  std::vector<std::string> output_refs;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const DeviceData* data = outputs[k].data_ptr();
    size_t slot = 0;
    while (slot < captured.outputs.size() && captured.outputs[slot].get() != data) ++slot;
    if (slot == captured.outputs.size()) {
      return internal_error(fmt::format("{}: output {} is not a graph output", spec.name, k));
    }
    NodeId node = g.outputs()[slot];
    if (node_names[node].empty()) node_names[node] = output_names[k];
    output_refs.push_back(node_names[node]);
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
    // Every input is declared (it is the model's interface); weights and the dropout seed only
    // if the graph reads them (num_batches_tracked never is).
    const bool interface = d < spec.inputs.size();
    if (interface || used_decls.count(d)) program.tensors.push_back(decls[d]);
    if (training && used_decls.count(d) && d > seed_decl &&
        spec.tensors[d - seed_decl - 1].role == TensorSpec::Role::kParameter) {
      training->parameters.push_back(decls[d].name);
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
  if (!training) {
    for (const std::string& name : output_refs) program.outputs.push_back({name, {}});
    return program;
  }
  training->logits = output_refs[0];
  for (size_t k = 0; k < state.buffer_updates.size(); ++k) {
    training->buffer_updates.emplace_back(program_name(state.buffer_updates[k].first), output_refs[k + 1]);
  }
  return program;
}

}  // namespace

Result<Program> model_program(const ModelSpec& spec, const ProgramOptions& options) {
  return capture_program(spec, options, nullptr);
}

std::string_view optimizer_name(Optimizer optimizer) {
  switch (optimizer) {
    case Optimizer::kSgd: return "sgd";
    case Optimizer::kAdam: return "adam";
    case Optimizer::kAdamW: return "adamw";
  }
  return "sgd";
}

std::optional<Optimizer> parse_optimizer(std::string_view name) {
  for (Optimizer o : {Optimizer::kSgd, Optimizer::kAdam, Optimizer::kAdamW}) {
    if (optimizer_name(o) == name) return o;
  }
  return std::nullopt;
}

Result<Program> train_program(const ModelSpec& spec, const TrainOptions& train,
                              const ProgramOptions& options) {
  const bool adam = train.optimizer != Optimizer::kSgd;
  auto bad = [](double v) { return !std::isfinite(v) || v < 0; };
  if (bad(train.lr) || bad(train.momentum) || bad(train.weight_decay) || bad(train.eps)) {
    return invalid_argument(fmt::format(
        "lr, momentum, weight decay and eps must be finite and >= 0, got lr {}, momentum {}, "
        "weight decay {}, eps {}", train.lr, train.momentum, train.weight_decay, train.eps));
  }
  if (train.beta1 < 0 || train.beta1 >= 1 || train.beta2 < 0 || train.beta2 >= 1) {
    return invalid_argument(fmt::format("betas must be in [0, 1), got ({}, {})", train.beta1, train.beta2));
  }
  if (train.steps < 1) return invalid_argument(fmt::format("steps must be >= 1, got {}", train.steps));
  if (adam && (train.momentum != 0 || train.nesterov)) {
    return invalid_argument(fmt::format("{} takes no momentum or nesterov (those are sgd's)",
                                        optimizer_name(train.optimizer)));
  }
  if (train.nesterov && train.momentum <= 0) {
    return invalid_argument("nesterov needs a momentum > 0 (as torch.optim.SGD)");
  }
  ProgramOptions forward_options = options;
  std::string labels_path;
  std::erase_if(forward_options.input_files, [&](const auto& f) {
    if (f.first != "labels") return false;
    labels_path = f.second;
    return true;
  });
  TrainingCapture capture;
  Result<Program> forward = capture_program(spec, forward_options, &capture);
  if (!forward.is_ok()) return forward.status();
  Program& p = *forward;

  std::set<std::string> taken;
  for (const TensorDecl& d : p.tensors) taken.insert(d.name);
  for (const OpStmt& op : p.ops) taken.insert(op.result);
  std::string text;
  // A fresh program name for the training tensor `base` (model tensors keep theirs).
  auto fresh = [&](const std::string& base) {
    std::string name = base;
    while (!taken.insert(name).second) name += "_";
    return name;
  };
  auto line = [&](const std::string& l) { text += l + "\n"; };
  const int64_t batch = capture.logits_shape[0], classes = capture.logits_shape[1];

  // One fixed batch: the inputs are params (capture_program), the labels random classes the
  // model memorizes.
  const std::string labels = fresh("labels");
  if (labels_path.empty()) {
    line(fmt::format("param {} : i64[{}] = uniform(seed={}, low=0, high={})", labels, batch,
                     kLabelsGenerator, classes));
  } else {
    line(fmt::format("param {} : i64[{}] = npy(\"{}\")", labels, batch, labels_path));
  }
  const std::string lr = fresh("lr");
  line(fmt::format("input {} : f32[] = full({})", lr, train.lr));

  // Cross-entropy (mean over the batch) of the logits against the labels.
  const std::string lab = fresh("labels_column"), cls = fresh("classes"), hit = fresh("label_hit"),
                    onehot = fresh("onehot"), logp = fresh("log_probs"), picked = fresh("picked"),
                    ll = fresh("log_likelihood"), nll = fresh("nll"), loss = fresh("loss");
  line(fmt::format("{} = reshape({}, shape=[{}, 1])", lab, labels, batch));
  line(fmt::format("{} = arange(end={})", cls, classes));
  line(fmt::format("{} = eq({}, {})", hit, lab, cls));
  line(fmt::format("{} = cast({}, dtype=f32)", onehot, hit));
  line(fmt::format("{} = log_softmax({}, axis=1)", logp, capture.logits));
  line(fmt::format("{} = mul({}, {})", picked, logp, onehot));
  line(fmt::format("{} = sum({}, axes=[1])", ll, picked));
  line(fmt::format("{} = neg({})", nll, ll));
  line(fmt::format("{} = mean({})", loss, nll));

  std::vector<std::string> grads;
  for (const std::string& param : capture.parameters) grads.push_back(fresh("grad_" + param));
  line(fmt::format("{} = grad({}, {})", fmt::join(grads, ", "), loss, fmt::join(capture.parameters, ", ")));

  std::vector<std::pair<std::string, std::string>> updates;  // (param, value)
  auto state = [&](const std::string& prefix, const std::string& param) {
    const TensorDecl* decl = p.find_tensor(param);
    std::string name = fresh(prefix + param);
    std::vector<std::string> dims;
    for (const DimRef& d : decl->dims) dims.push_back(std::to_string(d.value));
    line(fmt::format("param {} : f32[{}] = full(0)", name, fmt::join(dims, ", ")));
    return name;
  };
  auto op = [&](const std::string& base, const std::string& call) {
    std::string name = fresh(base);
    line(fmt::format("{} = {}", name, call));
    return name;
  };
  std::string step_size, correction2, keep;
  if (adam) {
    // Bias corrections from running powers beta^t (scalar params updated every step), as
    // torch.optim.Adam: p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps).
    const std::string pow1 = fresh("adam_beta1_power"), pow2 = fresh("adam_beta2_power");
    line(fmt::format("param {} : f32[] = full(1)", pow1));
    line(fmt::format("param {} : f32[] = full(1)", pow2));
    std::string np1 = op("adam_beta1_power_next", fmt::format("mul({}, {})", pow1, train.beta1));
    std::string np2 = op("adam_beta2_power_next", fmt::format("mul({}, {})", pow2, train.beta2));
    updates.emplace_back(pow1, np1);
    updates.emplace_back(pow2, np2);
    std::string c1 = op("adam_correction1", fmt::format("sub(1, {})", np1));
    std::string c2 = op("adam_correction2", fmt::format("sub(1, {})", np2));
    correction2 = op("adam_correction2_sqrt", fmt::format("sqrt({})", c2));
    step_size = op("adam_step_size", fmt::format("div({}, {})", lr, c1));
    if (train.optimizer == Optimizer::kAdamW && train.weight_decay != 0) {
      // AdamW decays the weight itself: p *= 1 - lr * weight_decay.
      std::string decay = op("adamw_decay", fmt::format("mul({}, {})", lr, train.weight_decay));
      keep = op("adamw_keep", fmt::format("sub(1, {})", decay));
    }
  }
  for (size_t i = 0; i < capture.parameters.size(); ++i) {
    const std::string& w = capture.parameters[i];
    std::string g = grads[i];
    if (train.weight_decay != 0 && train.optimizer != Optimizer::kAdamW) {
      std::string decayed = op("decay_" + w, fmt::format("mul({}, {})", w, train.weight_decay));
      g = op("decayed_grad_" + w, fmt::format("add({}, {})", g, decayed));
    }
    std::string next;
    if (!adam) {
      std::string direction = g;
      if (train.momentum != 0) {
        // torch.optim.SGD: buf = momentum * buf + g (buf = g on the first step: buf starts at 0).
        std::string buf = state("momentum_", w);
        std::string scaled = op("momentum_scaled_" + w, fmt::format("mul({}, {})", buf, train.momentum));
        std::string nbuf = op("momentum_next_" + w, fmt::format("add({}, {})", scaled, g));
        updates.emplace_back(buf, nbuf);
        direction = nbuf;
        if (train.nesterov) {
          std::string ahead = op("nesterov_" + w, fmt::format("mul({}, {})", nbuf, train.momentum));
          direction = op("nesterov_direction_" + w, fmt::format("add({}, {})", g, ahead));
        }
      }
      std::string step = op("step_" + w, fmt::format("mul({}, {})", direction, lr));
      next = op(w + "_next", fmt::format("sub({}, {})", w, step));
    } else {
      std::string m = state("exp_avg_", w), v = state("exp_avg_sq_", w);
      std::string ma = op("exp_avg_decayed_" + w, fmt::format("mul({}, {})", m, train.beta1));
      std::string mb = op("exp_avg_grad_" + w, fmt::format("mul({}, {})", g, 1 - train.beta1));
      std::string nm = op("exp_avg_next_" + w, fmt::format("add({}, {})", ma, mb));
      std::string va = op("exp_avg_sq_decayed_" + w, fmt::format("mul({}, {})", v, train.beta2));
      std::string g2 = op("grad_squared_" + w, fmt::format("mul({}, {})", g, g));
      std::string vb = op("exp_avg_sq_grad_" + w, fmt::format("mul({}, {})", g2, 1 - train.beta2));
      std::string nv = op("exp_avg_sq_next_" + w, fmt::format("add({}, {})", va, vb));
      std::string root = op("exp_avg_sq_sqrt_" + w, fmt::format("sqrt({})", nv));
      std::string scaled = op("denominator_scaled_" + w, fmt::format("div({}, {})", root, correction2));
      std::string den = op("denominator_" + w, fmt::format("add({}, {})", scaled, train.eps));
      std::string dir = op("direction_" + w, fmt::format("div({}, {})", nm, den));
      std::string step = op("step_" + w, fmt::format("mul({}, {})", dir, step_size));
      std::string base = w;
      if (!keep.empty()) base = op("decayed_" + w, fmt::format("mul({}, {})", w, keep));
      next = op(w + "_next", fmt::format("sub({}, {})", base, step));
      updates.emplace_back(m, nm);
      updates.emplace_back(v, nv);
    }
    updates.emplace_back(w, next);
  }
  for (const auto& [buffer, value] : capture.buffer_updates) updates.emplace_back(buffer, value);
  for (const auto& [param, value] : updates) line(fmt::format("update {} = {}", param, value));
  std::vector<std::string> outputs{loss};
  if (train.output_params) {
    for (const std::string& w : capture.parameters) {
      for (const auto& [param, value] : updates) {
        if (param == w) outputs.push_back(value);
      }
    }
    for (const auto& [buffer, value] : capture.buffer_updates) outputs.push_back(value);
  }
  line(fmt::format("output {}", fmt::join(outputs, ", ")));

  // The forward as printed (it has no output line), then the training statements: parsed
  // together, so the result is checked like any program file.
  std::string program_text = print_program(p) + text;
  Result<Program> parsed = parse_program(program_text, p.file_name);
  if (!parsed.is_ok()) return parsed.status();
  parsed->steps = train.steps;
  return parsed;
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
