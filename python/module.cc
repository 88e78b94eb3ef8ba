// The pybind11 module `_tracecache`: the C++ half of the Python package `tracecache`
// (python/tracecache/__init__.py re-exports it; docs/python.md is the reference). Every entry
// point takes the package lock (python/py_session.h); execution, compiles and cache reads run
// with the GIL released; every tracecache Error becomes tracecache.Error with its message.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "capture/core/buffer.h"
#include "capture/ops/ops.h"
#include "capture/trace/autograd.h"
#include "frontend/program/op_call.h"
#include "python/py_session.h"
#include "python/torch_bridge/torch_bridge.h"
#include "replay/audit/audit.h"
#include "replay/audit/report.h"
#include "replay/engine/compiled_function.h"
#include "replay/engine/run_counters.h"

namespace tracecache::python {
namespace {

namespace py = pybind11;

[[noreturn]] void fail(Status status) { throw Error(std::move(status)); }

// tracecache.Error's type object (set by bind_errors), for the entry points that are not pybind11's.
PyObject*& error_type() {
  static PyObject* type = PyExc_RuntimeError;
  return type;
}

const Tensor& get(const PyTensor& t) {
  if (!t.tensor.defined()) {
    fail(invalid_argument(
        "this tensor was a proxy inside a compiled function's trace, which has ended; use the "
        "function's results instead"));
  }
  return t.tensor;
}

// ---- tensors and NumPy ---------------------------------------------------------------------

std::optional<DType> dtype_of_numpy(const py::dtype& d) {
  if (d.is(py::dtype::of<float>())) return DType::kF32;
  if (d.is(py::dtype::of<int32_t>())) return DType::kI32;
  if (d.is(py::dtype::of<int64_t>())) return DType::kI64;
  if (d.is(py::dtype::of<bool>())) return DType::kBool;
  if (d.is(py::dtype::of<double>())) return DType::kF64;
  if (d.is(py::dtype("float16"))) return DType::kF16;
  if (d.is(py::dtype::of<int8_t>())) return DType::kI8;
  if (d.is(py::dtype::of<uint8_t>())) return DType::kU8;
  if (d.is(py::dtype::of<int16_t>())) return DType::kI16;
  return std::nullopt;
}

// NumPy has no bfloat16: a bf16 tensor is read as f32 (cast it, or use tracecache.torch).
py::dtype numpy_dtype(DType t) {
  switch (t) {
    case DType::kF32: return py::dtype::of<float>();
    case DType::kI32: return py::dtype::of<int32_t>();
    case DType::kI64: return py::dtype::of<int64_t>();
    case DType::kBool: return py::dtype::of<bool>();
    case DType::kF64: return py::dtype::of<double>();
    case DType::kF16: return py::dtype("float16");
    case DType::kI8: return py::dtype::of<int8_t>();
    case DType::kU8: return py::dtype::of<uint8_t>();
    case DType::kI16: return py::dtype::of<int16_t>();
    case DType::kBF16: break;
  }
  fail(invalid_argument(fmt::format("NumPy has no {} type: cast the tensor to f32 first", dtype_name(t))));
}

// Keeps a Python object alive for as long as a buffer viewing its memory lives. The buffer's
// last reference may drop in any thread, with or without the GIL, or after the interpreter ended
// (then the reference is left, as everything is at exit).
struct PythonOwner {
  PyObject* object;
  void operator()(const HostBuffer* b) const {
    delete b;
    if (Py_IsInitialized() && !_Py_IsFinalizing()) {
      py::gil_scoped_acquire gil;
      Py_DECREF(object);
    }
  }
};

// Zero-copy: a buffer viewing `a`'s memory, holding `a` alive. Throws TypeError/ValueError unless
// `a` is C-contiguous, aligned and of a tracecache dtype.
// `bf16_bits`: `a` holds bf16 values as their 16-bit patterns (int16 or uint16; NumPy has no
// bfloat16), as a torch bf16 tensor viewed as int16 does.
BufferRef buffer_of_numpy(py::array a, bool bf16_bits = false) {
  std::optional<DType> dtype = dtype_of_numpy(a.dtype());
  if (bf16_bits) {
    if (a.dtype().itemsize() != 2 || a.dtype().kind() == 'f') {
      throw py::type_error("from_numpy_exact: bf16 bits come as an int16 or uint16 array");
    }
    dtype = DType::kBF16;
  }
  if (!dtype) {
    throw py::type_error(fmt::format("from_numpy_exact: NumPy's {} is not a tracecache dtype (float32, float64, "
                                     "float16, int64, int32, int16, int8, uint8, bool)",
                                     std::string(py::str(a.dtype()))));
  }
  constexpr int kNeeded = py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_ | py::detail::npy_api::NPY_ARRAY_ALIGNED_;
  if ((a.flags() & kNeeded) != kNeeded) {
    throw py::value_error("from_numpy_exact: the array must be C-contiguous and aligned");
  }
  std::vector<int64_t> dims(a.shape(), a.shape() + a.ndim());
  if (dims.size() > static_cast<size_t>(kMaxRank)) {
    fail(invalid_argument(fmt::format("an array of rank {} (tracecache tensors have at most {} dims)", dims.size(), kMaxRank)));
  }
  Shape shape{IntList(std::span<const int64_t>(dims))};
  (void)checked_numel(shape.span()).value_or_throw();
  alignas(64) static std::byte empty[64];  // a view needs an address, even of no bytes
  std::byte* data = a.size() == 0 ? empty : static_cast<std::byte*>(const_cast<void*>(a.data()));
  PyObject* owner = a.ptr();
  Py_INCREF(owner);
  return BufferRef(new HostBuffer(HostBuffer::view(*dtype, shape, data)), PythonOwner{owner});
}

// tracecache.from_numpy's core: zero-copy (the Python side copies anything else first).
std::shared_ptr<PyTensor> from_numpy_exact(py::array a, bool bf16_bits) {
  BufferRef buffer = buffer_of_numpy(std::move(a), bf16_bits);
  PackageLock lock;
  return wrap(current_context().from_buffer(std::move(buffer)), nullptr);
}

// A NumPy array over `b`'s bytes (no copy; the array holds the buffer alive), read-only unless
// `writable` (for bytes nothing else holds). `bf16_bits`: a bf16 buffer comes as int16, its bit
// patterns (for torch, which views them as bfloat16); without it, bf16 is an error.
py::array numpy_view(BufferRef b, bool writable = false, bool bf16_bits = false) {
  std::vector<py::ssize_t> shape(b->shape().begin(), b->shape().end());
  const py::dtype dtype = bf16_bits && b->dtype() == DType::kBF16 ? py::dtype::of<int16_t>() : numpy_dtype(b->dtype());
  const void* bytes = b->bytes();
  auto* holder = new BufferRef(std::move(b));
  py::capsule base(holder, [](void* p) { delete static_cast<BufferRef*>(p); });
  py::array out(dtype, shape, {}, bytes, base);
  if (!writable) out.attr("setflags")(py::arg("write") = false);  // values are immutable; the caches share them
  return out;
}

// The tensor's value as a read-only NumPy array over its host buffer (no copy; the array holds
// the buffer alive). Materializes the tensor first (a barrier, GIL released).
py::array to_numpy(const PyTensor& t, bool bf16_bits) {
  PackageLock lock;
  const Tensor& x = get(t);
  BufferRef b;
  {
    py::gil_scoped_release release;
    b = x.buffer();
  }
  if (t.session) report_new_warnings(*t.session);
  return numpy_view(std::move(b), false, bf16_bits);
}

std::string repr(const PyTensor& t) {
  if (!t.tensor.defined()) return "tracecache.Tensor(<proxy of an ended trace>)";
  const Tensor& x = t.tensor;
  return fmt::format("tracecache.Tensor(shape={}, dtype={}{})", x.peek_shape().to_string(), dtype_name(x.dtype()),
                     x.is_materialized() ? "" : ", pending");
}

// ---- ops -----------------------------------------------------------------------------------

// The trace-format spelling of a Python attribute value, for messages.
std::string spelling(const py::handle& v) {
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>() ? "true" : "false";
  if (py::isinstance<py::int_>(v)) return std::string(py::str(v));
  if (py::isinstance<py::float_>(v)) return AttrValue::of_float(v.cast<double>()).to_string();
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    std::vector<std::string> items;
    for (py::handle item : v) items.push_back(spelling(item));
    return fmt::format("[{}]", fmt::join(items, ", "));
  }
  return std::string(py::repr(v));
}

bool is_int(const py::handle& v) { return py::isinstance<py::int_>(v) && !py::isinstance<py::bool_>(v); }

// `v` as attribute `spec` of `info`, checked as the .trace parser checks a written value.
AttrValue attr_value(const OpInfo& info, const AttrSpec& spec, const py::handle& v) {
  auto mismatch = [&]() -> AttrValue { fail(invalid_argument(attr_kind_message(info, spec, spelling(v)))); };
  switch (spec.kind) {
    case AttrKind::kInt:
      if (!is_int(v)) return mismatch();
      return AttrValue::of_int(v.cast<int64_t>());
    case AttrKind::kFloat:
      if (!is_int(v) && !py::isinstance<py::float_>(v)) return mismatch();
      return AttrValue::of_float(v.cast<double>());
    case AttrKind::kBool:
      if (!py::isinstance<py::bool_>(v)) return mismatch();
      return AttrValue::of_bool(v.cast<bool>());
    case AttrKind::kDType: {
      if (!py::isinstance<py::str>(v)) return mismatch();
      std::optional<DType> t = parse_dtype(v.cast<std::string>());
      if (!t) return mismatch();
      return AttrValue::of_dtype(*t);
    }
    case AttrKind::kInts: {
      if (!py::isinstance<py::list>(v) && !py::isinstance<py::tuple>(v)) return mismatch();
      std::vector<int64_t> items;
      for (py::handle item : v) {
        if (!is_int(item)) return mismatch();
        items.push_back(item.cast<int64_t>());
      }
      if (items.size() > static_cast<size_t>(kMaxRank)) fail(invalid_argument(too_many_entries_message(info, spec)));
      return AttrValue::of_ints(IntList(std::span<const int64_t>(items)));
    }
  }
  return mismatch();
}

bool is_number(const py::handle& v) { return py::isinstance<py::int_>(v) || py::isinstance<py::float_>(v); }

// tracecache.op(name, *inputs, **attrs): one registry op, checked as a .trace line is.
std::shared_ptr<PyTensor> apply_op(const std::string& name, const py::args& inputs, const py::kwargs& attrs) {
  const OpInfo* info = find_callable_op(name);
  if (!info) fail(invalid_argument(unknown_op_message(name)));
  if (std::string m = operand_count_message(*info, static_cast<int>(inputs.size())); !m.empty()) {
    fail(invalid_argument(m));
  }
  std::vector<AttrValue> values;
  for (const AttrSpec& spec : info->attrs) values.push_back(spec.default_value);
  std::vector<bool> given(info->attrs.size(), false);
  py::object bind = py::none();
  for (const auto& [key, value] : attrs) {
    const std::string attr = key.cast<std::string>();
    if (attr == "_bind") {  // [(attribute, element, tensor, dim)]: LazyContext::record's AttrBindings
      bind = py::reinterpret_borrow<py::object>(value);
      continue;
    }
    const int i = info->attr_index(attr);
    if (i < 0) fail(invalid_argument(unknown_attr_message(*info, attr)));
    values[static_cast<size_t>(i)] = attr_value(*info, info->attrs[static_cast<size_t>(i)], value);
    given[static_cast<size_t>(i)] = true;
  }
  for (size_t i = 0; i < info->attrs.size(); ++i) {
    if (info->attrs[i].required && !given[i]) fail(invalid_argument(missing_attr_message(*info, info->attrs[i])));
  }
  const bool numbers_ok = info->op_class == OpClass::kBinary || info->op_class == OpClass::kCompare ||
                          info->op_class == OpClass::kWhere;
  const PyTensor* first = nullptr;
  std::optional<DType> other;
  for (size_t j = 0; j < inputs.size(); ++j) {
    py::handle in = inputs[j];
    if (py::isinstance<PyTensor>(in)) {
      const PyTensor& t = in.cast<const PyTensor&>();
      if (!first) first = &t;
      if (!other && !(info->kind == OpKind::kWhere && j == 0)) other = get(t).dtype();
    } else if (is_number(in) && !py::isinstance<py::bool_>(in)) {
      if (!numbers_ok) {
        fail(invalid_argument(fmt::format("op '{}': operand {} must be a tensor; number operands are allowed "
                                          "only in elementwise binary ops and where", info->name, spelling(in))));
      }
    } else {
      throw py::type_error(fmt::format("op '{}': operand {} is a {}, not a tracecache.Tensor or a number", info->name,
                                       j, std::string(py::str(py::type::handle_of(in).attr("__name__")))));
    }
  }
  if (!first && !inputs.empty()) fail(invalid_argument(fmt::format("op '{}' needs at least one tensor operand", info->name)));
  PackageLock lock;
  LazyContext& ctx = first ? get(*first).context() : current_context();
  std::vector<Tensor> operands;
  for (py::handle in : inputs) {
    if (py::isinstance<PyTensor>(in)) {
      operands.push_back(get(in.cast<const PyTensor&>()));
    } else {
      const double v = in.cast<double>();
      AttrValue full[] = {AttrValue::of_ints({}), AttrValue::of_float(v), AttrValue::of_dtype(number_operand_dtype(other, v))};
      operands.push_back(ctx.record(OpKind::kFull, std::span<const Tensor>(), full));
    }
  }
  std::vector<AttrBinding> bindings;
  if (!bind.is_none()) {
    for (py::handle b : bind) {
      py::tuple t = py::reinterpret_borrow<py::object>(b).cast<py::tuple>();
      if (t.size() != 4 || !py::isinstance<PyTensor>(t[2])) {
        throw py::type_error(fmt::format("op '{}': _bind takes (attribute, element, tensor, dim) tuples", info->name));
      }
      const int a = info->attr_index(t[0].cast<std::string>());
      if (a < 0) fail(invalid_argument(unknown_attr_message(*info, t[0].cast<std::string>())));
      bindings.push_back({static_cast<uint32_t>(a), t[1].cast<int32_t>(), get(t[2].cast<const PyTensor&>()),
                          t[3].cast<int>()});
    }
  }
  Tensor out;
  if (ctx.options().eager) {
    py::gil_scoped_release release;  // eager mode runs the op now
    out = ctx.record(info->kind, operands, values, bindings);
  } else {
    out = ctx.record(info->kind, operands, values, bindings);
  }
  return wrap(std::move(out), first);
}

// tracecache._host_op: a graph break inside the traced function of a compiled function
// (TraceArgs::host_op): the function's runner computes it; returns its results as proxies.
py::list host_op(const py::bytes& payload, const py::list& inputs, const std::string& description) {
  PackageLock lock;
  const std::shared_ptr<TraceScope>& scope = current_trace();
  if (!scope || !scope->args) {
    fail(invalid_argument("_host_op is called by a compiled function's traced code, while it is traced"));
  }
  std::vector<Tensor> in;
  for (py::handle h : inputs) {
    if (!py::isinstance<PyTensor>(h)) throw py::type_error("_host_op: inputs must be tracecache Tensors");
    in.push_back(get(h.cast<const PyTensor&>()));
  }
  std::vector<Tensor> out;
  std::string bytes = payload;
  try {
    py::gil_scoped_release release;
    out = scope->args->host_op(std::move(bytes), in, description);
  } catch (const Error&) {
    if (PyErr_Occurred()) throw py::error_already_set();  // the runner's own exception, as it is
    throw;
  }
  py::list result;
  for (Tensor& t : out) result.append(wrap(std::move(t), nullptr));
  return result;
}

py::tuple grad_of(const PyTensor& loss, const py::args& wrt) {
  PackageLock lock;
  std::vector<Tensor> w;
  for (py::handle h : wrt) {
    if (!py::isinstance<PyTensor>(h)) throw py::type_error("grad(loss, *wrt): every wrt must be a tracecache.Tensor");
    w.push_back(get(h.cast<const PyTensor&>()));
  }
  const Tensor& l = get(loss);
  std::vector<Tensor> g;
  {
    py::gil_scoped_release release;
    g = grad(l, w);
  }
  py::tuple out(g.size());
  for (size_t i = 0; i < g.size(); ++i) out[i] = wrap(std::move(g[i]), &loss);
  return out;
}

// ---- compiled functions --------------------------------------------------------------------

// What a positional argument of a compiled function was at its first call.
enum class ArgKind : uint8_t { kTensor, kFloat, kInt, kBool };

struct CompileSpec {
  py::object fn;
  std::string name, version;
  std::vector<std::pair<size_t, int>> dynamic_dims;  // (argument position, dim)
  std::vector<size_t> dynamic_scalars;                // argument positions
  std::vector<std::pair<uint32_t, size_t>> updates;   // (output, argument position)
  bool automatic_dynamic = true;
  int recompile_limit = 8;
  std::vector<std::string> arg_names;  // by position; may be shorter
  py::object host_op;   // None, or runner(payload: bytes, inputs: list[ndarray]) -> list[ndarray]
  std::string program;  // CompiledFunctionOptions::program
  std::vector<std::pair<size_t, int>> static_dims;  // (argument position, dim): never dynamic
};

// tracecache.CompiledFunction: replay/engine/compiled_function.h over the current session. The C++
// function is made at the first call (which fixes which arguments are tensors and which are
// scalars) and again when configure() replaced the session.
class PyCompiledFunction {
 public:
  explicit PyCompiledFunction(CompileSpec spec) : spec_(std::move(spec)) {
    PackageLock lock;
    live_functions().insert(this);
  }

