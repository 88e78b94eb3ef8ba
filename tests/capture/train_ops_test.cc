// Training-mode ops (capture/trace/train_layers.h) and losses (capture/trace/losses.h):
//  - dropout_mask: deterministic given (seed, salt, shape, p), different between steps and
//    layers, the keep rate 1 - p on a large mask (a fixed seed: a deterministic check), values
//    exactly 0 or 1 / (1 - p), the cpu kernel bitwise equal to the reference, one graph for
//    every step's seed;
//  - the gradients of training and inference dropout;
//  - batch_norm_train and the losses against double-precision implementations written here,
//    their gradients against the closed forms or directional central differences;
//  - eager equals lazy.
// The end-to-end comparison with PyTorch is tests/cli/train_torch.sh (tests/train/).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "replay/backends/cpu/cpu_backend.h"
#include "replay/backends/cpu/eager_runner.h"
#include "capture/reference/reference.h"
#include "capture/trace/autograd.h"
#include "capture/trace/losses.h"
#include "capture/trace/nn.h"
#include "capture/trace/train_layers.h"
#include "replay/engine/runtime.h"
#include "tests/test_buffers.h"

namespace tracecache {
namespace {

using test::random_values;

std::vector<float> mask_of(LazyContext& ctx, int64_t seed, const Shape& shape, double p, int64_t salt) {
  Tensor m = dropout_mask(scalar(ctx, static_cast<double>(seed), DType::kI64), shape, p, salt);
  return m.to_vector<float>();
}

// ---- dropout ----------------------------------------------------------------------------------

TEST(DropoutMask, SameSeedSameMaskInEveryRunAndBackend) {
  ReferenceExecutor reference;
  LazyContext a(&reference), b(&reference);
  CpuBackend cpu;
  Runtime runtime(&cpu, nullptr, nullptr);
  LazyContext c(&runtime);
  const std::vector<float> first = mask_of(a, 12, {40, 50}, 0.3, 5);
  EXPECT_EQ(first, mask_of(b, 12, {40, 50}, 0.3, 5));
  EXPECT_EQ(first, mask_of(c, 12, {40, 50}, 0.3, 5)) << "the cpu kernel differs from the reference";
  CpuOpRunner runner;
  LazyOptions eager;
  eager.eager = &runner;
  LazyContext d(&reference, eager);
  EXPECT_EQ(first, mask_of(d, 12, {40, 50}, 0.3, 5)) << "eager on the cpu kernels differs";
}

TEST(DropoutMask, DiffersBetweenStepsAndLayers) {
  ReferenceExecutor reference;
  LazyContext ctx(&reference);
  const std::vector<float> base = mask_of(ctx, 1, {1000}, 0.5, 0);
  EXPECT_NE(base, mask_of(ctx, 2, {1000}, 0.5, 0)) << "the next step's seed";
  EXPECT_NE(base, mask_of(ctx, 1, {1000}, 0.5, 1)) << "another layer's salt";
  EXPECT_NE(base, mask_of(ctx, -1, {1000}, 0.5, 0)) << "a negative seed";
  // An i32 seed selects the same stream as the i64 seed of the same value.
  Tensor m32 = dropout_mask(scalar(ctx, 2, DType::kI32), {1000}, 0.5, 0);
  EXPECT_EQ(m32.to_vector<float>(), mask_of(ctx, 2, {1000}, 0.5, 0));
}

TEST(DropoutMask, KeepRateAndScale) {
  ReferenceExecutor reference;
  LazyContext ctx(&reference);
  for (double p : {0.1, 0.3, 0.5, 0.9}) {
    const std::vector<float> m = mask_of(ctx, 7, {200000}, p, 3);
    const float scale = 1.0f / static_cast<float>(1 - p);
    int64_t kept = 0;
    for (float v : m) {
      ASSERT_TRUE(v == 0.0f || v == scale) << v;
      kept += v != 0.0f;
    }
    // Binomial(n, 1 - p): five standard deviations (the seed is fixed: this never flakes).
    const double n = static_cast<double>(m.size());
    const double sd = std::sqrt(n * p * (1 - p));
    EXPECT_NEAR(static_cast<double>(kept), n * (1 - p), 5 * sd) << "p " << p;
  }
  for (float v : mask_of(ctx, 7, {100}, 0.0, 0)) EXPECT_EQ(v, 1.0f);
  for (float v : mask_of(ctx, 7, {100}, 1.0, 0)) EXPECT_EQ(v, 0.0f);
}

TEST(DropoutMask, EveryStepIsTheSameGraph) {
  ReferenceExecutor reference;
  LazyContext ctx(&reference);
  Tensor x = ctx.from_buffer(test::f32({2, 8}, random_values(16, 1)));
  std::vector<std::vector<float>> outs;
  for (int step = 0; step < 3; ++step) {
    Tensor y = dropout_train(x, 0.5, scalar(ctx, step, DType::kI64), 9);
    ctx.mark_step();
    outs.push_back(y.to_vector<float>());
  }
  ASSERT_EQ(ctx.executed_keys().size(), 3u);
  EXPECT_EQ(ctx.executed_keys()[0], ctx.executed_keys()[1]);
  EXPECT_EQ(ctx.executed_keys()[1], ctx.executed_keys()[2]);
  EXPECT_NE(outs[0], outs[1]);
  EXPECT_NE(outs[1], outs[2]);
}

TEST(DropoutMask, InferenceErrorsNameTheOp) {
  ReferenceExecutor reference;
  LazyContext ctx(&reference);
  EXPECT_THROW(dropout_mask(scalar(ctx, 1.5), {3}, 0.5), Error);                      // f32 seed
  EXPECT_THROW(dropout_mask(full(ctx, {2}, 1, DType::kI64), {3}, 0.5), Error);        // not a scalar
  EXPECT_THROW(dropout_mask(scalar(ctx, 1, DType::kI64), {3}, 1.5), Error);           // p
  EXPECT_THROW(dropout_mask(scalar(ctx, 1, DType::kI64), {-3}, 0.5), Error);          // shape
  try {
    dropout_mask(scalar(ctx, 1, DType::kI64), {3}, -0.1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("op 'dropout_mask': p must be in [0, 1]"), std::string::npos) << e.what();
  }
}

TEST(DropoutGrad, TrainingGradientIsUpstreamTimesMaskOverKeep) {
  ReferenceExecutor reference;
  LazyContext ctx(&reference);
  const double p = 0.4;
  Tensor x = ctx.from_buffer(test::f32({6, 7}, random_values(42, 2))).set_requires_grad(true);
  Tensor up = ctx.from_buffer(test::f32({6, 7}, random_values(42, 3)));
  Tensor seed = scalar(ctx, 11, DType::kI64);
  Tensor y = dropout_train(x, p, seed, 4);
  std::vector<Tensor> g = grad(sum(mul(y, up)), {x});
  ctx.mark_step();
  const std::vector<float> mask = mask_of(ctx, 11, {6, 7}, p, 4);
  const std::vector<float> gv = g[0].to_vector<float>(), upv = up.to_vector<float>(), xv = x.to_vector<float>(),
                           yv = y.to_vector<float>();
  const float scale = 1.0f / static_cast<float>(1 - p);
  for (size_t i = 0; i < gv.size(); ++i) {
    EXPECT_EQ(gv[i], upv[i] * mask[i]) << i;
    EXPECT_EQ(yv[i], xv[i] * mask[i]) << i;
    EXPECT_TRUE(mask[i] == 0.0f || mask[i] == scale);
  }
}

TEST(DropoutGrad, InferenceDropoutPassesTheGradientThrough) {
  ReferenceExecutor reference;
  LazyContext ctx(&reference);
  Tensor x = ctx.from_buffer(test::f32({3}, {1, 2, 3})).set_requires_grad(true);
  std::vector<Tensor> g = grad(sum(mul(dropout(x, 0.5), x)), {x});
  EXPECT_EQ(g[0].to_vector<float>(), (std::vector<float>{2, 4, 6}));
}

// ---- batch_norm_train -------------------------------------------------------------------------

struct BnCase {
  Shape shape{4, 3, 2, 2};
  std::vector<float> x = random_values(48, 21, -2, 3), w = random_values(3, 22, 0.5, 1.5),
                     b = random_values(3, 23), rm = random_values(3, 24), rv = random_values(3, 25, 0.5, 2),
                     up = random_values(48, 26);
};

// The batch-normalized y of `c` (with weights w, b) and the new running stats, in double.
struct BnDouble {
  std::vector<double> y, rm, rv;
};
BnDouble bn_double(const BnCase& c, const std::vector<double>& x, const std::vector<double>& w,
                   const std::vector<double>& b, double momentum, double eps) {
  const int64_t n = c.shape[0], ch = c.shape[1], hw = c.shape[2] * c.shape[3];
  BnDouble r{std::vector<double>(x.size()), {}, {}};
  for (int64_t k = 0; k < ch; ++k) {
    double s = 0, q = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < hw; ++j) s += x[(i * ch + k) * hw + j];
    const double m = s / static_cast<double>(n * hw);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < hw; ++j) q += (x[(i * ch + k) * hw + j] - m) * (x[(i * ch + k) * hw + j] - m);
    const double var = q / static_cast<double>(n * hw);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < hw; ++j) {
        const int64_t e = (i * ch + k) * hw + j;
        r.y[e] = (x[e] - m) / std::sqrt(var + eps) * w[k] + b[k];
      }
    r.rm.push_back((1 - momentum) * c.rm[k] + momentum * m);
    r.rv.push_back((1 - momentum) * c.rv[k] + momentum * q / static_cast<double>(n * hw - 1));
  }
  return r;
}

