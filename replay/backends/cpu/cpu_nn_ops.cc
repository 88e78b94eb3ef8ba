// The cpu kernels of batch_norm, layer_norm, softmax, log_softmax and
// scaled_dot_product_attention. See cpu_nn_ops.h for the numerics.
#include "replay/backends/cpu/cpu_nn_ops.h"

#include <cblas.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <limits>
#include <vector>

#include "capture/ops/attr_views.h"
#include "capture/ops/nn_numerics.h"
#include "replay/backends/cpu/cpu_kernels.h"
#include "replay/backends/cpu/cpu_threads.h"
#include "replay/backends/cpu/vector_math.h"

namespace tracecache::cpu {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// ---- batch_norm -------------------------------------------------------------------------------

void batch_norm(std::span<const HostBuffer* const> in, double eps, HostBuffer& out) {
  const Shape& s = in[0]->shape();
  const int64_t channels = s[1];
  int64_t inner = 1;
  for (int d = 2; d < s.rank(); ++d) inner *= s[d];
  std::vector<nn::BatchNormChannel> ch(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) {
    ch[static_cast<size_t>(c)] =
        nn::batch_norm_channel(in[1]->data<float>()[c], in[2]->data<float>()[c],
                               in[3]->data<float>()[c], in[4]->data<float>()[c], eps);
  }
  const float* x = in[0]->data<float>();
  float* o = out.data<float>();
  // One plane (n, c) of `inner` elements per item.
  parallel_for(s[0] * channels, out.numel(), [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      batch_norm_f32(x + plane * inner, ch[static_cast<size_t>(plane % channels)], o + plane * inner, inner);
    }
  });
}

// ---- layer_norm -------------------------------------------------------------------------------

void layer_norm(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs,
                HostBuffer& out) {
  const Shape& s = in[0]->shape();
  const LayerNormAttrs a(attrs);
  int64_t n = 1;
  for (int d = s.rank() - static_cast<int>(a.normalized_dims()); d < s.rank(); ++d) n *= s[d];
  if (n == 0) return;
  const int64_t rows = out.numel() / n;
  const float* weight = in.size() > 1 ? in[1]->data<float>() : nullptr;
  const float* bias = in.size() > 2 ? in[2]->data<float>() : nullptr;
  const double eps = a.eps();
  const float* x = in[0]->data<float>();
  float* o = out.data<float>();
  parallel_for(rows, out.numel(), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = x + r * n;
      const nn::RowStats stats = nn::layer_norm_row_stats(row, n, eps);
      float* po = o + r * n;
      // The affine cases apart, so each loop has no per-element branch.
      if (weight && bias) {
        for (int64_t i = 0; i < n; ++i) po[i] = nn::layer_norm_apply(row[i], stats, weight, bias, i);
      } else if (weight) {
        for (int64_t i = 0; i < n; ++i) po[i] = nn::layer_norm_apply(row[i], stats, weight, nullptr, i);
      } else {
        for (int64_t i = 0; i < n; ++i) po[i] = nn::layer_norm_apply(row[i], stats, nullptr, nullptr, i);
      }
    }
  });
}

// ---- softmax, log_softmax ---------------------------------------------------------------------

