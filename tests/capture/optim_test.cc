// Optimizers and clip_grad_norm_ (capture/trace/optim.h):
//  - SGD (momentum, dampening, nesterov, weight decay), Adam and AdamW against double-precision
//    implementations of PyTorch 1.13's update rules written here, over several steps with a
//    changing learning rate;
//  - clip_grad_norm_ (total norm and the scaled gradients, computed on the device);
//  - lazy mode through a Runtime with an in-memory cache: 5 training steps (forward, backward,
//    update) with the learning rate changing every step compile once, and the step's graph
//    donates every parameter and state tensor (no second copy of the weights);
//  - eager equals lazy; the errors.
// The end-to-end comparison with PyTorch itself is tests/cli/train_torch.sh (tests/train/).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "replay/backends/cpu/cpu_backend.h"
#include "capture/reference/reference.h"
#include "capture/trace/autograd.h"
#include "capture/trace/losses.h"
#include "capture/trace/optim.h"
#include "replay/engine/runtime.h"
#include "tests/test_buffers.h"

namespace tracecache {
namespace {

using test::random_values;

using Vec = std::vector<double>;
constexpr int kSteps = 4;
const double kLrs[kSteps] = {0.1, 0.05, 0.08, 0.02};

// Two parameters ([2, 3] and [3]) and one gradient per step for each, fixed.
struct Problem {
  std::vector<std::vector<float>> init = {random_values(6, 1), random_values(3, 2)};
  std::vector<std::vector<std::vector<float>>> grads;  // [step][param]
  Problem() {
    for (int s = 0; s < kSteps; ++s) {
      grads.push_back({random_values(6, 10 + s), random_values(3, 20 + s)});
    }
  }
};

// Runs `make(ctx, params)`'s optimizer over the problem's steps (lr from kLrs) and returns the
// final parameters.
template <typename Make>
std::vector<std::vector<float>> run(LazyContext& ctx, const Problem& pr, Make make) {
  std::vector<Tensor> params = {ctx.from_buffer(test::f32({2, 3}, pr.init[0])),
                                ctx.from_buffer(test::f32({3}, pr.init[1]))};
  std::unique_ptr<Optimizer> opt = make(ctx, params);
  for (int s = 0; s < kSteps; ++s) {
    opt->set_lr(kLrs[s]);
    std::vector<Tensor> g = {ctx.from_buffer(test::f32({2, 3}, pr.grads[s][0])),
                             ctx.from_buffer(test::f32({3}, pr.grads[s][1]))};
    opt->step(g);
    ctx.mark_step();
  }
  EXPECT_EQ(opt->steps(), kSteps);
  return {params[0].to_vector<float>(), params[1].to_vector<float>()};
}

void expect_close(const std::vector<std::vector<float>>& got, const std::vector<Vec>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t p = 0; p < got.size(); ++p) {
    ASSERT_EQ(got[p].size(), want[p].size());
    for (size_t i = 0; i < got[p].size(); ++i) {
      EXPECT_NEAR(got[p][i], want[p][i], 2e-6 * (1 + std::abs(want[p][i]))) << "param " << p << " element " << i;
    }
  }
}

// torch.optim.SGD's update (_single_tensor_sgd), in double.
std::vector<Vec> sgd_double(const Problem& pr, const SgdOptions& o) {
  std::vector<Vec> p, buf;
  for (const auto& v : pr.init) p.emplace_back(v.begin(), v.end());
  for (int s = 0; s < kSteps; ++s) {
    for (size_t k = 0; k < p.size(); ++k) {
      Vec d(pr.grads[s][k].begin(), pr.grads[s][k].end());
      for (size_t i = 0; i < d.size(); ++i) d[i] += o.weight_decay * p[k][i];
      if (o.momentum != 0) {
        if (buf.size() <= k) {
          buf.push_back(d);
        } else {
          for (size_t i = 0; i < d.size(); ++i) buf[k][i] = o.momentum * buf[k][i] + (1 - o.dampening) * d[i];
        }
        for (size_t i = 0; i < d.size(); ++i) d[i] = o.nesterov ? d[i] + o.momentum * buf[k][i] : buf[k][i];
      }
      for (size_t i = 0; i < d.size(); ++i) p[k][i] -= kLrs[s] * d[i];
    }
  }
  return p;
}

// torch.optim.Adam / AdamW's update (_single_tensor_adam, amsgrad off), in double.
std::vector<Vec> adam_double(const Problem& pr, const AdamOptions& o, bool decoupled) {
  std::vector<Vec> p, m, v;
  for (const auto& x : pr.init) {
    p.emplace_back(x.begin(), x.end());
    m.emplace_back(x.size(), 0.0);
    v.emplace_back(x.size(), 0.0);
  }
  for (int s = 0; s < kSteps; ++s) {
    const double t = s + 1, lr = kLrs[s];
    const double bc1 = 1 - std::pow(o.beta1, t), bc2 = 1 - std::pow(o.beta2, t);
    for (size_t k = 0; k < p.size(); ++k) {
      for (size_t i = 0; i < p[k].size(); ++i) {
        double g = pr.grads[s][k][i];
        if (decoupled) {
          p[k][i] *= 1 - lr * o.weight_decay;
        } else {
          g += o.weight_decay * p[k][i];
        }
        m[k][i] = o.beta1 * m[k][i] + (1 - o.beta1) * g;
        v[k][i] = o.beta2 * v[k][i] + (1 - o.beta2) * g * g;
        p[k][i] -= lr / bc1 * m[k][i] / (std::sqrt(v[k][i]) / std::sqrt(bc2) + o.eps);
      }
    }
  }
  return p;
}

TEST(Optim, SgdFollowsPyTorchsUpdate) {
  Problem pr;
  const SgdOptions cases[] = {
      {.lr = 0.1},
      {.lr = 0.1, .momentum = 0.9},
      {.lr = 0.1, .momentum = 0.9, .dampening = 0.3, .weight_decay = 0.01},
      {.lr = 0.1, .momentum = 0.8, .weight_decay = 0.05, .nesterov = true},
  };
  for (const SgdOptions& o : cases) {
    ReferenceExecutor reference;
    LazyContext ctx(&reference);
    auto got = run(ctx, pr, [&](LazyContext& c, std::vector<Tensor> params) {
      return std::make_unique<SGD>(c, std::move(params), o);
    });
    SCOPED_TRACE(testing::Message() << "momentum " << o.momentum << " nesterov " << o.nesterov);
    expect_close(got, sgd_double(pr, o));
  }
}

TEST(Optim, AdamAndAdamWFollowPyTorchsUpdate) {
  Problem pr;
  for (double wd : {0.0, 0.1}) {
    const AdamOptions o{.lr = 0.1, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = wd};
    ReferenceExecutor reference;
    LazyContext a(&reference), b(&reference);
    auto adam = run(a, pr, [&](LazyContext& c, std::vector<Tensor> params) {
      return std::make_unique<Adam>(c, std::move(params), o);
    });
    expect_close(adam, adam_double(pr, o, false));
    auto adamw = run(b, pr, [&](LazyContext& c, std::vector<Tensor> params) {
      return std::make_unique<AdamW>(c, std::move(params),
                                     AdamWOptions{.lr = 0.1, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = wd});
    });
    expect_close(adamw, adam_double(pr, o, true));
  }
}

TEST(Optim, EagerEqualsLazy) {
  Problem pr;
  auto make = [](LazyContext& c, std::vector<Tensor> params) {
    return std::make_unique<Adam>(c, std::move(params), AdamOptions{.lr = 0.05, .weight_decay = 0.01});
  };
  ReferenceExecutor reference;
  LazyContext lazy(&reference);
  ReferenceOpRunner runner;
  LazyOptions eager_options;
  eager_options.eager = &runner;
  LazyContext eager(&reference, eager_options);
  EXPECT_EQ(run(lazy, pr, make), run(eager, pr, make));
}

TEST(Optim, ClipGradNormScalesOnTheDevice) {
  ReferenceExecutor reference;
  LazyContext ctx(&reference);
  std::vector<Tensor> g = {ctx.from_buffer(test::f32({2}, {3, 0})), ctx.from_buffer(test::f32({1}, {4}))};
  Tensor norm = clip_grad_norm_(g, 1.0);
  EXPECT_FALSE(norm.is_materialized()) << "nothing is read back to compute it";
  EXPECT_FLOAT_EQ(static_cast<float>(norm.item()), 5.0f);
  const float coef = 1.0f / (5.0f + 1e-6f);
  EXPECT_EQ(g[0].to_vector<float>(), (std::vector<float>{3 * coef, 0}));
  EXPECT_EQ(g[1].to_vector<float>(), (std::vector<float>{4 * coef}));
  // Below the limit: unchanged.
  std::vector<Tensor> small = {ctx.from_buffer(test::f32({2}, {0.3f, 0.4f}))};
  EXPECT_FLOAT_EQ(static_cast<float>(clip_grad_norm_(small, 1.0).item()), 0.5f);
  EXPECT_EQ(small[0].to_vector<float>(), (std::vector<float>{0.3f, 0.4f}));
  std::vector<Tensor> none;
  EXPECT_THROW(clip_grad_norm_(none, 1.0), Error);
  EXPECT_THROW(clip_grad_norm_(small, -1.0), Error);
}

// Records every graph's donations and passes it to the reference evaluator.
class DonationRecorder final : public GraphExecutor {
 public:
  explicit DonationRecorder(GraphExecutor* next) : next_(next) {}
  Result<std::vector<DataRef>> execute(const CanonicalGraph& graph, std::vector<DataRef> params) override {
    donations.push_back(graph.graph.donations().size());
    return next_->execute(graph, std::move(params));
  }
  std::vector<size_t> donations;

