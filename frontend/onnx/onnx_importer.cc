#include "frontend/onnx/onnx_importer.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <climits>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>

#include <fmt/format.h>
#include <google/protobuf/io/coded_stream.h>
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include "capture/ops/ops.h"
#include "frontend/files/input_file.h"
#include "frontend/files/npy.h"
#include "frontend/files/safetensors.h"
#include "frontend/onnx/onnx_tensor.h"
#include "frontend/program/op_call.h"

namespace tracecache::onnx_import {

namespace {

namespace fs = std::filesystem;
using ::onnx::AttributeProto;
using ::onnx::NodeProto;
using ::onnx::TensorProto;

constexpr int64_t kMinOpset = 13, kMaxOpset = 17;
// Values computed at import time (shape arithmetic, constants) up to this many elements are
// kept as values; a larger result is left to the program as an op.
constexpr int64_t kFoldLimit = int64_t{1} << 16;

// An error that ends the import; import_onnx turns it into its Status.
struct ImportFailure {
  Status status;
  std::string reason;  // for kUnsupported: the short reason
};

[[noreturn]] void fail(Status status, std::string reason = {}) { throw ImportFailure{std::move(status), std::move(reason)}; }
[[noreturn]] void fail_unsupported(std::string reason, std::string message) {
  fail(unsupported(std::move(message)), std::move(reason));
}
[[noreturn]] void fail_invalid(std::string message) { fail(invalid_argument(std::move(message))); }

// A value of the ONNX graph: a program tensor, or a value known at import time, or both.
struct Value {
  TensorType type;
  std::shared_ptr<const HostBuffer> known;  // set: its value at import time
  bool weight = false;  // an initializer holding weights: never folded into a computed value
  std::string prog;     // its name in the program, once it is there
  std::string label;    // the safetensors name it gets if it becomes a param
};
using V = std::shared_ptr<Value>;

// An op operand: a value or a number (a scalar constant of the program, as `mul(x, 0.5)`).
struct Arg {
  Arg(V value) : v(std::move(value)) {}  // NOLINT: implicit by design
  Arg(double n) : number(n), is_number(true) {}  // NOLINT
  V v;
  double number = 0;
  bool is_number = false;
};

using Attrs = std::vector<std::pair<std::string_view, AttrValue>>;

AttrValue ints(const std::vector<int64_t>& v) {
  if (v.size() > static_cast<size_t>(kMaxRank)) {
    fail_unsupported("rank above 8", fmt::format("a list of {} entries (tracecache's limit is {})", v.size(), kMaxRank));
  }
  return AttrValue::of_ints(IntList(std::span<const int64_t>(v)));
}
AttrValue i(int64_t v) { return AttrValue::of_int(v); }
AttrValue f(double v) { return AttrValue::of_float(v); }
AttrValue b(bool v) { return AttrValue::of_bool(v); }

std::vector<int64_t> dims_of(const Shape& s) { return {s.begin(), s.end()}; }

Literal number_literal(double v) {
  Literal l;
  if (std::nearbyint(v) == v && std::fabs(v) < 9007199254740992.0) {
    l.kind = Literal::Kind::kInt;
    l.i = static_cast<int64_t>(v);
  } else {
    l.kind = Literal::Kind::kFloat;
    l.f = v;
  }
  return l;
}

Literal attr_literal(const AttrValue& a) {
  Literal l;
  switch (a.kind) {
    case AttrKind::kInt: l.kind = Literal::Kind::kInt; l.i = a.i; break;
    case AttrKind::kFloat: l.kind = Literal::Kind::kFloat; l.f = a.f; break;
    case AttrKind::kBool: l.kind = Literal::Kind::kBool; l.i = a.i; break;
    case AttrKind::kDType: l.kind = Literal::Kind::kName; l.name = dtype_name(a.dtype); break;
    case AttrKind::kInts:
      l.kind = Literal::Kind::kList;
      for (int64_t x : a.ints) {
        Literal item;
        item.i = x;
        l.items.push_back(item);
      }
      break;
  }
  return l;
}

void fill(HostBuffer& buf, double v) {
  dispatch_dtype(buf.dtype(), [&]<typename T>() {
    for (T& x : buf.span<T>()) x = static_cast<T>(v);
  });
}

// The words a trace program reserves (docs/trace-format.md): a tensor may not be called so.
bool reserved_word(std::string_view w) {
  static constexpr std::string_view kWords[] = {"tracecache", "steps", "dim", "input", "param", "output", "true",
                                                "false", "inf", "nan", "bool", "i32", "i64", "f32", "update", "grad"};
  return std::find(std::begin(kWords), std::end(kWords), w) != std::end(kWords);
}

std::vector<int64_t> broadcast_dims(std::vector<int64_t> a, std::vector<int64_t> b, std::string_view what) {
  if (a.size() < b.size()) std::swap(a, b);
  const size_t off = a.size() - b.size();
  for (size_t k = 0; k < b.size(); ++k) {
    int64_t& x = a[off + k];
    const int64_t y = b[k];
    if (x == y || y == 1) continue;
    if (x == 1) { x = y; continue; }
    fail_invalid(fmt::format("{}: shapes [{}] and [{}] do not broadcast", what, fmt::join(a, ", "), fmt::join(b, ", ")));
  }
  return a;
}

class Importer;
using Handler = void (Importer::*)();

struct OpRow {
  std::string_view onnx;
  std::string_view lowering;
  Handler handler;
  OpKind kind = OpKind::kCount;  // the registry op of the generic handlers
};
std::span<const OpRow> op_rows();

class Importer {
 public:
  Importer(const ::onnx::ModelProto& model, std::string name, std::string model_dir, const ImportOptions& options)
      : model_(model), name_(std::move(name)), model_dir_(std::move(model_dir)), options_(options) {}

  ImportedModel run();

  // ---- op handlers (op_rows() lists them) ----
  void unary();        // one registry op on input 0
  void binary();       // one registry op on inputs 0 and 1
  void variadic();     // a registry binary op folded over every input
  void identity();
  void constant();
  void shape();
  void size();
  void constant_of_shape();
  void range();
  void cast();
  void cast_like();
  void div();
  void pow();
  void mod();
  void not_();
  void and_or_xor();
  void less_or_equal();
  void mean_n();
  void reciprocal();
  void is_nan();
  void is_inf();
  void sign();
  void softplus();
  void softsign();
  void elu();
  void selu();
  void celu();
  void leaky_relu();
  void prelu();
  void thresholded_relu();
  void hard_sigmoid();
  void mish();
  void where();
  void matmul();
  void gemm();
  void reduce();
  void arg_extreme();
  void reshape();
  void flatten();
  void squeeze();
  void unsqueeze();
  void transpose();
  void concat();
  void slice();
  void split();
  void expand();
  void tile();
  void pad();
  void gather();
  void gather_elements();
  void gather_nd();
  void scatter_elements();
  void depth_to_space();
  void space_to_depth();
  void conv();
  void conv_transpose();
  void max_pool();
  void average_pool();
  void global_pool();
  void batch_norm();
  void instance_norm();
  void layer_norm();
  void softmax();
  void hardmax();
  void clip();
  void resize();
  void topk();
  void dropout();
  void trilu();
  void eye_like();

 private:
  // ---- values and the program ----
  // Records `kind` on `args`, or computes it now when every arg is a known non-weight value
  // (and `fold`).
  V op(OpKind kind, std::vector<Arg> args, const Attrs& attrs = {}, bool fold = true);
  V known(HostBuffer buf, std::string label = {});
  std::string materialize(const V& v);
  std::string unique_name(std::string_view base);
  std::string label_for_node();

  // ---- the node being lowered ----
  std::string where_() const;
  [[noreturn]] void node_unsupported(std::string what);
  // An input whose value the lowering needs (a shape, axes, pads) is computed from input data.
  [[noreturn]] void needs_constant(std::string_view input);
  bool has_in(int k) const { return k < node_->input_size() && !node_->input(k).empty(); }
  V in(int k);
  bool out_used(int k) const { return k < node_->output_size() && !node_->output(k).empty(); }
  void out(int k, V v);
  const AttributeProto* attr(std::string_view name);
  int64_t attr_int(std::string_view name, int64_t def);
  float attr_float(std::string_view name, float def);
  std::string attr_string(std::string_view name, std::string def);
  std::optional<std::vector<int64_t>> attr_ints(std::string_view name);
  std::vector<int64_t> ints_of(const V& v, std::string_view what);
  double scalar_of(const V& v, std::string_view what);
  int64_t axis_of(int64_t axis, int rank, std::string_view what = "axis");
  void require_float(const V& v, std::string_view what);

  // ---- lowering helpers ----
  V reshape_to(const V& x, const std::vector<int64_t>& dims);
  V cast_to(const V& x, DType dtype);
  V pad2d(const V& x, int64_t top, int64_t bottom, int64_t left, int64_t right, double value);
  V normalize_index(const V& idx, int64_t dim);
  V reduce_with(OpKind kind, const V& x, const std::vector<int64_t>& axes, bool keepdim);
  // i64 [start, end) by step: folded when small, else an arange op (nothing large is allocated
  // at import time).
  V arange(int64_t start, int64_t end, int64_t step);
  // i64 [rows, cols]: column index minus row index.
  V column_minus_row(int64_t rows, int64_t cols);
  // Conv and pool geometry: pads {top, left, bottom, right} from pads/auto_pad.
  std::array<int64_t, 4> spatial_pads(const Shape& x, const std::array<int64_t, 2>& kernel_extent,
                                      const std::array<int64_t, 2>& stride);
  std::array<int64_t, 2> pair_attr(std::string_view name, int64_t def);
  void require_rank4(const V& x, std::string_view what);

  void declare_inputs();
  // The table row of `node`'s op; kUnsupported naming node_ for an op it does not have.
  const OpRow* find_row(const NodeProto& node);
  void lower_node(int index, const NodeProto& node);
  void rename_outputs(size_t first_op);

