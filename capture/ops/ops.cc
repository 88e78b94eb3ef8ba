// The op registry table: one row per op (ops.h); the inference rules are in infer_*.cc, the costs
// in op_costs.cc, the reference kernels in reference_*.cc, the gradient rules in grad_*.cc.
#include "capture/ops/ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>

#include "capture/core/status.h"
#include "capture/ops/attr_views.h"
#include "capture/ops/grad_elementwise.h"
#include "capture/ops/grad_nn_ops.h"
#include "capture/ops/grad_train.h"
#include "capture/ops/grad_nn_layers.h"
#include "capture/ops/grad_onnx.h"
#include "capture/ops/infer.h"
#include "capture/ops/infer_checks.h"
#include "capture/ops/op_costs.h"
#include "capture/ops/random.h"
#include "capture/ops/reference_kernels.h"
#include "capture/ops/resize.h"

namespace tracecache {

namespace {

using namespace infer;  // NOLINT: the table names the rules as infer_NAME
using namespace cost;   // NOLINT: and the costs as cost_NAME, kPerOut...

// ---- attribute tables --------------------------------------------------------------------

AttrValue none_ints() { return AttrValue::of_ints({}); }

const AttrSpec kParameterAttrs[] = {{"index", AttrKind::kInt, true, AttrValue::of_int(0)}};
const AttrSpec kCastAttrs[] = {{"dtype", AttrKind::kDType, true, AttrValue::of_dtype(DType::kF32)}};
const AttrSpec kReduceAttrs[] = {{"axes", AttrKind::kInts, false, none_ints()},
                                 {"keepdim", AttrKind::kBool, false, AttrValue::of_bool(false)}};
const AttrSpec kArgmaxAttrs[] = {{"axis", AttrKind::kInt, true, AttrValue::of_int(0)},
                                 {"keepdim", AttrKind::kBool, false, AttrValue::of_bool(false)}};
const AttrSpec kArgminAttrs[] = {{"axis", AttrKind::kInt, true, AttrValue::of_int(0)},
                                 {"keepdim", AttrKind::kBool, false, AttrValue::of_bool(false)},
                                 {"select_last_index", AttrKind::kBool, false, AttrValue::of_bool(false)}};
const AttrSpec kShapeAttrs[] = {{"shape", AttrKind::kInts, true, none_ints()}};
const AttrSpec kPermuteAttrs[] = {{"perm", AttrKind::kInts, true, none_ints()}};
const AttrSpec kTransposeAttrs[] = {{"dim0", AttrKind::kInt, true, AttrValue::of_int(0)},
                                    {"dim1", AttrKind::kInt, true, AttrValue::of_int(0)}};
const AttrSpec kConcatAttrs[] = {{"axis", AttrKind::kInt, true, AttrValue::of_int(0)}};
const AttrSpec kSliceAttrs[] = {
    {"axis", AttrKind::kInt, true, AttrValue::of_int(0)},
    {"start", AttrKind::kInt, false, AttrValue::of_int(0)},
    {"end", AttrKind::kInt, false, AttrValue::of_int(std::numeric_limits<int64_t>::max())},
    {"step", AttrKind::kInt, false, AttrValue::of_int(1)}};
const AttrSpec kFullAttrs[] = {{"shape", AttrKind::kInts, true, none_ints()},
                               {"value", AttrKind::kFloat, true, AttrValue::of_float(0)},
                               {"dtype", AttrKind::kDType, false, AttrValue::of_dtype(DType::kF32)}};
const AttrSpec kArangeAttrs[] = {{"start", AttrKind::kFloat, false, AttrValue::of_float(0)},
                                 {"end", AttrKind::kFloat, true, AttrValue::of_float(0)},
                                 {"step", AttrKind::kFloat, false, AttrValue::of_float(1)},
                                 {"dtype", AttrKind::kDType, false, AttrValue::of_dtype(DType::kI64)}};
const AttrSpec kUniformAttrs[] = {{"shape", AttrKind::kInts, true, none_ints()},
                                  {"low", AttrKind::kFloat, false, AttrValue::of_float(0)},
                                  {"high", AttrKind::kFloat, false, AttrValue::of_float(1)},
                                  {"seed", AttrKind::kInt, true, AttrValue::of_int(0)},
                                  {"dtype", AttrKind::kDType, false, AttrValue::of_dtype(DType::kF32)}};
const AttrSpec kNormalAttrs[] = {{"shape", AttrKind::kInts, true, none_ints()},
                                 {"mean", AttrKind::kFloat, false, AttrValue::of_float(0)},
                                 {"std", AttrKind::kFloat, false, AttrValue::of_float(1)},
                                 {"seed", AttrKind::kInt, true, AttrValue::of_int(0)},
                                 {"dtype", AttrKind::kDType, false, AttrValue::of_dtype(DType::kF32)}};

const AttrSpec kGeluAttrs[] = {{"tanh", AttrKind::kBool, false, AttrValue::of_bool(false)}};
const AttrSpec kClampAttrs[] = {{"min", AttrKind::kFloat, true, AttrValue::of_float(0)},
                                {"max", AttrKind::kFloat, true, AttrValue::of_float(0)}};
const AttrSpec kBatchNormAttrs[] = {{"eps", AttrKind::kFloat, false, AttrValue::of_float(1e-5)}};
const AttrSpec kLayerNormAttrs[] = {{"normalized_dims", AttrKind::kInt, true, AttrValue::of_int(1)},
                                    {"eps", AttrKind::kFloat, false, AttrValue::of_float(1e-5)}};
const AttrSpec kSoftmaxAttrs[] = {{"axis", AttrKind::kInt, true, AttrValue::of_int(0)}};
const AttrSpec kAttentionAttrs[] = {{"causal", AttrKind::kBool, false, AttrValue::of_bool(false)},
                                    {"scale", AttrKind::kFloat, false, AttrValue::of_float(0)}};
// nn layers. Pairs are {height, width}; a one-entry list means both (normalized to two).
AttrValue pair_of(int64_t v) { return AttrValue::of_ints({v, v}); }
const AttrSpec kConv2dAttrs[] = {{"stride", AttrKind::kInts, false, pair_of(1)},
                                 {"padding", AttrKind::kInts, false, pair_of(0)},
                                 {"dilation", AttrKind::kInts, false, pair_of(1)},
                                 {"groups", AttrKind::kInt, false, AttrValue::of_int(1)}};
const AttrSpec kMaxPool2dAttrs[] = {{"kernel", AttrKind::kInts, true, none_ints()},
                                    {"stride", AttrKind::kInts, false, none_ints()},
                                    {"padding", AttrKind::kInts, false, pair_of(0)},
                                    {"dilation", AttrKind::kInts, false, pair_of(1)},
                                    {"ceil_mode", AttrKind::kBool, false, AttrValue::of_bool(false)}};
const AttrSpec kAvgPool2dAttrs[] = {{"kernel", AttrKind::kInts, true, none_ints()},
                                    {"stride", AttrKind::kInts, false, none_ints()},
                                    {"padding", AttrKind::kInts, false, pair_of(0)},
                                    {"ceil_mode", AttrKind::kBool, false, AttrValue::of_bool(false)},
                                    {"count_include_pad", AttrKind::kBool, false, AttrValue::of_bool(true)}};
const AttrSpec kAdaptiveAvgPool2dAttrs[] = {{"output_size", AttrKind::kInts, true, none_ints()}};
const AttrSpec kFlattenAttrs[] = {{"start_dim", AttrKind::kInt, false, AttrValue::of_int(0)},
                                  {"end_dim", AttrKind::kInt, false, AttrValue::of_int(-1)}};
const AttrSpec kPadAttrs[] = {{"pads", AttrKind::kInts, true, none_ints()},
                              {"value", AttrKind::kFloat, false, AttrValue::of_float(0)}};
const AttrSpec kDropoutAttrs[] = {{"p", AttrKind::kFloat, true, AttrValue::of_float(0.5)}};
const AttrSpec kDropoutMaskAttrs[] = {{"shape", AttrKind::kInts, true, none_ints()},
                                      {"p", AttrKind::kFloat, true, AttrValue::of_float(0.5)},
                                      {"salt", AttrKind::kInt, false, AttrValue::of_int(0)}};
const AttrSpec kIndexAxisAttrs[] = {{"axis", AttrKind::kInt, true, AttrValue::of_int(0)}};
// gradients of the nn layers: the forward op's attributes plus the size the gradient has.
const AttrSpec kConv2dInputGradAttrs[] = {{"stride", AttrKind::kInts, false, pair_of(1)},
                                          {"padding", AttrKind::kInts, false, pair_of(0)},
                                          {"dilation", AttrKind::kInts, false, pair_of(1)},
                                          {"groups", AttrKind::kInt, false, AttrValue::of_int(1)},
                                          {"input_size", AttrKind::kInts, true, none_ints()}};
const AttrSpec kConv2dWeightGradAttrs[] = {{"stride", AttrKind::kInts, false, pair_of(1)},
                                           {"padding", AttrKind::kInts, false, pair_of(0)},
                                           {"dilation", AttrKind::kInts, false, pair_of(1)},
                                           {"groups", AttrKind::kInt, false, AttrValue::of_int(1)},
                                           {"kernel", AttrKind::kInts, true, none_ints()}};
const AttrSpec kAvgPool2dGradAttrs[] = {{"kernel", AttrKind::kInts, true, none_ints()},
                                        {"stride", AttrKind::kInts, false, none_ints()},
                                        {"padding", AttrKind::kInts, false, pair_of(0)},
                                        {"count_include_pad", AttrKind::kBool, false, AttrValue::of_bool(true)},
                                        {"input_size", AttrKind::kInts, true, none_ints()}};
const AttrSpec kConvTranspose2dAttrs[] = {{"stride", AttrKind::kInts, false, pair_of(1)},
                                          {"padding", AttrKind::kInts, false, pair_of(0)},
                                          {"output_padding", AttrKind::kInts, false, pair_of(0)},
                                          {"dilation", AttrKind::kInts, false, pair_of(1)},
                                          {"groups", AttrKind::kInt, false, AttrValue::of_int(1)}};
const AttrSpec kResizeNearest2dAttrs[] = {{"size", AttrKind::kInts, true, none_ints()},
                                          {"scale_h", AttrKind::kFloat, false, AttrValue::of_float(0)},
                                          {"scale_w", AttrKind::kFloat, false, AttrValue::of_float(0)},
                                          {"coordinate_transformation_mode", AttrKind::kInt, false, AttrValue::of_int(0)},
                                          {"nearest_mode", AttrKind::kInt, false, AttrValue::of_int(0)}};
const AttrSpec kResizeLinear2dAttrs[] = {{"size", AttrKind::kInts, true, none_ints()},
                                         {"scale_h", AttrKind::kFloat, false, AttrValue::of_float(0)},
                                         {"scale_w", AttrKind::kFloat, false, AttrValue::of_float(0)},
                                         {"coordinate_transformation_mode", AttrKind::kInt, false, AttrValue::of_int(0)}};
const AttrSpec kTopkAttrs[] = {{"k", AttrKind::kInt, true, AttrValue::of_int(0)},
                               {"axis", AttrKind::kInt, false, AttrValue::of_int(-1)},
                               {"largest", AttrKind::kBool, false, AttrValue::of_bool(true)}};
const AttrSpec kScatterElementsAttrs[] = {{"axis", AttrKind::kInt, false, AttrValue::of_int(0)},
                                          {"reduction", AttrKind::kInt, false, AttrValue::of_int(0)}};
const AttrSpec kGatherNdAttrs[] = {{"batch_dims", AttrKind::kInt, false, AttrValue::of_int(0)}};
const AttrSpec kResizeNearest2dGradAttrs[] = {{"input_size", AttrKind::kInts, true, none_ints()},
                                              {"scale_h", AttrKind::kFloat, false, AttrValue::of_float(0)},
                                              {"scale_w", AttrKind::kFloat, false, AttrValue::of_float(0)},
                                              {"coordinate_transformation_mode", AttrKind::kInt, false, AttrValue::of_int(0)},
                                              {"nearest_mode", AttrKind::kInt, false, AttrValue::of_int(0)}};
const AttrSpec kResizeLinear2dGradAttrs[] = {{"input_size", AttrKind::kInts, true, none_ints()},
                                             {"scale_h", AttrKind::kFloat, false, AttrValue::of_float(0)},
                                             {"scale_w", AttrKind::kFloat, false, AttrValue::of_float(0)},
                                             {"coordinate_transformation_mode", AttrKind::kInt, false, AttrValue::of_int(0)}};
const AttrSpec kAdaptiveAvgPool2dGradAttrs[] = {{"input_size", AttrKind::kInts, true, none_ints()}};
const AttrSpec kRandAttrs[] = {{"shape", AttrKind::kInts, true, none_ints()},
                               {"stream", AttrKind::kInt, false, AttrValue::of_int(0)}};

// ---- the table ----------------------------------------------------------------------------

using C = OpClass;
constexpr std::span<const AttrSpec> kNoAttrs{};

const OpInfo kOps[] = {
    {OpKind::kParameter, "parameter", C::kParameter, 0, 0, kParameterAttrs, infer_parameter, nullptr, cost_free, nullptr},
    {OpKind::kNeg, "neg", C::kUnary, 1, 1, kNoAttrs, infer_unary_same<OpKind::kNeg>, ref::neg, kPerOut, grad::neg},
    {OpKind::kAbs, "abs", C::kUnary, 1, 1, kNoAttrs, infer_unary_same<OpKind::kAbs>, ref::abs, kPerOut, grad::abs},
    {OpKind::kExp, "exp", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::exp, kTranscendental, grad::exp},
    {OpKind::kLog, "log", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::log, kTranscendental, grad::log},
    {OpKind::kSqrt, "sqrt", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::sqrt, kTranscendental, grad::sqrt},
    {OpKind::kRsqrt, "rsqrt", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::rsqrt, kTranscendental, grad::rsqrt},
    {OpKind::kTanh, "tanh", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::tanh, kTranscendental, grad::tanh},
    {OpKind::kSigmoid, "sigmoid", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::sigmoid, kTranscendental, grad::sigmoid},
    {OpKind::kRelu, "relu", C::kUnary, 1, 1, kNoAttrs, infer_unary_same<OpKind::kRelu>, ref::relu, kPerOut, grad::relu},
    {OpKind::kAdd, "add", C::kBinary, 2, 2, kNoAttrs, infer_arith<OpKind::kAdd>, ref::add, kPerOut, grad::add},
    {OpKind::kSub, "sub", C::kBinary, 2, 2, kNoAttrs, infer_arith<OpKind::kSub>, ref::sub, kPerOut, grad::sub},
    {OpKind::kMul, "mul", C::kBinary, 2, 2, kNoAttrs, infer_arith<OpKind::kMul>, ref::mul, kPerOut, grad::mul},
    {OpKind::kDiv, "div", C::kBinary, 2, 2, kNoAttrs, infer_arith<OpKind::kDiv>, ref::div, kPerOut, grad::div},
    {OpKind::kPow, "pow", C::kBinary, 2, 2, kNoAttrs, infer_arith<OpKind::kPow>, ref::pow, kTranscendental, grad::pow},
    {OpKind::kMaximum, "maximum", C::kBinary, 2, 2, kNoAttrs, infer_minmax<OpKind::kMaximum>, ref::maximum, kPerOut, grad::maximum},
    {OpKind::kMinimum, "minimum", C::kBinary, 2, 2, kNoAttrs, infer_minmax<OpKind::kMinimum>, ref::minimum, kPerOut, grad::minimum},
    {OpKind::kEq, "eq", C::kCompare, 2, 2, kNoAttrs, infer_compare<OpKind::kEq>, ref::eq, kPerOut, nullptr},
    {OpKind::kLt, "lt", C::kCompare, 2, 2, kNoAttrs, infer_compare<OpKind::kLt>, ref::lt, kPerOut, nullptr},
    {OpKind::kGt, "gt", C::kCompare, 2, 2, kNoAttrs, infer_compare<OpKind::kGt>, ref::gt, kPerOut, nullptr},
    {OpKind::kWhere, "where", C::kWhere, 3, 3, kNoAttrs, infer_where, ref::where, kPerOut, grad::where},
    {OpKind::kCast, "cast", C::kCast, 1, 1, kCastAttrs, infer_cast, ref::cast, kPerOut, grad::cast},
    {OpKind::kMatmul, "matmul", C::kMatmul, 2, 2, kNoAttrs, infer_matmul, ref::matmul, cost_contract_last_dim, grad::matmul},
    {OpKind::kSum, "sum", C::kReduce, 1, 1, kReduceAttrs, infer_sum, ref::sum, kPerIn, grad::sum},
    {OpKind::kMean, "mean", C::kReduce, 1, 1, kReduceAttrs, infer_mean, ref::mean, kPerIn, grad::mean},
    {OpKind::kMax, "max", C::kReduce, 1, 1, kReduceAttrs, infer_extreme<OpKind::kMax>, ref::max, kPerIn, grad::max},
    {OpKind::kArgmax, "argmax", C::kReduce, 1, 1, kArgmaxAttrs, infer_arg_extreme<OpKind::kArgmax>, ref::argmax, kPerIn, nullptr},
    {OpKind::kReshape, "reshape", C::kLayout, 1, 1, kShapeAttrs, infer_reshape, ref::reshape, cost_free, grad::reshape},
    {OpKind::kPermute, "permute", C::kLayout, 1, 1, kPermuteAttrs, infer_permute, ref::permute, cost_free, grad::permute},
    {OpKind::kTranspose, "transpose", C::kLayout, 1, 1, kTransposeAttrs, infer_transpose, ref::transpose, cost_free, grad::transpose},
    {OpKind::kBroadcastTo, "broadcast_to", C::kLayout, 1, 1, kShapeAttrs, infer_broadcast_to, ref::broadcast_to, cost_free, grad::broadcast_to},
    {OpKind::kConcat, "concat", C::kLayout, 1, kVariadic, kConcatAttrs, infer_concat, ref::concat, cost_free, grad::concat},
    {OpKind::kSlice, "slice", C::kLayout, 1, 1, kSliceAttrs, infer_slice, ref::slice, cost_free, grad::slice},
    {OpKind::kConv2d, "conv2d", C::kNn, 2, 3, kConv2dAttrs, infer_conv2d, ref::conv2d, cost_conv2d, grad::conv2d},
    {OpKind::kMaxPool2d, "max_pool2d", C::kNn, 1, 1, kMaxPool2dAttrs, infer_max_pool2d, ref::max_pool2d, cost_pool<MaxPool2dAttrs>, grad::max_pool2d},
    {OpKind::kAvgPool2d, "avg_pool2d", C::kNn, 1, 1, kAvgPool2dAttrs, infer_avg_pool2d, ref::avg_pool2d, cost_pool<AvgPool2dAttrs>, grad::avg_pool2d},
    {OpKind::kAdaptiveAvgPool2d, "adaptive_avg_pool2d", C::kNn, 1, 1, kAdaptiveAvgPool2dAttrs, infer_adaptive_avg_pool2d, ref::adaptive_avg_pool2d, kPerIn, grad::adaptive_avg_pool2d},
    {OpKind::kLinear, "linear", C::kNn, 2, 3, kNoAttrs, infer_linear, ref::linear, cost_contract_last_dim, grad::linear},
    {OpKind::kFlatten, "flatten", C::kNn, 1, 1, kFlattenAttrs, infer_flatten, ref::flatten, kPerOut, grad::flatten},
    {OpKind::kPad, "pad", C::kNn, 1, 1, kPadAttrs, infer_pad, ref::pad, kPerOut, grad::pad},
    {OpKind::kDropout, "dropout", C::kNn, 1, 1, kDropoutAttrs, infer_dropout, ref::dropout, kPerOut, grad::dropout},
    {OpKind::kEmbedding, "embedding", C::kNn, 2, 2, kNoAttrs, infer_embedding, ref::embedding, kPerOut, grad::embedding},
    {OpKind::kGather, "gather", C::kNn, 2, 2, kIndexAxisAttrs, infer_gather, ref::gather, kPerOut, grad::gather},
    {OpKind::kIndexSelect, "index_select", C::kNn, 2, 2, kIndexAxisAttrs, infer_index_select, ref::index_select, kPerOut, grad::index_select},
    {OpKind::kFull, "full", C::kSource, 0, 0, kFullAttrs, infer_full, ref::full, kPerOut, nullptr},
    {OpKind::kArange, "arange", C::kSource, 0, 0, kArangeAttrs, infer_arange, ref::arange, kPerOut, nullptr},
    {OpKind::kUniform, "uniform", C::kSource, 0, 0, kUniformAttrs, infer_uniform, ref::uniform, kPerOut, nullptr},
    {OpKind::kNormal, "normal", C::kSource, 0, 0, kNormalAttrs, infer_normal, ref::normal, kTranscendental, nullptr},
    {OpKind::kGelu, "gelu", C::kUnary, 1, 1, kGeluAttrs, infer_unary_float, ref::gelu, kTranscendental, grad::gelu},
    {OpKind::kSilu, "silu", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::silu, kTranscendental, grad::silu},
    {OpKind::kHardswish, "hardswish", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::hardswish, kPerOut, grad::hardswish},
    {OpKind::kHardsigmoid, "hardsigmoid", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::hardsigmoid, kPerOut, grad::hardsigmoid},
    {OpKind::kErf, "erf", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::erf, kTranscendental, grad::erf},
    {OpKind::kClamp, "clamp", C::kUnary, 1, 1, kClampAttrs, infer_clamp, ref::clamp, kPerOut, grad::clamp},
    {OpKind::kBatchNorm, "batch_norm", C::kNn, 5, 5, kBatchNormAttrs, infer_batch_norm, ref::batch_norm, cost_per_out<2>, grad::batch_norm},
    {OpKind::kLayerNorm, "layer_norm", C::kNn, 1, 3, kLayerNormAttrs, infer_layer_norm, ref::layer_norm, cost_per_in<8>, grad::layer_norm},
    {OpKind::kSoftmax, "softmax", C::kNn, 1, 1, kSoftmaxAttrs, infer_softmax<OpKind::kSoftmax>, ref::softmax, kSoftmaxCost, grad::softmax},
    {OpKind::kLogSoftmax, "log_softmax", C::kNn, 1, 1, kSoftmaxAttrs, infer_softmax<OpKind::kLogSoftmax>, ref::log_softmax, kSoftmaxCost, grad::log_softmax},
    {OpKind::kScaledDotProductAttention, "scaled_dot_product_attention", C::kNn, 3, 4, kAttentionAttrs,
     infer_attention, ref::scaled_dot_product_attention, cost_attention, grad::scaled_dot_product_attention},
    {OpKind::kScatterAdd, "scatter_add", C::kNn, 3, 3, kIndexAxisAttrs, infer_scatter_add, ref::scatter_add, cost_scatter_add, grad::scatter_add},
    // training
    {OpKind::kDropoutMask, "dropout_mask", C::kNn, 1, 1, kDropoutMaskAttrs, infer_dropout_mask, ref::dropout_mask, kPerOut, nullptr},
    // gradients of the nn layers (not differentiable themselves: no higher-order gradients)
    {OpKind::kConv2dInputGrad, "conv2d_input_grad", C::kNn, 2, 2, kConv2dInputGradAttrs, infer_conv2d_input_grad,
     ref::conv2d_input_grad, cost_conv2d_input_grad, nullptr},
    {OpKind::kConv2dWeightGrad, "conv2d_weight_grad", C::kNn, 2, 2, kConv2dWeightGradAttrs, infer_conv2d_weight_grad,
     ref::conv2d_weight_grad, cost_conv2d_weight_grad, nullptr},
    {OpKind::kMaxPool2dGrad, "max_pool2d_grad", C::kNn, 2, 2, kMaxPool2dAttrs, infer_max_pool2d_grad,
     ref::max_pool2d_grad, cost_pool_grad<MaxPool2dAttrs>, nullptr},
    {OpKind::kAvgPool2dGrad, "avg_pool2d_grad", C::kNn, 1, 1, kAvgPool2dGradAttrs, infer_avg_pool2d_grad,
     ref::avg_pool2d_grad, cost_pool_grad<AvgPool2dGradAttrs>, nullptr},
    {OpKind::kAdaptiveAvgPool2dGrad, "adaptive_avg_pool2d_grad", C::kNn, 1, 1, kAdaptiveAvgPool2dGradAttrs,
     infer_adaptive_avg_pool2d_grad, ref::adaptive_avg_pool2d_grad, kPerOut, nullptr},
    // the ops ONNX models need (issue 16)
    {OpKind::kFloor, "floor", C::kUnary, 1, 1, kNoAttrs, infer_unary_same<OpKind::kFloor>, ref::floor, kPerOut, grad::floor},
    {OpKind::kCeil, "ceil", C::kUnary, 1, 1, kNoAttrs, infer_unary_same<OpKind::kCeil>, ref::ceil, kPerOut, grad::ceil},
    {OpKind::kRound, "round", C::kUnary, 1, 1, kNoAttrs, infer_unary_same<OpKind::kRound>, ref::round, kPerOut, grad::round},
    {OpKind::kSin, "sin", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::sin, kTranscendental, grad::sin},
    {OpKind::kCos, "cos", C::kUnary, 1, 1, kNoAttrs, infer_unary_float, ref::cos, kTranscendental, grad::cos},
    {OpKind::kRemainder, "remainder", C::kBinary, 2, 2, kNoAttrs, infer_arith<OpKind::kRemainder>, ref::remainder, kPerOut, grad::remainder},
    {OpKind::kFmod, "fmod", C::kBinary, 2, 2, kNoAttrs, infer_arith<OpKind::kFmod>, ref::fmod, kPerOut, grad::fmod},
    {OpKind::kTruncDiv, "trunc_div", C::kBinary, 2, 2, kNoAttrs, infer_arith<OpKind::kTruncDiv>, ref::trunc_div, kPerOut, grad::trunc_div},
    {OpKind::kMin, "min", C::kReduce, 1, 1, kReduceAttrs, infer_extreme<OpKind::kMin>, ref::min, kPerIn, grad::min},
    {OpKind::kArgmin, "argmin", C::kReduce, 1, 1, kArgminAttrs, infer_arg_extreme<OpKind::kArgmin>, ref::argmin, kPerIn, nullptr},
    {OpKind::kConvTranspose2d, "conv_transpose2d", C::kNn, 2, 3, kConvTranspose2dAttrs, infer_conv_transpose2d,
     ref::conv_transpose2d, cost_conv_transpose2d, grad::conv_transpose2d},
    {OpKind::kResizeNearest2d, "resize_nearest2d", C::kNn, 1, 1, kResizeNearest2dAttrs, infer_resize_nearest2d,
     ref::resize_nearest2d, kPerOut, grad::resize_nearest2d},
    {OpKind::kResizeLinear2d, "resize_linear2d", C::kNn, 1, 1, kResizeLinear2dAttrs, infer_resize_linear2d,
     ref::resize_linear2d, cost_per_out<6>, grad::resize_linear2d},
    {OpKind::kTopk, "topk", C::kNn, 1, 1, kTopkAttrs, infer_topk<OpKind::kTopk>, ref::topk, kPerIn, grad::topk},
    {OpKind::kTopkIndices, "topk_indices", C::kNn, 1, 1, kTopkAttrs, infer_topk<OpKind::kTopkIndices>,
     ref::topk_indices, kPerIn, nullptr},
    {OpKind::kScatterElements, "scatter_elements", C::kNn, 3, 3, kScatterElementsAttrs, infer_scatter_elements,
     ref::scatter_elements, cost_scatter_elements, grad::scatter_elements},
    {OpKind::kGatherNd, "gather_nd", C::kNn, 2, 2, kGatherNdAttrs, infer_gather_nd, ref::gather_nd, kPerOut, nullptr},
    {OpKind::kResizeNearest2dGrad, "resize_nearest2d_grad", C::kNn, 1, 1, kResizeNearest2dGradAttrs,
     infer_resize_grad<OpKind::kResizeNearest2dGrad, OpKind::kResizeNearest2d>, ref::resize_nearest2d_grad,
     cost_per_in<1>, nullptr},
    {OpKind::kResizeLinear2dGrad, "resize_linear2d_grad", C::kNn, 1, 1, kResizeLinear2dGradAttrs,
     infer_resize_grad<OpKind::kResizeLinear2dGrad, OpKind::kResizeLinear2d>, ref::resize_linear2d_grad,
     cost_per_in<8>, nullptr},
    // random numbers from a seed tensor: not differentiable (the only input is the integer seed)
    {OpKind::kRandUniform, "rand_uniform", C::kNn, 1, 1, kRandAttrs, infer_rand<OpKind::kRandUniform>,
     ref::rand_uniform, kRandUniformCost, nullptr},
    {OpKind::kRandNormal, "rand_normal", C::kNn, 1, 1, kRandAttrs, infer_rand<OpKind::kRandNormal>,
     ref::rand_normal, kRandNormalCost, nullptr},
    // quantization: not differentiable (an integer result, or an integer input)
    {OpKind::kQuantizeLinear, "quantize_linear", C::kNn, 3, 3, kNoAttrs, infer_quantize_linear,
     ref::quantize_linear, cost_per_out<4>, nullptr},
    {OpKind::kDequantizeLinear, "dequantize_linear", C::kNn, 3, 3, kNoAttrs, infer_dequantize_linear,
     ref::dequantize_linear, cost_per_out<2>, nullptr},
};
static_assert(std::size(kOps) == kOpCount, "every OpKind needs exactly one registry row");

bool table_in_enum_order() {
  for (int i = 0; i < kOpCount; ++i) {
    if (static_cast<int>(kOps[i].kind) != i) return false;
  }
  return true;
}

}  // namespace

std::string type_to_string(const TensorType& t) {
  return fmt::format("{}{}", dtype_name(t.dtype), t.shape.to_string());
}

int OpInfo::attr_index(std::string_view attr) const {
  for (size_t i = 0; i < attrs.size(); ++i) {
    if (attrs[i].name == attr) return static_cast<int>(i);
  }
  return -1;
}

const OpInfo& op_info(OpKind kind) {
  static const bool ordered = table_in_enum_order();
  assert(ordered && "registry rows must follow OpKind order");
  (void)ordered;
  return kOps[static_cast<size_t>(kind)];
}

const OpInfo* find_op(std::string_view name) {
  for (const OpInfo& op : kOps) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

std::span<const OpInfo> all_ops() { return kOps; }

namespace {

// The nn ops' rules compute in f32 and accept bf16 and f16 operands where they take f32
// (infer_checks.h, require_f32). Their result then has the operands' half type, as PyTorch's
// layers keep their input's dtype, and every floating operand must have that one type (PyTorch:
// "Input type (BFloat16) and weight type (float) should be the same"). Ops with a dtype
// attribute name their result's type themselves.
InferError half_layer_type(const OpInfo& info, std::span<const TensorType> in, std::span<const AttrValue> attrs,
                      TensorType* out) {
  if (info.op_class != OpClass::kNn || out->dtype != DType::kF32) return std::nullopt;
  for (const AttrValue& a : attrs) {
    if (a.kind == AttrKind::kDType) return std::nullopt;
  }
  std::optional<DType> half;
  for (const TensorType& t : in) {
    if (is_half_float(t.dtype)) half = t.dtype;
  }
  if (!half) return std::nullopt;
  for (const TensorType& t : in) {
    if (is_floating(t.dtype) && t.dtype != *half) {
      return fail(info.name, fmt::format("its floating operands must have one dtype, got {} and {}; cast them "
                                         "to one first",
                                         dtype_name(*half), dtype_name(t.dtype)));
    }
  }
  out->dtype = *half;
  return std::nullopt;
}

}  // namespace

InferError infer_op(OpKind kind, std::span<const TensorType> in, std::span<AttrValue> attrs,
                    TensorType* out) {
  const OpInfo& info = op_info(kind);
  int n = static_cast<int>(in.size());
  if (n < info.min_inputs || (info.max_inputs != kVariadic && n > info.max_inputs)) {
    std::string want = info.max_inputs == kVariadic
                           ? fmt::format("at least {}", info.min_inputs)
                           : info.min_inputs == info.max_inputs
                                 ? fmt::format("{}", info.min_inputs)
                                 : fmt::format("{} to {}", info.min_inputs, info.max_inputs);
    return fail(info.name, fmt::format("takes {} tensor inputs, got {}", want, n));
  }
  if (attrs.size() != info.attrs.size()) {
    return fail(info.name, fmt::format("expects {} attributes, got {}", info.attrs.size(), attrs.size()));
  }
  for (size_t i = 0; i < attrs.size(); ++i) {
    if (attrs[i].kind != info.attrs[i].kind) {
      return fail(info.name, fmt::format("attribute '{}' must be {}, got {}", info.attrs[i].name,
                                         attr_kind_name(info.attrs[i].kind), attr_kind_name(attrs[i].kind)));
    }
  }
  if (Check error = info.infer(in, attrs, out)) return std::move(*error);
  if (Check error = half_layer_type(info, in, attrs, out)) return std::move(*error);
  // e.g. broadcasting [2^30, 1] with [1, 2^30]
  if (Result<int64_t> numel = checked_numel(out->shape.span()); !numel.is_ok()) {
    return fail(info.name, numel.status().message());
  }
  return std::nullopt;
}

Result<TensorType> infer_op(OpKind kind, std::span<const TensorType> in, std::span<AttrValue> attrs) {
  TensorType out;
  if (InferError error = infer_op(kind, in, attrs, &out)) return std::move(*error);
  return out;
}


}  // namespace tracecache
