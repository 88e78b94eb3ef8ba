// Dynamic dims (issue 4, part 4): shape-polymorphic entries re-inferred at new sizes without
// calling the traced function, with range and relation guards, and every way a template can
// stop applying (a shape the function read, a relation, a value read) recompiling instead.
// Every result is compared with a fresh trace of the same function.
#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "store/codec/proto/tracecache.pb.h"
#include "tests/once_harness.h"
#include "tests/test_support.h"

namespace tracecache {
namespace {

// Calls f at `args` and checks the result against a fresh trace.
void expect_fresh(Harness& h, CompiledFunction& f, const TracedFn& fn, const CallArgs& args) {
  auto got = h.call(f, args);
  auto want = eager(fn, args);
  ASSERT_EQ(got.size(), want.size());
  for (size_t o = 0; o < got.size(); ++o) EXPECT_EQ(got[o], want[o]) << "output " << o;
}

Tensor rows(Harness& h, int64_t n, int64_t cols = 4, double start = 0) {
  return h.tensor(filled(DType::kF32, {n, cols}, start, 0.5));
}

TEST(DynamicDims, MarkedDimNeverRetracesAcrossSizes) {
  Harness h;
  TracedFn fn = [](LazyContext&, const TraceArgs& a) {
    Tensor y = relu(matmul(a.tensor(0), a.tensor(1)));
    return std::vector<Tensor>{y, sum(y, {0})};
  };
  CompiledFunctionOptions o;
  o.dynamic_dims = {{0, 0}};
  CompiledFunction f("marked", fn, &h.runtime, o);
  Tensor w = h.tensor(filled(DType::kF32, {4, 3}, -1, 0.25));
  for (int64_t n : {2, 5, 9, 5, 1, 64}) expect_fresh(h, f, fn, {{rows(h, n), w}, {}});
  EXPECT_EQ(f.stats().traces, 1);
  EXPECT_EQ(f.stats().recompiles, 0);
  EXPECT_EQ(f.stats().specializations, 4);  // 5, 9, 1 and 64; 5 again is kept
  EXPECT_EQ(h.metrics.counter(counters::kSpecializations), 4);
  // A non-dynamic dim still guards its size.
  expect_fresh(h, f, fn, {{rows(h, 3), h.tensor(filled(DType::kF32, {4, 6}, 0))}, {}});
  EXPECT_EQ(f.stats().traces, 2);
}

TEST(DynamicDims, AutomaticAfterOneRecompileAndOffWhenAskedSo) {
  for (bool automatic : {true, false}) {
    Harness h;
    TracedFn fn = [](LazyContext&, const TraceArgs& a) {
      return std::vector<Tensor>{mean(exp(a.tensor(0)), {1})};
    };
    CompiledFunctionOptions o;
    o.automatic_dynamic = automatic;
    o.input_names = {"x"};
    CompiledFunction f("auto", fn, &h.runtime, o);
    for (int64_t n : {8, 16, 32, 7}) expect_fresh(h, f, fn, {{rows(h, n)}, {}});
    if (automatic) {
      EXPECT_EQ(f.stats().traces, 2);
      ASSERT_EQ(f.stats().recompile_reasons.size(), 1u);
      const std::string& r = f.stats().recompile_reasons[0];
      EXPECT_NE(r.find("input 0 'x': size of dim 0 expected 8, actual 16"), std::string::npos) << r;
      EXPECT_NE(r.find("dynamic: input 0 'x' dim 0"), std::string::npos) << r;
      EXPECT_EQ(f.stats().specializations, 2);
    } else {
      EXPECT_EQ(f.stats().traces, 4);
      EXPECT_EQ(f.stats().specializations, 0);
    }
  }
}

TEST(DynamicDims, RawAttributesAreReinferredNotReplayed) {
  // reshape's -1, slice's open end and full's bound shape depend on the size: they must be
  // recomputed at the new size, not copied from the first trace.
  Harness h;
  TracedFn fn = [](LazyContext& ctx, const TraceArgs& a) {
    const Tensor& x = a.tensor(0);
    Tensor flat = reshape(x, {-1, 2});
    Tensor tail = slice(x, 0, 1, std::numeric_limits<int64_t>::max());
    AttrValue attrs[] = {AttrValue::of_ints({x.peek_shape()[0], 1}), AttrValue::of_float(2),
                         AttrValue::of_dtype(DType::kF32)};
    AttrBinding bind[] = {{0, 0, x, 0}};
    Tensor twos = ctx.record(OpKind::kFull, std::span<const Tensor>(), attrs, bind);
    return std::vector<Tensor>{flat, sum(tail, {1}), mul(x, twos)};
  };
  CompiledFunctionOptions o;
  o.dynamic_dims = {{0, 0}};
  CompiledFunction f("raw", fn, &h.runtime, o);
  for (int64_t n : {3, 6, 2, 11}) expect_fresh(h, f, fn, {{rows(h, n, 4, 1)}, {}});
  EXPECT_EQ(f.stats().traces, 1);
}

TEST(DynamicDims, ReadingAnInputShapeKeepsItsDimsStatic) {
  Harness h;
  TracedFn fn = [](LazyContext&, const TraceArgs& a) {
    const Tensor& x = a.tensor(0);
    int64_t n = x.shape()[0];  // an observation: the code may depend on it
    return std::vector<Tensor>{reshape(x, {n * 2, -1})};
  };
  CompiledFunctionOptions o;
  o.dynamic_dims = {{0, 0}};
  o.input_names = {"x"};
  CompiledFunction f("reads_shape", fn, &h.runtime, o);
  expect_fresh(h, f, fn, {{rows(h, 3)}, {}});
  expect_fresh(h, f, fn, {{rows(h, 5)}, {}});
  EXPECT_EQ(f.stats().traces, 2);
  ASSERT_EQ(f.stats().recompile_reasons.size(), 1u);
  EXPECT_NE(f.stats().recompile_reasons[0].find("stays static: the function read its shape"), std::string::npos)
      << f.stats().recompile_reasons[0];
}

TEST(DynamicDims, ABranchOnAnIntermediateShapeRecompilesWhenItWouldDiffer) {
  Harness h;
  TracedFn fn = [](LazyContext&, const TraceArgs& a) {
    Tensor y = exp(a.tensor(0));
    if (y.shape()[0] > 4) return std::vector<Tensor>{sum(y)};  // depends on the size
    return std::vector<Tensor>{y};
  };
  CompiledFunctionOptions o;
  o.dynamic_dims = {{0, 0}};
  CompiledFunction f("branch", fn, &h.runtime, o);
  expect_fresh(h, f, fn, {{rows(h, 2)}, {}});
  expect_fresh(h, f, fn, {{rows(h, 8)}, {}});  // would take the other branch: must retrace
  EXPECT_EQ(f.stats().traces, 2);
  ASSERT_EQ(f.stats().recompile_reasons.size(), 1u);
  EXPECT_NE(f.stats().recompile_reasons[0].find("read the shape"), std::string::npos)
      << f.stats().recompile_reasons[0];
}

TEST(DynamicDims, EqualDynamicDimsAreRelatedAndBroadcastingStillRecompiles) {
  Harness h;
  TracedFn fn = [](LazyContext&, const TraceArgs& a) {
    return std::vector<Tensor>{add(a.tensor(0), a.tensor(1))};
  };
  CompiledFunctionOptions o;
  o.dynamic_dims = {{0, 0}, {1, 0}};
  o.input_names = {"x", "y"};
  CompiledFunction f("related", fn, &h.runtime, o);
  expect_fresh(h, f, fn, {{rows(h, 4), rows(h, 4, 4, 3)}, {}});
  expect_fresh(h, f, fn, {{rows(h, 7), rows(h, 7, 4, 3)}, {}});
  EXPECT_EQ(f.stats().traces, 1);
  // y with one row broadcasts: a different graph, so the relation guard fails and names it.
  expect_fresh(h, f, fn, {{rows(h, 7), rows(h, 1, 4, 3)}, {}});
  EXPECT_EQ(f.stats().traces, 2);
  ASSERT_EQ(f.stats().recompile_reasons.size(), 1u);
  EXPECT_NE(f.stats().recompile_reasons[0].find("input 1 'y': size of dim 0 (dynamic) expected equal to input 0 'x' dim 0 (7), actual 1"),
            std::string::npos) << f.stats().recompile_reasons[0];
}

TEST(DynamicDims, AValueReadKeepsTheEntryStatic) {
  Harness h;
  TracedFn fn = [](LazyContext&, const TraceArgs& a) {
    Tensor s = sum(a.tensor(0));
    return std::vector<Tensor>{s.item() > 0 ? exp(a.tensor(0)) : neg(a.tensor(0))};
  };
  CompiledFunctionOptions o;
  o.dynamic_dims = {{0, 0}};
  CompiledFunction f("value_read", fn, &h.runtime, o);
  expect_fresh(h, f, fn, {{rows(h, 3)}, {}});
  expect_fresh(h, f, fn, {{rows(h, 5)}, {}});
  EXPECT_EQ(f.stats().traces, 2);
  EXPECT_EQ(f.stats().specializations, 0);
  ASSERT_EQ(f.stats().recompile_reasons.size(), 1u);
  EXPECT_NE(f.stats().recompile_reasons[0].find("dims stay static"), std::string::npos);
}

TEST(DynamicDims, RangeGuardRejectsAnEmptyDim) {
  Harness h;
  TracedFn fn = [](LazyContext&, const TraceArgs& a) { return std::vector<Tensor>{exp(a.tensor(0))}; };
  CompiledFunctionOptions o;
  o.dynamic_dims = {{0, 0}};
  o.input_names = {"x"};
  CompiledFunction f("range", fn, &h.runtime, o);
  expect_fresh(h, f, fn, {{rows(h, 3)}, {}});
  expect_fresh(h, f, fn, {{rows(h, 0)}, {}});
  ASSERT_EQ(f.stats().recompile_reasons.size(), 1u);
  EXPECT_NE(f.stats().recompile_reasons[0].find("input 0 'x': size of dim 0 (dynamic) expected in [1, "),
            std::string::npos) << f.stats().recompile_reasons[0];
}

TEST(DynamicDims, MarkDynamicAppliesToTheNextTrace) {
  Harness h;
  TracedFn fn = [](LazyContext&, const TraceArgs& a) { return std::vector<Tensor>{tanh(a.tensor(0))}; };
  CompiledFunctionOptions o;
  o.automatic_dynamic = false;
  CompiledFunction f("mark", fn, &h.runtime, o);
  f.mark_dynamic(0, 1);
  for (int64_t c : {2, 3, 8}) expect_fresh(h, f, fn, {{rows(h, 2, c)}, {}});
  EXPECT_EQ(f.stats().traces, 1);
}

TEST(DynamicDims, PropertyRandomProgramsAtRandomSizesEqualAFreshTrace) {
  std::mt19937 rng(11);
  Harness h;
  int64_t specializations = 0;
  for (int program = 0; program < 20; ++program) {
    std::vector<int> ops;
    for (int i = 0; i < 5; ++i) ops.push_back(static_cast<int>(rng() % 6));
    TracedFn fn = [ops](LazyContext&, const TraceArgs& a) {
      Tensor v = a.tensor(0);
      for (int op : ops) {
        switch (op) {
          case 0: v = add(v, a.tensor(1)); break;
          case 1: v = sub(v, mean(v, {0}, true)); break;
          case 2: v = reshape(transpose(reshape(v, {-1, 2}), 0, 1), {2, -1}); v = reshape(transpose(v, 0, 1), {-1, 4}); break;
          case 3: v = concat(std::vector<Tensor>{v, v}, 0); v = slice(v, 0, 0, std::numeric_limits<int64_t>::max(), 2); break;
          case 4: v = matmul(v, a.tensor(2)); break;
          case 5: v = maximum(v, 0.5); break;
        }
      }
      return std::vector<Tensor>{v, sum(v, {0})};
    };
    CompiledFunction f("random", fn, &h.runtime);
    for (int call = 0; call < 6; ++call) {
      const int64_t n = 1 + static_cast<int64_t>(rng() % 6);
      Tensor x = h.tensor(filled(DType::kF32, {n, 4}, static_cast<double>(rng() % 5) - 2, 0.5));
      Tensor y = rng() % 3 == 0 ? h.tensor(filled(DType::kF32, {1, 4}, 0.25, -0.125))
                                : h.tensor(filled(DType::kF32, {4}, 0.5, 0.25));
      Tensor w = h.tensor(filled(DType::kF32, {4, 4}, -1, 0.125));
      expect_fresh(h, f, fn, {{x, y, w}, {}});
    }
    specializations += f.stats().specializations;
  }
  EXPECT_GT(specializations, 20) << "the property must exercise instantiated templates";
}

// ---- persistence ---------------------------------------------------------------------------

// One process: a runtime on the database and a dynamic function.
struct DynProcess {
  explicit DynProcess(const std::string& db_path)
      : db(std::move(store::CacheDb::open({.path = db_path})).value_or_throw()),
        runtime(&cpu, db.get(), &metrics),
        ctx(&runtime),
        f("dyn", fn(), &runtime, options()) {}
  static TracedFn fn() {
    return [](LazyContext&, const TraceArgs& a) {
      Tensor y = reshape(relu(matmul(a.tensor(0), a.tensor(1))), {-1});
      return std::vector<Tensor>{y, sum(y)};
    };
  }
  static CompiledFunctionOptions options() {
    CompiledFunctionOptions o;
    o.user_version = "v1";
    o.dynamic_dims = {{0, 0}};
    return o;
  }
  std::vector<std::string> call(int64_t n) {
    Tensor x = ctx.from_buffer(filled(DType::kF32, {n, 3}, -2, 0.5));
    Tensor w = ctx.from_buffer(filled(DType::kF32, {3, 2}, 1, -0.25));
    auto out = f(ctx, {{x, w}, {}});
    EXPECT_TRUE(out.is_ok()) << out.status().to_string();
    std::vector<std::string> sums;
    if (out.is_ok()) {
      for (const Tensor& t : *out) sums.push_back(t.buffer()->checksum());
    }
    return sums;
  }
  CpuBackend cpu;
  Metrics metrics;
  std::unique_ptr<store::CacheDb> db;
  Runtime runtime;
  LazyContext ctx;
  CompiledFunction f;
};

TEST(DynamicDims, ANewProcessServesNewSizesWithoutTracingOrCompiling) {
  testing::TempDir tmp;
  std::vector<std::vector<std::string>> want;
  {
    DynProcess p(tmp.db());
    for (int64_t n : {4, 9, 17}) want.push_back(p.call(n));
    EXPECT_EQ(p.f.stats().traces, 1);
  }
  DynProcess q(tmp.db());
  EXPECT_EQ(q.call(9), want[1]);
  EXPECT_EQ(q.call(17), want[2]);
  EXPECT_EQ(q.call(4), want[0]);
  EXPECT_EQ(q.f.stats().traces, 0);
  EXPECT_EQ(q.metrics.counter(counters::kCompiles), 0);
  EXPECT_EQ(q.f.stats().specializations, 3);
}

TEST(DynamicDims, AForgedStoredTemplateIsDroppedNeverMisused) {
  // Checksums catch damage; these rewrite the stored entry with a valid checksum and a plan
  // that would index out of range or misroute. Each must be dropped (and retraced).
  using Mutation = void (*)(proto::DynamicPlan&);
  const Mutation mutations[] = {
      [](proto::DynamicPlan& d) { d.mutable_sym_attrs(0)->set_source(1000); },
      [](proto::DynamicPlan& d) { d.mutable_sym_attrs(0)->set_dim(7); },
      [](proto::DynamicPlan& d) { d.mutable_sym_attrs(0)->set_element(5); },
      [](proto::DynamicPlan& d) { d.mutable_sym_attrs(0)->set_attr(9); },
      [](proto::DynamicPlan& d) { d.add_roots(4000); },
      [](proto::DynamicPlan& d) { d.mutable_params()->RemoveLast(); },
      [](proto::DynamicPlan& d) { d.mutable_params(0)->set_a(77); },
      [](proto::DynamicPlan& d) { d.mutable_dims(0)->set_dim(5); },
      [](proto::DynamicPlan& d) { d.mutable_observed()->Add()->set_node(999); },
      [](proto::DynamicPlan& d) { d.mutable_graph()->mutable_nodes(2)->set_op("no_such_op"); },
  };
  for (size_t m = 0; m < std::size(mutations); ++m) {
    SCOPED_TRACE(m);
    testing::TempDir tmp;
    std::vector<std::string> want;
    {
      // A function that binds an attribute, so that the plan has a sym attr to forge.
      auto db = std::move(store::CacheDb::open({.path = tmp.db()})).value_or_throw();
      CpuBackend cpu;
      Runtime runtime(&cpu, db.get(), nullptr);
      LazyContext ctx(&runtime);
      TracedFn fn = [](LazyContext& c, const TraceArgs& a) {
        const Tensor& x = a.tensor(0);
        AttrValue attrs[] = {AttrValue::of_ints({x.peek_shape()[0], 2}), AttrValue::of_float(1),
                             AttrValue::of_dtype(DType::kF32)};
        AttrBinding bind[] = {{0, 0, x, 0}};
        Tensor ones = c.record(OpKind::kFull, std::span<const Tensor>(), attrs, bind);
        return std::vector<Tensor>{add(exp(x), ones)};
      };
      CompiledFunctionOptions o;
      o.user_version = "v1";
      o.dynamic_dims = {{0, 0}};
      CompiledFunction f("forged", fn, &runtime, o);
      auto out = f(ctx, {{ctx.from_buffer(filled(DType::kF32, {3, 2}, 0, 0.5))}, {}});
      ASSERT_TRUE(out.is_ok());
      want.push_back((*out)[0].buffer()->checksum());
      store::FunctionKey key{"forged", "v1", std::string(kToolkitVersion)};
      auto rows = db->function_entries(key);
      ASSERT_TRUE(rows.is_ok());
      ASSERT_EQ(rows->size(), 1u);
      proto::GuardEntry pe;
      ASSERT_TRUE(pe.ParseFromString((*rows)[0].blob));
      ASSERT_TRUE(pe.has_dynamic());
      ASSERT_GT(pe.dynamic().sym_attrs_size(), 0);
      mutations[m](*pe.mutable_dynamic());
      ASSERT_TRUE(db->put_function_entry(key, 0, pe.SerializeAsString()).is_ok());
      // A new function on the same database: loads (or drops) the forged entry.
      Metrics metrics;
      Runtime runtime2(&cpu, db.get(), &metrics);
      LazyContext ctx2(&runtime2);
      CompiledFunction g("forged", fn, &runtime2, o);
      EXPECT_EQ(g.num_entries(), 0u) << "the forged entry must be rejected on load";
      auto again = g(ctx2, {{ctx2.from_buffer(filled(DType::kF32, {3, 2}, 0, 0.5))}, {}});
      ASSERT_TRUE(again.is_ok()) << again.status().to_string();
      EXPECT_EQ((*again)[0].buffer()->checksum(), want[0]);
      EXPECT_EQ(g.stats().traces, 1);
    }
  }
}

}  // namespace
}  // namespace tracecache