  const ::onnx::ModelProto& model_;
  std::string name_;
  std::string model_dir_;
  const ImportOptions& options_;
  ImportedModel result_;
  std::unordered_map<std::string, V> values_;
  std::unordered_map<std::string, const TensorProto*> initializers_;
  std::set<std::string> names_;          // program names taken
  std::set<std::string> param_labels_;   // safetensors names taken
  std::unordered_map<std::string, size_t> defined_at_;  // op result name -> index in program.ops
  int temp_counter_ = 0;
  int label_counter_ = 0;
  const NodeProto* node_ = nullptr;
  int node_index_ = -1;
  const OpRow* row_ = nullptr;
  std::set<std::string> attrs_read_;
};

// ---- values ------------------------------------------------------------------------------

// `base` as a trace-program identifier: other characters become '_', a leading digit gets a 'v',
// a reserved word a trailing '_'.
std::string identifier(std::string_view base) {
  std::string s;
  for (char c : base) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  while (!s.empty() && s.front() == '_' && s.size() > 1 && s[1] == '_') s.erase(0, 1);
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) s = "v" + s;
  if (reserved_word(s)) s += "_";
  return s;
}

std::string Importer::unique_name(std::string_view base) {
  const std::string s = identifier(base);
  std::string name = s;
  for (int k = 1; names_.count(name); ++k) name = fmt::format("{}_{}", s, k);
  names_.insert(name);
  return name;
}

std::string Importer::label_for_node() {
  const std::string base = node_ && node_->output_size() > 0 ? node_->output(0) : "const";
  return fmt::format("{}:{}", base, ++label_counter_);
}

V Importer::known(HostBuffer buf, std::string label) {
  auto v = std::make_shared<Value>();
  v->type = {buf.dtype(), buf.shape()};
  v->known = std::make_shared<const HostBuffer>(std::move(buf));
  v->label = label.empty() ? label_for_node() : std::move(label);
  return v;
}

std::string Importer::materialize(const V& v) {
  if (!v->prog.empty()) return v->prog;
  std::string label = v->label;
  for (int k = 1; param_labels_.count(label); ++k) label = fmt::format("{}#{}", v->label, k);
  param_labels_.insert(label);
  TensorDecl decl;
  decl.role = TensorDecl::Role::kParam;
  decl.name = unique_name(label);
  decl.dtype = v->type.dtype;
  for (int64_t d : v->type.shape) decl.dims.push_back({.name = {}, .value = d, .pos = {}});
  decl.init.kind = Generator::Kind::kSafetensors;
  decl.init.path = options_.weights_path;
  decl.init.tensor = label;
  result_.program.tensors.push_back(decl);
  result_.params.emplace_back(label, v->known->clone());
  v->prog = decl.name;
  return v->prog;
}

V Importer::op(OpKind kind, std::vector<Arg> args, const Attrs& attrs, bool fold) {
  const OpInfo& info = op_info(kind);
  std::vector<AttrValue> av;
  for (const AttrSpec& spec : info.attrs) av.push_back(spec.default_value);
  for (const auto& [attr_name, value] : attrs) {
    const int k = info.attr_index(attr_name);
    if (k < 0) fail(internal_error(fmt::format("importer: op '{}' has no attribute '{}'", info.name, attr_name)));
    av[static_cast<size_t>(k)] = value;
  }
  std::optional<DType> other;
  for (size_t k = kind == OpKind::kWhere ? 1 : 0; k < args.size() && !other; ++k) {
    if (!args[k].is_number) other = args[k].v->type.dtype;
  }
  std::vector<TensorType> types;
  bool foldable = true;
  int64_t elements = 0;
  for (const Arg& a : args) {
    if (a.is_number) {
      types.push_back({number_operand_dtype(other, a.number), Shape{}});
      continue;
    }
    types.push_back(a.v->type);
    foldable = foldable && a.v->known && !a.v->weight;
    elements += a.v->type.shape.numel();
  }
  Result<TensorType> out_type = infer_op(kind, types, av);
  if (!out_type.is_ok()) fail_invalid(out_type.status().message());
  const bool random = kind == OpKind::kUniform || kind == OpKind::kNormal || kind == OpKind::kDropoutMask;
  if (fold && foldable && !random && elements <= kFoldLimit && out_type->shape.numel() <= kFoldLimit) {
    std::vector<HostBuffer> scalars;
    scalars.reserve(args.size());
    std::vector<const HostBuffer*> ptrs;
    for (size_t k = 0; k < args.size(); ++k) {
      if (args[k].is_number) {
        scalars.emplace_back(types[k].dtype, Shape{});
        fill(scalars.back(), args[k].number);
        ptrs.push_back(&scalars.back());
      } else {
        ptrs.push_back(args[k].v->known.get());
      }
    }
    HostBuffer result(out_type->dtype, out_type->shape);
    info.reference(ptrs, av, result);
    return known(std::move(result));
  }
  OpStmt st;
  st.op = kind;
  for (const Arg& a : args) {
    if (a.is_number) {
      st.operands.push_back(number_literal(a.number));
    } else {
      Literal l;
      l.kind = Literal::Kind::kName;
      l.name = materialize(a.v);
      st.operands.push_back(l);
    }
  }
  for (size_t k = 0; k < info.attrs.size(); ++k) {
    const AttrSpec& spec = info.attrs[k];
    if (!spec.required && av[k] == spec.default_value) continue;
    st.attrs.push_back({.name = std::string(spec.name), .value = attr_literal(av[k]), .pos = {}});
  }
  st.result = unique_name(fmt::format("t{}", ++temp_counter_));
  defined_at_[st.result] = result_.program.ops.size();
  auto v = std::make_shared<Value>();
  v->type = *out_type;
  v->prog = st.result;
  v->label = label_for_node();
  result_.program.ops.push_back(std::move(st));
  return v;
}

// ---- the node being lowered ----------------------------------------------------------------

std::string Importer::where_() const {
  return fmt::format("{}: node '{}' (#{}, {})", name_, node_->name(), node_index_, node_->op_type());
}

void Importer::node_unsupported(std::string what) {
  fail_unsupported(fmt::format("{} {}", node_->op_type(), what), fmt::format("{}: {} is not supported", where_(), what));
}

void Importer::needs_constant(std::string_view input) {
  fail_unsupported(fmt::format("{} input '{}' from data", node_->op_type(), input),
                   fmt::format("{}: input '{}' is computed from the model's input data, but its value must be known "
                               "at import time (a constant, or computed from shapes only); if a graph input gives it, "
                               "pass that input's value with --const-input NAME=FILE.npy",
                               where_(), input));
}

V Importer::in(int k) {
  if (!has_in(k)) fail_invalid(fmt::format("{}: input {} is missing", where_(), k));
  auto it = values_.find(node_->input(k));
  if (it == values_.end()) {
    fail_invalid(fmt::format("{}: input '{}' is not defined before this node", where_(), node_->input(k)));
  }
  return it->second;
}

void Importer::out(int k, V v) {
  if (k < node_->output_size() && !node_->output(k).empty()) values_[node_->output(k)] = std::move(v);
}

const AttributeProto* Importer::attr(std::string_view name) {
  for (const AttributeProto& a : node_->attribute()) {
    if (a.name() == name) {
      attrs_read_.insert(a.name());
      return &a;
    }
  }
  return nullptr;
}

int64_t Importer::attr_int(std::string_view name, int64_t def) {
  const AttributeProto* a = attr(name);
  return a ? a->i() : def;
}
float Importer::attr_float(std::string_view name, float def) {
  const AttributeProto* a = attr(name);
  return a ? a->f() : def;
}
std::string Importer::attr_string(std::string_view name, std::string def) {
  const AttributeProto* a = attr(name);
  return a ? a->s() : def;
}
std::optional<std::vector<int64_t>> Importer::attr_ints(std::string_view name) {
  const AttributeProto* a = attr(name);
  if (!a) return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

std::vector<int64_t> Importer::ints_of(const V& v, std::string_view what) {
  if (!v->known) needs_constant(what);
  if (!is_integral(v->type.dtype)) fail_invalid(fmt::format("{}: input '{}' must be an integer tensor", where_(), what));
  if (v->type.dtype == DType::kI32) {
    std::span<const int32_t> i32 = v->known->span<int32_t>();
    return {i32.begin(), i32.end()};
  }
  std::span<const int64_t> i64 = v->known->span<int64_t>();
  return {i64.begin(), i64.end()};
}

double Importer::scalar_of(const V& v, std::string_view what) {
  if (!v->known) {
    needs_constant(what);
  }
  if (v->known->numel() != 1) fail_invalid(fmt::format("{}: input '{}' must hold one value", where_(), what));
  return v->known->element_as_double(0);
}

int64_t Importer::axis_of(int64_t axis, int rank, std::string_view what) {
  if (axis < -rank || axis >= rank) {
    fail_invalid(fmt::format("{}: {} {} is out of range for rank {}", where_(), what, axis, rank));
  }
  return axis < 0 ? axis + rank : axis;
}

void Importer::require_float(const V& v, std::string_view what) {
  if (v->type.dtype != DType::kF32) {
    fail_unsupported(fmt::format("{} dtype {}", node_->op_type(), dtype_name(v->type.dtype)),
                     fmt::format("{}: {} of dtype {} is not supported (float only)", where_(), what,
                                 dtype_name(v->type.dtype)));
  }
}

void Importer::require_rank4(const V& x, std::string_view what) {
  if (x->type.shape.rank() != 4) {
    fail_unsupported(fmt::format("{} rank {}", node_->op_type(), x->type.shape.rank()),
                     fmt::format("{}: {} of rank {} is not supported (only 2-D: [N, C, H, W])", where_(), what,
                                 x->type.shape.rank()));
  }
}

// ---- lowering helpers ----------------------------------------------------------------------

V Importer::reshape_to(const V& x, const std::vector<int64_t>& dims) {
  if (dims_of(x->type.shape) == dims) return x;
  return op(OpKind::kReshape, {x}, {{"shape", ints(dims)}});
}

V Importer::cast_to(const V& x, DType dtype) {
  if (x->type.dtype == dtype) return x;
  return op(OpKind::kCast, {x}, {{"dtype", AttrValue::of_dtype(dtype)}});
}

V Importer::pad2d(const V& x, int64_t top, int64_t bottom, int64_t left, int64_t right, double value) {
  if (top == 0 && bottom == 0 && left == 0 && right == 0) return x;
  return op(OpKind::kPad, {x}, {{"pads", ints({left, right, top, bottom})}, {"value", f(value)}});
}

V Importer::normalize_index(const V& idx, int64_t dim) {
  if (idx->known) {
    HostBuffer out = idx->known->clone();
    for (int64_t k = 0; k < out.numel(); ++k) {
      const double v = out.element_as_double(k);
      if (v < static_cast<double>(-dim) || v >= static_cast<double>(dim)) {
        fail_invalid(fmt::format("{}: index {} is out of range for a dim of size {}", where_(), v, dim));
      }
    }
    dispatch_dtype(out.dtype(), [&]<typename T>() {
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        for (T& v : out.span<T>()) if (v < 0) v = static_cast<T>(v + dim);
      }
    });
    return known(std::move(out), idx->label);
  }
  V negative = op(OpKind::kLt, {idx, 0.0});
  return op(OpKind::kWhere, {negative, op(OpKind::kAdd, {idx, static_cast<double>(dim)}), idx});
}

V Importer::reduce_with(OpKind kind, const V& x, const std::vector<int64_t>& axes, bool keepdim) {
  return op(kind, {x}, {{"axes", ints(axes)}, {"keepdim", b(keepdim)}});
}

V Importer::arange(int64_t start, int64_t end, int64_t step) {
  return op(OpKind::kArange, {}, {{"start", f(static_cast<double>(start))}, {"end", f(static_cast<double>(end))},
                                  {"step", f(static_cast<double>(step))}, {"dtype", AttrValue::of_dtype(DType::kI64)}});
}

V Importer::column_minus_row(int64_t rows, int64_t cols) {
  return op(OpKind::kSub, {arange(0, cols, 1), reshape_to(arange(0, rows, 1), {rows, 1})});
}

std::array<int64_t, 2> Importer::pair_attr(std::string_view name, int64_t def) {
  std::optional<std::vector<int64_t>> v = attr_ints(name);
  if (!v) return {def, def};
  if (v->size() != 2) fail_invalid(fmt::format("{}: attribute '{}' must have 2 entries (2-D), has {}", where_(), name, v->size()));
  return {(*v)[0], (*v)[1]};
}

std::array<int64_t, 4> Importer::spatial_pads(const Shape& x, const std::array<int64_t, 2>& extent,
                                              const std::array<int64_t, 2>& stride) {
  const std::string auto_pad = attr_string("auto_pad", "NOTSET");
  std::optional<std::vector<int64_t>> pads = attr_ints("pads");
  if (auto_pad == "NOTSET") {
    if (!pads) return {0, 0, 0, 0};
    if (pads->size() != 4) fail_invalid(fmt::format("{}: 'pads' must have 4 entries, has {}", where_(), pads->size()));
    for (int64_t p : *pads) {
      if (p < 0) fail_invalid(fmt::format("{}: negative pads [{}]", where_(), fmt::join(*pads, ", ")));
    }
    return {(*pads)[0], (*pads)[1], (*pads)[2], (*pads)[3]};
  }
  if (auto_pad == "VALID") return {0, 0, 0, 0};
  if (auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER") node_unsupported("auto_pad=" + auto_pad);
  std::array<int64_t, 4> out{};
  for (int a = 0; a < 2; ++a) {
    const int64_t in_size = x[2 + a];
    const int64_t o = (in_size + stride[static_cast<size_t>(a)] - 1) / stride[static_cast<size_t>(a)];
    const int64_t total = std::max<int64_t>(0, (o - 1) * stride[static_cast<size_t>(a)] + extent[static_cast<size_t>(a)] - in_size);
    const int64_t small = total / 2, large = total - small;
    out[static_cast<size_t>(a)] = auto_pad == "SAME_UPPER" ? small : large;
    out[static_cast<size_t>(a) + 2] = auto_pad == "SAME_UPPER" ? large : small;
  }
  return out;
}

// ---- handlers: elementwise ---------------------------------------------------------------------

void Importer::unary() { out(0, op(row_->kind, {in(0)})); }

void Importer::binary() { out(0, op(row_->kind, {in(0), in(1)})); }

void Importer::variadic() {
  V acc = in(0);
  for (int k = 1; k < node_->input_size(); ++k) acc = op(row_->kind, {acc, in(k)});
  out(0, acc);
}

void Importer::mean_n() {
  V acc = in(0);
  for (int k = 1; k < node_->input_size(); ++k) acc = op(OpKind::kAdd, {acc, in(k)});
  if (node_->input_size() > 1) acc = op(OpKind::kDiv, {acc, static_cast<double>(node_->input_size())});
  out(0, acc);
}

void Importer::identity() { out(0, in(0)); }

void Importer::dropout() {
  V x = in(0);
  attr_int("seed", 0);
  if (has_in(2) && scalar_of(in(2), "training_mode") != 0) node_unsupported("training_mode=true");
  if (out_used(1)) node_unsupported("the mask output");
  out(0, x);
}

void Importer::div() {
  V a = in(0), c = in(1);
  const bool integer = is_integral(a->type.dtype) && is_integral(c->type.dtype);
  out(0, op(integer ? OpKind::kTruncDiv : OpKind::kDiv, {a, c}));
}

void Importer::pow() {
  V a = in(0);
  out(0, cast_to(op(OpKind::kPow, {a, in(1)}), a->type.dtype));
}

void Importer::mod() {
  const bool use_fmod = attr_int("fmod", 0) != 0;
  out(0, op(use_fmod ? OpKind::kFmod : OpKind::kRemainder, {in(0), in(1)}));
}

void Importer::not_() { out(0, op(OpKind::kEq, {in(0), 0.0})); }

void Importer::and_or_xor() {
  V a = in(0), c = in(1);
  const std::string& t = node_->op_type();
  if (t == "And") out(0, op(OpKind::kMinimum, {a, c}));
  else if (t == "Or") out(0, op(OpKind::kMaximum, {a, c}));
  else out(0, op(OpKind::kEq, {op(OpKind::kEq, {a, c}), 0.0}));
}

void Importer::less_or_equal() {
  V a = in(0), c = in(1);
  const OpKind strict = node_->op_type() == "LessOrEqual" ? OpKind::kLt : OpKind::kGt;
  out(0, op(OpKind::kMaximum, {op(strict, {a, c}), op(OpKind::kEq, {a, c})}));
}

void Importer::reciprocal() { out(0, op(OpKind::kDiv, {1.0, in(0)})); }

void Importer::is_nan() { out(0, op(OpKind::kEq, {op(OpKind::kEq, {in(0), in(0)}), 0.0})); }

void Importer::is_inf() {
  V x = in(0);
  const bool pos = attr_int("detect_positive", 1) != 0, neg = attr_int("detect_negative", 1) != 0;
  V p = op(OpKind::kEq, {x, std::numeric_limits<double>::infinity()});
  V n = op(OpKind::kEq, {x, -std::numeric_limits<double>::infinity()});
  if (pos && neg) out(0, op(OpKind::kMaximum, {p, n}));
  else if (pos) out(0, p);
  else if (neg) out(0, n);
  else out(0, op(OpKind::kEq, {x, std::numeric_limits<double>::quiet_NaN()}));
}

void Importer::sign() {
  V x = in(0);
  const DType t = x->type.dtype;
  V s = op(OpKind::kSub, {cast_to(op(OpKind::kGt, {x, 0.0}), t), cast_to(op(OpKind::kLt, {x, 0.0}), t)});
  if (t == DType::kF32) s = op(OpKind::kWhere, {op(OpKind::kEq, {x, x}), s, x});
  out(0, s);
}

void Importer::softplus() { out(0, op(OpKind::kLog, {op(OpKind::kAdd, {op(OpKind::kExp, {in(0)}), 1.0})})); }

void Importer::softsign() { V x = in(0); out(0, op(OpKind::kDiv, {x, op(OpKind::kAdd, {op(OpKind::kAbs, {x}), 1.0})})); }

void Importer::elu() {
  V x = in(0);
  const double alpha = attr_float("alpha", 1.0f);
  V neg = op(OpKind::kMul, {op(OpKind::kSub, {op(OpKind::kExp, {x}), 1.0}), alpha});
  out(0, op(OpKind::kWhere, {op(OpKind::kGt, {x, 0.0}), x, neg}));
}

void Importer::selu() {
  V x = in(0);
  const double alpha = attr_float("alpha", 1.67326319217681884765625f);
  const double gamma = attr_float("gamma", 1.05070102214813232421875f);
  V neg = op(OpKind::kSub, {op(OpKind::kMul, {op(OpKind::kExp, {x}), alpha}), alpha});
  out(0, op(OpKind::kMul, {op(OpKind::kWhere, {op(OpKind::kGt, {x, 0.0}), x, neg}), gamma}));
}

void Importer::celu() {
  V x = in(0);
  const double alpha = attr_float("alpha", 1.0f);
  V neg = op(OpKind::kMul, {op(OpKind::kSub, {op(OpKind::kExp, {op(OpKind::kDiv, {x, alpha})}), 1.0}), alpha});
  out(0, op(OpKind::kAdd, {op(OpKind::kMaximum, {x, 0.0}), op(OpKind::kMinimum, {neg, 0.0})}));
}

void Importer::leaky_relu() {
  V x = in(0);
  const double alpha = attr_float("alpha", 0.01f);
  out(0, op(OpKind::kWhere, {op(OpKind::kLt, {x, 0.0}), op(OpKind::kMul, {x, alpha}), x}));
}

void Importer::prelu() {
  V x = in(0), slope = in(1);
  out(0, op(OpKind::kWhere, {op(OpKind::kLt, {x, 0.0}), op(OpKind::kMul, {x, slope}), x}));
}

void Importer::thresholded_relu() {
  V x = in(0);
  const double alpha = attr_float("alpha", 1.0f);
  out(0, op(OpKind::kWhere, {op(OpKind::kGt, {x, alpha}), x, 0.0}));
}

void Importer::hard_sigmoid() {
  V x = in(0);
  const double alpha = attr_float("alpha", 0.2f), beta = attr_float("beta", 0.5f);
  out(0, op(OpKind::kClamp, {op(OpKind::kAdd, {op(OpKind::kMul, {x, alpha}), beta})}, {{"min", f(0)}, {"max", f(1)}}));
}

void Importer::mish() {
  V x = in(0);
  V sp = op(OpKind::kLog, {op(OpKind::kAdd, {op(OpKind::kExp, {x}), 1.0})});
  out(0, op(OpKind::kMul, {x, op(OpKind::kTanh, {sp})}));
}

void Importer::where() { out(0, op(OpKind::kWhere, {in(0), in(1), in(2)})); }

void Importer::clip() {
  V x = in(0);
  std::optional<double> lo, hi;
  V lo_v = has_in(1) ? in(1) : nullptr, hi_v = has_in(2) ? in(2) : nullptr;
  const bool dynamic = (lo_v && !lo_v->known) || (hi_v && !hi_v->known);
  if (!dynamic) {
    if (lo_v) lo = scalar_of(lo_v, "min");
    if (hi_v) hi = scalar_of(hi_v, "max");
    const double low = lo.value_or(-std::numeric_limits<double>::infinity());
    const double high = hi.value_or(std::numeric_limits<double>::infinity());
    if (x->type.dtype != DType::kBool && !std::isnan(low) && !std::isnan(high) && low <= high) {
      out(0, lo || hi ? op(OpKind::kClamp, {x}, {{"min", f(low)}, {"max", f(high)}}) : x);
      return;
    }
  }
  // Bounds from data (or crossed bounds: ONNX gives max): min(max(x, lo), hi).
  V y = x;
  if (lo_v) y = op(OpKind::kMaximum, {y, lo_v});
  if (hi_v) y = op(OpKind::kMinimum, {y, hi_v});
  out(0, cast_to(y, x->type.dtype));
}

// ---- handlers: constants and shapes -----------------------------------------------------------

void Importer::constant() {
  static constexpr std::string_view kUnsupported[] = {"sparse_value", "value_string", "value_strings"};
  for (std::string_view n : kUnsupported) {
    if (attr(n)) node_unsupported("attribute " + std::string(n));
  }
  const std::string label = node_->output(0);
  if (const AttributeProto* a = attr("value")) {
    std::string reason;
    Result<HostBuffer> buf = tensor_to_buffer(a->t(), where_(), model_dir_, &reason);
    if (!buf.is_ok()) fail(buf.status(), reason.empty() ? "" : node_->op_type() + " " + reason);
    out(0, known(std::move(*buf), label));
  } else if (const AttributeProto* fa = attr("value_float")) {
    HostBuffer buf(DType::kF32, Shape{});
    buf.data<float>()[0] = fa->f();
    out(0, known(std::move(buf), label));
  } else if (const AttributeProto* fl = attr("value_floats")) {
    HostBuffer buf(DType::kF32, Shape{fl->floats_size()});
    for (int k = 0; k < fl->floats_size(); ++k) buf.data<float>()[k] = fl->floats(k);
    out(0, known(std::move(buf), label));
  } else if (const AttributeProto* ia = attr("value_int")) {
    HostBuffer buf(DType::kI64, Shape{});
    buf.data<int64_t>()[0] = ia->i();
    out(0, known(std::move(buf), label));
  } else if (const AttributeProto* il = attr("value_ints")) {
    HostBuffer buf(DType::kI64, Shape{il->ints_size()});
    for (int k = 0; k < il->ints_size(); ++k) buf.data<int64_t>()[k] = il->ints(k);
    out(0, known(std::move(buf), label));
  } else {
    fail_invalid(where_() + ": a Constant needs a value");
  }
}

void Importer::shape() {
  V x = in(0);
  const int r = x->type.shape.rank();
  int64_t start = attr_int("start", 0), end = attr_int("end", r);
  auto clampi = [r](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
  start = clampi(start);
  end = std::max(clampi(end), start);
  HostBuffer buf(DType::kI64, Shape{end - start});
  for (int64_t k = start; k < end; ++k) buf.data<int64_t>()[k - start] = x->type.shape[static_cast<int>(k)];
  out(0, known(std::move(buf)));
}

void Importer::size() {
  HostBuffer buf(DType::kI64, Shape{});
  buf.data<int64_t>()[0] = in(0)->type.shape.numel();
  out(0, known(std::move(buf)));
}

void Importer::constant_of_shape() {
  std::vector<int64_t> dims = ints_of(in(0), "input");
  HostBuffer value(DType::kF32, Shape{});
  if (const AttributeProto* a = attr("value")) {
    std::string reason;
    Result<HostBuffer> v = tensor_to_buffer(a->t(), where_(), model_dir_, &reason);
    if (!v.is_ok()) fail(v.status(), reason.empty() ? "" : node_->op_type() + " " + reason);
    if (v->numel() != 1) fail_invalid(where_() + ": 'value' must hold one element");
    value = std::move(*v);
  }
  const DType dtype = value.dtype();
  Result<int64_t> n = checked_numel(dims);
  if (!n.is_ok()) fail_invalid(where_() + ": " + n.status().message());
  if (*n <= kFoldLimit) {
    HostBuffer buf(dtype, Shape(IntList(std::span<const int64_t>(dims))));
    dispatch_dtype(dtype, [&]<typename T>() {
      const T x0 = value.data<T>()[0];  // exact, also an i64 beyond 2^53
      for (T& x : buf.span<T>()) x = x0;
    });
    out(0, known(std::move(buf)));
    return;
  }
  out(0, op(OpKind::kFull, {}, {{"shape", ints(dims)}, {"value", f(value.element_as_double(0))},
                                 {"dtype", AttrValue::of_dtype(dtype)}}));
}

void Importer::range() {
  V start_v = in(0), limit_v = in(1), delta_v = in(2);
  const double start = scalar_of(start_v, "start"), limit = scalar_of(limit_v, "limit"), delta = scalar_of(delta_v, "delta");
  if (delta == 0) fail_invalid(where_() + ": delta is 0");
  const double count = std::max(std::ceil((limit - start) / delta), 0.0);
  if (!(count <= static_cast<double>(kMaxElements))) fail_invalid(where_() + ": the range has too many elements");
  const DType dtype = start_v->type.dtype;
  if (count > static_cast<double>(kFoldLimit)) {
    out(0, op(OpKind::kArange, {}, {{"start", f(start)}, {"end", f(limit)}, {"step", f(delta)},
                                    {"dtype", AttrValue::of_dtype(dtype)}}));
    return;
  }
  HostBuffer buf(dtype, Shape{static_cast<int64_t>(count)});
  dispatch_dtype(dtype, [&]<typename T>() {
    T* p = buf.data<T>();
    if constexpr (std::is_same_v<T, float>) {
      for (int64_t k = 0; k < buf.numel(); ++k) p[k] = static_cast<float>(start + static_cast<double>(k) * delta);
    } else if constexpr (!std::is_same_v<T, bool>) {
      const auto s = static_cast<T>(start), d = static_cast<T>(delta);
      for (int64_t k = 0; k < buf.numel(); ++k) p[k] = static_cast<T>(s + static_cast<T>(k) * d);
    }
  });
  out(0, known(std::move(buf)));
}

void Importer::cast() {
  const int64_t to = attr_int("to", 0);
  attr_int("saturate", 1);
  std::optional<DType> dtype = dtype_from_onnx(static_cast<int32_t>(to));
  if (!dtype) {
    fail_unsupported("dtype " + onnx_type_name(static_cast<int32_t>(to)),
                     fmt::format("{}: a cast to {} is not supported (tracecache has float, int32, int64, bool)", where_(),
                                 onnx_type_name(static_cast<int32_t>(to))));
  }
  out(0, cast_to(in(0), *dtype));
}

void Importer::cast_like() { out(0, cast_to(in(0), in(1)->type.dtype)); }

void Importer::eye_like() {
  V x = in(0);
  if (x->type.shape.rank() != 2) fail_invalid(where_() + ": EyeLike needs a rank-2 input");
  DType dtype = x->type.dtype;
  if (const AttributeProto* a = attr("dtype")) {
    std::optional<DType> d = dtype_from_onnx(static_cast<int32_t>(a->i()));
    if (!d) node_unsupported("dtype " + onnx_type_name(static_cast<int32_t>(a->i())));
    dtype = *d;
  }
  const int64_t k = attr_int("k", 0);
  V diagonal = op(OpKind::kEq, {column_minus_row(x->type.shape[0], x->type.shape[1]), static_cast<double>(k)});
  out(0, cast_to(diagonal, dtype));
}

void Importer::trilu() {
  V x = in(0);
  const int r = x->type.shape.rank();
  if (r < 2) fail_invalid(where_() + ": Trilu needs rank >= 2");
  const int64_t k = has_in(1) ? static_cast<int64_t>(scalar_of(in(1), "k")) : 0;
  const bool upper = attr_int("upper", 1) != 0;
  V diff = column_minus_row(x->type.shape[r - 2], x->type.shape[r - 1]);
  V keep = upper ? op(OpKind::kGt, {diff, static_cast<double>(k) - 1}) : op(OpKind::kLt, {diff, static_cast<double>(k) + 1});
  out(0, op(OpKind::kWhere, {keep, x, 0.0}));
}

// ---- handlers: linear algebra and reductions ------------------------------------------------------

void Importer::matmul() { out(0, op(OpKind::kMatmul, {in(0), in(1)})); }

void Importer::gemm() {
  V a = in(0), w = in(1);
  const double alpha = attr_float("alpha", 1.0f), beta = attr_float("beta", 1.0f);
  const bool ta = attr_int("transA", 0) != 0, tb = attr_int("transB", 0) != 0;
  V c = has_in(2) ? in(2) : nullptr;
  if (a->type.shape.rank() != 2 || w->type.shape.rank() != 2) fail_invalid(where_() + ": Gemm needs rank-2 A and B");
  const int64_t n = w->type.shape[tb ? 0 : 1];
  if (!ta && tb && alpha == 1 && (!c || beta == 1) && a->type.dtype == DType::kF32 && w->type.dtype == DType::kF32 &&
      (!c || (c->type.dtype == DType::kF32 && dims_of(c->type.shape) == std::vector<int64_t>{n}))) {
    out(0, c ? op(OpKind::kLinear, {a, w, c}) : op(OpKind::kLinear, {a, w}));
    return;
  }
  if (ta) a = op(OpKind::kTranspose, {a}, {{"dim0", i(0)}, {"dim1", i(1)}});
  if (tb) w = op(OpKind::kTranspose, {w}, {{"dim0", i(0)}, {"dim1", i(1)}});
  V y = op(OpKind::kMatmul, {a, w});
  if (alpha != 1) y = op(OpKind::kMul, {y, alpha});
  if (c) y = op(OpKind::kAdd, {y, beta == 1 ? c : op(OpKind::kMul, {c, beta})});
  out(0, cast_to(y, in(0)->type.dtype));
}

void Importer::reduce() {
  V x = in(0);
  const int r = x->type.shape.rank();
  const bool keep = attr_int("keepdims", 1) != 0;
  const bool noop = attr_int("noop_with_empty_axes", 0) != 0;
  std::vector<int64_t> axes;
  if (node_->op_type() == "ReduceSum") {
    if (has_in(1)) axes = ints_of(in(1), "axes");
  } else if (std::optional<std::vector<int64_t>> a = attr_ints("axes")) {
    axes = *a;
  }
  if (axes.empty() && noop) {
    out(0, x);
    return;
  }
  for (int64_t& a : axes) a = axis_of(a, std::max(r, 1), "axis");
  if (r == 0) axes.clear();
  const std::string& t = node_->op_type();
  V y;
  if (t == "ReduceSum") y = reduce_with(OpKind::kSum, x, axes, keep);
  else if (t == "ReduceMean") y = reduce_with(OpKind::kMean, x, axes, keep);
  else if (t == "ReduceMax") y = reduce_with(OpKind::kMax, x, axes, keep);
  else if (t == "ReduceMin") y = reduce_with(OpKind::kMin, x, axes, keep);
  else if (t == "ReduceL1") y = reduce_with(OpKind::kSum, op(OpKind::kAbs, {x}), axes, keep);
  else if (t == "ReduceSumSquare") y = reduce_with(OpKind::kSum, op(OpKind::kMul, {x, x}), axes, keep);
  else if (t == "ReduceL2") y = op(OpKind::kSqrt, {reduce_with(OpKind::kSum, op(OpKind::kMul, {x, x}), axes, keep)});
  else if (t == "ReduceLogSum") y = op(OpKind::kLog, {reduce_with(OpKind::kSum, x, axes, keep)});
  else y = op(OpKind::kLog, {reduce_with(OpKind::kSum, op(OpKind::kExp, {x}), axes, keep)});  // ReduceLogSumExp
  out(0, cast_to(y, x->type.dtype));
}

void Importer::arg_extreme() {
  V x = in(0);
  const int64_t axis = axis_of(attr_int("axis", 0), x->type.shape.rank());
  const bool keep = attr_int("keepdims", 1) != 0, last = attr_int("select_last_index", 0) != 0;
  if (node_->op_type() == "ArgMax") {
    if (!last) {
      out(0, op(OpKind::kArgmax, {x}, {{"axis", i(axis)}, {"keepdim", b(keep)}}));
      return;
    }
    // The last maximum: the first one of the reversed axis, counted back from the end.
    const int64_t dim = x->type.shape[static_cast<int>(axis)];
    V flipped = op(OpKind::kIndexSelect, {x, arange(dim - 1, -1, -1)}, {{"axis", i(axis)}});
    V first = op(OpKind::kArgmax, {flipped}, {{"axis", i(axis)}, {"keepdim", b(keep)}});
    out(0, op(OpKind::kSub, {static_cast<double>(dim - 1), first}));
  } else {
    out(0, op(OpKind::kArgmin, {x}, {{"axis", i(axis)}, {"keepdim", b(keep)}, {"select_last_index", b(last)}}));
  }
}

void Importer::hardmax() {
  V x = in(0);
  const int r = x->type.shape.rank();
  const int64_t axis = axis_of(attr_int("axis", -1), r);
  const int64_t dim = x->type.shape[static_cast<int>(axis)];
  V first = op(OpKind::kArgmax, {x}, {{"axis", i(axis)}, {"keepdim", b(true)}});
  std::vector<int64_t> pos_shape(static_cast<size_t>(r), 1);
  pos_shape[static_cast<size_t>(axis)] = dim;
  out(0, cast_to(op(OpKind::kEq, {first, reshape_to(arange(0, dim, 1), pos_shape)}), x->type.dtype));
}

void Importer::softmax() {
  V x = in(0);
  const int64_t axis = axis_of(attr_int("axis", -1), std::max(x->type.shape.rank(), 1));
  out(0, op(node_->op_type() == "Softmax" ? OpKind::kSoftmax : OpKind::kLogSoftmax, {x}, {{"axis", i(axis)}}));
}

void Importer::topk() {
  V x = in(0);
  const int64_t k = ints_of(in(1), "K").at(0);
  const int64_t axis = axis_of(attr_int("axis", -1), x->type.shape.rank());
  const bool largest = attr_int("largest", 1) != 0;
  attr_int("sorted", 1);
  const Attrs a = {{"k", i(k)}, {"axis", i(axis)}, {"largest", b(largest)}};
  if (out_used(0)) out(0, op(OpKind::kTopk, {x}, a));
  if (out_used(1)) out(1, op(OpKind::kTopkIndices, {x}, a));
}

// ---- handlers: layout -------------------------------------------------------------------------

void Importer::reshape() {
  V x = in(0);
  std::vector<int64_t> dims = ints_of(in(1), "shape");
  const bool allowzero = attr_int("allowzero", 0) != 0;
  int infer = -1;
  int64_t known_product = 1;
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] == 0 && !allowzero) {
      if (static_cast<int>(k) >= x->type.shape.rank()) fail_invalid(where_() + ": a 0 in 'shape' past the input's rank");
      dims[k] = x->type.shape[static_cast<int>(k)];
    }
    if (dims[k] == -1) {
      if (infer >= 0) fail_invalid(where_() + ": 'shape' has two -1 entries");
      infer = static_cast<int>(k);
    } else if (dims[k] < 0) {
      fail_invalid(fmt::format("{}: 'shape' has a negative entry {}", where_(), dims[k]));
    } else {
      known_product *= dims[k];
    }
  }
  if (infer >= 0) {
    if (known_product == 0) fail_invalid(where_() + ": -1 in 'shape' next to a 0");
    dims[static_cast<size_t>(infer)] = x->type.shape.numel() / known_product;
  }
  out(0, reshape_to(x, dims));
}

