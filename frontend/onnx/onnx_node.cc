// The node being lowered (its inputs, outputs, attributes, errors) and the lowering helpers the
// ONNX op handlers share (onnx_lowering.h).
#include "frontend/onnx/onnx_lowering.h"

#include <fmt/format.h>

namespace tracecache::onnx_import::detail {

AttrValue ints(const std::vector<int64_t>& v) {
  if (v.size() > static_cast<size_t>(kMaxRank)) {
    fail_unsupported("rank above 8", fmt::format("a list of {} entries (tracecache's limit is {})", v.size(), kMaxRank));
  }
  return AttrValue::of_ints(IntList(std::span<const int64_t>(v)));
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

void Importer::require_floating(const V& v, std::string_view what) {
  if (!is_floating(v->type.dtype)) {
    fail_invalid(fmt::format("{}: {} of dtype {} must be a floating-point tensor", where_(), what,
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

V Importer::shift_along(const V& x, int64_t axis, int64_t by, bool backward) {
  const int r = x->type.shape.rank();
  const int64_t dim = x->type.shape[static_cast<int>(axis)];
  if (axis >= r - 4) {
    // One pad: `by` zeros before and `by` cropped after (or the reverse).
    std::vector<int64_t> pads(static_cast<size_t>(2 * (r - axis)), 0);
    const auto at = static_cast<size_t>(2 * (r - 1 - axis));
    pads[at] = backward ? -by : by;
    pads[at + 1] = backward ? by : -by;
    return op(OpKind::kPad, {x}, {{"pads", ints(pads)}, {"value", f(0)}});
  }
  const int64_t moved = std::max<int64_t>(dim - by, 0);
  std::vector<int64_t> zeros_dims = dims_of(x->type.shape);
  zeros_dims[static_cast<size_t>(axis)] = dim - moved;
  V zeros = op(OpKind::kFull, {}, {{"shape", ints(zeros_dims)}, {"value", f(0)}, {"dtype", AttrValue::of_dtype(x->type.dtype)}});
  V kept = backward ? op(OpKind::kSlice, {x}, {{"axis", i(axis)}, {"start", i(dim - moved)}, {"end", i(dim)}})
                    : op(OpKind::kSlice, {x}, {{"axis", i(axis)}, {"start", i(0)}, {"end", i(moved)}});
  return backward ? op(OpKind::kConcat, {kept, zeros}, {{"axis", i(axis)}})
                  : op(OpKind::kConcat, {zeros, kept}, {{"axis", i(axis)}});
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

}  // namespace tracecache::onnx_import::detail
