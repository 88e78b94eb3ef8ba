// The op registry: every op tracecache knows is one row of one table.
//
// A row holds the op's name (its spelling in trace programs and in the graph hash), how many
// tensor inputs it takes, its attributes (positional, with defaults; read them through the
// typed views of attr_views.h), its inference rule (checks inputs and attributes, normalizes the
// attributes, computes the output dtype and shape, or returns the error), its reference kernel
// (the naive, obviously-correct implementation every backend is tested against) and its cost
// (flops and whether it is matrix-unit work, for cost models such as replay/backends/sim).
//
// The table is immutable and built at compile time; everything here is thread-safe.
//
// Adding an op, everything the code requires:
//  1. OpKind: a new enumerator before kCount (any position: the enum order is the table order,
//     and enum numbers never enter a hash or a file).
//  2. Its row in kOps (ops.cc), at the same position as its enumerator (`static_assert` on the
//     row count; op_info() asserts the order): name, OpClass (kUnary/kBinary/kCompare/kWhere/
//     kCast ops are fused by the compiler, so the cpu backend's fused-chain interpreter must
//     handle them), min/max inputs, AttrSpec table, inference rule, reference kernel, cost.
//       - The inference rule (InferFn): declare it in infer.h (TRACECACHE_INFER_RULE) and define
//         it in the family's infer_*.cc (the shared checks are in infer_checks.h). It writes the
//         output type and returns nullopt, or returns its error, built with fail(op, ...) so it
//         reads "op 'NAME': ..." and is
//         kInvalidArgument; it never throws. It rewrites attributes into one normal form
//         (negative axes made positive...): normalized attributes are what the graph hash
//         encodes, so two spellings of one op must normalize to the same values.
//       - Attributes: at most kMaxOpAttrs. If the op has any, add (or reuse) a typed view in
//         attr_views.h and list it in tests/capture/op_registry_test.cc (it fails for an op with
//         attributes and no view); never index attrs[N].
//       - Reference kernel: declare it in reference_kernels.h (TRACECACHE_REF_KERNEL) and
//         define it in reference_kernels.cc, reference_nn_layers.cc or reference_nn_ops.cc.
//       - Cost: one of the cost functions in op_costs.h or a new one in op_costs.cc (see OpCost).
//       - Gradient rule (grad.h): a function in the family's grad_*.cc, or nullptr when the
//         op is not differentiable. cli.grad_torch compares every rule with PyTorch and fails
//         for a rule with no case: add cases to tests/grad/cases_<family>.py (torch_grads.py).
//  3. The cpu kernel (replay/backends/cpu): an elementwise op (OpInfo::elementwise()) must have a case
//     in cpu_fused.cc op_fn (fused chains have no fallback); any other op runs its reference
//     kernel unless it gets a fast one in cpu_kernels.cc run_op, cpu_nn_layers.cc or
//     cpu_nn_ops.cc. `static_assert(kOpCount == N)` beside op_fn makes you decide. The sim
//     backend runs the cpu kernels and costs them with the row's cost: nothing to add there.
//  4. Tests: cases in tests/capture/reference_kernels_test.cc (EveryOpButParameterHasAKernel) and in
//     cpu_kernels_test.cc cases_for() (EveryOpButParameterIsTested pins kOpCount: update it),
//     or nn_layers_test.cc / nn_ops_test.cc for kNn ops; the Tensor method or nn function that
//     records it (capture/trace/tensor.h, nn.h).
//  5. docs/ops.md: a section with its inputs, attributes, dtype and shape rules and errors.
//  6. Hash and IR format: the op's *name* and its normalized attributes, in declaration order,
//     enter the canonical encoding (capture/ir/hash.cc) and the stored graph (store/codec):
//     a new op changes no existing key. Renaming an op, or adding, removing, reordering or
//     re-normalizing an existing op's attributes, changes keys and stored graphs: bump
//     kIrFormatVersion (capture/ir/hash.h) and update the golden keys in
//     tests/capture/golden_hash_test.cc and tests/capture/canonical_test.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "capture/core/buffer.h"
#include "capture/core/dtype.h"
#include "capture/core/shape.h"
#include "capture/core/status.h"
#include "capture/ops/attrs.h"
#include "capture/ops/grad.h"

