// The window geometry of conv2d and the 2-D pools, forward and backward, defined once for the
// reference kernels (capture/ops/reference_nn_layers.cc, reference_grad_nn_layers.cc) and the
// cpu kernels (replay/backends/cpu/cpu_nn_layers.cc, cpu_grad_nn_layers.cc):
//   - WindowAxis / Window2d: one axis, and both, of a strided, padded, dilated window: tap t of
//     output position p reads input coordinate p * stride - padding + t * dilation; ConvShape:
//     conv2d's shapes and window (the cpu kernels' GEMM lowering works on it too);
//   - in_bounds, WindowAxis::taps_inside / outputs_reaching: which taps or outputs stay inside
//     the input, as index ranges (for loops without a bounds test per element);
//   - for_each_window_cell and window_max: one output's in-bounds cells in row-major tap order,
//     the order every kernel meets them in, so maxima and sums come out the same everywhere;
//   - avg_window / avg_divisor (avg_pool2d) and adaptive_window (adaptive_avg_pool2d);
//   - the pool gradients over a range of planes: the reference runs all planes, the cpu backend
//     splits them over threads, and both get the same bits (each plane is computed alone).
// docs/ops.md states the same definitions in prose.
//
// Plain structs and pure inline functions (the *_planes functions are defined in
// reference_grad_nn_layers.cc); callbacks are template parameters, inlined into the kernels'
// loops (no std::function). Thread-safe; no errors: REQUIRES shapes and attributes as the
// inference rules (capture/ops/ops.cc) accept them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>

#include "capture/core/buffer.h"
#include "capture/ops/attrs.h"

namespace tracecache::nn {

// The indices [lo, hi) of a range (empty: lo == hi).
struct Interval {
  int64_t lo = 0, hi = 0;
  int64_t size() const { return hi - lo; }
  bool empty() const { return lo >= hi; }
};

// The indices t in [0, count) with first + t * step in [0, size). REQUIRES: step > 0.
inline Interval in_bounds(int64_t count, int64_t step, int64_t first, int64_t size) {
  Interval r;
  r.lo = first >= 0 ? 0 : (-first + step - 1) / step;
  r.hi = size - 1 - first < 0 ? 0 : std::min(count, (size - 1 - first) / step + 1);
  r.lo = std::min(r.lo, r.hi);
  return r;
}

// One axis of a window op: `size` input coordinates, `out` output positions.
struct WindowAxis {
  int64_t kernel, stride, padding, dilation, size, out;

  // The input coordinate of tap 0 of output position p (may lie in the padding).
  int64_t start(int64_t p) const { return p * stride - padding; }
  // The input coordinate that tap t of output position p reads.
  int64_t at(int64_t p, int64_t t) const { return start(p) + t * dilation; }
  bool inside(int64_t coord) const { return coord >= 0 && coord < size; }
  // The output position whose tap t reads input coordinate `coord`, or -1 when none does.
  int64_t output_of(int64_t coord, int64_t t) const {
    const int64_t s = coord + padding - t * dilation;
    return s < 0 || s % stride != 0 || s / stride >= out ? -1 : s / stride;
  }
  // The taps of output position p that read inside the input.
  Interval taps_inside(int64_t p) const { return in_bounds(kernel, dilation, start(p), size); }
  // The output positions whose tap t reads inside the input.
  Interval outputs_reaching(int64_t t) const {
    return in_bounds(out, stride, t * dilation - padding, size);
  }
};

// The window of an NCHW op: `planes` (images x channels of the input), rows (height) and
// columns (width).
struct Window2d {
  int64_t planes;
  WindowAxis rows, cols;
  int64_t in_plane() const { return rows.size * cols.size; }
  int64_t out_plane() const { return rows.out * cols.out; }
};

// The window of a pool or pool gradient from its attribute view (MaxPool2dAttrs,
// AvgPool2dAttrs, AvgPool2dGradAttrs: kernel, stride, padding, and dilation 1 where it has
// none) and its input and output shapes (NCHW, the forward op's).
template <typename View>
Window2d pool_window(const View& a, const Shape& input, const Shape& output) {
  const auto axis = [&](int d) {
    int64_t dilation = 1;
    if constexpr (requires { a.dilation(); }) dilation = a.dilation()[d];
    return WindowAxis{a.kernel()[d], a.stride()[d], a.padding()[d], dilation, input[2 + d], output[2 + d]};
  };
  return {input[0] * input[1], axis(0), axis(1)};
}

// The geometry of conv2d or one of its gradients, the forward op's: input, weight, output plane
// and attributes, and its window.
struct ConvShape {
  int64_t n, c, h, w;     // input
  int64_t o, cg, kh, kw;  // weight: out channels, in channels per group, kernel
  int64_t oh, ow;         // output plane
  int64_t sh, sw, ph, pw, dh, dw, groups;

