// Reference kernels of the ops ONNX models need (issue 16) that are not elementwise or
// reductions: conv_transpose2d, resize_nearest2d, resize_linear2d, topk, topk_indices,
// scatter_elements, gather_nd, resize_nearest2d_grad, resize_linear2d_grad. Semantics in
// docs/ops.md.
#include <array>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "capture/ops/attr_views.h"
#include "capture/ops/elementwise.h"
#include "capture/ops/reference_kernels.h"
#include "capture/ops/resize.h"
#include "capture/ops/topk.h"

namespace tracecache::ref {

std::array<AttrValue, 5> conv_transpose2d_input_grad_attrs(std::span<const AttrValue> attrs, const Shape& out) {
  const ConvTranspose2dAttrs a(attrs);
  return {AttrValue::of_ints(a.stride()), AttrValue::of_ints(a.padding()), AttrValue::of_ints(a.dilation()),
          AttrValue::of_int(a.groups()), AttrValue::of_ints({out[2], out[3]})};
}

// conv2d_input_grad of the conv2d from the output plane to x's plane (sums in double, rounded
// once), then the bias added in f32.
void conv_transpose2d(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  const Shape& s = out.shape();
  const std::array<AttrValue, 5> grad_attrs = conv_transpose2d_input_grad_attrs(attrs, s);
  const std::array<const HostBuffer*, 2> operands = {in[0], in[1]};
  conv2d_input_grad(operands, grad_attrs, out);
  if (in.size() < 3) return;
  const float* bias = in[2]->data<float>();
  float* o = out.data<float>();
  const int64_t plane = s[2] * s[3];
  for (int64_t n = 0; n < s[0]; ++n) {
    for (int64_t c = 0; c < s[1]; ++c) {
      float* p = o + (n * s[1] + c) * plane;
      for (int64_t i = 0; i < plane; ++i) p[i] += bias[c];
    }
  }
}

void resize_nearest2d(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  const ResizeNearest2dAttrs a(attrs);
  const Shape& x = in[0]->shape();
  const Shape& s = out.shape();
  const auto mode = static_cast<resize::CoordMode>(a.coordinate_transformation_mode());
  const auto nearest = static_cast<resize::NearestMode>(a.nearest_mode());
  const std::vector<int64_t> rows = resize::nearest_taps(mode, nearest, x[2], s[2], a.scale_h());
  const std::vector<int64_t> cols = resize::nearest_taps(mode, nearest, x[3], s[3], a.scale_w());
  const size_t elem = dtype_size(out.dtype());
  const size_t in_plane = static_cast<size_t>(x[2] * x[3]) * elem, out_plane = static_cast<size_t>(s[2] * s[3]) * elem;
  for (int64_t p = 0; p < s[0] * s[1]; ++p) {
    resize::nearest_plane(in[0]->bytes() + static_cast<size_t>(p) * in_plane, x[3],
                          out.bytes() + static_cast<size_t>(p) * out_plane, rows, cols, elem);
  }
}

void resize_linear2d(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  const ResizeLinear2dAttrs a(attrs);
  const Shape& x = in[0]->shape();
  const Shape& s = out.shape();
  const auto mode = static_cast<resize::CoordMode>(a.coordinate_transformation_mode());
  const std::vector<resize::LinearTap> rows = resize::linear_taps(mode, x[2], s[2], a.scale_h());
  const std::vector<resize::LinearTap> cols = resize::linear_taps(mode, x[3], s[3], a.scale_w());
  for (int64_t p = 0; p < s[0] * s[1]; ++p) {
    resize::linear_plane(in[0]->data<float>() + p * x[2] * x[3], x[3], out.data<float>() + p * s[2] * s[3], rows, cols);
  }
}

namespace {

// topk's values (kIndices false) or indices: every row along the axis in turn.
template <bool kIndices>
void topk_rows(const HostBuffer& x, std::span<const AttrValue> attrs, HostBuffer& out) {
  const TopkAttrs a(attrs);
  const AxisSplit split = split_at_axis(x.shape(), static_cast<int>(a.axis()));
  const int64_t k = a.k();
  std::vector<int64_t> order;
  dispatch_compute_dtype(x.dtype(), [&]<typename T>() {
    auto* dst = out.data<std::conditional_t<kIndices, int64_t, T>>();
    for (int64_t r = 0; r < split.outer * split.inner; ++r) {
      topk::write_row<kIndices>(x.data<T>(), split.len, split.inner, r, k, a.largest(), order, dst);
    }
  });
}

// Element i of an i32 or i64 index buffer into a dim of size `dim` (> 0): negative counts from
// the end (ONNX), then clamped into [0, dim).
int64_t wrapped_index(const HostBuffer& index, int64_t i, int64_t dim) {
  int64_t v = index.dtype() == DType::kI32 ? index.data<int32_t>()[i] : index.data<int64_t>()[i];
  if (v < 0) v += dim;
  return std::clamp<int64_t>(v, 0, dim - 1);
}

}  // namespace

void topk(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  topk_rows<false>(*in[0], attrs, out);
}

void topk_indices(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  topk_rows<true>(*in[0], attrs, out);
}

void scatter_elements(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  const HostBuffer& x = *in[0];
  const HostBuffer& index = *in[1];
  const HostBuffer& src = *in[2];
  const ScatterElementsAttrs a(attrs);
  const int axis = static_cast<int>(a.axis());
  const int64_t reduction = a.reduction();
  const Shape& xs = x.shape();
  const Shape& is = index.shape();
  std::memcpy(out.bytes(), x.bytes(), x.nbytes());
  const IntList strides = contiguous_strides(xs);
  dispatch_compute_dtype(x.dtype(), [&]<typename T>() {
    T* o = out.data<T>();
    const T* u = src.data<T>();
    for (int64_t i = 0; i < src.numel(); ++i) {
      // The row-major multi-index of i in index's shape, as an offset into x.
      int64_t rest = i, at = 0;
      for (int d = is.rank() - 1; d >= 0; --d) {
        int64_t coord = rest % is[d];
        rest /= is[d];
        if (d == axis) coord = wrapped_index(index, i, xs[d]);
        at += coord * strides[d];
      }
      if constexpr (std::is_same_v<T, bool>) {
        o[at] = u[i];  // the inference rule allows bool with reduction none only
      } else if (reduction == 1) {
        o[at] = ew::Add{}(o[at], u[i]);
      } else if (reduction == 2) {
        o[at] = ew::Mul{}(o[at], u[i]);
      } else {
        o[at] = u[i];
      }
    }
  });
}

void gather_nd(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  const HostBuffer& x = *in[0];
  const HostBuffer& index = *in[1];
  const Shape& xs = x.shape();
  const Shape& is = index.shape();
  const int b = static_cast<int>(GatherNdAttrs(attrs).batch_dims());
  const int q = is.rank();
  const int64_t k = is[q - 1];
  const IntList strides = contiguous_strides(xs);
  int64_t batches = 1, tuples = 1, slice = 1;
  for (int d = 0; d < b; ++d) batches *= xs[d];
  for (int d = b; d < q - 1; ++d) tuples *= is[d];
  for (int d = b + static_cast<int>(k); d < xs.rank(); ++d) slice *= xs[d];
  const int64_t batch_stride = b == 0 ? 0 : strides[b - 1];
  const size_t elem = dtype_size(x.dtype());
  for (int64_t bi = 0; bi < batches; ++bi) {
    for (int64_t t = 0; t < tuples; ++t) {
      const int64_t row = bi * tuples + t;
      int64_t at = bi * batch_stride;
      for (int64_t j = 0; j < k; ++j) {
        const int d = b + static_cast<int>(j);
        at += wrapped_index(index, row * k + j, xs[d]) * strides[d];
      }
      std::memcpy(out.bytes() + static_cast<size_t>(row * slice) * elem, x.bytes() + static_cast<size_t>(at) * elem,
                  static_cast<size_t>(slice) * elem);
    }
  }
}

void resize_nearest2d_grad(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  const ResizeNearest2dGradAttrs a(attrs);
  const Shape& gs = in[0]->shape();
  const Shape& s = out.shape();
  const auto mode = static_cast<resize::CoordMode>(a.coordinate_transformation_mode());
  const auto nearest = static_cast<resize::NearestMode>(a.nearest_mode());
  const std::vector<int64_t> rows = resize::nearest_taps(mode, nearest, s[2], gs[2], a.scale_h());
  const std::vector<int64_t> cols = resize::nearest_taps(mode, nearest, s[3], gs[3], a.scale_w());
  std::vector<double> acc(static_cast<size_t>(s[2] * s[3]));
  for (int64_t p = 0; p < s[0] * s[1]; ++p) {
    std::fill(acc.begin(), acc.end(), 0.0);
    const float* g = in[0]->data<float>() + p * gs[2] * gs[3];
    for (int64_t y = 0; y < gs[2]; ++y) {
      for (int64_t x = 0; x < gs[3]; ++x) {
        acc[static_cast<size_t>(rows[static_cast<size_t>(y)] * s[3] + cols[static_cast<size_t>(x)])] +=
            static_cast<double>(g[y * gs[3] + x]);
      }
    }
    float* o = out.data<float>() + p * s[2] * s[3];
    for (size_t i = 0; i < acc.size(); ++i) o[i] = static_cast<float>(acc[i]);
  }
}

void resize_linear2d_grad(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  const ResizeLinear2dGradAttrs a(attrs);
  const Shape& gs = in[0]->shape();
  const Shape& s = out.shape();
  const auto mode = static_cast<resize::CoordMode>(a.coordinate_transformation_mode());
  const std::vector<resize::LinearTap> rows = resize::linear_taps(mode, s[2], gs[2], a.scale_h());
  const std::vector<resize::LinearTap> cols = resize::linear_taps(mode, s[3], gs[3], a.scale_w());
  std::vector<double> acc(static_cast<size_t>(s[2] * s[3]));
  for (int64_t p = 0; p < s[0] * s[1]; ++p) {
    std::fill(acc.begin(), acc.end(), 0.0);
    const float* g = in[0]->data<float>() + p * gs[2] * gs[3];
    for (int64_t y = 0; y < gs[2]; ++y) {
      const resize::LinearTap& ry = rows[static_cast<size_t>(y)];
      for (int64_t x = 0; x < gs[3]; ++x) {
        const resize::LinearTap& cx = cols[static_cast<size_t>(x)];
        const double v = g[y * gs[3] + x];
        acc[static_cast<size_t>(ry.i0 * s[3] + cx.i0)] += v * ry.w0 * cx.w0;
        acc[static_cast<size_t>(ry.i0 * s[3] + cx.i1)] += v * ry.w0 * cx.w1;
        acc[static_cast<size_t>(ry.i1 * s[3] + cx.i0)] += v * ry.w1 * cx.w0;
        acc[static_cast<size_t>(ry.i1 * s[3] + cx.i1)] += v * ry.w1 * cx.w1;
      }
    }
    float* o = out.data<float>() + p * s[2] * s[3];
    for (size_t i = 0; i < acc.size(); ++i) o[i] = static_cast<float>(acc[i]);
  }
}

}  // namespace tracecache::ref