namespace tracecache {

// The order here is the order of the registry table. Op names, not these numbers, enter the
// graph hash, so the enum may be reordered freely.
enum class OpKind : uint16_t {
  kParameter,  // a graph input; attribute `index` is its position in the parameter list
  // elementwise unary
  kNeg, kAbs, kExp, kLog, kSqrt, kRsqrt, kTanh, kSigmoid, kRelu,
  // elementwise binary (NumPy broadcasting, dtype promotion)
  kAdd, kSub, kMul, kDiv, kPow, kMaximum, kMinimum,
  // comparisons (broadcasting; result bool)
  kEq, kLt, kGt,
  kWhere,  // where(cond, a, b)
  kCast,
  kMatmul,
  // reductions
  kSum, kMean, kMax, kArgmax,
  // layout
  kReshape, kPermute, kTranspose, kBroadcastTo, kConcat, kSlice,
  // nn layers (capture/trace/nn.h)
  kConv2d, kMaxPool2d, kAvgPool2d, kAdaptiveAvgPool2d, kLinear, kFlatten, kPad, kDropout,
  kEmbedding, kGather, kIndexSelect,
  // sources (no tensor inputs)
  kFull, kArange, kUniform, kNormal,
  // nn activations, normalization, attention (capture/trace/nn.h)
  kGelu, kSilu, kHardswish, kHardsigmoid, kErf, kClamp,
  kBatchNorm, kLayerNorm, kSoftmax, kLogSoftmax, kScaledDotProductAttention,
  // gradients of the lookups
  kScatterAdd,  // scatter_add(x, index, src; axis): embedding, gather and index_select backward
  // training
  kDropoutMask,  // the seeded per-step dropout mask (capture/trace/train_layers.h)
  // gradients of the nn layers (capture/ops/grad_nn_layers.h)
  kConv2dInputGrad, kConv2dWeightGrad, kMaxPool2dGrad, kAvgPool2dGrad, kAdaptiveAvgPool2dGrad,
  // the ops ONNX models need (issue 16): elementwise unary and binary, then reductions
  kFloor, kCeil, kRound, kSin, kCos,
  kRemainder, kFmod, kTruncDiv,
  kMin, kArgmin,
  kConvTranspose2d, kResizeNearest2d, kResizeLinear2d,
  kTopk, kTopkIndices, kScatterElements, kGatherNd,
  kResizeNearest2dGrad, kResizeLinear2dGrad,
  // random numbers from a seed tensor, a graph input (Philox4x32-10: capture/ops/random.h)
  kRandUniform, kRandNormal,
  // quantization (issue 37): zero point and scale broadcast against x (ONNX's per-tensor and,
  // with the scale shaped along the axis, per-channel forms)
  kQuantizeLinear, kDequantizeLinear,
  kCount
};
inline constexpr int kOpCount = static_cast<int>(OpKind::kCount);

struct TensorType {
  DType dtype = DType::kF32;
  Shape shape;
  friend bool operator==(const TensorType&, const TensorType&) = default;
};

// "f32[2, 3]".
std::string type_to_string(const TensorType& t);

// Inference rule. Checks `in` and `attrs` (already filled with defaults), rewrites `attrs` into
// normal form (negative axes made positive, axis lists sorted, -1 in reshape resolved...) and
// sets `*out` to the output type and returns nullopt, or returns a kInvalidArgument status whose
// message names the op and the offending shapes or attribute (`attrs` and `*out` may then be
// partly rewritten). Never throws. Not a Status: the record hot path runs one rule and several
// checks per op, and even an ok Status builds and frees a string.
using InferError = std::optional<Status>;
using InferFn = InferError (*)(std::span<const TensorType> in, std::span<AttrValue> attrs,
                               TensorType* out);

// Reference kernel. `out` is allocated with the inferred dtype and shape; `attrs` are normalized.
// REQUIRES: inputs match what the inference rule accepted.
using ReferenceKernel = void (*)(std::span<const HostBuffer* const> in,
                                 std::span<const AttrValue> attrs, HostBuffer& out);

// Flops of one transcendental (exp, log, sqrt, tanh, erf, pow, ...) per element: the ratio of
// FP32 FMA lanes to special-function lanes on NVIDIA SMs, 64 : 16.
inline constexpr int64_t kTranscendentalFlops = 4;

// Flops of one element's random bits in rand_uniform and rand_normal: a quarter of a
// Philox4x32-10 block, whose 10 rounds each do two 32x32-bit widening multiplies (counted 2
// each: high and low half), four xors and the two key additions: about 100 per four elements.
inline constexpr int64_t kPhiloxFlops = 25;

// The work of one op node, for cost models:
//   flops   arithmetic operations. Elementwise ops, comparisons, where, cast, and the sources
//           full/arange/uniform: 1 per output element; exp log sqrt rsqrt tanh sigmoid pow
//           gelu silu erf sin cos and normal: kTranscendentalFlops per output element. Layout ops
//           and parameters: 0 (memory only). matmul, linear: 2 * out * K (K = the left
//           operand's last dim). conv2d: 2 * out * (C/groups) * kh * kw. Attention:
//           2 * B*Lq*Lk * (E + Ev) + (kTranscendentalFlops + 3) * B*Lq*Lk. sum mean max min argmax
//           argmin adaptive_avg_pool2d: 1 per input element. max/avg_pool2d: out * kh * kw.
//           batch_norm: 2 per output element; layer_norm: 8 per input element; softmax and
//           log_softmax: kTranscendentalFlops + 3 per input element. The nn layers not named
//           (flatten, pad, dropout, embedding, gather, index_select) and hardswish,
//           hardsigmoid, clamp, and dropout_mask (one counter-based draw): 1 per output element.
//           scatter_add: 1 per src element. The gradients: conv2d_input_grad and
//           conv2d_weight_grad as conv2d, 2 * grad_out * (C/groups) * kh * kw;
//           max/avg_pool2d_grad: grad_out * kh * kw; adaptive_avg_pool2d_grad: 1 per output
//           element. conv_transpose2d: as conv2d_input_grad, 2 * input * (O/groups) * kh * kw.
//           resize_nearest2d: 1 per output element; resize_linear2d: 6 per output element.
//           topk, topk_indices: 1 per input element. scatter_elements: 1 per output and
//           update element; gather_nd: 1 per output element. resize_nearest2d_grad: 1 per
//           grad_out element; resize_linear2d_grad: 8 per grad_out element.
//           rand_uniform: kPhiloxFlops per output element; rand_normal: kPhiloxFlops +
//           2 * kTranscendentalFlops (half of a log and of a sqrt, and a cos or a sin).
//           quantize_linear: 4 per output element (divide, round, add, clamp);
//           dequantize_linear: 2 per output element (subtract, multiply).
//   matrix  the work is a contraction a matrix unit can run (matmul, linear, conv2d and its
//           two gradients, conv_transpose2d, attention). Whether it does (e.g. only for f32) is the device's business.
// Memory traffic is not an op fact: it depends on which nodes a kernel fuses and which inputs
// are the same node, so cost models compute it from the graph.
struct OpCost {
  int64_t flops = 0;
  bool matrix = false;
  friend bool operator==(const OpCost&, const OpCost&) = default;
};

// Cost of a node with input types `in`, output type `out` and normalized `attrs`.
// REQUIRES: the inference rule accepted `in` and `attrs` and computed `out`.
using CostFn = OpCost (*)(std::span<const TensorType> in, const TensorType& out,
                          std::span<const AttrValue> attrs);

inline constexpr int kVariadic = -1;
// No op declares more attributes than this (checked by a test over the table).
inline constexpr size_t kMaxOpAttrs = 5;

enum class OpClass : uint8_t {
  kParameter, kUnary, kBinary, kCompare, kWhere, kCast, kMatmul, kReduce, kLayout, kSource,
  // Non-elementwise neural-network ops with their own kernels, never fused: the layers of
  // capture/trace/nn.h (conv2d, pools, linear, lookups...) and normalization, softmax, attention.
  // The nn activations (gelu, clamp, ...) are kUnary.
  kNn,
};

struct OpInfo {
  OpKind kind;
  std::string_view name;
  OpClass op_class;
  int min_inputs;
  int max_inputs;  // kVariadic: no upper bound
  std::span<const AttrSpec> attrs;
  InferFn infer;
  ReferenceKernel reference;
  CostFn cost;
  // Gradient rule (grad.h), or nullptr: the op is not differentiable (its result is integer or
  // bool, or it has no floating inputs), and asking for a gradient through it is an error.
  GradFn grad;