std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

struct BnResult {
  std::vector<float> y, rm, rv;
  std::vector<std::vector<float>> grads;  // x, w, b
};

BnResult run_bn(LazyContext& ctx, const BnCase& c, double momentum, double eps) {
  Tensor x = ctx.from_buffer(test::f32(c.shape, c.x)).set_requires_grad(true);
  Tensor w = ctx.from_buffer(test::f32({3}, c.w)).set_requires_grad(true);
  Tensor b = ctx.from_buffer(test::f32({3}, c.b)).set_requires_grad(true);
  Tensor rm = ctx.from_buffer(test::f32({3}, c.rm));
  Tensor rv = ctx.from_buffer(test::f32({3}, c.rv));
  Tensor up = ctx.from_buffer(test::f32(c.shape, c.up));
  Tensor y = batch_norm_train(x, w, b, rm, rv, momentum, eps);
  std::vector<Tensor> g = grad(sum(mul(y, up)), {x, w, b});
  ctx.mark_step();
  BnResult r{y.to_vector<float>(), rm.to_vector<float>(), rv.to_vector<float>(), {}};
  for (const Tensor& t : g) r.grads.push_back(t.to_vector<float>());
  return r;
}

TEST(BatchNormTrain, MatchesDoublePrecisionAndUpdatesRunningStats) {
  BnCase c;
  ReferenceExecutor reference;
  LazyContext ctx(&reference);
  BnResult r = run_bn(ctx, c, 0.1, 1e-5);
  BnDouble want = bn_double(c, widen(c.x), widen(c.w), widen(c.b), 0.1, 1e-5);
  for (size_t i = 0; i < r.y.size(); ++i) EXPECT_NEAR(r.y[i], want.y[i], 2e-6 * (1 + std::abs(want.y[i]))) << i;
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_NEAR(r.rm[k], want.rm[k], 1e-6 * (1 + std::abs(want.rm[k])));
    EXPECT_NEAR(r.rv[k], want.rv[k], 1e-6 * (1 + std::abs(want.rv[k])));
  }
}

