// rand_uniform and rand_normal (docs/ops.md, "Random numbers seeded by a graph input"):
//  - the generator: Philox4x32-10 against Random123's known-answer vectors, and values of both
//    ops pinned for a few (seed, offset, stream) from the documented algorithm (computed by an
//    independent implementation written from docs/ops.md);
//  - the cpu kernel's block fill of any range equals the reference's per-element formula;
//  - the same bits on the reference evaluator, the cpu and the sim backend, in eager, lazy and
//    once mode, at one and two threads, run after run; a new seed value is the same graph;
//  - the distributions, within bounds of ten or more standard deviations (the seeds are fixed
//    as well, so nothing here can flake);
//  - other offsets, streams and seeds give other, uncorrelated numbers;
//  - inference errors; autodiff through a graph that uses the ops reaches its other inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "replay/backends/cpu/cpu_backend.h"
#include "replay/backends/cpu/cpu_threads.h"
#include "replay/backends/cpu/eager_runner.h"
#include "replay/backends/sim/device_spec.h"
#include "replay/backends/sim/sim_backend.h"
#include "capture/ops/random.h"
#include "capture/reference/reference.h"
#include "capture/trace/autograd.h"
#include "replay/engine/runtime.h"
#include "tests/once_harness.h"

namespace tracecache {
namespace {

HostBuffer seed_buffer(int64_t seed, int64_t offset) {
  HostBuffer b(DType::kI64, Shape{2});
  b.data<int64_t>()[0] = seed;
  b.data<int64_t>()[1] = offset;
  return b;
}

uint32_t bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> out(v.size());
  if (!v.empty()) std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
  return out;
}

enum class Dist { kUniform, kNormal };

Tensor draw(const Tensor& seed, Dist d, const Shape& shape, int64_t stream) {
  return d == Dist::kUniform ? rand_uniform(seed, shape, stream) : rand_normal(seed, shape, stream);
}

// The values of one op node, computed by `ctx`'s executor (or its eager runner).
std::vector<float> values(LazyContext& ctx, Dist d, int64_t seed, int64_t offset, const Shape& shape,
                          int64_t stream = 0) {
  return draw(ctx.from_buffer(seed_buffer(seed, offset)), d, shape, stream).to_vector<float>();
}

std::vector<float> reference_values(Dist d, int64_t seed, int64_t offset, const Shape& shape, int64_t stream = 0) {
  ReferenceExecutor reference;
  LazyContext ctx(&reference);
  return values(ctx, d, seed, offset, shape, stream);
}

double mean_of(const std::vector<float>& v, double (*f)(double)) {
  double s = 0;
  for (float x : v) s += f(x);
  return s / static_cast<double>(v.size());
}

// Pearson correlation of two equally long samples.
double correlation(const std::vector<float>& a, const std::vector<float>& b) {
  const double n = static_cast<double>(a.size());
  double ma = 0, mb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ma += a[i];
    mb += b[i];
  }
  ma /= n;
  mb /= n;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  return sab / std::sqrt(saa * sbb);
}

// ---- the generator ----------------------------------------------------------------------------

