// Failures around donation (LazyContext::assign, Slot::Kind::kDonated): a step that fails never
// loses or silently corrupts the tensor it was updating in place. A backend that fails before
// its first donated write costs the step its speed (it falls back to the reference evaluator);
// one that throws after it is an error, never a reference run over a half-updated value; a
// barrier whose donated data died with the failed step says so at every later barrier.
#include <gtest/gtest.h>

#include <new>

#include "tests/replay/injected_backend.h"
#include "capture/reference/reference.h"
#include "capture/trace/tensor.h"
#include "replay/engine/compiled_function.h"
#include "replay/engine/runtime.h"

namespace tracecache {
namespace {

// The cpu backend, with a failure injected into run() on request.
class FailingBackend final : public testing_support::InjectedCpuBackend {
 public:
  enum class Fail {
    kNone,
    kStatusBeforeRun,  // a failed status (allowed only before the first donated write)
    kThrowBeforeRun,   // std::bad_alloc before any kernel
    kThrowAfterRun,    // std::bad_alloc after the kernels wrote (in place, if donated)
  };
  Fail fail = Fail::kNone;

  FailingBackend() {
    before_run = [this]() -> Status {
      if (fail == Fail::kStatusBeforeRun) return resource_exhausted("injected: no room for the outputs");
      if (fail == Fail::kThrowBeforeRun) throw std::bad_alloc();
      return Status::ok();
    };
    after_run = [this] {
      if (fail == Fail::kThrowAfterRun) throw std::bad_alloc();
    };
  }
};

using testing_support::RunOrFallBack;

BufferRef ramp(int64_t n) {
  auto b = std::make_shared<HostBuffer>(DType::kF32, Shape{n});
  for (int64_t i = 0; i < n; ++i) b->data<float>()[i] = static_cast<float>(i);
  return b;
}

// w <- w * 0.5 + 1, in place.
void update(Tensor& w) { w.assign(add(mul(w, 0.5), 1.0)); }

std::vector<float> updated_ramp(int64_t n) {
  std::vector<float> want(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(i)] = static_cast<float>(i) * 0.5f + 1.0f;
  return want;
}

// Runs one in-place update of a weight nobody else holds (so it is donated), with `fail`
// injected, through Runtime::execute (lazy mode) or Runtime::run_or_fall_back.
struct Step {
  explicit Step(FailingBackend::Fail fail, bool through_run_or_fall_back)
      : runtime(&backend, nullptr, nullptr),
        fall_back(&runtime),
        ctx(through_run_or_fall_back ? static_cast<GraphExecutor*>(&fall_back) : &runtime) {
    backend.fail = fail;
    w = ctx.from_buffer(ramp(kSize));
    update(w);
  }
  static constexpr int64_t kSize = 64;
  FailingBackend backend;
  Runtime runtime;
  RunOrFallBack fall_back;
  LazyContext ctx;
  Tensor w;
};

class DonationFailure : public testing::TestWithParam<bool> {};

TEST_P(DonationFailure, AFailedStatusBeforeTheRunFallsBackWithTheWeightWhole) {
  Step s(FailingBackend::Fail::kStatusBeforeRun, GetParam());
  s.ctx.mark_step();
  EXPECT_EQ(s.w.to_vector<float>(), updated_ramp(Step::kSize));
  ASSERT_FALSE(s.runtime.warnings().empty());
  EXPECT_NE(s.runtime.warnings().back().find("reference evaluator"), std::string::npos);
}

// The runtime cannot tell how far a throwing backend got: after a parameter was given up, an
// exception is an error, never a reference run over a value that may be half updated.
TEST_P(DonationFailure, AThrowAfterTheWeightWasGivenUpIsAnErrorNotAReferenceRun) {
  for (FailingBackend::Fail fail : {FailingBackend::Fail::kThrowBeforeRun, FailingBackend::Fail::kThrowAfterRun}) {
  SCOPED_TRACE(fail == FailingBackend::Fail::kThrowBeforeRun ? "throw before the kernels" : "throw after them");
  Step s(fail, GetParam());
  try {
    s.ctx.mark_step();
    ADD_FAILURE() << "the step succeeded; w = " << s.w.to_vector<float>()[2];
  } catch (const Error& e) {
    EXPECT_EQ(e.status().code(), StatusCode::kInternal);
    EXPECT_NE(e.status().message().find("donated parameter"), std::string::npos) << e.status().message();
  }
  EXPECT_TRUE(s.runtime.warnings().empty()) << s.runtime.warnings().front();
  // The weight is gone with the step; later barriers say so instead of running without it.
  s.backend.fail = FailingBackend::Fail::kNone;
  try {
    s.ctx.mark_step();
    ADD_FAILURE() << "a barrier ran without the lost weight";
  } catch (const Error& e) {
    EXPECT_NE(e.status().message().find("a previous step failed"), std::string::npos) << e.status().message();
  }
  }
}

// A throw before any parameter is given up (none is donated here) costs the step its speed.
TEST_P(DonationFailure, AThrowWithoutDonationFallsBack) {
  FailingBackend backend;
  Runtime runtime(&backend, nullptr, nullptr);
  RunOrFallBack fall_back(&runtime);
  LazyContext ctx(GetParam() ? static_cast<GraphExecutor*>(&fall_back) : &runtime);
  backend.fail = FailingBackend::Fail::kThrowBeforeRun;
  Tensor w = ctx.from_buffer(ramp(Step::kSize));
  Tensor y = add(mul(w, 0.5), 1.0);
  EXPECT_EQ(y.to_vector<float>(), updated_ramp(Step::kSize));
  ASSERT_FALSE(runtime.warnings().empty());
  EXPECT_NE(runtime.warnings().back().find("reference evaluator"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(ExecuteAndRunOrFallBack, DonationFailure, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& param) {
                           return param.param ? "RunOrFallBack" : "Execute";
                         });

// An executor that fails its first `failures` calls, then evaluates on the reference; it notes
// any parameter it was handed without data.
class FlakyExecutor final : public GraphExecutor {
 public:
  explicit FlakyExecutor(int failures) : failures_(failures) {}
  Result<std::vector<DataRef>> execute(const CanonicalGraph& cg, std::vector<DataRef> params) override {
    ++calls;
    for (const DataRef& p : params) null_params += p == nullptr;
    if (failures_-- > 0) return internal_error("injected executor failure");
    return evaluate_reference(cg.graph, params);
  }
  int calls = 0;
  int null_params = 0;

 private:
  int failures_;
};

TEST(FailedBarrier, WithoutDonationLeavesTheTensorsPendingForTheNextBarrier) {
  FlakyExecutor executor(1);
  LazyContext ctx(&executor);
  Tensor w = ctx.from_buffer(ramp(8));
  Tensor y = add(mul(w, 0.5), 1.0);
  EXPECT_THROW(ctx.mark_step(), Error);
  EXPECT_FALSE(y.is_materialized());
  ctx.mark_step();
  EXPECT_EQ(y.to_vector<float>(), updated_ramp(8));
  EXPECT_EQ(executor.null_params, 0);
}

TEST(FailedBarrier, ThatHadDonatedDataFailsEveryLaterBarrierWithWhy) {
  FlakyExecutor executor(1);
  LazyContext ctx(&executor);
  Tensor w = ctx.from_buffer(ramp(8));
  update(w);
  EXPECT_THROW(ctx.mark_step(), Error);
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      (void)w.to_vector<float>();
      ADD_FAILURE() << "attempt " << attempt << ": read a value computed without its donated data";
    } catch (const Error& e) {
      EXPECT_EQ(e.status().code(), StatusCode::kInternal);
      EXPECT_NE(e.status().message().find("a previous step failed"), std::string::npos) << e.status().message();
      EXPECT_NE(e.status().message().find("injected executor failure"), std::string::npos) << e.status().message();
    }
  }
  EXPECT_EQ(executor.calls, 1);
  EXPECT_EQ(executor.null_params, 0);
  // Once the lost tensors are gone the trace starts over and works.
  w = Tensor();
  Tensor v = ctx.from_buffer(ramp(8));
  Tensor y = add(mul(v, 0.5), 1.0);
  EXPECT_EQ(y.to_vector<float>(), updated_ramp(8));
}

TEST(CompiledFunctionAssign, ToAnArgumentIsRefusedItIsNamedAsAnUpdate) {
  CpuBackend cpu;
  Runtime runtime(&cpu, nullptr, nullptr);
  LazyContext ctx(&runtime);
  CompiledFunction step("sgd_step", [](LazyContext&, const TraceArgs& a) {
    Tensor w = a.tensor(0);
    w.assign(sub(w, mul(a.tensor(1), 0.1)));
    return std::vector<Tensor>{sum(w)};
  }, &runtime);
  Tensor w = ctx.from_buffer(ramp(4));
  Tensor g = ctx.from_buffer(ramp(4));
  Result<std::vector<Tensor>> out = step(ctx, {{w, g}, {}});
  ASSERT_FALSE(out.is_ok()) << "eager would update w; once mode would leave it as it was";
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("assign to argument 0 inside a compiled function is not supported"),
            std::string::npos)
      << out.status().message();
  EXPECT_EQ(step.num_entries(), 0u);
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{0, 1, 2, 3}));

  // Assigning to a value the function computed is fine.
  CompiledFunction local("local", [](LazyContext&, const TraceArgs& a) {
    Tensor h = add(a.tensor(0), 1.0);
    h.assign(mul(h, 2.0));
    return std::vector<Tensor>{h};
  }, &runtime);
  Result<std::vector<Tensor>> ok = local(ctx, {{w}, {}});
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_EQ((*ok)[0].to_vector<float>(), (std::vector<float>{2, 4, 6, 8}));
}

