// The cpu backend's nn-layer kernels. See cpu_nn_layers.h for the numerics table.
//
// conv2d is lowered to GEMM: for each image and group, out[og, OH*OW] = weight[og, K] x
// col[K, OH*OW] with K = channels per group x kernel height x kernel width, where col is the
// im2col matrix (row (c, i, j) holds the input pixel under kernel tap (i, j) of channel c for
// every output position, 0 where it falls in the padding). A 1x1, stride-1, unpadded
// convolution needs no col: the input plane already is that matrix. col is built for a block of
// output positions at a time so its size stays near kColBudget floats whatever the image size.
#include "replay/backends/cpu/cpu_dtypes.h"
#include "replay/backends/cpu/cpu_nn_layers.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <vector>

#include "capture/ops/attr_views.h"
#include "capture/ops/elementwise.h"
#include "capture/ops/nn_windows.h"
#include "capture/ops/random.h"
#include "replay/backends/cpu/cpu_kernels.h"

namespace tracecache::cpu {

// ---- conv2d -------------------------------------------------------------------------------------

ConvGemm conv_gemm(const nn::ConvShape& s) {
  ConvGemm p;
  p.per_group = s.out_per_group();
  p.k = s.cg * s.kh * s.kw;
  p.plane_out = s.oh * s.ow;
  p.direct = s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.ph == 0 && s.pw == 0;
  p.block = p.direct || p.k == 0 ? p.plane_out
                                 : std::min(p.plane_out, std::max(kMinBlockColumns, kColBudget / p.k));
  return p;
}

std::unique_ptr<float[]> col_scratch(const ConvGemm& p) {
  return p.direct ? nullptr : std::make_unique_for_overwrite<float[]>(static_cast<size_t>(p.k * p.block));
}

namespace {

// One run of the im2col matrix whose input row lies inside the input: output positions
// [ox0, ox1) of one output row, at col[at ...], reading the input row that starts at
// input[in_row] (of the group's planes), column ox * sw + offset_x, which lies inside the
// input for ox in `cols`.
struct ColRun {
  int64_t at, ox0, ox1, in_row, offset_x;
  nn::Interval cols;
};

// Walks the im2col matrix of output positions [q0, q1) run by run: rows (c, i, j) in order,
// positions increasing; calls padding(at, len) for a run of `len` positions whose input row
// lies in the padding (col[at ...]), inside(r) for the others. Channels are split over threads
// (each channel's runs stay on one thread, in order), so im2col writes and col2im_add adds each
// channel on its own.
template <typename Padding, typename Inside>
void for_each_col_run(const nn::ConvShape& s, int64_t q0, int64_t q1, Padding&& padding, Inside&& inside) {
  const int64_t cols = q1 - q0;
  // The callbacks are copied in, so their captures stay one load away in the loops below.
  const auto channels = [&s, q0, q1, cols, padding, inside](int64_t c_begin, int64_t c_end) {
    for (int64_t c = c_begin; c < c_end; ++c) {
      const int64_t plane = c * s.h * s.w;
      for (int64_t i = 0; i < s.kh; ++i) {
        const int64_t offset_y = i * s.dh - s.ph;
        for (int64_t j = 0; j < s.kw; ++j) {
          const int64_t offset_x = j * s.dw - s.pw;
          const nn::Interval valid_x = nn::in_bounds(s.ow, s.sw, offset_x, s.w);
          const int64_t row = ((c * s.kh + i) * s.kw + j) * cols;
          for (int64_t q = q0; q < q1;) {
            const int64_t oy = q / s.ow, ox0 = q % s.ow;
            const int64_t ox1 = std::min(s.ow, ox0 + (q1 - q));
            const int64_t iy = oy * s.sh + offset_y;
            if (iy < 0 || iy >= s.h) {
              padding(row + (q - q0), ox1 - ox0);
            } else {
              const int64_t lo = std::clamp(valid_x.lo, ox0, ox1);
              const int64_t hi = std::clamp(valid_x.hi, lo, ox1);
              inside(ColRun{row + (q - q0), ox0, ox1, plane + iy * s.w, offset_x, {lo, hi}});
            }
            q += ox1 - ox0;
          }
        }
      }
    }
  };
  parallel_for(s.cg, s.cg * s.kh * s.kw * cols, channels);
}

}  // namespace

void im2col(const float* xg, const nn::ConvShape& s, int64_t q0, int64_t q1, float* col) {
  for_each_col_run(
      s, q0, q1, [col](int64_t at, int64_t len) { std::fill(col + at, col + at + len, 0.0f); },
      [xg, col, &s](const ColRun& r) {
        float* dst = col + r.at;  // dst[ox - ox0] is output position (oy, ox)
        const float* src = xg + r.in_row;
        const int64_t lo = r.cols.lo, hi = r.cols.hi;
        std::fill(dst, dst + (lo - r.ox0), 0.0f);
        if (s.sw == 1) {
          std::memcpy(dst + (lo - r.ox0), src + lo + r.offset_x,
                      static_cast<size_t>(hi - lo) * sizeof(float));
        } else {
          for (int64_t ox = lo; ox < hi; ++ox) dst[ox - r.ox0] = src[ox * s.sw + r.offset_x];
        }
        std::fill(dst + (hi - r.ox0), dst + (r.ox1 - r.ox0), 0.0f);
      });
}

void col2im_add(const float* col, const nn::ConvShape& s, int64_t q0, int64_t q1, float* xg) {
  for_each_col_run(
      s, q0, q1, [](int64_t, int64_t) {},
      [col, xg, &s](const ColRun& r) {
        float* dst = xg + r.in_row;
        const float* src = col + r.at;  // src[ox - ox0] is output position (oy, ox)
        for (int64_t ox = r.cols.lo; ox < r.cols.hi; ++ox) dst[ox * s.sw + r.offset_x] += src[ox - r.ox0];
      });
}

namespace {

// Fills each of the `rows` rows of `out` (`len` floats each) with bias[r], or 0 without bias.
void fill_rows(float* out, int64_t rows, int64_t len, const float* bias) {
  for (int64_t r = 0; r < rows; ++r) std::fill_n(out + r * len, len, bias ? bias[r] : 0.0f);
}

// groups == channels with one input channel per group: each output plane is a weighted sum of
// shifted copies of one input plane, one pass per kernel tap.
void depthwise_conv2d(const float* x, const float* w, const float* bias, const nn::ConvShape& s,
                      float* out) {
  const int64_t per_channel = s.out_per_group();
  const int64_t plane_out = s.oh * s.ow;
  parallel_for(s.n * s.o, s.n * s.o * plane_out * s.kh * s.kw, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t n = item / s.o, oc = item % s.o;
      const float* plane = x + (n * s.c + oc / per_channel) * s.h * s.w;
      const float* taps = w + oc * s.kh * s.kw;
      float* dst = out + (n * s.o + oc) * plane_out;
      std::fill_n(dst, plane_out, bias ? bias[oc] : 0.0f);
      for (int64_t i = 0; i < s.kh; ++i) {
        const int64_t offset_y = i * s.dh - s.ph;
        const nn::Interval ys = nn::in_bounds(s.oh, s.sh, offset_y, s.h);
        for (int64_t j = 0; j < s.kw; ++j) {
          const int64_t offset_x = j * s.dw - s.pw;
          const nn::Interval xs = nn::in_bounds(s.ow, s.sw, offset_x, s.w);
          const float tap = taps[i * s.kw + j];
          for (int64_t oy = ys.lo; oy < ys.hi; ++oy) {
            const float* src = plane + (oy * s.sh + offset_y) * s.w;
            float* d = dst + oy * s.ow;
            if (s.sw == 1) {
              for (int64_t ox = xs.lo; ox < xs.hi; ++ox) d[ox] += tap * src[ox + offset_x];
            } else {
              for (int64_t ox = xs.lo; ox < xs.hi; ++ox) d[ox] += tap * src[ox * s.sw + offset_x];
            }
          }
        }
      }
    }
  });
}