TEST(Philox, Random123KnownAnswers) {
  // Random123's kat_vectors, philox4x32 with 10 rounds: counter, key, result.
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

// Pinned from docs/ops.md's algorithm by an implementation written from the text alone (not
// from this code): if these change, every stored program's random numbers change.
TEST(RandOps, PinnedValuesOfTheDocumentedAlgorithm) {
  const RandStream s{1234567890123, 7, 3};
  const uint32_t uniform[] = {0x3e95cb80, 0x3f728b43, 0x3f62136a, 0x3f56e3d0,
                              0x3e2d2318, 0x3f17b94b, 0x3d029a60, 0x3e786acc};
  const uint32_t normal[] = {0x3fbdd680, 0xbf0228a2, 0x3e87feed, 0xbed80ce3,
                             0xbfc990a5, 0xbf84b6c7, 0x3dfa0d76, 0x4027d343};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(bits(rand_uniform_at(s, i)), uniform[i]) << i;
    EXPECT_EQ(bits(rand_normal_at(s, i)), normal[i]) << i;
  }
  EXPECT_EQ(rand_uniform_at(s, 0), 0.2925682067871094f);
  // Block 2^32 + 1: the block index's high word is in the counter.
  const int64_t far = (int64_t{1} << 34) + 5;
  EXPECT_EQ(bits(rand_uniform_at(s, far)), 0x3f00e606u);
  EXPECT_EQ(bits(rand_normal_at(s, far)), 0xbbd914c2u);
  // Negative seed and offset (two's complement) and the largest stream.
  const RandStream t{-1, -2, kMaxRandStream};
  const uint32_t uniform_t[] = {0x3f58692e, 0x3e4a1f24, 0x3f54138f, 0x3d049a60};
  const uint32_t normal_t[] = {0x3e40ac72, 0x3f0c5b10, 0x3f19d590, 0x3dfdd7c9};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(bits(rand_uniform_at(t, i)), uniform_t[i]) << i;
    EXPECT_EQ(bits(rand_normal_at(t, i)), normal_t[i]) << i;
  }
  // The ops give the same values.
  const std::vector<uint32_t> want_u(uniform, uniform + 8), want_n(normal, normal + 8);
  EXPECT_EQ(bits(reference_values(Dist::kUniform, s.seed, s.offset, {2, 4}, s.stream)), want_u);
  EXPECT_EQ(bits(reference_values(Dist::kNormal, s.seed, s.offset, {8}, s.stream)), want_n);
}

TEST(RandOps, BlockFillOfAnyRangeEqualsTheElementFormula) {
  const RandStream s{42, 3, 1};
  constexpr int64_t n = 37;
  std::vector<float> want_u(n), want_n(n);
  for (int64_t i = 0; i < n; ++i) {
    want_u[static_cast<size_t>(i)] = rand_uniform_at(s, i);
    want_n[static_cast<size_t>(i)] = rand_normal_at(s, i);
  }
  const float untouched = -7.0f;
  for (int64_t begin = 0; begin <= n; ++begin) {
    for (int64_t end = begin; end <= n; ++end) {
      std::vector<float> u(n, untouched), z(n, untouched);
      fill_rand_uniform(u.data(), s, begin, end);
      fill_rand_normal(z.data(), s, begin, end);
      for (int64_t i = 0; i < n; ++i) {
        const size_t k = static_cast<size_t>(i);
        const bool inside = i >= begin && i < end;
        ASSERT_EQ(bits(u[k]), bits(inside ? want_u[k] : untouched)) << "[" << begin << ", " << end << ") " << i;
        ASSERT_EQ(bits(z[k]), bits(inside ? want_n[k] : untouched)) << "[" << begin << ", " << end << ") " << i;
      }
    }
  }
}

// ---- the same bits everywhere -------------------------------------------------------------------

TEST(RandOps, ReferenceCpuAndSimGiveTheSameBitsAtOneAndTwoThreads) {
  CpuBackend cpu;
  SimBackend sim(*find_device_preset("a100"));
  const int saved = cpu::threads();
  // 100,233 elements: the cpu kernel splits them into dozens of ranges, most starting inside a
  // Philox block and inside a Box-Muller pair.
  const Shape shape{301, 333};
  for (Dist d : {Dist::kUniform, Dist::kNormal}) {
    const std::vector<uint32_t> want = bits(reference_values(d, 99, 12, shape, 5));
    for (int threads : {1, 2}) {
      cpu::set_threads(threads);
      SCOPED_TRACE(::testing::Message() << (d == Dist::kUniform ? "rand_uniform" : "rand_normal") << ", "
                                      << threads << " threads");
      Runtime on_cpu(&cpu, nullptr, nullptr);
      LazyContext lazy_cpu(&on_cpu);
      EXPECT_EQ(bits(values(lazy_cpu, d, 99, 12, shape, 5)), want) << "cpu";
      Runtime on_sim(&sim, nullptr, nullptr);
      LazyContext lazy_sim(&on_sim);
      EXPECT_EQ(bits(values(lazy_sim, d, 99, 12, shape, 5)), want) << "sim";
      ReferenceExecutor reference;
      CpuOpRunner runner;
      LazyOptions eager;
      eager.eager = &runner;
      LazyContext eager_cpu(&reference, eager);
      EXPECT_EQ(bits(values(eager_cpu, d, 99, 12, shape, 5)), want) << "eager on the cpu kernels";
    }
  }
  EXPECT_GT(sim.snapshot().kernels, 0);
  cpu::set_threads(saved);
}

