// libmvec's erff, and batch_norm's formula on AVX-512 / AVX2 doubles. See vector_math.h.
#include "replay/backends/cpu/vector_math.h"

#include <immintrin.h>

#include <algorithm>

// glibc's vector-function ABI names (x86_64): N8v / N4v = 8 / 4 lanes, one vector argument;
// 'd' = AVX2, 'b' = SSE4 (libmvec picks the implementation for the CPU it runs on).
extern "C" {
__attribute__((target("avx2"))) __m256 _ZGVdN8v_erff(__m256 x);
__m128 _ZGVbN4v_erff(__m128 x);
}

namespace tracecache::cpu {

namespace {

using ErfFn = decltype(ErfVariant::fn);

// erf(in[i] * scale): the product rounded to f32 as the scalar expression would be.
__attribute__((target("avx2"))) void erf_avx2(const float* in, float scale, float* out, int64_t n) {
  const __m256 s = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _ZGVdN8v_erff(_mm256_mul_ps(_mm256_loadu_ps(in + i), s)));
  if (i < n) {
    alignas(32) float lane[8] = {};
    std::copy(in + i, in + n, lane);
    _mm256_store_ps(lane, _ZGVdN8v_erff(_mm256_mul_ps(_mm256_load_ps(lane), s)));
    std::copy(lane, lane + (n - i), out + i);
  }
}

void erf_sse(const float* in, float scale, float* out, int64_t n) {
  const __m128 s = _mm_set1_ps(scale);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(out + i, _ZGVbN4v_erff(_mm_mul_ps(_mm_loadu_ps(in + i), s)));
  if (i < n) {
    alignas(16) float lane[4] = {};
    std::copy(in + i, in + n, lane);
    _mm_store_ps(lane, _ZGVbN4v_erff(_mm_mul_ps(_mm_load_ps(lane), s)));
    std::copy(lane, lane + (n - i), out + i);
  }
}

// Asked once per process (a function-local static: safe whichever static initializer calls
// first).
bool avx2() {
  static const bool yes = (__builtin_cpu_init(), __builtin_cpu_supports("avx2") != 0);
  return yes;
}

}  // namespace

std::vector<ErfVariant> erf_variants() {
  std::vector<ErfVariant> v;
  if (avx2()) v.push_back({"avx2", erf_avx2});
  v.push_back({"sse", erf_sse});
  return v;
}

void erf_f32(const float* in, float* out, int64_t n, float scale) {
  static const ErfFn fn = erf_variants().front().fn;
  if (n > 0) fn(in, scale, out, n);
}

const char* erf_variant() { return erf_variants().front().name; }

namespace {

using BatchNormFn = decltype(BatchNormVariant::fn);

// GCC 12's AVX-512 conversion intrinsics start from _mm512_undefined_*, which its
// -Wmaybe-uninitialized reports as uninitialized once inlined (GCC bug 105593): a false positive.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// (x - mean) * scale + bias, the scalar formula's operations one by one, on 8 doubles.
__attribute__((target("avx512f"))) __m256 batch_norm8(__m256 x, __m512d mean, __m512d scale, __m512d bias) {
  const __m512d y = _mm512_add_pd(_mm512_mul_pd(_mm512_sub_pd(_mm512_cvtps_pd(x), mean), scale), bias);
  return _mm512_cvtpd_ps(y);
}

__attribute__((target("avx512f"))) void batch_norm_avx512(const float* in, const nn::BatchNormChannel& c, float* out,
                                                           int64_t n) {
  const __m512d mean = _mm512_set1_pd(c.mean), scale = _mm512_set1_pd(c.scale), bias = _mm512_set1_pd(c.bias);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, batch_norm8(_mm256_loadu_ps(in + i), mean, scale, bias));
  for (; i < n; ++i) out[i] = nn::batch_norm_apply(in[i], c);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

__attribute__((target("avx2"))) __m128 batch_norm4(__m128 x, __m256d mean, __m256d scale, __m256d bias) {
  const __m256d y = _mm256_add_pd(_mm256_mul_pd(_mm256_sub_pd(_mm256_cvtps_pd(x), mean), scale), bias);
  return _mm256_cvtpd_ps(y);
}

__attribute__((target("avx2"))) void batch_norm_avx2(const float* in, const nn::BatchNormChannel& c, float* out,
                                                      int64_t n) {
  const __m256d mean = _mm256_set1_pd(c.mean), scale = _mm256_set1_pd(c.scale), bias = _mm256_set1_pd(c.bias);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(out + i, batch_norm4(_mm_loadu_ps(in + i), mean, scale, bias));
  for (; i < n; ++i) out[i] = nn::batch_norm_apply(in[i], c);
}

void batch_norm_scalar(const float* in, const nn::BatchNormChannel& c, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = nn::batch_norm_apply(in[i], c);
}

bool avx512() {
  static const bool yes = (__builtin_cpu_init(), __builtin_cpu_supports("avx512f") != 0);
  return yes;
}

}  // namespace

std::vector<BatchNormVariant> batch_norm_variants() {
  std::vector<BatchNormVariant> v;
  if (avx512()) v.push_back({"avx512", batch_norm_avx512});
  if (avx2()) v.push_back({"avx2", batch_norm_avx2});
  v.push_back({"scalar", batch_norm_scalar});
  return v;
}

void batch_norm_f32(const float* in, const nn::BatchNormChannel& c, float* out, int64_t n) {
  static const BatchNormFn fn = batch_norm_variants().front().fn;
  if (n > 0) fn(in, c, out, n);
}

const char* batch_norm_variant() { return batch_norm_variants().front().name; }

}  // namespace tracecache::cpu
