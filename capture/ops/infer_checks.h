// The shared checks of the inference rules (infer_*.cc): the error of a rule, the axis, shape,
// broadcast, dtype and window checks several rules make. Internal to capture/ops/.
//
// Each check returns nullopt if it passed, else the rule's error (kInvalidArgument naming the op);
// RETURN_IF_ERROR returns that error from the enclosing rule. The checks are inline (they were
// one translation unit with the rules; the record hot path runs the small ones on every op).
// Thread-safety: pure functions. Ownership: nothing is kept.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "capture/core/status.h"
#include "capture/ops/ops.h"

namespace tracecache::infer {


// The error of every inference rule: names the op, then what is wrong.
// Cold: error paths stay out of the checks the record hot path inlines.
[[gnu::cold]] inline Status fail(std::string_view op, const std::string& msg) {
  return invalid_argument(fmt::format("op '{}': {}", op, msg));
}

// The outcome of a shared check or an inference rule: nullopt if it passed, else its error.
using Check = InferError;

// Returns the error of a failed Check from the enclosing rule or check.
#define RETURN_IF_ERROR(expr)                             \
  do {                                                    \
    if (Check check_ = (expr)) return std::move(*check_); \
  } while (false)

inline std::string describe(const TensorType& t) { return type_to_string(t); }

// ---- shared checks ------------------------------------------------------------------------
// The small ones the record hot path runs on every op are forced inline (with `fail` cold, the
// passing path is a compare and a flag).

// Makes `axis` non-negative for a tensor of rank `rank`, in place; fails if out of range.
[[gnu::always_inline]] inline Check normalize_axis(std::string_view op, int64_t& axis, int rank) {
  if (axis < -rank || axis >= rank) {
    return fail(op, fmt::format("axis {} is out of range for a tensor of rank {}", axis, rank));
  }
  if (axis < 0) axis += rank;
  return std::nullopt;
}

// Sets `*product` to the product of `dims`, failing if it exceeds kMaxElements (so no later
// size arithmetic can overflow): the same check as every shape from outside (shape.h).
[[gnu::always_inline]] inline Check checked_product(std::string_view op, const IntList& dims,
                                                    int64_t* product = nullptr) {
  Result<int64_t> n = checked_numel(dims.span());
  if (!n.is_ok()) return fail(op, n.status().message());
  if (product) *product = *n;
  return std::nullopt;
}

inline Check check_shape_attr(std::string_view op, const IntList& shape) {
  for (int64_t d : shape) {
    if (d < 0) return fail(op, fmt::format("shape {} has a negative dim", shape.to_string()));
  }
  return checked_product(op, shape);
}

[[gnu::always_inline]] inline Check broadcast2(std::string_view op, const TensorType& a,
                                               const TensorType& b, Shape* out) {
  if (!broadcast_shapes(a.shape, b.shape, out)) {
    return fail(op, fmt::format("shapes {} and {} are not broadcastable", describe(a), describe(b)));
  }
  return std::nullopt;
}

[[gnu::always_inline]] inline Check reject_bool(std::string_view op, const TensorType& t) {
  if (t.dtype == DType::kBool) {
    return fail(op, fmt::format("operand {} is bool; cast it to a numeric dtype first", describe(t)));
  }
  return std::nullopt;
}

// Bound on window attributes (kernel, stride, padding, dilation, output size): far beyond any
// real layer, small enough that products of two of them with a dim (< 2^48) cannot overflow.
constexpr int64_t kMaxWindowAttr = int64_t{1} << 24;

// Normalizes the pair attribute `name` (one entry means both) to {height, width} and checks
// each entry is in [min_value, kMaxWindowAttr].
inline Check normalize_pair(std::string_view op, std::string_view name, IntList& v, int64_t min_value) {
  if (v.size() == 1) v.push_back(v[0]);
  if (v.size() != 2) {
    return fail(op, fmt::format("{} {} must have 2 entries (height, width)", name, v.to_string()));
  }
  for (int64_t e : v) {
    if (e < min_value || e > kMaxWindowAttr) {
      return fail(op, fmt::format("{} {} must have entries >= {} and <= 2^24", name, v.to_string(), min_value));
    }
  }
  return std::nullopt;
}

// An operand the op computes in f32: f32 itself, or bf16 and f16, which it widens (the nn ops'
// result then has their type: ops.cc, half_layer_type).
[[gnu::always_inline]] inline Check require_f32(std::string_view op, std::string_view what,
                                                const TensorType& t) {
  if (arithmetic_dtype(t.dtype) != DType::kF32) {
    return fail(op, fmt::format("{} {} must be f32, bf16 or f16; cast it first", what, describe(t)));
  }
  return std::nullopt;
}

inline Check require_nchw(std::string_view op, const TensorType& x) {
  RETURN_IF_ERROR(require_f32(op, "input", x));
  if (x.shape.rank() != 4) {
    return fail(op, fmt::format("input {} must have rank 4 (N, C, H, W)", describe(x)));
  }
  return std::nullopt;
}

inline Check require_index(std::string_view op, const TensorType& t) {
  if (t.dtype != DType::kI32 && t.dtype != DType::kI64) {
    return fail(op, fmt::format("index {} must be i32 or i64", describe(t)));
  }
  return std::nullopt;
}

// Rounds toward negative infinity (num may be negative). REQUIRES: den > 0.
inline int64_t floor_div(int64_t num, int64_t den) {
  return num >= 0 ? num / den : -((-num + den - 1) / den);
}

// The pools' shared checks and PyTorch's output size (pooling_output_shape): floor or ceil of
// (in + 2 pad - extent) / stride, plus one; with ceil_mode the last window must start inside
// the input or the left padding. Normalizes kernel/stride/padding(/dilation) in place and sets
// `*out` to the output shape.
inline Check pool_shape(std::string_view op, const TensorType& x, IntList& kernel, IntList& stride,
                  IntList& padding, IntList* dilation_attr, bool ceil_mode, Shape* out) {
  RETURN_IF_ERROR(require_nchw(op, x));
  RETURN_IF_ERROR(normalize_pair(op, "kernel", kernel, 1));
  if (stride.empty()) stride = kernel;
  RETURN_IF_ERROR(normalize_pair(op, "stride", stride, 1));
  RETURN_IF_ERROR(normalize_pair(op, "padding", padding, 0));
  IntList dilation{1, 1};
  if (dilation_attr) {
    RETURN_IF_ERROR(normalize_pair(op, "dilation", *dilation_attr, 1));
    dilation = *dilation_attr;
  }
  *out = x.shape;
  for (int d = 0; d < 2; ++d) {
    if (padding[d] > kernel[d] / 2) {
      return fail(op, fmt::format("padding {} must be at most half the kernel {}", padding.to_string(),
                                  kernel.to_string()));
    }
    const int64_t size = x.shape[2 + d];
    const int64_t extent = dilation[d] * (kernel[d] - 1) + 1;
    int64_t n = floor_div(size + 2 * padding[d] - extent + (ceil_mode ? stride[d] - 1 : 0), stride[d]) + 1;
    if (ceil_mode && (n - 1) * stride[d] >= size + padding[d]) --n;
    if (n < 1) {
      return fail(op, fmt::format("kernel {} (dilation {}) does not fit the input {} padded by {}",
                                  kernel.to_string(), dilation.to_string(), describe(x), padding.to_string()));
    }
    (*out)[2 + d] = n;
  }
  return std::nullopt;
}

// The checks scatter_add and scatter_elements share: `axis` normalized; `src` has the shape of
// `index`, which has the rank of `x` and no dim larger than x's outside `axis`.
inline Check check_scatter(std::string_view op, const TensorType& x, const TensorType& idx, const TensorType& src,
                    int64_t& axis) {
  const int rank = x.shape.rank();
  RETURN_IF_ERROR(normalize_axis(op, axis, rank));
  if (!(src.shape == idx.shape)) {
    return fail(op, fmt::format("src {} must have the shape of index {}", describe(src), describe(idx)));
  }
  bool fits = idx.shape.rank() == rank;
  for (int d = 0; fits && d < rank; ++d) fits = d == axis || idx.shape[d] <= x.shape[d];
  if (!fits) {
    return fail(op, fmt::format("index {} must have the rank of the input {} and no dim larger than "
                                "the input's outside axis {}", describe(idx), describe(x), axis));
  }
  if (x.shape[static_cast<int>(axis)] == 0 && idx.shape.numel() > 0) {
    return fail(op, fmt::format("input {} is empty along axis {}", describe(x), axis));
  }
  return std::nullopt;
}

// grad_out of a conv2d or pool: f32 [N, C, OH, OW].
inline Check require_grad_out(std::string_view op, const TensorType& g) {
  RETURN_IF_ERROR(require_f32(op, "grad_out", g));
  if (g.shape.rank() != 4) {
    return fail(op, fmt::format("grad_out {} must have rank 4 (N, C, OH, OW)", describe(g)));
  }
  return std::nullopt;
}

}  // namespace tracecache::infer
