// The cpu backend's kernels for the nn layers' gradients. See cpu_grad_nn_layers.h for the
// numerics table.
//
// The conv2d gradients reuse conv2d's GEMM lowering (cpu_nn_layers.h): with col the im2col
// matrix [K, OH*OW] of one image and group (K = channels per group x kh x kw) and W_g, G_g the
// group's weight [og, K] and output gradient [og, OH*OW], the forward pass is G = W_g col, so
//   d col = W_g^T G_g   (col2im scatters it back onto the input: conv2d_input_grad)
//   d W_g += G_g col^T  (summed over images: conv2d_weight_grad).
#include "backends/cpu/cpu_grad_nn_layers.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "capture/ops/attr_views.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_nn_layers.h"

namespace tracecache::cpu {

namespace {

// The conv2d geometry from the input plane (n, c, h, w), the weight (o, cg, kh, kw), the output
// plane (oh, ow) and the attributes (Conv2dInputGradAttrs or Conv2dWeightGradAttrs).
template <typename View>
ConvShape grad_conv_shape(const Shape& x, const Shape& w, const Shape& g, const View& a) {
  return {x[0],           x[1],           x[2],           x[3],           w[0],           w[1],
          w[2],           w[3],           g[2],           g[3],           a.stride()[0],  a.stride()[1],
          a.padding()[0], a.padding()[1], a.dilation()[0], a.dilation()[1], a.groups()};
}

bool is_direct(const ConvShape& s) {
  return s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.ph == 0 && s.pw == 0;
}

// Adds rows (c, i, j) of col (output positions [q0, q1)) onto the input planes of one image and
// group starting at `xg`: the transpose of im2col. Channels are split over threads (each adds
// into its own plane, taps in (i, j) order, positions in increasing order).
void col2im_add(const float* col, const ConvShape& s, int64_t q0, int64_t q1, float* xg) {
  const int64_t cols = q1 - q0;
  parallel_for(s.cg, s.cg * s.kh * s.kw * cols, [&](int64_t c_begin, int64_t c_end) {
    for (int64_t c = c_begin; c < c_end; ++c) {
      float* plane = xg + c * s.h * s.w;
      for (int64_t i = 0; i < s.kh; ++i) {
        const int64_t offset_y = i * s.dh - s.ph;
        for (int64_t j = 0; j < s.kw; ++j) {
          const int64_t offset_x = j * s.dw - s.pw;
          const float* row = col + ((c * s.kh + i) * s.kw + j) * cols;
          for (int64_t q = q0; q < q1;) {
            const int64_t oy = q / s.ow, ox0 = q % s.ow;
            const int64_t ox1 = std::min(s.ow, ox0 + (q1 - q));
            const int64_t iy = oy * s.sh + offset_y;
            if (iy >= 0 && iy < s.h) {
              float* dst = plane + iy * s.w;
              const float* src = row + (q - q0) - ox0;  // src[ox] is output position (oy, ox)
              for (int64_t ox = ox0; ox < ox1; ++ox) {
                const int64_t ix = ox * s.sw + offset_x;
                if (ix >= 0 && ix < s.w) dst[ix] += src[ox];
              }
            }
            q += ox1 - ox0;
          }
        }
      }
    }
  });
}

bool conv2d_input_grad(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  const HostBuffer& g = *in[0];
  const HostBuffer& w = *in[1];
  const ConvShape s = grad_conv_shape(out.shape(), w.shape(), g.shape(), Conv2dInputGradAttrs(attrs));
  const int64_t per_group = s.o / s.groups;
  const int64_t k = s.cg * s.kh * s.kw;
  const int64_t plane_out = s.oh * s.ow;
  const bool direct = is_direct(s);
  const int64_t block = direct || k == 0 ? plane_out : std::min(plane_out, std::max(kMinBlockColumns, kColBudget / k));
  if (!fits_blas({per_group, k, plane_out, block})) return false;
  float* dx = out.data<float>();
  std::fill_n(dx, out.numel(), 0.0f);
  if (out.numel() == 0 || plane_out == 0 || per_group == 0) return true;
  const std::unique_ptr<float[]> col =
      direct ? nullptr : std::make_unique_for_overwrite<float[]>(static_cast<size_t>(k * block));
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t grp = 0; grp < s.groups; ++grp) {
      const float* wg = w.data<float>() + grp * per_group * k;
      const float* gg = g.data<float>() + (n * s.o + grp * per_group) * plane_out;
      float* xg = dx + (n * s.c + grp * s.cg) * s.h * s.w;
      if (direct) {  // the input plane is col: [cg, H*W] = W_g^T G_g
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blas_int(k), blas_int(plane_out),
                    blas_int(per_group), 1.0f, wg, blas_int(k), gg, blas_int(plane_out), 0.0f, xg,
                    blas_int(plane_out));
        continue;
      }
      for (int64_t q0 = 0; q0 < plane_out; q0 += block) {
        const int64_t q1 = std::min(plane_out, q0 + block);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blas_int(k), blas_int(q1 - q0),
                    blas_int(per_group), 1.0f, wg, blas_int(k), gg + q0, blas_int(plane_out), 0.0f, col.get(),
                    blas_int(q1 - q0));
        col2im_add(col.get(), s, q0, q1, xg);
      }
    }
  }
  return true;
}