void Importer::flatten() {
  V x = in(0);
  const int r = x->type.shape.rank();
  int64_t axis = attr_int("axis", 1);
  if (axis < -r || axis > r) fail_invalid(fmt::format("{}: axis {} is out of range for rank {}", where_(), axis, r));
  if (axis < 0) axis += r;
  int64_t outer = 1, inner = 1;
  for (int k = 0; k < r; ++k) (k < axis ? outer : inner) *= x->type.shape[k];
  out(0, reshape_to(x, {outer, inner}));
}

void Importer::squeeze() {
  V x = in(0);
  const int r = x->type.shape.rank();
  std::set<int64_t> axes;
  if (has_in(1)) {
    for (int64_t a : ints_of(in(1), "axes")) axes.insert(axis_of(a, r));
  } else {
    for (int k = 0; k < r; ++k) if (x->type.shape[k] == 1) axes.insert(k);
  }
  std::vector<int64_t> dims;
  for (int k = 0; k < r; ++k) {
    if (!axes.count(k)) { dims.push_back(x->type.shape[k]); continue; }
    if (x->type.shape[k] != 1) fail_invalid(fmt::format("{}: dim {} has size {}, not 1", where_(), k, x->type.shape[k]));
  }
  out(0, reshape_to(x, dims));
}