// The gradient's dot product with a random direction equals the central difference of
// sum(y * up) along it, computed in double.
TEST(BatchNormTrain, GradientMatchesCentralDifferences) {
  BnCase c;
  ReferenceExecutor reference;
  LazyContext ctx(&reference);
  BnResult r = run_bn(ctx, c, 0.1, 1e-5);
  const std::vector<float> dx = random_values(48, 31), dw = random_values(3, 32), db = random_values(3, 33);
  double analytic = 0;
  for (size_t i = 0; i < dx.size(); ++i) analytic += double(dx[i]) * r.grads[0][i];
  for (size_t k = 0; k < 3; ++k) analytic += double(dw[k]) * r.grads[1][k] + double(db[k]) * r.grads[2][k];
  auto objective = [&](double s) {
    std::vector<double> x = widen(c.x), w = widen(c.w), b = widen(c.b);
    for (size_t i = 0; i < x.size(); ++i) x[i] += s * dx[i];
    for (size_t k = 0; k < 3; ++k) w[k] += s * dw[k], b[k] += s * db[k];
    const BnDouble y = bn_double(c, x, w, b, 0.1, 1e-5);
    double total = 0;
    for (size_t i = 0; i < y.y.size(); ++i) total += y.y[i] * c.up[i];
    return total;
  };
  const double h = 1e-4;
  const double numeric = (objective(h) - objective(-h)) / (2 * h);
  EXPECT_NEAR(analytic, numeric, 1e-4 * std::max(1.0, std::abs(numeric)));
}

