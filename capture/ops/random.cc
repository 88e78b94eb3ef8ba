#include "capture/ops/random.h"

#include <algorithm>
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
      if constexpr (is_real_v<T>) {
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

// ---- Philox4x32-10 ------------------------------------------------------------------------

namespace {

constexpr uint32_t kPhiloxM0 = 0xD2511F53, kPhiloxM1 = 0xCD9E8D57;  // the round multipliers
constexpr uint32_t kPhiloxW0 = 0x9E3779B9, kPhiloxW1 = 0xBB67AE85;  // the key schedule's steps

uint32_t lo32(uint64_t v) { return static_cast<uint32_t>(v); }
uint32_t hi32(uint64_t v) { return static_cast<uint32_t>(v >> 32); }

// rand_uniform's element from one word: its top 24 bits on the grid 2^-24, exact in f32.
float uniform_from_word(uint32_t w) { return static_cast<float>(w >> 8) * 0x1.0p-24f; }

// The Box-Muller pair of words (a, b): r = sqrt(-2 ln u1), theta = 2 pi u2 with u1 = (a + 1) 2^-32
// in (0, 1] (never log 0) and u2 = b 2^-32 in [0, 1), all in double; {r cos theta, r sin theta}
// rounded to f32. One out-of-line function for the reference's single elements and the fill's
// pairs, so both run the same code whether the compiler calls cos and sin or sincos.
[[gnu::noinline]] std::array<float, 2> normal_pair(uint32_t a, uint32_t b) {
  const double u1 = (static_cast<double>(a) + 1.0) * 0x1.0p-32;
  const double u2 = static_cast<double>(b) * 0x1.0p-32;
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 2.0 * std::numbers::pi * u2;
  return {static_cast<float>(r * std::cos(theta)), static_cast<float>(r * std::sin(theta))};
}

}  // namespace

PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kPhiloxW0;
      k[1] += kPhiloxW1;
    }
    const uint64_t p0 = uint64_t{kPhiloxM0} * c[0];
    const uint64_t p1 = uint64_t{kPhiloxM1} * c[2];
    c = {hi32(p1) ^ c[1] ^ k[0], lo32(p1), hi32(p0) ^ c[3] ^ k[1], lo32(p0)};
  }
  return c;
}

RandStream rand_stream(const HostBuffer& seed, int64_t stream) {
  const int64_t* v = seed.data<int64_t>();
  return {v[0], v[1], stream};
}

PhiloxCounter rand_block(const RandStream& s, uint64_t block) {
  const uint64_t seed = static_cast<uint64_t>(s.seed), offset = static_cast<uint64_t>(s.offset);
  const uint32_t stream = static_cast<uint32_t>(s.stream);
  return philox4x32_10({lo32(block), (stream << 16) | hi32(block), lo32(offset), hi32(offset)},
                       {lo32(seed), hi32(seed)});
}

float rand_uniform_at(const RandStream& s, int64_t i) {
  const auto n = static_cast<uint64_t>(i);
  return uniform_from_word(rand_block(s, n / 4)[n % 4]);
}

float rand_normal_at(const RandStream& s, int64_t i) {
  const auto n = static_cast<uint64_t>(i);
  const PhiloxCounter w = rand_block(s, n / 4);
  const size_t first = (n % 4) & 2;  // the pair's first word
  return normal_pair(w[first], w[first + 1])[n % 2];
}

void fill_rand_uniform(float* out, const RandStream& s, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end;) {
    const PhiloxCounter w = rand_block(s, static_cast<uint64_t>(i / 4));
    for (const int64_t stop = std::min(end, (i / 4 + 1) * 4); i < stop; ++i) {
      out[i] = uniform_from_word(w[static_cast<size_t>(i % 4)]);
    }
  }
}

void fill_rand_normal(float* out, const RandStream& s, int64_t begin, int64_t end) {
  for (int64_t block = begin / 4; block * 4 < end; ++block) {
    const PhiloxCounter w = rand_block(s, static_cast<uint64_t>(block));
    for (size_t first = 0; first < 4; first += 2) {
      const int64_t at = block * 4 + static_cast<int64_t>(first);  // the pair's first element
      const int64_t from = std::max(begin, at), to = std::min(end, at + 2);
      if (from >= to) continue;  // a pair outside the range, at its edge
      const std::array<float, 2> z = normal_pair(w[first], w[first + 1]);
      for (int64_t i = from; i < to; ++i) out[i] = z[static_cast<size_t>(i - at)];
    }
  }
}

}  // namespace tracecache
