// Canonicalization and the graph hash: invariant 1 (stable hash) of docs/architecture.md.
#include <gtest/gtest.h>

#include "capture/ir/canonical.h"
#include "capture/reference/reference.h"
#include "capture/trace/recording_executor.h"
#include "capture/trace/tensor.h"
#include "tests/test_graphs.h"

namespace tracecache {
namespace {

using testing::ComputingRecorder;

HostBuffer filled(DType dtype, Shape shape, double start = 0) {
  HostBuffer b(dtype, shape);
  dispatch_dtype(dtype, [&]<typename T>() {
    for (int64_t i = 0; i < b.numel(); ++i) b.data<T>()[i] = static_cast<T>(start + static_cast<double>(i));
  });
  return b;
}

// Runs `build` in a fresh context with two inputs of the given types and returns the canonical
// graph of the step it marks.
template <typename Fn>
CanonicalGraph step_graph(Fn build, TensorType tx = {DType::kF32, {2, 3}},
                          TensorType ty = {DType::kF32, {2, 3}}, LazyOptions options = {}) {
  RecordingExecutor exec;
  LazyContext ctx(&exec, options);
  Tensor x = ctx.from_buffer(filled(tx.dtype, tx.shape, 1));
  Tensor y = ctx.from_buffer(filled(ty.dtype, ty.shape, 2));
  {
    std::vector<Tensor> keep = build(ctx, x, y);
    ctx.mark_step();
  }
  EXPECT_EQ(exec.graphs().size(), 1u);
  return exec.graphs().empty() ? CanonicalGraph{} : exec.graphs().back().graph;
}

GraphKey key_of(auto build, TensorType tx = {DType::kF32, {2, 3}},
                TensorType ty = {DType::kF32, {2, 3}}, LazyOptions options = {}) {
  return step_graph(build, tx, ty, options).key;
}

std::vector<Tensor> base(LazyContext&, Tensor x, Tensor y) {
  Tensor a = exp(x);
  Tensor b = tanh(y);
  return {add(a, b), sum(a, {1}, false)};
}

TEST(GraphHash, SameGraphInDifferentRecordingOrderHashesEqual) {
  GraphKey k1 = key_of(base);
  GraphKey k2 = key_of([](LazyContext&, Tensor x, Tensor y) {
    Tensor b = tanh(y);  // recorded first this time
    Tensor a = exp(x);
    Tensor s = sum(a, {1}, false);
    Tensor r = add(a, b);
    return std::vector<Tensor>{r, s};  // created after s, but listed first
  });
  // Roots are ordered by creation, so list order alone does not decide; make creation order
  // match by building the roots in the same order.
  GraphKey k3 = key_of([](LazyContext&, Tensor x, Tensor y) {
    Tensor b = tanh(y);
    Tensor a = exp(x);
    Tensor r = add(a, b);
    Tensor s = sum(a, {1}, false);
    return std::vector<Tensor>{r, s};
  });
  EXPECT_EQ(k1, k3);
  EXPECT_NE(k1, k2) << "output order is part of the key";
}

TEST(GraphHash, DeadNodesAreDropped) {
  GraphKey k1 = key_of(base);
  GraphKey k2 = key_of([](LazyContext& ctx, Tensor x, Tensor y) {
    Tensor a = exp(x);
    (void)mul(a, y);  // dead: dropped before the barrier
    (void)uniform(ctx, {4}, 3);  // dead source
    Tensor b = tanh(y);
    return std::vector<Tensor>{add(a, b), sum(a, {1}, false)};
  });
  EXPECT_EQ(k1, k2);
}

TEST(GraphHash, CommonSubexpressionsAreMerged) {
  CanonicalGraph once = step_graph([](LazyContext&, Tensor x, Tensor) {
    Tensor e = exp(x);
    return std::vector<Tensor>{add(e, e)};
  });
  CanonicalGraph twice = step_graph([](LazyContext&, Tensor x, Tensor) {
    return std::vector<Tensor>{add(exp(x), exp(x))};
  });
  EXPECT_EQ(once.key, twice.key);
  EXPECT_EQ(twice.graph.size(), 3u);  // parameter, exp, add
}

TEST(GraphHash, NormalizedAttributesHashEqual) {
  auto with_axes = [](IntList axes) {
    return key_of([axes](LazyContext&, Tensor x, Tensor) {
      return std::vector<Tensor>{sum(x, axes, false)};
    });
  };
  EXPECT_EQ(with_axes({}), with_axes({0, 1}));
  EXPECT_EQ(with_axes({-1, 0}), with_axes({0, 1}));
  EXPECT_EQ(with_axes({-1}), with_axes({1}));
  EXPECT_NE(with_axes({0}), with_axes({1}));
}

TEST(GraphHash, EverySingleChangeChangesTheKey) {
  GraphKey k = key_of(base);
  // op
  EXPECT_NE(k, key_of([](LazyContext&, Tensor x, Tensor y) {
    Tensor a = exp(x);
    Tensor b = sigmoid(y);
    return std::vector<Tensor>{add(a, b), sum(a, {1}, false)};
  }));
  // attribute
  EXPECT_NE(k, key_of([](LazyContext&, Tensor x, Tensor y) {
    Tensor a = exp(x);
    Tensor b = tanh(y);
    return std::vector<Tensor>{add(a, b), sum(a, {1}, true)};
  }));
  // dtype of an input
  EXPECT_NE(k, key_of(base, {DType::kI32, {2, 3}}));
  // shape of an input
  EXPECT_NE(k, key_of(base, {DType::kF32, {2, 3}}, {DType::kF32, {1, 3}}));
  // edge
  EXPECT_NE(k, key_of([](LazyContext&, Tensor x, Tensor y) {
    Tensor a = exp(x);
    Tensor b = tanh(y);
    return std::vector<Tensor>{add(b, a), sum(a, {1}, false)};
  }));
  // output order
  EXPECT_NE(k, key_of([](LazyContext&, Tensor x, Tensor y) {
    Tensor a = exp(x);
    Tensor b = tanh(y);
    Tensor s = sum(a, {1}, false);
    return std::vector<Tensor>{s, add(a, b)};
  }));
}

TEST(GraphHash, AliasingIsPartOfTheKey) {
  RecordingExecutor exec;
  LazyContext ctx(&exec);
  Tensor x = ctx.from_buffer(filled(DType::kF32, {4}));
  Tensor y = ctx.from_buffer(filled(DType::kF32, {4}));
  Tensor x_again = ctx.from_buffer(x.buffer());  // another handle on the same data
  { Tensor r = mul(x, y); ctx.mark_step(); }
  { Tensor r = mul(x, x_again); ctx.mark_step(); }
  ASSERT_EQ(exec.graphs().size(), 2u);
  EXPECT_EQ(exec.graphs()[0].graph.graph.params().size(), 2u);
  EXPECT_EQ(exec.graphs()[1].graph.graph.params().size(), 1u);
  EXPECT_NE(exec.graphs()[0].graph.key, exec.graphs()[1].graph.key);
}

TEST(GraphHash, ParametersAreNumberedByFirstUse) {
  CanonicalGraph g = step_graph([](LazyContext&, Tensor x, Tensor y) {
    Tensor a = exp(x);  // x becomes the trace's parameter 0, y its parameter 1
    Tensor b = exp(y);
    return std::vector<Tensor>{sub(b, a)};  // a and b die here; the graph reaches y first
  });
  ASSERT_EQ(g.sources.size(), 2u);
  EXPECT_EQ(g.sources[0].trace_param, 1u) << "canonical parameter 0 is y, the trace's 1";
  EXPECT_EQ(g.sources[1].trace_param, 0u);
  GraphKey swapped = key_of([](LazyContext&, Tensor x, Tensor y) {
    return std::vector<Tensor>{sub(exp(x), exp(y))};
  });
  EXPECT_EQ(g.key, swapped) << "the same graph over renamed inputs";
}

TEST(GraphHash, ScalarConstantsAreLiftedByDefault) {
  auto scaled = [](double lr, bool bake) {
    LazyOptions o;
    o.canonicalize.bake_scalars = bake;
    return key_of([lr](LazyContext&, Tensor x, Tensor y) {
      return std::vector<Tensor>{sub(x, mul(y, lr))};
    }, {DType::kF32, {2, 3}}, {DType::kF32, {2, 3}}, o);
  };
  EXPECT_EQ(scaled(0.1, false), scaled(0.05, false));
  EXPECT_NE(scaled(0.1, true), scaled(0.05, true));
  EXPECT_NE(scaled(0.0, true), scaled(-0.0, true)) << "a baked -0.0 is another constant (1/-0.0 = -inf)";
  EXPECT_EQ(scaled(std::nan("1"), true), scaled(-std::nan("2"), true)) << "NaN is normalized";
}

TEST(GraphHash, LiftedScalarsKeepTheirValues) {
  ComputingRecorder exec;  // the test reads the step's values
  LazyContext ctx(&exec);
  Tensor x = ctx.from_buffer(filled(DType::kF32, {3}, 1));  // 1 2 3
  Tensor a = mul(x, 0.5);
  Tensor b = add(x, 0.5);  // equal constant values still get their own parameters
  ctx.mark_step();
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{0.5f, 1.0f, 1.5f}));
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{1.5f, 2.5f, 3.5f}));
  ASSERT_EQ(exec.graphs.size(), 1u);
  EXPECT_EQ(exec.graphs[0].graph.params().size(), 3u);
}