  // Every compiled function alive in the process, to flush their hit counts before the audit is
  // read and at exit (flush_all). Guarded by PackageLock.
  static std::set<PyCompiledFunction*>& live_functions() {
    static std::set<PyCompiledFunction*> live;
    return live;
  }
  // Writes every live compiled function's replay counts, and the current session's pending
  // events and hit counts, to the cache. REQUIRES: PackageLock held, the GIL released.
  static void flush_all() {
    for (PyCompiledFunction* f : live_functions()) {
      if (f->fn_) f->fn_->flush();
    }
    if (Runtime* r = current_session()->session->runtime()) r->flush();
  }

  py::list call(const py::args& args) {
    PackageLock lock;
    std::vector<ArgKind> kinds;
    for (py::handle a : args) {
      if (py::isinstance<PyTensor>(a)) kinds.push_back(ArgKind::kTensor);
      else if (py::isinstance<py::bool_>(a)) kinds.push_back(ArgKind::kBool);
      else if (py::isinstance<py::int_>(a)) kinds.push_back(ArgKind::kInt);
      else if (py::isinstance<py::float_>(a)) kinds.push_back(ArgKind::kFloat);
      else throw py::type_error(fmt::format("{}: argument {} is a {}; a compiled function takes tensors and numbers",
                                            spec_.name, kinds.size(), std::string(py::str(py::type::handle_of(a).attr("__name__")))));
    }
    const std::shared_ptr<PySession>& session = current_session();
    if (!fn_ || session_ != session) make(session, kinds);
    if (kinds.size() != kinds_.size()) {
      throw py::type_error(fmt::format("{} takes {} arguments (as at its first call), got {}", spec_.name, kinds_.size(), kinds.size()));
    }
    CallArgs call;
    for (size_t i = 0; i < kinds.size(); ++i) {
      const bool tensor = kinds[i] == ArgKind::kTensor, was_tensor = kinds_[i] == ArgKind::kTensor;
      if (tensor != was_tensor) {
        throw py::type_error(fmt::format("{}: argument {} is a {} but was a {} at the first call", spec_.name, i,
                                         tensor ? "tensor" : "number", was_tensor ? "tensor" : "number"));
      }
      if (tensor) {
        call.tensors.push_back(get(args[i].cast<const PyTensor&>()));
      } else {
        call.scalars.push_back(args[i].cast<double>());
      }
    }
    std::optional<Result<std::vector<Tensor>>> result;
    {
      py::gil_scoped_release release;
      for (const Tensor& t : call.tensors) t.data();  // arguments are materialized values
      result.emplace((*fn_)(session->session->context(), call));
    }
    if (PyErr_Occurred()) throw py::error_already_set();  // raised by fn while it was traced
    if (!result->is_ok()) fail(result->status());
    report_new_warnings(*session);
    py::list out;
    for (Tensor& t : result->value()) {
      auto p = std::make_shared<PyTensor>();
      p->session = session;
      p->tensor = std::move(t);
      out.append(p);
    }
    return out;
  }