TEST(CompiledFunctionReplay, KeepsNoArgumentAliveAfterTheCall) {
  CpuBackend cpu;
  Runtime runtime(&cpu, nullptr, nullptr);
  LazyContext ctx(&runtime);
  CompiledFunction f("inc", [](LazyContext&, const TraceArgs& a) {
    return std::vector<Tensor>{add(a.tensor(0), 1.0)};
  }, &runtime);
  ASSERT_TRUE(f(ctx, {{ctx.from_buffer(ramp(4))}, {}}).is_ok());  // traces
  std::weak_ptr<const DeviceData> arg;
  {
    Tensor x = ctx.from_buffer(ramp(4));
    arg = x.data();
    Result<std::vector<Tensor>> out = f(ctx, {{x}, {}});  // replays
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    EXPECT_EQ(f.stats().traces, 1);
    EXPECT_EQ((*out)[0].to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  }
  EXPECT_TRUE(arg.expired());
}

// Once mode: a compiled function whose output 0 replaces argument 0 (w <- w * 0.5 + 1), traced
// on a healthy backend; its replays then meet the injected failure.
struct OnceStep {
  OnceStep()
      : runtime(&backend, nullptr, nullptr),
        ctx(&runtime),
        f("update", [](LazyContext&, const TraceArgs& a) {
          return std::vector<Tensor>{add(mul(a.tensor(0), 0.5), 1.0)};
        }, &runtime, options()) {
    EXPECT_TRUE(f(ctx, args_of(ctx.from_buffer(ramp(kSize)))).is_ok());  // the trace
  }
  static CompiledFunctionOptions options() {
    CompiledFunctionOptions o;
    o.updates = {{.output = 0, .argument = 0}};
    return o;
  }
  // w as the only handle in the call's arguments.
  static CallArgs args_of(Tensor w) {
    CallArgs a;
    a.tensors.push_back(std::move(w));
    return a;
  }
  static constexpr int64_t kSize = 64;
  FailingBackend backend;
  Runtime runtime;
  LazyContext ctx;
  CompiledFunction f;
};

TEST(OnceDonationFailure, AFailedStatusBeforeTheRunFallsBackWithTheValueRight) {
  OnceStep s;
  s.backend.fail = FailingBackend::Fail::kStatusBeforeRun;
  CallArgs args = OnceStep::args_of(s.ctx.from_buffer(ramp(OnceStep::kSize)));
  Result<std::vector<Tensor>> out = s.f(s.ctx, std::move(args));
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ((*out)[0].to_vector<float>(), updated_ramp(OnceStep::kSize));
  EXPECT_EQ(s.f.stats().traces, 1);
  ASSERT_FALSE(s.runtime.warnings().empty());
  EXPECT_NE(s.runtime.warnings().back().find("reference evaluator"), std::string::npos);
}

// A replay that gave the argument to a run that threw: an error naming the in-place update,
// never a retrace or a reference run over a value that may be half updated. The function stays
// usable.
TEST(OnceDonationFailure, AThrowAfterTheArgumentWasGivenIsAnError) {
  for (FailingBackend::Fail fail : {FailingBackend::Fail::kThrowBeforeRun, FailingBackend::Fail::kThrowAfterRun}) {
    SCOPED_TRACE(fail == FailingBackend::Fail::kThrowBeforeRun ? "throw before the kernels" : "throw after them");
    OnceStep s;
    s.backend.fail = fail;
    CallArgs args = OnceStep::args_of(s.ctx.from_buffer(ramp(OnceStep::kSize)));
    Result<std::vector<Tensor>> out = s.f(s.ctx, std::move(args));
    ASSERT_FALSE(out.is_ok());
    EXPECT_EQ(out.status().code(), StatusCode::kInternal);
    EXPECT_NE(out.status().message().find("given argument 0 to update in place"), std::string::npos)
        << out.status().message();
    EXPECT_FALSE(args.tensors[0].defined()) << "the argument's data went to the failed run";
    EXPECT_EQ(s.f.stats().traces, 1);
    s.backend.fail = FailingBackend::Fail::kNone;
    Result<std::vector<Tensor>> next = s.f(s.ctx, OnceStep::args_of(s.ctx.from_buffer(ramp(OnceStep::kSize))));
    ASSERT_TRUE(next.is_ok()) << next.status().to_string();
    EXPECT_EQ((*next)[0].to_vector<float>(), updated_ramp(OnceStep::kSize));
    EXPECT_EQ(s.f.stats().traces, 1);
  }
}

// A caller that keeps the argument gives nothing up: a throwing backend costs the call its
// speed (a reference run), and the argument keeps its value.
TEST(OnceDonationFailure, AThrowWithTheArgumentKeptFallsBackAndKeepsIt) {
  OnceStep s;
  s.backend.fail = FailingBackend::Fail::kThrowAfterRun;
  Tensor w = s.ctx.from_buffer(ramp(OnceStep::kSize));
  Result<std::vector<Tensor>> out = s.f(s.ctx, OnceStep::args_of(w));
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ((*out)[0].to_vector<float>(), updated_ramp(OnceStep::kSize));
  std::vector<float> kept(static_cast<size_t>(OnceStep::kSize));
  for (size_t i = 0; i < kept.size(); ++i) kept[i] = static_cast<float>(i);
  EXPECT_EQ(w.to_vector<float>(), kept);
}

// An entry with nothing to update replays directly from its second replay on (no routing); a
// failing run there costs the call its speed as on the general path: every kind of failure is a
// reference run with the right values, and the entry stays (no retrace).
TEST(OnceDirectReplayFailure, EveryFailureFallsBackToTheReferenceAndKeepsTheEntry) {
  FailingBackend backend;
  Runtime runtime(&backend, nullptr, nullptr);
  LazyContext ctx(&runtime);
  CompiledFunction f("half_plus_one", [](LazyContext&, const TraceArgs& a) {
    return std::vector<Tensor>{add(mul(a.tensor(0), 0.5), 1.0)};
  }, &runtime);
  auto call = [&] {
    CallArgs args;
    args.tensors.push_back(ctx.from_buffer(ramp(Step::kSize)));
    Result<std::vector<Tensor>> out = f(ctx, args);
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    EXPECT_EQ((*out)[0].to_vector<float>(), updated_ramp(Step::kSize));
  };
  for (int k = 0; k < 3; ++k) call();  // a trace, a replay, a direct replay
  EXPECT_TRUE(runtime.warnings().empty());
  for (FailingBackend::Fail fail : {FailingBackend::Fail::kStatusBeforeRun, FailingBackend::Fail::kThrowBeforeRun,
                                    FailingBackend::Fail::kThrowAfterRun}) {
    SCOPED_TRACE(static_cast<int>(fail));
    backend.fail = fail;
    auto fallbacks = [&] {
      return std::count_if(runtime.events().begin(), runtime.events().end(),
                           [](const store::Event& e) { return e.kind == store::EventKind::kFallback; });
    };
    const auto before = fallbacks();
    call();
    EXPECT_EQ(fallbacks(), before + 1);
    ASSERT_FALSE(runtime.warnings().empty());  // distinct warnings: the two throws say the same
    EXPECT_NE(runtime.warnings().back().find("reference evaluator"), std::string::npos);
  }
  backend.fail = FailingBackend::Fail::kNone;
  call();
  EXPECT_EQ(f.stats().traces, 1);
  EXPECT_EQ(f.num_entries(), 1u);
}

}  // namespace
}  // namespace tracecache