TEST(GraphHash, KeyHexRoundTrips) {
  GraphKey k = key_of(base);
  EXPECT_EQ(k.to_hex().size(), 32u);
  EXPECT_EQ(GraphKey::from_hex(k.to_hex()), k);
  EXPECT_FALSE(GraphKey::from_hex("xyz").has_value());
  EXPECT_FALSE(GraphKey::from_hex(std::string(32, 'g')).has_value());
}

// Golden keys: these must never change unless kIrFormatVersion is bumped. They pin the
// encoding (byte order, field order, op names, float normalization) across processes, runs and
// machines.
TEST(GraphHash, GoldenKeys) {
  EXPECT_EQ(key_of(base).to_hex(), "555b25c7bff52b8bcb903d37f1f963ce");
  EXPECT_EQ(key_of([](LazyContext&, Tensor x, Tensor y) {
              Tensor h = relu(matmul(x, transpose(y, 0, 1)));
              return std::vector<Tensor>{mean(h, {}, false), argmax(h, -1, false)};
            }).to_hex(),
            "5936358003d8ce9461c10a5b1ef17954");
  EXPECT_EQ(key_of([](LazyContext& ctx, Tensor x, Tensor) {
              Tensor r = reshape(x, {3, -1});
              Tensor c = concat(std::vector<Tensor>{r, r}, 0);
              Tensor s = slice(c, 0, 1, -1, 2);
              Tensor m = where(gt(s, 2.0), s, uniform(ctx, {1, 2}, 7));
              return std::vector<Tensor>{cast(m, DType::kI64), arange(ctx, 0, 5)};
            }).to_hex(),
            "02fc850494fea66ab41d65bbc34a4b32");
}

}  // namespace
}  // namespace tracecache
