#include "frontend/program/program_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <new>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "capture/trace/autograd.h"
#include "frontend/files/npy.h"
#include "capture/ops/random.h"
#include "frontend/files/safetensors.h"
#include "frontend/program/op_call.h"

namespace tracecache {

namespace {

Status at(const Program& p, SourcePos pos, const Status& cause) {
  return Status(cause.code(),
                fmt::format("{}:{}:{}: {}", p.file_name, pos.line, pos.col, cause.message()));
}

[[noreturn]] void fail(std::string msg) { throw Error(invalid_argument(std::move(msg))); }

// The value of dim `name`; `dims` holds one value per program.dims entry.
int64_t dim_value(const Program& p, const std::string& name, std::span<const int64_t> dims) {
  const DimDecl* d = p.find_dim(name);
  if (!d) fail(fmt::format("undefined dim '{}'", name));
  return dims[static_cast<size_t>(d - p.dims.data())];
}

// The value of `lit` for an attribute of kind `spec.kind`, dims bound to `dims`.
AttrValue resolve_attr(const Program& p, const AttrSpec& spec, const Literal& lit,
                       std::span<const int64_t> dims) {
  auto int_of = [&](const Literal& l) {
    return l.kind == Literal::Kind::kName ? dim_value(p, l.name, dims) : l.i;
  };
  switch (spec.kind) {
    case AttrKind::kInt: return AttrValue::of_int(int_of(lit));
    case AttrKind::kFloat:
      return AttrValue::of_float(lit.kind == Literal::Kind::kName
                                     ? static_cast<double>(dim_value(p, lit.name, dims))
                                     : lit.number());
    case AttrKind::kBool: return AttrValue::of_bool(lit.i != 0);
    case AttrKind::kDType: {
      std::optional<DType> t = parse_dtype(lit.name);
      if (!t) fail(fmt::format("'{}' is not a dtype", lit.to_string()));
      return AttrValue::of_dtype(*t);
    }
    case AttrKind::kInts: {
      IntList v;
      for (const Literal& item : lit.items) v.push_back(int_of(item));
      return AttrValue::of_ints(v);
    }
  }
  return spec.default_value;
}

// One value per declared attribute of `op`, in registry order, defaults filled.
std::vector<AttrValue> resolve_attrs(const Program& p, const OpStmt& op,
                                     std::span<const int64_t> dims) {
  const OpInfo& info = op_info(op.op);
  std::vector<AttrValue> out;
  out.reserve(info.attrs.size());
  for (const AttrSpec& spec : info.attrs) out.push_back(spec.default_value);
  for (const NamedAttr& a : op.attrs) {
    int i = info.attr_index(a.name);
    if (i < 0) fail(fmt::format("op '{}': unknown attribute '{}'", info.name, a.name));
    out[static_cast<size_t>(i)] =
        resolve_attr(p, info.attrs[static_cast<size_t>(i)], a.value, dims);
  }
  return out;
}

Result<Shape> bound_shape(const Program& p, const TensorDecl& decl, std::span<const int64_t> dims);

// What the grad statements of a program need while its ops are recorded. Empty (and free) for a
// program without grad statements.
struct GradPlan {
  // Per op: recorded with a tape, because some later grad statement's loss depends on it. The
  // others (an optimizer's update, metrics) are recorded without one, under NoGradGuard
  // semantics, so they hold no forward intermediates alive.
  std::vector<bool> taped;
  std::vector<bool> retain;  // per op: a grad statement that a later one may walk again
  std::unordered_set<std::string> wrt;  // the names some grad statement differentiates by