  py::dict stats() const {
    PackageLock lock;
    py::dict d;
    FunctionStats s = fn_ ? fn_->stats() : FunctionStats{};
    d["calls"] = s.calls;
    d["traces"] = s.traces;
    d["entries"] = fn_ ? fn_->num_entries() : 0;
    d["guard_checks"] = s.guard_checks;
    d["guard_failures"] = s.guard_failures;
    d["recompiles"] = s.recompiles;
    d["specializations"] = s.specializations;
    d["host_op_runs"] = s.host_op_runs;
    d["memoized_replays"] = s.memoized_replays;
    d["fell_back_to_lazy"] = s.fell_back_to_lazy;
    d["hits_per_entry"] = s.hits_per_entry;
    return d;
  }

  std::vector<std::string> recompile_reasons() const {
    PackageLock lock;
    return fn_ ? fn_->stats().recompile_reasons : std::vector<std::string>{};
  }

  void flush() {
    PackageLock lock;
    if (!fn_) return;
    py::gil_scoped_release release;
    fn_->flush();
  }

  const std::string& name() const { return spec_.name; }
  const std::string& version() const { return spec_.version; }

  // Dim `dim` of the tensor at argument position `position` made dynamic (or static) for the
  // traces that follow; before the first call, kept for it.
  void mark_dim(size_t position, int dim, bool dynamic) {
    PackageLock lock;
    if (dynamic) {
      std::erase(spec_.static_dims, std::make_pair(position, dim));
      if (std::find(spec_.dynamic_dims.begin(), spec_.dynamic_dims.end(), std::make_pair(position, dim)) ==
          spec_.dynamic_dims.end()) {
        spec_.dynamic_dims.emplace_back(position, dim);
      }
    } else {
      std::erase(spec_.dynamic_dims, std::make_pair(position, dim));
      if (std::find(spec_.static_dims.begin(), spec_.static_dims.end(), std::make_pair(position, dim)) ==
          spec_.static_dims.end()) {
        spec_.static_dims.emplace_back(position, dim);
      }
    }
    if (!fn_) return;
    if (position >= kinds_.size() || kinds_[position] != ArgKind::kTensor) {
      throw py::value_error(fmt::format("{}: argument {} is not a tensor argument", spec_.name, position));
    }
    size_t t = 0;
    for (size_t i = 0; i < position; ++i) t += kinds_[i] == ArgKind::kTensor;
    if (dynamic) fn_->mark_dynamic(t, dim);
    else fn_->mark_static(t, dim);
  }

  // For TorchFastPath: the context of the function's session, or null when the function was not
  // made yet or the session was replaced since (the next full call makes it anew).
  LazyContext* replay_context() const {
    return fn_ && session_ == current_session() ? &session_->session->context() : nullptr;
  }
  // CompiledFunction::replay_only (GIL released by the caller), the first `state` tensors of
  // `call` being the caller's state, and the served entry's note.
  Result<std::optional<std::vector<DataRef>>> replay_only(LazyContext& ctx, const CallArgs& call, size_t state) {
    return fn_->replay_only(ctx, call, state);
  }
  const std::string& entry_note() const { return fn_->last_note(); }
  PySession& session() const { return *session_; }

  // CompiledFunction::discard_last_entry.
  bool discard_last_entry(const std::string& why) {
    PackageLock lock;
    if (!fn_) return false;
    py::gil_scoped_release release;
    return fn_->discard_last_entry(why);
  }

