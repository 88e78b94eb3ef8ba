// The cpu backend's kernels for the nn layers' gradients. See cpu_grad_nn_layers.h for the
// numerics table.
//
// The conv2d gradients reuse conv2d's GEMM lowering (cpu_nn_layers.h: conv_gemm,
// for_each_conv_block, im2col and its transpose col2im_add): with col the im2col matrix
// [K, OH*OW] of one image and group (K = channels per group x kh x kw) and W_g, G_g the group's
// weight [og, K] and output gradient [og, OH*OW], the forward pass is G = W_g col, so
//   d col = W_g^T G_g   (col2im scatters it back onto the input: conv2d_input_grad)
//   d W_g += G_g col^T  (summed over images: conv2d_weight_grad).
#include "replay/backends/cpu/cpu_grad_nn_layers.h"

#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "capture/ops/attr_views.h"
#include "capture/ops/nn_windows.h"
#include "replay/backends/cpu/cpu_kernels.h"
#include "replay/backends/cpu/cpu_nn_layers.h"

namespace tracecache::cpu {

namespace {

bool conv2d_input_grad(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs,
                       HostBuffer& out) {
  const HostBuffer& g = *in[0];
  const HostBuffer& w = *in[1];
  const nn::ConvShape s = nn::conv_shape(out.shape(), w.shape(), g.shape(), Conv2dInputGradAttrs(attrs));
  const ConvGemm p = conv_gemm(s);
  if (!fits_blas(p)) return false;
  float* dx = out.data<float>();
  std::fill_n(dx, out.numel(), 0.0f);
  if (out.numel() == 0 || p.plane_out == 0 || p.per_group == 0) return true;
  const std::unique_ptr<float[]> col = col_scratch(p);
  for_each_conv_block(s, p, [&](int64_t n, int64_t grp, int64_t q0, int64_t q1) {
    float* xg = dx + (n * s.c + grp * s.cg) * s.h * s.w;
    float* c = p.direct ? xg : col.get();  // direct: the input plane is col, [cg, H*W]
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blas_int(p.k), blas_int(q1 - q0),
                blas_int(p.per_group), 1.0f, w.data<float>() + grp * p.per_group * p.k, blas_int(p.k),
                g.data<float>() + (n * s.o + grp * p.per_group) * p.plane_out + q0, blas_int(p.plane_out),
                0.0f, c, blas_int(q1 - q0));
    if (!p.direct) col2im_add(c, s, q0, q1, xg);
  });
  return true;
}

bool conv2d_weight_grad(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs,
                        HostBuffer& out) {
  const HostBuffer& g = *in[0];
  const HostBuffer& x = *in[1];
  const nn::ConvShape s = nn::conv_shape(x.shape(), out.shape(), g.shape(), Conv2dWeightGradAttrs(attrs));
  const ConvGemm p = conv_gemm(s);
  if (!fits_blas(p)) return false;
  float* dw = out.data<float>();
  std::fill_n(dw, out.numel(), 0.0f);
  if (out.numel() == 0 || p.plane_out == 0) return true;
  const std::unique_ptr<float[]> col = col_scratch(p);
  for_each_conv_block(s, p, [&](int64_t n, int64_t grp, int64_t q0, int64_t q1) {
    const float* xg = x.data<float>() + (n * s.c + grp * s.cg) * s.h * s.w;
    const float* c = xg;  // direct: the input plane is col
    if (!p.direct) {
      im2col(xg, s, q0, q1, col.get());
      c = col.get();
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas_int(p.per_group), blas_int(p.k),
                blas_int(q1 - q0), 1.0f, g.data<float>() + (n * s.o + grp * p.per_group) * p.plane_out + q0,
                blas_int(p.plane_out), c, blas_int(q1 - q0), 1.0f, dw + grp * p.per_group * p.k,
                blas_int(p.k));
  });
  return true;
}

// ---- pools: the reference's plane loops (nn_windows.h), planes split over threads -----------------

// Runs planes(begin, end) over ranges of the planes of `out`, split over threads;
// `work_per_plane` is the scatter's share of one plane's work (rounding the plane is added).
template <typename Planes>
void split_planes(const HostBuffer& out, int64_t work_per_plane, Planes planes) {
  const int64_t count = out.shape()[0] * out.shape()[1];
  const int64_t in_plane = out.shape()[2] * out.shape()[3];
  parallel_for(count, count * (work_per_plane + in_plane),
               [&](int64_t begin, int64_t end) { planes(begin, end); });
}

// Each output visits its kernel_h x kernel_w window.
template <typename View>
int64_t window_work(const View& a, const HostBuffer& out, const HostBuffer& g) {
  const nn::Window2d win = nn::pool_window(a, out.shape(), g.shape());
  return win.out_plane() * win.rows.kernel * win.cols.kernel;
}

// max_pool2d_grad as the forward max_pool2d kernel scans (cpu_nn_layers.cc): per output row, taps
// outermost, each output column keeping its best value and the cell it came from (a select per
// tap, which vectorizes), so every output meets its window's cells in the reference's row-major
// order and picks the same cell (nn::window_max: the first cell inside the input, replaced by
// each later one that is greater or NaN). Then the row's gradients are added to their cells in a
// double plane in row-major output order, and the plane is rounded once: the reference's sums
// (nn::max_pool2d_grad_planes), bitwise.
void max_pool2d_grad(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  const HostBuffer& g = *in[0];
  const HostBuffer& x = *in[1];
  const MaxPool2dAttrs a(attrs);
  const nn::Window2d win = nn::pool_window(a, x.shape(), g.shape());
  const int64_t w = win.cols.size, oh = win.rows.out, ow = win.cols.out;
  const int64_t kw = win.cols.kernel, sw = win.cols.stride;
  std::vector<nn::Interval> tap_cols(static_cast<size_t>(kw));
  for (int64_t j = 0; j < kw; ++j) tap_cols[static_cast<size_t>(j)] = win.cols.outputs_reaching(j);
  split_planes(out, win.out_plane() * win.rows.kernel * kw, [&](int64_t begin, int64_t end) {
    std::vector<double> acc(static_cast<size_t>(win.in_plane()));
    std::vector<float> best_row(static_cast<size_t>(ow));
    std::vector<int32_t> at_row(static_cast<size_t>(ow));
    float* __restrict best = best_row.data();
    int32_t* __restrict at = at_row.data();
    for (int64_t p = begin; p < end; ++p) {
      std::fill(acc.begin(), acc.end(), 0.0);
      const float* __restrict plane = x.data<float>() + p * win.in_plane();
      const float* gp = g.data<float>() + p * win.out_plane();
      for (int64_t y = 0; y < oh; ++y) {
        std::fill_n(best, ow, -std::numeric_limits<float>::infinity());
        std::fill_n(at, ow, -1);
        const int64_t y_start = win.rows.start(y);
        const nn::Interval rows = win.rows.taps_inside(y);
        for (int64_t i = rows.lo; i < rows.hi; ++i) {
          const int64_t row = (y_start + i * win.rows.dilation) * w;
          for (int64_t j = 0; j < kw; ++j) {
            const nn::Interval cols = tap_cols[static_cast<size_t>(j)];
            const int32_t offset = static_cast<int32_t>(row + j * win.cols.dilation - win.cols.padding);
            const int32_t step = static_cast<int32_t>(sw);
            for (int32_t z = static_cast<int32_t>(cols.lo); z < static_cast<int32_t>(cols.hi); ++z) {
              // The first cell inside the input is taken whatever it holds (at < 0); a later one
              // when greater or NaN. Taking a first -inf leaves best as it was, so one mask serves.
              const int32_t cell = z * step + offset;
              const float v = plane[cell];
              const bool take = (v > best[z]) | (v != v) | (at[z] < 0);
              at[z] = take ? cell : at[z];
              best[z] = take ? v : best[z];
            }
          }
        }
        for (int64_t z = 0; z < ow; ++z) {
          if (at[z] >= 0) acc[static_cast<size_t>(at[z])] += static_cast<double>(gp[y * ow + z]);
        }
      }
      float* dst = out.data<float>() + p * win.in_plane();
      for (int64_t c = 0; c < win.in_plane(); ++c) dst[c] = static_cast<float>(acc[static_cast<size_t>(c)]);
    }
  });
}

}  // namespace