TEST(BatchNormTrain, EagerEqualsLazyAndRank2Works) {
  BnCase c;
  ReferenceExecutor reference;
  LazyContext lazy(&reference);
  ReferenceOpRunner runner;
  LazyOptions eager_options;
  eager_options.eager = &runner;
  LazyContext eager(&reference, eager_options);
  BnResult a = run_bn(lazy, c, 0.2, 1e-3), b = run_bn(eager, c, 0.2, 1e-3);
  EXPECT_EQ(a.y, b.y);
  EXPECT_EQ(a.rm, b.rm);
  EXPECT_EQ(a.rv, b.rv);
  EXPECT_EQ(a.grads, b.grads);
  // [N, C]: statistics over the batch only; undefined affine parameters and running stats.
  Tensor x = lazy.from_buffer(test::f32({4, 2}, {1, 10, 2, 20, 3, 30, 6, 40}));
  Tensor none;
  Tensor y = batch_norm_train(x, none, none, none, none, 0.1, 0);
  const std::vector<float> v = y.to_vector<float>();
  EXPECT_NEAR(v[0], (1 - 3) / std::sqrt(3.5), 1e-6);
  EXPECT_NEAR(v[1], (10 - 25) / std::sqrt(125.0), 1e-6);
}

TEST(BatchNormTrain, Errors) {
  ReferenceExecutor reference;
  LazyContext ctx(&reference);
  Tensor none;
  Tensor one = ctx.from_buffer(test::f32({1, 3}, {1, 2, 3}));
  EXPECT_THROW(batch_norm_train(one, none, none, none, none), Error);  // one value per channel
  Tensor x = ctx.from_buffer(test::f32({2, 3}, {1, 2, 3, 4, 5, 6}));
  Tensor w = ctx.from_buffer(test::f32({2}, {1, 1}));
  EXPECT_THROW(batch_norm_train(x, w, none, none, none), Error);  // weight of another size
  Tensor rm = ctx.from_buffer(test::f32({3}, {0, 0, 0}));
  EXPECT_THROW(batch_norm_train(x, none, none, rm, none), Error);  // one running stat only
  EXPECT_THROW(batch_norm_train(ctx.from_buffer(test::f32({6}, {1, 2, 3, 4, 5, 6})), none, none, none, none), Error);
}

// ---- losses -----------------------------------------------------------------------------------

TEST(Losses, MseLossAndGradient) {
  ReferenceExecutor reference;
  LazyContext ctx(&reference);
  Tensor a = ctx.from_buffer(test::f32({2, 2}, {1, 2, 3, 4})).set_requires_grad(true);
  Tensor b = ctx.from_buffer(test::f32({2, 2}, {0, 2, 5, 3}));
  Tensor loss = mse_loss(a, b);
  std::vector<Tensor> g = grad(loss, {a});
  EXPECT_FLOAT_EQ(static_cast<float>(loss.item()), (1 + 0 + 4 + 1) / 4.0f);
  EXPECT_EQ(g[0].to_vector<float>(), (std::vector<float>{0.5f, 0, -1, 0.5f}));
  EXPECT_THROW(mse_loss(a, ctx.from_buffer(test::f32({4}, {1, 2, 3, 4}))), Error);
}