  explicit GradPlan(const Program& p) {
    size_t last = p.ops.size();
    for (size_t k = 0; k < p.ops.size(); ++k) {
      if (p.ops[k].is_grad) last = k;
    }
    if (last == p.ops.size()) return;
    taped.assign(p.ops.size(), false);
    retain.assign(p.ops.size(), false);
    std::unordered_set<std::string> needed;  // names some later loss depends on
    for (size_t k = p.ops.size(); k-- > 0;) {
      const OpStmt& op = p.ops[k];
      if (op.is_grad) {
        retain[k] = k != last;
        if (op.operands.empty()) continue;  // a hand-built statement; replay reports it
        needed.insert(op.operands[0].name);
        for (size_t i = 1; i < op.operands.size(); ++i) wrt.insert(op.operands[i].name);
        continue;
      }
      if (!needed.contains(op.result)) continue;
      taped[k] = true;
      for (const Literal& l : op.operands) {
        if (l.kind == Literal::Kind::kName) needed.insert(l.name);
      }
    }
  }
  bool empty() const { return taped.empty(); }
};

// Replays the op stream with dims bound to `dims` (one value per program.dims entry). `Ops`
// supplies Value (a tensor or a type), dtype_of(v), scalar(value, dtype), apply(op, inputs,
// attrs), grad(op, inputs, retain) (one value per input after the loss), at_statement(op) (the statement
// whose values come next: a source location), set_taped(bool) and
// differentiable(v) (marks an intermediate a grad statement differentiates by); env maps names
// to values and receives each op's results.
template <typename Ops>
Status replay(const Program& p, std::span<const int64_t> dims, Ops& ops,
              std::unordered_map<std::string, typename Ops::Value>& env) {
  using Value = typename Ops::Value;
  const GradPlan plan(p);
  for (size_t k = 0; k < p.ops.size(); ++k) {
    const OpStmt& op = p.ops[k];
    ops.at_statement(op);
    try {
      auto lookup = [&](const Literal& l) -> const Value& {
        auto it = env.find(l.name);
        if (it == env.end()) fail(fmt::format("undefined name '{}'", l.name));
        return it->second;
      };
      if (op.is_grad) {
        // What the parser guarantees, checked for hand-built programs.
        if (op.operands.size() < 2 || op.operands.size() != op.more_results.size() + 2 ||
            std::any_of(op.operands.begin(), op.operands.end(),
                        [](const Literal& l) { return l.kind != Literal::Kind::kName; })) {
          fail("grad(LOSS, X1, X2, ...) takes tensor names and gives one result per tensor after the loss");
        }
        std::vector<Value> in;
        in.reserve(op.operands.size());
        for (const Literal& l : op.operands) in.push_back(lookup(l));
        std::vector<Value> grads = ops.grad(op, in, plan.retain[k]);
        env.insert_or_assign(op.result, std::move(grads[0]));
        for (size_t i = 0; i < op.more_results.size(); ++i) {
          env.insert_or_assign(op.more_results[i].name, std::move(grads[i + 1]));
        }
        continue;
      }
      if (!plan.empty()) ops.set_taped(plan.taped[k]);
      std::vector<AttrValue> attrs = resolve_attrs(p, op, dims);
      std::optional<DType> other;
      for (size_t j = op.op == OpKind::kWhere ? 1 : 0; j < op.operands.size() && !other; ++j) {
        if (op.operands[j].kind == Literal::Kind::kName) {
          other = ops.dtype_of(lookup(op.operands[j]));
        }
      }
      std::vector<Value> in;
      in.reserve(op.operands.size());
      for (const Literal& l : op.operands) {
        if (l.kind == Literal::Kind::kName) {
          in.push_back(lookup(l));
        } else {
          double v = l.number();
          in.push_back(ops.scalar(v, number_operand_dtype(other, v)));
        }
      }
      Value result = ops.apply(op, in, attrs);
      if (!plan.empty() && plan.wrt.contains(op.result)) ops.differentiable(result);
      env.insert_or_assign(op.result, std::move(result));
    } catch (const Error& e) {
      return at(p, op.pos, e.status());
    }
  }
  return Status::ok();
}

// The checks of tracecache::grad() that depend on types alone (the loss, then the tensors to
// differentiate by), with the statement's names: the dry run and the runner say the same.
void check_grad_types(const OpStmt& op, std::span<const TensorType> in) {
  if (!is_floating(in[0].dtype) || in[0].shape.numel() != 1) {
    fail(fmt::format("grad: the loss '{}' must be a floating tensor of one element, got {}",
                     op.operands[0].name, type_to_string(in[0])));
  }
  for (size_t i = 1; i < in.size(); ++i) {
    if (!is_floating(in[i].dtype)) {
      fail(fmt::format("grad: '{}' is {}: integer and bool values are not differentiable",
                       op.operands[i].name, type_to_string(in[i])));
    }
  }
}

// Checks the values of the program's updates against their params' declared types at `dims`:
// `type(v)` gives a value's type.
template <typename Value, typename TypeOf>
Status check_updates(const Program& p, std::span<const int64_t> dims,
                     const std::unordered_map<std::string, Value>& env, TypeOf type) {
  for (const UpdateStmt& u : p.updates) {
    auto it = env.find(u.value);
    const TensorDecl* decl = p.find_tensor(u.param);
    if (it == env.end() || !decl || decl->role != TensorDecl::Role::kParam) {
      return at(p, u.pos, invalid_argument(fmt::format("update {} = {}: undefined param or value", u.param, u.value)));
    }
    Result<Shape> want = bound_shape(p, *decl, dims);
    if (!want.is_ok()) return want.status();
    const TensorType got = type(it->second);
    if (got != TensorType{decl->dtype, *want}) {
      return at(p, u.value_pos,
                invalid_argument(fmt::format("update {} = {}: '{}' is {} but param '{}' is declared {}; the new "
                                             "value must have the param's type",
                                             u.param, u.value, u.value, type_to_string(got), u.param,
                                             type_to_string({decl->dtype, *want}))));
    }
  }
  return Status::ok();
}

struct TypeOps {
  using Value = TensorType;
  DType dtype_of(const TensorType& t) const { return t.dtype; }
  TensorType scalar(double, DType t) const { return {t, Shape{}}; }
  TensorType apply(const OpStmt& op, std::span<const TensorType> in, std::vector<AttrValue>& attrs) const {
    return infer_op(op.op, in, attrs).value_or_throw();
  }
  std::vector<TensorType> grad(const OpStmt& op, std::span<const TensorType> in, bool) const {
    check_grad_types(op, in);
    return {in.begin() + 1, in.end()};
  }
  void set_taped(bool) const {}
  void at_statement(const OpStmt&) const {}
  void differentiable(const TensorType&) const {}
};

struct TensorOps {
  using Value = Tensor;
  LazyContext& ctx;
  const Program& program;
  std::span<const DimSource> bound;  // empty, or one per program.dims entry
  std::span<const Tensor> args;
  DType dtype_of(const Tensor& t) const { return t.dtype(); }
  Tensor scalar(double v, DType t) const {
    AttrValue attrs[] = {AttrValue::of_ints({}), AttrValue::of_float(v), AttrValue::of_dtype(t)};
    return ctx.record(OpKind::kFull, std::span<const Tensor>(), attrs);
  }
  Tensor apply(const OpStmt& op, std::span<const Tensor> in, std::vector<AttrValue>& attrs) const {
    if (bound.empty()) return ctx.record(op.op, in, attrs);
    // Attribute elements written as a dim follow that dim's source size in a captured template.
    std::vector<AttrBinding> bindings;
    const OpInfo& info = op_info(op.op);
    auto bind = [&](const Literal& l, size_t attr, int32_t element) {
      if (l.kind != Literal::Kind::kName) return;
      const DimDecl* d = program.find_dim(l.name);
      if (!d) return;
      const DimSource& src = bound[static_cast<size_t>(d - program.dims.data())];
      if (src.tensor < 0) return;
      bindings.push_back({static_cast<uint32_t>(attr), element, args[static_cast<size_t>(src.tensor)], src.axis});
    };
    for (const NamedAttr& a : op.attrs) {
      int i = info.attr_index(a.name);
      if (i < 0) continue;
      AttrKind kind = info.attrs[static_cast<size_t>(i)].kind;
      if (kind == AttrKind::kInt || kind == AttrKind::kFloat) {
        bind(a.value, static_cast<size_t>(i), -1);
      } else if (kind == AttrKind::kInts) {
        for (size_t j = 0; j < a.value.items.size(); ++j) {
          bind(a.value.items[j], static_cast<size_t>(i), static_cast<int32_t>(j));
        }
      }
    }
    return ctx.record(op.op, in, attrs, bindings);
  }
  std::vector<Tensor> grad(const OpStmt& op, std::span<const Tensor> in, bool retain) const {
    std::vector<TensorType> types;
    types.reserve(in.size());
    for (const Tensor& t : in) types.push_back({t.dtype(), t.peek_shape()});
    check_grad_types(op, types);
    return tracecache::grad(in[0], in.subspan(1), {.retain_graph = retain});
  }
  void set_taped(bool on) const { ctx.set_grad_enabled(on); }
  // The statement's nodes carry "FILE:LINE RESULT" (capture/ir/graph_sources.h), made once per
  // statement and context.
  void at_statement(const OpStmt& op) const {
    ctx.set_source_at(&op, [&] { return fmt::format("{}:{} {}", program.file_name, op.pos.line, op.result); });
  }
  // An intermediate differentiated by: a leaf of the tape from here on, unless it is on it
  // already. A non-floating one is left to grad() to report.
  void differentiable(Tensor& t) const {
    if (!t.requires_grad() && is_floating(t.dtype())) t.set_requires_grad(true);
  }
};

void fill_value(HostBuffer& b, double v) {
  dispatch_dtype(b.dtype(), [&]<typename T>() {
    for (T& x : b.span<T>()) x = static_cast<T>(v);
  });
}

Status declared_type_mismatch(const Program& p, const TensorDecl& decl, const std::string& source,
                              const TensorType& want, const TensorType& got) {
  return at(p, decl.init.pos,
            invalid_argument(fmt::format("{} holds {} but '{}' is declared {}", source,
                                         type_to_string(got), decl.name, type_to_string(want))));
}

}  // namespace

struct StepArguments::Files {
  std::map<std::string, BufferRef> npy;                 // by resolved path
  std::map<std::string, SafetensorsFile> safetensors;  // by resolved path
};

namespace {

// Makes the value of `decl` for `step`. Parameters pass step 0 and never mix it into seeds.
Result<BufferRef> make_value(const Program& p, const TensorDecl& decl, int step,
                             StepArguments::Files& files) {
  Result<Shape> shape = declared_shape(p, decl, step);
  if (!shape.is_ok()) return shape.status();
  const Generator& g = decl.init;
  bool is_input = decl.role == TensorDecl::Role::kInput;
  uint64_t seed = is_input ? random_bits(g.seed, static_cast<uint64_t>(step)) : g.seed;
  if (g.kind == Generator::Kind::kNpy) {
    std::string path = p.resolve_path(g.path);
    auto it = files.npy.find(path);
    if (it == files.npy.end()) {
      Result<HostBuffer> loaded = read_npy(path);
      if (!loaded.is_ok()) return at(p, g.pos, loaded.status());
      it = files.npy.emplace(path, std::make_shared<const HostBuffer>(std::move(loaded).value()))
               .first;
    }
    const HostBuffer& b = *it->second;
    TensorType want{decl.dtype, *shape};
    TensorType got{b.dtype(), b.shape()};
    if (!(want == got)) {
      return declared_type_mismatch(p, decl, fmt::format("npy \"{}\"", g.path), want, got);
    }
    return it->second;
  }
  if (g.kind == Generator::Kind::kSafetensors) {
    std::string path = p.resolve_path(g.path);
    auto it = files.safetensors.find(path);
    if (it == files.safetensors.end()) {
      Result<SafetensorsFile> opened = SafetensorsFile::open(path);
      if (!opened.is_ok()) return at(p, g.pos, opened.status());
      it = files.safetensors.emplace(path, std::move(opened).value()).first;
    }
    std::string source = fmt::format("safetensors \"{}\" tensor \"{}\"", g.path, g.tensor);
    TensorType want{decl.dtype, *shape};
    // Check the header before reading any data: a mismatch costs no I/O.
    const SafetensorsEntry* e = it->second.find(g.tensor);
    if (!e) {
      return at(p, g.pos,
                not_found(fmt::format("safetensors \"{}\" has no tensor \"{}\"{}", g.path, g.tensor,
                                      it->second.did_you_mean(g.tensor))));
    }
    if (e->dtype && e->shape.size() <= static_cast<size_t>(kMaxRank)) {
      Shape shape_in_file;
      for (int64_t d : e->shape) shape_in_file.push_back(d);
      TensorType got{*e->dtype, shape_in_file};
      if (!(want == got)) return declared_type_mismatch(p, decl, source, want, got);
    }
    Result<HostBuffer> loaded = it->second.tensor(g.tensor);
    if (!loaded.is_ok()) return at(p, g.pos, loaded.status());
    return BufferRef(std::make_shared<const HostBuffer>(std::move(loaded).value()));
  }
  // Within the element limit, but more than this machine can hold: still the program's size.
  // A size beyond physical memory is refused without trying (an allocator may abort rather than
  // fail, as sanitizers' do); a smaller one that still fails is caught.
  const uint64_t bytes = static_cast<uint64_t>(shape->numel()) * dtype_size(decl.dtype);
  auto unallocatable = [&] {
    return at(p, decl.dims.empty() ? decl.pos : decl.dims.front().pos,
              invalid_argument(fmt::format(
                  "'{}' is declared {}: its {} bytes cannot be allocated (this machine has {} bytes "
                  "of memory); declare a smaller shape",
                  decl.name, type_to_string({decl.dtype, *shape}), bytes, physical_memory_bytes())));
  };
  if (bytes > physical_memory_bytes()) return unallocatable();
  std::optional<HostBuffer> allocated;
  try {
    allocated.emplace(decl.dtype, *shape);
  } catch (const std::bad_alloc&) {
    return unallocatable();
  }
  HostBuffer& b = *allocated;
  switch (g.kind) {
    case Generator::Kind::kNormal: fill_normal(b, seed, g.mean, g.stddev); break;
    case Generator::Kind::kUniform: fill_uniform(b, seed, g.low, g.high); break;
    case Generator::Kind::kFull: fill_value(b, g.value); break;
    case Generator::Kind::kSchedule:
      fill_value(b, g.values[static_cast<size_t>(step) % g.values.size()]);
      break;
    case Generator::Kind::kNpy:
    case Generator::Kind::kSafetensors: break;
  }
  return BufferRef(std::make_shared<const HostBuffer>(std::move(b)));
}

// The shape of `decl` with dims bound to `dims` (one value per program.dims entry).
Result<Shape> bound_shape(const Program& p, const TensorDecl& decl, std::span<const int64_t> dims) {
  Shape s;
  for (const DimRef& d : decl.dims) {
    if (d.name.empty()) {
      s.push_back(d.value);
      continue;
    }
    const DimDecl* dim = p.find_dim(d.name);
    if (!dim) return at(p, d.pos, invalid_argument(fmt::format("undefined dim '{}'", d.name)));
    s.push_back(dims[static_cast<size_t>(dim - p.dims.data())]);
  }
  // The same element limit every op's result obeys, checked before anything is allocated.
  Result<uint64_t> bytes = checked_nbytes(s.span(), dtype_size(decl.dtype));
  if (!bytes.is_ok()) {
    return at(p, decl.dims.front().pos,
              invalid_argument(fmt::format("'{}' is declared {}: {}; declare a smaller shape",
                                           decl.name, type_to_string({decl.dtype, s}),
                                           bytes.status().message())));
  }
  return s;
}

Result<int64_t> step_count(const Program& p, int steps) {
  if (steps < -1) {
    return invalid_argument(fmt::format("step count must be >= 0 or -1, got {}", steps));
  }
  return steps == -1 ? p.default_steps() : steps;
}

}  // namespace

Result<Shape> declared_shape(const Program& program, const TensorDecl& decl, int step) {
  return bound_shape(program, decl, step_dim_values(program, step));
}

Result<std::vector<TensorType>> infer_output_types(const Program& program, int step) {
  return infer_output_types_at(program, step_dim_values(program, step));
}

Result<std::vector<TensorType>> infer_output_types_at(const Program& program, std::span<const int64_t> dim_values,
                                                      StepUpdates updates) {
  std::vector<int64_t> dims(dim_values.begin(), dim_values.end());
  std::unordered_map<std::string, TensorType> env;
  env.reserve(program.tensors.size() + program.ops.size());
  for (const TensorDecl& d : program.tensors) {
    Result<Shape> s = bound_shape(program, d, dims);
    if (!s.is_ok()) return s.status();
    env.insert_or_assign(d.name, TensorType{d.dtype, *s});
  }
  TypeOps ops;
  Status st = replay(program, dims, ops, env);
  if (!st.is_ok()) return st;
  st = check_updates(program, dims, env, [](const TensorType& t) { return t; });
  if (!st.is_ok()) return st;
  std::vector<TensorType> out;
  for (const OutputRef& o : program.outputs) {
    auto it = env.find(o.name);
    if (it == env.end()) {
      return at(program, o.pos, invalid_argument(fmt::format("undefined name '{}'", o.name)));
    }
    out.push_back(it->second);
  }
  if (updates == StepUpdates::kReturn) {
    for (const UpdateStmt& u : program.updates) out.push_back(env.at(u.value));
  }
  return out;
}

Status check_program(const Program& program, int steps) {
  Result<int64_t> n = step_count(program, steps);
  if (!n.is_ok()) return n.status();
  for (int step = 0; step < *n; ++step) {
    Result<std::vector<TensorType>> types = infer_output_types(program, step);
    if (!types.is_ok()) return types.status();
  }
  return Status::ok();
}

std::vector<int64_t> step_dim_values(const Program& program, int step) {
  std::vector<int64_t> dims;
  dims.reserve(program.dims.size());
  for (const DimDecl& d : program.dims) dims.push_back(d.value_at(step));
  return dims;
}

StepArguments::StepArguments(const Program& program, LazyContext& ctx)
    : program_(program), ctx_(ctx), files_(std::make_unique<Files>()) {}

StepArguments::~StepArguments() = default;

Result<std::vector<Tensor>> StepArguments::make(int step) {
  std::vector<Tensor> args;
  args.reserve(program_.tensors.size());
  for (size_t i = 0; i < program_.tensors.size(); ++i) {
    const TensorDecl& d = program_.tensors[i];
    bool is_param = d.role == TensorDecl::Role::kParam;
    if (is_param) {
      auto cached = params_.find(i);
      if (cached != params_.end()) {
        if (!cached->second.defined()) {
          return invalid_argument(fmt::format("{}: param '{}' was given up to a step that did not give its new "
                                              "value back (the step failed); its value is gone",
                                              program_.file_name, d.name));
        }
        args.push_back(cached->second);
        continue;
      }
    }
    Result<BufferRef> value = make_value(program_, d, is_param ? 0 : step, *files_);
    if (!value.is_ok()) return value.status();
    Tensor t = ctx_.from_buffer(std::move(value).value());
    if (is_param) params_.emplace(i, t);
    args.push_back(std::move(t));
  }
  return args;
}

Status StepArguments::set_param(size_t index, Tensor value) {
  if (index >= program_.tensors.size() || program_.tensors[index].role != TensorDecl::Role::kParam ||
      !value.defined() || !value.is_materialized()) {
    return invalid_argument(fmt::format("{}: StepArguments::set_param: argument {} is not a param, or the "
                                        "value is not a materialized tensor", program_.file_name, index));
  }
  params_.insert_or_assign(index, std::move(value));
  return Status::ok();
}

Result<Tensor> StepArguments::take_param(size_t index) {
  auto it = params_.find(index);
  if (it == params_.end() || !it->second.defined()) {
    return invalid_argument(fmt::format("{}: StepArguments::take_param: argument {} is not a param this "
                                        "object holds", program_.file_name, index));
  }
  return std::exchange(it->second, Tensor());
}

std::vector<DimSource> dim_sources(const Program& program) {
  std::vector<DimSource> out(program.dims.size());
  for (size_t i = 0; i < program.tensors.size(); ++i) {
    const TensorDecl& t = program.tensors[i];
    for (size_t axis = 0; axis < t.dims.size(); ++axis) {
      const DimDecl* d = t.dims[axis].name.empty() ? nullptr : program.find_dim(t.dims[axis].name);
      if (!d) continue;
      DimSource& s = out[static_cast<size_t>(d - program.dims.data())];
      if (s.tensor < 0) s = {static_cast<int>(i), static_cast<int>(axis)};
    }
  }
  return out;
}

Result<std::vector<Tensor>> record_step(const Program& program, LazyContext& ctx,
                                        std::span<const int64_t> dims,
                                        std::span<const Tensor> args,
                                        std::span<const DimSource> bound, StepUpdates updates) {
  if (dims.size() != program.dims.size() || args.size() != program.tensors.size()) {
    return invalid_argument(fmt::format(
        "{}: a step takes {} dim values and {} tensors, got {} and {}", program.file_name,
        program.dims.size(), program.tensors.size(), dims.size(), args.size()));
  }
  std::unordered_map<std::string, Tensor> env;
  env.reserve(program.tensors.size() + program.ops.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const TensorDecl& d = program.tensors[i];
    Result<Shape> want = bound_shape(program, d, dims);
    if (!want.is_ok()) return want.status();
    // With bound dims, the shapes are checked, not observed: the dims come from them.
    if (!args[i].defined() || args[i].dtype() != d.dtype ||
        (bound.empty() ? args[i].shape() : args[i].peek_shape()) != *want) {
      return at(program, d.pos,
                invalid_argument(fmt::format(
                    "'{}' is declared {} but the step's argument is {}", d.name,
                    type_to_string({d.dtype, *want}),
                    args[i].defined() ? type_to_string({args[i].dtype(), args[i].peek_shape()})
                                      : std::string("undefined"))));
    }
    env.insert_or_assign(d.name, args[i]);
  }
  // Every intermediate lives in `env` and dies on return: only the outputs stay live, so
  // they are the roots of the step's graph.
  if (!bound.empty() && bound.size() != program.dims.size()) {
    return invalid_argument(fmt::format("{}: {} dim sources given for {} dims", program.file_name,
                                        bound.size(), program.dims.size()));
  }
  // Arguments a grad statement differentiates by require a gradient before any op uses them
  // (a non-floating one is left to grad() to report, at the statement).
  for (const OpStmt& op : program.ops) {
    if (!op.is_grad) continue;
    for (size_t k = 1; k < op.operands.size(); ++k) {
      const TensorDecl* d = program.find_tensor(op.operands[k].name);
      if (!d) continue;
      Tensor t = args[static_cast<size_t>(d - program.tensors.data())];
      try {
        if (!t.requires_grad() && is_floating(t.dtype())) t.set_requires_grad(true);
      } catch (const Error& e) {
        return at(program, op.operands[k].pos, e.status());
      }
    }
  }
  // A parameter node carries "FILE:LINE input|param NAME : TYPE" with the type as declared
  // ("f32[B, 32]"), so a shape difference names the program's dim (capture/ir/graph_sources.h).
  for (size_t i = 0; i < program.tensors.size(); ++i) {
    const TensorDecl& d = program.tensors[i];
    ctx.name_tensor(args[i], ctx.source_id(&d, [&] {
      std::vector<std::string> declared;
      for (const DimRef& r : d.dims) declared.push_back(r.name.empty() ? std::to_string(r.value) : r.name);
      return fmt::format("{}:{} {} {} : {}[{}]", program.file_name, d.pos.line,
                         d.role == TensorDecl::Role::kParam ? "param" : "input", d.name, dtype_name(d.dtype),
                         fmt::join(declared, ", "));
    }));
  }
  TensorOps ops{ctx, program, bound, args};
  const bool grad_enabled = ctx.grad_enabled();
  Status st = replay(program, dims, ops, env);
  ctx.set_grad_enabled(grad_enabled);
  if (!st.is_ok()) return st;
  st = check_updates(program, dims, env, [](const Tensor& t) { return TensorType{t.dtype(), t.peek_shape()}; });
  if (!st.is_ok()) return st;
  std::vector<Tensor> outputs;
  outputs.reserve(program.outputs.size() + program.updates.size());
  for (const OutputRef& o : program.outputs) {
    auto it = env.find(o.name);
    if (it == env.end()) {
      return at(program, o.pos, invalid_argument(fmt::format("undefined name '{}'", o.name)));
    }
    outputs.push_back(it->second);
  }
  // The outputs are taken before any update: an updated param is never an output (the parser
  // refuses it), so no output sees a new value.
  for (const UpdateStmt& u : program.updates) {
    const Tensor& value = env.at(u.value);
    if (updates == StepUpdates::kReturn) {
      outputs.push_back(value);
      continue;
    }
    Tensor target = args[static_cast<size_t>(program.find_tensor(u.param) - program.tensors.data())];
    try {
      target.assign(value);
    } catch (const Error& e) {
      return at(program, u.pos, e.status());
    }
  }
  return outputs;
}

Result<std::vector<StepResult>> run_program(const Program& program, LazyContext& ctx, int steps) {
  Result<int64_t> n = step_count(program, steps);
  if (!n.is_ok()) return n.status();
  StepArguments arguments(program, ctx);
  std::vector<StepResult> results;
  for (int step = 0; step < *n; ++step) {
    size_t keys_before = ctx.executed_keys().size();
    Result<std::vector<Tensor>> outputs = [&]() -> Result<std::vector<Tensor>> {
      Result<std::vector<Tensor>> args = arguments.make(step);
      if (!args.is_ok()) return args.status();
      return record_step(program, ctx, step_dim_values(program, step), *args);
    }();
    if (!outputs.is_ok()) return outputs.status();
    StepResult r;
    try {
      ctx.mark_step();
      for (size_t k = 0; k < outputs->size(); ++k) {
        r.outputs.emplace_back(program.outputs[k].name, (*outputs)[k].buffer());
      }
    } catch (const Error& e) {
      return step_error(program, step, e.status());
    }
    const std::vector<GraphKey>& keys = ctx.executed_keys();
    r.graph_keys.assign(keys.begin() + static_cast<std::ptrdiff_t>(keys_before), keys.end());
    results.push_back(std::move(r));
  }
  return results;
}

Status step_error(const Program& program, int step, const Status& cause) {
  return Status(cause.code(),
                fmt::format("{}: step {}: {}", program.file_name, step, cause.message()));
}

}  // namespace tracecache
