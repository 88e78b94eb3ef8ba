// The nn activations, normalization and attention ops (capture/trace/nn.h, docs/ops.md):
//  - each reference kernel against small values worked out by hand from PyTorch's documented
//    formulas (and the edge cases docs/ops.md promises: NaN, ±inf, -0.0, saturation);
//  - the inference rules: normalization and errors that name the op;
//  - the cpu kernels against the reference on edge cases the generic suite (cpu_kernels_test)
//    does not reach: bitwise for everything but attention, which is within its BLAS bound;
//  - fusion: chains with the new activations compile to one fused kernel and give the
//    reference's bits on the cpu runtime;
//  - the Tensor API (nn.h) and a trace program that names every new op.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "capture/trace/nn.h"
#include "capture/ops/attr_views.h"
#include "capture/ops/ops.h"
#include "frontend/program/program.h"
#include "frontend/program/program_runner.h"
#include "capture/reference/reference.h"
#include "replay/compile/compiler.h"
#include "replay/backends/cpu/cpu_backend.h"
#include "replay/backends/cpu/cpu_kernels.h"
#include "replay/engine/runtime.h"
#include "tests/attention_bound.h"
#include "tests/backend_compare.h"
#include "tests/test_graphs.h"
#include "tests/test_buffers.h"

namespace tracecache {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kInfd = std::numeric_limits<double>::infinity();

using NamedAttrs = std::vector<std::pair<std::string_view, AttrValue>>;

AttrValue num(int64_t v) { return AttrValue::of_int(v); }
AttrValue real(double v) { return AttrValue::of_float(v); }
AttrValue flag(bool v) { return AttrValue::of_bool(v); }

using test::make;
using test::f32;

// Attributes of `kind` with defaults filled and `named` applied, in registry order.
std::vector<AttrValue> attrs_of(OpKind kind, const NamedAttrs& named) {
  const OpInfo& info = op_info(kind);
  std::vector<AttrValue> attrs;
  for (const AttrSpec& spec : info.attrs) attrs.push_back(spec.default_value);
  for (const auto& [name, value] : named) {
    const int i = info.attr_index(name);
    EXPECT_GE(i, 0) << info.name << " has no attribute " << name;
    if (i >= 0) attrs[static_cast<size_t>(i)] = value;
  }
  return attrs;
}

TensorType infer(OpKind kind, const std::vector<TensorType>& in, const NamedAttrs& named = {}) {
  std::vector<AttrValue> attrs = attrs_of(kind, named);
  return infer_op(kind, in, attrs).value_or_throw();
}

// Runs `kind`'s reference kernel as the tracer would (attributes normalized by infer_op); the
// output is poisoned first so unwritten elements are caught.
HostBuffer run(OpKind kind, std::vector<const HostBuffer*> in, const NamedAttrs& named = {}) {
  std::vector<AttrValue> attrs = attrs_of(kind, named);
  std::vector<TensorType> types;
  for (const HostBuffer* b : in) types.push_back({b->dtype(), b->shape()});
  const TensorType t = infer_op(kind, types, attrs).value_or_throw();
  HostBuffer out(t.dtype, t.shape);
  if (t.dtype != DType::kBool) std::memset(out.bytes(), 0xA5, out.nbytes());
  op_info(kind).reference(in, attrs, out);
  return out;
}

// dtype, shape and values: f32 within 4 ulp, or within rel * |want| when rel > 0 (NaN matches
// NaN), integers exactly.
void expect_values(const HostBuffer& b, DType dtype, const Shape& shape, const std::vector<double>& want,
                   double rel = 0) {
  EXPECT_EQ(dtype_name(b.dtype()), dtype_name(dtype));
  EXPECT_EQ(b.shape().to_string(), shape.to_string());
  ASSERT_EQ(b.numel(), static_cast<int64_t>(want.size()));
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double got = b.element_as_double(i), w = want[static_cast<size_t>(i)];
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(got)) << "element " << i << " is " << got << ", want NaN";
    } else if (b.dtype() == DType::kF32 && rel > 0 && std::isfinite(w)) {
      EXPECT_NEAR(got, w, rel * std::fabs(w)) << "element " << i;
    } else if (b.dtype() == DType::kF32) {
      EXPECT_FLOAT_EQ(static_cast<float>(got), static_cast<float>(w)) << "element " << i;
    } else {
      EXPECT_EQ(got, w) << "element " << i;
    }
  }
}

// The message of the Error `fn` throws ("" if none).
template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.status().message();
  }
  return "";
}

// ---- activations: reference values --------------------------------------------------------

const std::vector<float> kActInputs = {-kInf, -3.0f, -1.0f, -0.0f, 0.5f, 1.0f, 3.0f, kInf, kNaN};

TEST(NnReference, GeluErfForm) {
  // x * Phi(x): Phi(1) = 0.841344746, Phi(0.5) = 0.691462461, Phi(3) = 0.998650102,
  // Phi(-3) = 0.001349898. -inf gives NaN (-inf * 0), as PyTorch. The expected values are the
  // exact ones; 1 + erf(x / sqrt2) cancels for negative x (a relative error of ~2^-24 / Phi(x)),
  // hence the relative tolerance.
  const HostBuffer x = f32({9}, kActInputs);
  expect_values(run(OpKind::kGelu, {&x}), DType::kF32, {9},
                {NAN, -0.004049694, -0.15865525, 0.0, 0.34573123, 0.84134475, 2.9959503, INFINITY, NAN},
                1e-5);
}

TEST(NnReference, GeluTanhForm) {
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), e.g. x = 1: tanh(0.8343) = 0.682384.
  const HostBuffer x = f32({9}, kActInputs);
  expect_values(run(OpKind::kGelu, {&x}, {{"tanh", flag(true)}}), DType::kF32, {9},
                {NAN, -0.0036374330, -0.15880801, 0.0, 0.34571400, 0.84119199, 2.9963627, INFINITY, NAN});
}

TEST(NnReference, SiluIsXTimesSigmoid) {
  const HostBuffer x = f32({9}, kActInputs);
  expect_values(run(OpKind::kSilu, {&x}), DType::kF32, {9},
                {NAN, -0.14227762, -0.26894142, 0.0, 0.31122968, 0.73105858, 2.8577223, INFINITY, NAN});
}

