// libmvec's erff behind one function. See vector_math.h.
#include "backends/cpu/vector_math.h"

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

using ErfFn = void (*)(const float*, float, float*, int64_t);

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

void erf_f32(const float* in, float* out, int64_t n, float scale) {
  static const ErfFn fn = avx2() ? erf_avx2 : erf_sse;
  if (n > 0) fn(in, scale, out, n);
}

const char* erf_variant() { return avx2() ? "avx2" : "sse"; }

}  // namespace tracecache::cpu