void Importer::unsqueeze() {
  V x = in(0);
  std::vector<int64_t> axes = ints_of(in(1), "axes");
  const int r = x->type.shape.rank() + static_cast<int>(axes.size());
  std::set<int64_t> set;
  for (int64_t a : axes) {
    if (!set.insert(axis_of(a, r)).second) fail_invalid(where_() + ": an axis is named twice");
  }
  std::vector<int64_t> dims;
  int src = 0;
  for (int k = 0; k < r; ++k) dims.push_back(set.count(k) ? 1 : x->type.shape[src++]);
  out(0, reshape_to(x, dims));
}

void Importer::transpose() {
  V x = in(0);
  const int r = x->type.shape.rank();
  std::vector<int64_t> perm;
  if (std::optional<std::vector<int64_t>> p = attr_ints("perm")) perm = *p;
  else for (int k = r - 1; k >= 0; --k) perm.push_back(k);
  bool identity = true;
  for (size_t k = 0; k < perm.size(); ++k) identity = identity && perm[k] == static_cast<int64_t>(k);
  out(0, identity && static_cast<int>(perm.size()) == r ? x : op(OpKind::kPermute, {x}, {{"perm", ints(perm)}}));
}

void Importer::concat() {
  std::vector<Arg> args;
  for (int k = 0; k < node_->input_size(); ++k) args.emplace_back(in(k));
  const int r = args[0].v->type.shape.rank();
  out(0, op(OpKind::kConcat, std::move(args), {{"axis", i(axis_of(attr_int("axis", 0), r))}}));
}

void Importer::slice() {
  V x = in(0);
  const int r = x->type.shape.rank();
  std::vector<int64_t> starts = ints_of(in(1), "starts"), ends = ints_of(in(2), "ends");
  std::vector<int64_t> axes, steps;
  if (has_in(3)) axes = ints_of(in(3), "axes");
  else for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  if (has_in(4)) steps = ints_of(in(4), "steps");
  else steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size()) {
    fail_invalid(where_() + ": starts, ends, axes and steps must have one entry each per sliced axis");
  }
  V y = x;
  for (size_t k = 0; k < starts.size(); ++k) {
    const int64_t axis = axis_of(axes[k], r);
    const int64_t dim = x->type.shape[static_cast<int>(axis)];
    const int64_t step = steps[k];
    if (step == 0) fail_invalid(where_() + ": a step of 0");
    if (step > 0) {
      y = op(OpKind::kSlice, {y}, {{"axis", i(axis)}, {"start", i(starts[k])}, {"end", i(ends[k])}, {"step", i(step)}});
      continue;
    }
    // A negative step: ONNX clamps start into [0, dim - 1] and end into [-1, dim - 1].
    int64_t s = starts[k], e = ends[k];
    if (s < 0) s = s < -dim ? -1 : s + dim;
    if (e < 0) e = e < -dim ? -1 : e + dim;
    s = std::min(s, dim - 1);
    e = std::min(e, dim - 1);
    y = op(OpKind::kIndexSelect, {y, arange(s, std::min(s, e), step)}, {{"axis", i(axis)}});
  }
  out(0, y);
}

