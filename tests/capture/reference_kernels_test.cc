// Tests of the reference kernels (capture/ops/reference_kernels.cc), each op called through the
// registry exactly as the tracer would: defaults filled, attributes normalized by infer_op, the
// output allocated with the inferred type. Expected values are worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>
#include <utility>
#include <vector>

#include "capture/core/buffer.h"
#include "capture/ops/ops.h"
#include "tests/test_buffers.h"

namespace tracecache {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kNaNd = std::numeric_limits<double>::quiet_NaN();
constexpr double kInfd = std::numeric_limits<double>::infinity();

using test::make;
using test::f32;
using test::i32;
using test::i64;
HostBuffer boolean(const Shape& s, const std::vector<int>& v) { return make(DType::kBool, s, v); }

using NamedAttrs = std::vector<std::pair<std::string_view, AttrValue>>;

// Runs `kind`'s reference kernel the way the tracer does. The output is poisoned first (for
// non-bool dtypes) so a kernel that leaves elements unwritten is caught.
HostBuffer run(OpKind kind, std::vector<const HostBuffer*> in, const NamedAttrs& named = {}) {
  const OpInfo& info = op_info(kind);
  std::vector<AttrValue> attrs;
  for (const AttrSpec& spec : info.attrs) attrs.push_back(spec.default_value);
  for (const auto& [name, value] : named) {
    int i = info.attr_index(name);
    EXPECT_GE(i, 0) << info.name << " has no attribute " << name;
    if (i >= 0) attrs[static_cast<size_t>(i)] = value;
  }
  std::vector<TensorType> types;
  for (const HostBuffer* b : in) types.push_back({b->dtype(), b->shape()});
  TensorType t = infer_op(kind, types, attrs).value_or_throw();
  HostBuffer out(t.dtype, t.shape);
  if (t.dtype != DType::kBool) std::memset(out.bytes(), 0xA5, out.nbytes());
  info.reference(in, attrs, out);
  return out;
}

// Checks dtype, shape and values. Floats compare within 4 ulp (EXPECT_FLOAT_EQ); NaN matches
// NaN; integers and bools compare exactly.
void expect_buffer(const HostBuffer& b, DType dtype, const Shape& shape, const std::vector<double>& values) {
  EXPECT_EQ(dtype_name(b.dtype()), dtype_name(dtype));
  EXPECT_EQ(b.shape().to_string(), shape.to_string());
  ASSERT_EQ(b.numel(), static_cast<int64_t>(values.size()));
  for (int64_t i = 0; i < b.numel(); ++i) {
    double got = b.element_as_double(i), want = values[static_cast<size_t>(i)];
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "element " << i << " is " << got << ", want NaN";
    } else if (b.dtype() == DType::kF32) {
      EXPECT_FLOAT_EQ(static_cast<float>(got), static_cast<float>(want)) << "element " << i;
    } else {
      EXPECT_EQ(got, want) << "element " << i;
    }
  }
}

AttrValue ints(IntList v) { return AttrValue::of_ints(v); }
AttrValue num(int64_t v) { return AttrValue::of_int(v); }
AttrValue real(double v) { return AttrValue::of_float(v); }
AttrValue flag(bool v) { return AttrValue::of_bool(v); }
AttrValue dt(DType v) { return AttrValue::of_dtype(v); }

// ---- registry ---------------------------------------------------------------------------------

TEST(ReferenceKernels, EveryOpButParameterHasAKernel) {
  int with_kernel = 0;
  for (const OpInfo& op : all_ops()) {
    if (op.kind == OpKind::kParameter) {
      EXPECT_EQ(op.reference, nullptr);
    } else {
      EXPECT_NE(op.reference, nullptr) << op.name;
      ++with_kernel;
    }
  }
  EXPECT_EQ(with_kernel, kOpCount - 1);
}

// ---- unary ------------------------------------------------------------------------------------

TEST(ReferenceKernels, NegKeepsDtypeAndWrapsIntMin) {
  HostBuffer x = f32({3}, {1.5f, -2.f, 0.f});
  expect_buffer(run(OpKind::kNeg, {&x}), DType::kF32, {3}, {-1.5, 2, 0});
  HostBuffer n = i32({3}, {7, -7, std::numeric_limits<int32_t>::min()});
  expect_buffer(run(OpKind::kNeg, {&n}), DType::kI32, {3}, {-7, 7, std::numeric_limits<int32_t>::min()});
}

TEST(ReferenceKernels, AbsKeepsDtype) {
  HostBuffer x = f32({2, 2}, {-1.25f, 2.f, -0.f, -kInf});
  HostBuffer y = run(OpKind::kAbs, {&x});
  expect_buffer(y, DType::kF32, {2, 2}, {1.25, 2, 0, kInfd});
  EXPECT_FALSE(std::signbit(y.data<float>()[2])) << "abs(-0.0) is +0.0";
  HostBuffer n = i64({3}, {-5, 5, std::numeric_limits<int64_t>::min()});
  expect_buffer(run(OpKind::kAbs, {&n}), DType::kI64, {3},
                {5, 5, static_cast<double>(std::numeric_limits<int64_t>::min())});
}

TEST(ReferenceKernels, FloatUnaryOpsMatchLibm) {
  const std::vector<float> v = {0.5f, 1.f, 2.f, 4.f};
  HostBuffer x = f32({4}, v);
  auto expect_map = [&](OpKind kind, float (*f)(float)) {
    std::vector<double> want;
    for (float e : v) want.push_back(f(e));
    expect_buffer(run(kind, {&x}), DType::kF32, {4}, want);
  };
  expect_map(OpKind::kExp, [](float e) { return std::exp(e); });
  expect_map(OpKind::kLog, [](float e) { return std::log(e); });
  expect_map(OpKind::kSqrt, [](float e) { return std::sqrt(e); });
  expect_map(OpKind::kTanh, [](float e) { return std::tanh(e); });
  expect_buffer(run(OpKind::kRsqrt, {&x}), DType::kF32, {4}, {1.41421356, 1, 0.70710678, 0.5});
  expect_buffer(run(OpKind::kSigmoid, {&x}), DType::kF32, {4},
                {0.62245933, 0.73105858, 0.88079708, 0.98201379});
}

