// Reference kernels of the nn layers (capture/trace/nn.h): plain loops over output elements in
// row-major order, each output computed on its own from the definition in docs/ops.md, over the
// windows of capture/ops/nn_windows.h.
//   - conv2d, linear: exact products summed in double (bias first, then the products in
//     (channel, kernel row, kernel column) or feature order), rounded once to f32;
//   - max_pool2d: the window's maximum, NaN propagating (PyTorch's `v > max || isnan(v)`);
//   - avg_pool2d, adaptive_avg_pool2d: the window sum in double, divided in double, rounded once;
//   - embedding, gather, index_select: an index outside [0, dim) is clamped into it;
//   - dropout_mask, rand_uniform, rand_normal: the per-element formulas of capture/ops/random.h.
#include <algorithm>
#include <cassert>
#include <cstring>

#include "capture/ops/attr_views.h"
#include "capture/ops/elementwise.h"
#include "capture/ops/nn_windows.h"
#include "capture/ops/random.h"
#include "capture/ops/reference_kernels.h"

namespace tracecache::ref {

namespace {

// Element i of an i32 or i64 index buffer.
int64_t index_at(const HostBuffer& index, int64_t i) {
  return index.dtype() == DType::kI32 ? index.data<int32_t>()[i] : index.data<int64_t>()[i];
}

// `i` clamped into [0, dim). REQUIRES: dim > 0 (the inference rules reject lookups into empty
// dims).
int64_t clamp_index(int64_t i, int64_t dim) { return std::clamp<int64_t>(i, 0, dim - 1); }

// The row-major multi-index of position i in `shape`.
IntList unravel(int64_t i, const Shape& shape) {
  IntList index = shape;
  for (int d = shape.rank() - 1; d >= 0; --d) {
    index[d] = i % shape[d];
    i /= shape[d];
  }
  return index;
}

void copy_bytes(std::span<const HostBuffer* const> in, HostBuffer& out) {
  assert(in[0]->nbytes() == out.nbytes());
  if (out.nbytes() > 0) std::memcpy(out.bytes(), in[0]->bytes(), out.nbytes());
}

}  // namespace

void conv2d(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  const float* bias = in.size() == 3 ? in[2]->data<float>() : nullptr;
  const nn::ConvShape s = nn::conv_shape(in[0]->shape(), in[1]->shape(), out.shape(), Conv2dAttrs(attrs));
  const nn::Window2d win = s.window();
  const float* px = in[0]->data<float>();
  const float* pw = in[1]->data<float>();
  float* po = out.data<float>();
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t o = 0; o < s.o; ++o) {
      const int64_t first_channel = o / s.out_per_group() * s.cg;
      for (int64_t y = 0; y < s.oh; ++y) {
        for (int64_t z = 0; z < s.ow; ++z) {
          double acc = bias ? static_cast<double>(bias[o]) : 0.0;
          for (int64_t c = 0; c < s.cg; ++c) {
            const float* plane = px + (n * s.c + first_channel + c) * s.h * s.w;
            const float* taps = pw + (o * s.cg + c) * s.kh * s.kw;
            nn::for_each_window_cell(win, y, z, [&](int64_t i, int64_t j, int64_t iy, int64_t iz) {
              acc += static_cast<double>(plane[iy * s.w + iz]) * static_cast<double>(taps[i * s.kw + j]);
            });
          }
          po[((n * s.o + o) * s.oh + y) * s.ow + z] = static_cast<float>(acc);
        }
      }
    }
  }
}

void max_pool2d(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs,
                HostBuffer& out) {
  const HostBuffer& x = *in[0];
  const nn::Window2d win = nn::pool_window(MaxPool2dAttrs(attrs), x.shape(), out.shape());
  for (int64_t p = 0; p < win.planes; ++p) {
    const float* plane = x.data<float>() + p * win.in_plane();
    float* dst = out.data<float>() + p * win.out_plane();
    for (int64_t y = 0; y < win.rows.out; ++y) {
      for (int64_t z = 0; z < win.cols.out; ++z)
        dst[y * win.cols.out + z] = nn::window_max(plane, win, y, z).value;
    }
  }
}

void avg_pool2d(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs,
                HostBuffer& out) {
  const HostBuffer& x = *in[0];
  const AvgPool2dAttrs a(attrs);
  const nn::Window2d win = nn::pool_window(a, x.shape(), out.shape());
  for (int64_t p = 0; p < win.planes; ++p) {
    const float* plane = x.data<float>() + p * win.in_plane();
    float* dst = out.data<float>() + p * win.out_plane();
    for (int64_t y = 0; y < win.rows.out; ++y) {
      const nn::AvgWindow r = nn::avg_window(win.rows, y);
      for (int64_t z = 0; z < win.cols.out; ++z) {
        const nn::AvgWindow c = nn::avg_window(win.cols, z);
        float& o = dst[y * win.cols.out + z];
        if (r.cells.empty() || c.cells.empty()) {
          o = 0.0f;
          continue;
        }
        const double sum = nn::window_sum(plane, win.cols.size, r.cells, c.cells);
        o = static_cast<float>(sum / static_cast<double>(nn::avg_divisor(r, c, a.count_include_pad())));
      }
    }
  }
}