void Importer::split() {
  V x = in(0);
  const int r = x->type.shape.rank();
  const int64_t axis = axis_of(attr_int("axis", 0), r);
  const int64_t dim = x->type.shape[static_cast<int>(axis)];
  std::vector<int64_t> sizes;
  if (has_in(1)) {
    sizes = ints_of(in(1), "split");
  } else {
    const int64_t n = node_->output_size();
    if (dim % n != 0) fail_invalid(fmt::format("{}: dim {} does not split into {} equal parts", where_(), dim, n));
    sizes.assign(static_cast<size_t>(n), dim / n);
  }
  if (static_cast<int>(sizes.size()) != node_->output_size()) fail_invalid(where_() + ": one split size per output");
  int64_t start = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (sizes[k] < 0) fail_invalid(where_() + ": a negative split size");
    out(static_cast<int>(k), op(OpKind::kSlice, {x}, {{"axis", i(axis)}, {"start", i(start)}, {"end", i(start + sizes[k])}}));
    start += sizes[k];
  }
  if (start != dim) fail_invalid(fmt::format("{}: split sizes sum to {}, the dim is {}", where_(), start, dim));
}

void Importer::expand() {
  V x = in(0);
  std::vector<int64_t> target = broadcast_dims(dims_of(x->type.shape), ints_of(in(1), "shape"), where_());
  out(0, target == dims_of(x->type.shape) ? x : op(OpKind::kBroadcastTo, {x}, {{"shape", ints(target)}}));
}

void Importer::tile() {
  V x = in(0);
  std::vector<int64_t> repeats = ints_of(in(1), "repeats");
  if (static_cast<int>(repeats.size()) != x->type.shape.rank()) fail_invalid(where_() + ": one repeat per dim");
  V y = x;
  for (size_t a = 0; a < repeats.size(); ++a) {
    if (repeats[a] < 0) fail_invalid(where_() + ": a negative repeat");
    if (repeats[a] == 1) continue;
    if (repeats[a] == 0) {
      y = op(OpKind::kSlice, {y}, {{"axis", i(static_cast<int64_t>(a))}, {"start", i(0)}, {"end", i(0)}});
      continue;
    }
    // A new axis of `repeats` copies before axis a, merged into it.
    std::vector<int64_t> dims = dims_of(y->type.shape), spread = dims;
    dims.insert(dims.begin() + static_cast<long>(a), 1);
    spread.insert(spread.begin() + static_cast<long>(a), repeats[a]);
    V copies = op(OpKind::kBroadcastTo, {reshape_to(y, dims)}, {{"shape", ints(spread)}});
    std::vector<int64_t> merged = dims_of(y->type.shape);
    merged[a] *= repeats[a];
    y = reshape_to(copies, merged);
  }
  out(0, y);
}

void Importer::pad() {
  V x = in(0);
  const std::string mode = attr_string("mode", "constant");
  if (mode != "constant") node_unsupported("mode=" + mode);
  std::vector<int64_t> pads = ints_of(in(1), "pads");
  const int r = x->type.shape.rank();
  if (static_cast<int>(pads.size()) != 2 * r) fail_invalid(where_() + ": 'pads' needs 2 entries per dim");
  const double value = has_in(2) ? scalar_of(in(2), "constant_value") : 0.0;
  // tracecache's order: the last dim's (before, after) first.
  std::vector<int64_t> ours;
  for (int d = r - 1; d >= 0; --d) {
    ours.push_back(pads[static_cast<size_t>(d)]);
    ours.push_back(pads[static_cast<size_t>(d + r)]);
  }
  while (ours.size() >= 2 && ours[ours.size() - 1] == 0 && ours[ours.size() - 2] == 0) ours.resize(ours.size() - 2);
  if (ours.empty()) { out(0, x); return; }
  if (ours.size() > 8) node_unsupported("padding more than the 4 innermost dims");
  out(0, op(OpKind::kPad, {x}, {{"pads", ints(ours)}, {"value", f(value)}}));
}

void Importer::gather() {
  V x = in(0), idx = in(1);
  const int r = x->type.shape.rank();
  const int64_t axis = axis_of(attr_int("axis", 0), r);
  const int64_t dim = x->type.shape[static_cast<int>(axis)];
  V fixed = normalize_index(idx, dim);
  V flat = reshape_to(fixed, {idx->type.shape.numel()});
  V picked = op(OpKind::kIndexSelect, {x, flat}, {{"axis", i(axis)}});
  std::vector<int64_t> dims;
  for (int k = 0; k < axis; ++k) dims.push_back(x->type.shape[k]);
  for (int64_t d : idx->type.shape) dims.push_back(d);
  for (int k = static_cast<int>(axis) + 1; k < r; ++k) dims.push_back(x->type.shape[k]);
  if (dims.size() > static_cast<size_t>(kMaxRank)) node_unsupported("a result of rank above 8");
  out(0, reshape_to(picked, dims));
}

void Importer::gather_elements() {
  V x = in(0), idx = in(1);
  const int64_t axis = axis_of(attr_int("axis", 0), x->type.shape.rank());
  out(0, op(OpKind::kGather, {x, normalize_index(idx, x->type.shape[static_cast<int>(axis)])}, {{"axis", i(axis)}}));
}

void Importer::gather_nd() {
  out(0, op(OpKind::kGatherNd, {in(0), in(1)}, {{"batch_dims", i(attr_int("batch_dims", 0))}}));
}

void Importer::scatter_elements() {
  V x = in(0);
  const int64_t axis = axis_of(attr_int("axis", 0), x->type.shape.rank());
  const std::string reduction = attr_string("reduction", "none");
  int64_t code = 0;
  if (reduction == "add") code = 1;
  else if (reduction == "mul") code = 2;
  else if (reduction != "none") node_unsupported("reduction=" + reduction);
  out(0, op(OpKind::kScatterElements, {x, in(1), in(2)}, {{"axis", i(axis)}, {"reduction", i(code)}}));
}

void Importer::depth_to_space() {
  V x = in(0);
  require_rank4(x, "input");
  const int64_t bs = attr_int("blocksize", 0);
  const std::string mode = attr_string("mode", "DCR");
  const Shape& s = x->type.shape;
  if (bs <= 0 || s[1] % (bs * bs) != 0) fail_invalid(where_() + ": channels must divide by blocksize^2");
  const int64_t c = s[1] / (bs * bs);
  V y;
  if (mode == "DCR") {
    y = op(OpKind::kPermute, {reshape_to(x, {s[0], bs, bs, c, s[2], s[3]})}, {{"perm", ints({0, 3, 4, 1, 5, 2})}});
  } else if (mode == "CRD") {
    y = op(OpKind::kPermute, {reshape_to(x, {s[0], c, bs, bs, s[2], s[3]})}, {{"perm", ints({0, 1, 4, 2, 5, 3})}});
  } else {
    node_unsupported("mode=" + mode);
  }
  out(0, reshape_to(y, {s[0], c, s[2] * bs, s[3] * bs}));
}

void Importer::space_to_depth() {
  V x = in(0);
  require_rank4(x, "input");
  const int64_t bs = attr_int("blocksize", 0);
  const Shape& s = x->type.shape;
  if (bs <= 0 || s[2] % bs != 0 || s[3] % bs != 0) fail_invalid(where_() + ": H and W must divide by blocksize");
  V y = op(OpKind::kPermute, {reshape_to(x, {s[0], s[1], s[2] / bs, bs, s[3] / bs, bs})}, {{"perm", ints({0, 3, 5, 1, 2, 4})}});
  out(0, reshape_to(y, {s[0], s[1] * bs * bs, s[2] / bs, s[3] / bs}));
}

// ---- handlers: nn layers ---------------------------------------------------------------------------

void Importer::conv() {
  V x = in(0), w = in(1);
  require_rank4(x, "input");
  require_float(x, "input");
  const Shape& ws = w->type.shape;
  if (ws.rank() != 4) fail_invalid(where_() + ": the weight must have rank 4");
  if (std::optional<std::vector<int64_t>> k = attr_ints("kernel_shape"); k && *k != std::vector<int64_t>{ws[2], ws[3]}) {
    fail_invalid(where_() + ": kernel_shape does not match the weight");
  }
  const auto stride = pair_attr("strides", 1), dil = pair_attr("dilations", 1);
  const int64_t group = attr_int("group", 1);
  const auto pads = spatial_pads(x->type.shape, {dil[0] * (ws[2] - 1) + 1, dil[1] * (ws[3] - 1) + 1}, stride);
  std::vector<int64_t> padding = {pads[0], pads[1]};
  if (pads[0] != pads[2] || pads[1] != pads[3]) {
    x = pad2d(x, pads[0], pads[2], pads[1], pads[3], 0.0);
    padding = {0, 0};
  }
  std::vector<Arg> args = {x, w};
  if (has_in(2)) args.emplace_back(in(2));
  out(0, op(OpKind::kConv2d, std::move(args),
            {{"stride", ints({stride[0], stride[1]})}, {"padding", ints(padding)},
             {"dilation", ints({dil[0], dil[1]})}, {"groups", i(group)}}));
}

void Importer::conv_transpose() {
  V x = in(0), w = in(1);
  require_rank4(x, "input");
  require_float(x, "input");
  const Shape& ws = w->type.shape;
  if (ws.rank() != 4) fail_invalid(where_() + ": the weight must have rank 4");
  if (std::optional<std::vector<int64_t>> k = attr_ints("kernel_shape"); k && *k != std::vector<int64_t>{ws[2], ws[3]}) {
    fail_invalid(where_() + ": kernel_shape does not match the weight");
  }
  const auto stride = pair_attr("strides", 1), dil = pair_attr("dilations", 1), opad = pair_attr("output_padding", 0);
  const int64_t group = attr_int("group", 1);
  const std::string auto_pad = attr_string("auto_pad", "NOTSET");
  std::optional<std::vector<int64_t>> output_shape = attr_ints("output_shape");
  std::optional<std::vector<int64_t>> pads_attr = attr_ints("pads");
  std::array<int64_t, 4> pads{};  // top, left, bottom, right
  std::array<int64_t, 2> full{};  // the un-cropped output size
  for (int a = 0; a < 2; ++a) {
    const auto u = static_cast<size_t>(a);
    full[u] = stride[u] * (x->type.shape[2 + a] - 1) + dil[u] * (ws[2 + a] - 1) + 1;
  }
  if (output_shape || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    std::vector<int64_t> target;
    if (output_shape) {
      target = *output_shape;
      if (target.size() == 4) target.erase(target.begin(), target.begin() + 2);
      if (target.size() != 2) fail_invalid(where_() + ": output_shape must have 2 entries");
    } else {
      target = {x->type.shape[2] * stride[0], x->type.shape[3] * stride[1]};
    }
    for (int a = 0; a < 2; ++a) {
      const auto u = static_cast<size_t>(a);
      const int64_t total = full[u] + opad[u] - target[u];
      const int64_t half = total / 2;
      // A larger target extends the end (as output_padding does); a smaller one is cropped
      // from both sides, the larger half first at the start unless SAME_UPPER.
      pads[u] = total < 0 ? 0 : auto_pad == "SAME_UPPER" ? half : total - half;
      pads[u + 2] = total - pads[u];
    }
  } else if (auto_pad == "NOTSET" && pads_attr) {
    if (pads_attr->size() != 4) fail_invalid(where_() + ": 'pads' must have 4 entries");
    pads = {(*pads_attr)[0], (*pads_attr)[1], (*pads_attr)[2], (*pads_attr)[3]};
  } else if (auto_pad != "NOTSET" && auto_pad != "VALID") {
    node_unsupported("auto_pad=" + auto_pad);
  }
  const Attrs common = {{"stride", ints({stride[0], stride[1]})}, {"dilation", ints({dil[0], dil[1]})}, {"groups", i(group)}};
  const bool direct = pads[0] == pads[2] && pads[1] == pads[3] && pads[0] >= 0 && pads[1] >= 0 &&
                      opad[0] < stride[0] && opad[1] < stride[1] && opad[0] >= 0 && opad[1] >= 0;
  std::vector<Arg> args = {x, w};
  if (direct) {
    if (has_in(2)) args.emplace_back(in(2));
    Attrs a = common;
    a.push_back({"padding", ints({pads[0], pads[1]})});
    a.push_back({"output_padding", ints({opad[0], opad[1]})});
    out(0, op(OpKind::kConvTranspose2d, std::move(args), a));
    return;
  }
  // Every other geometry: the full result, then cropped (or zero-extended) to ONNX's window.
  V y = op(OpKind::kConvTranspose2d, std::move(args), common);
  y = op(OpKind::kPad, {y}, {{"pads", ints({-pads[1], opad[1] - pads[3], -pads[0], opad[0] - pads[2]})}});
  if (has_in(2)) {
    V bias = in(2);
    y = op(OpKind::kAdd, {y, reshape_to(bias, {bias->type.shape.numel(), 1, 1})});
  }
  out(0, y);
}

