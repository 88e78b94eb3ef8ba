#include "capture/ops/random.h"

#include <cmath>
#include <numbers>

#include "capture/ops/elementwise.h"

namespace tracecache {

uint64_t random_bits(uint64_t seed, uint64_t index) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ULL + index + 0x632be59bd9b4e019ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  // A second round decorrelates neighbouring seeds.
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double uniform01(uint64_t seed, uint64_t index) {
  return static_cast<double>(random_bits(seed, index) >> 40) * 0x1.0p-24;
}

double standard_normal(uint64_t seed, uint64_t index) {
  uint64_t pair = index & ~uint64_t{1};
  double u1 = 1.0 - uniform01(seed, pair);  // (0, 1]: log is finite
  double u2 = uniform01(seed, pair + 1);
  double r = std::sqrt(-2.0 * std::log(u1));
  double theta = 2.0 * std::numbers::pi * u2;
  return (index & 1) ? r * std::sin(theta) : r * std::cos(theta);
}

void fill_uniform(HostBuffer& out, uint64_t seed, double low, double high) {
  dispatch_dtype(out.dtype(), [&]<typename T>() {
    T* p = out.data<T>();
    for (int64_t i = 0; i < out.numel(); ++i) {
      double v = low + (high - low) * uniform01(seed, static_cast<uint64_t>(i));
      if constexpr (std::is_floating_point_v<T>) {
        p[i] = static_cast<T>(v);
      } else {
        p[i] = convert<T>(std::floor(v));  // saturates outside T's range
      }
    }
  });
}

void fill_normal(HostBuffer& out, uint64_t seed, double mean, double stddev) {
  float* p = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) {
    p[i] = static_cast<float>(mean + stddev * standard_normal(seed, static_cast<uint64_t>(i)));
  }
}

uint64_t dropout_stream(int64_t seed, int64_t salt) {
  // Both through the mixer, so neighbouring seeds and neighbouring salts give unrelated streams.
  return random_bits(random_bits(static_cast<uint64_t>(salt), 0x5eedULL), static_cast<uint64_t>(seed));
}

void fill_dropout_mask(float* out, uint64_t stream, double p, int64_t begin, int64_t end) {
  const double keep = 1.0 - p;
  const float scale = 1.0f / static_cast<float>(keep);  // PyTorch: noise.div_(1 - p) in f32
  for (int64_t i = begin; i < end; ++i) {
    out[i] = uniform01(stream, static_cast<uint64_t>(i)) < keep ? scale : 0.0f;
  }
}

}  // namespace tracecache
