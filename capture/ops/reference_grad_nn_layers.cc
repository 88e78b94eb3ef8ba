// Reference kernels of the nn layers' gradients (reference_kernels.h, docs/ops.md): plain loops
// from the definitions, sums in double rounded once.
//   - conv2d_input_grad: for each input element, the sum over (out channel of its group, kernel
//     row, kernel column) of grad_out * weight at the output the tap maps it to, if any;
//   - conv2d_weight_grad: for each weight element, the sum over (image, output row, output
//     column) of grad_out * the input under the tap (0 in the padding);
//   - the pools: each grad_out element (row-major) added to its window's cells (max_pool2d_grad:
//     the window's first maximum; avg_pool2d_grad: grad_out / divisor to each cell) in a double
//     plane, rounded at the end.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "capture/ops/attr_views.h"
#include "capture/ops/reference_kernels.h"

namespace tracecache::ref {

void conv2d_input_grad(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs,
                       HostBuffer& out) {
  const HostBuffer& g = *in[0];
  const HostBuffer& w = *in[1];
  const Conv2dInputGradAttrs a(attrs);
  const IntList& stride = a.stride();
  const IntList& padding = a.padding();
  const IntList& dilation = a.dilation();
  const int64_t n_batch = out.shape()[0], c_in = out.shape()[1], h = out.shape()[2], wd = out.shape()[3];
  const int64_t c_out = w.shape()[0], c_group = w.shape()[1], kh = w.shape()[2], kw = w.shape()[3];
  const int64_t oh = g.shape()[2], ow = g.shape()[3];
  const int64_t out_per_group = c_out / a.groups();
  const float* pg = g.data<float>();
  const float* pw = w.data<float>();
  float* po = out.data<float>();
  for (int64_t n = 0; n < n_batch; ++n) {
    for (int64_t c = 0; c < c_in; ++c) {
      const int64_t group = c / c_group, cl = c % c_group;
      for (int64_t iy = 0; iy < h; ++iy) {
        for (int64_t iz = 0; iz < wd; ++iz) {
          double acc = 0;
          for (int64_t o = group * out_per_group; o < (group + 1) * out_per_group; ++o) {
            for (int64_t i = 0; i < kh; ++i) {
              const int64_t ty = iy + padding[0] - i * dilation[0];
              if (ty < 0 || ty % stride[0] != 0 || ty / stride[0] >= oh) continue;
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t tz = iz + padding[1] - j * dilation[1];
                if (tz < 0 || tz % stride[1] != 0 || tz / stride[1] >= ow) continue;
                const float gv = pg[((n * c_out + o) * oh + ty / stride[0]) * ow + tz / stride[1]];
                const float wv = pw[((o * c_group + cl) * kh + i) * kw + j];
                acc += static_cast<double>(gv) * static_cast<double>(wv);
              }
            }
          }
          po[((n * c_in + c) * h + iy) * wd + iz] = static_cast<float>(acc);
        }
      }
    }
  }
}

void conv2d_weight_grad(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs,
                        HostBuffer& out) {
  const HostBuffer& g = *in[0];
  const HostBuffer& x = *in[1];
  const Conv2dWeightGradAttrs a(attrs);
  const IntList& stride = a.stride();
  const IntList& padding = a.padding();
  const IntList& dilation = a.dilation();
  const int64_t n_batch = x.shape()[0], c_in = x.shape()[1], h = x.shape()[2], wd = x.shape()[3];
  const int64_t c_out = out.shape()[0], c_group = out.shape()[1], kh = out.shape()[2], kw = out.shape()[3];
  const int64_t oh = g.shape()[2], ow = g.shape()[3];
  const int64_t out_per_group = c_out / a.groups();
  const float* pg = g.data<float>();
  const float* px = x.data<float>();
  float* po = out.data<float>();
  for (int64_t o = 0; o < c_out; ++o) {
    const int64_t first_channel = o / out_per_group * c_group;
    for (int64_t c = 0; c < c_group; ++c) {
      for (int64_t i = 0; i < kh; ++i) {
        for (int64_t j = 0; j < kw; ++j) {
          double acc = 0;
          for (int64_t n = 0; n < n_batch; ++n) {
            for (int64_t y = 0; y < oh; ++y) {
              const int64_t iy = y * stride[0] - padding[0] + i * dilation[0];
              if (iy < 0 || iy >= h) continue;
              for (int64_t z = 0; z < ow; ++z) {
                const int64_t iz = z * stride[1] - padding[1] + j * dilation[1];
                if (iz < 0 || iz >= wd) continue;
                const float gv = pg[((n * c_out + o) * oh + y) * ow + z];
                const float xv = px[((n * c_in + first_channel + c) * h + iy) * wd + iz];
                acc += static_cast<double>(gv) * static_cast<double>(xv);
              }
            }
          }
          po[((o * c_group + c) * kh + i) * kw + j] = static_cast<float>(acc);
        }
      }
    }
  }
}

