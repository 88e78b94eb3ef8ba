// ONNX op handlers: quantization, QuantizeLinear and DequantizeLinear (the handler contract:
// onnx_lowering.h), lowered to the registry's quantize_linear and dequantize_linear.
#include <fmt/format.h>

#include "frontend/onnx/onnx_lowering.h"

namespace tracecache::onnx_import::detail {

// A scale or zero point of x made broadcastable to x: a scalar (or one element) as it is, a 1-D
// one of x.shape[axis] elements (per channel) reshaped to [C, 1, ..., 1] with a 1 for every dim
// of x after the axis.
V Importer::quant_param(const V& p, const V& x, std::string_view what) {
  const Shape& s = p->type.shape;
  if (s.rank() == 0) return p;
  const int rank = x->type.shape.rank();
  if (s.rank() != 1 || rank == 0) {
    fail_invalid(fmt::format("{}: {} {} must be a scalar or 1-D along axis of x {}", where_(), what,
                             type_to_string(p->type), type_to_string(x->type)));
  }
  const int64_t axis = axis_of(attr_int("axis", 1), rank);
  if (s[0] != x->type.shape[axis]) {
    fail_invalid(fmt::format("{}: {} {} has {} elements; x {} has {} along axis {}", where_(), what,
                             type_to_string(p->type), s[0], type_to_string(x->type), x->type.shape[axis], axis));
  }
  std::vector<int64_t> dims(static_cast<size_t>(rank - axis), 1);
  dims[0] = s[0];
  return reshape_to(p, dims);
}

// The zero point input, or a scalar 0 of `dtype` when the node has none.
V Importer::zero_point_or(int k, DType dtype) {
  if (has_in(k)) return in(k);
  return known(HostBuffer(dtype, Shape{}));
}

void Importer::quantize_linear() {
  V x = in(0);
  V zp = zero_point_or(2, DType::kU8);
  out(0, op(OpKind::kQuantizeLinear, {x, quant_param(in(1), x, "y_scale"), quant_param(zp, x, "y_zero_point")}));
}

void Importer::dequantize_linear() {
  V x = in(0);
  V zp = zero_point_or(2, x->type.dtype);
  out(0, op(OpKind::kDequantizeLinear, {x, quant_param(in(1), x, "x_scale"), quant_param(zp, x, "x_zero_point")}));
}

// DynamicQuantizeLinear(x) -> y (u8), y_scale, y_zero_point, as ONNX defines it: the range
// [min(0, min(x)), max(0, max(x))] mapped onto [0, 255].
void Importer::dynamic_quantize_linear() {
  V x = in(0);
  if (x->type.dtype != DType::kF32) fail_invalid(where_() + ": DynamicQuantizeLinear takes a float x");
  V lo = op(OpKind::kMinimum, {reduce_with(OpKind::kMin, x, {}, false), 0.0});
  V hi = op(OpKind::kMaximum, {reduce_with(OpKind::kMax, x, {}, false), 0.0});
  V scale = op(OpKind::kDiv, {op(OpKind::kSub, {hi, lo}), 255.0});
  V zero = op(OpKind::kRound, {op(OpKind::kSub, {0.0, op(OpKind::kDiv, {lo, scale})})});
  zero = cast_to(op(OpKind::kClamp, {zero}, {{"min", f(0)}, {"max", f(255)}}), DType::kU8);
  out(0, op(OpKind::kQuantizeLinear, {x, scale, zero}));
  if (out_used(1)) out(1, scale);
  if (out_used(2)) out(2, zero);
}

}  // namespace tracecache::onnx_import::detail
