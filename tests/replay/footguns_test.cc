// Trace-once footguns: one test per known hazard of guard-based caching (docs/architecture.md invariant 3).
// Each must either recompile or give exactly the result of tracing afresh; the tests check the
// values and that the hazards that change the graph do recompile, with a reason. A randomized property test closes the file.
#include <gtest/gtest.h>

#include <random>

#include "tests/once_harness.h"

namespace tracecache {
namespace {

TEST(Footguns, ChangedScalarRecompilesOrIsAnInput) {
  TracedFn fn = [](LazyContext&, const TraceArgs& a) {
    return std::vector<Tensor>{mul(a.tensor(0), a.scalar(0))};
  };
  Harness h;
  CompiledFunction f("scale", fn, &h.runtime);
  Tensor x = h.tensor(filled(DType::kF32, {4}, 1));
  EXPECT_EQ(h.call(f, {{x}, {2.0}}), (std::vector<std::vector<double>>{{2, 4, 6, 8}}));
  EXPECT_EQ(h.call(f, {{x}, {3.0}}), (std::vector<std::vector<double>>{{3, 6, 9, 12}}));
  EXPECT_EQ(f.stats().recompiles, 1);
  ASSERT_EQ(f.stats().recompile_reasons.size(), 1u);
  EXPECT_NE(f.stats().recompile_reasons[0].find("scalar 0: value expected 2, actual 3"), std::string::npos)
      << f.stats().recompile_reasons[0];

  // Declared dynamic: one entry serves every value.
  CompiledFunctionOptions o;
  o.dynamic_scalars = {0};
  TracedFn dyn = [](LazyContext&, const TraceArgs& a) {
    return std::vector<Tensor>{mul(a.tensor(0), a.scalar_tensor(0))};
  };
  CompiledFunction g("scale_dynamic", dyn, &h.runtime, o);
  for (double lr : {2.0, 3.0, 0.5}) {
    auto out = h.call(g, {{x}, {lr}});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], (std::vector<double>{lr, 2 * lr, 3 * lr, 4 * lr}));
  }
  EXPECT_EQ(g.stats().traces, 1);
  EXPECT_EQ(g.stats().recompiles, 0);
}

TEST(Footguns, ChangedShapeRecompilesNamingInputAndDim) {
  Harness h;
  CompiledFunctionOptions o;
  o.input_names = {"x"};
  CompiledFunction f("sum_rows", [](LazyContext&, const TraceArgs& a) {
    return std::vector<Tensor>{sum(a.tensor(0), {1})};
  }, &h.runtime, o);
  h.call(f, {{h.tensor(filled(DType::kF32, {8, 2}, 0))}, {}});
  auto out = h.call(f, {{h.tensor(filled(DType::kF32, {16, 2}, 0))}, {}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].size(), 16u);
  ASSERT_EQ(f.stats().recompile_reasons.size(), 1u);
  EXPECT_NE(f.stats().recompile_reasons[0].find("input 0 'x': size of dim 0 expected 8, actual 16"),
            std::string::npos) << f.stats().recompile_reasons[0];
  // Both entries now hit.
  h.call(f, {{h.tensor(filled(DType::kF32, {8, 2}, 5))}, {}});
  h.call(f, {{h.tensor(filled(DType::kF32, {16, 2}, 5))}, {}});
  EXPECT_EQ(f.stats().traces, 2);
  EXPECT_EQ(f.stats().hits_per_entry, (std::vector<int64_t>{1, 1}));
}

TEST(Footguns, ChangedDTypeRecompiles) {
  Harness h;
  CompiledFunction f("neg", [](LazyContext&, const TraceArgs& a) {
    return std::vector<Tensor>{neg(a.tensor(0))};
  }, &h.runtime);
  h.call(f, {{h.tensor(filled(DType::kF32, {3}, 1))}, {}});
  auto out = h.call(f, {{h.tensor(filled(DType::kI32, {3}, 1))}, {}});
  EXPECT_EQ(out, (std::vector<std::vector<double>>{{-1, -2, -3}}));
  EXPECT_EQ(f.stats().recompiles, 1);
  EXPECT_NE(f.stats().recompile_reasons[0].find("dtype expected f32, actual i32"), std::string::npos);
}

