// Gradient rules: the `grad` column of the op registry (ops.h, OpInfo::grad).
//
// Reverse-mode autodiff (capture/trace/autograd.h) walks a recorded computation backwards from
// a scalar loss. For each op on the way it calls the op's rule with the gradient of the loss
// with respect to the op's result, and the rule records the ops that compute the gradients
// with respect to the op's inputs. The rule records these ops through a GradBuilder, so they
// are ordinary ops in the same trace as the forward pass: one barrier gives one graph for the
// forward pass, the backward pass and the update (lazy and once mode), and in eager mode they
// run at once like any op.
//
// A rule sees values only as GradValue handles. It reads their types from the builder and
// records ops on them with normalized attributes. It never reads data: a rule's ops depend
// only on types and attributes, so the backward graph is as cacheable as the forward one.
//
// Contract of a rule (GradFn):
//  - `a.inputs[i]`, `a.output`, `a.grad` are the op's inputs, its result, and d loss / d result
//    (the result's type). `a.attrs` are the node's normalized attributes.
//  - For every i with a.wanted[i], set grads[i] to d loss / d input i, with input i's exact
//    type (dtype and shape: broadcasting is summed back, see sum_to), or leave kNoGrad when the
//    gradient is identically zero (e.g. through a comparison). Inputs not wanted are left alone;
//    a rule should not record work for them.
//  - Only floating inputs are ever wanted (integer and bool values are not differentiable).
//  - A rule throws Error (capture/core/status.h) only for an op or attribute combination whose
//    gradient it does not define, with a message naming the op.
// Ties (maximum, minimum, max, clamp, relu, abs at 0, ...) follow PyTorch 1.13's rules; each
// rule's comment says which, and docs/ops.md lists them.
//
// Thread-safety: rules are pure functions; a builder belongs to one thread.
// Ownership: the builder owns every value; handles stay valid for the builder's life.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>

#include "capture/core/dtype.h"
#include "capture/core/shape.h"
#include "capture/ops/attrs.h"

namespace tracecache {

enum class OpKind : uint16_t;
struct TensorType;

// A value in a gradient computation: an index into the builder's table.
using GradValue = int32_t;
inline constexpr GradValue kNoGrad = -1;

class GradBuilder {
 public:
  virtual ~GradBuilder() = default;
  // Records `op` on `inputs` with `attrs` given positionally, one per declared attribute (they
  // are normalized as by record()). Throws Error if the op rejects them (a bug in the rule).
  virtual GradValue op(OpKind op, std::span<const GradValue> inputs, std::span<const AttrValue> attrs) = 0;
  // The type of `v`.
  virtual const TensorType& type(GradValue v) const = 0;

  GradValue op(OpKind kind, std::initializer_list<GradValue> inputs,
               std::initializer_list<AttrValue> attrs = {}) {
    return op(kind, std::span<const GradValue>(inputs.begin(), inputs.size()),
              std::span<const AttrValue>(attrs.begin(), attrs.size()));
  }

  // ---- shorthands every family uses (grad.cc) ----
  // A rank-0 constant of `dtype`.
  GradValue scalar(double value, DType dtype = DType::kF32);
  // A constant of `shape` filled with `value`.
  GradValue full(const Shape& shape, double value, DType dtype = DType::kF32);
  GradValue add(GradValue a, GradValue b);
  GradValue sub(GradValue a, GradValue b);
  GradValue mul(GradValue a, GradValue b);
  GradValue div(GradValue a, GradValue b);
  GradValue neg(GradValue a);
  // `v` multiplied by the constant `c`.
  GradValue scale(GradValue v, double c);
  GradValue reshape(GradValue v, const Shape& shape);
  GradValue broadcast_to(GradValue v, const Shape& shape);
  // Sums `v` (of a shape `shape` broadcasts to) back down to `shape`: over the leading dims
  // broadcasting added and over the dims where `shape` has 1. The gradient of broadcasting.
  GradValue sum_to(GradValue v, const Shape& shape);
  // `cond` (bool) ? a : b, broadcasting.
  GradValue where(GradValue cond, GradValue a, GradValue b);
  // 1 where `mask` (bool) holds, else 0, as f32.
  GradValue mask_to_float(GradValue mask);
};

struct GradArgs {
  std::span<const GradValue> inputs;
  GradValue output = kNoGrad;
  GradValue grad = kNoGrad;
  std::span<const AttrValue> attrs;
  std::span<const bool> wanted;
};

using GradFn = void (*)(GradBuilder& b, const GradArgs& a, std::span<GradValue> grads);

}  // namespace tracecache