  // The note of the entry being traced (CompiledFunctionOptions::entry_note); set by `fn`.
  void set_note(std::string note) {
    PackageLock lock;
    pending_note_ = std::move(note);
  }
  // CompiledFunction::last_note(): the note of the entry that served the last call.
  py::bytes last_note() const {
    PackageLock lock;
    return py::bytes(fn_ ? fn_->last_note() : std::string());
  }

  ~PyCompiledFunction() {
    PackageLock lock;
    live_functions().erase(this);
    py::gil_scoped_release release;  // flushes hit counts to the database
    fn_.reset();
    session_.reset();
  }

 private:
  void make(const std::shared_ptr<PySession>& session, const std::vector<ArgKind>& kinds) {
    Runtime* runtime = session->session->runtime();
    if (!runtime) {
      fail(invalid_argument(fmt::format(
          "tracecache.compile needs a session that compiles: mode 'lazy' or 'once' on a compiling backend "
          "(cpu, sim:PRESET), not mode '{}' on '{}' (see tracecache.configure)",
          session->settings.mode, session->settings.backend)));
    }
    std::vector<size_t> tensor_index(kinds.size()), scalar_index(kinds.size());
    size_t nt = 0, ns = 0;
    CompiledFunctionOptions o;
    for (size_t i = 0; i < kinds.size(); ++i) {
      if (kinds[i] == ArgKind::kTensor) {
        tensor_index[i] = nt++;
        o.input_names.push_back(i < spec_.arg_names.size() ? spec_.arg_names[i] : fmt::format("arg{}", i));
      } else {
        scalar_index[i] = ns++;
      }
    }
    auto position = [&](size_t p, bool tensor, const char* what) {
      if (p >= kinds.size() || (kinds[p] == ArgKind::kTensor) != tensor) {
        throw py::value_error(fmt::format("{}: {} names argument {}, which is not a {} argument of this call",
                                          spec_.name, what, p, tensor ? "tensor" : "scalar"));
      }
      return tensor ? tensor_index[p] : scalar_index[p];
    };
    for (auto [p, dim] : spec_.dynamic_dims) o.dynamic_dims.push_back({position(p, true, "dynamic_dims"), dim});
    for (auto [p, dim] : spec_.static_dims) o.static_dims.push_back({position(p, true, "static_dims"), dim});
    for (size_t p : spec_.dynamic_scalars) o.dynamic_scalars.push_back(position(p, false, "dynamic_scalars"));
    for (auto [output, p] : spec_.updates) {
      o.updates.push_back({output, static_cast<uint32_t>(position(p, true, "updates"))});
    }
    o.user_version = spec_.version;
    o.automatic_dynamic = spec_.automatic_dynamic;
    o.recompile_limit = spec_.recompile_limit;
    o.canonicalize = session->session->context().options().canonicalize;
    o.entry_note = [this] { return std::exchange(pending_note_, std::string()); };
    o.program = spec_.program;
    if (!spec_.host_op.is_none()) o.host_op = [this](const std::string& payload, std::span<const BufferRef> inputs) {
      return run_host_op(payload, inputs);
    };
    kinds_ = kinds;
    dynamic_scalar_.assign(ns, false);
    for (size_t s : o.dynamic_scalars) dynamic_scalar_[s] = true;
    fn_.reset();
    fn_ = std::make_unique<CompiledFunction>(spec_.name, [this](LazyContext& ctx, const TraceArgs& a) { return trace(ctx, a); },
                                             runtime, std::move(o));
    session_ = session;
  }

  // The host op runner (CompiledFunctionOptions::host_op): the Python runner on read-only NumPy
  // views of the inputs; its results (C-contiguous arrays of tracecache dtypes) become buffers
  // viewing them. Called with the package lock held and the GIL released. An exception it raises
  // while `fn` is traced is left set, so the trace's caller sees it as it is; on a replay it is
  // cleared (the call then traces, and the runner raises again there).
  Result<std::vector<BufferRef>> run_host_op(const std::string& payload, std::span<const BufferRef> inputs) {
    py::gil_scoped_acquire gil;
    try {
      py::list arrays;
      for (const BufferRef& b : inputs) arrays.append(numpy_view(b));
      py::object r = spec_.host_op(py::bytes(payload), arrays);
      std::vector<BufferRef> out;
      for (py::handle h : r) out.push_back(buffer_of_numpy(py::reinterpret_borrow<py::array>(h)));
      return out;
    } catch (py::error_already_set& e) {
      std::string message = e.what();
      if (current_trace()) e.restore();
      return invalid_argument(fmt::format("{}: a graph break failed: {}", spec_.name, message));
    } catch (const std::exception& e) {
      return invalid_argument(fmt::format("{}: a graph break failed: {}", spec_.name, e.what()));
    }
  }

