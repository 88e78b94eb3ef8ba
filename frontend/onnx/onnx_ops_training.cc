// ONNX op handlers: the optimizer steps of the domain ai.onnx.preview.training (Adagrad,
// Momentum, Adam), elementwise formulas over each optimized tensor (the handler contract:
// onnx_lowering.h). Inputs: the learning rate R and the step count T (scalars, from data or
// constant), then each group of tensors (X..., G..., and the optimizer's state); outputs the new
// X... then the new state, group by group. The formulas are ONNX's (defs/training/defs.cc and
// its backend test's reference).
#include "frontend/onnx/onnx_lowering.h"

#include <fmt/format.h>

namespace tracecache::onnx_import::detail {

namespace {

// The count of optimized tensors: the inputs after R and T come in `groups` lists of equal length.
int tensor_count(const NodeProto& node, int groups, std::string_view where) {
  const int n = node.input_size() - 2;
  if (n <= 0 || n % groups != 0 || node.output_size() > n) {
    fail_invalid(fmt::format("{}: expected R, T and {} lists of tensors of equal length", where, groups));
  }
  return n / groups;
}

}  // namespace

// r = R / (1 + T · decay_factor); g = norm_coefficient · X + G; H' = H + g²;
// X' = X - r · g / (sqrt(H') + epsilon).
void Importer::adagrad() {
  const int n = tensor_count(*node_, 3, where_());
  const double decay = attr_float("decay_factor", 0.0f), eps = attr_float("epsilon", 1e-6f);
  const double norm = attr_float("norm_coefficient", 0.0f);
  V rate = in(0);
  V t = cast_to(in(1), rate->type.dtype);
  V r = op(OpKind::kDiv, {rate, op(OpKind::kAdd, {op(OpKind::kMul, {t, decay}), 1.0})});
  for (int k = 0; k < n; ++k) {
    V x = in(2 + k), g = in(2 + n + k), h = in(2 + 2 * n + k);
    V reg = op(OpKind::kAdd, {op(OpKind::kMul, {x, norm}), g});
    V h_new = op(OpKind::kAdd, {h, op(OpKind::kMul, {reg, reg})});
    V denom = op(OpKind::kAdd, {op(OpKind::kSqrt, {h_new}), eps});
    out(k, cast_to(op(OpKind::kSub, {x, op(OpKind::kDiv, {op(OpKind::kMul, {r, reg}), denom})}), x->type.dtype));
    out(n + k, cast_to(h_new, h->type.dtype));
  }
}

// g = norm_coefficient · X + G; V' = alpha · V + beta' · g with beta' = beta after the first
// step (T > 0), 1 at it; standard: X' = X - R · V'; nesterov: X' = X - R · (g + alpha · V').
void Importer::momentum() {
  const int n = tensor_count(*node_, 3, where_());
  const double alpha = attr_float("alpha", 0.0f), beta = attr_float("beta", 0.0f);
  const double norm = attr_float("norm_coefficient", 0.0f);
  const std::string mode = attr_string("mode", "standard");
  if (mode != "standard" && mode != "nesterov") node_unsupported("mode=" + mode);
  V rate = in(0);
  V beta_now = op(OpKind::kWhere, {op(OpKind::kGt, {in(1), 0.0}), beta, 1.0});
  for (int k = 0; k < n; ++k) {
    V x = in(2 + k), g = in(2 + n + k), v = in(2 + 2 * n + k);
    V reg = op(OpKind::kAdd, {op(OpKind::kMul, {x, norm}), g});
    V v_new = op(OpKind::kAdd, {op(OpKind::kMul, {v, alpha}), op(OpKind::kMul, {beta_now, reg})});
    V step = mode == "standard" ? v_new : op(OpKind::kAdd, {reg, op(OpKind::kMul, {v_new, alpha})});
    out(k, cast_to(op(OpKind::kSub, {x, op(OpKind::kMul, {rate, step})}), x->type.dtype));
    out(n + k, cast_to(v_new, v->type.dtype));
  }
}

// g = norm_coefficient · X + G; V' = alpha · V + (1 - alpha) · g; H' = beta · H + (1 - beta) · g²;
// r = R · sqrt(1 - beta^T) / (1 - alpha^T) after the first step (T > 0), R at it;
// X' = (1 - norm_coefficient_post) · (X - r · V' / (sqrt(H') + epsilon)).
void Importer::adam() {
  const int n = tensor_count(*node_, 4, where_());
  const double alpha = attr_float("alpha", 0.9f), beta = attr_float("beta", 0.999f);
  const double eps = attr_float("epsilon", 1e-6f), norm = attr_float("norm_coefficient", 0.0f);
  const double post = attr_float("norm_coefficient_post", 0.0f);
  V rate = in(0);
  V t = cast_to(in(1), rate->type.dtype);
  V corrected = op(OpKind::kDiv, {op(OpKind::kMul, {rate, op(OpKind::kSqrt, {op(OpKind::kSub, {1.0, op(OpKind::kPow, {beta, t})})})}),
                                  op(OpKind::kSub, {1.0, op(OpKind::kPow, {alpha, t})})});
  V r = op(OpKind::kWhere, {op(OpKind::kGt, {in(1), 0.0}), corrected, rate});
  for (int k = 0; k < n; ++k) {
    V x = in(2 + k), g = in(2 + n + k), v = in(2 + 2 * n + k), h = in(2 + 3 * n + k);
    V reg = op(OpKind::kAdd, {op(OpKind::kMul, {x, norm}), g});
    V v_new = op(OpKind::kAdd, {op(OpKind::kMul, {v, alpha}), op(OpKind::kMul, {reg, 1.0 - alpha})});
    V h_new = op(OpKind::kAdd, {op(OpKind::kMul, {h, beta}), op(OpKind::kMul, {op(OpKind::kMul, {reg, reg}), 1.0 - beta})});
    V denom = op(OpKind::kAdd, {op(OpKind::kSqrt, {h_new}), eps});
    V x_new = op(OpKind::kSub, {x, op(OpKind::kMul, {r, op(OpKind::kDiv, {v_new, denom})})});
    out(k, cast_to(op(OpKind::kMul, {x_new, 1.0 - post}), x->type.dtype));
    out(n + k, cast_to(v_new, v->type.dtype));
    out(2 * n + k, cast_to(h_new, h->type.dtype));
  }
}

}  // namespace tracecache::onnx_import::detail