void adaptive_avg_pool2d(std::span<const HostBuffer* const> in, std::span<const AttrValue>,
                         HostBuffer& out) {
  const HostBuffer& x = *in[0];
  const int64_t planes = x.shape()[0] * x.shape()[1], h = x.shape()[2], w = x.shape()[3];
  const int64_t oh = out.shape()[2], ow = out.shape()[3];
  for (int64_t p = 0; p < planes; ++p) {
    const float* plane = x.data<float>() + p * h * w;
    for (int64_t y = 0; y < oh; ++y) {
      const nn::Interval rows = nn::adaptive_window(y, oh, h);
      for (int64_t z = 0; z < ow; ++z) {
        const nn::Interval cols = nn::adaptive_window(z, ow, w);
        out.data<float>()[(p * oh + y) * ow + z] = static_cast<float>(
            nn::window_sum(plane, w, rows, cols) / static_cast<double>(rows.size() * cols.size()));
      }
    }
  }
}

void linear(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  const HostBuffer& w = *in[1];
  const float* bias = in.size() == 3 ? in[2]->data<float>() : nullptr;
  const int64_t n_out = w.shape()[0], n_in = w.shape()[1];
  const int64_t rows = n_out == 0 ? 0 : out.numel() / n_out;
  const float* px = in[0]->data<float>();
  const float* pw = w.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n_out; ++j) {
      double acc = bias ? static_cast<double>(bias[j]) : 0.0;
      for (int64_t k = 0; k < n_in; ++k) {
        acc += static_cast<double>(px[r * n_in + k]) * static_cast<double>(pw[j * n_in + k]);
      }
      out.data<float>()[r * n_out + j] = static_cast<float>(acc);
    }
  }
}

void flatten(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  copy_bytes(in, out);
}

void pad(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  const HostBuffer& x = *in[0];
  const PadAttrs a(attrs);
  const IntList& pads = a.pads();
  const Shape& s = x.shape();
  // before[d]: how far dim d's input starts into the output (negative: cropped).
  IntList before = s;
  for (int64_t& b : before) b = 0;
  for (int k = 0; k < pads.size(); k += 2) before[s.rank() - 1 - k / 2] = pads[k];
  const IntList in_strides = contiguous_strides(s);
  const size_t elem = dtype_size(x.dtype());
  dispatch_compute_dtype(out.dtype(), [&]<typename T>() {
    const T fill = convert<T>(a.value());
    for (int64_t i = 0; i < out.numel(); ++i) {
      const IntList index = unravel(i, out.shape());
      int64_t src = 0;
      bool inside = true;
      for (int d = 0; d < s.rank() && inside; ++d) {
        const int64_t at = index[d] - before[d];
        inside = at >= 0 && at < s[d];
        src += at * in_strides[d];
      }
      if (inside) {
        std::memcpy(out.bytes() + static_cast<size_t>(i) * elem,
                    x.bytes() + static_cast<size_t>(src) * elem, elem);
      } else {
        out.data<T>()[i] = fill;
      }
    }
  });
}

void dropout(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  copy_bytes(in, out);
}

void embedding(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  const HostBuffer& w = *in[0];
  const HostBuffer& index = *in[1];
  const size_t row = static_cast<size_t>(w.shape()[1]) * dtype_size(w.dtype());
  for (int64_t i = 0; i < index.numel(); ++i) {
    const int64_t r = clamp_index(index_at(index, i), w.shape()[0]);
    if (row > 0)
      std::memcpy(out.bytes() + static_cast<size_t>(i) * row, w.bytes() + static_cast<size_t>(r) * row,
                  row);
  }
}

namespace {

// out[i] = x at out's multi-index i with its `axis` coordinate replaced by an index (clamped):
// index element i itself (gather: index has out's shape), or index[i's axis coordinate]
// (index_select: index is rank 1).
void take_along_axis(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs,
                     HostBuffer& out, bool index_per_element) {
  const HostBuffer& x = *in[0];
  const HostBuffer& index = *in[1];
  const int axis = static_cast<int>(AxisAttrs(attrs).axis());
  const IntList strides = contiguous_strides(x.shape());
  const size_t elem = dtype_size(x.dtype());
  for (int64_t i = 0; i < out.numel(); ++i) {
    IntList at = unravel(i, out.shape());
    at[axis] = clamp_index(index_at(index, index_per_element ? i : at[axis]), x.shape()[axis]);
    int64_t src = 0;
    for (int d = 0; d < x.shape().rank(); ++d) src += at[d] * strides[d];
    std::memcpy(out.bytes() + static_cast<size_t>(i) * elem, x.bytes() + static_cast<size_t>(src) * elem,
                elem);
  }
}

}  // namespace

void gather(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  take_along_axis(in, attrs, out, /*index_per_element=*/true);
}

void index_select(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs,
                  HostBuffer& out) {
  take_along_axis(in, attrs, out, /*index_per_element=*/false);
}

// The seed is an i32 or i64 scalar: its value, sign-extended, selects the stream.
void dropout_mask(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  const DropoutMaskAttrs a(attrs);
  const int64_t seed = index_at(*in[0], 0);
  fill_dropout_mask(out.data<float>(), dropout_stream(seed, a.salt()), a.p(), 0, out.numel());
}

void rand_uniform(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  const RandStream s = rand_stream(*in[0], RandAttrs(attrs).stream());
  float* p = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) p[i] = rand_uniform_at(s, i);
}

void rand_normal(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  const RandStream s = rand_stream(*in[0], RandAttrs(attrs).stream());
  float* p = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) p[i] = rand_normal_at(s, i);
}

}  // namespace tracecache::ref