  // Calls the Python fn on proxies of `a` (the C++ side holds the package lock, GIL released).
  std::vector<Tensor> trace(LazyContext& ctx, const TraceArgs& a) {
    py::gil_scoped_acquire gil;
    pending_note_.clear();
    auto scope = std::make_shared<TraceScope>();
    scope->ctx = &ctx;
    scope->args = &a;
    push_trace(scope);
    struct End {
      std::shared_ptr<TraceScope> scope;
      ~End() {
        pop_trace();
        scope->end();
      }
    } end{scope};
    try {
      py::tuple args(kinds_.size());
      size_t t = 0, s = 0;
      for (size_t i = 0; i < kinds_.size(); ++i) {
        switch (kinds_[i]) {
          case ArgKind::kTensor: args[i] = wrap(a.tensor(t++), nullptr); break;
          case ArgKind::kFloat:
          case ArgKind::kInt:
          case ArgKind::kBool:
            if (dynamic_scalar_[s]) {
              args[i] = wrap(a.scalar_tensor(s), nullptr);
            } else if (kinds_[i] == ArgKind::kInt) {
              args[i] = py::int_(static_cast<int64_t>(a.scalar(s)));
            } else if (kinds_[i] == ArgKind::kBool) {
              args[i] = py::bool_(a.scalar(s) != 0);
            } else {
              args[i] = py::float_(a.scalar(s));
            }
            ++s;
            break;
        }
      }
      py::object r = spec_.fn(*args);
      std::vector<Tensor> out;
      auto take = [&](py::handle h) {
        if (!py::isinstance<PyTensor>(h)) {
          fail(invalid_argument(fmt::format("{} returned a {}; a compiled function returns a tracecache.Tensor or a "
                                            "tuple or list of them", spec_.name,
                                            std::string(py::str(py::type::handle_of(h).attr("__name__"))))));
        }
        out.push_back(get(h.cast<const PyTensor&>()));
      };
      if (py::isinstance<py::tuple>(r) || py::isinstance<py::list>(r)) {
        for (py::handle h : r) take(h);
      } else {
        take(r);
      }
      return out;
    } catch (py::error_already_set& e) {
      // The call raises it again once the C++ function has returned (PyErr_Occurred above).
      std::string message = e.what();
      e.restore();
      throw Error(invalid_argument(fmt::format("{} raised: {}", spec_.name, message)));
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {  // a pybind11 cast or type error: it returns as a Status
      throw Error(invalid_argument(fmt::format("{}: {}", spec_.name, e.what())));
    }
  }

  CompileSpec spec_;
  std::shared_ptr<PySession> session_;
  std::vector<ArgKind> kinds_;
  std::vector<bool> dynamic_scalar_;  // per scalar argument
  std::unique_ptr<CompiledFunction> fn_;
  std::string pending_note_;
};

// tracecache's random number generator state (tracecache.manual_seed, tracecache.next_seed): a
// seed and the offset of the next draw. Each compiled call takes the next offset, so a program's
// every step draws new numbers, reproducibly from manual_seed(n). Guarded by the GIL.
struct RngState {
  int64_t seed = 0;
  int64_t offset = 0;
};
RngState& rng_state() {
  static RngState state;
  return state;
}

// The next (seed, offset) pair as an int64 buffer of 2, advancing the offset.
BufferRef next_seed_buffer() {
  RngState& rng = rng_state();
  auto b = std::make_shared<HostBuffer>(DType::kI64, Shape{IntList{2}});
  b->data<int64_t>()[0] = rng.seed;
  b->data<int64_t>()[1] = rng.offset++;
  return b;
}

// tracecache.torch's per-call path of a compiled module (python/tracecache/torch/compiled.py;
// docs/python.md, "The per-call path"): one call's work in C++ when an entry of the module's
// compiled function replays. What a call must establish, and the signal each check reads instead
// of asking Python for every parameter:
//  - the modules' training flags equal the function's: each module's `__dict__` is unchanged
//    since it was read (CPython's per-dictionary version tag, PEP 509), else its flag is read;
//  - every parameter and buffer is the object wrapped before: its owner dictionary
//    (`_parameters` / `_buffers`) is unchanged by its version tag, else its entries are looked up;
//  - and holds the same memory and values: torch's TensorImpl, storage, offset, sizes, strides
//    and version counter (bumped by every in-place write) equal those seen, read by the torch
//    bridge (python/torch_bridge/torch_bridge.h) in prefetching passes; a changed tensor is
//    wrapped again (zero-copy, tracecache.from_torch).
// Then it views the call's tensors (zero-copy), appends the random seed, replays without tracing
// and returns the outputs as torch tensors over tracecache's buffers (a buffer anything else
// holds goes through a read-only NumPy view, as tensor.torch() does): the output itself when the
// entry's output structure is one tensor, else (structure, outputs, note) for Python to assemble.
// Anything it does not handle (another argument count or type, a flag changed, a replaced
// session, a call that would trace, a tensor it cannot view) returns None, and the Python path
// makes the call. Thread-safety: the package lock. Ownership: holds references to the function,
// the modules, their dictionaries and the state tensors it wrapped.
class TorchFastPath {
 public:
  // `modules`: (module, training) of every module whose flag the function was compiled under;
  // `slots`: (index into modules, "_parameters" or "_buffers", name) of every state tensor in
  // the function's argument order; `bridge`: _tracecache_torch.api.
  TorchFastPath(py::object function, const py::list& modules, const py::list& slots, size_t num_inputs,
                py::object from_torch, py::object bridge)
      : function_(std::move(function)), num_inputs_(num_inputs), from_torch_(std::move(from_torch)),
        bridge_object_(std::move(bridge)) {
    PackageLock lock;
    if (!kDictTags) throw py::type_error("_TorchFastPath reads CPython 3.11's dictionary version tags");
    bridge_ = static_cast<const torch_bridge::Api*>(PyCapsule_GetPointer(bridge_object_.ptr(), torch_bridge::kCapsuleName));
    if (!bridge_) throw py::error_already_set();
    if (bridge_->abi_version != torch_bridge::kAbiVersion) {
      throw py::type_error(fmt::format("_TorchFastPath: the torch bridge's ABI is {}, this module's {}",
                                       bridge_->abi_version, torch_bridge::kAbiVersion));
    }
    training_name_ = py::str("training");
    for (py::handle h : modules) {
      py::tuple t = py::reinterpret_borrow<py::tuple>(h);
      Module m;
      m.module = py::reinterpret_borrow<py::object>(t[0]);
      m.training = t[1].cast<bool>();
      m.dict_slot = _PyObject_GetDictPtr(m.module.ptr());  // makes the dictionary, where CPython defers it
      if (!m.dict_slot || !*m.dict_slot || !PyDict_CheckExact(*m.dict_slot)) {
        throw py::type_error("_TorchFastPath: a module without an instance dictionary");
      }
      modules_.push_back(std::move(m));
    }
    for (py::handle h : slots) {
      py::tuple t = py::reinterpret_borrow<py::tuple>(h);
      const size_t module = t[0].cast<size_t>();
      if (module >= modules_.size()) throw py::index_error("_TorchFastPath: a slot's module index is out of range");
      py::str kind = t[1].cast<py::str>();
      size_t owner = 0;
      while (owner < owners_.size() && !(owners_[owner].module == module && owners_[owner].kind.equal(kind))) ++owner;
      if (owner == owners_.size()) owners_.push_back({module, kind, {}, 0, {}});
      owners_[owner].slots.push_back(slots_.size());
      Slot slot;
      slot.owner = owner;
      slot.key = t[2].cast<py::str>();
      slots_.push_back(std::move(slot));
    }
    impls_.resize(slots_.size());
    seen_.resize(slots_.size());
  }

  // After a call through the Python path: the output structure of the entry with `note`, held
  // for its calls here (`count` outputs; `single`: the structure is one tensor).
  void learn(const py::bytes& note, py::object structure, size_t count, bool single) {
    PackageLock lock;
    structures_[std::string(note)] = Structure{std::move(structure), count, single};
  }

  // `self`'s call(*inputs) as a builtin function of CPython's fast calling convention, which
  // holds `self` alive: a call through it does not pass through pybind11's dispatcher (a few
  // kilobytes of code, cold on every call after a large graph's kernels).
  static py::object caller(py::object self) {
    static PyMethodDef def{"call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&fast_call)),
                           METH_FASTCALL, "tracecache._TorchFastPath.call"};
    auto* keep = new py::object(self);
    PyObject* capsule = PyCapsule_New(keep, kCallerName, [](PyObject* c) {
      delete static_cast<py::object*>(PyCapsule_GetPointer(c, kCallerName));
    });
    if (!capsule) {
      delete keep;
      throw py::error_already_set();
    }
    py::object owner = py::reinterpret_steal<py::object>(capsule);
    if (PyCapsule_SetContext(capsule, &self.cast<TorchFastPath&>()) != 0) throw py::error_already_set();
    PyObject* f = PyCFunction_NewEx(&def, capsule, nullptr);
    if (!f) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(f);
  }

  py::object call(PyObject* const* inputs, size_t count) {
    PackageLock lock;
    last_was_fast_ = false;
    PyCompiledFunction& f = function_.cast<PyCompiledFunction&>();
    LazyContext* ctx = f.replay_context();
    if (!ctx || count != num_inputs_) return py::none();
    if (!check_modules()) return py::none();
    if (!check_owners()) return py::none();
    struct Truncate {  // the call's own tensors leave call_ with the call
      CallArgs& call;
      size_t keep;
      ~Truncate() { call.tensors.resize(std::min(keep, call.tensors.size())); }
    } truncate{call_, slots_.size()};
    CallArgs& call = call_;
    if (!state_tensors(*ctx)) return py::none();
    for (size_t i = 0; i < count; ++i) {
      std::optional<Tensor> w = input_tensor(inputs[i], *ctx);
      if (!w) return py::none();
      call.tensors.push_back(std::move(*w));
    }
    // The last argument: the random seed (seed, offset) of this call, as tracecache.next_seed().
    call.tensors.push_back(ctx->from_buffer(next_seed_buffer()));
    Result<std::optional<std::vector<DataRef>>> r = [&] {
      py::gil_scoped_release release;
      return f.replay_only(*ctx, call, slots_.size());
    }();
    if (!r.is_ok()) fail(r.status());
    if (!r->has_value()) return py::none();
    report_new_warnings(f.session());
    std::vector<DataRef>& results = **r;
    const std::string& note = f.entry_note();
    auto known = structures_.find(note);
    const Structure* structure = known == structures_.end() || known->second.count != results.size()
                                     ? nullptr : &known->second;
    last_structure_ = structure ? structure->structure : py::none();
    last_was_fast_ = true;
    if (structure && structure->single) return torch_of(std::move(results[0]));
    py::list out;
    for (DataRef& d : results) out.append(torch_of(std::move(d)));
    return py::make_tuple(last_structure_, out, structure ? py::object(py::none()) : py::object(py::bytes(note)));
  }

  // The structure of the last call's entry if the last call was served here, else None.
  py::object last_structure() const { return last_was_fast_ ? last_structure_ : py::none(); }
  // A call served by the Python path since.
  void clear_last() { last_was_fast_ = false; }

 private:
  static constexpr const char* kCallerName = "tracecache._TorchFastPath.caller";