TEST(NnReference, HardsigmoidAndHardswish) {
  const HostBuffer x = f32({9}, kActInputs);
  // relu6(x + 3) / 6.
  expect_values(run(OpKind::kHardsigmoid, {&x}), DType::kF32, {9},
                {0.0, 0.0, 1.0 / 3, 0.5, 3.5 / 6, 4.0 / 6, 1.0, 1.0, NAN});
  // x * relu6(x + 3) / 6; -inf * 0 is NaN, as in PyTorch.
  expect_values(run(OpKind::kHardswish, {&x}), DType::kF32, {9},
                {NAN, 0.0, -1.0 / 3, 0.0, 0.5 * 3.5 / 6, 4.0 / 6, 3.0, INFINITY, NAN});
}

TEST(NnReference, Erf) {
  const HostBuffer x = f32({9}, kActInputs);
  expect_values(run(OpKind::kErf, {&x}), DType::kF32, {9},
                {-1.0, -0.99997791, -0.84270079, 0.0, 0.52049988, 0.84270079, 0.99997791, 1.0, NAN});
}

TEST(NnReference, FloatActivationsConvertIntegerInputs) {
  const HostBuffer x = make<int32_t>(DType::kI32, {3}, {-1, 0, 1});
  expect_values(run(OpKind::kGelu, {&x}), DType::kF32, {3}, {-0.15865525, 0.0, 0.84134475});
  expect_values(run(OpKind::kHardsigmoid, {&x}), DType::kF32, {3}, {1.0 / 3, 0.5, 4.0 / 6});
}

TEST(NnReference, ClampFloat) {
  const HostBuffer x = f32({9}, kActInputs);
  expect_values(run(OpKind::kClamp, {&x}, {{"min", real(-1.5)}, {"max", real(2.5)}}), DType::kF32, {9},
                {-1.5, -1.5, -1.0, 0.0, 0.5, 1.0, 2.5, 2.5, NAN});
  // relu6 = clamp(x, 0, 6): -0.0 is inside [0, 6] and stays -0.0 (as PyTorch's clamp).
  const HostBuffer y = run(OpKind::kClamp, {&x}, {{"min", real(0)}, {"max", real(6)}});
  EXPECT_TRUE(std::signbit(y.data<float>()[3]));
  EXPECT_EQ(y.data<float>()[0], 0.0f);
  EXPECT_EQ(y.data<float>()[7], 6.0f);
  // Infinite bounds are allowed: a one-sided clamp.
  expect_values(run(OpKind::kClamp, {&x}, {{"min", real(-kInfd)}, {"max", real(0.5)}}), DType::kF32, {9},
                {-INFINITY, -3.0, -1.0, 0.0, 0.5, 0.5, 0.5, 0.5, NAN});
}

TEST(NnReference, ClampIntegerKeepsTheIntegersInRange) {
  // [-1.5, 2.5] holds the integers -1..2: bounds round inward, the dtype stays.
  const HostBuffer x = make<int32_t>(DType::kI32, {7}, {-5, -1, 0, 1, 2, 3, 7});
  expect_values(run(OpKind::kClamp, {&x}, {{"min", real(-1.5)}, {"max", real(2.5)}}), DType::kI32, {7},
                {-1, -1, 0, 1, 2, 2, 2});
  // Bounds beyond the type saturate; infinite bounds leave the extremes alone.
  constexpr int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  const HostBuffer big = make<int64_t>(DType::kI64, {3}, {lo, 0, hi});
  const HostBuffer same = run(OpKind::kClamp, {&big}, {{"min", real(-kInfd)}, {"max", real(kInfd)}});
  EXPECT_EQ(same.data<int64_t>()[0], lo);
  EXPECT_EQ(same.data<int64_t>()[2], hi);
  const HostBuffer i32 = make<int32_t>(DType::kI32, {2}, {-7, 7});
  expect_values(run(OpKind::kClamp, {&i32}, {{"min", real(-1e20)}, {"max", real(3)}}), DType::kI32, {2},
                {-7, 3});
}

// ---- normalization and softmax: reference values -------------------------------------------

