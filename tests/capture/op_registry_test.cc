// The registry's columns beyond inference and kernels: the typed attribute views
// (capture/ops/attr_views.h) agree with every row's AttrSpecs, the cost column gives the flops
// documented in ops.h, and inference reports errors as a Status instead of throwing.
#include <gtest/gtest.h>

#include <map>
#include <span>
#include <string_view>
#include <vector>

#include "capture/ops/attr_views.h"
#include "capture/ops/ops.h"

namespace tracecache {
namespace {

// Which view reads which ops' attributes, by the view's kNames.
struct ViewUse {
  std::span<const std::string_view> names;
  std::vector<OpKind> ops;
};

template <template <typename> class View>
std::span<const std::string_view> names_of() {
  return View<const AttrValue>::kNames;
}

std::vector<ViewUse> view_uses() {
  using K = OpKind;
  return {
      {names_of<ParameterAttrs>(), {K::kParameter}},
      {names_of<CastAttrs>(), {K::kCast}},
      {names_of<ReduceAttrs>(), {K::kSum, K::kMean, K::kMax, K::kMin}},
      {names_of<ArgmaxAttrs>(), {K::kArgmax}},
      {names_of<ArgminAttrs>(), {K::kArgmin}},
      {names_of<ConvTranspose2dAttrs>(), {K::kConvTranspose2d}},
      {names_of<ResizeNearest2dAttrs>(), {K::kResizeNearest2d}},
      {names_of<ResizeLinear2dAttrs>(), {K::kResizeLinear2d}},
      {names_of<TopkAttrs>(), {K::kTopk, K::kTopkIndices}},
      {names_of<ScatterElementsAttrs>(), {K::kScatterElements}},
      {names_of<GatherNdAttrs>(), {K::kGatherNd}},
      {names_of<ResizeNearest2dGradAttrs>(), {K::kResizeNearest2dGrad}},
      {names_of<ResizeLinear2dGradAttrs>(), {K::kResizeLinear2dGrad}},
      {names_of<ShapeAttrs>(), {K::kReshape, K::kBroadcastTo}},
      {names_of<PermuteAttrs>(), {K::kPermute}},
      {names_of<TransposeAttrs>(), {K::kTranspose}},
      {names_of<AxisAttrs>(), {K::kConcat, K::kGather, K::kIndexSelect, K::kSoftmax, K::kLogSoftmax, K::kScatterAdd}},
      {names_of<SliceAttrs>(), {K::kSlice}},
      {names_of<FullAttrs>(), {K::kFull}},
      {names_of<ArangeAttrs>(), {K::kArange}},
      {names_of<UniformAttrs>(), {K::kUniform}},
      {names_of<NormalAttrs>(), {K::kNormal}},
      {names_of<GeluAttrs>(), {K::kGelu}},
      {names_of<ClampAttrs>(), {K::kClamp}},
      {names_of<BatchNormAttrs>(), {K::kBatchNorm}},
      {names_of<LayerNormAttrs>(), {K::kLayerNorm}},
      {names_of<AttentionAttrs>(), {K::kScaledDotProductAttention}},
      {names_of<Conv2dAttrs>(), {K::kConv2d}},
      {names_of<MaxPool2dAttrs>(), {K::kMaxPool2d, K::kMaxPool2dGrad}},
      {names_of<AvgPool2dAttrs>(), {K::kAvgPool2d}},
      {names_of<AdaptiveAvgPool2dAttrs>(), {K::kAdaptiveAvgPool2d}},
      {names_of<FlattenAttrs>(), {K::kFlatten}},
      {names_of<PadAttrs>(), {K::kPad}},
      {names_of<DropoutAttrs>(), {K::kDropout}},
      {names_of<DropoutMaskAttrs>(), {K::kDropoutMask}},
      {names_of<Conv2dInputGradAttrs>(), {K::kConv2dInputGrad}},
      {names_of<Conv2dWeightGradAttrs>(), {K::kConv2dWeightGrad}},
      {names_of<AvgPool2dGradAttrs>(), {K::kAvgPool2dGrad}},
      {names_of<AdaptiveAvgPool2dGradAttrs>(), {K::kAdaptiveAvgPool2dGrad}},
      {names_of<RandAttrs>(), {K::kRandUniform, K::kRandNormal}},
  };
}

TEST(AttrViews, NamesMatchTheRegistryRows) {
  for (const ViewUse& use : view_uses()) {
    for (OpKind op : use.ops) {
      const OpInfo& info = op_info(op);
      ASSERT_EQ(info.attrs.size(), use.names.size()) << info.name;
      for (size_t i = 0; i < use.names.size(); ++i) {
        EXPECT_EQ(info.attrs[i].name, use.names[i]) << info.name << " attribute " << i;
      }
    }
  }
}

TEST(AttrViews, EveryOpWithAttributesHasAView) {
  std::map<OpKind, int> viewed;
  for (const ViewUse& use : view_uses()) {
    for (OpKind op : use.ops) ++viewed[op];
  }
  for (const OpInfo& info : all_ops()) {
    EXPECT_EQ(viewed[info.kind], info.attrs.empty() ? 0 : 1) << info.name;
  }
}

TEST(AttrViews, ReadAndWriteTheSlotsTheyName) {
  std::vector<AttrValue> attrs = {AttrValue::of_int(2), AttrValue::of_int(-3),
                                  AttrValue::of_int(7), AttrValue::of_int(1)};
  SliceAttrs writable{std::span<AttrValue>(attrs)};
  writable.end() = 5;
  const SliceAttrs view{std::span<const AttrValue>(attrs)};
  EXPECT_EQ(view.axis(), 2);
  EXPECT_EQ(view.start(), -3);
  EXPECT_EQ(view.end(), 5);
  EXPECT_EQ(view.step(), 1);
  EXPECT_EQ(attrs[2].i, 5);
}

// ---- cost column ------------------------------------------------------------------------------

// The cost of `kind` on `in` with its default attributes overridden by `named`.
OpCost cost_of(OpKind kind, std::vector<TensorType> in,
               std::vector<std::pair<std::string_view, AttrValue>> named = {}) {
  const OpInfo& info = op_info(kind);
  std::vector<AttrValue> attrs;
  for (const AttrSpec& spec : info.attrs) attrs.push_back(spec.default_value);
  for (const auto& [name, value] : named) attrs[static_cast<size_t>(info.attr_index(name))] = value;
  const TensorType out = infer_op(kind, in, attrs).value_or_throw();
  return info.cost(in, out, attrs);
}

TEST(OpCosts, FollowTheDocumentedFormulas) {
  const TensorType x{DType::kF32, {2, 3, 4}};  // 24 elements
  EXPECT_EQ(cost_of(OpKind::kAdd, {x, x}), (OpCost{24, false}));
  EXPECT_EQ(cost_of(OpKind::kExp, {x}), (OpCost{24 * kTranscendentalFlops, false}));
  EXPECT_EQ(cost_of(OpKind::kPow, {x, x}), (OpCost{24 * kTranscendentalFlops, false}));
  EXPECT_EQ(cost_of(OpKind::kGelu, {x}), (OpCost{24 * kTranscendentalFlops, false}));
  EXPECT_EQ(cost_of(OpKind::kClamp, {x}, {{"min", AttrValue::of_float(0)}, {"max", AttrValue::of_float(1)}}),
            (OpCost{24, false}));
  EXPECT_EQ(cost_of(OpKind::kPermute, {x}, {{"perm", AttrValue::of_ints({2, 0, 1})}}), OpCost{});
  EXPECT_EQ(cost_of(OpKind::kSum, {x}, {{"axes", AttrValue::of_ints({1})}}), (OpCost{24, false}));
  EXPECT_EQ(cost_of(OpKind::kNormal, {}, {{"shape", AttrValue::of_ints({5})}}),
            (OpCost{5 * kTranscendentalFlops, false}));
  const TensorType seed{DType::kI64, {2}};
  EXPECT_EQ(cost_of(OpKind::kRandUniform, {seed}, {{"shape", AttrValue::of_ints({3, 5})}}),
            (OpCost{15 * kPhiloxFlops, false}));
  EXPECT_EQ(cost_of(OpKind::kRandNormal, {seed}, {{"shape", AttrValue::of_ints({3, 5})}}),
            (OpCost{15 * (kPhiloxFlops + 2 * kTranscendentalFlops), false}));
  // [2, 3, 4] @ [4, 5]: 2 * 30 outputs * K 4.
  EXPECT_EQ(cost_of(OpKind::kMatmul, {x, {DType::kF32, {4, 5}}}), (OpCost{2 * 30 * 4, true}));
  EXPECT_EQ(cost_of(OpKind::kLinear, {x, {DType::kF32, {5, 4}}}), (OpCost{2 * 30 * 4, true}));
  // conv2d [1, 4, 8, 8] * [6, 2, 3, 3], groups 2: out [1, 6, 6, 6], 2*3*3 per output.
  EXPECT_EQ(cost_of(OpKind::kConv2d, {{DType::kF32, {1, 4, 8, 8}}, {DType::kF32, {6, 2, 3, 3}}},
                    {{"groups", AttrValue::of_int(2)}}),
            (OpCost{2 * 216 * 18, true}));
  // max pool 3x2 over [1, 1, 6, 6] stride 1: out [1, 1, 4, 5], window 6.
  EXPECT_EQ(cost_of(OpKind::kMaxPool2d, {{DType::kF32, {1, 1, 6, 6}}},
                    {{"kernel", AttrValue::of_ints({3, 2})}, {"stride", AttrValue::of_ints({1})}}),
            (OpCost{20 * 6, false}));
  EXPECT_EQ(cost_of(OpKind::kBatchNorm, {{DType::kF32, {2, 3, 4}}, {DType::kF32, {3}},
                                         {DType::kF32, {3}}, {DType::kF32, {3}}, {DType::kF32, {3}}}),
            (OpCost{2 * 24, false}));
  EXPECT_EQ(cost_of(OpKind::kLayerNorm, {x}), (OpCost{8 * 24, false}));
  EXPECT_EQ(cost_of(OpKind::kSoftmax, {x}), (OpCost{(kTranscendentalFlops + 3) * 24, false}));
  // q [2, 3, 4], k [2, 5, 4], v [2, 5, 6]: scores 2 * 3 * 5 = 30.
  EXPECT_EQ(cost_of(OpKind::kScaledDotProductAttention,
                    {x, {DType::kF32, {2, 5, 4}}, {DType::kF32, {2, 5, 6}}}),
            (OpCost{2 * 30 * (4 + 6) + (kTranscendentalFlops + 3) * 30, true}));
  EXPECT_EQ(cost_of(OpKind::kEmbedding, {{DType::kF32, {10, 4}}, {DType::kI64, {3}}}),
            (OpCost{12, false}));
}

// ---- inference reports, never throws ---------------------------------------------------------

TEST(OpInference, ReturnsTheErrorAsAStatus) {
  std::vector<AttrValue> none;
  const std::vector<TensorType> in = {{DType::kF32, {2, 3}}, {DType::kF32, {4, 5}}};
  const Result<TensorType> r = infer_op(OpKind::kMatmul, in, none);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "op 'matmul': shapes f32[2, 3] and f32[4, 5] do not match: inner dims 3 and 4 differ");
  // The registry's own checks (arity, attribute kinds, element count) are statuses too.
  const Result<TensorType> arity = infer_op(OpKind::kMatmul, std::span(in).first(1), none);
  ASSERT_FALSE(arity.is_ok());
  EXPECT_EQ(arity.status().message(), "op 'matmul': takes 2 tensor inputs, got 1");
  std::vector<AttrValue> wrong_kind = {AttrValue::of_float(1)};
  const Result<TensorType> kind = infer_op(OpKind::kSoftmax, std::span(in).first(1), wrong_kind);
  ASSERT_FALSE(kind.is_ok());
  EXPECT_EQ(kind.status().message(), "op 'softmax': attribute 'axis' must be int, got float");
  const std::vector<TensorType> huge = {{DType::kF32, {int64_t{1} << 30, 1}},
                                        {DType::kF32, {1, int64_t{1} << 30}}};
  const Result<TensorType> product = infer_op(OpKind::kAdd, huge, none);
  ASSERT_FALSE(product.is_ok());
  EXPECT_EQ(product.status().message().rfind("op 'add': ", 0), 0u) << product.status().message();
}

}  // namespace
}  // namespace tracecache