TEST(ReferenceKernels, FloatUnaryOpsEdgeValues) {
  HostBuffer x = f32({3}, {0.f, -1.f, kInf});
  expect_buffer(run(OpKind::kLog, {&x}), DType::kF32, {3}, {-kInfd, kNaNd, kInfd});
  expect_buffer(run(OpKind::kSqrt, {&x}), DType::kF32, {3}, {0, kNaNd, kInfd});
  expect_buffer(run(OpKind::kRsqrt, {&x}), DType::kF32, {3}, {kInfd, kNaNd, 0});
  // sigmoid is 1 / (1 + exp(-x)) in float: exp(100) overflows to inf, so sigmoid(-100) is
  // exactly 0 (not the true 3.7e-44), and infinities and NaN come out cleanly.
  HostBuffer big = f32({6}, {-100.f, 100.f, 0.f, -kInf, kInf, kNaN});
  expect_buffer(run(OpKind::kSigmoid, {&big}), DType::kF32, {6}, {0, 1, 0.5, 0, 1, kNaNd});
  expect_buffer(run(OpKind::kTanh, {&big}), DType::kF32, {6}, {-1, 1, 0, -1, 1, kNaNd});
}

TEST(ReferenceKernels, FloatUnaryOpsConvertIntsAndBoolsToF32) {
  HostBuffer n = i32({3}, {0, 1, 4});
  expect_buffer(run(OpKind::kSqrt, {&n}), DType::kF32, {3}, {0, 1, 2});
  expect_buffer(run(OpKind::kExp, {&n}), DType::kF32, {3}, {1, std::exp(1.f), std::exp(4.f)});
  HostBuffer b = boolean({2}, {1, 0});
  expect_buffer(run(OpKind::kExp, {&b}), DType::kF32, {2}, {std::exp(1.f), 1});
}

TEST(ReferenceKernels, ReluClampsNegativesAndPropagatesNaN) {
  HostBuffer x = f32({5}, {-2.f, 0.f, 3.5f, kNaN, -0.f});
  HostBuffer y = run(OpKind::kRelu, {&x});
  expect_buffer(y, DType::kF32, {5}, {0, 0, 3.5, kNaNd, 0});
  EXPECT_FALSE(std::signbit(y.data<float>()[4])) << "relu(-0.0) is +0.0";
  HostBuffer n = i32({3}, {-4, 0, 9});
  expect_buffer(run(OpKind::kRelu, {&n}), DType::kI32, {3}, {0, 0, 9});
}

// ---- binary arithmetic -----------------------------------------------------------------------

TEST(ReferenceKernels, AddBroadcastsScalarWithMatrix) {
  HostBuffer s = f32({}, {10.f});
  HostBuffer m = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  expect_buffer(run(OpKind::kAdd, {&s, &m}), DType::kF32, {2, 3}, {11, 12, 13, 14, 15, 16});
  expect_buffer(run(OpKind::kAdd, {&m, &s}), DType::kF32, {2, 3}, {11, 12, 13, 14, 15, 16});
}

TEST(ReferenceKernels, AddBroadcastsColumnWithRow) {
  HostBuffer col = i32({3, 1}, {0, 10, 20});
  HostBuffer row = i32({1, 4}, {1, 2, 3, 4});
  expect_buffer(run(OpKind::kAdd, {&col, &row}), DType::kI32, {3, 4},
                {1, 2, 3, 4, 11, 12, 13, 14, 21, 22, 23, 24});
}

TEST(ReferenceKernels, AddBroadcastsAcrossRanksAndMiddleDims) {
  HostBuffer a = i64({2, 1, 2}, {1, 2, 3, 4});
  HostBuffer b = i64({3, 1}, {100, 200, 300});
  expect_buffer(run(OpKind::kAdd, {&a, &b}), DType::kI64, {2, 3, 2},
                {101, 102, 201, 202, 301, 302, 103, 104, 203, 204, 303, 304});
}

TEST(ReferenceKernels, AddWithSizeZeroAndSizeOneDims) {
  HostBuffer empty = f32({0, 3}, {});
  HostBuffer row = f32({1, 3}, {1, 2, 3});
  expect_buffer(run(OpKind::kAdd, {&empty, &row}), DType::kF32, {0, 3}, {});
  HostBuffer one = f32({1, 1}, {5});
  expect_buffer(run(OpKind::kAdd, {&one, &row}), DType::kF32, {1, 3}, {6, 7, 8});
}

TEST(ReferenceKernels, ArithmeticPromotesMixedDtypes) {
  HostBuffer n = i32({3}, {1, 2, 3});
  HostBuffer x = f32({3}, {0.5f, 0.25f, -1.f});
  expect_buffer(run(OpKind::kAdd, {&n, &x}), DType::kF32, {3}, {1.5, 2.25, 2});
  HostBuffer big = i64({3}, {int64_t{1} << 40, 0, -1});
  expect_buffer(run(OpKind::kMul, {&n, &big}), DType::kI64, {3}, {1099511627776.0, 0, -3});
  HostBuffer b = boolean({3}, {1, 0, 1});
  expect_buffer(run(OpKind::kSub, {&n, &b}), DType::kI32, {3}, {0, 2, 2});
}

TEST(ReferenceKernels, IntegerArithmeticWrapsAround) {
  HostBuffer a = i32({2}, {std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()});
  HostBuffer one = i32({}, {1});
  expect_buffer(run(OpKind::kAdd, {&a, &one}), DType::kI32, {2},
                {std::numeric_limits<int32_t>::min(), -2147483647});
  expect_buffer(run(OpKind::kSub, {&a, &one}), DType::kI32, {2},
                {2147483646, std::numeric_limits<int32_t>::max()});
  HostBuffer two = i32({}, {2});
  expect_buffer(run(OpKind::kMul, {&a, &two}), DType::kI32, {2}, {-2, 0});
}

TEST(ReferenceKernels, SubAndMulBroadcast) {
  HostBuffer a = f32({2, 2}, {1, 2, 3, 4});
  HostBuffer b = f32({2}, {10, 100});
  expect_buffer(run(OpKind::kSub, {&a, &b}), DType::kF32, {2, 2}, {-9, -98, -7, -96});
  expect_buffer(run(OpKind::kMul, {&a, &b}), DType::kF32, {2, 2}, {10, 200, 30, 400});
}

