// Test helper: the error bound of the cpu scaled_dot_product_attention (BLAS, f32) against the
// reference (double), as documented in replay/backends/cpu/cpu_nn_ops.h. Per output element (b, i, c):
//   |cpu - ref| <= 2^-24 * ((Lk + 8) + 4 * (E + 4) * A) * V  +  2^-23 * |ref|  +  denorm_min
// with A = max over the keys j that query i sees of (|scale| * sum_e |q_ie k_je| + |mask_ij|)
// and V = max over those keys of |v_jc|. (A first-order bound: fine for the moderate inputs
// the tests use.) A NaN in the reference must be a NaN in the cpu result.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "capture/core/buffer.h"
#include "capture/ops/nn_numerics.h"

namespace tracecache::testing {

inline ::testing::AssertionResult within_attention_bound(const HostBuffer& got, const HostBuffer& want,
                                                         const HostBuffer& q, const HostBuffer& k,
                                                         const HostBuffer& v, const HostBuffer* mask,
                                                         bool causal, double scale_attr) {
  const Shape& qs = q.shape();
  const int rank = qs.rank();
  const int64_t lq = qs[rank - 2], e = qs[rank - 1];
  const int64_t lk = k.shape()[rank - 2], ev = v.shape()[rank - 1];
  int64_t batches = 1;
  for (int d = 0; d < rank - 2; ++d) batches *= qs[d];
  const double scale = std::fabs(nn::attention_scale(scale_attr, e));
  Shape scores_shape = qs;
  scores_shape[rank - 1] = lk;
  const IntList ms = mask ? broadcast_strides(mask->shape(), scores_shape) : IntList{};
  for (int64_t b = 0; b < batches; ++b) {
    int64_t mask_base = 0, rem = b;
    for (int d = rank - 3; d >= 0 && mask; --d) {
      mask_base += rem % scores_shape[d] * ms[d];
      rem /= scores_shape[d];
    }
    for (int64_t i = 0; i < lq; ++i) {
      for (int64_t c = 0; c < ev; ++c) {
        double a = 0, vmax = 0;
        for (int64_t j = 0; j < lk; ++j) {
          if (causal && nn::causal_masked(i, j)) continue;
          double m = mask ? mask->data<float>()[mask_base + i * ms[rank - 2] + j * ms[rank - 1]] : 0.0;
          if (std::isinf(m) && m < 0) continue;
          double dot = 0;
          for (int64_t p = 0; p < e; ++p) {
            dot += std::fabs(static_cast<double>(q.data<float>()[(b * lq + i) * e + p]) *
                             k.data<float>()[(b * lk + j) * e + p]);
          }
          a = std::max(a, scale * dot + std::fabs(m));
          vmax = std::max(vmax, std::fabs(static_cast<double>(v.data<float>()[(b * lk + j) * ev + c])));
        }
        const int64_t at = (b * lq + i) * ev + c;
        const double g = got.data<float>()[at], w = want.data<float>()[at];
        if (std::isnan(w) || std::isnan(g)) {
          if (std::isnan(w) && std::isnan(g)) continue;
          return ::testing::AssertionFailure() << "element " << at << ": cpu " << g << ", reference " << w;
        }
        const double bound = 0x1.0p-24 * (static_cast<double>(lk + 8) + 4.0 * static_cast<double>(e + 4) * a) * vmax +
                             0x1.0p-23 * std::fabs(w) + std::numeric_limits<float>::denorm_min();
        if (!(std::fabs(g - w) <= bound)) {
          return ::testing::AssertionFailure() << "element " << at << ": cpu " << g << ", reference " << w
                                               << ", bound " << bound;
        }
      }
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace tracecache::testing