bool conv2d(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  const nn::ConvShape s = nn::conv_shape(in[0]->shape(), in[1]->shape(), out.shape(), Conv2dAttrs(attrs));
  const float* x = in[0]->data<float>();
  const float* w = in[1]->data<float>();
  const float* bias = in.size() == 3 ? in[2]->data<float>() : nullptr;
  float* o = out.data<float>();
  if (out.numel() == 0) return true;
  if (s.groups > 1 && s.cg == 1) {
    depthwise_conv2d(x, w, bias, s, o);
    return true;
  }
  const ConvGemm p = conv_gemm(s);
  if (p.k > 0 && !fits_blas(p)) return false;
  for (int64_t n = 0; n < s.n; ++n) fill_rows(o + n * s.o * p.plane_out, s.o, p.plane_out, bias);
  if (p.k == 0) return true;  // no input channels: the bias alone
  const std::unique_ptr<float[]> col = col_scratch(p);
  for_each_conv_block(s, p, [&](int64_t n, int64_t g, int64_t q0, int64_t q1) {
    const float* xg = x + (n * s.c + g * s.cg) * s.h * s.w;
    const float* b = xg;  // direct: the input plane is the im2col matrix
    if (!p.direct) {
      im2col(xg, s, q0, q1, col.get());
      b = col.get();
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blas_int(p.per_group), blas_int(q1 - q0),
                blas_int(p.k), 1.0f, w + g * p.per_group * p.k, blas_int(p.k), b, blas_int(q1 - q0), 1.0f,
                o + (n * s.o + g * p.per_group) * p.plane_out + q0, blas_int(p.plane_out));
  });
  return true;
}