  static PyObject* fast_call(PyObject* capsule, PyObject* const* args, Py_ssize_t nargs) {
    auto* path = static_cast<TorchFastPath*>(PyCapsule_GetContext(capsule));
    if (!path) return nullptr;
    try {
      return path->call(args, static_cast<size_t>(nargs)).release().ptr();
    } catch (py::error_already_set& e) {
      e.restore();
    } catch (const Error& e) {
      PyErr_SetString(error_type(), e.what());
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
    return nullptr;
  }

  struct Module {
    py::object module;
    bool training = false;
    PyObject** dict_slot = nullptr;  // where the module holds its __dict__ (inside the object)
    py::object dict;                 // the __dict__ last read, and its version tag then
    uint64_t tag = 0;
  };
  struct Owner {  // a state dictionary: module.__dict__[kind]
    size_t module;
    py::str kind;
    py::object dict;  // as last read (null: read it), and its version tag then
    uint64_t tag;
    std::vector<size_t> slots;
  };
  struct Slot {
    size_t owner = 0;
    py::str key;
    py::object tensor;  // the torch tensor in the owner under `key`, as last read
  };
  struct Structure {
    py::object structure;
    size_t count;
    bool single;
  };

  // PEP 509's per-dictionary version: any change of the dictionary changes it. The field is
  // CPython 3.11's; on other versions the path is not made (docs/python.md).
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
  static constexpr bool kDictTags = true;
  static uint64_t tag_of(PyObject* dict) { return reinterpret_cast<PyDictObject*>(dict)->ma_version_tag; }
#else
  static constexpr bool kDictTags = false;  // the constructor refuses: the Python path serves
  static uint64_t tag_of(PyObject*) { return 0; }
#endif

  // The training flags: a module whose __dict__ changed is read again (and its state
  // dictionaries with it); false if a flag differs from the function's.
  bool check_modules() {
    for (const Module& m : modules_) __builtin_prefetch(m.dict_slot);
    for (const Module& m : modules_) __builtin_prefetch(m.dict.ptr());
    for (size_t i = 0; i < modules_.size(); ++i) {
      Module& m = modules_[i];
      PyObject* dict = *m.dict_slot;
      if (dict == m.dict.ptr() && tag_of(dict) == m.tag) continue;
      if (!dict || !PyDict_CheckExact(dict)) return false;
      PyObject* flag = PyDict_GetItemWithError(dict, training_name_.ptr());  // borrowed
      if (!flag) {
        PyErr_Clear();
        return false;
      }
      if ((flag == Py_True) != m.training || (flag != Py_True && flag != Py_False)) return false;
      m.dict = py::reinterpret_borrow<py::object>(dict);
      m.tag = tag_of(dict);
      for (Owner& o : owners_) {
        if (o.module == i) o.dict = py::object();
      }
    }
    return true;
  }

  // The state dictionaries: one whose tag changed has its entries looked up again.
  bool check_owners() {
    for (const Owner& o : owners_) __builtin_prefetch(o.dict.ptr());
    for (Owner& o : owners_) {
      if (o.dict && tag_of(o.dict.ptr()) == o.tag) continue;
      if (!o.dict) {
        PyObject* d = PyDict_GetItemWithError(modules_[o.module].dict.ptr(), o.kind.ptr());
        if (!d || !(PyDict_CheckExact(d) || PyODict_CheckExact(d))) {  // torch 1.13 keeps OrderedDicts
          PyErr_Clear();
          return false;
        }
        o.dict = py::reinterpret_borrow<py::object>(d);
      }
      for (size_t s : o.slots) {
        Slot& slot = slots_[s];
        PyObject* t = PyDict_GetItemWithError(o.dict.ptr(), slot.key.ptr());  // borrowed
        if (!t) {
          PyErr_Clear();
          return false;
        }
        if (t != slot.tensor.ptr()) {
          if (!bridge_->is_tensor(t)) return false;
          slot.tensor = py::reinterpret_borrow<py::object>(t);
          impls_[s] = bridge_->impl_of(t);
          if (s < call_.tensors.size()) call_.tensors[s] = Tensor();
        }
      }
      o.tag = tag_of(o.dict.ptr());
    }
    return true;
  }

  // The state tensors of the call, as the first entries of call_: the wrappers of unchanged ones
  // stay where they are (no reference count touched), the others are wrapped again.
  bool state_tensors(LazyContext& ctx) {
    std::vector<torch_bridge::TensorSnapshot>& now = scratch_;
    now.resize(slots_.size());
    bridge_->snapshot(impls_.data(), impls_.size(), now.data());
    call_.tensors.resize(slots_.size());
    for (size_t i = 0; i < slots_.size(); ++i) {
      Tensor& wrapper = call_.tensors[i];
      if (!now[i].readable) return false;
      if (!wrapper.defined() || !torch_bridge::same_snapshot(now[i], seen_[i])) {
        std::optional<Tensor> w = wrap_torch(slots_[i].tensor.ptr(), ctx);
        if (!w) return false;
        wrapper = std::move(*w);
        seen_[i] = now[i];
      }
    }
    return true;
  }

  // A zero-copy tensor of `ctx` over a state tensor, through tracecache.from_torch; nullopt if
  // that fails (the Python path then reports why).
  std::optional<Tensor> wrap_torch(PyObject* t, LazyContext& ctx) const {
    PyObject* w = PyObject_CallOneArg(from_torch_.ptr(), t);
    if (!w) {
      PyErr_Clear();
      return std::nullopt;
    }
    py::object wrapped = py::reinterpret_steal<py::object>(w);
    if (!py::isinstance<PyTensor>(wrapped)) return std::nullopt;
    const PyTensor& p = wrapped.cast<const PyTensor&>();
    if (!p.tensor.defined() || &p.tensor.context() != &ctx) return std::nullopt;
    return p.tensor;
  }

  // A call's tensor as a tensor of `ctx` viewing its memory (no copy; the buffer holds the torch
  // tensor alive); nullopt for anything the bridge cannot view (the Python path copies).
  std::optional<Tensor> input_tensor(PyObject* t, LazyContext& ctx) const {
    torch_bridge::TensorView v;
    if (!bridge_->view(t, &v)) return std::nullopt;
    const std::span<const int64_t> dims(v.sizes, static_cast<size_t>(std::clamp(v.rank, 0, kMaxRank)));
    if (v.rank > kMaxRank || !checked_numel(dims).is_ok()) return std::nullopt;
    const Shape shape{IntList(dims)};
    alignas(64) static std::byte empty[64];  // a view needs an address, even of no bytes
    std::byte* data = shape.numel() == 0 ? empty : static_cast<std::byte*>(v.data);
    Py_INCREF(t);
    return ctx.from_buffer(
        BufferRef(new HostBuffer(HostBuffer::view(static_cast<DType>(v.dtype), shape, data)), PythonOwner{t}));
  }

  // An output as a torch tensor over its host bytes when nothing else holds them (a fresh
  // result); else a read-only NumPy view underneath, as tensor.torch() makes.
  py::object torch_of(DataRef d) const {
    Result<BufferRef> b = d->read();
    if (!b.is_ok()) fail(b.status());
    const bool unique = d.use_count() == 1 && b->use_count() <= 2;
    d.reset();
    if (!unique) {
      const bool bf16 = (*b)->dtype() == DType::kBF16;
      py::object t = py::module_::import("tracecache").attr("_torch_of_array")(numpy_view(std::move(*b), false, bf16));
      return bf16 ? t.attr("view")(py::module_::import("torch").attr("bfloat16")) : t;
    }
    const HostBuffer& buffer = **b;
    std::vector<int64_t> sizes(buffer.shape().begin(), buffer.shape().end());
    void* data = const_cast<std::byte*>(buffer.bytes());
    auto* holder = new BufferRef(std::move(*b));
    PyObject* t = bridge_->wrap(data, static_cast<int32_t>(buffer.dtype()), sizes.data(),
                                static_cast<int32_t>(sizes.size()), [](void* p) { delete static_cast<BufferRef*>(p); },
                                holder);
    if (!t) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(t);
  }

  py::object function_;
  std::vector<Module> modules_;
  std::vector<Owner> owners_;
  std::vector<Slot> slots_;
  std::vector<const void*> impls_;  // per slot: its tensor's TensorImpl (bridge impl_of), held through slot.tensor
  CallArgs call_;  // the state tensors' wrappers (defined: wraps the slot's tensor as seen_ says), then a call's own
  std::vector<torch_bridge::TensorSnapshot> seen_;    // per slot: what its wrapper wraps
  std::vector<torch_bridge::TensorSnapshot> scratch_;  // per slot: this call's snapshot
  std::unordered_map<std::string, Structure> structures_;
  py::object last_structure_ = py::none();
  bool last_was_fast_ = false;
  size_t num_inputs_;
  py::object from_torch_;
  py::object bridge_object_;  // keeps the capsule (and its module) alive
  const torch_bridge::Api* bridge_ = nullptr;
  py::str training_name_;
};

// ---- settings, counters, metrics, audit -----------------------------------------------------

py::dict settings_dict(const PySession& s) {
  py::dict d;
  d["mode"] = s.settings.mode;
  d["backend"] = s.settings.backend;
  d["db"] = s.settings.db.empty() ? py::object(py::none()) : py::object(py::str(s.settings.db));
  d["no_cache"] = s.settings.no_cache;
  d["threads"] = s.settings.threads == 0 ? py::object(py::none()) : py::object(py::int_(s.settings.threads));
  d["remote"] = s.settings.remote.empty() ? py::object(py::none()) : py::object(py::str(s.settings.remote));
  d["remote_mode"] = s.settings.remote_mode;
  return d;
}

// The database audit() and report() read: `db`, else the session's, else the default path.
// REQUIRES: PackageLock held.
std::string audit_db_path(const std::optional<std::string>& db_flag) {
  if (db_flag) return store::resolve_cache_path(*db_flag, {});
  if (const std::shared_ptr<PySession>& s = current_session(); s->db) return s->db->path();
  const char* v = std::getenv("TRACECACHE_DB");
  const char* x = std::getenv("XDG_CACHE_HOME");
  const char* h = std::getenv("HOME");
  return store::resolve_cache_path("", {v ? v : "", x ? x : "", h ? h : ""});
}

// tracecache.audit(): `tracecache audit --json`'s document (audit::audit_json, the same builder)
// as Python objects; filters as the CLI's.
py::object audit_objects(const std::optional<std::string>& db_flag, const std::string& program,
                         const std::string& function, const std::string& kind, const std::string& since,
                         const std::string& graph) {
  PackageLock lock;
  const std::string path = audit_db_path(db_flag);
  audit::AuditOptions options;
  options.db_path = path;
  options.program = program;
  options.function = function;
  options.kind = kind;
  options.since = since;
  options.graph = graph;
  std::string document;
  int64_t malformed = 0;
  {
    py::gil_scoped_release release;
    PyCompiledFunction::flush_all();
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      fail(not_found(fmt::format("no cache database at '{}' (run a program first, or pass db=PATH)", path)));
    }
    document = audit::audit_json(options, &malformed).value_or_throw();
  }
  if (malformed > 0) {
    const std::string message = fmt::format("{} malformed audit rows skipped (damaged graph keys)", malformed);
    if (PyErr_WarnEx(PyExc_RuntimeWarning, message.c_str(), 1) != 0) throw py::error_already_set();
  }
  return py::module_::import("json").attr("loads")(document);
}

// tracecache.Error: what every failing call raises (a Status's message).
void bind_errors(py::module_& m) {
  static py::exception<Error> error(m, "Error", PyExc_RuntimeError);
  error_type() = error.ptr();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      error(e.what());
    }
  });

}