TEST(ReferenceKernels, DivIsTrueDivisionInF32) {
  HostBuffer a = i32({4}, {7, -7, 1, 0});
  HostBuffer b = i32({4}, {2, 2, 0, 0});
  expect_buffer(run(OpKind::kDiv, {&a, &b}), DType::kF32, {4}, {3.5, -3.5, kInfd, kNaNd});
  HostBuffer x = f32({2}, {1, -1});
  HostBuffer z = f32({}, {-0.f});
  expect_buffer(run(OpKind::kDiv, {&x, &z}), DType::kF32, {2}, {-kInfd, kInfd});
}

TEST(ReferenceKernels, PowFloat) {
  HostBuffer a = f32({4}, {2, 4, -8, 0});
  HostBuffer b = f32({4}, {10, 0.5f, 0.5f, 0});
  expect_buffer(run(OpKind::kPow, {&a, &b}), DType::kF32, {4}, {1024, 2, kNaNd, 1});
}

TEST(ReferenceKernels, PowIntegerIncludingNegativeExponents) {
  HostBuffer base = i64({7}, {3, -2, 2, 1, -1, -1, 0});
  HostBuffer e = i64({7}, {4, 3, -1, -5, -3, -2, -1});
  expect_buffer(run(OpKind::kPow, {&base, &e}), DType::kI64, {7}, {81, -8, 0, 1, -1, 1, 0});
  HostBuffer zero_exp = i32({}, {0});
  HostBuffer b2 = i32({2}, {0, -9});
  expect_buffer(run(OpKind::kPow, {&b2, &zero_exp}), DType::kI32, {2}, {1, 1});
  // 3^21 = 10460353203 wraps modulo 2^32 in i32.
  HostBuffer three = i32({}, {3});
  HostBuffer e21 = i32({}, {21});
  expect_buffer(run(OpKind::kPow, {&three, &e21}), DType::kI32, {},
                {static_cast<double>(static_cast<int32_t>(10460353203LL - 2LL * 4294967296LL))});
  HostBuffer x = f32({}, {2});
  HostBuffer n = i32({}, {-1});
  expect_buffer(run(OpKind::kPow, {&x, &n}), DType::kF32, {}, {0.5});
}

TEST(ReferenceKernels, MaximumMinimumPropagateNaN) {
  HostBuffer a = f32({4}, {1, kNaN, 3, kNaN});
  HostBuffer b = f32({4}, {2, 5, kNaN, kNaN});
  expect_buffer(run(OpKind::kMaximum, {&a, &b}), DType::kF32, {4}, {2, kNaNd, kNaNd, kNaNd});
  expect_buffer(run(OpKind::kMinimum, {&a, &b}), DType::kF32, {4}, {1, kNaNd, kNaNd, kNaNd});
}

TEST(ReferenceKernels, MaximumMinimumBroadcastAndPromote) {
  HostBuffer a = i32({2, 1}, {1, 5});
  HostBuffer b = f32({3}, {0.5f, 2.5f, 7.f});
  expect_buffer(run(OpKind::kMaximum, {&a, &b}), DType::kF32, {2, 3}, {1, 2.5, 7, 5, 5, 7});
  expect_buffer(run(OpKind::kMinimum, {&a, &b}), DType::kF32, {2, 3}, {0.5, 1, 1, 0.5, 2.5, 5});
  HostBuffer p = boolean({2}, {1, 0});
  HostBuffer q = boolean({2}, {0, 0});
  expect_buffer(run(OpKind::kMaximum, {&p, &q}), DType::kBool, {2}, {1, 0});
  expect_buffer(run(OpKind::kMinimum, {&p, &q}), DType::kBool, {2}, {0, 0});
}

// ---- comparisons and where -------------------------------------------------------------------

TEST(ReferenceKernels, ComparisonsGiveBoolWithBroadcasting) {
  HostBuffer a = i32({3, 1}, {1, 2, 3});
  HostBuffer b = i32({3}, {1, 2, 3});
  expect_buffer(run(OpKind::kEq, {&a, &b}), DType::kBool, {3, 3}, {1, 0, 0, 0, 1, 0, 0, 0, 1});
  expect_buffer(run(OpKind::kLt, {&a, &b}), DType::kBool, {3, 3}, {0, 1, 1, 0, 0, 1, 0, 0, 0});
  expect_buffer(run(OpKind::kGt, {&a, &b}), DType::kBool, {3, 3}, {0, 0, 0, 1, 0, 0, 1, 1, 0});
}

TEST(ReferenceKernels, ComparisonsPromoteBeforeComparing) {
  // Compared in f32: 2 < 2.5 and 2 != 2.5 (an int comparison would truncate 2.5 to 2).
  HostBuffer n = i32({2}, {2, 3});
  HostBuffer x = f32({2}, {2.5f, 3.f});
  expect_buffer(run(OpKind::kLt, {&n, &x}), DType::kBool, {2}, {1, 0});
  expect_buffer(run(OpKind::kEq, {&n, &x}), DType::kBool, {2}, {0, 1});
  HostBuffer b = boolean({2}, {1, 0});
  HostBuffer k = i64({2}, {1, 1});
  expect_buffer(run(OpKind::kEq, {&b, &k}), DType::kBool, {2}, {1, 0});
}

TEST(ReferenceKernels, ComparisonsWithNaNAreFalse) {
  HostBuffer a = f32({3}, {kNaN, kNaN, 1});
  HostBuffer b = f32({3}, {kNaN, 1, kNaN});
  expect_buffer(run(OpKind::kEq, {&a, &b}), DType::kBool, {3}, {0, 0, 0});
  expect_buffer(run(OpKind::kLt, {&a, &b}), DType::kBool, {3}, {0, 0, 0});
  expect_buffer(run(OpKind::kGt, {&a, &b}), DType::kBool, {3}, {0, 0, 0});
}

TEST(ReferenceKernels, WhereBroadcastsAllThreeOperandsAndPromotes) {
  HostBuffer cond = boolean({3, 1}, {1, 0, 1});
  HostBuffer a = i32({1, 2}, {1, 2});
  HostBuffer b = f32({}, {-0.5f});
  expect_buffer(run(OpKind::kWhere, {&cond, &a, &b}), DType::kF32, {3, 2}, {1, 2, -0.5, -0.5, 1, 2});
  HostBuffer c2 = boolean({2}, {0, 1});
  HostBuffer m = i64({2, 2}, {1, 2, 3, 4});
  HostBuffer z = i64({}, {0});
  expect_buffer(run(OpKind::kWhere, {&c2, &m, &z}), DType::kI64, {2, 2}, {0, 2, 0, 4});
}

