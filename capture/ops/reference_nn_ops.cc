// Reference kernels of the non-elementwise nn ops: batch_norm, layer_norm, softmax,
// log_softmax, scaled_dot_product_attention. Plain index loops around the formulas of
// capture/ops/nn_numerics.h; every sum runs in double in increasing index (docs/ops.md).
#include <cmath>
#include <limits>
#include <vector>

#include "capture/ops/attr_views.h"
#include "capture/ops/nn_numerics.h"
#include "capture/ops/reference_kernels.h"

namespace tracecache::ref {

void batch_norm(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  const HostBuffer& x = *in[0];
  const int64_t batch = x.shape()[0], channels = x.shape()[1];
  int64_t inner = 1;
  for (int d = 2; d < x.shape().rank(); ++d) inner *= x.shape()[d];
  const float* px = x.data<float>();
  float* o = out.data<float>();
  for (int64_t c = 0; c < channels; ++c) {
    const nn::BatchNormChannel ch =
        nn::batch_norm_channel(in[1]->data<float>()[c], in[2]->data<float>()[c],
                               in[3]->data<float>()[c], in[4]->data<float>()[c],
                               BatchNormAttrs(attrs).eps());
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t at = (n * channels + c) * inner + i;
        o[at] = nn::batch_norm_apply(px[at], ch);
      }
    }
  }
}

void layer_norm(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  const HostBuffer& x = *in[0];
  const int rank = x.shape().rank();
  const LayerNormAttrs a(attrs);
  int64_t n = 1;
  for (int d = rank - static_cast<int>(a.normalized_dims()); d < rank; ++d) n *= x.shape()[d];
  if (n == 0) return;  // no elements at all
  const int64_t rows = x.numel() / n;
  const float* weight = in.size() > 1 ? in[1]->data<float>() : nullptr;
  const float* bias = in.size() > 2 ? in[2]->data<float>() : nullptr;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x.data<float>() + r * n;
    const nn::RowStats stats = nn::layer_norm_row_stats(row, n, a.eps());
    float* o = out.data<float>() + r * n;
    for (int64_t i = 0; i < n; ++i) o[i] = nn::layer_norm_apply(row[i], stats, weight, bias, i);
  }
}

namespace {

// Calls fn(row, stride, len) for every line of x along `axis` (row points at its first element).
template <typename Fn>
void for_each_line(const HostBuffer& x, int axis, HostBuffer& out, Fn fn) {
  const auto [outer, len, inner] = split_at_axis(x.shape(), axis);
  for (int64_t a = 0; a < outer; ++a) {
    for (int64_t c = 0; c < inner; ++c) {
      const int64_t first = a * len * inner + c;
      fn(x.data<float>() + first, out.data<float>() + first, inner, len);
    }
  }
}

float line_max(const float* row, int64_t stride, int64_t len) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < len; ++r) m = nn::max_step(m, row[r * stride]);
  return m;
}

double line_exp_sum(const float* row, int64_t stride, int64_t len, float m) {
  double sum = 0;
  for (int64_t r = 0; r < len; ++r) sum += nn::softmax_exp(row[r * stride], m);
  return sum;
}

}  // namespace

void softmax(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  for_each_line(*in[0], static_cast<int>(AxisAttrs(attrs).axis()), out,
                [](const float* row, float* o, int64_t stride, int64_t len) {
                  const float m = line_max(row, stride, len);
                  const double sum = line_exp_sum(row, stride, len, m);
                  for (int64_t r = 0; r < len; ++r) {
                    o[r * stride] = nn::softmax_finish(nn::softmax_exp(row[r * stride], m), sum);
                  }
                });
}

void log_softmax(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  for_each_line(*in[0], static_cast<int>(AxisAttrs(attrs).axis()), out,
                [](const float* row, float* o, int64_t stride, int64_t len) {
                  const float m = line_max(row, stride, len);
                  const double log_sum = std::log(line_exp_sum(row, stride, len, m));
                  for (int64_t r = 0; r < len; ++r) {
                    o[r * stride] = nn::log_softmax_finish(row[r * stride], m, log_sum);
                  }
                });
}

void scaled_dot_product_attention(std::span<const HostBuffer* const> in,
                                  std::span<const AttrValue> attrs, HostBuffer& out) {
  const Shape& qs = in[0]->shape();
  const int rank = qs.rank();
  const int64_t lq = qs[rank - 2], e = qs[rank - 1];
  const int64_t lk = in[1]->shape()[rank - 2], ev = in[2]->shape()[rank - 1];
  int64_t batches = 1;
  for (int d = 0; d < rank - 2; ++d) batches *= qs[d];
  const AttentionAttrs a(attrs);
  const bool causal = a.causal();
  const double scale = nn::attention_scale(a.scale(), e);
  // The mask read as if broadcast to the scores' shape [..., Lq, Lk].
  Shape scores_shape = qs;
  scores_shape[rank - 1] = lk;
  const HostBuffer* mask = in.size() > 3 ? in[3] : nullptr;
  const IntList mask_strides = mask ? broadcast_strides(mask->shape(), scores_shape) : IntList{};
  const float* q = in[0]->data<float>();
  const float* k = in[1]->data<float>();
  const float* v = in[2]->data<float>();
  float* o = out.data<float>();
  std::vector<double> s(static_cast<size_t>(lk));
  for (int64_t b = 0; b < batches; ++b) {
    // Offset of this batch's [Lq, Lk] block in the mask.
    int64_t mask_base = 0;
    if (mask) mask_base = nn::mask_block_offset(b, rank, scores_shape, mask_strides);
    for (int64_t i = 0; i < lq; ++i) {
      const float* qi = q + (b * lq + i) * e;
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < lk; ++j) {
        const float* kj = k + (b * lk + j) * e;
        double dot = 0;
        for (int64_t p = 0; p < e; ++p) dot += static_cast<double>(qi[p]) * static_cast<double>(kj[p]);
        double sj = dot * scale;
        if (mask) {
          sj += static_cast<double>(mask->data<float>()[mask_base + i * mask_strides[rank - 2] +
                                                       j * mask_strides[rank - 1]]);
        }
        if (causal && nn::causal_masked(i, j)) sj = -std::numeric_limits<double>::infinity();
        s[static_cast<size_t>(j)] = sj;
        m = nn::max_step(m, sj);
      }
      double sum = 0;
      for (int64_t j = 0; j < lk; ++j) {
        double& p = s[static_cast<size_t>(j)];
        p = std::exp(p - m);
        sum += p;
      }
      for (int64_t c = 0; c < ev; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < lk; ++j) {
          acc += s[static_cast<size_t>(j)] * static_cast<double>(v[(b * lk + j) * ev + c]);
        }
        // Lk = 0: an empty weighted sum is 0 (not 0 / 0).
        o[(b * lq + i) * ev + c] = lk == 0 ? 0.0f : static_cast<float>(acc / sum);
      }
    }
  }
}

}  // namespace tracecache::ref