bool conv2d_weight_grad(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  const HostBuffer& g = *in[0];
  const HostBuffer& x = *in[1];
  const ConvShape s = grad_conv_shape(x.shape(), out.shape(), g.shape(), Conv2dWeightGradAttrs(attrs));
  const int64_t per_group = s.o / s.groups;
  const int64_t k = s.cg * s.kh * s.kw;
  const int64_t plane_out = s.oh * s.ow;
  const bool direct = is_direct(s);
  const int64_t block = direct || k == 0 ? plane_out : std::min(plane_out, std::max(kMinBlockColumns, kColBudget / k));
  if (!fits_blas({per_group, k, plane_out, block})) return false;
  float* dw = out.data<float>();
  std::fill_n(dw, out.numel(), 0.0f);
  if (out.numel() == 0 || plane_out == 0) return true;
  const std::unique_ptr<float[]> col =
      direct ? nullptr : std::make_unique_for_overwrite<float[]>(static_cast<size_t>(k * block));
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t grp = 0; grp < s.groups; ++grp) {
      const float* xg = x.data<float>() + (n * s.c + grp * s.cg) * s.h * s.w;
      const float* gg = g.data<float>() + (n * s.o + grp * per_group) * plane_out;
      float* wg = dw + grp * per_group * k;
      if (direct) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas_int(per_group), blas_int(k),
                    blas_int(plane_out), 1.0f, gg, blas_int(plane_out), xg, blas_int(plane_out), 1.0f, wg,
                    blas_int(k));
        continue;
      }
      for (int64_t q0 = 0; q0 < plane_out; q0 += block) {
        const int64_t q1 = std::min(plane_out, q0 + block);
        im2col(xg, s, q0, q1, col.get());
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas_int(per_group), blas_int(k),
                    blas_int(q1 - q0), 1.0f, gg + q0, blas_int(plane_out), col.get(), blas_int(q1 - q0), 1.0f,
                    wg, blas_int(k));
      }
    }
  }
  return true;
}

// ---- pools: the reference's loops (reference_grad_nn_layers.cc), one plane per thread ----------

// Runs `scatter(plane_grad, plane, acc)` for every (image, channel) plane with a zeroed double
// plane of the input's size, then rounds it into `out`.
template <typename Scatter>
void per_plane(const HostBuffer& g, HostBuffer& out, int64_t work_per_plane, Scatter scatter) {
  const int64_t planes = out.shape()[0] * out.shape()[1];
  const int64_t in_plane = out.shape()[2] * out.shape()[3];
  const int64_t out_plane = g.shape()[2] * g.shape()[3];
  parallel_for(planes, planes * (work_per_plane + in_plane), [&](int64_t begin, int64_t end) {
    std::vector<double> acc(static_cast<size_t>(in_plane));
    for (int64_t p = begin; p < end; ++p) {
      std::fill(acc.begin(), acc.end(), 0.0);
      scatter(g.data<float>() + p * out_plane, p, acc.data());
      float* dst = out.data<float>() + p * in_plane;
      for (int64_t i = 0; i < in_plane; ++i) dst[i] = static_cast<float>(acc[static_cast<size_t>(i)]);
    }
  });
}