TEST(RandOps, RunsRepeatAndDoNotDependOnWhatElseIsDrawn) {
  CpuBackend cpu;
  const std::vector<uint32_t> first = [&] {
    Runtime runtime(&cpu, nullptr, nullptr);
    LazyContext ctx(&runtime);
    return bits(values(ctx, Dist::kNormal, 5, 0, {64, 65}, 2));
  }();
  for (int run = 0; run < 3; ++run) {
    Runtime runtime(&cpu, nullptr, nullptr);
    LazyContext ctx(&runtime);
    EXPECT_EQ(bits(values(ctx, Dist::kNormal, 5, 0, {64, 65}, 2)), first) << "run " << run;
  }
  // Element i depends on (seed, offset, stream, i) only: a larger tensor starts with the same
  // numbers, and drawing other tensors first changes nothing.
  ReferenceExecutor reference;
  LazyContext ctx(&reference);
  values(ctx, Dist::kUniform, 5, 0, {1000}, 2);
  const std::vector<uint32_t> longer = bits(values(ctx, Dist::kNormal, 5, 0, {64 * 65 + 3}, 2));
  EXPECT_EQ(std::vector<uint32_t>(longer.begin(), longer.begin() + 64 * 65), first);
}

// Dropout and Gaussian noise, written once for every mode.
std::vector<Tensor> noisy(const Tensor& x, const Tensor& seed) {
  Tensor kept = mul(x, lt(rand_uniform(seed, x.shape()), 0.75));
  return {div(kept, 0.75), add(x, rand_normal(seed, x.shape(), 1))};
}

std::vector<Tensor> noisy_fn(LazyContext&, const TraceArgs& a) { return noisy(a.tensor(0), a.tensor(1)); }

std::vector<std::vector<double>> doubles(const std::vector<Tensor>& ts) {
  std::vector<std::vector<double>> out;
  for (const Tensor& t : ts) out.push_back(t.to_vector<double>());
  return out;
}

TEST(RandOps, EagerLazyAndOnceGiveTheSameBitsAndANewSeedNeverRecompiles) {
  const HostBuffer x = filled(DType::kF32, {40, 30}, -3, 0.01);
  const std::vector<std::pair<int64_t, int64_t>> seeds = {{5, 0}, {5, 1}, {6, 0}, {5, 0}};
  Harness h;
  CompiledFunction once("noisy", noisy_fn, &h.runtime);
  CpuBackend cpu;
  Runtime runtime(&cpu, nullptr, nullptr);
  LazyContext lazy(&runtime);
  ReferenceExecutor reference;
  CpuOpRunner runner;
  LazyOptions options;
  options.eager = &runner;
  LazyContext eager(&reference, options);
  std::vector<std::vector<std::vector<double>>> seen;
  for (const auto& [seed, offset] : seeds) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ", offset " << offset);
    std::vector<Tensor> lazy_out = noisy(lazy.from_buffer(x.clone()), lazy.from_buffer(seed_buffer(seed, offset)));
    lazy.mark_step();
    const std::vector<std::vector<double>> want = doubles(lazy_out);
    EXPECT_EQ(doubles(noisy(eager.from_buffer(x.clone()), eager.from_buffer(seed_buffer(seed, offset)))), want)
        << "eager";
    EXPECT_EQ(h.call(once, {{h.tensor(x.clone()), h.tensor(seed_buffer(seed, offset))}, {}}), want) << "once";
    seen.push_back(want);
  }
  EXPECT_EQ(once.stats().traces, 1) << "the seed is a graph input: a new value replays the entry";
  ASSERT_EQ(lazy.executed_keys().size(), seeds.size());
  for (const GraphKey& k : lazy.executed_keys()) EXPECT_EQ(k, lazy.executed_keys()[0]) << "one graph, one key";
  EXPECT_NE(seen[0], seen[1]) << "another offset";
  EXPECT_NE(seen[0], seen[2]) << "another seed";
  EXPECT_EQ(seen[0], seen[3]) << "the same seed again";
}