 private:
  GraphExecutor* next_;
};

// One training step of a linear classifier: forward, cross-entropy, backward, clip, update.
void train_step(LazyContext& ctx, std::vector<Tensor>& params, Optimizer& opt, const Tensor& x, const Tensor& y) {
  Tensor logits = add(matmul(x, params[0]), params[1]);
  Tensor loss = cross_entropy(logits, y);
  std::vector<Tensor> g = grad(loss, params);
  clip_grad_norm_(g, 0.5);
  opt.step(g);
  ctx.mark_step();
}

TEST(Optim, AScheduleCompilesOnceAndEveryStateIsDonated) {
  for (int kind = 0; kind < 2; ++kind) {
    SCOPED_TRACE(kind == 0 ? "SGD" : "AdamW");
    CpuBackend cpu;
    Metrics metrics;
    Runtime runtime(&cpu, nullptr, &metrics);  // in-memory cache only
    DonationRecorder recorder(&runtime);
    LazyOptions lazy;
    lazy.metrics = &metrics;
    LazyContext ctx(&recorder, lazy);
    Tensor x = ctx.from_buffer(test::f32({4, 3}, random_values(12, 5)));
    Tensor y = ctx.from_buffer(test::i64({4}, {0, 2, 1, 2}));
    std::vector<Tensor> params = {ctx.from_buffer(test::f32({3, 3}, random_values(9, 6))).set_requires_grad(true),
                                  ctx.from_buffer(test::f32({3}, random_values(3, 7))).set_requires_grad(true)};
    std::unique_ptr<Optimizer> opt;
    if (kind == 0) {
      opt = std::make_unique<SGD>(ctx, params, SgdOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true});
    } else {
      opt = std::make_unique<AdamW>(ctx, params, AdamWOptions{.lr = 0.01});
    }
    for (int step = 0; step < 5; ++step) {
      opt->set_lr(0.1 / (1 + step));
      train_step(ctx, params, *opt, x, y);
    }
    EXPECT_EQ(metrics.counter(counters::kTraces), 5);
    EXPECT_EQ(metrics.counter(counters::kCompiles), 1) << "a changing learning rate recompiled";
    ASSERT_EQ(ctx.executed_keys().size(), 5u);
    // Parameters, and SGD's momentum buffers or Adam's two moments.
    const size_t states = kind == 0 ? 4 : 6;
    for (size_t d : recorder.donations) EXPECT_EQ(d, states);
    EXPECT_TRUE(params[0].requires_grad());
  }
}