void max_pool2d_grad(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  const HostBuffer& x = *in[1];
  const MaxPool2dAttrs a(attrs);
  const IntList& kernel = a.kernel();
  const IntList& stride = a.stride();
  const IntList& padding = a.padding();
  const IntList& dilation = a.dilation();
  const int64_t h = x.shape()[2], w = x.shape()[3];
  const int64_t oh = in[0]->shape()[2], ow = in[0]->shape()[3];
  per_plane(*in[0], out, oh * ow * kernel[0] * kernel[1], [&](const float* gp, int64_t p, double* acc) {
    const float* plane = x.data<float>() + p * h * w;
    for (int64_t y = 0; y < oh; ++y) {
      const int64_t y_start = y * stride[0] - padding[0];
      for (int64_t z = 0; z < ow; ++z) {
        const int64_t z_start = z * stride[1] - padding[1];
        int64_t best_at = -1;
        float best = -std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < kernel[0]; ++i) {
          const int64_t iy = y_start + i * dilation[0];
          if (iy < 0 || iy >= h) continue;
          for (int64_t j = 0; j < kernel[1]; ++j) {
            const int64_t iz = z_start + j * dilation[1];
            if (iz < 0 || iz >= w) continue;
            const float v = plane[iy * w + iz];
            if (best_at < 0) best_at = iy * w + iz;
            if (v > best || v != v) {  // v != v: NaN wins, as in the reference
              best = v;
              best_at = iy * w + iz;
            }
          }
        }
        if (best_at >= 0) acc[best_at] += static_cast<double>(gp[y * ow + z]);
      }
    }
  });
}

void avg_pool2d_grad(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  const AvgPool2dGradAttrs a(attrs);
  const IntList& kernel = a.kernel();
  const IntList& stride = a.stride();
  const IntList& padding = a.padding();
  const bool count_include_pad = a.count_include_pad();
  const int64_t h = out.shape()[2], w = out.shape()[3];
  const int64_t oh = in[0]->shape()[2], ow = in[0]->shape()[3];
  per_plane(*in[0], out, oh * ow * kernel[0] * kernel[1], [&](const float* gp, int64_t, double* acc) {
    for (int64_t y = 0; y < oh; ++y) {
      const int64_t y0 = y * stride[0] - padding[0];
      const int64_t y1 = std::min(y0 + kernel[0], h + padding[0]);
      const int64_t ylo = std::max<int64_t>(y0, 0), yhi = std::min(y1, h);
      for (int64_t z = 0; z < ow; ++z) {
        const int64_t z0 = z * stride[1] - padding[1];
        const int64_t z1 = std::min(z0 + kernel[1], w + padding[1]);
        const int64_t zlo = std::max<int64_t>(z0, 0), zhi = std::min(z1, w);
        if (ylo >= yhi || zlo >= zhi) continue;
        const int64_t count = count_include_pad ? (y1 - y0) * (z1 - z0) : (yhi - ylo) * (zhi - zlo);
        const double share = static_cast<double>(gp[y * ow + z]) / static_cast<double>(count);
        for (int64_t iy = ylo; iy < yhi; ++iy) {
          for (int64_t iz = zlo; iz < zhi; ++iz) acc[iy * w + iz] += share;
        }
      }
    }
  });
}

void adaptive_avg_pool2d_grad(const HostBuffer& g, HostBuffer& out) {
  const int64_t h = out.shape()[2], w = out.shape()[3];
  const int64_t oh = g.shape()[2], ow = g.shape()[3];
  per_plane(g, out, (h + oh) * (w + ow), [&](const float* gp, int64_t, double* acc) {
    for (int64_t y = 0; y < oh; ++y) {
      const int64_t y0 = y * h / oh, y1 = ((y + 1) * h + oh - 1) / oh;
      for (int64_t z = 0; z < ow; ++z) {
        const int64_t z0 = z * w / ow, z1 = ((z + 1) * w + ow - 1) / ow;
        const double share = static_cast<double>(gp[y * ow + z]) / static_cast<double>((y1 - y0) * (z1 - z0));
        for (int64_t iy = y0; iy < y1; ++iy) {
          for (int64_t iz = z0; iz < z1; ++iz) acc[iy * w + iz] += share;
        }
      }
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
      max_pool2d_grad(in, attrs, out);
      return true;
    case OpKind::kAvgPool2dGrad:
      avg_pool2d_grad(in, attrs, out);
      return true;
    case OpKind::kAdaptiveAvgPool2dGrad:
      adaptive_avg_pool2d_grad(*in[0], out);
      return true;
    default:
      return false;
  }
}

}  // namespace tracecache::cpu