TEST(NnReference, BatchNormPerChannel) {
  // N = 2, C = 2, L = 2. Channel 0: (x - 1) / sqrt(4) * 2 + 0.5 = x - 0.5; channel 1:
  // (x - 2) / sqrt(0.25) * -1 = -2 (x - 2).
  const HostBuffer x = f32({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  const HostBuffer mean = f32({2}, {1, 2}), var = f32({2}, {4, 0.25f});
  const HostBuffer w = f32({2}, {2, -1}), b = f32({2}, {0.5f, 0});
  expect_values(run(OpKind::kBatchNorm, {&x, &mean, &var, &w, &b}, {{"eps", real(0)}}), DType::kF32,
                {2, 2, 2}, {0.5, 1.5, -2, -4, 4.5, 5.5, -10, -12});
  // eps enters under the square root: var 4 + eps 5 -> divide by 3. Rank 2 ([N, C]) works.
  const HostBuffer x2 = f32({1, 2}, {4, 2});
  expect_values(run(OpKind::kBatchNorm, {&x2, &mean, &var, &w, &b}, {{"eps", real(5)}}), DType::kF32,
                {1, 2}, {(4 - 1) / 3.0 * 2 + 0.5, 0.0});
}

TEST(NnReference, LayerNormWithBiasedVariance) {
  // Row [1, 2, 3, 4]: mean 2.5, biased var 1.25, rstd 0.894427191.
  const HostBuffer x = f32({2, 4}, {1, 2, 3, 4, 2, 2, 2, 2});
  expect_values(run(OpKind::kLayerNorm, {&x}, {{"normalized_dims", num(1)}, {"eps", real(0)}}), DType::kF32,
                {2, 4}, {-1.3416408, -0.4472136, 0.4472136, 1.3416408, NAN, NAN, NAN, NAN});
  // Default eps 1e-5: a constant row is 0, the first row shrinks slightly.
  expect_values(run(OpKind::kLayerNorm, {&x}, {{"normalized_dims", num(1)}}), DType::kF32, {2, 4},
                {-1.3416355, -0.44721183, 0.44721183, 1.3416355, 0, 0, 0, 0});
  const HostBuffer w = f32({4}, {1, 2, 1, 1}), b = f32({4}, {0, 0, 1, 0});
  expect_values(run(OpKind::kLayerNorm, {&x, &w, &b}, {{"normalized_dims", num(1)}, {"eps", real(0)}}),
                DType::kF32, {2, 4}, {-1.3416408, -0.8944272, 1.4472136, 1.3416408, NAN, NAN, NAN, NAN});
  // Weight only.
  expect_values(run(OpKind::kLayerNorm, {&x, &w}, {{"normalized_dims", num(1)}, {"eps", real(0)}}),
                DType::kF32, {2, 4}, {-1.3416408, -0.8944272, 0.4472136, 1.3416408, NAN, NAN, NAN, NAN});
  // Over the last two dims: the same four numbers in a [1, 2, 2] tensor.
  const HostBuffer x3 = f32({1, 2, 2}, {1, 2, 3, 4});
  expect_values(run(OpKind::kLayerNorm, {&x3}, {{"normalized_dims", num(2)}, {"eps", real(0)}}), DType::kF32,
                {1, 2, 2}, {-1.3416408, -0.4472136, 0.4472136, 1.3416408});
}

TEST(NnReference, SoftmaxAndLogSoftmaxAreStable) {
  // Row 2 would overflow exp without subtracting the max.
  const HostBuffer x = f32({2, 3}, {1, 2, 3, 1000, 1000, -1000});
  expect_values(run(OpKind::kSoftmax, {&x}, {{"axis", num(1)}}), DType::kF32, {2, 3},
                {0.090030573, 0.24472847, 0.66524096, 0.5, 0.5, 0.0});
  expect_values(run(OpKind::kLogSoftmax, {&x}, {{"axis", num(-1)}}), DType::kF32, {2, 3},
                {-2.4076059, -1.4076059, -0.40760596, -0.69314718, -0.69314718, -2000.6931});
  // Near the float limit.
  const HostBuffer huge = f32({2}, {3e38f, 3e38f});
  expect_values(run(OpKind::kSoftmax, {&huge}, {{"axis", num(0)}}), DType::kF32, {2}, {0.5, 0.5});
}

TEST(NnReference, SoftmaxOverTheFirstAxis) {
  const HostBuffer x = f32({2, 2}, {0, 1, 2, 3});
  expect_values(run(OpKind::kSoftmax, {&x}, {{"axis", num(0)}}), DType::kF32, {2, 2},
                {0.11920292, 0.11920292, 0.88079708, 0.88079708});
  expect_values(run(OpKind::kLogSoftmax, {&x}, {{"axis", num(0)}}), DType::kF32, {2, 2},
                {-2.1269280, -2.1269280, -0.12692801, -0.12692801});
}

TEST(NnReference, SoftmaxSpecialValues) {
  // A NaN poisons its row; +inf gives NaN (inf - inf); an all -inf row is NaN (as PyTorch);
  // -inf next to finite values gets probability 0; a size-1 axis gives 1.
  const HostBuffer x = f32({4, 2}, {kNaN, 1, kInf, 1, -kInf, -kInf, -kInf, 2});
  expect_values(run(OpKind::kSoftmax, {&x}, {{"axis", num(1)}}), DType::kF32, {4, 2},
                {NAN, NAN, NAN, NAN, NAN, NAN, 0, 1});
  expect_values(run(OpKind::kLogSoftmax, {&x}, {{"axis", num(1)}}), DType::kF32, {4, 2},
                {NAN, NAN, NAN, NAN, NAN, NAN, -INFINITY, 0});
  const HostBuffer one = f32({3, 1}, {-5, 0, 7});
  expect_values(run(OpKind::kSoftmax, {&one}, {{"axis", num(1)}}), DType::kF32, {3, 1}, {1, 1, 1});
  expect_values(run(OpKind::kLogSoftmax, {&one}, {{"axis", num(1)}}), DType::kF32, {3, 1}, {0, 0, 0});
}

// ---- attention: reference values -----------------------------------------------------------

// q = I (2x2), k = [[1,0],[0,1],[1,1]], v = [[1,2],[3,4],[5,6]]; scale 1/sqrt(2).
struct SmallAttention {
  HostBuffer q = f32({2, 2}, {1, 0, 0, 1});
  HostBuffer k = f32({3, 2}, {1, 0, 0, 1, 1, 1});
  HostBuffer v = f32({3, 2}, {1, 2, 3, 4, 5, 6});
};

TEST(NnReference, AttentionMatchesTheFormula) {
  SmallAttention a;
  // Row 0: scores [1, 0, 1]/sqrt2 -> weights w, u, w with w = e^s / (2 e^s + 1), s = 1/sqrt2:
  // output (w (v0 + v2) + u v1) = [3, 4] (v1 is the mean of v0 and v2). Row 1: scores
  // [0, 1, 1]/sqrt2 -> [1 + 2 (2 p), 2 + 2 (2 p)] with p = e^s / (2 e^s + 1) = 0.35167...
  expect_values(run(OpKind::kScaledDotProductAttention, {&a.q, &a.k, &a.v}), DType::kF32, {2, 2},
                {3, 4, 3.4066725, 4.4066725});
  // An explicit scale equal to the default gives the same bits.
  const HostBuffer d = run(OpKind::kScaledDotProductAttention, {&a.q, &a.k, &a.v});
  const HostBuffer e = run(OpKind::kScaledDotProductAttention, {&a.q, &a.k, &a.v},
                           {{"scale", real(1 / std::sqrt(2.0))}});
  EXPECT_EQ(0, std::memcmp(d.bytes(), e.bytes(), d.nbytes()));
}

TEST(NnReference, AttentionCausalAndMask) {
  SmallAttention a;
  // Causal (Lq = 2 < Lk = 3, top-left aligned): row 0 sees key 0 only, row 1 keys 0 and 1:
  // softmax([0, 1/sqrt2]) = [1 - p, p], p = sigmoid(1/sqrt2) = 0.66976155.
  expect_values(run(OpKind::kScaledDotProductAttention, {&a.q, &a.k, &a.v}, {{"causal", flag(true)}}),
                DType::kF32, {2, 2}, {1, 2, 2.3395231, 3.3395231});
  // An additive mask hiding key 1 from row 0 and key 2 from row 1: row 0 averages v0 and v2.
  const HostBuffer mask = f32({2, 3}, {0, -kInf, 0, 0, 0, -kInf});
  expect_values(run(OpKind::kScaledDotProductAttention, {&a.q, &a.k, &a.v, &mask}), DType::kF32, {2, 2},
                {3, 4, 2.3395231, 3.3395231});
  // A mask of one row [Lk] broadcasts over the queries; finite values shift the scores.
  // Row 0 with mask [0, 0, -1/sqrt2]: scores [s, 0, 0] with s = 1/sqrt2.
  const HostBuffer row = f32({3}, {0, 0, static_cast<float>(-1 / std::sqrt(2.0))});
  const HostBuffer out = run(OpKind::kScaledDotProductAttention, {&a.q, &a.k, &a.v, &row});
  const double es = std::exp(1 / std::sqrt(2.0));
  EXPECT_NEAR(out.data<float>()[0], (es * 1 + 3 + 5) / (es + 2), 1e-6);
}

TEST(NnReference, AttentionEdgeCases) {
  SmallAttention a;
  // A fully masked row is NaN (softmax over nothing), as PyTorch's math path.
  const HostBuffer mask = f32({2, 3}, {-kInf, -kInf, -kInf, 0, 0, 0});
  const HostBuffer out = run(OpKind::kScaledDotProductAttention, {&a.q, &a.k, &a.v, &mask});
  EXPECT_TRUE(std::isnan(out.data<float>()[0]));
  EXPECT_FLOAT_EQ(out.data<float>()[2], 3.4066725f);
  // No keys: zeros. Batch dims: each batch on its own (batch 1 = batch 0 with v doubled).
  const HostBuffer q = f32({2, 1}, {1, 2}), k = f32({0, 1}, {}), v = f32({0, 3}, {});
  expect_values(run(OpKind::kScaledDotProductAttention, {&q, &k, &v}), DType::kF32, {2, 3}, {0, 0, 0, 0, 0, 0});
  const HostBuffer qb = f32({2, 2, 2}, {1, 0, 0, 1, 1, 0, 0, 1});
  const HostBuffer kb = f32({2, 3, 2}, {1, 0, 0, 1, 1, 1, 1, 0, 0, 1, 1, 1});
  const HostBuffer vb = f32({2, 3, 2}, {1, 2, 3, 4, 5, 6, 2, 4, 6, 8, 10, 12});
  expect_values(run(OpKind::kScaledDotProductAttention, {&qb, &kb, &vb}), DType::kF32, {2, 2, 2},
                {3, 4, 3.4066725, 4.4066725, 6, 8, 6.8133450, 8.8133450});
}

// ---- inference rules -------------------------------------------------------------------------

TEST(NnInference, ShapesAndNormalization) {
  const TensorType x{DType::kF32, {2, 3, 4}};
  EXPECT_EQ(infer(OpKind::kGelu, {{DType::kI64, {5}}}), (TensorType{DType::kF32, {5}}));
  EXPECT_EQ(infer(OpKind::kClamp, {{DType::kI32, {5}}}, {{"min", real(0)}, {"max", real(6)}}),
            (TensorType{DType::kI32, {5}}));
  std::vector<AttrValue> attrs = attrs_of(OpKind::kSoftmax, {{"axis", num(-2)}});
  EXPECT_EQ(infer_op(OpKind::kSoftmax, std::vector<TensorType>{x}, attrs).value_or_throw(), x);
  EXPECT_EQ(AxisAttrs(std::span<const AttrValue>(attrs)).axis(), 1) << "negative axis normalized";
  EXPECT_EQ(infer(OpKind::kScaledDotProductAttention,
                  {{DType::kF32, {2, 5, 8}}, {DType::kF32, {2, 7, 8}}, {DType::kF32, {2, 7, 3}}}),
            (TensorType{DType::kF32, {2, 5, 3}}));
  EXPECT_EQ(infer(OpKind::kScaledDotProductAttention, {{DType::kF32, {2, 5, 8}}, {DType::kF32, {2, 7, 8}},
                                                       {DType::kF32, {2, 7, 3}}, {DType::kF32, {1, 5, 1}}}),
            (TensorType{DType::kF32, {2, 5, 3}}));
}

struct BadCase {
  OpKind op;
  std::vector<TensorType> in;
  NamedAttrs attrs;
  std::string expect;  // a fragment of the message
};

TEST(NnInference, BadOperandsAndAttributesNameTheOp) {
  const TensorType f{DType::kF32, {2, 3}}, c3{DType::kF32, {3}}, c2{DType::kF32, {2}};
  const std::vector<BadCase> cases = {
      {OpKind::kClamp, {f}, {{"min", real(2)}, {"max", real(1)}}, "min 2 must be <= max 1"},
      {OpKind::kClamp, {f}, {{"min", real(std::nan(""))}, {"max", real(1)}}, "must be <= max"},
      {OpKind::kClamp, {{DType::kBool, {2}}}, {{"min", real(0)}, {"max", real(1)}}, "is bool"},
      {OpKind::kClamp, {{DType::kI32, {2}}}, {{"min", real(0.2)}, {"max", real(0.8)}}, "no integer lies"},
      {OpKind::kBatchNorm, {f, c3, c3, c3, c2}, {}, "bias f32[2] must have shape [3]"},
      {OpKind::kBatchNorm, {{DType::kF32, {3}}, c3, c3, c3, c3}, {}, "rank >= 2"},
      {OpKind::kBatchNorm, {{DType::kI32, {2, 3}}, c3, c3, c3, c3}, {}, "must be f32"},
      {OpKind::kBatchNorm, {f, c3, c3, c3, c3}, {{"eps", real(-1)}}, "eps must be finite and >= 0"},
      {OpKind::kLayerNorm, {f}, {{"normalized_dims", num(0)}}, "normalized_dims 0 must be in [1, 2]"},
      {OpKind::kLayerNorm, {f}, {{"normalized_dims", num(3)}}, "normalized_dims 3"},
      {OpKind::kLayerNorm, {f, c2}, {{"normalized_dims", num(1)}}, "weight f32[2] must have the normalized shape [3]"},
      {OpKind::kLayerNorm, {f, c3, c2}, {{"normalized_dims", num(1)}}, "bias f32[2]"},
      {OpKind::kLayerNorm, {f}, {{"normalized_dims", num(1)}, {"eps", real(kInfd)}}, "eps must be finite"},
      {OpKind::kSoftmax, {f}, {{"axis", num(2)}}, "axis 2 is out of range"},
      {OpKind::kLogSoftmax, {{DType::kF32, {}}}, {{"axis", num(0)}}, "rank >= 1"},
      {OpKind::kSoftmax, {{DType::kI64, {3}}}, {{"axis", num(0)}}, "must be f32"},
      {OpKind::kScaledDotProductAttention, {{DType::kF32, {4}}, {DType::kF32, {4}}, {DType::kF32, {4}}}, {},
       "same rank >= 2"},
      {OpKind::kScaledDotProductAttention, {{DType::kF32, {2, 5, 8}}, {DType::kF32, {3, 7, 8}}, {DType::kF32, {3, 7, 3}}},
       {}, "leading dims"},
      {OpKind::kScaledDotProductAttention, {{DType::kF32, {5, 8}}, {DType::kF32, {7, 4}}, {DType::kF32, {7, 3}}}, {},
       "embedding dim 8"},
      {OpKind::kScaledDotProductAttention, {{DType::kF32, {5, 8}}, {DType::kF32, {7, 8}}, {DType::kF32, {6, 3}}}, {},
       "the 7 positions"},
      {OpKind::kScaledDotProductAttention,
       {{DType::kF32, {5, 8}}, {DType::kF32, {7, 8}}, {DType::kF32, {7, 3}}, {DType::kF32, {5, 6}}}, {},
       "mask f32[5, 6] does not broadcast to the scores' shape [5, 7]"},
      {OpKind::kScaledDotProductAttention,
       {{DType::kF32, {5, 8}}, {DType::kF32, {7, 8}}, {DType::kF32, {7, 3}}, {DType::kBool, {5, 7}}}, {},
       "mask bool[5, 7] must be f32"},
      {OpKind::kScaledDotProductAttention, {{DType::kF32, {5, 8}}, {DType::kF32, {7, 8}}, {DType::kF32, {7, 3}}},
       {{"scale", real(kInfd)}}, "scale must be finite"},
      {OpKind::kScaledDotProductAttention, {{DType::kF32, {5, 8}}, {DType::kF32, {7, 8}}}, {}, "takes 3 to 4 tensor inputs"},
  };
  for (const BadCase& c : cases) {
    const std::string name(op_info(c.op).name);
    const std::string msg = error_of([&] { infer(c.op, c.in, c.attrs); });
    EXPECT_NE(msg.find("op '" + name + "'"), std::string::npos) << "message: " << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << name << ": message: " << msg;
  }
}

// ---- cpu kernels against the reference --------------------------------------------------------

// Seeded values: mostly in [-scale, scale], some specials unless `tame`.
HostBuffer random_f32(const Shape& s, std::mt19937_64& gen, double scale = 4, bool tame = true) {
  HostBuffer b(DType::kF32, s);
  const std::vector<float> special = {kNaN, kInf, -kInf, 0.0f, -0.0f, 3e38f, -3e38f, 1e-40f};
  for (float& x : b.span<float>()) {
    const double u = static_cast<double>(gen() >> 11) * 0x1.0p-53;
    x = static_cast<float>((u * 2 - 1) * scale);
    if (!tame && gen() % 13 == 0) x = special[gen() % special.size()];
  }
  return b;
}

bool same_bits_any_nan(const HostBuffer& a, const HostBuffer& b, std::string* where) {
  if (a.dtype() != b.dtype() || !(a.shape() == b.shape())) return false;
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (a.dtype() == DType::kF32) {
      const float x = a.data<float>()[i], y = b.data<float>()[i];
      if (std::isnan(x) && std::isnan(y)) continue;
      if (std::memcmp(&x, &y, 4) != 0) {
        *where = "element " + std::to_string(i) + ": cpu " + std::to_string(x) + ", reference " + std::to_string(y);
        return false;
      }
    } else if (a.element_as_double(i) != b.element_as_double(i)) {
      *where = "element " + std::to_string(i);
      return false;
    }
  }
  return true;
}

// Runs one node on the reference and on cpu::run_op; compares bitwise, or within the attention
// bound for attention.
void expect_cpu_matches(OpKind kind, const std::vector<const HostBuffer*>& in, const NamedAttrs& named,
                        const std::string& what) {
  std::vector<AttrValue> attrs = attrs_of(kind, named);
  std::vector<TensorType> types;
  for (const HostBuffer* b : in) types.push_back({b->dtype(), b->shape()});
  const TensorType t = infer_op(kind, types, attrs).value_or_throw();
  Graph g;
  std::vector<NodeId> ids;
  for (const TensorType& type : types) ids.push_back(g.add_parameter(type));
  const NodeId node = g.add_node(kind, ids, attrs, t);
  HostBuffer want(t.dtype, t.shape), got(t.dtype, t.shape);
  std::memset(got.bytes(), 0xA5, got.nbytes());
  op_info(kind).reference(in, g.attrs(g.node(node)), want);
  cpu::run_op(g, node, in, got);
  if (kind == OpKind::kScaledDotProductAttention) {
    EXPECT_TRUE(testing::within_attention_bound(got, want, *in[0], *in[1], *in[2], in.size() > 3 ? in[3] : nullptr,
                                                AttentionAttrs{std::span(attrs)}.causal(),
                                                AttentionAttrs{std::span(attrs)}.scale()))
        << what;
    return;
  }
  if (kind == OpKind::kErf || (kind == OpKind::kGelu && !GeluAttrs{std::span(attrs)}.tanh())) {
    EXPECT_TRUE(testing::within_erf_bound(got, want, *in[0], kind == OpKind::kGelu)) << what;  // libmvec's erf
    return;
  }
  std::string where;
  EXPECT_TRUE(same_bits_any_nan(got, want, &where)) << what << ": " << where;
}

TEST(NnCpu, SoftmaxFamilyBitwiseOnEveryAxis) {
  std::mt19937_64 gen(7);
  const std::vector<Shape> shapes = {{1}, {5}, {1, 1}, {3, 1, 4}, {2, 3, 4, 5}, {1, 1000}, {1000, 3},
                                     {70, 1, 130}, {4, 1, 300}, {200, 400}};
  for (const Shape& s : shapes) {
    for (bool tame : {true, false}) {
      for (double scale : {4.0, 1e4}) {
        const HostBuffer x = random_f32(s, gen, scale, tame);
        for (int axis = -s.rank(); axis < s.rank(); ++axis) {
          for (OpKind op : {OpKind::kSoftmax, OpKind::kLogSoftmax}) {
            expect_cpu_matches(op, {&x}, {{"axis", num(axis)}},
                               std::string(op_info(op).name) + " " + s.to_string() + " axis " + std::to_string(axis));
          }
        }
      }
    }
  }
}

TEST(NnCpu, NormsBitwise) {
  std::mt19937_64 gen(8);
  for (const Shape& s : std::vector<Shape>{{1, 1}, {2, 3}, {2, 3, 1}, {4, 16, 7, 9}, {1, 300, 300}, {3, 2, 0}}) {
    const Shape c{s[1]};
    for (bool tame : {true, false}) {
      const HostBuffer x = random_f32(s, gen, 100, tame);
      const HostBuffer mean = random_f32(c, gen, 1), w = random_f32(c, gen, 2), b = random_f32(c, gen, 2);
      HostBuffer var = random_f32(c, gen, 3);
      for (float& v : var.span<float>()) v = std::fabs(v);
      for (double eps : {0.0, 1e-5, 0.5}) {
        expect_cpu_matches(OpKind::kBatchNorm, {&x, &mean, &var, &w, &b}, {{"eps", real(eps)}},
                           "batch_norm " + s.to_string());
      }
    }
  }
  for (const Shape& s : std::vector<Shape>{{1}, {3, 1}, {2, 3, 4}, {8, 768}, {64, 5, 7}, {3, 0}}) {
    for (int dims = 1; dims <= s.rank(); ++dims) {
      Shape normalized;
      for (int d = s.rank() - dims; d < s.rank(); ++d) normalized.push_back(s[d]);
      const HostBuffer w = random_f32(normalized, gen, 2), b = random_f32(normalized, gen, 2);
      for (bool tame : {true, false}) {
        const HostBuffer x = random_f32(s, gen, 1e3, tame);
        const std::string what = "layer_norm " + s.to_string() + " dims " + std::to_string(dims);
        expect_cpu_matches(OpKind::kLayerNorm, {&x}, {{"normalized_dims", num(dims)}}, what);
        expect_cpu_matches(OpKind::kLayerNorm, {&x, &w}, {{"normalized_dims", num(dims)}, {"eps", real(0.1)}}, what);
        expect_cpu_matches(OpKind::kLayerNorm, {&x, &w, &b}, {{"normalized_dims", num(dims)}}, what);
      }
    }
  }
}

TEST(NnCpu, AttentionWithinBound) {
  std::mt19937_64 gen(9);
  struct Case {
    Shape q, k, v;
    std::vector<Shape> masks;  // {} = no mask
  };
  const std::vector<Case> cases = {
      {{1, 1}, {1, 1}, {1, 1}, {{}}},
      {{4, 8}, {4, 8}, {4, 8}, {{}, Shape{4, 4}}},
      {{2, 3, 5, 8}, {2, 3, 9, 8}, {2, 3, 9, 6}, {{}, Shape{9}, Shape{5, 9}, Shape{3, 1, 9}, Shape{2, 3, 5, 9}}},
      {{2, 9, 4}, {2, 5, 4}, {2, 5, 3}, {{}, Shape{2, 1, 5}}},  // Lq > Lk
      {{3, 0, 4}, {3, 5, 4}, {3, 5, 3}, {{}}},
      {{3, 2, 4}, {3, 0, 4}, {3, 0, 3}, {{}}},
      {{2, 3, 0}, {2, 4, 0}, {2, 4, 5}, {{}}},                 // E = 0: scale 1/sqrt(0) -> NaN
      {{2, 3, 4}, {2, 4, 4}, {2, 4, 0}, {{}}},                 // Ev = 0
      {{2, 128, 64}, {2, 200, 64}, {2, 200, 64}, {{}, Shape{128, 200}}},
  };
  for (const Case& c : cases) {
    const HostBuffer q = random_f32(c.q, gen, 2), k = random_f32(c.k, gen, 2), v = random_f32(c.v, gen, 3);
    for (const Shape& ms : c.masks) {
      HostBuffer mask = random_f32(ms, gen, 2);
      // Some masked-out entries.
      for (float& m : mask.span<float>()) {
        if (gen() % 5 == 0) m = -kInf;
      }
      std::vector<const HostBuffer*> in = {&q, &k, &v};
      if (ms.rank() > 0) in.push_back(&mask);
      for (bool causal : {false, true}) {
        for (double scale : {0.0, 0.7}) {
          expect_cpu_matches(OpKind::kScaledDotProductAttention, in, {{"causal", flag(causal)}, {"scale", real(scale)}},
                             "attention q " + c.q.to_string() + " k " + c.k.to_string() + " mask " +
                                 (ms.rank() ? ms.to_string() : "none") + (causal ? " causal" : ""));
        }
      }
    }
  }
}

TEST(NnCpu, AttentionFullyMaskedRowIsNaNLikeTheReference) {
  const HostBuffer q = f32({2, 1}, {1, 2}), k = f32({2, 1}, {1, -1}), v = f32({2, 1}, {3, 4});
  const HostBuffer mask = f32({2, 2}, {-kInf, -kInf, 0, 0});
  expect_cpu_matches(OpKind::kScaledDotProductAttention, {&q, &k, &v, &mask}, {}, "fully masked row");
}

TEST(NnCpu, ActivationsBitwiseOnSpecialsAndIntegers) {
  std::mt19937_64 gen(10);
  const HostBuffer x = random_f32({3000}, gen, 12, /*tame=*/false);
  for (OpKind op : {OpKind::kSilu, OpKind::kHardswish, OpKind::kHardsigmoid, OpKind::kErf}) {
    expect_cpu_matches(op, {&x}, {}, std::string(op_info(op).name));
  }
  expect_cpu_matches(OpKind::kGelu, {&x}, {{"tanh", flag(false)}}, "gelu");
  expect_cpu_matches(OpKind::kGelu, {&x}, {{"tanh", flag(true)}}, "gelu tanh");
  expect_cpu_matches(OpKind::kClamp, {&x}, {{"min", real(-0.1)}, {"max", real(0.1)}}, "clamp f32");
  HostBuffer xi(DType::kI32, {1000}), xl(DType::kI64, {1000});
  for (int64_t i = 0; i < 1000; ++i) {
    xi.data<int32_t>()[i] = static_cast<int32_t>(i * 7919 % 2001) - 1000;
    xl.data<int64_t>()[i] = i % 3 == 0 ? std::numeric_limits<int64_t>::min() : i * 1000003 - 500;
  }
  expect_cpu_matches(OpKind::kClamp, {&xi}, {{"min", real(-10.5)}, {"max", real(20.5)}}, "clamp i32");
  expect_cpu_matches(OpKind::kClamp, {&xl}, {{"min", real(-1e30)}, {"max", real(1e5)}}, "clamp i64");
}

// ---- fusion through the compiler and the cpu runtime --------------------------------------

// Runs the graph the lambda records on the reference evaluator and on the cpu runtime; returns
// the executable's kernel kinds for inspection.
// Outputs compare bitwise, except output k within `tolerance[k]` (absolute) when given and > 0.
template <typename Fn>
void expect_runtime_matches_reference(Fn build, size_t want_kernels, size_t want_members,
                                      const std::vector<HostBuffer>& inputs,
                                      const std::vector<double>& tolerance = {}) {
  testing::ComputingRecorder recorder;
  LazyContext ctx(&recorder);
  std::vector<Tensor> xs;
  for (const HostBuffer& b : inputs) xs.push_back(ctx.from_buffer(b.clone()));
  std::vector<Tensor> outs = build(xs);
  ctx.mark_step();
  ASSERT_EQ(recorder.graphs.size(), 1u);
  const CanonicalGraph& cg = recorder.graphs[0];
  const Executable exe = compile_graph(cg.graph, cg.key, "cpu", "digest");
  ASSERT_TRUE(exe.validate().is_ok()) << exe.validate().to_string();
  EXPECT_EQ(exe.kernel_plan()->kernels.size(), want_kernels) << cg.graph.to_text();
  if (want_members > 0) {
    ASSERT_FALSE(exe.kernel_plan()->kernels.empty());
    EXPECT_EQ(exe.kernel_plan()->kernels.back().kind, Kernel::Kind::kFused);
    EXPECT_EQ(exe.kernel_plan()->kernels.back().members.size(), want_members) << cg.graph.to_text();
  }
  CpuBackend cpu;
  Runtime runtime(&cpu, nullptr, nullptr);
  LazyContext cpu_ctx(&runtime);
  std::vector<Tensor> cxs;
  for (const HostBuffer& b : inputs) cxs.push_back(cpu_ctx.from_buffer(b.clone()));
  std::vector<Tensor> couts = build(cxs);
  ASSERT_EQ(couts.size(), outs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    const BufferRef got = couts[i].buffer(), want = outs[i].buffer();
    if (i < tolerance.size() && tolerance[i] > 0) {
      ASSERT_EQ(got->shape(), want->shape());
      for (int64_t e = 0; e < want->numel(); ++e) {
        const float g = got->data<float>()[e], w = want->data<float>()[e];
        if (std::isnan(w) || g == w) {  // NaN where the reference has NaN; equal (infinite) values
          EXPECT_TRUE(std::isnan(w) == std::isnan(g)) << "output " << i << " element " << e << ": " << g;
          continue;
        }
        EXPECT_NEAR(g, w, tolerance[i]) << "output " << i << " element " << e;
      }
      continue;
    }
    std::string where;
    EXPECT_TRUE(same_bits_any_nan(*got, *want, &where)) << "output " << i << ": " << where;
  }
}

// The reference's values up to erf's last bits: gelu's erf form and erf run libmvec's vector erf
// (cpu_kernels.h, within 2 ulp), and the chain carries that difference on; everything else in the
// chain is bitwise (CpuFused.RandomChainsMatchReferenceNodeByNode checks fusion node by node).
TEST(NnFusion, ActivationChainIsOneFusedKernelCloseToTheReference) {
  std::mt19937_64 gen(11);
  const std::vector<HostBuffer> in = [&] {
    std::vector<HostBuffer> v;
    v.push_back(random_f32({300, 257}, gen, 8, /*tame=*/false));
    v.push_back(random_f32({257}, gen, 2));
    return v;
  }();
  // add -> gelu -> clamp -> silu -> mul -> hardswish -> gelu(tanh) -> hardsigmoid -> erf -> relu6.
  expect_runtime_matches_reference(
      [](const std::vector<Tensor>& x) {
        Tensor h = clamp(gelu(add(x[0], x[1])), -0.75, 2.25);
        h = hardswish(mul(silu(h), x[1]));
        h = relu6(erf(hardsigmoid(gelu(h, /*tanh_approximation=*/true))));
        return std::vector<Tensor>{h};
      },
      1, 10, in, {1e-5});
}

TEST(NnFusion, IntegerClampFusesWithIntegerArithmetic) {
  HostBuffer x(DType::kI32, {4096});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<int32_t>()[i] = static_cast<int32_t>(i % 97) - 48;
  std::vector<HostBuffer> in;
  in.push_back(std::move(x));
  // Two clamps with different bounds in one kernel: each instruction carries its own bounds.
  expect_runtime_matches_reference(
      [](const std::vector<Tensor>& t) {
        return std::vector<Tensor>{clamp(mul(clamp(t[0], -10.5, 30), 3), 0, 50.9)};
      },
      1, 3, in);
}

TEST(NnFusion, NormsAndAttentionAreKernelsOfTheirOwn) {
  std::mt19937_64 gen(12);
  std::vector<HostBuffer> in;
  in.push_back(random_f32({2, 16, 32}, gen, 2));  // x
  in.push_back(random_f32({32}, gen, 1));         // weight
  in.push_back(random_f32({16, 16}, gen, 1));     // mask
  // layer_norm -> gelu (a fused kernel of one) -> attention -> softmax -> log_softmax: five
  // kernels. Up to layer_norm the bits are the reference's; gelu (libmvec's erf) and after
  // attention (BLAS) only close.
  expect_runtime_matches_reference(
      [](const std::vector<Tensor>& t) {
        Tensor h = gelu(layer_norm(t[0], 1, t[1], Tensor()));
        Tensor a = scaled_dot_product_attention(h, h, h, t[2], /*causal=*/true);
        return std::vector<Tensor>{h, log_softmax(softmax(a, 1), -1)};
      },
      5, 0, in, {4e-6, 1e-5});
}

// ---- the Tensor API and trace programs ----------------------------------------------------

TEST(NnApi, OptionalOperandsFollowPyTorch) {
  ReferenceExecutor exec;
  LazyContext ctx(&exec);
  const Tensor x = ctx.from_buffer(f32({1, 2, 2}, {1, 3, 2, 6}));
  const Tensor mean = ctx.from_buffer(f32({2}, {1, 2}));
  const Tensor var = ctx.from_buffer(f32({2}, {4, 16}));
  // No affine parameters: weight 1, bias 0.
  std::vector<double> got = batch_norm(x, mean, var, Tensor(), Tensor(), 0).to_vector<double>();
  EXPECT_EQ(got, (std::vector<double>{0, 1, 0, 1}));
  // layer_norm with a bias only: the weight is ones.
  const Tensor row = ctx.from_buffer(f32({1, 2}, {1, 3}));
  const Tensor bias = ctx.from_buffer(f32({2}, {10, 20}));
  got = layer_norm(row, 1, Tensor(), bias, 0).to_vector<double>();
  EXPECT_EQ(got, (std::vector<double>{9, 21}));
  EXPECT_EQ(relu6(ctx.from_buffer(f32({3}, {-1, 3, 9}))).to_vector<double>(), (std::vector<double>{0, 3, 6}));
  // An undefined required operand is an error naming the op.
  const std::string msg = error_of([&] { batch_norm(x, Tensor(), var, Tensor(), Tensor()); });
  EXPECT_NE(msg.find("op 'batch_norm': running_mean is an undefined tensor"), std::string::npos) << msg;
}

TEST(NnProgram, TraceProgramUsingEveryNewOpRuns) {
  const std::string text = R"(tracecache 1
steps 2
dim B = 2
input x : f32[B, 4, 8] = normal(seed=1)
param g : f32[8] = uniform(seed=2, low=0.5, high=1.5)
param b : f32[8] = normal(seed=3, std=0.1)
param m : f32[4] = normal(seed=4, std=0.1)
param v : f32[4] = uniform(seed=5, low=0.5, high=2)
param mask : f32[4, 4] = normal(seed=6)
bn = batch_norm(x, m, v, m, m, eps=0.001)
ln = layer_norm(bn, g, b, normalized_dims=1)
a = gelu(ln)
t = gelu(a, tanh=true)
s = silu(t)
hs = hardswish(s)
hg = hardsigmoid(hs)
e = erf(hg)
c = clamp(e, min=-0.5, max=0.5)
att = scaled_dot_product_attention(c, ln, ln, mask, causal=true)
att2 = scaled_dot_product_attention(c, ln, ln, scale=0.5)
p = softmax(att, axis=-1)
lp = log_softmax(att2, axis=1)
output p, lp
)";
  Result<Program> program = parse_program(text, "nn.trace");
  ASSERT_TRUE(program.is_ok()) << program.status().to_string();
  ReferenceExecutor reference;
  LazyContext ctx(&reference);
  Result<std::vector<StepResult>> r = run_program(*program, ctx);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 2u);
  const BufferRef p = (*r)[0].outputs.at(0).second;
  ASSERT_EQ(p->shape(), (Shape{2, 4, 8}));
  // softmax rows sum to 1; log_softmax columns (axis 1) exponentiate to sums of 1.
  for (int64_t row = 0; row < 8; ++row) {
    double sum = 0;
    for (int64_t i = 0; i < 8; ++i) sum += p->data<float>()[row * 8 + i];
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
  const BufferRef lp = (*r)[0].outputs.at(1).second;
  for (int64_t col = 0; col < 8; ++col) {
    double sum = 0;
    for (int64_t i = 0; i < 4; ++i) sum += std::exp(lp->data<float>()[i * 8 + col]);
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
  // The same program on the cpu runtime: close to the reference (attention uses BLAS).
  CpuBackend cpu;
  Runtime runtime(&cpu, nullptr, nullptr);
  LazyContext cpu_ctx(&runtime);
  Result<std::vector<StepResult>> c = run_program(*program, cpu_ctx);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  for (size_t k = 0; k < 2; ++k) {
    const BufferRef want = (*r)[1].outputs.at(k).second, got = (*c)[1].outputs.at(k).second;
    ASSERT_EQ(got->shape(), want->shape());
    for (int64_t i = 0; i < want->numel(); ++i) {
      EXPECT_NEAR(got->data<float>()[i], want->data<float>()[i], 1e-5) << "output " << k << " element " << i;
    }
  }
}

TEST(NnProgram, MissingRequiredAttributeIsAParseError) {
  Result<Program> p = parse_program("tracecache 1\ninput x : f32[3] = full(1)\ny = clamp(x, min=0)\noutput y\n", "c.trace");
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("op 'clamp': missing required attribute 'max'"), std::string::npos)
      << p.status().message();
}

}  // namespace
}  // namespace tracecache
