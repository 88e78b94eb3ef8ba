// The cpu backend's kernels for the nn layers' gradients. See cpu_grad_nn_layers.h for the
// numerics table.
//
// The conv2d gradients reuse conv2d's GEMM lowering (cpu_nn_layers.h: conv_gemm,
// for_each_conv_block, im2col and its transpose col2im_add): with col the im2col matrix
// [K, OH*OW] of one image and group (K = channels per group x kh x kw) and W_g, G_g the group's
// weight [og, K] and output gradient [og, OH*OW], the forward pass is G = W_g col, so
//   d col = W_g^T G_g   (col2im scatters it back onto the input: conv2d_input_grad)
//   d W_g += G_g col^T  (summed over images: conv2d_weight_grad).
#include "backends/cpu/cpu_grad_nn_layers.h"

#include <cblas.h>

#include <algorithm>
#include <memory>

#include "capture/ops/attr_views.h"
#include "capture/ops/nn_windows.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_nn_layers.h"

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

}  // namespace

bool run_grad_nn_layer(OpKind op, std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs,
                       HostBuffer& out) {
  switch (op) {
    case OpKind::kConv2dInputGrad:
      return conv2d_input_grad(in, attrs, out);
    case OpKind::kConv2dWeightGrad:
      return conv2d_weight_grad(in, attrs, out);
    case OpKind::kMaxPool2dGrad:
      split_planes(out, window_work(MaxPool2dAttrs(attrs), out, *in[0]), [&](int64_t begin, int64_t end) {
        nn::max_pool2d_grad_planes(in, attrs, out, begin, end);
      });
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
