// ONNX op handlers: the trigonometric and hyperbolic functions the registry has no op for (Tan,
// Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh), decomposed into exp, log, sqrt, sin, cos
// and arithmetic (the handler contract: onnx_lowering.h).
//
// Each decomposition keeps its relative error a few ulp wherever the function is well
// conditioned, which the obvious formulas do not: sinh(x) = (e^x - e^-x) / 2 loses every digit
// for |x| < 1e-4 and asinh(x) = log(x + sqrt(x^2 + 1)) as many, so small arguments go through
// expm1 and log1p, written with Kahan's and Goldberg's identities (log1p_ and expm1_ below). Atan
// is a series after argument reduction (atan_). tests/frontend/onnx_decompositions_test.cc checks
// each against the C library over small, large, boundary and special arguments.
#include "frontend/onnx/onnx_lowering.h"

#include <cmath>
#include <limits>
#include <numbers>

namespace tracecache::onnx_import::detail {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Above this, sqrt(x^2 ± 1) is x to far below an ulp, and x^2 could overflow f32: asinh and
// acosh are log(x) + log(2) there.
constexpr double kLargeArgument = 1e9;
// Above this, e^-|x| is below 2^-57 of e^|x|: sinh and cosh are e^|x| / 2 there.
constexpr double kExpDominates = 20;

}  // namespace

// log(1 + u), accurate for small |u|: with w = 1 + u rounded, log(w) · u / (w - 1) cancels the
// rounding of w (Goldberg, "What every computer scientist should know about floating-point
// arithmetic", theorem 4); u itself where w rounds to 1. log1p(-1) = -inf, log1p(inf) = inf.
V Importer::log1p_(const V& u) {
  V w = op(OpKind::kAdd, {u, 1.0});
  V general = op(OpKind::kMul, {op(OpKind::kLog, {w}), op(OpKind::kDiv, {u, op(OpKind::kSub, {w, 1.0})})});
  V y = op(OpKind::kWhere, {op(OpKind::kEq, {w, 1.0}), u, general});
  return op(OpKind::kWhere, {op(OpKind::kEq, {w, kInf}), w, y});
}

// e^x - 1 for 0 <= x < kExpDominates, accurate for small x: with u = e^x rounded,
// (u - 1) · x / log(u) cancels the rounding of u (Kahan); x itself where u rounds to 1.
V Importer::expm1_nonnegative(const V& x) {
  V u = op(OpKind::kExp, {x});
  V general = op(OpKind::kMul, {op(OpKind::kSub, {u, 1.0}), op(OpKind::kDiv, {x, op(OpKind::kLog, {u})})});
  return op(OpKind::kWhere, {op(OpKind::kEq, {u, 1.0}), x, general});
}

// atan(x): |x| > 1 is reduced by atan(x) = pi/2 - atan(1/x), then t > tan(pi/8) by
// atan(t) = pi/4 + atan((t - 1) / (t + 1)), leaving |u| <= tan(pi/8) = 0.4142, where the
// alternating series u - u^3/3 + u^5/5 - ... stops after its term u^(2n-1)/(2n-1): the error is
// below the first term left out, u^(2n+1)/(2n+1), relative u^(2n)/(2n+1) <= 0.1716^n/(2n+1):
// 7e-9 with n = 9 terms (f32 and the 16-bit floats), 4e-17 with n = 20 (f64). The sign is put
// back last (atan is odd); NaN stays NaN; ±inf gives ±pi/2.
V Importer::atan_(const V& x) {
  constexpr double kTanPiOver8 = 0.41421356237309504880;
  const int terms = x->type.dtype == DType::kF64 ? 20 : 9;
  V a = op(OpKind::kAbs, {x});
  V big = op(OpKind::kGt, {a, 1.0});
  V t = op(OpKind::kWhere, {big, op(OpKind::kDiv, {1.0, a}), a});
  V mid = op(OpKind::kGt, {t, kTanPiOver8});
  V u = op(OpKind::kWhere, {mid, op(OpKind::kDiv, {op(OpKind::kSub, {t, 1.0}), op(OpKind::kAdd, {t, 1.0})}), t});
  V z = op(OpKind::kMul, {u, u});
  // Horner in z: sum over k < terms of (-1)^k z^k / (2k + 1), the last coefficient first.
  auto coefficient = [](int k) { return (k % 2 == 0 ? 1.0 : -1.0) / (2.0 * k + 1.0); };
  V p = op(OpKind::kAdd, {op(OpKind::kMul, {z, coefficient(terms - 1)}), coefficient(terms - 2)});
  for (int k = terms - 3; k >= 0; --k) p = op(OpKind::kAdd, {op(OpKind::kMul, {p, z}), coefficient(k)});
  V r = op(OpKind::kMul, {u, p});
  r = op(OpKind::kWhere, {mid, op(OpKind::kAdd, {r, std::numbers::pi / 4}), r});
  r = op(OpKind::kWhere, {big, op(OpKind::kSub, {std::numbers::pi / 2, r}), r});
  return op(OpKind::kWhere, {op(OpKind::kLt, {x, 0.0}), op(OpKind::kNeg, {r}), r});
}

// ---- handlers: trigonometric and hyperbolic functions --------------------------------------------

void Importer::tan() {
  V x = in(0);
  require_floating(x, "input");
  out(0, op(OpKind::kDiv, {op(OpKind::kSin, {x}), op(OpKind::kCos, {x})}));
}