// ---- distributions -------------------------------------------------------------------------------

constexpr int64_t kSamples = 1000000;

TEST(RandOps, UniformIsUniformOnTheGridOf24Bits) {
  const std::vector<float> u = reference_values(Dist::kUniform, 2024, 1, {kSamples});
  std::vector<int64_t> bins(10, 0);
  for (float v : u) {
    ASSERT_GE(v, 0.0f);
    ASSERT_LT(v, 1.0f);
    const double scaled = static_cast<double>(v) * 0x1.0p24;
    ASSERT_EQ(scaled, std::floor(scaled)) << v << " is not on the 2^-24 grid";
    ++bins[static_cast<size_t>(v * 10)];
  }
  // Mean 1/2 (standard error 2.9e-4), variance 1/12 (standard error 7.5e-5).
  const double mean = mean_of(u, [](double v) { return v; });
  EXPECT_NEAR(mean, 0.5, 1e-2);
  EXPECT_NEAR(mean_of(u, [](double v) { return v * v; }) - mean * mean, 1.0 / 12, 2e-3);
  // Each tenth holds 100,000 +- 300 (one standard deviation).
  for (int64_t b : bins) EXPECT_NEAR(static_cast<double>(b), kSamples / 10.0, 5000.0);
  // A Bernoulli(p) mask from `u < p` keeps a fraction p (standard error <= 5e-4).
  for (double p : {0.1, 0.5, 0.9}) {
    int64_t kept = 0;
    for (float v : u) kept += v < p;
    EXPECT_NEAR(static_cast<double>(kept) / kSamples, p, 1e-2) << "p " << p;
  }
}

TEST(RandOps, NormalIsStandardNormal) {
  const std::vector<float> z = reference_values(Dist::kNormal, 2024, 1, {kSamples});
  const double bound = std::sqrt(64 * std::log(2.0));  // u1 >= 2^-32
  int64_t within_one = 0, negative = 0;
  for (float v : z) {
    ASSERT_TRUE(std::isfinite(v));
    ASSERT_LE(std::fabs(v), bound);
    within_one += std::fabs(v) < 1;
    negative += v < 0;
  }
  // Standard errors: mean 1e-3, E[z^2] 1.4e-3, E[z^3] 3.9e-3, E[z^4] 9.8e-3, the fractions <= 5e-4.
  EXPECT_NEAR(mean_of(z, [](double v) { return v; }), 0.0, 1e-2);
  EXPECT_NEAR(mean_of(z, [](double v) { return v * v; }), 1.0, 2e-2);
  EXPECT_NEAR(mean_of(z, [](double v) { return v * v * v; }), 0.0, 5e-2);
  EXPECT_NEAR(mean_of(z, [](double v) { return v * v * v * v; }), 3.0, 0.1);
  EXPECT_NEAR(static_cast<double>(within_one) / kSamples, 0.682689, 1e-2);
  EXPECT_NEAR(static_cast<double>(negative) / kSamples, 0.5, 1e-2);
  // The two halves of a Box-Muller pair (cos and sin of one angle) are uncorrelated.
  std::vector<float> even, odd;
  for (size_t i = 0; i + 1 < z.size(); i += 2) {
    even.push_back(z[i]);
    odd.push_back(z[i + 1]);
  }
  EXPECT_NEAR(correlation(even, odd), 0.0, 1e-2);  // standard error 1.4e-3
}