namespace {

// Runs `scatter(plane_g, acc)` for each (image, channel) plane with a zeroed double plane of the
// input's size, then rounds the plane into `out`.
template <typename Scatter>
void per_plane(const HostBuffer& g, HostBuffer& out, Scatter scatter) {
  const int64_t planes = out.shape()[0] * out.shape()[1];
  const int64_t in_plane = out.shape()[2] * out.shape()[3];
  const int64_t out_plane = g.shape()[2] * g.shape()[3];
  std::vector<double> acc(static_cast<size_t>(in_plane));
  for (int64_t p = 0; p < planes; ++p) {
    std::fill(acc.begin(), acc.end(), 0.0);
    scatter(g.data<float>() + p * out_plane, p, acc.data());
    float* dst = out.data<float>() + p * in_plane;
    for (int64_t i = 0; i < in_plane; ++i) dst[i] = static_cast<float>(acc[static_cast<size_t>(i)]);
  }
}

}  // namespace

void max_pool2d_grad(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs,
                     HostBuffer& out) {
  const HostBuffer& x = *in[1];
  const MaxPool2dAttrs a(attrs);
  const IntList& kernel = a.kernel();
  const IntList& stride = a.stride();
  const IntList& padding = a.padding();
  const IntList& dilation = a.dilation();
  const int64_t h = x.shape()[2], w = x.shape()[3];
  const int64_t oh = in[0]->shape()[2], ow = in[0]->shape()[3];
  per_plane(*in[0], out, [&](const float* gp, int64_t p, double* acc) {
    const float* plane = x.data<float>() + p * h * w;
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t z = 0; z < ow; ++z) {
        // PyTorch's scan: the first cell of the window inside the input, replaced by each later
        // cell that is greater or NaN.
        int64_t best_at = -1;
        float best = -std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < kernel[0]; ++i) {
          const int64_t iy = y * stride[0] - padding[0] + i * dilation[0];
          if (iy < 0 || iy >= h) continue;
          for (int64_t j = 0; j < kernel[1]; ++j) {
            const int64_t iz = z * stride[1] - padding[1] + j * dilation[1];
            if (iz < 0 || iz >= w) continue;
            const float v = plane[iy * w + iz];
            if (best_at < 0) best_at = iy * w + iz;
            if (v > best || std::isnan(v)) {
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

void avg_pool2d_grad(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs,
                     HostBuffer& out) {
  const AvgPool2dGradAttrs a(attrs);
  const IntList& kernel = a.kernel();
  const IntList& stride = a.stride();
  const IntList& padding = a.padding();
  const bool count_include_pad = a.count_include_pad();
  const int64_t h = out.shape()[2], w = out.shape()[3];
  const int64_t oh = in[0]->shape()[2], ow = in[0]->shape()[3];
  per_plane(*in[0], out, [&](const float* gp, int64_t, double* acc) {
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t z = 0; z < ow; ++z) {
        // The window and divisor of avg_pool2d (reference_nn_layers.cc).
        int64_t y0 = y * stride[0] - padding[0], z0 = z * stride[1] - padding[1];
        int64_t y1 = std::min(y0 + kernel[0], h + padding[0]);
        int64_t z1 = std::min(z0 + kernel[1], w + padding[1]);
        const int64_t padded_count = (y1 - y0) * (z1 - z0);
        y0 = std::max<int64_t>(y0, 0);
        z0 = std::max<int64_t>(z0, 0);
        y1 = std::min(y1, h);
        z1 = std::min(z1, w);
        if (y0 >= y1 || z0 >= z1) continue;
        const int64_t count = count_include_pad ? padded_count : (y1 - y0) * (z1 - z0);
        const double share = static_cast<double>(gp[y * ow + z]) / static_cast<double>(count);
        for (int64_t iy = y0; iy < y1; ++iy) {
          for (int64_t iz = z0; iz < z1; ++iz) acc[iy * w + iz] += share;
        }
      }
    }
  });
}

void adaptive_avg_pool2d_grad(std::span<const HostBuffer* const> in, std::span<const AttrValue>,
                              HostBuffer& out) {
  const int64_t h = out.shape()[2], w = out.shape()[3];
  const int64_t oh = in[0]->shape()[2], ow = in[0]->shape()[3];
  per_plane(*in[0], out, [&](const float* gp, int64_t, double* acc) {
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

}  // namespace tracecache::ref