TEST(Optim, Errors) {
  ReferenceExecutor reference;
  LazyContext ctx(&reference), other(&reference);
  std::vector<Tensor> params = {ctx.from_buffer(test::f32({2}, {1, 2}))};
  EXPECT_THROW(SGD(ctx, params, {.lr = -1}), Error);
  EXPECT_THROW(SGD(ctx, params, {.lr = 0.1, .nesterov = true}), Error);  // nesterov without momentum
  EXPECT_THROW(SGD(ctx, params, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}), Error);
  EXPECT_THROW(Adam(ctx, params, {.beta1 = 1.0}), Error);
  EXPECT_THROW(AdamW(ctx, params, {.eps = -1}), Error);
  EXPECT_THROW(SGD(ctx, {ctx.from_buffer(test::i64({2}, {1, 2}))}, {}), Error);  // not f32
  EXPECT_THROW(SGD(other, params, {}), Error);                                   // another context
  SGD sgd(ctx, params, {.lr = 0.1});
  EXPECT_THROW(sgd.set_lr(-0.5), Error);
  std::vector<Tensor> wrong = {ctx.from_buffer(test::f32({3}, {1, 2, 3}))};
  EXPECT_THROW(sgd.step(wrong), Error);
  EXPECT_THROW(sgd.step({}), Error);
}

}  // namespace
}  // namespace tracecache
