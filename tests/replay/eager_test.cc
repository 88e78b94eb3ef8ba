// Eager mode (capture/trace/eager.h): ops run as they are issued, nothing is traced, and the results
// are the bits lazy mode gives on the same kernels (docs/architecture.md, "The three
// modes"). Compared per fixture program and per op: eager on the reference kernels against
// lazy on the reference evaluator, and eager on the cpu kernels against lazy through the
// compiled cpu runtime (fused chains included).
#include <gtest/gtest.h>

#include <cstring>

#include "frontend/program/program.h"
#include "frontend/program/program_runner.h"
#include "capture/reference/reference.h"
#include "replay/backends/cpu/cpu_backend.h"
#include "replay/backends/cpu/eager_runner.h"
#include "replay/engine/runtime.h"
#include "tests/test_graphs.h"

namespace tracecache {
namespace {

// Fails every call: an eager context must never reach its executor.
class NoExecutor final : public GraphExecutor {
 public:
  Result<std::vector<DataRef>> execute(const CanonicalGraph&, std::vector<DataRef>) override {
    ++calls;
    return internal_error("an eager context called its executor");
  }
  int calls = 0;
};

LazyOptions eager_options(OpRunner* runner) {
  LazyOptions o;
  o.eager = runner;
  return o;
}

void expect_same_bits(const BufferRef& a, const BufferRef& b, const std::string& what) {
  ASSERT_EQ(a->dtype(), b->dtype()) << what;
  ASSERT_EQ(a->shape(), b->shape()) << what;
  EXPECT_EQ(0, std::memcmp(a->bytes(), b->bytes(), a->nbytes())) << what << " differs";
}

void expect_same_steps(const std::vector<StepResult>& a, const std::vector<StepResult>& b,
                       const std::string& program) {
  ASSERT_EQ(a.size(), b.size()) << program;
  for (size_t s = 0; s < a.size(); ++s) {
    ASSERT_EQ(a[s].outputs.size(), b[s].outputs.size()) << program;
    for (size_t k = 0; k < a[s].outputs.size(); ++k) {
      EXPECT_EQ(a[s].outputs[k].first, b[s].outputs[k].first);
      expect_same_bits(a[s].outputs[k].second, b[s].outputs[k].second,
                       program + " step " + std::to_string(s) + " " + a[s].outputs[k].first);
    }
  }
}

std::vector<StepResult> run_fixture(const std::string& name, LazyContext& ctx) {
  Result<Program> p = load_program(testing::fixture_path(name));
  if (!p.is_ok()) throw Error(p.status());
  return std::move(run_program(*p, ctx, /*steps=*/-1)).value_or_throw();
}

TEST(Eager, ReferenceRunnerEqualsLazyReferenceOnEveryFixture) {
  for (const std::string& name : testing::all_fixture_programs()) {
    ReferenceExecutor reference;
    LazyContext lazy(&reference);
    std::vector<StepResult> want = run_fixture(name, lazy);

    NoExecutor none;
    ReferenceOpRunner runner;
    LazyContext eager(&none, eager_options(&runner));
    std::vector<StepResult> got = run_fixture(name, eager);
    expect_same_steps(got, want, name);
    EXPECT_EQ(none.calls, 0);
    EXPECT_TRUE(eager.executed_keys().empty()) << "eager mode hashes no graph";
    for (const StepResult& s : got) EXPECT_TRUE(s.graph_keys.empty());
  }
}

TEST(Eager, CpuRunnerEqualsLazyCpuRuntimeOnEveryFixture) {
  for (const std::string& name : testing::all_fixture_programs()) {
    CpuBackend cpu;
    Runtime runtime(&cpu, /*db=*/nullptr, /*metrics=*/nullptr);
    LazyContext lazy(&runtime);
    std::vector<StepResult> want = run_fixture(name, lazy);

    NoExecutor none;
    Metrics metrics;
    CpuOpRunner runner(&metrics);
    LazyContext eager(&none, eager_options(&runner));
    std::vector<StepResult> got = run_fixture(name, eager);
    expect_same_steps(got, want, name);
    EXPECT_EQ(none.calls, 0);
    EXPECT_GT(metrics.timer(timers::kRun).count, 0) << "kernel time is recorded per op";
  }
}

TEST(Eager, OpsRunAtOnceAndMarkStepIsANoOp) {
  NoExecutor none;
  Metrics metrics;
  CpuOpRunner runner(&metrics);
  LazyContext ctx(&none, eager_options(&runner));
  HostBuffer data(DType::kF32, {2, 3});
  for (int i = 0; i < 6; ++i) data.data<float>()[i] = static_cast<float>(i) - 2.5f;
  Tensor x = ctx.from_buffer(std::move(data));
  Tensor y = relu(x * 2.0 + 1.0);
  EXPECT_TRUE(y.is_materialized());
  EXPECT_EQ(ctx.pending_nodes(), 0u);
  // relu(2x + 1) on -2.5 .. 2.5
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{0, 0, 0, 2, 4, 6}));
  ctx.mark_step();
  EXPECT_EQ(none.calls, 0);
  EXPECT_TRUE(ctx.executed_keys().empty());
  // two scalar constants, mul, add, relu
  EXPECT_EQ(metrics.timer(timers::kRun).count, 5);
}