// ---- cast ------------------------------------------------------------------------------------

TEST(ReferenceKernels, CastFloatToIntTruncatesTowardZero) {
  HostBuffer x = f32({6}, {-1.7f, -0.5f, 0.5f, 1.99f, -3.f, 2.f});
  expect_buffer(run(OpKind::kCast, {&x}, {{"dtype", dt(DType::kI32)}}), DType::kI32, {6},
                {-1, 0, 0, 1, -3, 2});
}

TEST(ReferenceKernels, CastFloatToIntSaturatesAndMapsNaNToZero) {
  HostBuffer x = f32({5}, {kNaN, kInf, -kInf, 3e9f, -3e9f});
  const double i32max = std::numeric_limits<int32_t>::max(), i32min = std::numeric_limits<int32_t>::min();
  expect_buffer(run(OpKind::kCast, {&x}, {{"dtype", dt(DType::kI32)}}), DType::kI32, {5},
                {0, i32max, i32min, i32max, i32min});
  HostBuffer y = run(OpKind::kCast, {&x}, {{"dtype", dt(DType::kI64)}});
  EXPECT_EQ(y.data<int64_t>()[0], 0);
  EXPECT_EQ(y.data<int64_t>()[1], std::numeric_limits<int64_t>::max());
  EXPECT_EQ(y.data<int64_t>()[2], std::numeric_limits<int64_t>::min());
  EXPECT_EQ(y.data<int64_t>()[3], 3000000000);
  EXPECT_EQ(y.data<int64_t>()[4], -3000000000);
}

TEST(ReferenceKernels, CastToBoolIsNonZero) {
  HostBuffer x = f32({5}, {0.f, -0.f, 0.1f, kNaN, -2.f});
  expect_buffer(run(OpKind::kCast, {&x}, {{"dtype", dt(DType::kBool)}}), DType::kBool, {5}, {0, 0, 1, 1, 1});
  HostBuffer n = i64({3}, {0, int64_t{1} << 40, -1});
  expect_buffer(run(OpKind::kCast, {&n}, {{"dtype", dt(DType::kBool)}}), DType::kBool, {3}, {0, 1, 1});
}

TEST(ReferenceKernels, CastBetweenIntegersAndFromBool) {
  HostBuffer n = i64({3}, {(int64_t{1} << 32) + 5, -1, 1 << 20});
  expect_buffer(run(OpKind::kCast, {&n}, {{"dtype", dt(DType::kI32)}}), DType::kI32, {3}, {5, -1, 1 << 20});
  HostBuffer m = i32({2}, {-3, 16777217});
  expect_buffer(run(OpKind::kCast, {&m}, {{"dtype", dt(DType::kF32)}}), DType::kF32, {2}, {-3, 16777216});
  HostBuffer b = boolean({2}, {1, 0});
  expect_buffer(run(OpKind::kCast, {&b}, {{"dtype", dt(DType::kF32)}}), DType::kF32, {2}, {1, 0});
  expect_buffer(run(OpKind::kCast, {&b}, {{"dtype", dt(DType::kI64)}}), DType::kI64, {2}, {1, 0});
}

// ---- matmul ----------------------------------------------------------------------------------

TEST(ReferenceKernels, MatmulTwoByThreeTimesThreeByTwo) {
  HostBuffer a = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  HostBuffer b = f32({3, 2}, {7, 8, 9, 10, 11, 12});
  expect_buffer(run(OpKind::kMatmul, {&a, &b}), DType::kF32, {2, 2}, {58, 64, 139, 154});
}

TEST(ReferenceKernels, MatmulOneDimensionalOperands) {
  HostBuffer v = f32({3}, {1, 2, 3});
  HostBuffer m = f32({3, 2}, {7, 8, 9, 10, 11, 12});
  expect_buffer(run(OpKind::kMatmul, {&v, &m}), DType::kF32, {2}, {58, 64});
  HostBuffer mt = f32({2, 3}, {7, 9, 11, 8, 10, 12});
  expect_buffer(run(OpKind::kMatmul, {&mt, &v}), DType::kF32, {2}, {58, 64});
  HostBuffer w = f32({3}, {4, 5, 6});
  expect_buffer(run(OpKind::kMatmul, {&v, &w}), DType::kF32, {}, {32});
  // A 1-D left operand against a batch: [2] @ [2, 2, 1] -> [2, 1].
  HostBuffer r = f32({2}, {1, 10});
  HostBuffer batch = f32({2, 2, 1}, {1, 2, 3, 4});
  expect_buffer(run(OpKind::kMatmul, {&r, &batch}), DType::kF32, {2, 1}, {21, 43});
}

TEST(ReferenceKernels, MatmulBroadcastsBatchDims) {
  // a: [2, 1, 2, 3], b: [3, 3, 2] -> [2, 3, 2, 2]; out[i, j] = a[i, 0] @ b[j].
  std::vector<float> av(12), bv(18);
  for (size_t i = 0; i < av.size(); ++i) av[i] = static_cast<float>(i) - 5.f;
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = static_cast<float>(i % 7) * 0.5f;
  HostBuffer a = f32({2, 1, 2, 3}, av);
  HostBuffer b = f32({3, 3, 2}, bv);
  std::vector<double> want;
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int r = 0; r < 2; ++r) {
        for (int c = 0; c < 2; ++c) {
          double s = 0;
          for (int p = 0; p < 3; ++p) s += av[static_cast<size_t>(i * 6 + r * 3 + p)] * bv[static_cast<size_t>(j * 6 + p * 2 + c)];
          want.push_back(s);
        }
      }
    }
  }
  expect_buffer(run(OpKind::kMatmul, {&a, &b}), DType::kF32, {2, 3, 2, 2}, want);
  // Spot check by hand: out[1, 2, 0, 1] = [1, 2, 3] . [b[2][0][1], b[2][1][1], b[2][2][1]]
  // = [1, 2, 3] . [6%7, 8%7, 10%7] * 0.5 = (6 + 2 + 9) * 0.5 = 8.5.
  EXPECT_FLOAT_EQ(run(OpKind::kMatmul, {&a, &b}).data<float>()[1 * 12 + 2 * 4 + 0 * 2 + 1], 8.5f);
}