bool run_grad_nn_layer(OpKind op, std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs,
                       HostBuffer& out) {
  switch (op) {
    case OpKind::kConv2dInputGrad:
      return conv2d_input_grad(in, attrs, out);
    case OpKind::kConv2dWeightGrad:
      return conv2d_weight_grad(in, attrs, out);
    case OpKind::kMaxPool2dGrad:
      // Cells and every tap's offset (z * stride + tap - padding) in int32 (in double: the
      // padding comes from the program and is bounded only by the kernel).
      if (static_cast<double>(out.shape()[2]) *
              (static_cast<double>(out.shape()[3]) + 2.0 * static_cast<double>(MaxPool2dAttrs(attrs).padding()[1])) *
              2.0 <=
          static_cast<double>(std::numeric_limits<int32_t>::max())) {
        max_pool2d_grad(in, attrs, out);
      } else {  // cells past int32: the reference's plane loops
        split_planes(out, window_work(MaxPool2dAttrs(attrs), out, *in[0]), [&](int64_t begin, int64_t end) {
          nn::max_pool2d_grad_planes(in, attrs, out, begin, end);
        });
      }
      return true;
    case OpKind::kAvgPool2dGrad:
      split_planes(out, window_work(AvgPool2dGradAttrs(attrs), out, *in[0]), [&](int64_t begin, int64_t end) {
        nn::avg_pool2d_grad_planes(in, attrs, out, begin, end);
      });
      return true;
    case OpKind::kAdaptiveAvgPool2dGrad: {
      // Each output spreads over about (h / oh + 1) x (w / ow + 1) cells.
      const Shape& g = in[0]->shape();
      split_planes(out, (out.shape()[2] + g[2]) * (out.shape()[3] + g[3]), [&](int64_t begin, int64_t end) {
        nn::adaptive_avg_pool2d_grad_planes(in, out, begin, end);
      });
      return true;
    }
    default:
      return false;
  }
}

}  // namespace tracecache::cpu