  bool elementwise() const {
    return op_class == OpClass::kUnary || op_class == OpClass::kBinary ||
           op_class == OpClass::kCompare || op_class == OpClass::kWhere ||
           op_class == OpClass::kCast;
  }
  // Index of the attribute called `attr`, or -1.
  int attr_index(std::string_view attr) const;
};

const OpInfo& op_info(OpKind kind);
// nullptr if no op has that name.
const OpInfo* find_op(std::string_view name);
std::span<const OpInfo> all_ops();

// Runs `kind`'s inference rule on `in` and `attrs` (which must hold one value per declared
// attribute), normalizing `attrs` in place, sets `*out` to the output type and returns nullopt.
// Also checks the input count, the attribute count and kinds, and the output's element count
// (kMaxElements). Every mismatch is returned as a kInvalidArgument status whose message starts
// "op 'NAME': " (`*out` is then unspecified). Never throws: the Tensor API turns the status into
// an Error; decoders of untrusted bytes return it. This is the record hot path's form (no Result
// or ok Status to build).
InferError infer_op(OpKind kind, std::span<const TensorType> in, std::span<AttrValue> attrs,
                    TensorType* out);
// The same, returning the output type as a value.
Result<TensorType> infer_op(OpKind kind, std::span<const TensorType> in, std::span<AttrValue> attrs);

}  // namespace tracecache
