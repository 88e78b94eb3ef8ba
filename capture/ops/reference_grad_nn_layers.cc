// Reference kernels of the nn layers' gradients (reference_kernels.h, docs/ops.md): plain loops
// from the definitions over the windows of capture/ops/nn_windows.h, sums in double rounded once.
//   - conv2d_input_grad: for each input element, the sum over (out channel of its group, kernel
//     row, kernel column) of grad_out * weight at the output the tap maps it to, if any;
//   - conv2d_weight_grad: for each weight element, the sum over (image, output row, output
//     column) of grad_out * the input under the tap (0 in the padding);
//   - the pools: each grad_out element (row-major) added to its window's cells (max_pool2d_grad:
//     the window's first maximum; avg_pool2d_grad: grad_out / divisor to each cell) in a double
//     plane, rounded at the end. The plane loops (nn::*_planes) are shared with the cpu kernels.
#include <algorithm>
#include <vector>

#include "capture/ops/attr_views.h"
#include "capture/ops/nn_windows.h"
#include "capture/ops/reference_kernels.h"

namespace tracecache {

namespace ref {

void conv2d_input_grad(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs,
                       HostBuffer& out) {
  const nn::ConvShape s =
      nn::conv_shape(out.shape(), in[1]->shape(), in[0]->shape(), Conv2dInputGradAttrs(attrs));
  const nn::Window2d win = s.window();
  const float* pg = in[0]->data<float>();
  const float* pw = in[1]->data<float>();
  float* po = out.data<float>();
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t c = 0; c < s.c; ++c) {
      const int64_t group = c / s.cg, cl = c % s.cg;
      for (int64_t iy = 0; iy < s.h; ++iy) {
        for (int64_t iz = 0; iz < s.w; ++iz) {
          double acc = 0;
          for (int64_t o = group * s.out_per_group(); o < (group + 1) * s.out_per_group(); ++o) {
            for (int64_t i = 0; i < s.kh; ++i) {
              const int64_t y = win.rows.output_of(iy, i);
              if (y < 0) continue;
              for (int64_t j = 0; j < s.kw; ++j) {
                const int64_t z = win.cols.output_of(iz, j);
                if (z < 0) continue;
                const float gv = pg[((n * s.o + o) * s.oh + y) * s.ow + z];
                const float wv = pw[((o * s.cg + cl) * s.kh + i) * s.kw + j];
                acc += static_cast<double>(gv) * static_cast<double>(wv);
              }
            }
          }
          po[((n * s.c + c) * s.h + iy) * s.w + iz] = static_cast<float>(acc);
        }
      }
    }
  }
}

void conv2d_weight_grad(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs,
                        HostBuffer& out) {
  const nn::ConvShape s =
      nn::conv_shape(in[1]->shape(), out.shape(), in[0]->shape(), Conv2dWeightGradAttrs(attrs));
  const nn::Window2d win = s.window();
  const float* pg = in[0]->data<float>();
  const float* px = in[1]->data<float>();
  float* po = out.data<float>();
  for (int64_t o = 0; o < s.o; ++o) {
    const int64_t first_channel = o / s.out_per_group() * s.cg;
    for (int64_t c = 0; c < s.cg; ++c) {
      for (int64_t i = 0; i < s.kh; ++i) {
        for (int64_t j = 0; j < s.kw; ++j) {
          double acc = 0;
          for (int64_t n = 0; n < s.n; ++n) {
            for (int64_t y = 0; y < s.oh; ++y) {
              const int64_t iy = win.rows.at(y, i);
              if (!win.rows.inside(iy)) continue;
              for (int64_t z = 0; z < s.ow; ++z) {
                const int64_t iz = win.cols.at(z, j);
                if (!win.cols.inside(iz)) continue;
                const float gv = pg[((n * s.o + o) * s.oh + y) * s.ow + z];
                const float xv = px[((n * s.c + first_channel + c) * s.h + iy) * s.w + iz];
                acc += static_cast<double>(gv) * static_cast<double>(xv);
              }
            }
          }
          po[((o * s.cg + c) * s.kh + i) * s.kw + j] = static_cast<float>(acc);
        }
      }
    }
  }
}

void max_pool2d_grad(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs,
                     HostBuffer& out) {
  nn::max_pool2d_grad_planes(in, attrs, out, 0, out.shape()[0] * out.shape()[1]);
}