TEST(RandOps, OffsetsStreamsAndSeedsGiveUnrelatedNumbers) {
  for (Dist d : {Dist::kUniform, Dist::kNormal}) {
    const std::vector<float> base = reference_values(d, 9, 0, {kSamples});
    struct Other {
      const char* what;
      int64_t seed, offset, stream;
    };
    const Other others[] = {{"the next offset", 9, 1, 0},
                            {"an offset 2^32 apart", 9, int64_t{1} << 32, 0},
                            {"stream 1", 9, 0, 1},
                            {"the last stream", 9, 0, kMaxRandStream},
                            {"the next seed", 10, 0, 0},
                            {"a seed 2^32 apart", 9 + (int64_t{1} << 32), 0, 0},
                            {"the negated seed", -9, 0, 0}};
    for (const Other& o : others) {
      const std::vector<float> v = reference_values(d, o.seed, o.offset, {kSamples}, o.stream);
      int64_t same = 0;
      for (size_t i = 0; i < v.size(); ++i) same += bits(v[i]) == bits(base[i]);
      // A uniform element matches by chance with probability 2^-24 (0.06 expected).
      EXPECT_LT(same, 10) << o.what;
      EXPECT_NEAR(correlation(v, base), 0.0, 1e-2) << o.what;  // standard error 1e-3
      // Not a shifted copy either: the next offset is not the next elements.
      EXPECT_NEAR(correlation(std::vector<float>(v.begin(), v.end() - 4),
                              std::vector<float>(base.begin() + 4, base.end())),
                  0.0, 1e-2)
          << o.what;
    }
  }
}

// ---- inference, graphs, autodiff ----------------------------------------------------------------

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(RandOps, InferenceErrorsAreClear) {
  ReferenceExecutor reference;
  LazyContext ctx(&reference);
  const Tensor good = ctx.from_buffer(seed_buffer(1, 0));
  const std::string want_seed = "the seed must be an i64 tensor of shape [2] holding (seed, offset), got ";
  struct BadSeed {
    Tensor seed;
    const char* type;
  };
  const BadSeed bad_seeds[] = {{full(ctx, {2}, 1), "f32[2]"},
                               {full(ctx, {2}, 1, DType::kI32), "i32[2]"},
                               {full(ctx, {3}, 1, DType::kI64), "i64[3]"},
                               {scalar(ctx, 1, DType::kI64), "i64[]"},
                               {full(ctx, {1, 2}, 1, DType::kI64), "i64[1, 2]"}};
  for (const BadSeed& b : bad_seeds) {
    EXPECT_NE(error_of([&] { rand_uniform(b.seed, {3}); }).find("op 'rand_uniform': " + want_seed + b.type),
              std::string::npos)
        << error_of([&] { rand_uniform(b.seed, {3}); });
    EXPECT_NE(error_of([&] { rand_normal(b.seed, {3}); }).find("op 'rand_normal': " + want_seed + b.type),
              std::string::npos);
  }
  EXPECT_NE(error_of([&] { rand_uniform(good, {3, -1}); }).find("op 'rand_uniform': shape [3, -1] has a negative dim"),
            std::string::npos)
      << error_of([&] { rand_uniform(good, {3, -1}); });
  EXPECT_NE(error_of([&] { rand_normal(good, {int64_t{1} << 30, int64_t{1} << 30}); })
                .find("op 'rand_normal': shape [1073741824, 1073741824] has more than 2^48 elements"),
            std::string::npos)
      << error_of([&] { rand_normal(good, {int64_t{1} << 30, int64_t{1} << 30}); });
  for (int64_t stream : {int64_t{-1}, kMaxRandStream + 1}) {
    EXPECT_NE(error_of([&] { rand_normal(good, {3}, stream); })
                  .find("op 'rand_normal': stream must be in [0, 65535], got " + std::to_string(stream)),
              std::string::npos)
        << error_of([&] { rand_normal(good, {3}, stream); });
  }
  EXPECT_EQ(error_of([&] { rand_uniform(Tensor(), {3}); }), "op 'rand_uniform': the seed is an undefined tensor");
  // The registry returns the error as a value (what a decoder of stored graphs sees).
  std::vector<AttrValue> attrs = {AttrValue::of_ints({4}), AttrValue::of_int(0)};
  const TensorType f32_seed{DType::kF32, {2}};
  Result<TensorType> r = infer_op(OpKind::kRandUniform, std::span(&f32_seed, 1), attrs);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(infer_op(OpKind::kRandUniform, {}, attrs).status().message(),
            "op 'rand_uniform': takes 1 tensor inputs, got 0");
  // Good arguments: f32 of the shape, a scalar for an empty shape.
  EXPECT_EQ(rand_uniform(good, {2, 3}).shape(), (Shape{2, 3}));
  EXPECT_EQ(rand_normal(good, {}).dtype(), DType::kF32);
  EXPECT_EQ(rand_normal(good, {0, 5}).to_vector<float>().size(), 0u);
}