TEST(Footguns, AliasedInputsRecompile) {
  // x * y with x and y the same tensor has one parameter; with distinct tensors two. An entry
  // traced with aliased inputs must not run for distinct ones (and vice versa).
  Harness h;
  CompiledFunction f("mul", [](LazyContext&, const TraceArgs& a) {
    return std::vector<Tensor>{mul(a.tensor(0), a.tensor(1))};
  }, &h.runtime);
  Tensor x = h.tensor(filled(DType::kF32, {3}, 1));
  Tensor y = h.tensor(filled(DType::kF32, {3}, 10));
  EXPECT_EQ(h.call(f, {{x, x}, {}}), (std::vector<std::vector<double>>{{1, 4, 9}}));
  EXPECT_EQ(h.call(f, {{x, y}, {}}), (std::vector<std::vector<double>>{{10, 22, 36}}));
  EXPECT_EQ(f.stats().recompiles, 1);
  EXPECT_NE(f.stats().recompile_reasons[0].find("aliasing expected same data as input 0, actual its own data"), std::string::npos)
      << f.stats().recompile_reasons[0];
  EXPECT_EQ(h.call(f, {{y, y}, {}}), (std::vector<std::vector<double>>{{100, 121, 144}}));
  EXPECT_EQ(f.stats().traces, 2) << "the aliased entry serves (y, y)";
}

TEST(Footguns, DataDependentBranchIsGuardedByTheValueRead) {
  // fn reads a value (a barrier inside the function) and branches on it.
  TracedFn fn = [](LazyContext&, const TraceArgs& a) {
    Tensor s = sum(a.tensor(0));
    if (s.item() > 0) return std::vector<Tensor>{mul(a.tensor(0), 2.0)};
    return std::vector<Tensor>{neg(a.tensor(0))};
  };
  Harness h;
  CompiledFunction f("branch", fn, &h.runtime);
  EXPECT_EQ(h.call(f, {{h.tensor(filled(DType::kF32, {3}, 1))}, {}}), (std::vector<std::vector<double>>{{2, 4, 6}}));
  EXPECT_EQ(h.call(f, {{h.tensor(filled(DType::kF32, {3}, 2))}, {}}), (std::vector<std::vector<double>>{{4, 6, 8}}))
      << "same shapes, different values: the read value differs, so fn is traced again";
  EXPECT_EQ(h.call(f, {{h.tensor(filled(DType::kF32, {3}, -5))}, {}}), (std::vector<std::vector<double>>{{5, 4, 3}}))
      << "the other branch";
  EXPECT_EQ(f.stats().traces, 3);
  EXPECT_EQ(h.call(f, {{h.tensor(filled(DType::kF32, {3}, 1))}, {}}), (std::vector<std::vector<double>>{{2, 4, 6}}));
  EXPECT_EQ(f.stats().traces, 3) << "a repeated value replays its entry";
}

TEST(Footguns, NonContiguousInputIsACopyNotAView) {
  // Tensors are dense: a transposed argument is materialized as its own contiguous data, so the
  // entry traced for the original layout computes the right thing for it.
  Harness h;
  CompiledFunction f("rowsum", [](LazyContext&, const TraceArgs& a) {
    return std::vector<Tensor>{sum(a.tensor(0), {1})};
  }, &h.runtime);
  Tensor m = h.tensor(filled(DType::kF32, {2, 2}, 1));  // [[1,2],[3,4]]
  Tensor mt = transpose(m, 0, 1);
  h.ctx.mark_step();
  EXPECT_EQ(h.call(f, {{m}, {}}), (std::vector<std::vector<double>>{{3, 7}}));
  EXPECT_EQ(h.call(f, {{mt}, {}}), (std::vector<std::vector<double>>{{4, 6}}));
  EXPECT_EQ(f.stats().traces, 1) << "same dtype and shape: one entry, correct for both layouts";
}

TEST(Footguns, ChangedOptionRecompiles) {
  // The same function name under other lowering options must not reuse entries or executables:
  // the options digest is a guard and part of the executable key.
  Harness h;
  TracedFn fn = [](LazyContext&, const TraceArgs& a) { return std::vector<Tensor>{add(a.tensor(0), 1.0)}; };
  CompiledFunctionOptions baked;
  baked.canonicalize.bake_scalars = true;
  CompiledFunction lifted_f("f", fn, &h.runtime);
  CompiledFunction baked_f("f", fn, &h.runtime, baked);
  Tensor x = h.tensor(filled(DType::kF32, {2}, 1));
  EXPECT_EQ(h.call(lifted_f, {{x}, {}}), h.call(baked_f, {{x}, {}}));
  EXPECT_EQ(h.metrics.counter(counters::kCompiles), 2) << "different lowering, different graphs";
}