// ---- linear -------------------------------------------------------------------------------------

bool linear(std::span<const HostBuffer* const> in, HostBuffer& out) {
  const HostBuffer& w = *in[1];
  const float* bias = in.size() == 3 ? in[2]->data<float>() : nullptr;
  const int64_t n_out = w.shape()[0], n_in = w.shape()[1];
  if (out.numel() == 0) return true;
  const int64_t rows = out.numel() / n_out;
  if (!fits_blas({rows, n_out, n_in})) return false;
  float* o = out.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    if (bias)
      std::copy_n(bias, n_out, o + r * n_out);
    else
      std::fill_n(o + r * n_out, n_out, 0.0f);
  }
  if (n_in == 0) return true;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas_int(rows), blas_int(n_out), blas_int(n_in),
              1.0f, in[0]->data<float>(), blas_int(n_in), w.data<float>(), blas_int(n_in), 1.0f, o,
              blas_int(n_out));
  return true;
}

// ---- pooling ------------------------------------------------------------------------------------
// Bitwise equal to the reference: every output meets its window's cells (nn_windows.h) in the
// same row-major order, compared (max) or summed in double (averages) as there.

// Per output row, taps outermost: for each kernel tap (i, j) in row-major order, one pass over
// the output columns it reaches. Each output still meets its taps in the reference's order,
// and the inner loop (strided load, compare, select) vectorizes. Only the ranges come from
// nn_windows.h: read through Window2d, these loops took 0.25% more instructions.
void max_pool2d(const HostBuffer& x, std::span<const AttrValue> attrs, HostBuffer& out) {
  const MaxPool2dAttrs a(attrs);
  const IntList& kernel = a.kernel();
  const IntList& stride = a.stride();
  const IntList& padding = a.padding();
  const IntList& dilation = a.dilation();
  const int64_t planes = x.shape()[0] * x.shape()[1], h = x.shape()[2], w = x.shape()[3];
  const int64_t oh = out.shape()[2], ow = out.shape()[3];
  const int64_t sw = stride[1];
  std::vector<nn::Interval> tap_cols(static_cast<size_t>(kernel[1]));
  for (int64_t j = 0; j < kernel[1]; ++j) {
    tap_cols[static_cast<size_t>(j)] = nn::in_bounds(ow, sw, j * dilation[1] - padding[1], w);
  }
  parallel_for(planes, planes * oh * ow * kernel[0] * kernel[1], [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const float* plane = x.data<float>() + p * h * w;
      for (int64_t y = 0; y < oh; ++y) {
        float* dst = out.data<float>() + (p * oh + y) * ow;
        std::fill_n(dst, ow, -std::numeric_limits<float>::infinity());
        const int64_t y_start = y * stride[0] - padding[0];
        const nn::Interval rows = nn::in_bounds(kernel[0], dilation[0], y_start, h);
        for (int64_t i = rows.lo; i < rows.hi; ++i) {
          const float* src = plane + (y_start + i * dilation[0]) * w;
          for (int64_t j = 0; j < kernel[1]; ++j) {
            const nn::Interval cols = tap_cols[static_cast<size_t>(j)];
            const int64_t offset = j * dilation[1] - padding[1];
            for (int64_t z = cols.lo; z < cols.hi; ++z) {
              const float v = src[z * sw + offset];
              const float best = dst[z];
              dst[z] = (v > best || v != v) ? v : best;  // v != v: NaN wins, as in the reference
            }
          }
        }
      }
    }
  });
}