TEST(Losses, LogSoftmaxCompositionMatchesTheOp) {
  ReferenceExecutor reference;
  LazyContext ctx(&reference);
  std::vector<float> v = random_values(5 * 9, 41, -20, 20);
  v[3] = 80;  // a large logit: the shift by the row max keeps exp finite
  Tensor x = ctx.from_buffer(test::f32({5, 9}, v));
  const std::vector<float> got = log_softmax_differentiable(x).to_vector<float>();
  const std::vector<float> want = log_softmax(x, 1).to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << i;
}

TEST(Losses, CrossEntropyAndNllMatchDoublePrecisionWithClosedFormGradients) {
  ReferenceExecutor reference;
  LazyContext ctx(&reference);
  const int64_t n = 4, c = 5;
  const std::vector<float> logits = random_values(n * c, 51, -3, 3);
  const std::vector<int64_t> labels = {2, 0, 4, 2};
  Tensor x = ctx.from_buffer(test::f32({n, c}, logits)).set_requires_grad(true);
  Tensor y = ctx.from_buffer(test::i64({n}, labels));
  Tensor loss = cross_entropy(x, y);
  std::vector<Tensor> g = grad(loss, {x});
  ctx.mark_step();
  double want = 0;
  std::vector<double> want_grad(n * c);
  for (int64_t i = 0; i < n; ++i) {
    double m = -1e30, s = 0;
    for (int64_t j = 0; j < c; ++j) m = std::max(m, double(logits[i * c + j]));
    for (int64_t j = 0; j < c; ++j) s += std::exp(logits[i * c + j] - m);
    want += (m + std::log(s) - logits[i * c + labels[i]]) / n;
    for (int64_t j = 0; j < c; ++j) {
      want_grad[i * c + j] = (std::exp(logits[i * c + j] - m) / s - (j == labels[i] ? 1 : 0)) / n;
    }
  }
  EXPECT_NEAR(loss.item(), want, 1e-6 * std::abs(want));
  const std::vector<float> gv = g[0].to_vector<float>();
  for (size_t i = 0; i < gv.size(); ++i) EXPECT_NEAR(gv[i], want_grad[i], 1e-7) << i;

  // nll_loss of given log-probabilities: -mean of the label entries; its gradient -1/N there.
  Tensor lp = ctx.from_buffer(test::f32({2, 3}, {-1, -2, -3, -4, -5, -6})).set_requires_grad(true);
  Tensor l32 = ctx.from_buffer(test::i32({2}, {1, 2}));
  Tensor nll = nll_loss(lp, l32);
  std::vector<Tensor> gn = grad(nll, {lp});
  EXPECT_FLOAT_EQ(static_cast<float>(nll.item()), 4.0f);
  EXPECT_EQ(gn[0].to_vector<float>(), (std::vector<float>{0, -0.5f, 0, 0, 0, -0.5f}));
}

TEST(Losses, ClassificationErrorsNameTheLoss) {
  ReferenceExecutor reference;
  LazyContext ctx(&reference);
  Tensor x = ctx.from_buffer(test::f32({2, 3}, {1, 2, 3, 4, 5, 6}));
  try {
    cross_entropy(x, ctx.from_buffer(test::i64({3}, {0, 1, 2})));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cross_entropy: the labels must be"), std::string::npos) << e.what();
  }
  EXPECT_THROW(nll_loss(x, ctx.from_buffer(test::f32({2}, {0, 1}))), Error);  // float labels
  EXPECT_THROW(cross_entropy(ctx.from_buffer(test::f32({6}, {1, 2, 3, 4, 5, 6})), ctx.from_buffer(test::i64({6}, {0, 0, 0, 0, 0, 0}))), Error);
}

}  // namespace
}  // namespace tracecache