void Importer::atan() {
  V x = in(0);
  require_floating(x, "input");
  out(0, atan_(x));
}

// asin(x) = atan(x / sqrt((1 - x)(1 + x))): ±1 gives ±inf, whose atan is ±pi/2; |x| > 1 NaN.
void Importer::asin() {
  V x = in(0);
  require_floating(x, "input");
  V cos = op(OpKind::kSqrt, {op(OpKind::kMul, {op(OpKind::kSub, {1.0, x}), op(OpKind::kAdd, {x, 1.0})})});
  out(0, atan_(op(OpKind::kDiv, {x, cos})));
}

// acos(x) = 2 atan(sqrt((1 - x) / (1 + x))): no cancellation near either end (-1 gives
// 2 atan(inf) = pi, 1 gives 0); |x| > 1 NaN.
void Importer::acos() {
  V x = in(0);
  require_floating(x, "input");
  V half_tan = op(OpKind::kSqrt, {op(OpKind::kDiv, {op(OpKind::kSub, {1.0, x}), op(OpKind::kAdd, {x, 1.0})})});
  out(0, op(OpKind::kMul, {atan_(half_tan), 2.0}));
}

// sinh(|x|) = (m + m / (m + 1)) / 2 with m = expm1(|x|) (exact algebra: e - 1/e over 2), e^|x| / 2
// as e^(|x|/2) · (e^(|x|/2) / 2) from kExpDominates on (no overflow before the result's); the
// sign put back.
void Importer::sinh() {
  V x = in(0);
  require_floating(x, "input");
  V a = op(OpKind::kAbs, {x});
  V m = expm1_nonnegative(a);
  V near = op(OpKind::kMul, {op(OpKind::kAdd, {m, op(OpKind::kDiv, {m, op(OpKind::kAdd, {m, 1.0})})}), 0.5});
  V h = op(OpKind::kExp, {op(OpKind::kMul, {a, 0.5})});
  V far = op(OpKind::kMul, {h, op(OpKind::kMul, {h, 0.5})});
  V r = op(OpKind::kWhere, {op(OpKind::kLt, {a, kExpDominates}), near, far});
  out(0, op(OpKind::kWhere, {op(OpKind::kLt, {x, 0.0}), op(OpKind::kNeg, {r}), r}));
}

// cosh(x) = (e^|x| + e^-|x|) / 2 (a sum of positive terms), e^|x| / 2 from kExpDominates on as in
// sinh.
void Importer::cosh() {
  V x = in(0);
  require_floating(x, "input");
  V a = op(OpKind::kAbs, {x});
  V e = op(OpKind::kExp, {a});
  V near = op(OpKind::kMul, {op(OpKind::kAdd, {e, op(OpKind::kDiv, {1.0, e})}), 0.5});
  V h = op(OpKind::kExp, {op(OpKind::kMul, {a, 0.5})});
  V far = op(OpKind::kMul, {h, op(OpKind::kMul, {h, 0.5})});
  out(0, op(OpKind::kWhere, {op(OpKind::kLt, {a, kExpDominates}), near, far}));
}

// asinh(|x|) = log1p(|x| + x^2 / (1 + sqrt(x^2 + 1))) (exact algebra: |x| + sqrt(x^2 + 1) - 1),
// log(|x|) + log(2) above kLargeArgument; the sign put back.
void Importer::asinh() {
  V x = in(0);
  require_floating(x, "input");
  V a = op(OpKind::kAbs, {x});
  V sq = op(OpKind::kMul, {a, a});
  V root = op(OpKind::kSqrt, {op(OpKind::kAdd, {sq, 1.0})});
  V near = log1p_(op(OpKind::kAdd, {a, op(OpKind::kDiv, {sq, op(OpKind::kAdd, {root, 1.0})})}));
  V far = op(OpKind::kAdd, {op(OpKind::kLog, {a}), std::numbers::ln2});
  V r = op(OpKind::kWhere, {op(OpKind::kGt, {a, kLargeArgument}), far, near});
  out(0, op(OpKind::kWhere, {op(OpKind::kLt, {x, 0.0}), op(OpKind::kNeg, {r}), r}));
}

// acosh(x) = log1p(d + sqrt(d (x + 1))) with d = x - 1 (exact algebra: x + sqrt(x^2 - 1) - 1;
// d is exact near 1, where acosh is steep), log(x) + log(2) above kLargeArgument; x < 1 NaN.
void Importer::acosh() {
  V x = in(0);
  require_floating(x, "input");
  V d = op(OpKind::kSub, {x, 1.0});
  V near = log1p_(op(OpKind::kAdd, {d, op(OpKind::kSqrt, {op(OpKind::kMul, {d, op(OpKind::kAdd, {x, 1.0})})})}));
  V far = op(OpKind::kAdd, {op(OpKind::kLog, {x}), std::numbers::ln2});
  out(0, op(OpKind::kWhere, {op(OpKind::kGt, {x, kLargeArgument}), far, near}));
}

// atanh(x) = log1p(2x / (1 - x)) / 2 (exact algebra: log((1 + x) / (1 - x)) / 2): ±1 gives ±inf,
// |x| > 1 NaN.
void Importer::atanh() {
  V x = in(0);
  require_floating(x, "input");
  V ratio = op(OpKind::kDiv, {op(OpKind::kMul, {x, 2.0}), op(OpKind::kSub, {1.0, x})});
  out(0, op(OpKind::kMul, {log1p_(ratio), 0.5}));
}

}  // namespace tracecache::onnx_import::detail