// Softmax (log = false) or log_softmax along `axis`.
void softmax(const HostBuffer& xb, int axis, bool log, HostBuffer& out) {
  const AxisSplit split = split_at_axis(xb.shape(), axis);
  const int64_t outer = split.outer, len = split.len, inner = split.inner;
  if (out.numel() == 0) return;
  const float* x = xb.data<float>();
  float* o = out.data<float>();
  if (inner == 1) {
    // Contiguous rows: max, then the exps (kept for softmax) and their sum, then the outputs.
    parallel_for(outer, out.numel(), [&](int64_t begin, int64_t end) {
      std::vector<double> e(log ? 0 : static_cast<size_t>(len));
      for (int64_t r = begin; r < end; ++r) {
        const float* row = x + r * len;
        float* po = o + r * len;
        float m = kNegInf;
        for (int64_t i = 0; i < len; ++i) m = nn::max_step(m, row[i]);
        double sum = 0;
        if (log) {
          for (int64_t i = 0; i < len; ++i) sum += nn::softmax_exp(row[i], m);
          const double log_sum = std::log(sum);
          for (int64_t i = 0; i < len; ++i) po[i] = nn::log_softmax_finish(row[i], m, log_sum);
        } else {
          for (int64_t i = 0; i < len; ++i) e[static_cast<size_t>(i)] = nn::softmax_exp(row[i], m);
          for (int64_t i = 0; i < len; ++i) sum += e[static_cast<size_t>(i)];
          for (int64_t i = 0; i < len; ++i) po[i] = nn::softmax_finish(e[static_cast<size_t>(i)], sum);
        }
      }
    });
    return;
  }
  // The axis is not the last: a block of neighbouring columns advances together through the
  // axis (contiguous reads), each column accumulating in increasing axis order.
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (inner + kBlock - 1) / kBlock;
  parallel_for(outer * blocks, out.numel(), [&](int64_t begin, int64_t end) {
    std::array<float, kBlock> m;
    std::array<double, kBlock> sum;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t a = item / blocks, c0 = item % blocks * kBlock;
      const size_t cn = static_cast<size_t>(std::min(kBlock, inner - c0));
      const float* base = x + a * len * inner + c0;
      float* obase = o + a * len * inner + c0;
      std::fill_n(m.begin(), cn, kNegInf);
      std::fill_n(sum.begin(), cn, 0.0);
      for (int64_t r = 0; r < len; ++r) {
        const float* row = base + r * inner;
        for (size_t c = 0; c < cn; ++c) m[c] = nn::max_step(m[c], row[c]);
      }
      for (int64_t r = 0; r < len; ++r) {
        const float* row = base + r * inner;
        for (size_t c = 0; c < cn; ++c) sum[c] += nn::softmax_exp(row[c], m[c]);
      }
      if (log) {
        for (size_t c = 0; c < cn; ++c) sum[c] = std::log(sum[c]);
      }
      for (int64_t r = 0; r < len; ++r) {
        const float* row = base + r * inner;
        float* po = obase + r * inner;
        for (size_t c = 0; c < cn; ++c) {
          po[c] = log ? nn::log_softmax_finish(row[c], m[c], sum[c])
                      : nn::softmax_finish(nn::softmax_exp(row[c], m[c]), sum[c]);
        }
      }
    }
  });
}

// ---- scaled_dot_product_attention -------------------------------------------------------------

