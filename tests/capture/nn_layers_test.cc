// The nn layers of capture/trace/nn.h (conv2d, pools, linear, flatten, pad, dropout, embedding,
// gather, index_select):
//  - the reference kernels on small cases whose expected values are worked out by hand from
//    PyTorch's documented semantics (torch.nn.functional);
//  - the inference rules: attribute normalization, and errors naming the op;
//  - the cpu kernels (replay/backends/cpu/cpu_nn_layers.h) against the reference on many shapes and edge
//    cases: bitwise for pools and lookups, within the GEMM bound for conv2d and linear;
//  - the ops recorded through LazyContext (C++ API and fixtures/programs/convnet.trace) on the
//    reference evaluator and on the cpu backend's compiled replay, and through the disk cache.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "capture/core/buffer.h"
#include "capture/ops/attr_views.h"
#include "capture/ops/elementwise.h"
#include "capture/ir/graph.h"
#include "capture/trace/nn.h"
#include "capture/ops/ops.h"
#include "frontend/program/program.h"
#include "frontend/program/program_runner.h"
#include "capture/reference/reference.h"
#include "capture/core/status.h"
#include "replay/compile/compiler.h"
#include "replay/backends/cpu/cpu_backend.h"
#include "replay/backends/cpu/cpu_kernels.h"
#include "replay/backends/cpu/cpu_threads.h"
#include "replay/backends/cpu/onednn_conv.h"
#include "replay/backends/cpu/onednn_matmul.h"
#include "replay/engine/runtime.h"
#include "store/sqlite/cache_db.h"
#include "tests/backend_compare.h"
#include "tests/test_graphs.h"
#include "tests/test_support.h"