TEST(ReferenceKernels, MatmulBatchOfOneBroadcasts) {
  HostBuffer a = f32({2, 1, 2}, {1, 2, 3, 4});
  HostBuffer b = f32({2, 1}, {10, 100});
  expect_buffer(run(OpKind::kMatmul, {&a, &b}), DType::kF32, {2, 1, 1}, {210, 430});
}

TEST(ReferenceKernels, MatmulAccumulatesF32InDouble) {
  // Summed in float, 1e8 + 1 rounds back to 1e8 and the result is 0; in double it is 1.
  HostBuffer a = f32({1, 3}, {1e8f, 1.f, -1e8f});
  HostBuffer b = f32({3, 1}, {1, 1, 1});
  expect_buffer(run(OpKind::kMatmul, {&a, &b}), DType::kF32, {1, 1}, {1});
}

TEST(ReferenceKernels, MatmulIntegersAndMixedDtypes) {
  HostBuffer a = i32({2, 2}, {1, 2, 3, 4});
  HostBuffer b = i32({2, 2}, {5, 6, 7, 8});
  expect_buffer(run(OpKind::kMatmul, {&a, &b}), DType::kI32, {2, 2}, {19, 22, 43, 50});
  HostBuffer c = f32({2, 1}, {0.5f, -1.f});
  expect_buffer(run(OpKind::kMatmul, {&a, &c}), DType::kF32, {2, 1}, {-1.5, -2.5});
  HostBuffer big = i64({1, 2}, {int64_t{1} << 40, 1});
  HostBuffer col = i32({2, 1}, {3, 4});
  expect_buffer(run(OpKind::kMatmul, {&big, &col}), DType::kI64, {1, 1}, {3298534883332.0});
}

TEST(ReferenceKernels, MatmulWithEmptyInnerDimIsZero) {
  HostBuffer a = f32({2, 0}, {});
  HostBuffer b = f32({0, 3}, {});
  expect_buffer(run(OpKind::kMatmul, {&a, &b}), DType::kF32, {2, 3}, {0, 0, 0, 0, 0, 0});
  HostBuffer e = f32({0, 2, 2}, {});
  HostBuffer m = f32({2, 2}, {1, 2, 3, 4});
  expect_buffer(run(OpKind::kMatmul, {&e, &m}), DType::kF32, {0, 2, 2}, {});
}

// ---- reductions ------------------------------------------------------------------------------

TEST(ReferenceKernels, SumOverOneAxisWithAndWithoutKeepdim) {
  HostBuffer x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  expect_buffer(run(OpKind::kSum, {&x}, {{"axes", ints({1})}}), DType::kF32, {2}, {6, 15});
  expect_buffer(run(OpKind::kSum, {&x}, {{"axes", ints({0})}, {"keepdim", flag(true)}}), DType::kF32,
                {1, 3}, {5, 7, 9});
  expect_buffer(run(OpKind::kSum, {&x}, {{"axes", ints({-1})}, {"keepdim", flag(true)}}), DType::kF32,
                {2, 1}, {6, 15});
}

