// ONNX op handlers: constants, shapes and casts (the handler contract: onnx_lowering.h).
#include "frontend/onnx/onnx_lowering.h"

#include <cmath>
#include <numbers>

#include <fmt/format.h>

#include "frontend/onnx/onnx_tensor.h"

namespace tracecache::onnx_import::detail {

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

// HannWindow, HammingWindow, BlackmanWindow: sum_j a_j cos(2 pi j k / N) for k < size, N = size
// (periodic) or size - 1 (symmetric), computed at import in double and rounded once to the
// output dtype; the size must be known.
void Importer::window() {
  const double n_d = scalar_of(in(0), "size");
  const bool periodic = attr_int("periodic", 1) != 0;
  const auto to = static_cast<int32_t>(attr_int("output_datatype", ::onnx::TensorProto::FLOAT));
  std::optional<DType> dtype = dtype_from_onnx(to);
  if (!dtype) node_unsupported("output_datatype " + onnx_type_name(to));
  if (!(n_d >= 0) || n_d > static_cast<double>(kFoldLimit)) {
    node_unsupported(fmt::format("a size of {} (at most {}, computed at import)", n_d, kFoldLimit));
  }
  const auto n = static_cast<int64_t>(n_d);
  std::vector<double> a;
  const std::string& t = node_->op_type();
  if (t == "HannWindow") a = {0.5, -0.5};
  else if (t == "HammingWindow") a = {25.0 / 46.0, -(1.0 - 25.0 / 46.0)};
  else a = {0.42, -0.5, 0.08};  // BlackmanWindow
  const double denom = static_cast<double>(periodic ? n : n - 1);
  HostBuffer buf(DType::kF64, Shape{n});
  for (int64_t k = 0; k < n; ++k) {
    double y = 0;
    for (size_t j = 0; j < a.size(); ++j) y += a[j] * std::cos(2 * std::numbers::pi * static_cast<double>(j * k) / denom);
    buf.data<double>()[k] = y;
  }
  out(0, cast_to(known(std::move(buf)), *dtype));
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

}  // namespace tracecache::onnx_import::detail
