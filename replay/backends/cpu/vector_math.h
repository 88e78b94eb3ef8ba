// Vectorized elementwise math for the cpu kernels: batch_norm's formula (below), and erf over a
// run of floats through glibc's
// vector math library (libmvec, the x86_64 vector-function ABI: _ZGVdN8v_erff with AVX2, else
// _ZGVbN4v_erff with SSE). The scalar erff costs about 10 ns per element here, the vector one
// about 0.5 ns; at batch 1 and 1 thread that took 12-17% off a vit_b_16 or bert_base step
// (gelu in every layer; erf is also in gelu's backward).
//
// Numerics: libmvec's erff is not glibc's scalar erff: they differ by at most 2 ulp (the AVX2
// variant measured over all 2^32 floats by bench/erf_ulps.cc, about 31% of inputs differing at
// all; the SSE variant within 1 ulp on 4M sampled inputs in [-4, 4]), so the cpu
// kernels of erf and of gelu's erf form agree with the reference kernels (std::erf) within that
// bound, not bitwise (replay/backends/cpu/cpu_kernels.h). Every element goes through the same vector
// function whatever its position in a run (a partial vector is padded), so a value's result
// does not depend on tiling, fusion, threads or eager vs replay: the cpu backend stays bitwise
// equal to itself. The variant is chosen at the first call from the CPU's features (AVX2 or not;
// libmvec's AVX-512 erff is not used: up to 4 ulp from the scalar and no faster here), and libmvec
// picks its own implementation of each for the CPU, so these bits may differ between machines
// (as threaded sgemm's do), never between runs on one. A step the runtime falls back to the
// reference evaluator for computes std::erf (as it computes matmul in double).
//
// batch_norm_f32 applies nn::batch_norm_apply (f32 -> double, (x - mean) * scale + bias, rounded
// once to f32) to a run of floats with the CPU's widest vectors (AVX-512, AVX2, else the scalar
// loop): each element goes through the same IEEE double operations in the same order as the
// scalar formula (no fused multiply-add: the build turns contraction off), so the bits are the
// formula's on every variant.
//
// Thread-safe (no state but the variants, each chosen once under a function-local static). No
// errors.
#pragma once

#include <cstdint>
#include <vector>

#include "capture/ops/nn_numerics.h"

namespace tracecache::cpu {

// out[i] = erf(in[i] * scale) for i in [0, n) (libmvec's erf; the product rounded to f32 as
// `in[i] * scale` is). `in` and `out` may be the same array; they must not otherwise overlap.
void erf_f32(const float* in, float* out, int64_t n, float scale = 1.0f);

// The name of the variant erf_f32 uses: "avx2" or "sse".
const char* erf_variant();

// Every erf_f32 variant this CPU can run, the one erf_f32 uses first (so tests check each, also
// the ones another machine would use): name and function (out[i] = erf(in[i] * scale)).
struct ErfVariant {
  const char* name;
  void (*fn)(const float* in, float scale, float* out, int64_t n);
};
std::vector<ErfVariant> erf_variants();

// out[i] = nn::batch_norm_apply(in[i], c) for i in [0, n). `out` may be `in` itself; they must
// not otherwise overlap.
void batch_norm_f32(const float* in, const nn::BatchNormChannel& c, float* out, int64_t n);

// The name of the variant batch_norm_f32 uses: "avx512", "avx2" or "scalar".
const char* batch_norm_variant();

// Every batch_norm_f32 variant this CPU can run, the one batch_norm_f32 uses first.
struct BatchNormVariant {
  const char* name;
  void (*fn)(const float* in, const nn::BatchNormChannel& c, float* out, int64_t n);
};
std::vector<BatchNormVariant> batch_norm_variants();

}  // namespace tracecache::cpu