void Importer::max_pool() {
  V x = in(0);
  require_rank4(x, "input");
  require_float(x, "input");
  if (out_used(1)) node_unsupported("the Indices output");
  if (attr_int("storage_order", 0) != 0) node_unsupported("storage_order=1");
  std::optional<std::vector<int64_t>> k = attr_ints("kernel_shape");
  if (!k || k->size() != 2) fail_invalid(where_() + ": kernel_shape must have 2 entries");
  const std::array<int64_t, 2> kernel = {(*k)[0], (*k)[1]};
  const auto stride = pair_attr("strides", 1), dil = pair_attr("dilations", 1);
  const bool ceil_mode = attr_int("ceil_mode", 0) != 0;
  const std::array<int64_t, 2> extent = {dil[0] * (kernel[0] - 1) + 1, dil[1] * (kernel[1] - 1) + 1};
  const auto pads = spatial_pads(x->type.shape, extent, stride);
  const Attrs base = {{"kernel", ints({kernel[0], kernel[1]})}, {"stride", ints({stride[0], stride[1]})},
                      {"dilation", ints({dil[0], dil[1]})}};
  if (!ceil_mode && pads[0] == pads[2] && pads[1] == pads[3] && pads[0] <= kernel[0] / 2 && pads[1] <= kernel[1] / 2) {
    Attrs a = base;
    a.push_back({"padding", ints({pads[0], pads[1]})});
    out(0, op(OpKind::kMaxPool2d, {x}, a));
    return;
  }
  // ONNX's output size, then -inf padding that makes exactly those windows.
  std::array<int64_t, 2> right{};
  for (int a = 0; a < 2; ++a) {
    const auto u = static_cast<size_t>(a);
    const int64_t span = x->type.shape[2 + a] + pads[u] + pads[u + 2] - extent[u];
    if (span < 0) fail_invalid(where_() + ": the window is larger than the padded input");
    const int64_t o = (ceil_mode ? (span + stride[u] - 1) / stride[u] : span / stride[u]) + 1;
    right[u] = (o - 1) * stride[u] + extent[u] - x->type.shape[2 + a] - pads[u];
  }
  V padded = pad2d(x, pads[0], right[0], pads[1], right[1], -std::numeric_limits<double>::infinity());
  out(0, op(OpKind::kMaxPool2d, {padded}, base));
}

void Importer::average_pool() {
  V x = in(0);
  require_rank4(x, "input");
  require_float(x, "input");
  std::optional<std::vector<int64_t>> k = attr_ints("kernel_shape");
  if (!k || k->size() != 2) fail_invalid(where_() + ": kernel_shape must have 2 entries");
  const std::array<int64_t, 2> kernel = {(*k)[0], (*k)[1]};
  const auto stride = pair_attr("strides", 1);
  const bool ceil_mode = attr_int("ceil_mode", 0) != 0;
  const bool include_pad = attr_int("count_include_pad", 0) != 0;
  const auto pads = spatial_pads(x->type.shape, kernel, stride);
  const Attrs base = {{"kernel", ints({kernel[0], kernel[1]})}, {"stride", ints({stride[0], stride[1]})}};
  if (!ceil_mode && pads[0] == pads[2] && pads[1] == pads[3] && pads[0] <= kernel[0] / 2 && pads[1] <= kernel[1] / 2) {
    Attrs a = base;
    a.push_back({"padding", ints({pads[0], pads[1]})});
    a.push_back({"count_include_pad", b(include_pad)});
    out(0, op(OpKind::kAvgPool2d, {x}, a));
    return;
  }
  // The window sums over explicit zero padding, divided by how many cells ONNX counts in each
  // window (a mask pooled the same way: the input's cells, plus the pads' with count_include_pad).
  std::array<int64_t, 2> right{};
  for (int a = 0; a < 2; ++a) {
    const auto u = static_cast<size_t>(a);
    const int64_t span = x->type.shape[2 + a] + pads[u] + pads[u + 2] - kernel[u];
    if (span < 0) fail_invalid(where_() + ": the window is larger than the padded input");
    const int64_t o = (ceil_mode ? (span + stride[u] - 1) / stride[u] : span / stride[u]) + 1;
    right[u] = (o - 1) * stride[u] + kernel[u] - x->type.shape[2 + a] - pads[u];
  }
  const int64_t h = x->type.shape[2], w = x->type.shape[3];
  V mask = op(OpKind::kFull, {}, {{"shape", ints({1, 1, h, w})}, {"value", f(1)}});
  if (include_pad) {
    mask = pad2d(mask, pads[0], pads[2], pads[1], pads[3], 1.0);
    mask = pad2d(mask, 0, right[0] - pads[2], 0, right[1] - pads[3], 0.0);
  } else {
    mask = pad2d(mask, pads[0], right[0], pads[1], right[1], 0.0);
  }
  V sums = op(OpKind::kAvgPool2d, {pad2d(x, pads[0], right[0], pads[1], right[1], 0.0)}, base);
  V counts = op(OpKind::kAvgPool2d, {mask}, base);
  out(0, op(OpKind::kDiv, {sums, counts}));
}

void Importer::global_pool() {
  V x = in(0);
  std::vector<int64_t> axes;
  for (int k = 2; k < x->type.shape.rank(); ++k) axes.push_back(k);
  if (axes.empty()) fail_invalid(where_() + ": the input needs rank >= 3");
  out(0, reduce_with(node_->op_type() == "GlobalAveragePool" ? OpKind::kMean : OpKind::kMax, x, axes, true));
}

void Importer::batch_norm() {
  V x = in(0);
  const double eps = attr_float("epsilon", 1e-5f);
  attr_float("momentum", 0.9f);
  if (attr_int("training_mode", 0) != 0) node_unsupported("training_mode=1");
  if (out_used(1) || out_used(2)) node_unsupported("the running statistics outputs");
  out(0, op(OpKind::kBatchNorm, {x, in(3), in(4), in(1), in(2)}, {{"eps", f(eps)}}));
}

void Importer::instance_norm() {
  V x = in(0), scale = in(1), bias = in(2);
  const int r = x->type.shape.rank();
  if (r < 3) fail_invalid(where_() + ": the input needs rank >= 3");
  const double eps = attr_float("epsilon", 1e-5f);
  V y = op(OpKind::kLayerNorm, {x}, {{"normalized_dims", i(r - 2)}, {"eps", f(eps)}});
  std::vector<int64_t> cshape(static_cast<size_t>(r - 1), 1);
  cshape[0] = x->type.shape[1];
  y = op(OpKind::kMul, {y, reshape_to(scale, cshape)});
  out(0, op(OpKind::kAdd, {y, reshape_to(bias, cshape)}));
}

void Importer::layer_norm() {
  V x = in(0);
  const int r = x->type.shape.rank();
  const int64_t axis = axis_of(attr_int("axis", -1), r);
  const double eps = attr_float("epsilon", 1e-5f);
  if (attr_int("stash_type", 1) != 1) node_unsupported("stash_type other than 1 (float)");
  std::vector<int64_t> tail(x->type.shape.begin() + axis, x->type.shape.end());
  if (out_used(1) || out_used(2)) {
    require_float(x, "input");
    std::vector<int64_t> axes;
    for (int k = static_cast<int>(axis); k < r; ++k) axes.push_back(k);
    V mean = reduce_with(OpKind::kMean, x, axes, true);
    V centered = op(OpKind::kSub, {x, mean});
    V var = reduce_with(OpKind::kMean, op(OpKind::kMul, {centered, centered}), axes, true);
    out(1, mean);
    out(2, op(OpKind::kRsqrt, {op(OpKind::kAdd, {var, eps})}));
  }
  auto fit = [&](V v) {
    if (dims_of(v->type.shape) == tail) return v;
    return op(OpKind::kBroadcastTo, {v}, {{"shape", ints(tail)}});
  };
  std::vector<Arg> args = {x, fit(in(1))};
  if (has_in(2)) args.emplace_back(fit(in(2)));
  out(0, op(OpKind::kLayerNorm, std::move(args), {{"normalized_dims", i(r - axis)}, {"eps", f(eps)}}));
}

void Importer::resize() {
  V x = in(0);
  require_rank4(x, "input");
  const std::string mode = attr_string("mode", "nearest");
  const std::string ctm = attr_string("coordinate_transformation_mode", "half_pixel");
  const std::string nearest = attr_string("nearest_mode", "round_prefer_floor");
  attr_float("cubic_coeff_a", -0.75f);
  attr_float("extrapolation_value", 0.0f);
  if (attr_int("exclude_outside", 0) != 0) node_unsupported("exclude_outside=1");
  if (mode != "nearest" && mode != "linear") node_unsupported("mode=" + mode);
  static const std::map<std::string, int64_t> kCtm = {{"half_pixel", 0}, {"asymmetric", 1}, {"align_corners", 2},
                                                      {"pytorch_half_pixel", 3}, {"tf_half_pixel_for_nearest", 4},
                                                      // the name ONNX 1.12's reference and node tests use
                                                      {"tf_half_pixel_for_nn", 4}};
  static const std::map<std::string, int64_t> kNearest = {{"round_prefer_floor", 0}, {"round_prefer_ceil", 1},
                                                          {"floor", 2}, {"ceil", 3}};
  auto ctm_it = kCtm.find(ctm);
  if (ctm_it == kCtm.end()) node_unsupported("coordinate_transformation_mode=" + ctm);
  auto nearest_it = kNearest.find(nearest);
  if (nearest_it == kNearest.end()) node_unsupported("nearest_mode=" + nearest);
  const Shape& s = x->type.shape;
  std::vector<int64_t> size;
  double scale_h = 0, scale_w = 0;
  V sizes_v = has_in(3) ? in(3) : nullptr;
  if (sizes_v && sizes_v->type.shape.numel() > 0) {
    std::vector<int64_t> sizes = ints_of(sizes_v, "sizes");
    if (sizes.size() != 4 || sizes[0] != s[0] || sizes[1] != s[1]) node_unsupported("resizing other than the 2 last dims");
    size = {sizes[2], sizes[3]};
  } else {
    V scales_v = has_in(2) ? in(2) : nullptr;
    if (!scales_v) fail_invalid(where_() + ": Resize needs scales or sizes");
    if (!scales_v->known) {
      needs_constant("scales");
    }
    if (scales_v->type.shape.numel() != 4) fail_invalid(where_() + ": 'scales' must have 4 entries");
    std::vector<double> scales;
    for (int64_t k = 0; k < 4; ++k) scales.push_back(scales_v->known->element_as_double(k));
    if (scales[0] != 1 || scales[1] != 1) node_unsupported("resizing other than the 2 last dims");
    scale_h = scales[2];
    scale_w = scales[3];
    const double h = static_cast<double>(s[2]) * scale_h, w = static_cast<double>(s[3]) * scale_w;
    size = {static_cast<int64_t>(std::floor(h)), static_cast<int64_t>(std::floor(w))};
    // ONNX's align_corners divides by the unrounded output length (in * scale - 1); the op
    // divides by its output size - 1.
    if (ctm == "align_corners" && (std::floor(h) != h || std::floor(w) != w)) {
      node_unsupported("align_corners with scales whose output length is fractional");
    }
  }
  Attrs a = {{"size", ints(size)}, {"scale_h", f(scale_h)}, {"scale_w", f(scale_w)},
             {"coordinate_transformation_mode", i(ctm_it->second)}};
  if (mode == "nearest") {
    a.push_back({"nearest_mode", i(nearest_it->second)});
    out(0, op(OpKind::kResizeNearest2d, {x}, a));
  } else {
    out(0, op(OpKind::kResizeLinear2d, {x}, a));
  }
}

// ---- the model ------------------------------------------------------------------------------------

