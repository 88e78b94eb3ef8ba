#include "capture/ops/grad.h"

#include "capture/ops/ops.h"

namespace tracecache {

namespace {

AttrValue ints_of(const Shape& s) { return AttrValue::of_ints(s); }

}  // namespace

GradValue GradBuilder::scalar(double value, DType dtype) { return full(Shape{}, value, dtype); }

GradValue GradBuilder::full(const Shape& shape, double value, DType dtype) {
  return op(OpKind::kFull, {}, {ints_of(shape), AttrValue::of_float(value), AttrValue::of_dtype(dtype)});
}

GradValue GradBuilder::add(GradValue a, GradValue b) { return op(OpKind::kAdd, {a, b}); }
GradValue GradBuilder::sub(GradValue a, GradValue b) { return op(OpKind::kSub, {a, b}); }
GradValue GradBuilder::mul(GradValue a, GradValue b) { return op(OpKind::kMul, {a, b}); }
GradValue GradBuilder::div(GradValue a, GradValue b) { return op(OpKind::kDiv, {a, b}); }
GradValue GradBuilder::neg(GradValue a) { return op(OpKind::kNeg, {a}); }

GradValue GradBuilder::scale(GradValue v, double c) {
  if (c == 1.0) return v;
  return mul(v, scalar(c, type(v).dtype));
}

GradValue GradBuilder::reshape(GradValue v, const Shape& shape) {
  if (type(v).shape == shape) return v;
  return op(OpKind::kReshape, {v}, {ints_of(shape)});
}

GradValue GradBuilder::broadcast_to(GradValue v, const Shape& shape) {
  if (type(v).shape == shape) return v;
  return op(OpKind::kBroadcastTo, {v}, {ints_of(shape)});
}

GradValue GradBuilder::sum_to(GradValue v, const Shape& shape) {
  const Shape& from = type(v).shape;
  if (from == shape) return v;
  const int lead = from.rank() - shape.rank();
  IntList axes;
  for (int d = 0; d < from.rank(); ++d) {
    if (d < lead || (shape[d - lead] == 1 && from[d] != 1)) axes.push_back(d);
  }
  GradValue summed = v;
  if (!axes.empty()) {
    summed = op(OpKind::kSum, {v}, {AttrValue::of_ints(axes), AttrValue::of_bool(false)});
  }
  return reshape(summed, shape);
}

GradValue GradBuilder::where(GradValue cond, GradValue a, GradValue b) {
  return op(OpKind::kWhere, {cond, a, b});
}

GradValue GradBuilder::mask_to_float(GradValue mask) {
  return op(OpKind::kCast, {mask}, {AttrValue::of_dtype(DType::kF32)});
}

}  // namespace tracecache
