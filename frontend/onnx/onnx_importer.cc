// The ONNX importer's core (onnx_importer.h has the contract): the model is parsed (bounded),
// checked by ONNX's checker, its inputs declared, its nodes walked in order, each lowered by its
// handler from the op table (onnx_ops_*.cc, onnx_lowering.h), and values known at import time
// folded with the reference kernels.
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
#include <onnx/version_converter/convert.h>

#include "capture/reference/reference.h"
#include "capture/ops/ops.h"
#include "frontend/files/input_file.h"
#include "frontend/files/npy.h"
#include "frontend/files/safetensors.h"
#include "frontend/onnx/onnx_lowering.h"
#include "frontend/onnx/onnx_tensor.h"
#include "frontend/program/op_call.h"

namespace tracecache::onnx_import {

namespace detail {

namespace {

constexpr int64_t kMinOpset = 13, kMaxOpset = 17;

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

}  // namespace

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
    evaluate_op(info.kind, ptrs, av, result);
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
  const std::string_view domain = node.domain() == "ai.onnx" ? std::string_view() : std::string_view(node.domain());
  const auto rows = op_rows();
  auto it = std::lower_bound(rows.begin(), rows.end(), node.op_type(),
                             [](const OpRow& r, const std::string& t) { return r.onnx < t; });
  const bool found = it != rows.end() && it->onnx == node.op_type();
  if (!domain.empty() && (!found || it->domain != domain)) {
    fail_unsupported(fmt::format("op {}.{}", node.domain(), node.op_type()),
                     fmt::format("{}: op {} of domain '{}' is not supported", where_(), node.op_type(), node.domain()));
  }
  if (!found || it->domain != domain) {
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
  bool training_domain = false;
  for (const auto& o : model_.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = o.version();
    training_domain = training_domain || o.domain() == kTrainingDomain;
  }
  // A model of optimizer ops only (ONNX's checker refuses a node of a domain the model does
  // not import): the default domain's newest opset, which none of its nodes uses.
  if (opset < 0 && training_domain) opset = kMaxOpset;
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
  // Outputs that are not tensors (optional, sequence, map: tracecache holds tensors only) are
  // refused by their kind before anything is lowered.
  for (const ::onnx::ValueInfoProto& o : model_.graph().output()) {
    if (!o.has_type() || o.type().has_tensor_type()) continue;
    const std::string kind = o.type().has_optional_type()   ? "optional"
                             : o.type().has_sequence_type() ? "sequence"
                             : o.type().has_map_type()      ? "map"
                                                            : "non-tensor";
    fail_unsupported(kind + " output", fmt::format("{}: output '{}' has the {} type (tracecache holds tensors only)",
                                                    name_, o.name(), kind));
  }
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

}  // namespace detail

namespace {

namespace fs = std::filesystem;
using ::onnx::TensorProto;
using detail::Importer;
using detail::ImportFailure;

std::vector<SupportedOp> make_supported() {
  std::vector<SupportedOp> out;
  for (const detail::OpRow& r : detail::op_rows()) out.push_back({r.onnx, r.lowering});
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
  // A model of an opset before 13 is converted to opset 13 by ONNX's own version converter
  // first (the importer lowers opsets 13 to 17).
  const ::onnx::ModelProto* source = &model;
  ::onnx::ModelProto converted;
  int64_t converted_from = 0;
  for (const auto& op_set : model.opset_import()) {
    if ((op_set.domain().empty() || op_set.domain() == "ai.onnx") && op_set.version() < detail::kMinOpset) {
      converted_from = op_set.version();
      // Scan before opset 9 has a batch dim that the converter takes off the body but not the
      // model's inputs: refused rather than converted into a different model.
      const auto& nodes = model.graph().node();
      if (converted_from < 9 && std::any_of(nodes.begin(), nodes.end(), [](const auto& n) { return n.op_type() == "Scan"; })) {
        if (unsupported_reason) *unsupported_reason = "Scan of opset 8 (batched)";
        return unsupported(fmt::format("{}: Scan of opset {} (with a batch dim) is not supported; export the model with "
                                       "opset_version=9 or later", name, converted_from));
      }
      try {
        converted = ::onnx::version_conversion::ConvertVersion(model, static_cast<int>(detail::kMinOpset));
      } catch (const std::exception& e) {
        if (unsupported_reason) *unsupported_reason = fmt::format("opset {} (the version converter fails)", converted_from);
        return unsupported(fmt::format("{}: opset {} could not be converted to opset {} by ONNX's version converter "
                                       "({}); export the model with opset_version={} or later",
                                       name, converted_from, detail::kMinOpset, e.what(), detail::kMinOpset));
      }
      source = &converted;
      break;
    }
  }
  try {
    Importer importer(*source, name, model_dir, o);
    ImportedModel imported = importer.run();
    imported.converted_from_opset = converted_from;
    return imported;
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