// The lazy Tensor class.
void bind_tensor(py::module_& m) {
  py::class_<PyTensor, std::shared_ptr<PyTensor>>(m, "Tensor", "A lazy tracecache tensor (docs/python.md).")
      .def_property_readonly("shape", [](const PyTensor& t) {
        PackageLock lock;
        const Shape& s = get(t).shape();
        py::tuple out(static_cast<size_t>(s.rank()));
        for (int i = 0; i < s.rank(); ++i) out[static_cast<size_t>(i)] = s[i];
        return out;
      })
      .def_property_readonly("_peek_shape", [](const PyTensor& t) {  // the shape, not noted as read
        PackageLock lock;
        const Shape& s = get(t).peek_shape();
        py::tuple out(static_cast<size_t>(s.rank()));
        for (int i = 0; i < s.rank(); ++i) out[static_cast<size_t>(i)] = s[i];
        return out;
      })
      .def_property_readonly("dtype", [](const PyTensor& t) { return std::string(dtype_name(get(t).dtype())); })
      .def_property_readonly("requires_grad", [](const PyTensor& t) { return get(t).requires_grad(); })
      .def_property_readonly("is_materialized", [](const PyTensor& t) { return get(t).is_materialized(); })
      .def("requires_grad_", [](std::shared_ptr<PyTensor> t, bool on) {
        PackageLock lock;
        Tensor x = get(*t);
        x.set_requires_grad(on);
        return t;
      }, py::arg("requires_grad") = true)
      .def("item", [](const PyTensor& t) {
        PackageLock lock;
        const Tensor& x = get(t);
        const DType dtype = x.dtype();
        double v;
        {
          py::gil_scoped_release release;
          v = x.item();
        }
        if (t.session) report_new_warnings(*t.session);
        if (dtype == DType::kBool) return py::object(py::bool_(v != 0));
        if (is_integral(dtype)) return py::object(py::int_(static_cast<int64_t>(v)));
        return py::object(py::float_(v));
      })
      .def("numpy", [](const PyTensor& t) { return to_numpy(t, false); })
      .def("_numpy_bits", [](const PyTensor& t) { return to_numpy(t, true); },
           "As numpy(), but a bf16 tensor comes as int16 holding its bit patterns.")
      .def("__repr__", &repr);

}

// Ops, steps, gradients and host ops: what programs call.
void bind_ops(py::module_& m) {
  m.def("_from_numpy_exact", &from_numpy_exact, py::arg("array"), py::arg("bf16_bits") = false);
  m.def("op", &apply_op, "Applies registry op `name` to `inputs` with attributes by their registry names.");
  m.def("op_names", [] {
    std::vector<std::string> names;
    for (const OpInfo& o : all_ops()) {
      if (o.kind != OpKind::kParameter) names.emplace_back(o.name);
    }
    return names;
  });
  m.def("_op_attrs", [](const std::string& name) {
    const OpInfo* info = find_callable_op(name);
    if (!info) fail(invalid_argument(unknown_op_message(name)));
    std::vector<std::string> names;
    for (const AttrSpec& a : info->attrs) names.emplace_back(a.name);
    return names;
  });
  m.def("mark_step", [] {
    PackageLock lock;
    LazyContext& ctx = current_context();
    {
      py::gil_scoped_release release;
      ctx.mark_step();
    }
    if (!current_trace()) report_new_warnings(*current_session());
  });
  m.def("warnings", [] {
    PackageLock lock;
    Runtime* runtime = current_session()->session->runtime();
    std::vector<std::string> out;
    if (!current_session()->cache_warning.empty()) out.push_back(current_session()->cache_warning);
    if (runtime) out.insert(out.end(), runtime->warnings().begin(), runtime->warnings().end());
    return out;
  }, "The current session's distinct warnings so far, as the CLI prints them at the end of a run.");
  m.def("grad", &grad_of);
  m.def("_host_op", &host_op, py::arg("payload"), py::arg("inputs"), py::arg("description"));
  m.def("_set_grad_enabled", [](bool on) {
    PackageLock lock;
    return current_context().set_grad_enabled(on);
  });
}