// As max_pool2d: taps outermost, each output summing its cells in the reference's order, in
// a row of double accumulators.
void avg_pool2d(const HostBuffer& x, std::span<const AttrValue> attrs, HostBuffer& out) {
  const AvgPool2dAttrs a(attrs);
  const bool count_include_pad = a.count_include_pad();
  const nn::Window2d win = nn::pool_window(a, x.shape(), out.shape());
  const int64_t w = win.cols.size, oh = win.rows.out, ow = win.cols.out;
  const int64_t kw = win.cols.kernel, sw = win.cols.stride, pw = win.cols.padding;
  std::vector<nn::AvgWindow> cols(static_cast<size_t>(ow));
  for (int64_t z = 0; z < ow; ++z) cols[static_cast<size_t>(z)] = nn::avg_window(win.cols, z);
  std::vector<nn::Interval> tap_cols(static_cast<size_t>(kw));
  for (int64_t j = 0; j < kw; ++j) tap_cols[static_cast<size_t>(j)] = win.cols.outputs_reaching(j);
  parallel_for(win.planes, win.planes * oh * ow * win.rows.kernel * kw, [&](int64_t begin, int64_t end) {
    std::vector<double> acc(static_cast<size_t>(ow));
    for (int64_t p = begin; p < end; ++p) {
      const float* plane = x.data<float>() + p * win.in_plane();
      for (int64_t y = 0; y < oh; ++y) {
        const nn::AvgWindow r = nn::avg_window(win.rows, y);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t iy = r.cells.lo; iy < r.cells.hi; ++iy) {
          const float* src = plane + iy * w;
          for (int64_t j = 0; j < kw; ++j) {
            const nn::Interval valid = tap_cols[static_cast<size_t>(j)];
            const int64_t offset = j - pw;
            for (int64_t z = valid.lo; z < valid.hi; ++z)
              acc[static_cast<size_t>(z)] += static_cast<double>(src[z * sw + offset]);
          }
        }
        float* dst = out.data<float>() + (p * oh + y) * ow;
        for (int64_t z = 0; z < ow; ++z) {
          const nn::AvgWindow c = cols[static_cast<size_t>(z)];
          if (r.cells.empty() || c.cells.empty()) {
            dst[z] = 0.0f;
            continue;
          }
          const int64_t count = nn::avg_divisor(r, c, count_include_pad);
          dst[z] = static_cast<float>(acc[static_cast<size_t>(z)] / static_cast<double>(count));
        }
      }
    }
  });
}

void adaptive_avg_pool2d(const HostBuffer& x, HostBuffer& out) {
  const int64_t planes = x.shape()[0] * x.shape()[1], h = x.shape()[2], w = x.shape()[3];
  const int64_t oh = out.shape()[2], ow = out.shape()[3];
  std::vector<nn::Interval> cols(static_cast<size_t>(ow));
  for (int64_t z = 0; z < ow; ++z) cols[static_cast<size_t>(z)] = nn::adaptive_window(z, ow, w);
  // Each output reads about (h / oh + 1) x (w / ow + 1) cells.
  const int64_t work = planes * (h + oh) * (w + ow);
  parallel_for(planes, work, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const float* plane = x.data<float>() + p * h * w;
      float* dst = out.data<float>() + p * oh * ow;
      for (int64_t y = 0; y < oh; ++y) {
        const nn::Interval rows = nn::adaptive_window(y, oh, h);
        for (int64_t z = 0; z < ow; ++z) {
          const nn::Interval c = cols[static_cast<size_t>(z)];
          dst[y * ow + z] = static_cast<float>(nn::window_sum(plane, w, rows, c) /
                                               static_cast<double>(rows.size() * c.size()));
        }
      }
    }
  });
}