void avg_pool2d_grad(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs,
                     HostBuffer& out) {
  nn::avg_pool2d_grad_planes(in, attrs, out, 0, out.shape()[0] * out.shape()[1]);
}

void adaptive_avg_pool2d_grad(std::span<const HostBuffer* const> in, std::span<const AttrValue>,
                              HostBuffer& out) {
  nn::adaptive_avg_pool2d_grad_planes(in, out, 0, out.shape()[0] * out.shape()[1]);
}

}  // namespace ref

namespace nn {

namespace {

// Runs `scatter(plane_grad, p, acc)` for each plane p in [begin, end) with a zeroed double plane
// of the input's size, then rounds the plane into `out`.
template <typename Scatter>
void per_plane(const HostBuffer& g, HostBuffer& out, int64_t begin, int64_t end, Scatter scatter) {
  const int64_t in_plane = out.shape()[2] * out.shape()[3];
  const int64_t out_plane = g.shape()[2] * g.shape()[3];
  std::vector<double> acc(static_cast<size_t>(in_plane));
  for (int64_t p = begin; p < end; ++p) {
    std::fill(acc.begin(), acc.end(), 0.0);
    scatter(g.data<float>() + p * out_plane, p, acc.data());
    float* dst = out.data<float>() + p * in_plane;
    for (int64_t i = 0; i < in_plane; ++i) dst[i] = static_cast<float>(acc[static_cast<size_t>(i)]);
  }
}

// Adds `share` to the plane cells rows x cols of `acc` (`w` the plane's width).
void add_to_window(double* acc, int64_t w, Interval rows, Interval cols, double share) {
  for (int64_t iy = rows.lo; iy < rows.hi; ++iy) {
    for (int64_t iz = cols.lo; iz < cols.hi; ++iz) acc[iy * w + iz] += share;
  }
}

}  // namespace

void max_pool2d_grad_planes(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs,
                            HostBuffer& out, int64_t begin, int64_t end) {
  const HostBuffer& x = *in[1];
  const Window2d win = pool_window(MaxPool2dAttrs(attrs), x.shape(), in[0]->shape());
  per_plane(*in[0], out, begin, end, [&](const float* gp, int64_t p, double* acc) {
    const float* plane = x.data<float>() + p * win.in_plane();
    for (int64_t y = 0; y < win.rows.out; ++y) {
      for (int64_t z = 0; z < win.cols.out; ++z) {
        const WindowMax m = window_max(plane, win, y, z);
        if (m.at >= 0) acc[m.at] += static_cast<double>(gp[y * win.cols.out + z]);
      }
    }
  });
}

void avg_pool2d_grad_planes(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs,
                            HostBuffer& out, int64_t begin, int64_t end) {
  const AvgPool2dGradAttrs a(attrs);
  const Window2d win = pool_window(a, out.shape(), in[0]->shape());
  per_plane(*in[0], out, begin, end, [&](const float* gp, int64_t, double* acc) {
    for (int64_t y = 0; y < win.rows.out; ++y) {
      const AvgWindow r = avg_window(win.rows, y);
      for (int64_t z = 0; z < win.cols.out; ++z) {
        const AvgWindow c = avg_window(win.cols, z);
        if (r.cells.empty() || c.cells.empty()) continue;
        const int64_t count = avg_divisor(r, c, a.count_include_pad());
        const double share = static_cast<double>(gp[y * win.cols.out + z]) / static_cast<double>(count);
        add_to_window(acc, win.cols.size, r.cells, c.cells, share);
      }
    }
  });
}

void adaptive_avg_pool2d_grad_planes(std::span<const HostBuffer* const> in, HostBuffer& out, int64_t begin,
                                     int64_t end) {
  const int64_t h = out.shape()[2], w = out.shape()[3];
  const int64_t oh = in[0]->shape()[2], ow = in[0]->shape()[3];
  per_plane(*in[0], out, begin, end, [&](const float* gp, int64_t, double* acc) {
    for (int64_t y = 0; y < oh; ++y) {
      const Interval rows = adaptive_window(y, oh, h);
      for (int64_t z = 0; z < ow; ++z) {
        const Interval cols = adaptive_window(z, ow, w);
        const double share =
            static_cast<double>(gp[y * ow + z]) / static_cast<double>(rows.size() * cols.size());
        add_to_window(acc, w, rows, cols, share);
      }
    }
  });
}

}  // namespace nn

}  // namespace tracecache
