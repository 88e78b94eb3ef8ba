// ONNX op handlers: elementwise ops and activations (the handler contract: onnx_lowering.h).
#include "frontend/onnx/onnx_lowering.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace tracecache::onnx_import::detail {

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

// Inference (or training with ratio 0): the identity, and a mask of trues. Training with a
// ratio above 0 is random: refused.
void Importer::dropout() {
  V x = in(0);
  attr_int("seed", 0);
  if (has_in(2) && scalar_of(in(2), "training_mode") != 0 && (!has_in(1) || scalar_of(in(1), "ratio") != 0)) {
    node_unsupported("training_mode=true with a ratio above 0 (random)");
  }
  out(0, x);
  if (out_used(1)) {
    out(1, op(OpKind::kFull, {}, {{"shape", ints(dims_of(x->type.shape))}, {"value", f(1)}, {"dtype", AttrValue::of_dtype(DType::kBool)}}));
  }
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

void Importer::shrink() {
  V x = in(0);
  const double lambd = attr_float("lambd", 0.5f), bias = attr_float("bias", 0.0f);
  V below = op(OpKind::kLt, {x, -lambd}), above = op(OpKind::kGt, {x, lambd});
  V y = op(OpKind::kWhere, {above, op(OpKind::kSub, {x, bias}), 0.0});
  out(0, cast_to(op(OpKind::kWhere, {below, op(OpKind::kAdd, {x, bias}), y}), x->type.dtype));
}

// BitShift of unsigned integers: left is x · 2^y, right x / 2^y (trunc_div), in x's dtype, which
// wraps as ONNX's shift does (a shift by the width or more gives 0: 2^y wraps to 0 and an integer
// division by 0 is 0).
void Importer::bit_shift() {
  V x = in(0), y = in(1);
  const std::string direction = attr_string("direction", "");
  V power = op(OpKind::kPow, {2.0, y});
  if (direction == "LEFT") out(0, cast_to(op(OpKind::kMul, {x, power}), x->type.dtype));
  else if (direction == "RIGHT") out(0, cast_to(op(OpKind::kTruncDiv, {x, power}), x->type.dtype));
  else fail_invalid(where_() + ": direction must be LEFT or RIGHT");
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

}  // namespace tracecache::onnx_import::detail