// ---- layout and lookups -------------------------------------------------------------------------

void pad(const HostBuffer& x, std::span<const AttrValue> attrs, HostBuffer& out) {
  const PadAttrs a(attrs);
  const IntList& pads = a.pads();
  const Shape& s = x.shape();
  const int rank = s.rank();
  dispatch_cpu_dtype(out.dtype(),
                 [&]<typename T>() { std::fill_n(out.data<T>(), out.numel(), convert<T>(a.value())); });
  if (out.numel() == 0 || x.numel() == 0) return;
  if (rank == 0) {
    std::memcpy(out.bytes(), x.bytes(), out.nbytes());
    return;
  }
  // The kept part of the input: [first[d], last[d]) along each dim, which lands at
  // first[d] + before[d] in the output.
  IntList before = s, first = s, last = s;
  for (int d = 0; d < rank; ++d) before[d] = 0;
  for (int k = 0; k < pads.size(); k += 2) before[rank - 1 - k / 2] = pads[k];
  for (int d = 0; d < rank; ++d) {
    first[d] = std::max<int64_t>(0, -before[d]);
    last[d] = std::min(s[d], out.shape()[d] - before[d]);
    if (first[d] >= last[d]) return;
  }
  const IntList in_strides = contiguous_strides(s);
  const IntList out_strides = contiguous_strides(out.shape());
  const size_t elem = dtype_size(x.dtype());
  const size_t run = static_cast<size_t>(last[rank - 1] - first[rank - 1]) * elem;
  IntList at = first;  // odometer over the kept input index, innermost dim fixed at first
  while (true) {
    int64_t src = 0, dst = 0;
    for (int d = 0; d < rank; ++d) {
      src += at[d] * in_strides[d];
      dst += (at[d] + before[d]) * out_strides[d];
    }
    std::memcpy(out.bytes() + static_cast<size_t>(dst) * elem,
                x.bytes() + static_cast<size_t>(src) * elem, run);
    int d = rank - 2;
    for (; d >= 0; --d) {
      if (++at[d] < last[d]) break;
      at[d] = first[d];
    }
    if (d < 0) return;
  }
}

int64_t index_at(const HostBuffer& index, int64_t i) {
  return index.dtype() == DType::kI32 ? index.data<int32_t>()[i] : index.data<int64_t>()[i];
}

int64_t clamp_index(int64_t i, int64_t dim) { return std::clamp<int64_t>(i, 0, dim - 1); }

void embedding(const HostBuffer& w, const HostBuffer& index, HostBuffer& out) {
  const size_t row = static_cast<size_t>(w.shape()[1]) * dtype_size(w.dtype());
  if (row == 0) return;
  for (int64_t i = 0; i < index.numel(); ++i) {
    const int64_t r = clamp_index(index_at(index, i), w.shape()[0]);
    std::memcpy(out.bytes() + static_cast<size_t>(i) * row, w.bytes() + static_cast<size_t>(r) * row,
                row);
  }
}

void gather(const HostBuffer& x, const HostBuffer& index, int axis, HostBuffer& out) {
  if (out.numel() == 0) return;
  const Shape& is = index.shape();
  const int rank = is.rank();
  const IntList strides = contiguous_strides(x.shape());
  const int64_t dim = x.shape()[axis];
  dispatch_cpu_dtype(x.dtype(), [&]<typename T>() {
    const T* src = x.data<T>();
    T* dst = out.data<T>();
    IntList at = is;
    for (int d = 0; d < rank; ++d) at[d] = 0;
    int64_t base = 0;  // offset of `at` in x, without the axis term
    for (int64_t i = 0; i < out.numel(); ++i) {
      dst[i] = src[base + clamp_index(index_at(index, i), dim) * strides[axis]];
      for (int d = rank - 1; d >= 0; --d) {
        if (++at[d] < is[d]) {
          if (d != axis) base += strides[d];
          break;
        }
        if (d != axis) base -= (is[d] - 1) * strides[d];
        at[d] = 0;
      }
    }
  });
}

