// The autodiff tape and grad() (capture/trace/autograd.h): the same gradients in eager and lazy
// mode, a directional finite-difference check independent of any other implementation, one
// graph per barrier for forward + backward + update, the tape freed after grad(), and the errors.
// Per-op gradients against PyTorch: tests/grad/ (cli.grad_torch).
#include "capture/trace/autograd.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "capture/reference/reference.h"
#include "tests/test_buffers.h"

namespace tracecache {
namespace {

using test::random_values;

struct Mlp {
  std::vector<float> x = random_values(4 * 3, 1), w1 = random_values(3 * 5, 2), b1 = random_values(5, 3),
                     w2 = random_values(5 * 2, 4), y = random_values(4 * 2, 5);
};

// mean((relu(x @ w1 + b1) @ w2 - y)^2) and its gradients with respect to w1, b1 and w2.
struct MlpResult {
  float loss;
  std::vector<std::vector<float>> grads;
};

MlpResult run_mlp(LazyContext& ctx, const Mlp& m) {
  Tensor x = ctx.from_buffer(test::f32({4, 3}, m.x));
  Tensor w1 = ctx.from_buffer(test::f32({3, 5}, m.w1)).set_requires_grad(true);
  Tensor b1 = ctx.from_buffer(test::f32({5}, m.b1)).set_requires_grad(true);
  Tensor w2 = ctx.from_buffer(test::f32({5, 2}, m.w2)).set_requires_grad(true);
  Tensor y = ctx.from_buffer(test::f32({4, 2}, m.y));
  Tensor d = sub(matmul(relu(add(matmul(x, w1), b1)), w2), y);
  Tensor loss = mean(mul(d, d));
  std::vector<Tensor> g = grad(loss, {w1, b1, w2});
  ctx.mark_step();
  MlpResult r{static_cast<float>(loss.item()), {}};
  for (const Tensor& t : g) r.grads.push_back(t.to_vector<float>());
  return r;
}

double mlp_loss_f64(const Mlp& m) {
  double total = 0;
  for (int i = 0; i < 4; ++i) {
    double h[5];
    for (int j = 0; j < 5; ++j) {
      double s = m.b1[j];
      for (int k = 0; k < 3; ++k) s += double(m.x[i * 3 + k]) * m.w1[k * 5 + j];
      h[j] = s > 0 ? s : 0;
    }
    for (int o = 0; o < 2; ++o) {
      double s = 0;
      for (int j = 0; j < 5; ++j) s += h[j] * m.w2[j * 2 + o];
      const double d = s - m.y[i * 2 + o];
      total += d * d;
    }
  }
  return total / 8;
}

TEST(Autograd, EagerAndLazyGiveTheSameGradients) {
  Mlp m;
  ReferenceExecutor reference;
  LazyContext lazy(&reference);
  MlpResult a = run_mlp(lazy, m);
  ReferenceOpRunner runner;
  LazyOptions eager_options;
  eager_options.eager = &runner;
  LazyContext eager(&reference, eager_options);
  MlpResult b = run_mlp(eager, m);
  EXPECT_EQ(a.loss, b.loss);
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    ASSERT_EQ(a.grads[i].size(), b.grads[i].size());
    for (size_t k = 0; k < a.grads[i].size(); ++k) EXPECT_NEAR(a.grads[i][k], b.grads[i][k], 1e-6) << i << " " << k;
  }
}

// The directional derivative of the loss along a random direction, by central differences in
// double precision, equals the gradients' dot product with the direction.
TEST(Autograd, DirectionalFiniteDifferenceMatches) {
  Mlp m;
  ReferenceExecutor reference;
  LazyContext ctx(&reference);
  MlpResult r = run_mlp(ctx, m);
  std::vector<std::vector<float>> dir = {random_values(15, 11), random_values(5, 12), random_values(10, 13)};
  double analytic = 0;
  for (size_t p = 0; p < dir.size(); ++p) {
    for (size_t k = 0; k < dir[p].size(); ++k) analytic += double(dir[p][k]) * r.grads[p][k];
  }
  const double eps = 1e-3;
  auto shifted = [&](double s) {
    Mlp n = m;
    std::vector<float>* params[] = {&n.w1, &n.b1, &n.w2};
    for (size_t p = 0; p < dir.size(); ++p) {
      for (size_t k = 0; k < dir[p].size(); ++k) (*params[p])[k] += static_cast<float>(s * dir[p][k]);
    }
    return mlp_loss_f64(n);
  };
  const double numeric = (shifted(eps) - shifted(-eps)) / (2 * eps);
  EXPECT_NEAR(analytic, numeric, 1e-3 * std::max(1.0, std::abs(numeric)));
}

TEST(Autograd, ForwardBackwardAndUpdateAreOneGraph) {
  Mlp m;
  ReferenceExecutor reference;
  LazyContext ctx(&reference);
  Tensor x = ctx.from_buffer(test::f32({4, 3}, m.x));
  Tensor w = ctx.from_buffer(test::f32({3, 5}, m.w1)).set_requires_grad(true);
  for (int step = 0; step < 3; ++step) {
    Tensor loss = mean(mul(matmul(x, w), matmul(x, w)));
    std::vector<Tensor> g = grad(loss, {w});
    {
      NoGradGuard no_tape(ctx);
      w.assign(sub(w, mul(g[0], full(ctx, {}, 0.1))));
    }
    ctx.mark_step();
    EXPECT_TRUE(loss.is_materialized());
  }
  ASSERT_EQ(ctx.executed_keys().size(), 3u);
  EXPECT_EQ(ctx.executed_keys()[1], ctx.executed_keys()[2]);
  EXPECT_TRUE(w.requires_grad());
}

TEST(Autograd, TapeIsFreedAfterGrad) {
  ReferenceExecutor reference;
  LazyContext ctx(&reference);
  Tensor w = ctx.from_buffer(test::f32({3}, {1, 2, 3})).set_requires_grad(true);
  Tensor loss = sum(mul(w, w));
  (void)grad(loss, {w});
  EXPECT_THROW((void)grad(loss, {w}), Error);
  Tensor again = sum(mul(w, w));
  std::vector<Tensor> g = grad(again, {w}, {.retain_graph = true});
  std::vector<Tensor> g2 = grad(again, {w});
  EXPECT_EQ(g[0].to_vector<float>(), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(g2[0].to_vector<float>(), (std::vector<float>{2, 4, 6}));
}

TEST(Autograd, Errors) {
  ReferenceExecutor reference;
  LazyContext ctx(&reference);
  Tensor i = ctx.from_buffer(test::i64({2}, {1, 2}));
  EXPECT_THROW(i.set_requires_grad(true), Error);
  Tensor w = ctx.from_buffer(test::f32({2}, {1, 2})).set_requires_grad(true);
  Tensor v = ctx.from_buffer(test::f32({2}, {1, 2}));
  EXPECT_THROW((void)grad(mul(w, w), {w}), Error);         // not one element
  EXPECT_THROW((void)grad(sum(mul(w, w)), {v}), Error);    // v does not require a gradient
  EXPECT_THROW((void)grad(sum(mul(v, v)), {w}), Error);    // the loss does not depend on w's tape
  Tensor unused = ctx.from_buffer(test::f32({2}, {5, 6})).set_requires_grad(true);
  std::vector<Tensor> g = grad(sum(mul(w, w)), {w, unused});
  EXPECT_EQ(g[1].to_vector<float>(), (std::vector<float>{0, 0}));
  Tensor r = mul(w, w);
  EXPECT_THROW(r.set_requires_grad(true), Error);  // not a leaf
}

}  // namespace
}  // namespace tracecache
