// The op registry: every op tracecache knows is one row of one table.
//
// A row holds the op's name (its spelling in trace programs and in the graph hash), how many
// tensor inputs it takes, its attributes (positional, with defaults), its inference rule (checks
// inputs and attributes, normalizes the attributes, computes the output dtype and shape) and its
// reference kernel (the naive, obviously-correct implementation every backend is tested
// against). Adding an op = one OpKind, one row, one reference kernel, its tests, and a section
// in docs/ops.md; `static_assert`s keep the enum and the table in step.
//
// The table is immutable and built at compile time; everything here is thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "capture/ops/attrs.h"
#include "capture/core/buffer.h"
#include "capture/core/dtype.h"
#include "capture/core/shape.h"

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
// returns the output type. Throws Error(kInvalidArgument) whose message names the op and the
// offending shapes or attribute.
using InferFn = TensorType (*)(std::span<const TensorType> in, std::span<AttrValue> attrs);

// Reference kernel. `out` is allocated with the inferred dtype and shape; `attrs` are normalized.
// REQUIRES: inputs match what the inference rule accepted.
using ReferenceKernel = void (*)(std::span<const HostBuffer* const> in,
                                 std::span<const AttrValue> attrs, HostBuffer& out);

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
// attribute), normalizing `attrs` in place. Also checks the input count and attribute kinds.
// Throws Error naming the op on any mismatch.
TensorType infer_op(OpKind kind, std::span<const TensorType> in, std::span<AttrValue> attrs);

}  // namespace tracecache