TEST(RandOps, StreamAndShapeAreInTheKeyTheSeedValueIsNot) {
  ReferenceExecutor reference;
  LazyContext ctx(&reference);
  auto key_of = [&](int64_t seed, const Shape& shape, int64_t stream) {
    Tensor r = rand_uniform(ctx.from_buffer(seed_buffer(seed, 0)), shape, stream);
    ctx.mark_step();
    return ctx.executed_keys().back();
  };
  const GraphKey base = key_of(1, {4}, 0);
  EXPECT_EQ(key_of(2, {4}, 0), base);
  EXPECT_NE(key_of(1, {5}, 0), base);
  EXPECT_NE(key_of(1, {4}, 1), base);
  // Two draws with one seed tensor, shape and stream are one value (the canonical form may merge
  // them); other streams are other values.
  Tensor seed = ctx.from_buffer(seed_buffer(3, 0));
  EXPECT_EQ(bits(rand_normal(seed, {50}).to_vector<float>()), bits(rand_normal(seed, {50}).to_vector<float>()));
  EXPECT_NE(bits(rand_normal(seed, {50}).to_vector<float>()), bits(rand_normal(seed, {50}, 1).to_vector<float>()));
}

TEST(RandOps, AutodiffReachesTheOtherInputs) {
  for (bool eager_mode : {false, true}) {
    ReferenceExecutor reference;
    CpuOpRunner runner;
    LazyOptions options;
    if (eager_mode) options.eager = &runner;
    LazyContext ctx(&reference, options);
    Tensor x = ctx.from_buffer(filled(DType::kF32, {6, 7}, -1, 0.05)).set_requires_grad(true);
    Tensor seed = ctx.from_buffer(seed_buffer(11, 4));
    Tensor keep = lt(rand_uniform(seed, {6, 7}), 0.6);  // bool
    Tensor noise = rand_normal(seed, {6, 7}, 1);
    Tensor y = add(mul(x, keep), mul(mul(x, x), noise));
    std::vector<Tensor> g = grad(sum(y), {x});
    ctx.mark_step();
    // d/dx (x * keep + x^2 * noise) = keep + 2 x noise.
    const std::vector<float> gv = g[0].to_vector<float>(), xv = x.to_vector<float>(), nv = noise.to_vector<float>();
    const std::vector<double> kv = keep.to_vector<double>();
    for (size_t i = 0; i < gv.size(); ++i) {
      EXPECT_NEAR(gv[i], kv[i] + 2.0 * xv[i] * nv[i], 1e-5) << i << (eager_mode ? " eager" : " lazy");
    }
    EXPECT_NE(error_of([&] { grad(sum(rand_uniform(seed, {3})), {seed}); }).find("not differentiable"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace tracecache