TEST(ReferenceKernels, SumOverAllAndNonAdjacentAxes) {
  HostBuffer x = i32({2, 2, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  expect_buffer(run(OpKind::kSum, {&x}), DType::kI64, {}, {78});
  expect_buffer(run(OpKind::kSum, {&x}, {{"keepdim", flag(true)}}), DType::kI64, {1, 1, 1}, {78});
  // Axes 0 and 2 (given as -1 and 0): out[j] = sum over i, k of x[i, j, k].
  expect_buffer(run(OpKind::kSum, {&x}, {{"axes", ints({-1, 0})}}), DType::kI64, {2},
                {1 + 2 + 3 + 7 + 8 + 9, 4 + 5 + 6 + 10 + 11 + 12});
}

TEST(ReferenceKernels, SumOfBoolsCountsAndIntsDoNotOverflow) {
  HostBuffer b = boolean({2, 3}, {1, 0, 1, 1, 1, 1});
  expect_buffer(run(OpKind::kSum, {&b}, {{"axes", ints({1})}}), DType::kI64, {2}, {2, 3});
  HostBuffer n = i32({3}, {std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::max(), 2});
  expect_buffer(run(OpKind::kSum, {&n}), DType::kI64, {}, {4294967296.0});
}

TEST(ReferenceKernels, SumAccumulatesF32InDouble) {
  HostBuffer x = f32({4}, {1e8f, 1.f, 1.f, -1e8f});
  expect_buffer(run(OpKind::kSum, {&x}), DType::kF32, {}, {2});
}

TEST(ReferenceKernels, SumOverEmptyDims) {
  HostBuffer x = f32({2, 0}, {});
  expect_buffer(run(OpKind::kSum, {&x}, {{"axes", ints({1})}}), DType::kF32, {2}, {0, 0});
  expect_buffer(run(OpKind::kSum, {&x}, {{"axes", ints({0})}}), DType::kF32, {0}, {});
}

TEST(ReferenceKernels, SumOfScalarIsItself) {
  HostBuffer s = f32({}, {4.5f});
  expect_buffer(run(OpKind::kSum, {&s}), DType::kF32, {}, {4.5});
}

TEST(ReferenceKernels, MeanIsF32AndNaNOverNothing) {
  HostBuffer x = i32({2, 2}, {1, 2, 3, 5});
  expect_buffer(run(OpKind::kMean, {&x}), DType::kF32, {}, {2.75});
  expect_buffer(run(OpKind::kMean, {&x}, {{"axes", ints({0})}, {"keepdim", flag(true)}}), DType::kF32,
                {1, 2}, {2, 3.5});
  HostBuffer y = f32({3}, {1e8f, 1.f, -1e8f});
  expect_buffer(run(OpKind::kMean, {&y}), DType::kF32, {}, {1.0 / 3.0});
  HostBuffer e = f32({2, 0}, {});
  expect_buffer(run(OpKind::kMean, {&e}, {{"axes", ints({1})}}), DType::kF32, {2}, {kNaNd, kNaNd});
  HostBuffer b = boolean({4}, {1, 0, 0, 1});
  expect_buffer(run(OpKind::kMean, {&b}), DType::kF32, {}, {0.5});
}

TEST(ReferenceKernels, MaxReducesAndKeepsDtype) {
  HostBuffer x = i64({2, 3}, {-5, -1, -9, 4, 8, 2});
  expect_buffer(run(OpKind::kMax, {&x}, {{"axes", ints({1})}}), DType::kI64, {2}, {-1, 8});
  expect_buffer(run(OpKind::kMax, {&x}, {{"axes", ints({-2})}, {"keepdim", flag(true)}}), DType::kI64,
                {1, 3}, {4, 8, 2});
  HostBuffer f = f32({3}, {-kInf, -kInf, -kInf});
  expect_buffer(run(OpKind::kMax, {&f}), DType::kF32, {}, {-kInfd});
  HostBuffer b = boolean({2, 2}, {0, 0, 0, 1});
  expect_buffer(run(OpKind::kMax, {&b}, {{"axes", ints({1})}}), DType::kBool, {2}, {0, 1});
}

TEST(ReferenceKernels, MaxPropagatesNaN) {
  HostBuffer x = f32({2, 3}, {1, kNaN, 3, 4, 5, 6});
  expect_buffer(run(OpKind::kMax, {&x}, {{"axes", ints({1})}}), DType::kF32, {2}, {kNaNd, 6});
  expect_buffer(run(OpKind::kMax, {&x}, {{"axes", ints({0})}}), DType::kF32, {3}, {4, kNaNd, 6});
  HostBuffer last = f32({3}, {1, 2, kNaN});
  expect_buffer(run(OpKind::kMax, {&last}), DType::kF32, {}, {kNaNd});
}

TEST(ReferenceKernels, ArgmaxReturnsFirstMaximum) {
  HostBuffer x = f32({2, 4}, {1, 7, 7, 3, 9, 2, 9, 9});
  expect_buffer(run(OpKind::kArgmax, {&x}, {{"axis", num(1)}}), DType::kI64, {2}, {1, 0});
  expect_buffer(run(OpKind::kArgmax, {&x}, {{"axis", num(-2)}, {"keepdim", flag(true)}}), DType::kI64,
                {1, 4}, {1, 0, 1, 1});
  HostBuffer n = i32({2, 2, 2}, {0, 5, 3, 1, 2, 2, 2, 8});
  expect_buffer(run(OpKind::kArgmax, {&n}, {{"axis", num(1)}}), DType::kI64, {2, 2}, {1, 0, 0, 1});
}

TEST(ReferenceKernels, ArgmaxTreatsNaNAsMaximalFirstNaNWins) {
  HostBuffer x = f32({5}, {1, kNaN, 9, kNaN, kInf});
  expect_buffer(run(OpKind::kArgmax, {&x}, {{"axis", num(0)}}), DType::kI64, {}, {1});
  HostBuffer y = f32({3}, {kInf, 2, kNaN});
  expect_buffer(run(OpKind::kArgmax, {&y}, {{"axis", num(0)}}), DType::kI64, {}, {2});
  HostBuffer z = boolean({3}, {0, 1, 1});
  expect_buffer(run(OpKind::kArgmax, {&z}, {{"axis", num(0)}}), DType::kI64, {}, {1});
}

// ---- layout ----------------------------------------------------------------------------------

TEST(ReferenceKernels, ReshapeWithInferredDim) {
  HostBuffer x = i32({2, 3}, {1, 2, 3, 4, 5, 6});
  expect_buffer(run(OpKind::kReshape, {&x}, {{"shape", ints({3, -1})}}), DType::kI32, {3, 2},
                {1, 2, 3, 4, 5, 6});
  expect_buffer(run(OpKind::kReshape, {&x}, {{"shape", ints({-1})}}), DType::kI32, {6}, {1, 2, 3, 4, 5, 6});
  HostBuffer s = f32({1, 1}, {7});
  expect_buffer(run(OpKind::kReshape, {&s}, {{"shape", ints({})}}), DType::kF32, {}, {7});
}

TEST(ReferenceKernels, PermuteReordersDims) {
  // x[i, j, k] = 100 i + 10 j + k with shape [2, 3, 2]; permute [2, 0, 1] -> y[k, i, j].
  std::vector<int64_t> v;
  for (int i = 0; i < 2; ++i) for (int j = 0; j < 3; ++j) for (int k = 0; k < 2; ++k) v.push_back(100 * i + 10 * j + k);
  HostBuffer x = i64({2, 3, 2}, v);
  expect_buffer(run(OpKind::kPermute, {&x}, {{"perm", ints({2, 0, -2})}}), DType::kI64, {2, 2, 3},
                {0, 10, 20, 100, 110, 120, 1, 11, 21, 101, 111, 121});
}

TEST(ReferenceKernels, TransposeSwapsTwoDims) {
  HostBuffer x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  expect_buffer(run(OpKind::kTranspose, {&x}, {{"dim0", num(-1)}, {"dim1", num(0)}}), DType::kF32, {3, 2},
                {1, 4, 2, 5, 3, 6});
  HostBuffer b = boolean({1, 2, 2}, {1, 0, 0, 0});
  expect_buffer(run(OpKind::kTranspose, {&b}, {{"dim0", num(1)}, {"dim1", num(2)}}), DType::kBool,
                {1, 2, 2}, {1, 0, 0, 0});
  HostBuffer y = i32({2, 1, 2}, {1, 2, 3, 4});
  expect_buffer(run(OpKind::kTranspose, {&y}, {{"dim0", num(0)}, {"dim1", num(2)}}), DType::kI32,
                {2, 1, 2}, {1, 3, 2, 4});
}

TEST(ReferenceKernels, BroadcastToRepeatsAlongUnitAndNewDims) {
  HostBuffer x = i32({3, 1}, {1, 2, 3});
  expect_buffer(run(OpKind::kBroadcastTo, {&x}, {{"shape", ints({2, 3, 2})}}), DType::kI32, {2, 3, 2},
                {1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3});
  HostBuffer s = f32({}, {1.5f});
  expect_buffer(run(OpKind::kBroadcastTo, {&s}, {{"shape", ints({2, 0})}}), DType::kF32, {2, 0}, {});
  expect_buffer(run(OpKind::kBroadcastTo, {&s}, {{"shape", ints({3})}}), DType::kF32, {3}, {1.5, 1.5, 1.5});
}

TEST(ReferenceKernels, ConcatThreeTensorsAlongMiddleAxis) {
  HostBuffer a = i32({2, 1, 2}, {1, 2, 3, 4});
  HostBuffer b = i32({2, 2, 2}, {10, 11, 12, 13, 14, 15, 16, 17});
  HostBuffer c = i32({2, 1, 2}, {20, 21, 22, 23});
  expect_buffer(run(OpKind::kConcat, {&a, &b, &c}, {{"axis", num(1)}}), DType::kI32, {2, 4, 2},
                {1, 2, 10, 11, 12, 13, 20, 21, 3, 4, 14, 15, 16, 17, 22, 23});
  expect_buffer(run(OpKind::kConcat, {&a, &b, &c}, {{"axis", num(-2)}}), DType::kI32, {2, 4, 2},
                {1, 2, 10, 11, 12, 13, 20, 21, 3, 4, 14, 15, 16, 17, 22, 23});
}

TEST(ReferenceKernels, ConcatWithEmptyOperandAndSingleOperand) {
  HostBuffer a = f32({1, 2}, {1, 2});
  HostBuffer e = f32({0, 2}, {});
  HostBuffer b = f32({1, 2}, {3, 4});
  expect_buffer(run(OpKind::kConcat, {&a, &e, &b}, {{"axis", num(0)}}), DType::kF32, {2, 2}, {1, 2, 3, 4});
  expect_buffer(run(OpKind::kConcat, {&a}, {{"axis", num(1)}}), DType::kF32, {1, 2}, {1, 2});
  HostBuffer p = boolean({2}, {1, 0});
  HostBuffer q = boolean({1}, {1});
  expect_buffer(run(OpKind::kConcat, {&p, &q}), DType::kBool, {3}, {1, 0, 1});
}

TEST(ReferenceKernels, SliceWithStepAndNegativeBounds) {
  HostBuffer x = i32({8}, {0, 1, 2, 3, 4, 5, 6, 7});
  expect_buffer(run(OpKind::kSlice, {&x}, {{"start", num(1)}, {"end", num(7)}, {"step", num(2)}}),
                DType::kI32, {3}, {1, 3, 5});
  expect_buffer(run(OpKind::kSlice, {&x}, {{"start", num(-3)}}), DType::kI32, {3}, {5, 6, 7});
  expect_buffer(run(OpKind::kSlice, {&x}, {{"start", num(-100)}, {"end", num(-5)}}), DType::kI32, {3},
                {0, 1, 2});
  expect_buffer(run(OpKind::kSlice, {&x}, {{"end", num(100)}, {"step", num(3)}}), DType::kI32, {3}, {0, 3, 6});
  expect_buffer(run(OpKind::kSlice, {&x}, {{"start", num(5)}, {"end", num(2)}}), DType::kI32, {0}, {});
}

TEST(ReferenceKernels, SliceAlongMiddleAxis) {
  HostBuffer x = f32({2, 4, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15, 16, 17});
  expect_buffer(run(OpKind::kSlice, {&x}, {{"axis", num(-2)}, {"start", num(1)}, {"step", num(2)}}),
                DType::kF32, {2, 2, 2}, {2, 3, 6, 7, 12, 13, 16, 17});
}

// ---- sources ---------------------------------------------------------------------------------

TEST(ReferenceKernels, FullCastsValueToDtype) {
  expect_buffer(run(OpKind::kFull, {}, {{"shape", ints({2, 2})}, {"value", real(1.5)}}), DType::kF32,
                {2, 2}, {1.5, 1.5, 1.5, 1.5});
  expect_buffer(run(OpKind::kFull, {}, {{"shape", ints({3})}, {"value", real(-2.7)}, {"dtype", dt(DType::kI32)}}),
                DType::kI32, {3}, {-2, -2, -2});
  expect_buffer(run(OpKind::kFull, {}, {{"shape", ints({})}, {"value", real(0.5)}, {"dtype", dt(DType::kBool)}}),
                DType::kBool, {}, {1});
  expect_buffer(run(OpKind::kFull, {}, {{"shape", ints({2})}, {"value", real(kNaNd)}, {"dtype", dt(DType::kI64)}}),
                DType::kI64, {2}, {0, 0});
  expect_buffer(run(OpKind::kFull, {}, {{"shape", ints({0, 3})}, {"value", real(1)}}), DType::kF32, {0, 3}, {});
}

TEST(ReferenceKernels, ArangeComputesStartPlusIStep) {
  expect_buffer(run(OpKind::kArange, {}, {{"end", real(5)}}), DType::kI64, {5}, {0, 1, 2, 3, 4});
  expect_buffer(run(OpKind::kArange, {}, {{"start", real(0.5)}, {"end", real(1.5)}, {"step", real(0.25)},
                                          {"dtype", dt(DType::kF32)}}),
                DType::kF32, {4}, {0.5, 0.75, 1.0, 1.25});
  expect_buffer(run(OpKind::kArange, {}, {{"start", real(3)}, {"end", real(-3)}, {"step", real(-2)},
                                          {"dtype", dt(DType::kI32)}}),
                DType::kI32, {3}, {3, 1, -1});
  expect_buffer(run(OpKind::kArange, {}, {{"start", real(0)}, {"end", real(2)}, {"step", real(0.5)}}),
                DType::kI64, {4}, {0, 0, 1, 1});
  expect_buffer(run(OpKind::kArange, {}, {{"start", real(2)}, {"end", real(1)}}), DType::kI64, {0}, {});
}

// Sample mean and standard deviation of a float buffer.
std::pair<double, double> moments(const HostBuffer& b) {
  double s = 0, s2 = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    double v = b.element_as_double(i);
    s += v;
    s2 += v * v;
  }
  double n = static_cast<double>(b.numel());
  double m = s / n;
  return {m, std::sqrt(s2 / n - m * m)};
}

bool same_bytes(const HostBuffer& a, const HostBuffer& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.bytes(), b.bytes(), a.nbytes()) == 0;
}

