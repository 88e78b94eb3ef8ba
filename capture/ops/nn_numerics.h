// Scalar numerics of the non-elementwise nn ops (batch_norm, layer_norm, softmax, log_softmax,
// scaled_dot_product_attention): the per-row and per-element formulas, shared by the reference
// kernels (capture/ops/reference_nn_ops.cc) and the cpu kernels (replay/backends/cpu/cpu_nn_ops.cc) so that both
// round the same way. Each kernel adds only its loops; as long as it also keeps the documented
// accumulation order (sequential, in increasing index), its results are the reference's bits.
// docs/ops.md states the same formulas in prose.
//
// Pure inline functions; thread-safe.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace tracecache::nn {

// ---- batch_norm ----------------------------------------------------------------------------

// One channel's constants: y = (x - mean) * scale + bias in double, scale = weight / sqrt(var + eps).
struct BatchNormChannel {
  double mean, scale, bias;
};

inline BatchNormChannel batch_norm_channel(float mean, float var, float weight, float bias, double eps) {
  const double inv_std = 1.0 / std::sqrt(static_cast<double>(var) + eps);
  return {static_cast<double>(mean), static_cast<double>(weight) * inv_std, static_cast<double>(bias)};
}

inline float batch_norm_apply(float x, const BatchNormChannel& c) {
  return static_cast<float>((static_cast<double>(x) - c.mean) * c.scale + c.bias);
}

// ---- layer_norm ----------------------------------------------------------------------------

// Row statistics: mean = (sum x) / n and the biased variance (sum (x - mean)^2) / n, both sums
// in double in increasing index (two passes), and rstd = 1 / sqrt(var + eps).
struct RowStats {
  double mean, rstd;
};

inline double layer_norm_rstd(double sum_sq_dev, int64_t n, double eps) {
  return 1.0 / std::sqrt(sum_sq_dev / static_cast<double>(n) + eps);
}

// Mean and reciprocal standard deviation (biased variance) of row[0, n), two passes in double
// in increasing index: what both the reference and the cpu layer_norm use, so they agree bitwise.
inline RowStats layer_norm_row_stats(const float* row, int64_t n, double eps) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(row[i]);
  const double mean = sum / static_cast<double>(n);
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(row[i]) - mean;
    sq += d * d;
  }
  return {mean, layer_norm_rstd(sq, n, eps)};
}

// (x - mean) * rstd, then * weight and + bias when present, in double, rounded once.
inline float layer_norm_apply(float x, const RowStats& s, const float* weight, const float* bias,
                              int64_t i) {
  double y = (static_cast<double>(x) - s.mean) * s.rstd;
  if (weight != nullptr) y *= static_cast<double>(weight[i]);
  if (bias != nullptr) y += static_cast<double>(bias[i]);
  return static_cast<float>(y);
}

// ---- softmax, log_softmax ------------------------------------------------------------------

// One step of the row maximum: NaN wins and stays (every comparison with NaN is false).
// Start from -infinity.
template <typename T>
inline T max_step(T acc, T x) {
  return std::isnan(x) ? x : x > acc ? x : acc;
}

// exp(x - max) in double: the softmax numerator; summed in double in increasing index.
inline double softmax_exp(float x, float max) {
  return std::exp(static_cast<double>(x) - static_cast<double>(max));
}

inline float softmax_finish(double e, double sum) { return static_cast<float>(e / sum); }

// (x - max) - log(sum), in double, rounded once.
inline float log_softmax_finish(float x, float max, double log_sum) {
  return static_cast<float>(static_cast<double>(x) - static_cast<double>(max) - log_sum);
}

// ---- scaled_dot_product_attention ----------------------------------------------------------

// The `scale` attribute resolved: 0 means 1 / sqrt(E) (infinite for E = 0, as in PyTorch).
inline double attention_scale(double scale, int64_t e) {
  return scale != 0 ? scale : 1.0 / std::sqrt(static_cast<double>(e));
}

// Causal masking: query i sees keys 0..i (top-left aligned, as torch.ones(Lq, Lk).tril()).
inline bool causal_masked(int64_t query, int64_t key) { return key > query; }

// Offset of batch `b`'s [Lq, Lk] block in an attention mask whose strides, broadcast to the
// scores' shape [..., Lq, Lk] (`rank` dims), are `mask_strides` (0 along broadcast dims).
template <typename ShapeT, typename StridesT>
inline int64_t mask_block_offset(int64_t b, int rank, const ShapeT& scores_shape, const StridesT& mask_strides) {
  int64_t offset = 0;
  for (int d = rank - 3; d >= 0; --d) {
    offset += b % scores_shape[d] * mask_strides[d];
    b /= scores_shape[d];
  }
  return offset;
}

}  // namespace tracecache::nn
