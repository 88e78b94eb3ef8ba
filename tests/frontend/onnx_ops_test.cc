// The ops ONNX models need (issue 16, docs/ops.md "The ops ONNX models need"):
//  - reference semantics on hand-picked edge cases (half-to-even rounding, the signs of remainder
//    and fmod, integer division by zero and INT_MIN / -1, argmin's ties and NaN with and without
//    select_last_index, min's NaN);
//  - the inference rules' errors;
//  - conv_transpose2d's cpu kernel against the reference within the GEMM bound.
// The elementwise ops, min and argmin are also in cpu_kernels_test.cc's every-op suite (bitwise);
// PyTorch and NumPy are the oracles in tests/python/test_onnx_ops.py, gradients in
// tests/grad/cases_onnx.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "replay/backends/cpu/cpu_kernels.h"
#include "capture/ir/graph.h"
#include "capture/ops/ops.h"
#include "tests/backend_compare.h"
#include "tests/test_buffers.h"

namespace tracecache {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Runs `op`'s reference kernel on `in` with `attrs` (positional, defaults filled).
HostBuffer run_ref(OpKind op, std::vector<const HostBuffer*> in, std::vector<AttrValue> attrs = {}) {
  const OpInfo& info = op_info(op);
  if (attrs.empty()) {
    for (const AttrSpec& s : info.attrs) attrs.push_back(s.default_value);
  }
  std::vector<TensorType> types;
  for (const HostBuffer* b : in) types.push_back({b->dtype(), b->shape()});
  Result<TensorType> t = infer_op(op, types, attrs);
  EXPECT_TRUE(t.is_ok()) << t.status().message();
  HostBuffer out(t->dtype, t->shape);
  info.reference(in, attrs, out);
  return out;
}

std::string infer_error(OpKind op, std::vector<TensorType> types, std::vector<AttrValue> attrs) {
  Result<TensorType> t = infer_op(op, types, attrs);
  return t.is_ok() ? "" : t.status().message();
}

template <typename T>
std::vector<T> values(const HostBuffer& b) {
  return std::vector<T>(b.data<T>(), b.data<T>() + b.numel());
}

AttrValue ints(IntList v) { return AttrValue::of_ints(std::move(v)); }
AttrValue num(int64_t v) { return AttrValue::of_int(v); }
AttrValue flag(bool v) { return AttrValue::of_bool(v); }

TEST(OnnxOps, RoundIsHalfToEvenAndFloorCeilKeepIntegers) {
  HostBuffer x = test::f32({8}, {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.4f, kNaN, -2.6f});
  std::vector<float> r = values<float>(run_ref(OpKind::kRound, {&x}));
  EXPECT_EQ(r[0], 0.0f);
  EXPECT_EQ(r[1], 2.0f);
  EXPECT_EQ(r[2], 2.0f);
  EXPECT_TRUE(r[3] == 0.0f && std::signbit(r[3]));
  EXPECT_EQ(r[4], -2.0f);
  EXPECT_EQ(r[5], 2.0f);
  EXPECT_TRUE(std::isnan(r[6]));
  EXPECT_EQ(r[7], -3.0f);
  HostBuffer i = test::i64({3}, {-3, 0, 7});
  EXPECT_EQ(values<int64_t>(run_ref(OpKind::kFloor, {&i})), (std::vector<int64_t>{-3, 0, 7}));
  EXPECT_EQ(values<int64_t>(run_ref(OpKind::kCeil, {&i})), (std::vector<int64_t>{-3, 0, 7}));
  EXPECT_EQ(run_ref(OpKind::kSin, {&i}).dtype(), DType::kF32);
}

TEST(OnnxOps, RemainderTakesTheDivisorsSignFmodTheDividends) {
  HostBuffer a = test::i32({4}, {7, -7, 7, -7});
  HostBuffer b = test::i32({4}, {3, 3, -3, -3});
  EXPECT_EQ(values<int32_t>(run_ref(OpKind::kRemainder, {&a, &b})), (std::vector<int32_t>{1, 2, -2, -1}));
  EXPECT_EQ(values<int32_t>(run_ref(OpKind::kFmod, {&a, &b})), (std::vector<int32_t>{1, -1, 1, -1}));
  EXPECT_EQ(values<int32_t>(run_ref(OpKind::kTruncDiv, {&a, &b})), (std::vector<int32_t>{2, -2, -2, 2}));
  HostBuffer fa = test::f32({4}, {5.5f, -5.5f, 6.0f, -6.0f});
  HostBuffer fb = test::f32({4}, {2.0f, 2.0f, -3.0f, 3.0f});
  std::vector<float> r = values<float>(run_ref(OpKind::kRemainder, {&fa, &fb}));
  EXPECT_EQ(r[0], 1.5f);
  EXPECT_EQ(r[1], 0.5f);
  EXPECT_TRUE(r[2] == 0.0f && std::signbit(r[2]));  // a zero result takes the divisor's sign
  EXPECT_TRUE(r[3] == 0.0f && !std::signbit(r[3]));
  std::vector<float> f = values<float>(run_ref(OpKind::kFmod, {&fa, &fb}));
  EXPECT_EQ(f[1], -1.5f);
  EXPECT_EQ(values<float>(run_ref(OpKind::kTruncDiv, {&fa, &fb}))[1], -2.0f);
}

TEST(OnnxOps, IntegerDivisionByZeroAndOverflowAreDefined) {
  const int64_t lo = std::numeric_limits<int64_t>::min();
  HostBuffer a = test::i64({3}, {lo, 5, -5});
  HostBuffer minus_one = test::i64({3}, {-1, 0, 0});
  for (OpKind op : {OpKind::kRemainder, OpKind::kFmod}) {
    EXPECT_EQ(values<int64_t>(run_ref(op, {&a, &minus_one})), (std::vector<int64_t>{0, 0, 0})) << op_info(op).name;
  }
  EXPECT_EQ(values<int64_t>(run_ref(OpKind::kTruncDiv, {&a, &minus_one})), (std::vector<int64_t>{lo, 0, 0}));
  EXPECT_NE(infer_error(OpKind::kTruncDiv, {{DType::kBool, {1}}, {DType::kBool, {1}}}, {}).find("both operands are bool"),
            std::string::npos);
}

TEST(OnnxOps, ArgminTiesNaNAndSelectLastIndex) {
  HostBuffer x = test::f32({2, 4}, {3, 1, 2, 1, 5, kNaN, 0, kNaN});
  auto argmin = [&](bool last) {
    return values<int64_t>(run_ref(OpKind::kArgmin, {&x}, {num(1), flag(false), flag(last)}));
  };
  EXPECT_EQ(argmin(false), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(argmin(true), (std::vector<int64_t>{3, 3}));
  HostBuffer keep = run_ref(OpKind::kArgmin, {&x}, {num(-1), flag(true), flag(false)});
  EXPECT_EQ(keep.shape(), (Shape{2, 1}));
  std::vector<float> m = values<float>(run_ref(OpKind::kMin, {&x}, {ints({1}), flag(false)}));
  EXPECT_EQ(m[0], 1.0f);
  EXPECT_TRUE(std::isnan(m[1]));
  HostBuffer b = test::make<bool>(DType::kBool, {3}, {true, true, true});
  EXPECT_EQ(values<int64_t>(run_ref(OpKind::kArgmin, {&b}, {num(0), flag(false), flag(true)})), (std::vector<int64_t>{2}));
  EXPECT_NE(infer_error(OpKind::kArgmin, {{DType::kF32, {3, 0}}}, {num(1), flag(false), flag(false)}).find("empty dim"),
            std::string::npos);
  EXPECT_NE(infer_error(OpKind::kMin, {{DType::kF32, {3, 0}}}, {ints({1}), flag(false)}).find("op 'min'"),
            std::string::npos);
}

// ---- conv_transpose2d ---------------------------------------------------------------------------

struct ConvTransposeConfig {
  Shape x, w;
  IntList stride, padding, output_padding, dilation;
  int64_t groups;
  bool bias;
};

std::vector<AttrValue> conv_transpose_attrs(const ConvTransposeConfig& k) {
  return {ints(k.stride), ints(k.padding), ints(k.output_padding), ints(k.dilation), num(k.groups)};
}

TEST(OnnxOps, ConvTransposeShapes) {
  // ONNX: (H - 1) s - 2 p + d (k - 1) + output_padding + 1.
  const std::vector<TensorType> types = {{DType::kF32, {1, 4, 3, 5}}, {DType::kF32, {4, 3, 3, 2}}};
  std::vector<AttrValue> attrs = {ints({2, 3}), ints({1, 0}), ints({1, 2}), ints({2, 1}), num(2)};
  Result<TensorType> t = infer_op(OpKind::kConvTranspose2d, types, attrs);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_EQ(t->shape, (Shape{1, 6, 2 * 2 - 2 + 2 * 2 + 1 + 1, 4 * 3 - 0 + 1 * 1 + 2 + 1}));
  const std::vector<TensorType> in = {{DType::kF32, {1, 4, 3, 3}}, {DType::kF32, {4, 2, 3, 3}}};
  EXPECT_NE(infer_error(OpKind::kConvTranspose2d, in, {ints({2}), ints({0}), ints({2}), ints({1}), num(1)})
                .find("output_padding [2, 2] must be smaller than stride"),
            std::string::npos);
  EXPECT_NE(infer_error(OpKind::kConvTranspose2d, in, {ints({1}), ints({0}), ints({0}), ints({1}), num(3)})
                .find("divisible by groups=3"),
            std::string::npos);
  EXPECT_NE(infer_error(OpKind::kConvTranspose2d, in, {ints({1}), ints({3}), ints({0}), ints({1}), num(1)})
                .find("it must be in [1, 2^24]"),
            std::string::npos);
  EXPECT_NE(infer_error(OpKind::kConvTranspose2d, {in[0], in[1], {DType::kF32, {4}}},
                        {ints({1}), ints({0}), ints({0}), ints({1}), num(1)})
                .find("bias f32[4] must be [2]"),
            std::string::npos);
}

TEST(OnnxOps, ConvTransposeCpuMatchesReference) {
  const std::vector<ConvTransposeConfig> configs = {
      {{2, 3, 4, 5}, {3, 2, 3, 3}, {1, 1}, {0, 0}, {0, 0}, {1, 1}, 1, true},
      {{1, 4, 3, 4}, {4, 3, 3, 2}, {2, 3}, {1, 0}, {1, 2}, {2, 1}, 2, true},
      {{2, 6, 5, 5}, {6, 1, 4, 4}, {2, 2}, {1, 1}, {0, 0}, {1, 1}, 6, false},
      {{1, 2, 7, 3}, {2, 5, 1, 1}, {3, 1}, {0, 0}, {2, 0}, {1, 1}, 1, true},
      {{1, 8, 20, 20}, {8, 4, 2, 2}, {2, 2}, {0, 0}, {0, 0}, {1, 1}, 1, true},
  };
  uint32_t seed = 1;
  for (const ConvTransposeConfig& k : configs) {
    std::vector<HostBuffer> inputs;
    inputs.push_back(test::f32(k.x, test::random_values(static_cast<size_t>(k.x.numel()), seed++)));
    inputs.push_back(test::f32(k.w, test::random_values(static_cast<size_t>(k.w.numel()), seed++)));
    if (k.bias) {
      const int64_t o = k.w[1] * k.groups;
      inputs.push_back(test::f32({o}, test::random_values(static_cast<size_t>(o), seed++)));
    }
    std::vector<TensorType> types;
    for (const HostBuffer& b : inputs) types.push_back({b.dtype(), b.shape()});
    std::vector<AttrValue> attrs = conv_transpose_attrs(k);
    Result<TensorType> type = infer_op(OpKind::kConvTranspose2d, types, attrs);
    ASSERT_TRUE(type.is_ok()) << type.status().message();
    Graph g;
    std::vector<NodeId> ids;
    for (const TensorType& t : types) ids.push_back(g.add_parameter(t));
    const NodeId node = g.add_node(OpKind::kConvTranspose2d, ids, attrs, *type);
    std::vector<const HostBuffer*> in;
    for (const HostBuffer& b : inputs) in.push_back(&b);
    HostBuffer want(type->dtype, type->shape);
    op_info(OpKind::kConvTranspose2d).reference(in, attrs, want);
    HostBuffer got(type->dtype, type->shape);
    for (float& v : got.span<float>()) v = 12345.0f;  // every element must be written
    cpu::run_op(g, node, in, got);
    std::vector<HostBuffer> abs_inputs;
    std::vector<const HostBuffer*> abs_in;
    for (const HostBuffer& b : inputs) {
      HostBuffer a = b.clone();
      for (float& v : a.span<float>()) v = std::fabs(v);
      abs_inputs.push_back(std::move(a));
    }
    for (const HostBuffer& b : abs_inputs) abs_in.push_back(&b);
    HostBuffer abs_ref(type->dtype, type->shape);
    op_info(OpKind::kConvTranspose2d).reference(abs_in, attrs, abs_ref);
    EXPECT_TRUE(testing::within_gemm_bound(got, want, abs_ref, (k.w[1]) * k.w[2] * k.w[3] + 1))
        << type_to_string(*type);
  }
}

}  // namespace
}  // namespace tracecache