TEST(ReferenceKernels, UniformIsSeededAndInRange) {
  NamedAttrs attrs = {{"shape", ints({100, 100})}, {"low", real(-2)}, {"high", real(6)}, {"seed", num(42)}};
  HostBuffer a = run(OpKind::kUniform, {}, attrs);
  HostBuffer b = run(OpKind::kUniform, {}, attrs);
  EXPECT_TRUE(same_bytes(a, b)) << "same seed must give the same values";
  attrs[3].second = num(43);
  HostBuffer c = run(OpKind::kUniform, {}, attrs);
  EXPECT_FALSE(same_bytes(a, c)) << "a different seed must give different values";
  float lo = a.data<float>()[0], hi = lo;
  for (float v : a.span<float>()) {
    ASSERT_GE(v, -2.f);
    ASSERT_LT(v, 6.f);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_LT(lo, -1.9f);
  EXPECT_GT(hi, 5.9f);
  auto [mean, stddev] = moments(a);
  EXPECT_NEAR(mean, 2.0, 0.1);
  EXPECT_NEAR(stddev, 8.0 / std::sqrt(12.0), 0.05);
}

TEST(ReferenceKernels, UniformIntegersAreFlooredIntoRange) {
  HostBuffer a = run(OpKind::kUniform, {}, {{"shape", ints({1000})}, {"low", real(0)}, {"high", real(3)},
                                            {"seed", num(7)}, {"dtype", dt(DType::kI32)}});
  ASSERT_EQ(a.dtype(), DType::kI32);
  int counts[3] = {0, 0, 0};
  for (int32_t v : a.span<int32_t>()) {
    ASSERT_GE(v, 0);
    ASSERT_LT(v, 3);
    ++counts[v];
  }
  for (int c : counts) EXPECT_GT(c, 250);
}

TEST(ReferenceKernels, NormalIsSeededWithRequestedMoments) {
  NamedAttrs attrs = {{"shape", ints({10000})}, {"mean", real(3)}, {"std", real(0.5)}, {"seed", num(1)}};
  HostBuffer a = run(OpKind::kNormal, {}, attrs);
  HostBuffer b = run(OpKind::kNormal, {}, attrs);
  EXPECT_TRUE(same_bytes(a, b));
  attrs[3].second = num(2);
  HostBuffer c = run(OpKind::kNormal, {}, attrs);
  EXPECT_FALSE(same_bytes(a, c));
  auto [mean, stddev] = moments(a);
  EXPECT_NEAR(mean, 3.0, 0.03);
  EXPECT_NEAR(stddev, 0.5, 0.03);
  HostBuffer d = run(OpKind::kNormal, {}, {{"shape", ints({4})}, {"mean", real(-1)}, {"std", real(0)}, {"seed", num(1)}});
  expect_buffer(d, DType::kF32, {4}, {-1, -1, -1, -1});
}


// ---- quantization -----------------------------------------------------------------------------

TEST(ReferenceKernels, QuantizeLinearRoundsHalfToEvenAndSaturates) {
  // x / 0.5: 2.5 -> 2 and 3.5 -> 4 (half to even), -1.5 -> -2, then + zero point 10, clamped.
  HostBuffer x = f32({7}, {1.25f, 1.75f, -0.75f, 1000.f, -1000.f, kInf, std::nanf("")});
  HostBuffer scale = f32({}, {0.5f});
  HostBuffer zp = make(DType::kU8, {}, std::vector<int>{10});
  expect_buffer(run(OpKind::kQuantizeLinear, {&x, &scale, &zp}), DType::kU8, {7}, {12, 14, 8, 255, 0, 255, 10});
  HostBuffer zs = make(DType::kI8, {}, std::vector<int>{-3});
  expect_buffer(run(OpKind::kQuantizeLinear, {&x, &scale, &zs}), DType::kI8, {7}, {-1, 1, -5, 127, -128, 127, -3});
}

TEST(ReferenceKernels, QuantizeLinearPerChannelBroadcastsScaleAndZeroPoint) {
  // x [2, 3] quantized along dim 0: scales [2, 1] and zero points [2, 1].
  HostBuffer x = f32({2, 3}, {1, 2, 3, 1, 2, 3});
  HostBuffer scale = f32({2, 1}, {1, 0.5f});
  HostBuffer zp = make(DType::kI8, {2, 1}, std::vector<int>{0, -1});
  expect_buffer(run(OpKind::kQuantizeLinear, {&x, &scale, &zp}), DType::kI8, {2, 3}, {1, 2, 3, 1, 3, 5});
}

TEST(ReferenceKernels, DequantizeLinearSubtractsZeroPointThenScales) {
  HostBuffer x = make(DType::kU8, {4}, std::vector<int>{0, 10, 128, 255});
  HostBuffer scale = f32({}, {0.25f});
  HostBuffer zp = make(DType::kU8, {}, std::vector<int>{128});
  expect_buffer(run(OpKind::kDequantizeLinear, {&x, &scale, &zp}), DType::kF32, {4}, {-32, -29.5, 0, 31.75});
  HostBuffer xs = make(DType::kI8, {2, 2}, std::vector<int>{-128, 127, 1, -1});
  HostBuffer scales = f32({1, 2}, {2, 0.5f});
  HostBuffer zs = make(DType::kI8, {1, 2}, std::vector<int>{0, 1});
  expect_buffer(run(OpKind::kDequantizeLinear, {&xs, &scales, &zs}), DType::kF32, {2, 2}, {-256, 63, 2, -1});
}

TEST(ReferenceKernels, QuantizationRefusesWhatItCannotCompute) {
  auto error = [](OpKind op, std::vector<TensorType> in) {
    std::vector<AttrValue> attrs;
    TensorType out;
    const InferError e = infer_op(op, in, attrs, &out);
    return e ? e->message() : std::string();
  };
  const TensorType u8{DType::kU8, {}}, f{DType::kF32, {}};
  EXPECT_NE(error(OpKind::kQuantizeLinear, {{DType::kF32, {2, 3}}, f, {DType::kI32, {}}}).find("must be i8 or u8"),
            std::string::npos);
  EXPECT_NE(error(OpKind::kQuantizeLinear, {{DType::kF32, {2, 3}}, {DType::kF32, {4, 1}}, u8}).find("must broadcast"),
            std::string::npos);
  // A scale that would grow x is refused: the result has x's shape.
  EXPECT_NE(error(OpKind::kDequantizeLinear, {{DType::kU8, {3}}, {DType::kF32, {2, 3}}, u8}).find("must broadcast"),
            std::string::npos);
  EXPECT_NE(error(OpKind::kDequantizeLinear, {{DType::kU8, {3}}, f, {DType::kI8, {}}}).find("x's dtype"),
            std::string::npos);
  EXPECT_NE(error(OpKind::kDequantizeLinear, {{DType::kF32, {3}}, f, {DType::kF32, {}}}).find("i8, u8 or i32"),
            std::string::npos);
  EXPECT_NE(error(OpKind::kDequantizeLinear, {{DType::kU8, {3}}, {DType::kI32, {}}, u8}).find("scale"),
            std::string::npos);
}

}  // namespace
}  // namespace tracecache