void index_select(const HostBuffer& x, const HostBuffer& index, int axis, HostBuffer& out) {
  const AxisSplit split = split_at_axis(x.shape(), axis);
  const int64_t picks = index.numel();
  const size_t inner = static_cast<size_t>(split.inner) * dtype_size(x.dtype());
  if (inner == 0) return;
  for (int64_t o = 0; o < split.outer; ++o) {
    for (int64_t j = 0; j < picks; ++j) {
      const int64_t r = clamp_index(index_at(index, j), split.len);
      std::memcpy(out.bytes() + static_cast<size_t>(o * picks + j) * inner,
                  x.bytes() + static_cast<size_t>(o * split.len + r) * inner, inner);
    }
  }
}

}  // namespace

// The reference's element formula (capture/ops/random.h) over ranges of the mask, one per thread.
void dropout_mask(const HostBuffer& seed, std::span<const AttrValue> attrs, HostBuffer& out) {
  const DropoutMaskAttrs a(attrs);
  const int64_t s = seed.dtype() == DType::kI32 ? seed.data<int32_t>()[0] : seed.data<int64_t>()[0];
  const uint64_t stream = dropout_stream(s, a.salt());
  float* p = out.data<float>();
  const double drop = a.p();
  // Two rounds of the 64-bit mixer per element: count it as a few elementwise ops.
  parallel_for(out.numel(), 8 * out.numel(), [&](int64_t begin, int64_t end) {
    fill_dropout_mask(p, stream, drop, begin, end);
  });
}

namespace {

// rand_uniform and rand_normal: the Philox blocks of capture/ops/random.h over ranges of the
// output, one range per thread; any split gives the reference's per-element bits.
void rand_fill(OpKind op, const HostBuffer& seed, std::span<const AttrValue> attrs, HostBuffer& out) {
  const RandStream s = rand_stream(seed, RandAttrs(attrs).stream());
  float* p = out.data<float>();
  const bool normal = op == OpKind::kRandNormal;
  // Work in elementwise ops: a quarter of a Philox block per element, and the normals' log, sqrt
  // and cos or sin.
  parallel_for(out.numel(), (normal ? 16 : 8) * out.numel(), [&](int64_t begin, int64_t end) {
    if (normal) fill_rand_normal(p, s, begin, end);
    else fill_rand_uniform(p, s, begin, end);
  });
}

}  // namespace

bool run_nn_layer(OpKind op, std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs,
                  HostBuffer& out) {
  switch (op) {
    case OpKind::kConv2d:
      return conv2d(in, attrs, out);
    case OpKind::kLinear:
      return linear(in, out);
    case OpKind::kMaxPool2d:
      max_pool2d(*in[0], attrs, out);
      return true;
    case OpKind::kAvgPool2d:
      avg_pool2d(*in[0], attrs, out);
      return true;
    case OpKind::kAdaptiveAvgPool2d:
      adaptive_avg_pool2d(*in[0], out);
      return true;
    case OpKind::kFlatten:
    case OpKind::kDropout:
      if (out.nbytes() > 0) std::memcpy(out.bytes(), in[0]->bytes(), out.nbytes());
      return true;
    case OpKind::kPad:
      pad(*in[0], attrs, out);
      return true;
    case OpKind::kEmbedding:
      embedding(*in[0], *in[1], out);
      return true;
    case OpKind::kGather:
      gather(*in[0], *in[1], static_cast<int>(AxisAttrs(attrs).axis()), out);
      return true;
    case OpKind::kIndexSelect:
      index_select(*in[0], *in[1], static_cast<int>(AxisAttrs(attrs).axis()), out);
      return true;
    case OpKind::kDropoutMask:
      dropout_mask(*in[0], attrs, out);
      return true;
    case OpKind::kRandUniform:
    case OpKind::kRandNormal:
      rand_fill(op, *in[0], attrs, out);
      return true;
    default:
      return false;
  }
}

}  // namespace tracecache::cpu