TEST(CompiledFunction, AfterTheFirstCallFnIsNotCalled) {
  Harness h;
  int calls = 0;
  CompiledFunction f("mlp", [&calls](LazyContext&, const TraceArgs& a) {
    ++calls;
    return std::vector<Tensor>{relu(add(matmul(a.tensor(0), a.tensor(1)), a.tensor(2)))};
  }, &h.runtime);
  Tensor w = h.tensor(filled(DType::kF32, {4, 3}, -0.5, 0.1));
  Tensor b = h.tensor(filled(DType::kF32, {3}, 0.1));
  for (int step = 0; step < 5; ++step) {
    Tensor x = h.tensor(filled(DType::kF32, {2, 4}, step));
    auto out = h.call(f, {{x, w, b}, {}});
    auto want = eager([](LazyContext&, const TraceArgs& a) {
      return std::vector<Tensor>{relu(add(matmul(a.tensor(0), a.tensor(1)), a.tensor(2)))};
    }, {{x, w, b}, {}});
    EXPECT_EQ(out, want);
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(f.stats().hits_per_entry, (std::vector<int64_t>{4}));
  EXPECT_EQ(h.metrics.counter(counters::kTraces), 1);
}

TEST(CompiledFunction, RecompileLimitFallsBackToLazyWithOneWarning) {
  Harness h;
  CompiledFunctionOptions o;
  o.recompile_limit = 2;
  o.automatic_dynamic = false;  // every size its own entry
  CompiledFunction f("grow", [](LazyContext&, const TraceArgs& a) {
    return std::vector<Tensor>{exp(a.tensor(0))};
  }, &h.runtime, o);
  for (int n = 1; n <= 5; ++n) {
    auto out = h.call(f, {{h.tensor(filled(DType::kF32, {n}, 0))}, {}});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].size(), static_cast<size_t>(n));
  }
  EXPECT_TRUE(f.stats().fell_back_to_lazy);
  EXPECT_EQ(f.num_entries(), 2u);
  EXPECT_EQ(f.stats().traces, 5);
  // Derived: one recompile per reason (n = 2, and n = 3 at the limit), one hit count per entry.
  EXPECT_EQ(f.stats().calls, 5);
  EXPECT_EQ(f.stats().recompiles, 2);
  ASSERT_EQ(f.stats().recompile_reasons.size(), 2u);
  EXPECT_EQ(f.stats().recompile_reasons[1], "entry 0: input 0: size of dim 0 expected 1, actual 3");
  EXPECT_EQ(f.stats().hits_per_entry, (std::vector<int64_t>{0, 0}));
  int fallback_warnings = 0;
  for (const std::string& w : h.runtime.warnings()) fallback_warnings += w.find("lazy mode") != std::string::npos;
  EXPECT_EQ(fallback_warnings, 1);
}

TEST(CompiledFunction, CapturedDataIsRejectedLoudly) {
  Harness h;
  Tensor captured = h.tensor(filled(DType::kF32, {2}, 1));
  CompiledFunction f("leaky", [&captured](LazyContext&, const TraceArgs& a) {
    return std::vector<Tensor>{add(a.tensor(0), captured)};
  }, &h.runtime);
  auto r = f(h.ctx, {{h.tensor(filled(DType::kF32, {2}, 1))}, {}});
  EXPECT_FALSE(r.is_ok());
}

// Random elementwise/reduction programs, random perturbations of the arguments: once mode
// must always equal tracing afresh.
TEST(CompiledFunction, PropertyOnceEqualsFreshTrace) {
  std::mt19937 rng(7);
  Harness h;
  for (int program = 0; program < 25; ++program) {
    std::vector<int> ops;
    for (int i = 0; i < 6; ++i) ops.push_back(static_cast<int>(rng() % 7));
    TracedFn fn = [ops](LazyContext&, const TraceArgs& a) {
      Tensor v = a.tensor(0);
      for (int op : ops) {
        switch (op) {
          case 0: v = add(v, a.tensor(1)); break;
          case 1: v = mul(v, a.scalar(0)); break;
          case 2: v = tanh(v); break;
          case 3: v = maximum(v, a.tensor(1)); break;
          case 4: v = sub(v, mean(v, {-1}, true)); break;
          case 5: v = where(gt(v, 0.0), v, neg(v)); break;
          case 6: v = mul(v, a.tensor(0)); break;
        }
      }
      return std::vector<Tensor>{v, sum(v)};
    };
    CompiledFunction f("random", fn, &h.runtime);
    for (int call = 0; call < 6; ++call) {
      int64_t rows = 1 + static_cast<int64_t>(rng() % 3), cols = 2 + static_cast<int64_t>(rng() % 2);
      Tensor x = h.tensor(filled(DType::kF32, {rows, cols}, static_cast<double>(rng() % 5) - 2, 0.5));
      Tensor y = rng() % 4 == 0 ? x : h.tensor(filled(DType::kF32, {cols}, 0.25));
      double s = (rng() % 2) ? 0.5 : 1.5;
      CallArgs args{{x, y}, {s}};
      auto got = h.call(f, args);
      auto want = eager(fn, args);
      ASSERT_EQ(got.size(), want.size());
      for (size_t o = 0; o < got.size(); ++o) {
        ASSERT_EQ(got[o].size(), want[o].size());
        for (size_t i = 0; i < got[o].size(); ++i) EXPECT_NEAR(got[o][i], want[o][i], 1e-5);
      }
    }
  }
}

}  // namespace
}  // namespace tracecache