namespace tracecache {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

using NamedAttrs = std::vector<std::pair<std::string_view, AttrValue>>;

AttrValue ints(IntList v) { return AttrValue::of_ints(v); }
AttrValue num(int64_t v) { return AttrValue::of_int(v); }
AttrValue real(double v) { return AttrValue::of_float(v); }
AttrValue flag(bool v) { return AttrValue::of_bool(v); }

// Every attribute of `op` at its default, then `named` on top.
std::vector<AttrValue> attrs_for(const OpInfo& op, const NamedAttrs& named) {
  std::vector<AttrValue> attrs;
  for (const AttrSpec& spec : op.attrs) attrs.push_back(spec.default_value);
  for (const auto& [name, value] : named) {
    const int i = op.attr_index(name);
    EXPECT_GE(i, 0) << op.name << " has no attribute " << name;
    attrs[static_cast<size_t>(i)] = value;
  }
  return attrs;
}

template <typename T>
HostBuffer buffer(const Shape& shape, const std::vector<T>& values) {
  HostBuffer b(dtype_of<T>(), shape);
  EXPECT_EQ(static_cast<size_t>(b.numel()), values.size());
  for (size_t i = 0; i < values.size() && i < static_cast<size_t>(b.numel()); ++i)
    b.data<T>()[i] = values[i];
  return b;
}

// 0, 1, 2, ... as f32.
HostBuffer iota(const Shape& shape, float start = 0) {
  HostBuffer b(DType::kF32, shape);
  for (int64_t i = 0; i < b.numel(); ++i) b.data<float>()[i] = start + static_cast<float>(i);
  return b;
}

struct Evaluated {
  TensorType type;
  HostBuffer value;
};

// Infers `op` on the inputs' types (normalizing `named` attributes) and runs its reference kernel.
Evaluated reference(OpKind kind, const std::vector<const HostBuffer*>& in,
                    const NamedAttrs& named = {}) {
  const OpInfo& op = op_info(kind);
  std::vector<AttrValue> attrs = attrs_for(op, named);
  std::vector<TensorType> types;
  for (const HostBuffer* b : in) types.push_back({b->dtype(), b->shape()});
  const TensorType type = infer_op(kind, types, attrs).value_or_throw();
  HostBuffer out(type.dtype, type.shape);
  op.reference(in, attrs, out);
  return {type, std::move(out)};
}

std::vector<double> values(const HostBuffer& b) {
  std::vector<double> out;
  for (int64_t i = 0; i < b.numel(); ++i) out.push_back(b.element_as_double(i));
  return out;
}

// ---- reference kernels on hand-computed cases ---------------------------------------------------

TEST(NnReference, Conv2dValidPaddedDilatedGroupedAndBias) {
  const HostBuffer x = iota({1, 1, 3, 3}, 1);  // [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
  const HostBuffer w = iota({1, 1, 2, 2}, 1);  // [[1, 2], [3, 4]]
  // Cross-correlation (no kernel flip): out[0][0] = 1*1 + 2*2 + 3*4 + 4*5.
  Evaluated valid = reference(OpKind::kConv2d, {&x, &w});
  EXPECT_EQ(valid.value.shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(values(valid.value), (std::vector<double>{37, 47, 67, 77}));
  // Padding 1, stride 2: windows start at -1 and 1; padding contributes zeros.
  Evaluated padded =
      reference(OpKind::kConv2d, {&x, &w}, {{"stride", ints({2, 2})}, {"padding", ints({1})}});
  EXPECT_EQ(padded.value.shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(values(padded.value), (std::vector<double>{4 * 1, 3 * 2 + 4 * 3, 2 * 4 + 4 * 7, 77}));
  // Dilation 2: the taps are x[0][0], x[0][2], x[2][0], x[2][2].
  Evaluated dilated = reference(OpKind::kConv2d, {&x, &w}, {{"dilation", ints({2, 2})}});
  EXPECT_EQ(dilated.value.shape(), (Shape{1, 1, 1, 1}));
  EXPECT_EQ(values(dilated.value), (std::vector<double>{1 * 1 + 2 * 3 + 3 * 7 + 4 * 9}));
  // Bias is added to every output of its channel.
  const HostBuffer b = buffer<float>({1}, {0.5f});
  Evaluated biased = reference(OpKind::kConv2d, {&x, &w, &b});
  EXPECT_EQ(values(biased.value), (std::vector<double>{37.5, 47.5, 67.5, 77.5}));
  // Two groups: channel 0 (all 1) only meets weight 3, channel 1 (all 2) only weight 5.
  const HostBuffer x2 = buffer<float>({1, 2, 2, 2}, {1, 1, 1, 1, 2, 2, 2, 2});
  const HostBuffer w2 = buffer<float>({2, 1, 1, 1}, {3, 5});
  const HostBuffer b2 = buffer<float>({2}, {1, -1});
  Evaluated grouped = reference(OpKind::kConv2d, {&x2, &w2, &b2}, {{"groups", num(2)}});
  EXPECT_EQ(values(grouped.value), (std::vector<double>{4, 4, 4, 4, 9, 9, 9, 9}));
  // One group: every output channel sums both input channels.
  const HostBuffer w3 = buffer<float>({1, 2, 1, 1}, {3, 5});
  EXPECT_EQ(values(reference(OpKind::kConv2d, {&x2, &w3}).value), (std::vector<double>{13, 13, 13, 13}));
}

TEST(NnReference, MaxPool2dWindowsPaddingCeilModeAndNaN) {
  const HostBuffer x = iota({1, 1, 4, 4});  // row r holds 4r .. 4r+3
  Evaluated plain = reference(OpKind::kMaxPool2d, {&x}, {{"kernel", ints({2, 2})}});
  EXPECT_EQ(values(plain.value), (std::vector<double>{5, 7, 13, 15}));
  // kernel 3, stride 2, padding 1: floor((4 + 2 - 3) / 2) + 1 = 2 windows per axis.
  NamedAttrs k3 = {{"kernel", ints({3})}, {"stride", ints({2})}, {"padding", ints({1})}};
  Evaluated padded = reference(OpKind::kMaxPool2d, {&x}, k3);
  EXPECT_EQ(values(padded.value), (std::vector<double>{5, 7, 13, 15}));
  // ceil_mode: ceil(3 / 2) + 1 = 3 windows; the last starts at 3, inside the input.
  k3.push_back({"ceil_mode", flag(true)});
  Evaluated ceil = reference(OpKind::kMaxPool2d, {&x}, k3);
  EXPECT_EQ(ceil.value.shape(), (Shape{1, 1, 3, 3}));
  EXPECT_EQ(values(ceil.value), (std::vector<double>{5, 7, 7, 13, 15, 15, 13, 15, 15}));
  // A NaN anywhere in a window wins (PyTorch propagates NaN); -inf never beats a number.
  const HostBuffer y = buffer<float>({1, 1, 2, 2}, {1, kNaN, -kInf, 3});
  EXPECT_TRUE(
      std::isnan(reference(OpKind::kMaxPool2d, {&y}, {{"kernel", ints({2})}}).value.data<float>()[0]));
  const HostBuffer z = buffer<float>({1, 1, 1, 2}, {-kInf, -2});
  EXPECT_EQ(values(reference(OpKind::kMaxPool2d, {&z}, {{"kernel", ints({1, 2})}}).value),
            (std::vector<double>{-2}));
  // Dilation 2 with padding 1 on a 1x1 input: both taps fall in the padding, which is -inf.
  const HostBuffer one = buffer<float>({1, 1, 1, 1}, {7});
  Evaluated only_pad = reference(
      OpKind::kMaxPool2d, {&one},
      {{"kernel", ints({2})}, {"stride", ints({1})}, {"padding", ints({1})}, {"dilation", ints({2})}});
  EXPECT_EQ(only_pad.value.shape(), (Shape{1, 1, 1, 1}));
  EXPECT_EQ(only_pad.value.data<float>()[0], -kInf);
}

TEST(NnReference, AvgPool2dDivisors) {
  const HostBuffer x = iota({1, 1, 4, 4});
  EXPECT_EQ(values(reference(OpKind::kAvgPool2d, {&x}, {{"kernel", ints({2})}}).value),
            (std::vector<double>{2.5, 4.5, 10.5, 12.5}));
  // Padding 1: the first window covers x[0..1][0..1] (sum 10) and 5 padding cells.
  NamedAttrs k3 = {{"kernel", ints({3})}, {"stride", ints({2})}, {"padding", ints({1})}};
  EXPECT_FLOAT_EQ(reference(OpKind::kAvgPool2d, {&x}, k3).value.data<float>()[0], 10.0f / 9.0f);
  k3.push_back({"count_include_pad", flag(false)});
  EXPECT_FLOAT_EQ(reference(OpKind::kAvgPool2d, {&x}, k3).value.data<float>()[0], 10.0f / 4.0f);
  // ceil_mode windows that run past the input: the divisor counts only cells inside the
  // (padded) input, even with count_include_pad. 3x3 input 0..8, kernel 2, stride 2.
  const HostBuffer y = iota({1, 1, 3, 3});
  Evaluated ceil =
      reference(OpKind::kAvgPool2d, {&y}, {{"kernel", ints({2})}, {"ceil_mode", flag(true)}});
  EXPECT_EQ(ceil.value.shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(values(ceil.value),
            (std::vector<double>{(0 + 1 + 3 + 4) / 4.0, (2 + 5) / 2.0, (6 + 7) / 2.0, 8}));
  // Kernel 3, stride 2, padding 1, ceil_mode on 3x3: window (1, 1) spans rows/cols 1..3, of
  // which 3 is padding: 9 cells with padding (capped at the padded input), 4 without.
  NamedAttrs c3 = {
      {"kernel", ints({3})}, {"stride", ints({2})}, {"padding", ints({1})}, {"ceil_mode", flag(true)}};
  Evaluated with_pad = reference(OpKind::kAvgPool2d, {&y}, c3);
  EXPECT_FLOAT_EQ(with_pad.value.data<float>()[0], 8.0f / 9.0f);
  EXPECT_FLOAT_EQ(with_pad.value.data<float>()[3], 24.0f / 9.0f);
  c3.push_back({"count_include_pad", flag(false)});
  Evaluated without_pad = reference(OpKind::kAvgPool2d, {&y}, c3);
  EXPECT_FLOAT_EQ(without_pad.value.data<float>()[0], 8.0f / 4.0f);
  EXPECT_FLOAT_EQ(without_pad.value.data<float>()[3], 24.0f / 4.0f);
}

TEST(NnReference, AdaptiveAvgPool2dWindows) {
  // H = 5 into 3: windows [0, 2), [1, 4), [3, 5) (floor(i H / 3) to ceil((i + 1) H / 3)).
  const HostBuffer x = iota({1, 1, 5, 1}, 1);
  Evaluated r = reference(OpKind::kAdaptiveAvgPool2d, {&x}, {{"output_size", ints({3, 1})}});
  EXPECT_EQ(values(r.value), (std::vector<double>{1.5, 3, 4.5}));
  // Global pooling is the mean of each plane.
  const HostBuffer y = iota({1, 2, 2, 2});
  EXPECT_EQ(values(reference(OpKind::kAdaptiveAvgPool2d, {&y}, {{"output_size", ints({1})}}).value),
            (std::vector<double>{1.5, 5.5}));
  // More outputs than inputs: windows overlap and repeat.
  const HostBuffer z = iota({1, 1, 1, 2});
  EXPECT_EQ(values(reference(OpKind::kAdaptiveAvgPool2d, {&z}, {{"output_size", ints({1, 3})}}).value),
            (std::vector<double>{0, 0.5, 1}));
}

TEST(NnReference, LinearWithAndWithoutBias) {
  const HostBuffer x = iota({2, 3}, 1);  // [[1, 2, 3], [4, 5, 6]]
  const HostBuffer w = buffer<float>({2, 3}, {1, 0, -1, 0.5f, 0.5f, 0.5f});
  const HostBuffer b = buffer<float>({2}, {10, 20});
  EXPECT_EQ(values(reference(OpKind::kLinear, {&x, &w}).value), (std::vector<double>{-2, 3, -2, 7.5}));
  EXPECT_EQ(values(reference(OpKind::kLinear, {&x, &w, &b}).value),
            (std::vector<double>{8, 23, 8, 27.5}));
  const HostBuffer v = iota({3}, 1);
  Evaluated vec = reference(OpKind::kLinear, {&v, &w});
  EXPECT_EQ(vec.value.shape(), (Shape{2}));
  EXPECT_EQ(values(vec.value), (std::vector<double>{-2, 3}));
}

TEST(NnReference, FlattenShapes) {
  const HostBuffer x = iota({2, 3, 4});
  Evaluated all = reference(OpKind::kFlatten, {&x});
  EXPECT_EQ(all.type.shape, (Shape{24}));
  EXPECT_EQ(values(all.value), values(x));
  EXPECT_EQ(reference(OpKind::kFlatten, {&x}, {{"start_dim", num(1)}}).type.shape, (Shape{2, 12}));
  EXPECT_EQ(reference(OpKind::kFlatten, {&x}, {{"start_dim", num(-3)}, {"end_dim", num(-2)}}).type.shape,
            (Shape{6, 4}));
  EXPECT_EQ(reference(OpKind::kFlatten, {&x}, {{"start_dim", num(2)}}).type.shape, (Shape{2, 3, 4}));
  const HostBuffer s = buffer<float>({}, {3});
  EXPECT_EQ(reference(OpKind::kFlatten, {&s}).type.shape, (Shape{1}));
}

TEST(NnReference, PadConstantAndCrop) {
  const HostBuffer x = buffer<float>({2, 2}, {1, 2, 3, 4});
  // pads = (left, right) of the last dim, then (top, bottom) of the one before.
  EXPECT_EQ(values(reference(OpKind::kPad, {&x}, {{"pads", ints({1, 0})}, {"value", real(9)}}).value),
            (std::vector<double>{9, 1, 2, 9, 3, 4}));
  Evaluated rows = reference(OpKind::kPad, {&x}, {{"pads", ints({0, 0, 1, 1})}});
  EXPECT_EQ(rows.type.shape, (Shape{4, 2}));
  EXPECT_EQ(values(rows.value), (std::vector<double>{0, 0, 1, 2, 3, 4, 0, 0}));
  // Negative pads crop.
  Evaluated crop = reference(OpKind::kPad, {&x}, {{"pads", ints({-1, 0, 0, 1})}, {"value", real(-7)}});
  EXPECT_EQ(crop.type.shape, (Shape{3, 1}));
  EXPECT_EQ(values(crop.value), (std::vector<double>{2, 4, -7}));
  // The value follows the cast rules: -1.5 into i32 truncates to -1.
  const HostBuffer i = buffer<int32_t>({2}, {5, 6});
  EXPECT_EQ(values(reference(OpKind::kPad, {&i}, {{"pads", ints({1, 1})}, {"value", real(-1.5)}}).value),
            (std::vector<double>{-1, 5, 6, -1}));
}

TEST(NnReference, DropoutIsTheIdentity) {
  const HostBuffer x = iota({3, 2});
  Evaluated r = reference(OpKind::kDropout, {&x}, {{"p", real(0.5)}});
  EXPECT_EQ(values(r.value), values(x));
}

TEST(NnReference, EmbeddingLooksUpRowsAndClampsOutOfRange) {
  const HostBuffer w = buffer<float>({3, 2}, {0, 1, 10, 11, 20, 21});
  const HostBuffer idx = buffer<int64_t>({2, 2}, {2, 0, 1, 1});
  Evaluated r = reference(OpKind::kEmbedding, {&w, &idx});
  EXPECT_EQ(r.type.shape, (Shape{2, 2, 2}));
  EXPECT_EQ(values(r.value), (std::vector<double>{20, 21, 0, 1, 10, 11, 10, 11}));
  // Out of range: 5 reads the last row, -1 the first (clamped, never out of bounds).
  const HostBuffer bad = buffer<int32_t>({2}, {5, -1});
  EXPECT_EQ(values(reference(OpKind::kEmbedding, {&w, &bad}).value),
            (std::vector<double>{20, 21, 0, 1}));
  const HostBuffer scalar_index = buffer<int32_t>({}, {1});
  EXPECT_EQ(reference(OpKind::kEmbedding, {&w, &scalar_index}).type.shape, (Shape{2}));
}

TEST(NnReference, GatherFollowsTorchGather) {
  // torch.gather(torch.tensor([[1, 2], [3, 4]]), 1, torch.tensor([[0, 0], [1, 0]])).
  const HostBuffer x = buffer<float>({2, 2}, {1, 2, 3, 4});
  const HostBuffer idx = buffer<int64_t>({2, 2}, {0, 0, 1, 0});
  EXPECT_EQ(values(reference(OpKind::kGather, {&x, &idx}, {{"axis", num(1)}}).value),
            (std::vector<double>{1, 1, 4, 3}));
  // axis 0 with an index smaller than the input: out[0][j] = x[idx[0][j]][j].
  const HostBuffer row = buffer<int32_t>({1, 2}, {1, 0});
  EXPECT_EQ(values(reference(OpKind::kGather, {&x, &row}, {{"axis", num(-2)}}).value),
            (std::vector<double>{3, 2}));
  const HostBuffer out_of_range = buffer<int32_t>({1, 2}, {7, -3});
  EXPECT_EQ(values(reference(OpKind::kGather, {&x, &out_of_range}, {{"axis", num(0)}}).value),
            (std::vector<double>{3, 2}));
}

TEST(NnReference, IndexSelectPicksSlices) {
  const HostBuffer x = iota({3, 4});
  const HostBuffer rows = buffer<int64_t>({2}, {2, 0});
  EXPECT_EQ(values(reference(OpKind::kIndexSelect, {&x, &rows}, {{"axis", num(0)}}).value),
            (std::vector<double>{8, 9, 10, 11, 0, 1, 2, 3}));
  const HostBuffer cols = buffer<int32_t>({3}, {3, 3, 1});
  Evaluated picked = reference(OpKind::kIndexSelect, {&x, &cols}, {{"axis", num(-1)}});
  EXPECT_EQ(picked.type.shape, (Shape{3, 3}));
  EXPECT_EQ(values(picked.value), (std::vector<double>{3, 3, 1, 7, 7, 5, 11, 11, 9}));
  const HostBuffer clamped = buffer<int32_t>({2}, {-5, 40});
  EXPECT_EQ(values(reference(OpKind::kIndexSelect, {&x, &clamped}, {{"axis", num(0)}}).value),
            (std::vector<double>{0, 1, 2, 3, 8, 9, 10, 11}));
}

// ---- inference rules ----------------------------------------------------------------------------

// The normalized attributes of `kind` on inputs of types `in`.
std::vector<AttrValue> normalized(OpKind kind, const std::vector<TensorType>& in,
                                  const NamedAttrs& named) {
  std::vector<AttrValue> attrs = attrs_for(op_info(kind), named);
  EXPECT_TRUE(infer_op(kind, in, attrs).is_ok());
  return attrs;
}

TEST(NnInference, NormalizesAttributes) {
  const TensorType image{DType::kF32, {1, 2, 9, 9}};
  // Empty stride = kernel; one entry = both axes.
  const std::vector<AttrValue> pool = normalized(OpKind::kMaxPool2d, {image}, {{"kernel", ints({3})}});
  const MaxPool2dAttrs pool_attrs{std::span(pool)};
  EXPECT_EQ(pool_attrs.kernel(), (IntList{3, 3}));
  EXPECT_EQ(pool_attrs.stride(), (IntList{3, 3}));
  EXPECT_EQ(pool_attrs.padding(), (IntList{0, 0}));
  const std::vector<AttrValue> conv = normalized(OpKind::kConv2d, {image, {DType::kF32, {4, 2, 3, 3}}},
                                                 {{"stride", ints({2})}, {"padding", ints({1, 0})}});
  EXPECT_EQ(Conv2dAttrs{std::span(conv)}.stride(), (IntList{2, 2}));
  EXPECT_EQ(Conv2dAttrs{std::span(conv)}.padding(), (IntList{1, 0}));
  const std::vector<AttrValue> flat = normalized(OpKind::kFlatten, {image}, {{"start_dim", num(-3)}});
  EXPECT_EQ(FlattenAttrs{std::span(flat)}.start_dim(), 1);
  EXPECT_EQ(FlattenAttrs{std::span(flat)}.end_dim(), 3);
  auto pads = [&](const IntList& p) {
    const std::vector<AttrValue> a = normalized(OpKind::kPad, {image}, {{"pads", ints(p)}});
    return PadAttrs{std::span(a)}.pads();
  };
  // Trailing (0, 0) pairs pad nothing and are dropped.
  EXPECT_EQ(pads({1, 1, 0, 0}), (IntList{1, 1}));
  EXPECT_EQ(pads({0, 0, 0, 0}), (IntList{}));
  auto axis = [](OpKind kind, const std::vector<TensorType>& in, int64_t written) {
    const std::vector<AttrValue> a = normalized(kind, in, {{"axis", num(written)}});
    return AxisAttrs{std::span(a)}.axis();
  };
  const TensorType index{DType::kI64, {1, 2, 9, 9}};
  EXPECT_EQ(axis(OpKind::kGather, {image, index}, -1), 3);
  EXPECT_EQ(axis(OpKind::kIndexSelect, {image, {DType::kI32, {4}}}, -4), 0);
}

TEST(NnInference, OutputShapesFollowPyTorch) {
  auto shape_of = [](OpKind kind, std::vector<TensorType> in, const NamedAttrs& named) {
    std::vector<AttrValue> attrs = attrs_for(op_info(kind), named);
    return infer_op(kind, in, attrs).value_or_throw().shape;
  };
  const TensorType image{DType::kF32, {2, 3, 224, 224}};
  // resnet stem: 7x7 stride 2 padding 3, then max pool 3x3 stride 2 padding 1.
  EXPECT_EQ(shape_of(OpKind::kConv2d, {image, {DType::kF32, {64, 3, 7, 7}}},
                     {{"stride", ints({2})}, {"padding", ints({3})}}),
            (Shape{2, 64, 112, 112}));
  EXPECT_EQ(shape_of(OpKind::kMaxPool2d, {{DType::kF32, {2, 64, 112, 112}}},
                     {{"kernel", ints({3})}, {"stride", ints({2})}, {"padding", ints({1})}}),
            (Shape{2, 64, 56, 56}));
  // ceil_mode: 5 + 2 - 2 = 5 over stride 2 rounds up to 3, plus one is 4 windows, but the
  // 4th would start at 6, past the input and its left padding (5 + 1): 3.
  EXPECT_EQ(shape_of(OpKind::kMaxPool2d, {{DType::kF32, {1, 1, 5, 5}}},
                     {{"kernel", ints({2})}, {"padding", ints({1})}, {"ceil_mode", flag(true)}}),
            (Shape{1, 1, 3, 3}));
  EXPECT_EQ(shape_of(OpKind::kAvgPool2d, {{DType::kF32, {1, 1, 6, 6}}},
                     {{"kernel", ints({3})}, {"stride", ints({2})}, {"ceil_mode", flag(true)}}),
            (Shape{1, 1, 3, 3}));
  EXPECT_EQ(shape_of(OpKind::kAvgPool2d, {{DType::kF32, {1, 1, 6, 6}}},
                     {{"kernel", ints({3})}, {"stride", ints({2})}}),
            (Shape{1, 1, 2, 2}));
  EXPECT_EQ(shape_of(OpKind::kLinear, {{DType::kF32, {2, 5, 7}}, {DType::kF32, {3, 7}}}, {}),
            (Shape{2, 5, 3}));
  EXPECT_EQ(shape_of(OpKind::kPad, {{DType::kI64, {2, 3}}}, {{"pads", ints({-1, -2})}}), (Shape{2, 0}));
}

// Expects `kind` on `in` with `named` to be rejected with a status whose message contains each
// of `parts`.
void expect_error(OpKind kind, const std::vector<TensorType>& in, const NamedAttrs& named,
                  const std::vector<std::string>& parts) {
  std::vector<AttrValue> attrs = attrs_for(op_info(kind), named);
  const Result<TensorType> inferred = infer_op(kind, in, attrs);
  if (inferred.is_ok()) {
    ADD_FAILURE() << op_info(kind).name << ": no error";
    return;
  }
  EXPECT_EQ(inferred.status().code(), StatusCode::kInvalidArgument);
  const std::string& msg = inferred.status().message();
  EXPECT_NE(msg.find(fmt::format("op '{}'", op_info(kind).name)), std::string::npos) << msg;
  for (const std::string& p : parts)
    EXPECT_NE(msg.find(p), std::string::npos) << msg << "\nmissing: " << p;
}

TEST(NnInference, BadOperandsAndAttributesNameTheOp) {
  const TensorType image{DType::kF32, {1, 4, 8, 8}};
  expect_error(OpKind::kConv2d, {image, {DType::kF32, {2, 3, 3, 3}}}, {},
               {"weight f32[2, 3, 3, 3] must have 4 input channels", "f32[1, 4, 8, 8]"});
  expect_error(OpKind::kConv2d, {image, {DType::kF32, {2, 1, 3, 3}}}, {{"groups", num(3)}},
               {"4 channels, not divisible by groups=3"});
  expect_error(OpKind::kConv2d, {image, {DType::kF32, {3, 2, 3, 3}}}, {{"groups", num(2)}},
               {"3 output channels, not divisible by groups=2"});
  expect_error(OpKind::kConv2d, {image, {DType::kF32, {2, 4, 9, 9}}}, {}, {"larger than the input"});
  expect_error(OpKind::kConv2d, {image, {DType::kF32, {2, 4, 3, 3}}, {DType::kF32, {3}}}, {},
               {"bias f32[3] must be [2]"});
  expect_error(OpKind::kConv2d, {{DType::kI32, {1, 4, 8, 8}}, {DType::kF32, {2, 4, 3, 3}}}, {},
               {"input i32[1, 4, 8, 8] must be f32"});
  expect_error(OpKind::kConv2d, {{DType::kF32, {4, 8, 8}}, {DType::kF32, {2, 4, 3, 3}}}, {},
               {"must have rank 4"});
  expect_error(OpKind::kConv2d, {image, {DType::kF32, {2, 4, 3, 3}}}, {{"stride", ints({0, 1})}},
               {"stride [0, 1] must have entries >= 1"});
  expect_error(OpKind::kMaxPool2d, {image}, {{"kernel", ints({3})}, {"padding", ints({2})}},
               {"padding [2, 2] must be at most half the kernel [3, 3]"});
  expect_error(OpKind::kMaxPool2d, {image}, {{"kernel", ints({3, 3, 3})}},
               {"kernel [3, 3, 3] must have 2 entries"});
  expect_error(OpKind::kMaxPool2d, {image}, {{"kernel", ints({9})}}, {"does not fit the input"});
  expect_error(OpKind::kAvgPool2d, {image}, {{"kernel", ints({0})}},
               {"kernel [0, 0] must have entries >= 1"});
  expect_error(OpKind::kAdaptiveAvgPool2d, {{DType::kF32, {1, 1, int64_t{1} << 40, 1}}},
               {{"output_size", ints({int64_t{1} << 20})}}, {"too large for the input"});
  expect_error(OpKind::kMaxPool2d, {image}, {{"kernel", ints({int64_t{1} << 25})}},
               {"must have entries >= 1 and <= 2^24"});
  expect_error(OpKind::kAdaptiveAvgPool2d, {{DType::kF32, {1, 1, 0, 3}}}, {{"output_size", ints({1})}},
               {"empty spatial dim"});
  expect_error(OpKind::kLinear, {{DType::kF32, {2, 5}}, {DType::kF32, {3, 4}}}, {},
               {"input f32[2, 5] has 5 features but weight f32[3, 4] expects 4"});
  expect_error(OpKind::kFlatten, {image}, {{"start_dim", num(2)}, {"end_dim", num(1)}},
               {"comes after end_dim"});
  expect_error(OpKind::kPad, {image}, {{"pads", ints({1, 1, 1})}}, {"even number of entries"});
  expect_error(OpKind::kPad, {{DType::kF32, {2, 3}}}, {{"pads", ints({-2, -2})}}, {"negative size"});
  expect_error(OpKind::kDropout, {image}, {{"p", real(1.5)}}, {"p must be in [0, 1]"});
  expect_error(OpKind::kEmbedding, {{DType::kF32, {10, 4}}, {DType::kF32, {3}}}, {},
               {"index f32[3] must be i32 or i64"});
  expect_error(OpKind::kEmbedding, {{DType::kF32, {0, 4}}, {DType::kI64, {3}}}, {}, {"no rows"});
  expect_error(OpKind::kGather, {{DType::kF32, {2, 3}}, {DType::kI64, {2, 4}}}, {{"axis", num(0)}},
               {"no dim larger than the input's outside axis 0"});
  expect_error(OpKind::kGather, {{DType::kF32, {2, 3}}, {DType::kI64, {2}}}, {{"axis", num(0)}},
               {"the rank of the input"});
  expect_error(OpKind::kIndexSelect, {{DType::kF32, {2, 3}}, {DType::kI64, {2, 1}}}, {{"axis", num(0)}},
               {"must have rank 1"});
  expect_error(OpKind::kIndexSelect, {{DType::kF32, {2, 3}}, {DType::kI64, {2}}}, {{"axis", num(2)}},
               {"axis 2 is out of range"});
}

TEST(NnInference, LayersAreNeverFused) {
  for (const OpInfo& op : all_ops()) {
    if (op.op_class != OpClass::kNn) continue;
    EXPECT_FALSE(op.elementwise()) << op.name;
    EXPECT_FALSE(fusible_op(op.kind)) << op.name;
  }
}

// ---- cpu kernels against the reference ----------------------------------------------------------

// Seeded values: uniform in [-1, 1], some specials (NaN, +-inf, -0) when `specials`.
HostBuffer random_f32(const Shape& shape, std::mt19937_64& gen, bool specials) {
  HostBuffer b(DType::kF32, shape);
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double u = static_cast<double>(gen() >> 11) * 0x1.0p-53;
    float v = static_cast<float>(u * 2 - 1);
    if (specials && gen() % 29 == 0) {
      const float kSpecial[] = {kNaN, kInf, -kInf, -0.0f};
      v = kSpecial[gen() % 4];
    }
    b.data<float>()[i] = v;
  }
  return b;
}

HostBuffer random_of(DType dtype, const Shape& shape, std::mt19937_64& gen) {
  HostBuffer f = random_f32(shape, gen, false);
  HostBuffer b(dtype, shape);
  for (int64_t i = 0; i < b.numel(); ++i) {
    const float v = f.data<float>()[i];
    dispatch_dtype(dtype, [&]<typename T>() {
      if constexpr (std::is_same_v<T, bool>)
        b.data<T>()[i] = v > 0;
      else if constexpr (std::is_floating_point_v<T>)
        b.data<T>()[i] = v;
      else
        b.data<T>()[i] = static_cast<T>(std::lround(v * 1000));
    });
  }
  return b;
}

// Index values in [lo, hi).
HostBuffer random_index(DType dtype, const Shape& shape, int64_t lo, int64_t hi, std::mt19937_64& gen) {
  HostBuffer b(dtype, shape);
  for (int64_t i = 0; i < b.numel(); ++i) {
    const int64_t v = lo + static_cast<int64_t>(gen() % static_cast<uint64_t>(hi - lo));
    if (dtype == DType::kI32)
      b.data<int32_t>()[i] = static_cast<int32_t>(v);
    else
      b.data<int64_t>()[i] = v;
  }
  return b;
}

HostBuffer poisoned(const TensorType& t) {
  HostBuffer b(t.dtype, t.shape);
  if (t.dtype != DType::kBool) std::memset(b.bytes(), 0xA5, b.nbytes());
  return b;
}

using testing::same_bits;
using testing::within_gemm_bound;

struct LayerCase {
  std::vector<HostBuffer> inputs;
  NamedAttrs attrs;
};

// The buffers moved into a vector (HostBuffer is move-only, so no initializer list).
template <typename... B>
std::vector<HostBuffer> buffers(B&&... b) {
  std::vector<HostBuffer> v;
  (v.push_back(std::forward<B>(b)), ...);
  return v;
}

std::string describe(const OpInfo& op, const LayerCase& c) {
  std::string s = std::string(op.name) + "(";
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    s += (k ? ", " : "") + type_to_string({c.inputs[k].dtype(), c.inputs[k].shape()});
  }
  for (const auto& [name, value] : c.attrs) s += ", " + std::string(name) + "=" + value.to_string();
  return s + ")";
}

// How the cpu side computes a case: the builtin kernels, or (conv2d) oneDNN.
using CpuRun = std::function<void(const Graph&, NodeId, std::span<const HostBuffer* const>, HostBuffer&)>;

// Runs one case through `run` (cpu::run_op unless given) and the reference; conv2d, linear and
// f32 matmul are compared with the GEMM bound (K from the weight, or a's last dim), everything
// else bitwise.
void check_layer(OpKind kind, const LayerCase& c, const CpuRun& run = cpu::run_op) {
  const OpInfo& op = op_info(kind);
  std::vector<AttrValue> attrs = attrs_for(op, c.attrs);
  std::vector<TensorType> types;
  for (const HostBuffer& b : c.inputs) types.push_back({b.dtype(), b.shape()});
  TensorType type;
  if (Result<TensorType> inferred = infer_op(kind, types, attrs); inferred.is_ok()) {
    type = *inferred;
  } else {
    ADD_FAILURE() << describe(op, c) << " rejected: " << inferred.status().message();
    return;
  }
  Graph g;
  std::vector<NodeId> ids;
  for (const TensorType& t : types) ids.push_back(g.add_parameter(t));
  const NodeId node = g.add_node(kind, ids, attrs, type);
  std::vector<const HostBuffer*> in;
  for (const HostBuffer& b : c.inputs) in.push_back(&b);
  HostBuffer want = poisoned(type);
  op.reference(in, g.attrs(g.node(node)), want);
  HostBuffer got = poisoned(type);
  run(g, node, in, got);
  if (kind != OpKind::kConv2d && kind != OpKind::kLinear && kind != OpKind::kMatmul) {
    EXPECT_TRUE(same_bits(got, want)) << describe(op, c);
    return;
  }
  std::vector<HostBuffer> abs_inputs;
  for (const HostBuffer& b : c.inputs) {
    HostBuffer a = b.clone();
    for (float& v : a.span<float>()) v = std::fabs(v);
    abs_inputs.push_back(std::move(a));
  }
  std::vector<const HostBuffer*> abs_in;
  for (const HostBuffer& b : abs_inputs) abs_in.push_back(&b);
  HostBuffer abs_ref(type.dtype, type.shape);
  op.reference(abs_in, g.attrs(g.node(node)), abs_ref);
  const Shape& ws = c.inputs[1].shape();
  const Shape& xs = c.inputs[0].shape();
  const int64_t k = kind == OpKind::kMatmul ? xs[xs.rank() - 1] : kind == OpKind::kLinear ? ws[1] : ws[1] * ws[2] * ws[3];
  EXPECT_TRUE(within_gemm_bound(got, want, abs_ref, k)) << describe(op, c);
}

struct ConvCase {
  Shape x, w;
  IntList stride, padding, dilation;
  int64_t groups;
  bool bias;
};

std::vector<ConvCase> conv_cases() {
  std::vector<ConvCase> cases = {
      {{1, 3, 8, 8}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},
      {{2, 3, 9, 7}, {5, 3, 3, 2}, {2, 2}, {1, 0}, {1, 1}, 1, false},    // non-square, batch 2
      {{1, 4, 10, 10}, {6, 4, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, true},   // 1x1: no im2col
      {{2, 8, 7, 7}, {8, 8, 1, 1}, {2, 2}, {0, 0}, {1, 1}, 1, false},    // 1x1 strided
      {{2, 5, 10, 7}, {3, 5, 1, 1}, {3, 1}, {0, 0}, {1, 1}, 1, true},    // 1x1 strided, one axis
      {{1, 4, 5, 8}, {6, 4, 1, 1}, {1, 2}, {0, 0}, {2, 3}, 1, false},    // the other, dilated
      {{2, 64, 20, 21}, {32, 64, 1, 1}, {2, 2}, {0, 0}, {1, 1}, 1, true},  // 1x1 strided, 10x11
      {{2, 6, 30, 11}, {4, 6, 1, 1}, {3, 1}, {0, 0}, {1, 1}, 1, false},    // 10x11, one axis
      {{1, 4, 6, 6}, {3, 4, 1, 1}, {1, 1}, {1, 1}, {1, 1}, 1, true},     // 1x1 padded
      {{1, 2, 11, 11}, {3, 2, 3, 3}, {1, 1}, {2, 2}, {2, 2}, 1, true},   // dilation
      {{1, 2, 12, 9}, {3, 2, 2, 3}, {3, 2}, {1, 0}, {2, 1}, 1, false},   // mixed per axis
      {{1, 3, 5, 5}, {2, 3, 2, 2}, {3, 3}, {0, 0}, {1, 1}, 1, true},     // stride > kernel
      {{1, 3, 7, 6}, {2, 3, 5, 1}, {1, 4}, {2, 0}, {1, 1}, 1, true},     // non-square kernel
      {{2, 8, 9, 9}, {8, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 8, true},     // depthwise
      {{1, 6, 10, 7}, {6, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 6, false},   // depthwise strided
      {{1, 4, 6, 6}, {8, 1, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 4, true},     // depthwise x2
      {{1, 4, 9, 9}, {4, 1, 3, 3}, {1, 1}, {2, 2}, {2, 2}, 4, false},    // depthwise dilated
      {{1, 32, 30, 30}, {32, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 32, true},  // depthwise, threaded
      {{1, 3, 5, 5}, {3, 1, 5, 5}, {2, 2}, {2, 2}, {1, 1}, 3, true},     // depthwise, window > padding
      {{1, 64, 8, 8}, {64, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 32, true},  // 32 groups
      {{2, 128, 6, 5}, {128, 4, 3, 3}, {2, 1}, {1, 1}, {1, 1}, 32, false},  // ResNeXt-like
      {{1, 4, 5, 5}, {6, 2, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 2, true},        // 2 groups
      {{1, 1, 1, 1}, {1, 1, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, true},        // all size 1
      {{1, 3, 1, 7}, {2, 3, 1, 3}, {1, 1}, {0, 1}, {1, 1}, 1, false},       // height 1
      {{1, 2, 4, 4}, {3, 2, 4, 4}, {1, 1}, {0, 0}, {1, 1}, 1, true},        // kernel = input
      {{3, 5, 6, 6}, {4, 5, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},        // batch 3
      {{1, 256, 32, 32}, {4, 256, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},  // im2col in 2 blocks
      {{1, 3, 30, 30}, {16, 3, 7, 7}, {2, 2}, {3, 3}, {1, 1}, 1, false},    // stem-like
      {{0, 3, 5, 5}, {2, 3, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1, true},        // empty batch
      {{1, 0, 4, 4}, {2, 0, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1, true},        // no channels: bias
      {{1, 0, 4, 4}, {2, 0, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1, false},       // no channels: 0
      {{1, 3, 4, 4}, {0, 3, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1, false},       // no outputs
      {{2, 6, 9, 8}, {9, 2, 3, 2}, {2, 1}, {0, 1}, {2, 1}, 3, true},        // grouped, dilated, per axis
      {{2, 4, 7, 9}, {8, 1, 3, 3}, {1, 2}, {1, 0}, {1, 2}, 4, false},       // depthwise x2, per axis
      {{1, 16, 5, 5}, {16, 1, 5, 5}, {1, 1}, {2, 2}, {1, 1}, 16, true},     // depthwise 5x5
      {{2, 3, 13, 11}, {4, 3, 3, 3}, {3, 2}, {2, 1}, {1, 3}, 1, false},     // last window short of the padding
      {{3, 8, 6, 6}, {12, 4, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 2, true},       // grouped 1x1, batch 3
  };
  return cases;
}

LayerCase conv_case(const ConvCase& cc, std::mt19937_64& gen) {
  LayerCase c;
  c.inputs.push_back(random_f32(cc.x, gen, false));
  c.inputs.push_back(random_f32(cc.w, gen, false));
  if (cc.bias) c.inputs.push_back(random_f32({cc.w[0]}, gen, false));
  c.attrs = {{"stride", ints(cc.stride)},
             {"padding", ints(cc.padding)},
             {"dilation", ints(cc.dilation)},
             {"groups", num(cc.groups)}};
  return c;
}

TEST(NnCpu, Conv2dMatchesReference) {
  std::mt19937_64 gen(42);
  for (const ConvCase& cc : conv_cases()) check_layer(OpKind::kConv2d, conv_case(cc, gen));
}

// The same cases through oneDNN (replay/backends/cpu/onednn_conv.h), which computes every one with
// something to convolve and declines only the empty ones (the builtin kernel's bias fill).
TEST(NnCpu, Conv2dOnOneDnnMatchesReference) {
  cpu::OneDnnConvs convs;
  std::mt19937_64 gen(42);
  for (const ConvCase& cc : conv_cases()) {
    const bool empty = cc.x[0] == 0 || cc.x[1] == 0 || cc.w[0] == 0;
    check_layer(OpKind::kConv2d, conv_case(cc, gen),
                [&](const Graph& g, NodeId node, std::span<const HostBuffer* const> in, HostBuffer& out) {
                  const bool computed = convs.run(hash_graph(g), g, node, in, nullptr, out);
                  EXPECT_EQ(computed, !empty) << type_to_string({DType::kF32, cc.x}) << " "
                                              << type_to_string({DType::kF32, cc.w});
                  if (!computed) cpu::run_op(g, node, in, out);
                });
  }
}

// f32 matmul (1-D operands, batches folded, broadcast or both batched) and linear (with and
// without bias, any input rank) through oneDNN's matmul (replay/backends/cpu/onednn_matmul.h): every
// case with something to multiply is computed, within the GEMM bound; K = 0 and empty outputs
// are declined (the builtin kernel's zero or bias fill).
TEST(NnCpu, MatmulAndLinearOnOneDnnMatchReference) {
  struct Case {
    OpKind op;
    Shape a, b;
    bool bias;
  };
  const std::vector<Case> cases = {
      {OpKind::kMatmul, {5, 7}, {7, 3}, false},        {OpKind::kMatmul, {7}, {7, 3}, false},
      {OpKind::kMatmul, {5, 7}, {7}, false},           {OpKind::kMatmul, {7}, {7}, false},
      {OpKind::kMatmul, {2, 3, 5, 7}, {7, 4}, false},  {OpKind::kMatmul, {2, 1, 5, 7}, {3, 7, 4}, false},
      {OpKind::kMatmul, {5, 7}, {2, 7, 4}, false},     {OpKind::kMatmul, {4, 9, 16}, {4, 16, 9}, false},
      {OpKind::kMatmul, {3, 7}, {7}, false},           {OpKind::kMatmul, {5, 0}, {0, 3}, false},
      {OpKind::kMatmul, {0, 7}, {7, 3}, false},        {OpKind::kLinear, {5, 7}, {3, 7}, true},
      {OpKind::kLinear, {5, 7}, {3, 7}, false},        {OpKind::kLinear, {2, 4, 7}, {6, 7}, true},
      {OpKind::kLinear, {7}, {3, 7}, true},            {OpKind::kLinear, {4, 0}, {3, 0}, true},
      {OpKind::kLinear, {64, 96}, {80, 96}, true},
  };
  cpu::OneDnnMatmuls matmuls;
  std::mt19937_64 gen(7);
  for (const Case& cc : cases) {
    LayerCase c;
    c.inputs.push_back(random_f32(cc.a, gen, false));
    c.inputs.push_back(random_f32(cc.b, gen, false));
    if (cc.bias) c.inputs.push_back(random_f32({cc.b[0]}, gen, false));
    const int64_t k = cc.a[cc.a.rank() - 1];
    const bool empty = k == 0 || cc.a.numel() == 0;
    check_layer(cc.op, c, [&](const Graph& g, NodeId node, std::span<const HostBuffer* const> in, HostBuffer& out) {
      EXPECT_TRUE(onednn_matmul_node(g, g.node(node)));
      const bool computed = matmuls.run(hash_graph(g), g, node, in, out);
      EXPECT_EQ(computed, !empty) << describe(op_info(cc.op), c);
      if (!computed) cpu::run_op(g, node, in, out);
    });
  }
}

// A weight parameter's reordered copy is kept per buffer and version: another buffer, or the
// same buffer written in place (a donated output, note_written_in_place), is reordered again.
TEST(NnCpu, OneDnnConvReordersWeightsOfANewBufferOrVersion) {
  std::mt19937_64 gen(9);
  const HostBuffer x = random_f32({1, 8, 7, 7}, gen, false);
  const TensorType wt{DType::kF32, {16, 8, 3, 3}};
  Graph g;
  const NodeId xp = g.add_parameter({DType::kF32, x.shape()});
  const NodeId wp = g.add_parameter(wt);
  std::vector<AttrValue> attrs = attrs_for(op_info(OpKind::kConv2d), {{"padding", ints({1, 1})}});
  const std::vector<TensorType> types{{DType::kF32, x.shape()}, wt};
  const TensorType out_type = infer_op(OpKind::kConv2d, types, attrs).value_or_throw();
  const std::vector<NodeId> ins{xp, wp};
  const NodeId node = g.add_node(OpKind::kConv2d, ins, attrs, out_type);
  const GraphKey key = hash_graph(g);
  cpu::OneDnnConvs convs;
  auto check = [&](const std::shared_ptr<const HostBuffer>& w, const char* what) {
    const std::vector<const HostBuffer*> in{&x, w.get()};
    HostBuffer want(out_type.dtype, out_type.shape), got = poisoned(out_type);
    op_info(OpKind::kConv2d).reference(in, g.attrs(g.node(node)), want);
    ASSERT_TRUE(convs.run(key, g, node, in, &w, got)) << what;
    HostBuffer abs_x = x.clone(), abs_w = w->clone();
    for (float& v : abs_x.span<float>()) v = std::fabs(v);
    for (float& v : abs_w.span<float>()) v = std::fabs(v);
    HostBuffer abs_ref(out_type.dtype, out_type.shape);
    const std::vector<const HostBuffer*> abs_in{&abs_x, &abs_w};
    op_info(OpKind::kConv2d).reference(abs_in, g.attrs(g.node(node)), abs_ref);
    EXPECT_TRUE(within_gemm_bound(got, want, abs_ref, 8 * 3 * 3)) << what;
  };
  auto w1 = std::make_shared<const HostBuffer>(random_f32(wt.shape, gen, false));
  check(w1, "first run");
  check(w1, "second run, kept weights");
  // Written in place as a donated output is: same buffer, new values.
  HostBuffer fresh = random_f32(wt.shape, gen, false);
  std::memcpy(const_cast<HostBuffer&>(*w1).bytes(), fresh.bytes(), fresh.nbytes());
  cpu::note_written_in_place(w1.get());
  check(w1, "after an in-place write");
  auto w2 = std::make_shared<const HostBuffer>(random_f32(wt.shape, gen, false));
  check(w2, "another buffer");
  w2.reset();
  auto w3 = std::make_shared<const HostBuffer>(random_f32(wt.shape, gen, false));
  check(w3, "a buffer made after the previous one was freed");
  // Another thread count: the primitive is made again for it (its scratchpad is per thread).
  cpu::set_threads(2);
  check(w3, "two threads");
  cpu::set_threads(1);
  check(w3, "back to one thread");
}

TEST(NnCpu, LinearMatchesReference) {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{4, 7}, {5, 7}}, {{7}, {5, 7}},           {{2, 3, 7}, {5, 7}},
      {{0, 7}, {5, 7}}, {{4, 7}, {0, 7}},        {{3, 0}, {4, 0}},
      {{1, 1}, {1, 1}}, {{64, 300}, {200, 300}}, {{5, 1000}, {3, 1000}}};
  std::mt19937_64 gen(7);
  for (const auto& [xs, ws] : shapes) {
    for (bool bias : {false, true}) {
      LayerCase c;
      c.inputs.push_back(random_f32(xs, gen, false));
      c.inputs.push_back(random_f32(ws, gen, false));
      if (bias) c.inputs.push_back(random_f32({ws[0]}, gen, false));
      check_layer(OpKind::kLinear, c);
    }
  }
}

struct PoolCase {
  Shape x;
  NamedAttrs attrs;
};

TEST(NnCpu, PoolsMatchReferenceBitwise) {
  const std::vector<PoolCase> windows = {
      {{1, 1, 4, 4}, {{"kernel", ints({2})}}},
      {{2, 3, 7, 9}, {{"kernel", ints({3})}, {"stride", ints({2})}, {"padding", ints({1})}}},
      {{1, 2, 8, 8}, {{"kernel", ints({3})}, {"stride", ints({2})}, {"ceil_mode", flag(true)}}},
      {{1, 1, 5, 5}, {{"kernel", ints({2})}, {"padding", ints({1})}, {"ceil_mode", flag(true)}}},
      {{1, 3, 7, 7},
       {{"kernel", ints({3})},
        {"stride", ints({2})},
        {"padding", ints({1})},
        {"ceil_mode", flag(true)}}},
      {{1, 1, 10, 10}, {{"kernel", ints({2})}, {"stride", ints({3})}}},
      {{1, 2, 7, 6}, {{"kernel", ints({3, 2})}, {"stride", ints({2, 1})}, {"padding", ints({1, 1})}}},
      {{1, 2, 5, 6},
       {{"kernel", ints({2, 3})},
        {"stride", ints({3, 1})},
        {"padding", ints({1, 1})},
        {"ceil_mode", flag(true)}}},
      {{1, 1, 1, 1}, {{"kernel", ints({1})}}},
      {{2, 4, 8, 8}, {{"kernel", ints({2})}}},
      {{0, 2, 4, 4}, {{"kernel", ints({2})}}},
      {{1, 16, 56, 56}, {{"kernel", ints({3})}, {"stride", ints({2})}, {"padding", ints({1})}}},
  };
  std::mt19937_64 gen(3);
  for (const PoolCase& p : windows) {
    for (bool specials : {false, true}) {
      LayerCase c;
      c.inputs.push_back(random_f32(p.x, gen, specials));
      c.attrs = p.attrs;
      check_layer(OpKind::kMaxPool2d, c);
      c.attrs.push_back({"dilation", ints({1})});
      check_layer(OpKind::kMaxPool2d, c);
      c.attrs.pop_back();
      for (bool include_pad : {true, false}) {
        LayerCase a{buffers(c.inputs[0].clone()), p.attrs};
        a.attrs.push_back({"count_include_pad", flag(include_pad)});
        check_layer(OpKind::kAvgPool2d, a);
      }
    }
  }
  // Dilated max pools, including windows that see only padding.
  const std::vector<PoolCase> dilated = {
      {{1, 2, 9, 9},
       {{"kernel", ints({3})}, {"stride", ints({1})}, {"padding", ints({1})}, {"dilation", ints({2})}}},
      {{1, 1, 1, 1},
       {{"kernel", ints({2})}, {"stride", ints({1})}, {"padding", ints({1})}, {"dilation", ints({2})}}},
      {{1, 1, 8, 7},
       {{"kernel", ints({2, 3})},
        {"padding", ints({1})},
        {"dilation", ints({3, 2})},
        {"ceil_mode", flag(true)}}},
  };
  for (const PoolCase& p : dilated) {
    LayerCase c;
    c.inputs.push_back(random_f32(p.x, gen, true));
    c.attrs = p.attrs;
    check_layer(OpKind::kMaxPool2d, c);
  }
  const std::vector<std::pair<Shape, IntList>> adaptive = {{{1, 3, 7, 7}, {1, 1}},
                                                           {{2, 4, 10, 7}, {3, 4}},
                                                           {{1, 1, 5, 5}, {7, 7}},
                                                           {{1, 2, 1, 9}, {1, 4}},
                                                           {{0, 1, 3, 3}, {2, 2}},
                                                           {{1, 256, 20, 20}, {3, 3}}};
  for (const auto& [shape, size] : adaptive) {
    LayerCase c;
    c.inputs.push_back(random_f32(shape, gen, true));
    c.attrs = {{"output_size", ints(size)}};
    check_layer(OpKind::kAdaptiveAvgPool2d, c);
  }
}

TEST(NnCpu, LayoutOpsMatchReferenceBitwise) {
  std::mt19937_64 gen(11);
  const std::vector<DType> all = {DType::kBool, DType::kI32, DType::kI64, DType::kF32};
  for (DType t : all) {
    const std::vector<std::pair<Shape, IntList>> pads = {{{2, 3}, {1, 2}},
                                                         {{2, 3, 4}, {1, 1, 2, 0, 0, 3}},
                                                         {{4, 5}, {-1, 2, 0, -1}},
                                                         {{3, 3}, {-3, 0}},
                                                         {{}, {}},
                                                         {{0, 3}, {1, 1}},
                                                         {{2, 1, 3, 2, 2}, {1, 0, 0, 2}},
                                                         {{300, 300}, {2, 2, 1, 1}},
                                                         {{3, 4}, {0, 0, 2, 0}}};
    for (const auto& [shape, p] : pads) {
      check_layer(OpKind::kPad,
                  {buffers(random_of(t, shape, gen)), {{"pads", ints(p)}, {"value", real(-2.5)}}});
    }
    check_layer(OpKind::kFlatten, {buffers(random_of(t, {2, 3, 4}, gen)), {{"start_dim", num(1)}}});
    check_layer(OpKind::kFlatten, {buffers(random_of(t, {}, gen)), {}});
    check_layer(OpKind::kDropout, {buffers(random_of(t, {5, 7}, gen)), {{"p", real(0.2)}}});
    check_layer(OpKind::kDropout, {buffers(random_of(t, {0}, gen)), {{"p", real(0)}}});
  }
}

TEST(NnCpu, LookupsMatchReferenceBitwiseAndClamp) {
  std::mt19937_64 gen(13);
  const std::vector<DType> all = {DType::kBool, DType::kI32, DType::kI64, DType::kF32};
  for (DType t : all) {
    for (DType it : {DType::kI32, DType::kI64}) {
      // Indices run 3 past each end of the valid range, so clamping is exercised.
      check_layer(OpKind::kEmbedding,
                  {buffers(random_of(t, {10, 4}, gen), random_index(it, {3, 5}, -3, 13, gen)), {}});
      check_layer(OpKind::kEmbedding,
                  {buffers(random_of(t, {10, 4}, gen), random_index(it, {}, 0, 10, gen)), {}});
      check_layer(OpKind::kEmbedding,
                  {buffers(random_of(t, {7, 0}, gen), random_index(it, {4}, 0, 7, gen)), {}});
      check_layer(OpKind::kEmbedding,
                  {buffers(random_of(t, {0, 3}, gen), random_index(it, {0}, 0, 1, gen)), {}});
      const Shape x{3, 4, 5};
      for (int axis = -3; axis < 3; ++axis) {
        const int a = axis < 0 ? axis + 3 : axis;
        Shape ix{2, 3, 4};
        ix[a] = 6;
        check_layer(OpKind::kGather,
                    {buffers(random_of(t, x, gen), random_index(it, ix, -3, x[a] + 3, gen)),
                     {{"axis", num(axis)}}});
        check_layer(OpKind::kGather, {buffers(random_of(t, x, gen), random_index(it, x, 0, x[a], gen)),
                                      {{"axis", num(axis)}}});
        for (int64_t picks : {0, 1, 7}) {
          check_layer(OpKind::kIndexSelect,
                      {buffers(random_of(t, x, gen), random_index(it, {picks}, -3, x[a] + 3, gen)),
                       {{"axis", num(axis)}}});
        }
      }
      check_layer(OpKind::kGather,
                  {buffers(random_of(t, {300, 40}, gen), random_index(it, {300, 40}, 0, 300, gen)),
                   {{"axis", num(0)}}});
      check_layer(
          OpKind::kGather,
          {buffers(random_of(t, {4, 0}, gen), random_index(it, {4, 0}, 0, 1, gen)), {{"axis", num(1)}}});
    }
  }
}

// ---- recorded through LazyContext ---------------------------------------------------------------

// A small convnet and lookups through the C++ API of nn.h, run on the reference evaluator and
// on the cpu backend (compiled replay): the same types, values within the GEMM tolerance.
std::vector<BufferRef> small_net(GraphExecutor& executor) {
  LazyContext ctx(&executor);
  std::mt19937_64 gen(5);
  Tensor x = ctx.from_buffer(random_f32({2, 3, 12, 10}, gen, false));
  Tensor w1 = ctx.from_buffer(random_f32({8, 3, 3, 3}, gen, false));
  Tensor b1 = ctx.from_buffer(random_f32({8}, gen, false));
  Tensor dw = ctx.from_buffer(random_f32({8, 1, 3, 3}, gen, false));
  Tensor fc = ctx.from_buffer(random_f32({5, 32}, gen, false));
  Tensor fc_b = ctx.from_buffer(random_f32({5}, gen, false));
  Tensor table = ctx.from_buffer(random_f32({10, 6}, gen, false));
  Tensor ids = ctx.from_buffer(random_index(DType::kI64, {2, 3}, 0, 10, gen));
  Tensor h = relu(conv2d(x, w1, b1, {1, 1}, {1, 1}));
  h = conv2d(h, dw, Tensor(), {2, 2}, {1, 1}, {1, 1}, 8);
  h = max_pool2d(h, {2, 2}, {}, {0, 0}, {1, 1}, true);
  h = avg_pool2d(pad(h, {1, 1, 1, 1}), {3, 3}, {1, 1}, {1, 1}, false, false);
  h = adaptive_avg_pool2d(h, {2, 2});
  Tensor logits = linear(dropout(flatten(h, 1), 0.1), fc, fc_b);
  Tensor e = embedding(table, ids);
  Tensor picked = index_select(e, 2, ctx.from_buffer(buffer<int32_t>({2}, {5, 0})));
  Tensor g = gather(picked, 1, ctx.from_buffer(buffer<int64_t>({2, 1, 2}, {2, 0, 1, 1})));
  ctx.mark_step();
  return {logits.buffer(), e.buffer(), picked.buffer(), g.buffer()};
}

TEST(NnLazy, ConvnetRunsOnReferenceAndCpuReplay) {
  ReferenceExecutor reference_executor;
  const std::vector<BufferRef> want = small_net(reference_executor);
  CpuBackend cpu;
  Runtime runtime(&cpu, nullptr, nullptr);
  const std::vector<BufferRef> got = small_net(runtime);
  EXPECT_TRUE(runtime.warnings().empty()) << runtime.warnings().front();  // no fallback
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(want[0]->shape(), (Shape{2, 5}));
  EXPECT_EQ(want[1]->shape(), (Shape{2, 3, 6}));
  EXPECT_EQ(want[2]->shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(want[3]->shape(), (Shape{2, 1, 2}));
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k]->shape(), want[k]->shape());
    for (int64_t i = 0; i < got[k]->numel(); ++i) {
      const float g = got[k]->data<float>()[i], w = want[k]->data<float>()[i];
      EXPECT_NEAR(g, w, 1e-5 * (1 + std::fabs(w))) << "output " << k << " element " << i;
    }
  }
  // The lookups copy table entries: exact.
  EXPECT_TRUE(same_bits(*got[3], *want[3]));
}

// The executable of the convnet goes through SQLite: a second process (a fresh runtime on the
// same file) loads it, validates it (which re-infers every node through the registry) and runs
// it with the same results, without compiling.
TEST(NnLazy, ExecutableSurvivesTheDiskCache) {
  testing::TempDir dir;
  std::vector<BufferRef> first, second;
  std::vector<store::Event> second_events;
  {
    auto db = store::CacheDb::open({.path = dir.db()});
    ASSERT_TRUE(db.is_ok()) << db.status().to_string();
    CpuBackend cpu;
    Runtime runtime(&cpu, db->get(), nullptr);
    first = small_net(runtime);
  }
  {
    auto db = store::CacheDb::open({.path = dir.db()});
    ASSERT_TRUE(db.is_ok()) << db.status().to_string();
    CpuBackend cpu;
    Runtime runtime(&cpu, db->get(), nullptr);
    second = small_net(runtime);
    second_events = runtime.events();
  }
  int disk_hits = 0, compiles = 0, corrupt = 0;
  for (const store::Event& e : second_events) {
    disk_hits += e.kind == store::EventKind::kHit && e.tier == store::kDiskTier;
    compiles += e.kind == store::EventKind::kCompile;
    corrupt += e.kind == store::EventKind::kCorrupt;
  }
  EXPECT_EQ(disk_hits, 1);
  EXPECT_EQ(compiles, 0);
  EXPECT_EQ(corrupt, 0);
  ASSERT_EQ(first.size(), second.size());
  for (size_t k = 0; k < first.size(); ++k) EXPECT_TRUE(same_bits(*second[k], *first[k])) << "output " << k;
}

TEST(NnLazy, UndefinedBiasIsNotAnInput) {
  ReferenceExecutor executor;
  LazyContext ctx(&executor);
  Tensor x = ctx.from_buffer(iota({1, 1, 3, 3}, 1));
  Tensor w = ctx.from_buffer(iota({1, 1, 2, 2}, 1));
  EXPECT_EQ(conv2d(x, w, Tensor()).to_vector<double>(), (std::vector<double>{37, 47, 67, 77}));
  EXPECT_EQ(linear(ctx.from_buffer(iota({2}, 1)), ctx.from_buffer(iota({1, 2}, 1))).to_vector<double>(),
            (std::vector<double>{5}));
  try {
    conv2d(x, w, Tensor(), {1, 1}, {0, 0}, {1, 1}, 2);
    ADD_FAILURE() << "groups=2 on one channel was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.status().message().find("op 'conv2d'"), std::string::npos) << e.status().message();
  }
}

// fixtures/programs/convnet.trace (also run by the every-fixture tests of eager, runtime and
// compiler) on the reference evaluator and on the cpu backend.
TEST(NnLazy, TraceProgramUsesTheOpsByName) {
  Result<Program> p = load_program(testing::fixture_path("convnet.trace"));
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  Result<Program> again = parse_program(print_program(*p), "printed.trace");
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_TRUE(*p == *again);
  ASSERT_TRUE(check_program(*p).is_ok());

  ReferenceExecutor reference_executor;
  LazyContext reference_ctx(&reference_executor);
  Result<std::vector<StepResult>> want = run_program(*p, reference_ctx);
  ASSERT_TRUE(want.is_ok()) << want.status().to_string();
  CpuBackend cpu;
  Runtime runtime(&cpu, nullptr, nullptr);
  LazyContext cpu_ctx(&runtime);
  Result<std::vector<StepResult>> got = run_program(*p, cpu_ctx);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_TRUE(runtime.warnings().empty()) << runtime.warnings().front();
  ASSERT_EQ(want->size(), 2u);
  for (size_t step = 0; step < 2; ++step) {
    const int64_t batch = step == 0 ? 2 : 3;
    const auto& w = (*want)[step].outputs;
    const auto& g = (*got)[step].outputs;
    ASSERT_EQ(w.size(), 3u);
    EXPECT_EQ(w[0].second->shape(), (Shape{batch, 7}));
    EXPECT_EQ(w[1].second->shape(), (Shape{batch, 4, 3}));
    EXPECT_EQ(w[2].second->shape(), (Shape{batch, 2, 1}));
    EXPECT_EQ(w[0].second->data<float>()[0], -1.0f);  // the padding value
    for (size_t k = 0; k < w.size(); ++k) {
      ASSERT_EQ(g[k].second->shape(), w[k].second->shape());
      for (int64_t i = 0; i < w[k].second->numel(); ++i) {
        const float a = g[k].second->data<float>()[i], b = w[k].second->data<float>()[i];
        EXPECT_NEAR(a, b, 1e-5 * (1 + std::fabs(b)))
            << w[k].first << " step " << step << " element " << i;
      }
    }
    EXPECT_TRUE(same_bits(*g[1].second, *w[1].second));
  }
}

}  // namespace
}  // namespace tracecache
