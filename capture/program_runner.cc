#include "capture/program_runner.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <optional>
#include <unordered_map>

#include "capture/npy.h"
#include "capture/random.h"

namespace tracecache {

namespace {

Status at(const Program& p, SourcePos pos, const Status& cause) {
  return Status(cause.code(),
                fmt::format("{}:{}:{}: {}", p.file_name, pos.line, pos.col, cause.message()));
}

[[noreturn]] void fail(std::string msg) { throw Error(invalid_argument(std::move(msg))); }

int64_t dim_value(const Program& p, const std::string& name, int step) {
  const DimDecl* d = p.find_dim(name);
  if (!d) fail(fmt::format("undefined dim '{}'", name));
  return d->value_at(step);
}

// The value of `lit` for an attribute of kind `spec.kind` at `step` (dims bound).
AttrValue resolve_attr(const Program& p, const AttrSpec& spec, const Literal& lit, int step) {
  auto int_of = [&](const Literal& l) {
    return l.kind == Literal::Kind::kName ? dim_value(p, l.name, step) : l.i;
  };
  switch (spec.kind) {
    case AttrKind::kInt: return AttrValue::of_int(int_of(lit));
    case AttrKind::kFloat:
      return AttrValue::of_float(lit.kind == Literal::Kind::kName
                                     ? static_cast<double>(dim_value(p, lit.name, step))
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
std::vector<AttrValue> resolve_attrs(const Program& p, const OpStmt& op, int step) {
  const OpInfo& info = op_info(op.op);
  std::vector<AttrValue> out;
  for (const AttrSpec& spec : info.attrs) out.push_back(spec.default_value);
  for (const NamedAttr& a : op.attrs) {
    int i = info.attr_index(a.name);
    if (i < 0) fail(fmt::format("op '{}': unknown attribute '{}'", info.name, a.name));
    out[static_cast<size_t>(i)] =
        resolve_attr(p, info.attrs[static_cast<size_t>(i)], a.value, step);
  }
  return out;
}

bool holds_exactly(DType t, double v) {
  switch (t) {
    case DType::kF32: return true;  // f32 is the only floating dtype: the fallback anyway
    case DType::kBool: return v == 0 || v == 1;
    case DType::kI32: return v == std::trunc(v) && v >= -2147483648.0 && v <= 2147483647.0;
    case DType::kI64:
      return v == std::trunc(v) && v >= -9223372036854775808.0 && v < 9223372036854775808.0;
  }
  return false;
}

// Replays the op stream for one step. `Ops` supplies Value (a tensor or a type), dtype_of(v),
// scalar(value, dtype) and apply(op, inputs, attrs); env maps names to values and receives
// each op's result.
template <typename Ops>
Status replay(const Program& p, int step, Ops& ops,
              std::unordered_map<std::string, typename Ops::Value>& env) {
  using Value = typename Ops::Value;
  for (const OpStmt& op : p.ops) {
    try {
      std::vector<AttrValue> attrs = resolve_attrs(p, op, step);
      auto lookup = [&](const Literal& l) -> const Value& {
        auto it = env.find(l.name);
        if (it == env.end()) fail(fmt::format("undefined name '{}'", l.name));
        return it->second;
      };
      std::optional<DType> other;
      for (size_t k = op.op == OpKind::kWhere ? 1 : 0; k < op.operands.size() && !other; ++k) {
        if (op.operands[k].kind == Literal::Kind::kName) {
          other = ops.dtype_of(lookup(op.operands[k]));
        }
      }
      std::vector<Value> in;
      for (const Literal& l : op.operands) {
        if (l.kind == Literal::Kind::kName) {
          in.push_back(lookup(l));
        } else {
          double v = l.number();
          DType t = other && holds_exactly(*other, v) ? *other : DType::kF32;
          in.push_back(ops.scalar(v, t));
        }
      }
      env.insert_or_assign(op.result, ops.apply(op.op, in, attrs));
    } catch (const Error& e) {
      return at(p, op.pos, e.status());
    }
  }
  return Status::ok();
}

struct TypeOps {
  using Value = TensorType;
  DType dtype_of(const TensorType& t) const { return t.dtype; }
  TensorType scalar(double, DType t) const { return {t, Shape{}}; }
  TensorType apply(OpKind op, std::span<const TensorType> in, std::vector<AttrValue>& attrs) const {
    return infer_op(op, in, attrs);
  }
};

struct TensorOps {
  using Value = Tensor;
  LazyContext& ctx;
  DType dtype_of(const Tensor& t) const { return t.dtype(); }
  Tensor scalar(double v, DType t) const {
    AttrValue attrs[] = {AttrValue::of_ints({}), AttrValue::of_float(v), AttrValue::of_dtype(t)};
    return ctx.record(OpKind::kFull, std::span<const Tensor>(), attrs);
  }
  Tensor apply(OpKind op, std::span<const Tensor> in, std::vector<AttrValue>& attrs) const {
    return ctx.record(op, in, attrs);
  }
};

void fill_value(HostBuffer& b, double v) {
  dispatch_dtype(b.dtype(), [&]<typename T>() {
    for (T& x : b.span<T>()) x = static_cast<T>(v);
  });
}

// Makes the value of `decl` for `step`. Parameters pass step 0 and never mix it into seeds.
Result<BufferRef> make_value(const Program& p, const TensorDecl& decl, int step,
                             std::map<std::string, BufferRef>& npy_cache) {
  Result<Shape> shape = declared_shape(p, decl, step);
  if (!shape.is_ok()) return shape.status();
  const Generator& g = decl.init;
  bool is_input = decl.role == TensorDecl::Role::kInput;
  uint64_t seed = is_input ? random_bits(g.seed, static_cast<uint64_t>(step)) : g.seed;
  if (g.kind == Generator::Kind::kNpy) {
    std::string path = p.resolve_path(g.path);
    auto it = npy_cache.find(path);
    if (it == npy_cache.end()) {
      Result<HostBuffer> loaded = read_npy(path);
      if (!loaded.is_ok()) return at(p, g.pos, loaded.status());
      it = npy_cache.emplace(path, std::make_shared<const HostBuffer>(std::move(loaded).value()))
               .first;
    }
    const HostBuffer& b = *it->second;
    TensorType want{decl.dtype, *shape};
    TensorType got{b.dtype(), b.shape()};
    if (!(want == got)) {
      return at(
          p, g.pos,
          invalid_argument(fmt::format("npy \"{}\" holds {} but '{}' is declared {}", g.path,
                                       type_to_string(got), decl.name, type_to_string(want))));
    }
    return it->second;
  }
  HostBuffer b(decl.dtype, *shape);
  switch (g.kind) {
    case Generator::Kind::kNormal: fill_normal(b, seed, g.mean, g.stddev); break;
    case Generator::Kind::kUniform: fill_uniform(b, seed, g.low, g.high); break;
    case Generator::Kind::kFull: fill_value(b, g.value); break;
    case Generator::Kind::kSchedule:
      fill_value(b, g.values[static_cast<size_t>(step) % g.values.size()]);
      break;
    case Generator::Kind::kNpy: break;
  }
  return BufferRef(std::make_shared<const HostBuffer>(std::move(b)));
}

Result<int64_t> step_count(const Program& p, int steps) {
  if (steps < -1) {
    return invalid_argument(fmt::format("step count must be >= 0 or -1, got {}", steps));
  }
  return steps == -1 ? p.default_steps() : steps;
}

}  // namespace

Result<Shape> declared_shape(const Program& program, const TensorDecl& decl, int step) {
  Shape s;
  for (const DimRef& d : decl.dims) {
    if (d.name.empty()) {
      s.push_back(d.value);
      continue;
    }
    const DimDecl* dim = program.find_dim(d.name);
    if (!dim) {
      return at(program, d.pos, invalid_argument(fmt::format("undefined dim '{}'", d.name)));
    }
    s.push_back(dim->value_at(step));
  }
  return s;
}

Result<std::vector<TensorType>> infer_output_types(const Program& program, int step) {
  std::unordered_map<std::string, TensorType> env;
  for (const TensorDecl& d : program.tensors) {
    Result<Shape> s = declared_shape(program, d, step);
    if (!s.is_ok()) return s.status();
    env.insert_or_assign(d.name, TensorType{d.dtype, *s});
  }
  TypeOps ops;
  Status st = replay(program, step, ops, env);
  if (!st.is_ok()) return st;
  std::vector<TensorType> out;
  for (const OutputRef& o : program.outputs) {
    auto it = env.find(o.name);
    if (it == env.end()) {
      return at(program, o.pos, invalid_argument(fmt::format("undefined name '{}'", o.name)));
    }
    out.push_back(it->second);
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

Result<std::vector<StepResult>> run_program(const Program& program, LazyContext& ctx, int steps) {
  Result<int64_t> n = step_count(program, steps);
  if (!n.is_ok()) return n.status();
  std::unordered_map<std::string, Tensor> params;
  std::map<std::string, BufferRef> npy_cache;
  std::vector<StepResult> results;
  for (int step = 0; step < *n; ++step) {
    size_t keys_before = ctx.executed_keys().size();
    std::vector<Tensor> outputs;
    {
      std::unordered_map<std::string, Tensor> env;
      for (const TensorDecl& d : program.tensors) {
        auto cached = params.find(d.name);
        if (cached != params.end()) {
          env.insert_or_assign(d.name, cached->second);
          continue;
        }
        Result<BufferRef> value =
            make_value(program, d, d.role == TensorDecl::Role::kParam ? 0 : step, npy_cache);
        if (!value.is_ok()) return value.status();
        Tensor t = ctx.from_buffer(std::move(value).value());
        if (d.role == TensorDecl::Role::kParam) params.insert_or_assign(d.name, t);
        env.insert_or_assign(d.name, std::move(t));
      }
      TensorOps ops{ctx};
      Status st = replay(program, step, ops, env);
      if (!st.is_ok()) return st;
      for (const OutputRef& o : program.outputs) {
        auto it = env.find(o.name);
        if (it == env.end()) {
          return at(program, o.pos, invalid_argument(fmt::format("undefined name '{}'", o.name)));
        }
        outputs.push_back(it->second);
      }
    }  // intermediates die here: only the outputs are roots of the step's graph
    StepResult r;
    try {
      ctx.mark_step();
      for (size_t k = 0; k < outputs.size(); ++k) {
        r.outputs.emplace_back(program.outputs[k].name, outputs[k].buffer());
      }
    } catch (const Error& e) {
      return Status(e.status().code(),
                    fmt::format("{}: step {}: {}", program.file_name, step, e.status().message()));
    }
    const std::vector<GraphKey>& keys = ctx.executed_keys();
    r.graph_keys.assign(keys.begin() + static_cast<std::ptrdiff_t>(keys_before), keys.end());
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace tracecache