// The session: configure(), its settings, counters, timers and warnings.
void bind_session(py::module_& m) {
  m.def("configure", [](const std::string& mode, const std::string& backend, const std::optional<std::string>& db,
                        bool no_cache, const std::optional<int>& threads, const std::optional<std::string>& remote,
                        const std::string& remote_mode, const std::optional<int>& remote_timeout_ms,
                        const std::optional<int64_t>& remote_ttl, const std::optional<double>& remote_backoff) {
    PackageLock lock;
    if (threads && *threads < 1) throw py::value_error(fmt::format("threads must be at least 1, not {}", *threads));
    std::shared_ptr<PySession> s;
    {
      py::gil_scoped_release release;
      s = make_session({.mode = mode, .backend = backend, .db = db.value_or(""), .no_cache = no_cache,
                        .threads = threads.value_or(0), .remote = remote.value_or(""), .remote_mode = remote_mode,
                        .remote_timeout_ms = remote_timeout_ms.value_or(RemoteSetup{}.timeout_ms),
                        .remote_ttl_s = remote_ttl.value_or(RemoteSetup{}.ttl_s),
                        .remote_backoff_s = remote_backoff.value_or(RemoteSetup{}.backoff_s)})
              .value_or_throw();
    }
    // Level 2: the caller of tracecache.configure, not the package's wrapper.
    s->cache_warning_reported = true;
    if (!s->cache_warning.empty() && PyErr_WarnEx(PyExc_RuntimeWarning, s->cache_warning.c_str(), 2) != 0) {
      throw py::error_already_set();
    }
    set_current_session(std::move(s));
  }, py::kw_only(), py::arg("mode") = "lazy", py::arg("backend") = "cpu", py::arg("db") = py::none(),
     py::arg("no_cache") = false, py::arg("threads") = py::none(), py::arg("remote") = py::none(),
     py::arg("remote_mode") = "read-write", py::arg("remote_timeout_ms") = py::none(),
     py::arg("remote_ttl") = py::none(), py::arg("remote_backoff") = py::none());
  m.def("_session_token", [] {  // identifies the current session (configure() makes a new one)
    PackageLock lock;
    return current_session()->serial;
  });
  m.def("settings", [] {
    PackageLock lock;
    return settings_dict(*current_session());
  });
  m.def("counters", [] {
    PackageLock lock;
    py::dict d;
    for (const auto& [name, value] : run_counters(current_session()->metrics)) d[py::str(name)] = value;
    return d;
  });
  m.def("timers", [] {  // run --json's timers_ms: per timer count, total, p50, p90, max (ms)
    PackageLock lock;
    const Metrics& metrics = current_session()->metrics;
    py::dict d;
    for (const std::string& name : metrics.timer_names()) {
      const TimerStats t = metrics.timer(name);
      py::dict s;
      s["count"] = t.count;
      s["total"] = t.total_ms;
      s["p50"] = t.p50_ms;
      s["p90"] = t.p90_ms;
      s["max"] = t.max_ms;
      d[py::str(name)] = s;
    }
    return d;
  });
  m.def("metrics_report", [] {
    PackageLock lock;
    return current_session()->metrics.report();
  });
}

// The audit, the report and flushing what the process has not written yet.
void bind_audit(py::module_& m) {
  m.def("audit", &audit_objects, py::arg("db") = py::none(), py::arg("program") = "", py::arg("function") = "",
        py::arg("kind") = "", py::arg("since") = "", py::arg("graph") = "");
  m.def("_shutdown", [] {  // at exit (atexit; also after KeyboardInterrupt): counts first
    PackageLock lock;
    {
      py::gil_scoped_release release;
      PyCompiledFunction::flush_all();
    }
    reset_current_session();
  });
  m.def("flush", [] {
    PackageLock lock;
    py::gil_scoped_release release;
    PyCompiledFunction::flush_all();
  }, "Writes this process's pending hit counts and events (compiled functions' replays too) to the cache.");
  m.def("report", [](const std::string& output, const std::optional<std::string>& db, const std::string& program,
                     const std::string& function, const std::string& since) {
    PackageLock lock;
    audit::ReportOptions options;
    options.output = output;
    options.db_path = audit_db_path(db);
    options.program = program;
    options.function = function;
    options.since = since;
    py::gil_scoped_release release;
    PyCompiledFunction::flush_all();
    return audit::write_report(options).value_or_throw();
  }, py::arg("output"), py::arg("db") = py::none(), py::arg("program") = "", py::arg("function") = "",
     py::arg("since") = "", "`tracecache report -o OUTPUT`: the audit as one HTML page; returns its size in bytes.");

}

// Compiled functions (tracecache.compile) and tracecache.torch's per-call fast path.
void bind_compiled_functions(py::module_& m) {
  m.def("_manual_seed", [](int64_t seed) { rng_state() = RngState{seed, 0}; }, py::arg("seed"),
        "tracecache.manual_seed's core: the seed, and the next draw's offset back to 0.");
  m.def("_next_seed", [] {
    const BufferRef b = next_seed_buffer();
    py::array_t<int64_t> out(2);
    std::memcpy(out.mutable_data(), b->bytes(), 2 * sizeof(int64_t));
    return out;
  }, "tracecache.next_seed's core: the (seed, offset) pair of the next draw, advancing the offset.");
  py::class_<TorchFastPath>(m, "_TorchFastPath", "tracecache.torch's per-call path of a compiled module.")
      .def(py::init<py::object, const py::list&, const py::list&, size_t, py::object, py::object>(),
           py::arg("function"), py::arg("modules"), py::arg("slots"), py::arg("num_inputs"), py::arg("from_torch"),
           py::arg("bridge"))
      .def("learn", &TorchFastPath::learn, py::arg("note"), py::arg("structure"), py::arg("count"), py::arg("single"))
      .def("call", [](TorchFastPath& self, const py::args& inputs) {
        std::vector<PyObject*> objects;
        for (py::handle h : inputs) objects.push_back(h.ptr());
        return self.call(objects.data(), objects.size());
      })
      .def("caller", [](py::object self) { return TorchFastPath::caller(std::move(self)); },
           "call(*inputs) as a builtin function that skips pybind11's dispatch (holds the path alive)")
      .def("last_structure", &TorchFastPath::last_structure)
      .def("clear_last", &TorchFastPath::clear_last);

  py::class_<PyCompiledFunction>(m, "_CompiledFunction", "A function traced once with guards (replay/engine/compiled_function.h).")
      .def(py::init([](py::object fn, std::string name, std::string version,
                       std::vector<std::pair<size_t, int>> dynamic_dims, std::vector<size_t> dynamic_scalars,
                       std::vector<std::pair<uint32_t, size_t>> updates, bool automatic_dynamic, int recompile_limit,
                       std::vector<std::string> arg_names, py::object host_op, std::string program) {
             if (recompile_limit < 0) throw py::value_error("recompile_limit must be at least 0");
             if (!host_op.is_none() && !PyCallable_Check(host_op.ptr())) throw py::type_error("host_op must be callable");
             return std::make_unique<PyCompiledFunction>(CompileSpec{
                 std::move(fn), std::move(name), std::move(version), std::move(dynamic_dims),
                 std::move(dynamic_scalars), std::move(updates), automatic_dynamic, recompile_limit,
                 std::move(arg_names), std::move(host_op), std::move(program), {}});
           }),
           py::arg("fn"), py::arg("name"), py::arg("version"), py::arg("dynamic_dims"), py::arg("dynamic_scalars"),
           py::arg("updates"), py::arg("automatic_dynamic"), py::arg("recompile_limit"), py::arg("arg_names"),
           py::arg("host_op") = py::none(), py::arg("program") = "")
      .def("_call", &PyCompiledFunction::call)
      .def("stats", &PyCompiledFunction::stats)
      .def("recompile_reasons", &PyCompiledFunction::recompile_reasons)
      .def("flush", &PyCompiledFunction::flush)
      .def("_mark_dim", &PyCompiledFunction::mark_dim, py::arg("position"), py::arg("dim"), py::arg("dynamic"))
      .def("_discard_last_entry", &PyCompiledFunction::discard_last_entry, py::arg("why"))
      .def("_set_note", &PyCompiledFunction::set_note, py::arg("note"))
      .def_property_readonly("_last_note", &PyCompiledFunction::last_note)
      .def_property_readonly("name", &PyCompiledFunction::name)
      .def_property_readonly("version", &PyCompiledFunction::version);
}

}  // namespace
}  // namespace tracecache::python

PYBIND11_MODULE(_tracecache, m) {
  using namespace tracecache::python;
  m.doc() = "tracecache's C++ core; import the package `tracecache` instead (docs/python.md).";
  bind_errors(m);
  bind_tensor(m);
  bind_ops(m);
  bind_session(m);
  bind_audit(m);
  bind_compiled_functions(m);
}