void Importer::declare_inputs() {
  std::map<std::string, const InputShape*> given;
  for (const InputShape& s : options_.shapes) given[s.name] = &s;
  std::map<std::string, std::string> files(options_.input_files.begin(), options_.input_files.end());
  const std::set<std::string> constants(options_.constant_inputs.begin(), options_.constant_inputs.end());
  std::set<std::string> graph_inputs;
  for (const ::onnx::ValueInfoProto& vi : model_.graph().input()) graph_inputs.insert(vi.name());
  for (const auto& [input_name, unused] : given) {
    if (!graph_inputs.count(input_name)) {
      fail_invalid(fmt::format("{}: --shape {}: the model has no input '{}'", name_, input_name, input_name));
    }
  }
  for (const auto& [input_name, unused] : files) {
    if (!graph_inputs.count(input_name)) {
      fail_invalid(fmt::format("{}: --input {}: the model has no input '{}'", name_, input_name, input_name));
    }
  }
  int index = 0;
  for (const ::onnx::ValueInfoProto& vi : model_.graph().input()) {
    const bool user = given.count(vi.name()) || files.count(vi.name());
    if (initializers_.count(vi.name()) && !user) continue;  // an initializer listed as an input (IR < 4)
    ++index;
    if (!vi.type().has_tensor_type()) {
      fail_unsupported("non-tensor input", fmt::format("{}: input '{}' is not a tensor", name_, vi.name()));
    }
    const auto& tt = vi.type().tensor_type();
    std::optional<DType> declared = dtype_from_onnx(tt.elem_type());
    if (!declared) {
      fail_unsupported("dtype " + onnx_type_name(tt.elem_type()),
                       fmt::format("{}: input '{}' has element type {} (tracecache has float, int32, int64, bool)", name_,
                                   vi.name(), onnx_type_name(tt.elem_type())));
    }
    if (constants.count(vi.name())) {
      auto f_it = files.find(vi.name());
      if (f_it == files.end()) {
        fail_invalid(fmt::format("{}: constant input '{}' needs a file (--input {}=FILE.npy)", name_, vi.name(), vi.name()));
      }
      Result<HostBuffer> v = read_npy(f_it->second);
      if (!v.is_ok()) fail(v.status());
      if (v->dtype() != *declared) {
        fail_invalid(fmt::format("{}: input '{}' is {}, the file '{}' holds {}", name_, vi.name(),
                                 dtype_name(*declared), f_it->second, dtype_name(v->dtype())));
      }
      values_[vi.name()] = known(std::move(*v), vi.name());
      continue;
    }
    TensorDecl decl;
    decl.role = TensorDecl::Role::kInput;
    decl.dtype = *declared;
    std::optional<std::vector<int64_t>> dims;
    if (auto f_it = files.find(vi.name()); f_it != files.end()) {
      Result<HostBuffer> v = read_npy(f_it->second);
      if (!v.is_ok()) fail(v.status());
      if (v->dtype() != *declared) {
        fail_invalid(fmt::format("{}: input '{}' is {}, the file '{}' holds {}", name_, vi.name(),
                                 dtype_name(*declared), f_it->second, dtype_name(v->dtype())));
      }
      dims = dims_of(v->shape());
      decl.init.kind = Generator::Kind::kNpy;
      decl.init.path = f_it->second;
    } else if (auto g = given.find(vi.name()); g != given.end()) {
      if (g->second->dtype != *declared) {
        fail_invalid(fmt::format("{}: input '{}' is {}, not {}", name_, vi.name(), dtype_name(*declared),
                                 dtype_name(g->second->dtype)));
      }
      dims = g->second->dims;
    }
    const bool ranked = tt.has_shape();
    if (dims && ranked) {
      if (static_cast<int>(dims->size()) != tt.shape().dim_size()) {
        fail_invalid(fmt::format("{}: input '{}' has rank {}, the given shape [{}] has rank {}", name_, vi.name(),
                                 tt.shape().dim_size(), fmt::join(*dims, ", "), dims->size()));
      }
      for (int d = 0; d < tt.shape().dim_size(); ++d) {
        const auto& dim = tt.shape().dim(d);
        if (dim.has_dim_value() && dim.dim_value() != (*dims)[static_cast<size_t>(d)]) {
          fail_invalid(fmt::format("{}: input '{}' has dim {} of size {}, the given shape [{}] says {}", name_, vi.name(),
                                   d, dim.dim_value(), fmt::join(*dims, ", "), (*dims)[static_cast<size_t>(d)]));
        }
      }
    } else if (!dims) {
      if (!ranked) {
        fail_invalid(fmt::format("{}: input '{}' has no declared shape: pass --shape {}={}[...] or --input {}=FILE.npy",
                                 name_, vi.name(), vi.name(), dtype_name(*declared), vi.name()));
      }
      dims.emplace();
      for (int d = 0; d < tt.shape().dim_size(); ++d) {
        const auto& dim = tt.shape().dim(d);
        if (!dim.has_dim_value() || dim.dim_value() < 0) {
          fail_invalid(fmt::format(
              "{}: input '{}' has a symbolic dim {} ('{}'): pass its sizes with --shape {}={}[...] or --input {}=FILE.npy",
              name_, vi.name(), d, dim.dim_param(), vi.name(), dtype_name(*declared), vi.name()));
        }
        dims->push_back(dim.dim_value());
      }
    }
    if (dims->size() > static_cast<size_t>(kMaxRank)) {
      fail_unsupported("rank above 8", fmt::format("{}: input '{}' has rank {} (the limit is {})", name_, vi.name(),
                                                   dims->size(), kMaxRank));
    }
    Result<int64_t> n = checked_numel(*dims);
    if (!n.is_ok()) fail_invalid(fmt::format("{}: input '{}': {}", name_, vi.name(), n.status().message()));
    decl.name = unique_name(vi.name());
    for (int64_t d : *dims) decl.dims.push_back({.name = {}, .value = d, .pos = {}});
    if (decl.init.kind != Generator::Kind::kNpy) {
      if (decl.dtype == DType::kF32) {
        decl.init.kind = Generator::Kind::kNormal;
        decl.init.seed = static_cast<uint64_t>(index);
      } else {
        decl.init.kind = Generator::Kind::kFull;
        decl.init.value = 0;
      }
    }
    auto v = std::make_shared<Value>();
    v->type = {decl.dtype, Shape(IntList(std::span<const int64_t>(*dims)))};
    v->prog = decl.name;
    v->label = vi.name();
    values_[vi.name()] = v;
    result_.program.tensors.push_back(std::move(decl));
  }
}

const OpRow* Importer::find_row(const NodeProto& node) {
  if (!node.domain().empty() && node.domain() != "ai.onnx") {
    fail_unsupported(fmt::format("op {}.{}", node.domain(), node.op_type()),
                     fmt::format("{}: op {} of domain '{}' is not supported", where_(), node.op_type(), node.domain()));
  }
  const auto rows = op_rows();
  auto it = std::lower_bound(rows.begin(), rows.end(), node.op_type(),
                             [](const OpRow& r, const std::string& t) { return r.onnx < t; });
  if (it == rows.end() || it->onnx != node.op_type()) {
    fail_unsupported("op " + node.op_type(), fmt::format("{}: op {} is not supported (docs/onnx.md lists the supported ops)",
                                                         where_(), node.op_type()));
  }
  return &*it;
}

void Importer::lower_node(int index, const NodeProto& node) {
  node_ = &node;
  node_index_ = index;
  attrs_read_.clear();
  row_ = find_row(node);
  for (int k = 0; k < node.input_size(); ++k) {
    if (node.input(k).empty()) continue;
    auto v = values_.find(node.input(k));
    if (v != values_.end()) continue;
    auto init = initializers_.find(node.input(k));
    if (init == initializers_.end()) continue;
    std::string reason;
    Result<HostBuffer> buf = tensor_to_buffer(*init->second, fmt::format("{}: initializer '{}'", where_(), node.input(k)),
                                              model_dir_, &reason);
    if (!buf.is_ok()) fail(buf.status(), reason);
    V w = known(std::move(*buf), node.input(k));
    w->weight = w->type.dtype == DType::kF32 || w->type.shape.numel() > 64;
    values_[node.input(k)] = w;
  }
  const size_t first_op = result_.program.ops.size();
  (this->*(row_->handler))();
  for (const AttributeProto& a : node.attribute()) {
    if (!attrs_read_.count(a.name())) node_unsupported("attribute '" + a.name() + "'");
  }
  for (int k = 0; k < node.output_size(); ++k) {
    if (!node.output(k).empty() && !values_.count(node.output(k))) {
      fail_invalid(fmt::format("{}: output {} was not produced", where_(), k));
    }
  }
  rename_outputs(first_op);
}

// The op results that are this node's outputs take the outputs' ONNX names.
void Importer::rename_outputs(size_t first_op) {
  auto& ops = result_.program.ops;
  for (int k = 0; k < node_->output_size(); ++k) {
    if (node_->output(k).empty()) continue;
    const V& v = values_[node_->output(k)];
    auto def = defined_at_.find(v->prog);
    if (v->prog.empty() || def == defined_at_.end() || def->second < first_op) continue;
    const std::string old = v->prog;
    if (old.size() < 2 || old[0] != 't' || old.find_first_not_of("0123456789_", 1) != std::string::npos) continue;
    const std::string fresh = unique_name(node_->output(k));
    ops[def->second].result = fresh;
    for (size_t j = def->second + 1; j < ops.size(); ++j) {
      for (Literal& l : ops[j].operands) {
        if (l.kind == Literal::Kind::kName && l.name == old) l.name = fresh;
      }
    }
    const size_t at = def->second;
    defined_at_.erase(def);
    defined_at_[fresh] = at;
    v->prog = fresh;
  }
}

ImportedModel Importer::run() {
  int64_t opset = -1;
  for (const auto& o : model_.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = o.version();
  }
  if (opset < 0) {
    const std::string domain = model_.opset_import_size() > 0 ? model_.opset_import(0).domain() : "";
    fail_unsupported("domain " + domain, fmt::format("{}: the model imports no opset of the default ONNX domain, only "
                                                     "'{}', which tracecache does not support", name_, domain));
  }
  if (opset < kMinOpset || opset > kMaxOpset) {
    fail_unsupported(fmt::format("opset {}", opset),
                     fmt::format("{}: opset {} is not supported (tracecache imports opsets {} to {}; convert the model "
                                 "with onnx.version_converter or export it with opset_version={})",
                                 name_, opset, kMinOpset, kMaxOpset, kMaxOpset));
  }
  result_.opset = opset;
  result_.program.file_name = options_.file_name;
  for (const TensorProto& t : model_.graph().initializer()) initializers_[t.name()] = &t;
  if (model_.graph().sparse_initializer_size() > 0) {
    fail_unsupported("sparse initializer", name_ + ": sparse initializers are not supported");
  }
  // Every op is known before anything else is checked: an unsupported op is the first error.
  for (int k = 0; k < model_.graph().node_size(); ++k) {
    node_ = &model_.graph().node(k);
    node_index_ = k;
    find_row(*node_);
  }
  node_ = nullptr;
  declare_inputs();
  int index = 0;
  for (const NodeProto& node : model_.graph().node()) lower_node(index++, node);
  node_ = nullptr;
  std::set<std::string> output_names;
  for (const ::onnx::ValueInfoProto& o : model_.graph().output()) {
    auto it = values_.find(o.name());
    V v;
    if (it != values_.end()) {
      v = it->second;
    } else if (auto init = initializers_.find(o.name()); init != initializers_.end()) {
      Result<HostBuffer> buf = tensor_to_buffer(*init->second, o.name(), model_dir_);
      if (!buf.is_ok()) fail(buf.status());
      v = known(std::move(*buf), o.name());
    } else {
      fail_invalid(fmt::format("{}: output '{}' is computed by no node", name_, o.name()));
    }
    const bool fresh_op = !v->prog.empty() && defined_at_.count(v->prog) && !output_names.count(v->prog);
    std::string prog = v->prog;
    if (fresh_op && prog != identifier(o.name())) {
      // The op result takes the output's ONNX name (as an identifier) everywhere it is used.
      const std::string name = unique_name(o.name());
      const size_t at = defined_at_[prog];
      auto& ops = result_.program.ops;
      ops[at].result = name;
      for (size_t j = at + 1; j < ops.size(); ++j) {
        for (Literal& l : ops[j].operands) {
          if (l.kind == Literal::Kind::kName && l.name == prog) l.name = name;
        }
      }
      for (OutputRef& r : result_.program.outputs) {
        if (r.name == prog) r.name = name;
      }
      defined_at_.erase(prog);
      defined_at_[name] = at;
      v->prog = name;
      prog = name;
    }
    if (!fresh_op) {
      V copy = op(OpKind::kCast, {v}, {{"dtype", AttrValue::of_dtype(v->type.dtype)}}, /*fold=*/false);
      const std::string name = unique_name(o.name());
      for (OpStmt& st : result_.program.ops) {
        if (st.result == copy->prog) st.result = name;
      }
      prog = name;
    }
    output_names.insert(prog);
    result_.program.outputs.push_back({.name = prog, .pos = {}});
    result_.outputs.push_back(o.name());
  }
  return std::move(result_);
}

// ---- the op table ---------------------------------------------------------------------------------