  int64_t out_per_group() const { return o / groups; }
  Window2d window() const { return {n * c, {kh, sh, ph, dh, h, oh}, {kw, sw, pw, dw, w, ow}}; }
};

// The ConvShape from the forward input, weight and output shapes and the attribute view
// (Conv2dAttrs, Conv2dInputGradAttrs, Conv2dWeightGradAttrs).
template <typename View>
ConvShape conv_shape(const Shape& x, const Shape& w, const Shape& out, const View& a) {
  return {x[0],           x[1],           x[2],           x[3],            w[0],
          w[1],           w[2],           w[3],           out[2],          out[3],
          a.stride()[0],  a.stride()[1],  a.padding()[0], a.padding()[1],  a.dilation()[0],
          a.dilation()[1], a.groups()};
}

// Calls visit(i, j, iy, iz) for each tap (i, j) of output (y, z) that reads inside the input
// (cell (iy, iz)), taps in row-major order.
template <typename Visit>
void for_each_window_cell(const Window2d& win, int64_t y, int64_t z, Visit&& visit) {
  // Scalars, not the axes: kept in registers across the caller's loops.
  const int64_t kh = win.rows.kernel, kw = win.cols.kernel, dh = win.rows.dilation, dw = win.cols.dilation;
  const int64_t h = win.rows.size, w = win.cols.size;
  const int64_t y0 = win.rows.start(y), z0 = win.cols.start(z);
  for (int64_t i = 0; i < kh; ++i) {
    const int64_t iy = y0 + i * dh;
    if (iy < 0 || iy >= h) continue;
    for (int64_t j = 0; j < kw; ++j) {
      const int64_t iz = z0 + j * dw;
      if (iz < 0 || iz >= w) continue;
      visit(i, j, iy, iz);
    }
  }
}

// The max_pool2d window of output (y, z) over `plane` (the input plane, row-major), PyTorch's
// scan: `at` is the first cell inside the input, replaced by each later cell that is greater
// or NaN; `value` the maximum so found (-inf, and at == -1, when no cell is inside).
struct WindowMax {
  float value;
  int64_t at;
};
inline WindowMax window_max(const float* plane, const Window2d& win, int64_t y, int64_t z) {
  const int64_t w = win.cols.size;
  int64_t at = -1;
  float best = -std::numeric_limits<float>::infinity();
  for_each_window_cell(win, y, z, [&](int64_t, int64_t, int64_t iy, int64_t iz) {
    const float v = plane[iy * w + iz];
    const int64_t cell = iy * w + iz;
    // v != v: NaN wins. Selects rather than branches (| not ||): on data the comparison is a
    // coin toss, and a mispredicted branch per cell dominated the pool kernels.
    const bool better = (v > best) | (v != v);
    at = (better | (at < 0)) ? cell : at;
    best = better ? v : best;
  });
  return {best, at};
}

// One output position's avg_pool2d window along one axis: `cells` clipped to the input (what
// is summed), and `padded`, its length clipped to the padded input instead.
struct AvgWindow {
  Interval cells;
  int64_t padded;
};
inline AvgWindow avg_window(const WindowAxis& a, int64_t p) {
  const int64_t start = a.start(p);
  const int64_t end = std::min(start + a.kernel, a.size + a.padding);
  return {{std::max<int64_t>(start, 0), std::min(end, a.size)}, end - start};
}
// The divisor of an output with windows r (rows) and c (columns). REQUIRES: neither is empty.
inline int64_t avg_divisor(const AvgWindow& r, const AvgWindow& c, bool count_include_pad) {
  return count_include_pad ? r.padded * c.padded : r.cells.size() * c.cells.size();
}

// adaptive_avg_pool2d's window of output position p along an axis of `out` outputs over
// `size` inputs: [floor(p * size / out), ceil((p + 1) * size / out)).
inline Interval adaptive_window(int64_t p, int64_t out, int64_t size) {
  return {p * size / out, ((p + 1) * size + out - 1) / out};
}

// The sum in double of plane cells rows x cols, row-major (`w` the plane's width).
inline double window_sum(const float* plane, int64_t w, Interval rows, Interval cols) {
  double sum = 0;
  for (int64_t iy = rows.lo; iy < rows.hi; ++iy) {
    for (int64_t iz = cols.lo; iz < cols.hi; ++iz) sum += static_cast<double>(plane[iy * w + iz]);
  }
  return sum;
}

// The pool gradients on planes [begin, end) of `out` (the forward input's shape; plane p is
// image p / C, channel p % C): each grad_out element of the plane, row-major, is added into a
// zeroed double plane, which is then rounded into `out`:
//   max_pool2d_grad (in: grad_out, input; MaxPool2dAttrs): to its window's `at` (window_max);
//   avg_pool2d_grad (in: grad_out; AvgPool2dGradAttrs): grad_out / avg_divisor to each cell;
//   adaptive_avg_pool2d_grad (in: grad_out): grad_out / the window's size to each cell.
void max_pool2d_grad_planes(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs,
                            HostBuffer& out, int64_t begin, int64_t end);
void avg_pool2d_grad_planes(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs,
                            HostBuffer& out, int64_t begin, int64_t end);
void adaptive_avg_pool2d_grad_planes(std::span<const HostBuffer* const> in, HostBuffer& out, int64_t begin,
                                     int64_t end);

}  // namespace tracecache::nn