bool attention(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs,
               HostBuffer& out) {
  const Shape& qs = in[0]->shape();
  const int rank = qs.rank();
  const int64_t lq = qs[rank - 2], e = qs[rank - 1];
  const int64_t lk = in[1]->shape()[rank - 2], ev = in[2]->shape()[rank - 1];
  constexpr int64_t kMaxDim = INT_MAX;
  if (lq > kMaxDim || lk > kMaxDim || e > kMaxDim || ev > kMaxDim) return false;
  float* o = out.data<float>();
  if (out.numel() == 0) return true;
  if (lk == 0) {  // no keys: every output is an empty weighted sum
    std::fill_n(o, out.numel(), 0.0f);
    return true;
  }
  int64_t batches = 1;
  for (int d = 0; d < rank - 2; ++d) batches *= qs[d];
  const AttentionAttrs a(attrs);
  const bool causal = a.causal();
  const float scale = static_cast<float>(nn::attention_scale(a.scale(), e));
  Shape scores_shape = qs;
  scores_shape[rank - 1] = lk;
  const HostBuffer* mask = in.size() > 3 ? in[3] : nullptr;
  const IntList mask_strides = mask ? broadcast_strides(mask->shape(), scores_shape) : IntList{};
  const float* q = in[0]->data<float>();
  const float* k = in[1]->data<float>();
  const float* v = in[2]->data<float>();
  const int m_ = static_cast<int>(lq), n_ = static_cast<int>(lk), e_ = static_cast<int>(e),
            ev_ = static_cast<int>(ev);
  // Batches (images x heads) split into one group per thread, each group with its own scores
  // (allocated here, before the team starts: an allocation failure is an exception for the
  // caller, not a terminate inside the team). Inside the team each sgemm runs on its caller
  // alone; with one group (one thread, or one batch) OpenBLAS threads it. Either way a batch is
  // computed the same way for a given thread count and shape (the matmul bound across counts).
  // Work: both products and the softmax (in double: the dims are only bounded one by one).
  const bool split = static_cast<double>(batches) * static_cast<double>(lq) * static_cast<double>(lk) *
                         static_cast<double>(e + ev + 1) >= static_cast<double>(kParallelThreshold);
  const int64_t groups = split ? std::max<int64_t>(1, std::min<int64_t>(threads(), batches)) : 1;
  std::vector<std::vector<float>> scores_of(static_cast<size_t>(groups), std::vector<float>(static_cast<size_t>(lq * lk)));
  std::vector<std::vector<double>> sums_of(static_cast<size_t>(groups), std::vector<double>(static_cast<size_t>(lq)));
  auto group = [&](int64_t gi) {
    const int64_t begin = batches * gi / groups, end = batches * (gi + 1) / groups;
    std::vector<float>& scores = scores_of[static_cast<size_t>(gi)];
    std::vector<double>& row_sum = sums_of[static_cast<size_t>(gi)];
    for (int64_t b = begin; b < end; ++b) {
      float* s = scores.data();
      if (e == 0) {
        std::fill(scores.begin(), scores.end(), 0.0f);
      } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m_, n_, e_, 1.0f, q + b * lq * e, e_,
                    k + b * lk * e, e_, 0.0f, s, n_);
      }
      int64_t mask_base = 0;
      if (mask) mask_base = nn::mask_block_offset(b, rank, scores_shape, mask_strides);
      for (int64_t i = 0; i < lq; ++i) {
        float* row = s + i * lk;
        for (int64_t j = 0; j < lk; ++j) row[j] *= scale;
        if (mask) {
          const float* mrow = mask->data<float>() + mask_base + i * mask_strides[rank - 2];
          const int64_t step = mask_strides[rank - 1];
          for (int64_t j = 0; j < lk; ++j) row[j] += mrow[j * step];
        }
        if (causal) {
          for (int64_t j = i + 1; j < lk; ++j) row[j] = kNegInf;
        }
        float m = kNegInf;
        for (int64_t j = 0; j < lk; ++j) m = nn::max_step(m, row[j]);
        double sum = 0;
        for (int64_t j = 0; j < lk; ++j) {
          row[j] = std::exp(row[j] - m);
          sum += static_cast<double>(row[j]);
        }
        row_sum[static_cast<size_t>(i)] = sum;
      }
      float* ob = o + b * lq * ev;
      if (ev > 0) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m_, ev_, n_, 1.0f, s, n_,
                    v + b * lk * ev, ev_, 0.0f, ob, ev_);
      }
      for (int64_t i = 0; i < lq; ++i) {
        const double sum = row_sum[static_cast<size_t>(i)];
        float* orow = ob + i * ev;
        for (int64_t c = 0; c < ev; ++c) orow[c] = static_cast<float>(static_cast<double>(orow[c]) / sum);
      }
    }
  };
  if (groups == 1) {
    group(0);
  } else {
    run_chunks(groups, group);
  }
  return true;
}

}  // namespace

bool run_nn_op(OpKind op, std::span<const HostBuffer* const> inputs,
               std::span<const AttrValue> attrs, HostBuffer& out) {
  switch (op) {
    case OpKind::kBatchNorm:
      batch_norm(inputs, BatchNormAttrs(attrs).eps(), out);
      return true;
    case OpKind::kLayerNorm:
      layer_norm(inputs, attrs, out);
      return true;
    case OpKind::kSoftmax:
    case OpKind::kLogSoftmax:
      softmax(*inputs[0], static_cast<int>(AxisAttrs(attrs).axis()), op == OpKind::kLogSoftmax, out);
      return true;
    case OpKind::kScaledDotProductAttention:
      return attention(inputs, attrs, out);
    default:
      return false;
  }
}

}  // namespace tracecache::cpu