constexpr OpRow kRows[] = {
    {"Abs", "abs", &Importer::unary, OpKind::kAbs},
    {"Add", "add", &Importer::binary, OpKind::kAdd},
    {"And", "minimum (bool)", &Importer::and_or_xor},
    {"ArgMax", "argmax; select_last_index=1: index_select (reversed), argmax, sub", &Importer::arg_extreme},
    {"ArgMin", "argmin", &Importer::arg_extreme},
    {"AveragePool", "avg_pool2d; asymmetric pads or ceil_mode: pad, avg_pool2d, divided by the pooled count of ONNX's cells", &Importer::average_pool},
    {"BatchNormalization", "batch_norm (inference)", &Importer::batch_norm},
    {"Cast", "cast (to float, int32, int64, bool)", &Importer::cast},
    {"CastLike", "cast", &Importer::cast_like},
    {"Ceil", "ceil", &Importer::unary, OpKind::kCeil},
    {"Celu", "maximum, minimum, exp", &Importer::celu},
    {"Clip", "clamp; bounds from data: maximum, minimum", &Importer::clip},
    {"Concat", "concat", &Importer::concat},
    {"Constant", "a param (or folded)", &Importer::constant},
    {"ConstantOfShape", "folded, or full", &Importer::constant_of_shape},
    {"Conv", "conv2d; asymmetric pads or auto_pad: pad first", &Importer::conv},
    {"ConvTranspose", "conv_transpose2d; asymmetric pads, output_shape, auto_pad: pad (crop) after", &Importer::conv_transpose},
    {"Cos", "cos", &Importer::unary, OpKind::kCos},
    {"DepthToSpace", "reshape, permute, reshape", &Importer::depth_to_space},
    {"Div", "div (float), trunc_div (integers)", &Importer::div},
    {"Dropout", "identity (inference)", &Importer::dropout},
    {"Elu", "where, exp", &Importer::elu},
    {"Equal", "eq", &Importer::binary, OpKind::kEq},
    {"Erf", "erf", &Importer::unary, OpKind::kErf},
    {"Exp", "exp", &Importer::unary, OpKind::kExp},
    {"Expand", "broadcast_to", &Importer::expand},
    {"EyeLike", "folded (arange, sub, eq, cast)", &Importer::eye_like},
    {"Flatten", "reshape", &Importer::flatten},
    {"Floor", "floor", &Importer::unary, OpKind::kFloor},
    {"Gather", "index_select (negative indices wrapped), reshape", &Importer::gather},
    {"GatherElements", "gather (negative indices wrapped)", &Importer::gather_elements},
    {"GatherND", "gather_nd", &Importer::gather_nd},
    {"Gemm", "linear (transB=1, alpha=beta=1); else transpose, matmul, mul, add", &Importer::gemm},
    {"GlobalAveragePool", "mean over the spatial dims", &Importer::global_pool},
    {"GlobalMaxPool", "max over the spatial dims", &Importer::global_pool},
    {"Greater", "gt", &Importer::binary, OpKind::kGt},
    {"GreaterOrEqual", "maximum(gt, eq)", &Importer::less_or_equal},
    {"HardSigmoid", "mul, add, clamp", &Importer::hard_sigmoid},
    {"HardSwish", "hardswish", &Importer::unary, OpKind::kHardswish},
    {"Hardmax", "argmax, eq, cast", &Importer::hardmax},
    {"Identity", "nothing (the same tensor)", &Importer::identity},
    {"InstanceNormalization", "layer_norm over the spatial dims, mul, add", &Importer::instance_norm},
    {"IsInf", "eq", &Importer::is_inf},
    {"IsNaN", "eq", &Importer::is_nan},
    {"LayerNormalization", "layer_norm (stash_type=1); the Mean and InvStdDev outputs: mean, sub, mul, rsqrt", &Importer::layer_norm},
    {"LeakyRelu", "where, mul", &Importer::leaky_relu},
    {"Less", "lt", &Importer::binary, OpKind::kLt},
    {"LessOrEqual", "maximum(lt, eq)", &Importer::less_or_equal},
    {"Log", "log", &Importer::unary, OpKind::kLog},
    {"LogSoftmax", "log_softmax", &Importer::softmax},
    {"MatMul", "matmul", &Importer::matmul},
    {"Max", "maximum", &Importer::variadic, OpKind::kMaximum},
    {"MaxPool", "max_pool2d; asymmetric pads or ceil_mode: -inf pad first", &Importer::max_pool},
    {"Mean", "add, div", &Importer::mean_n},
    {"Min", "minimum", &Importer::variadic, OpKind::kMinimum},
    {"Mish", "mul, tanh, log, exp", &Importer::mish},
    {"Mod", "remainder (fmod=0), fmod (fmod=1)", &Importer::mod},
    {"Mul", "mul", &Importer::binary, OpKind::kMul},
    {"Neg", "neg", &Importer::unary, OpKind::kNeg},
    {"Not", "eq(x, false)", &Importer::not_},
    {"Or", "maximum (bool)", &Importer::and_or_xor},
    {"PRelu", "where, mul", &Importer::prelu},
    {"Pad", "pad (mode=constant, the 4 innermost dims)", &Importer::pad},
    {"Pow", "pow", &Importer::pow},
    {"Range", "folded; long ranges: arange", &Importer::range},
    {"Reciprocal", "div", &Importer::reciprocal},
    {"ReduceL1", "sum, abs", &Importer::reduce},
    {"ReduceL2", "sqrt, sum, mul", &Importer::reduce},
    {"ReduceLogSum", "log, sum", &Importer::reduce},
    {"ReduceLogSumExp", "log, sum, exp", &Importer::reduce},
    {"ReduceMax", "max", &Importer::reduce},
    {"ReduceMean", "mean", &Importer::reduce},
    {"ReduceMin", "min", &Importer::reduce},
    {"ReduceSum", "sum", &Importer::reduce},
    {"ReduceSumSquare", "sum, mul", &Importer::reduce},
    {"Relu", "relu", &Importer::unary, OpKind::kRelu},
    {"Reshape", "reshape", &Importer::reshape},
    {"Resize", "resize_nearest2d, resize_linear2d (rank 4, the 2 last dims)", &Importer::resize},
    {"Round", "round", &Importer::unary, OpKind::kRound},
    {"ScatterElements", "scatter_elements (reduction none, add, mul)", &Importer::scatter_elements},
    {"Selu", "where, exp, mul", &Importer::selu},
    {"Shape", "folded", &Importer::shape},
    {"Sigmoid", "sigmoid", &Importer::unary, OpKind::kSigmoid},
    {"Sign", "gt, lt, cast, sub", &Importer::sign},
    {"Sin", "sin", &Importer::unary, OpKind::kSin},
    {"Size", "folded", &Importer::size},
    {"Slice", "slice per axis; negative steps: index_select", &Importer::slice},
    {"Softmax", "softmax", &Importer::softmax},
    {"Softplus", "log, add, exp", &Importer::softplus},
    {"Softsign", "div, add, abs", &Importer::softsign},
    {"SpaceToDepth", "reshape, permute, reshape", &Importer::space_to_depth},
    {"Split", "slice per output", &Importer::split},
    {"Sqrt", "sqrt", &Importer::unary, OpKind::kSqrt},
    {"Squeeze", "reshape", &Importer::squeeze},
    {"Sub", "sub", &Importer::binary, OpKind::kSub},
    {"Sum", "add", &Importer::variadic, OpKind::kAdd},
    {"Tanh", "tanh", &Importer::unary, OpKind::kTanh},
    {"ThresholdedRelu", "where", &Importer::thresholded_relu},
    {"Tile", "reshape, broadcast_to, reshape", &Importer::tile},
    {"TopK", "topk, topk_indices", &Importer::topk},
    {"Transpose", "permute", &Importer::transpose},
    {"Trilu", "where with a mask (arange, sub, gt or lt) folded when small", &Importer::trilu},
    {"Unsqueeze", "reshape", &Importer::unsqueeze},
    {"Where", "where", &Importer::where},
    {"Xor", "eq(eq(a, b), false)", &Importer::and_or_xor},
};

std::span<const OpRow> op_rows() { return kRows; }

std::vector<SupportedOp> make_supported() {
  std::vector<SupportedOp> out;
  for (const OpRow& r : kRows) out.push_back({r.onnx, r.lowering});
  return out;
}

Result<ImportedModel> import_model(const ::onnx::ModelProto& model, std::string name, const std::string& model_dir,
                                   const ImportOptions& options, std::string* unsupported_reason) {
  // The checker would look for external data relative to the working directory: it checks a
  // copy whose external tensors are empty; tensor_to_buffer checks their locations (inside the
  // model's directory), offsets and lengths when they are read.
  const ::onnx::ModelProto* to_check = &model;
  ::onnx::ModelProto without_external;
  const auto& inits = model.graph().initializer();
  if (std::any_of(inits.begin(), inits.end(), [](const TensorProto& t) { return t.data_location() == TensorProto::EXTERNAL; })) {
    without_external = model;
    for (TensorProto& t : *without_external.mutable_graph()->mutable_initializer()) {
      if (t.data_location() != TensorProto::EXTERNAL) continue;
      t.clear_external_data();
      t.set_data_location(TensorProto::DEFAULT);
      t.clear_dims();
      t.add_dims(0);
    }
    to_check = &without_external;
  }
  try {
    ::onnx::checker::check_model(*to_check);
  } catch (const std::exception& e) {
    return invalid_argument(fmt::format("{}: the ONNX checker refuses the model: {}", name, e.what()));
  }
  ImportOptions o = options;
  if (o.file_name.empty()) o.file_name = fs::path(name).replace_extension(".trace").filename().string();
  try {
    Importer importer(model, name, model_dir, o);
    return importer.run();
  } catch (const ImportFailure& f) {
    if (unsupported_reason && f.status.code() == StatusCode::kUnsupported) *unsupported_reason = f.reason;
    return f.status;
  } catch (const Error& e) {
    return invalid_argument(fmt::format("{}: {}", name, e.status().message()));
  } catch (const std::exception& e) {
    return invalid_argument(fmt::format("{}: the model cannot be imported: {}", name, e.what()));
  }
}

}  // namespace

Result<InputShape> parse_input_shape(std::string_view spec) {
  const size_t eq = spec.rfind('=');
  const size_t open = spec.find('[', eq == std::string_view::npos ? 0 : eq);
  auto bad = [&] {
    return invalid_argument(fmt::format("--shape '{}': expected NAME=DTYPE[d0, d1, ...] (e.g. x=f32[1, 3, 224, 224])", spec));
  };
  if (eq == std::string_view::npos || eq == 0 || open == std::string_view::npos || spec.back() != ']') return bad();
  InputShape s;
  s.name = std::string(spec.substr(0, eq));
  std::optional<DType> dtype = parse_dtype(spec.substr(eq + 1, open - eq - 1));
  if (!dtype) return bad();
  s.dtype = *dtype;
  std::string_view body = spec.substr(open + 1, spec.size() - open - 2);
  while (!body.empty()) {
    while (!body.empty() && (body.front() == ' ' || body.front() == ',')) body.remove_prefix(1);
    if (body.empty()) break;
    int64_t v = 0;
    auto [end, ec] = std::from_chars(body.data(), body.data() + body.size(), v);
    if (ec != std::errc() || v < 0) return bad();
    s.dims.push_back(v);
    body.remove_prefix(static_cast<size_t>(end - body.data()));
    if (!body.empty() && body.front() != ',' && body.front() != ' ') return bad();
  }
  return s;
}

Result<ImportedModel> import_onnx_bytes(std::string_view bytes, std::string_view name, const std::string& model_dir,
                                        const ImportOptions& options, std::string* unsupported_reason) {
  if (bytes.size() > kMaxOnnxModelBytes) {
    return invalid_argument(fmt::format("{}: {} bytes is larger than the limit of {} bytes for an ONNX file (store "
                                        "weights as external data)", name, bytes.size(), kMaxOnnxModelBytes));
  }
  ::onnx::ModelProto model;
  google::protobuf::io::CodedInputStream stream(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                static_cast<int>(bytes.size()));
  stream.SetTotalBytesLimit(INT_MAX);
  if (!model.ParseFromCodedStream(&stream) || !stream.ConsumedEntireMessage()) {
    return parse_error(fmt::format("{}: not an ONNX model (the protobuf ModelProto does not parse: truncated or another "
                                   "kind of file)", name));
  }
  return import_model(model, std::string(name), model_dir, options, unsupported_reason);
}

Result<ImportedModel> import_onnx(const std::string& path, const ImportOptions& options, std::string* unsupported_reason) {
  Result<InputFile> file = InputFile::open(path);
  if (!file.is_ok()) return file.status();
  if (file->size() > kMaxOnnxModelBytes) {
    return invalid_argument(fmt::format("{}: {} bytes is larger than the limit of {} bytes for an ONNX file (store "
                                        "weights as external data)", path, file->size(), kMaxOnnxModelBytes));
  }
  Result<std::string> bytes = file->read_all();
  if (!bytes.is_ok()) return bytes.status();
  std::error_code ec;
  const std::string dir = fs::absolute(path, ec).parent_path().string();
  return import_onnx_bytes(*bytes, fs::path(path).filename().string(), dir, options, unsupported_reason);
}

Status write_params(const ImportedModel& model, const std::string& path) {
  std::vector<NamedBuffer> tensors;
  for (const auto& [label, buf] : model.params) tensors.push_back({label, &buf});
  return write_safetensors(path, tensors, {{"format", "pt"}, {"source", "tracecache import"}});
}

std::span<const SupportedOp> supported_ops() {
  static const std::vector<SupportedOp> ops = make_supported();
  return ops;
}

}  // namespace tracecache::onnx_import