TEST(Eager, ShapeErrorsStillThrowAtTheOp) {
  NoExecutor none;
  CpuOpRunner runner;
  LazyContext ctx(&none, eager_options(&runner));
  Tensor a = ctx.from_buffer(HostBuffer(DType::kF32, {2, 3}));
  Tensor b = ctx.from_buffer(HostBuffer(DType::kF32, {4, 5}));
  EXPECT_THROW(matmul(a, b), Error);
}

// Op by op, every op class: eager on each runner equals lazy on the matching executor.
TEST(Eager, EachOpEqualsLazy) {
  auto program = [](LazyContext& ctx) {
    Tensor x = normal(ctx, {4, 6}, 7);
    Tensor w = uniform(ctx, {6, 3}, 8, -1, 1);
    Tensor i = arange(ctx, 0, 6);
    std::vector<Tensor> out;
    out.push_back(sigmoid(tanh(exp(x) - 1.0)));  // a fusable chain in lazy mode
    out.push_back(matmul(x, w));
    out.push_back(sum(x, {1}, true) / mean(x));
    out.push_back(max(x, {0}));
    out.push_back(argmax(x, 1));
    out.push_back(where(gt(x, 0.0), sqrt(abs(x)), neg(x)));
    out.push_back(cast(eq(reshape(i, {2, 3}), 4.0), DType::kF32));
    out.push_back(transpose(permute(x, {1, 0}), 0, 1));
    out.push_back(broadcast_to(slice(x, 1, 1, 5, 2), {3, 4, 2}));
    Tensor parts[] = {x, x * x};
    out.push_back(concat(parts, 0));
    out.push_back(pow(maximum(x, 0.5), minimum(abs(x), 2.0)) + log(rsqrt(abs(x) + 1.0)));
    out.push_back(lt(cast(x, DType::kI32), full(ctx, {1, 6}, 0, DType::kI32)));
    return out;
  };
  auto values = [](std::vector<Tensor> ts) {
    std::vector<BufferRef> v;
    for (const Tensor& t : ts) v.push_back(t.buffer());
    return v;
  };

  ReferenceExecutor reference;
  LazyContext lazy_ref(&reference);
  std::vector<BufferRef> want_ref = values(program(lazy_ref));
  CpuBackend cpu;
  Runtime runtime(&cpu, nullptr, nullptr);
  LazyContext lazy_cpu(&runtime);
  std::vector<BufferRef> want_cpu = values(program(lazy_cpu));

  NoExecutor none;
  ReferenceOpRunner ref_runner;
  LazyContext eager_ref(&none, eager_options(&ref_runner));
  std::vector<BufferRef> got_ref = values(program(eager_ref));
  CpuOpRunner cpu_runner;
  LazyContext eager_cpu(&none, eager_options(&cpu_runner));
  std::vector<BufferRef> got_cpu = values(program(eager_cpu));

  ASSERT_EQ(got_ref.size(), want_ref.size());
  for (size_t k = 0; k < want_ref.size(); ++k) {
    expect_same_bits(got_ref[k], want_ref[k], "reference, output " + std::to_string(k));
    expect_same_bits(got_cpu[k], want_cpu[k], "cpu, output " + std::to_string(k));
  }
  EXPECT_EQ(none.calls, 0);
}

// record_step on the arguments StepArguments makes is what run_program does, in every mode.
TEST(Eager, RecordStepMatchesRunProgram) {
  Result<Program> p = load_program(testing::fixture_path("matmul_varying_batch.trace"));
  ASSERT_TRUE(p.is_ok());
  ReferenceExecutor reference;
  LazyContext whole(&reference);
  std::vector<StepResult> want = std::move(run_program(*p, whole)).value_or_throw();

  LazyContext ctx(&reference);
  StepArguments arguments(*p, ctx);
  for (int step = 0; step < static_cast<int>(want.size()); ++step) {
    std::vector<Tensor> args = std::move(arguments.make(step)).value_or_throw();
    std::vector<Tensor> outs =
        std::move(record_step(*p, ctx, step_dim_values(*p, step), args)).value_or_throw();
    ctx.mark_step();
    ASSERT_EQ(outs.size(), want[static_cast<size_t>(step)].outputs.size());
    expect_same_bits(outs[0].buffer(), want[static_cast<size_t>(step)].outputs[0].second,
                     "step " + std::to_string(step));
  }
  // Parameters are the same tensors (same data) in every step.
  std::vector<Tensor> a = std::move(arguments.make(0)).value_or_throw();
  std::vector<Tensor> b = std::move(arguments.make(1)).value_or_throw();
  EXPECT_EQ(a[1].buffer().get(), b[1].buffer().get());
  EXPECT_NE(a[0].buffer().get(), b[0].buffer().get());
}

TEST(Eager, RecordStepRejectsArgumentsThatDoNotFit) {
  Result<Program> p = load_program(testing::fixture_path("matmul_varying_batch.trace"));
  ASSERT_TRUE(p.is_ok());
  ReferenceExecutor reference;
  LazyContext ctx(&reference);
  StepArguments arguments(*p, ctx);
  std::vector<Tensor> args = std::move(arguments.make(/*step=*/2)).value_or_throw();  // B = 16
  std::vector<int64_t> dims = step_dim_values(*p, 0);                                // B = 8
  Result<std::vector<Tensor>> r = record_step(*p, ctx, dims, args);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("'x' is declared f32[8, 32] but the step's argument is f32[16, 32]"),
            std::string::npos)
      << r.status().message();
  EXPECT_FALSE(record_step(*p, ctx, {}, args).is_ok());
}

}  // namespace
}  // namespace tracecache
