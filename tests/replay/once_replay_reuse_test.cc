// The once-mode replay path keeps storage across calls to allocate less (issue 17's host
// overhead): the segment outputs' and device parameters' vectors are reused, a replay's outputs
// are its last segment's result taken as it is, an entry that needs no routing replays directly
// (from its second replay on), guard sets in record()'s layout are checked as a table, the
// counters are updated through handles, and guard checks are timed on a sample. None of it may
// change what a call returns or counts: outputs of call k stay intact after call k+1 while the
// caller holds them, no call keeps its arguments alive, call_data() and operator() give the same
// values, and the counters are those of every call.
#include <gtest/gtest.h>

#include "tests/once_harness.h"

namespace tracecache {
namespace {

// Two outputs of one segment, in graph order (the taken-as-is case), from two arguments.
std::vector<Tensor> two_outputs(LazyContext&, const TraceArgs& a) {
  Tensor h = add(matmul(a.tensor(0), a.tensor(1)), a.scalar(0));
  return {h, sum(h)};
}

CallArgs arguments(Harness& h, double start) {
  return {{h.tensor(filled(DType::kF32, {2, 3}, start)), h.tensor(filled(DType::kF32, {3, 2}, 0.5, 0.25))}, {1.0}};
}

TEST(OnceReplayReuse, OutputsOfACallSurviveTheNextCalls) {
  Harness h;
  CompiledFunction f("f", two_outputs, &h.runtime);
  std::vector<std::vector<Tensor>> held;
  std::vector<std::vector<std::vector<double>>> seen;
  for (int k = 0; k < 4; ++k) {
    CallArgs args = arguments(h, k);
    auto out = f(h.ctx, args);
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    seen.push_back({});
    for (const Tensor& t : *out) seen.back().push_back(t.to_vector<double>());
    EXPECT_EQ(seen.back(), eager(two_outputs, args)) << "call " << k;
    held.push_back(std::move(out).value());
  }
  EXPECT_EQ(f.stats().traces, 1);
  // Every call after the first replayed; what each returned is unchanged by the later calls.
  for (size_t k = 0; k < held.size(); ++k) {
    for (size_t o = 0; o < held[k].size(); ++o) EXPECT_EQ(held[k][o].to_vector<double>(), seen[k][o]) << k << "," << o;
    EXPECT_NE(held[k][0].data_ptr(), k + 1 < held.size() ? held[k + 1][0].data_ptr() : nullptr);
  }
}

TEST(OnceReplayReuse, AReplayKeepsNoHandleOfItsArgumentsOrOutputs) {
  Harness h;
  CompiledFunction f("f", two_outputs, &h.runtime);
  ASSERT_TRUE(f(h.ctx, arguments(h, 0)).is_ok());
  CallArgs args = arguments(h, 1);
  const DataRef x = args.tensors[0].data();
  const long before = x.use_count();
  std::weak_ptr<const DeviceData> output;
  {
    auto out = f(h.ctx, args);
    ASSERT_TRUE(out.is_ok());
    EXPECT_EQ(f.stats().traces, 1);
    output = out->at(0).data();
  }
  EXPECT_EQ(x.use_count(), before);
  EXPECT_TRUE(output.expired());
}

// Guard checks are counted every call but timed on a sample (timing one costs about what the
// check does): the first kTimedGuardChecks, then one in kGuardCheckSamplePeriod; every one while a
// SpanObserver (a timeline) watches, each drawn as a span.
TEST(OnceReplayReuse, GuardChecksAreTimedOnASampleAndAllWhileATimelineWatches) {
  Harness h;
  CompiledFunction f("f", two_outputs, &h.runtime);
  const CallArgs args = arguments(h, 1);
  ASSERT_TRUE(f(h.ctx, args).is_ok());  // traces: no guard check
  constexpr int64_t kChecks = 3 * kGuardCheckSamplePeriod + kTimedGuardChecks + 5;
  int64_t timed = 0;
  for (int64_t k = 1; k <= kChecks; ++k) {
    ASSERT_TRUE(f(h.ctx, args).is_ok());
    timed += k <= kTimedGuardChecks || k % kGuardCheckSamplePeriod == 0 ? 1 : 0;
  }
  EXPECT_EQ(f.stats().traces, 1);
  EXPECT_EQ(h.metrics.counter(counters::kGuardChecks), kChecks);
  EXPECT_EQ(h.metrics.timer(timers::kGuardCheck).count, timed);
  EXPECT_LT(timed, kChecks);
  struct Spans : SpanObserver {
    int64_t guard_checks = 0;
    void on_span(std::string_view timer, std::chrono::steady_clock::time_point,
                 std::chrono::steady_clock::time_point) override {
      guard_checks += timer == timers::kGuardCheck ? 1 : 0;
    }
  } spans;
  h.metrics.set_span_observer(&spans);
  for (int k = 0; k < 10; ++k) ASSERT_TRUE(f(h.ctx, args).is_ok());
  h.metrics.set_span_observer(nullptr);
  EXPECT_EQ(spans.guard_checks, 10);
  EXPECT_EQ(h.metrics.timer(timers::kGuardCheck).count, timed + 10);
  EXPECT_EQ(h.metrics.counter(counters::kGuardChecks), kChecks + 10);
}

TEST(OnceReplayReuse, CallDataGivesTheValuesOfTheTensorCall) {
  Harness h;
  CompiledFunction f("f", two_outputs, &h.runtime);
  for (int k = 0; k < 3; ++k) {
    CallArgs args = arguments(h, k);
    auto data = f.call_data(h.ctx, args);
    ASSERT_TRUE(data.is_ok()) << data.status().to_string();
    std::vector<std::vector<double>> values;
    for (const DataRef& d : *data) values.push_back(h.ctx.from_data(d).to_vector<double>());
    EXPECT_EQ(values, eager(two_outputs, args)) << "call " << k;
  }
  EXPECT_EQ(f.stats().traces, 1);
  // Errors are those of operator().
  CallArgs pending = arguments(h, 0);
  pending.tensors[0] = add(pending.tensors[0], 1.0);
  EXPECT_EQ(f.call_data(h.ctx, pending).status().code(), StatusCode::kInvalidArgument);
}

TEST(OnceReplayReuse, OutputsRoutedOtherwiseAreCopiedAsBefore) {
  Harness h;
  // Outputs in another order than the graph's, one twice, one an argument, over two segments
  // (a value read).
  TracedFn fn = [](LazyContext&, const TraceArgs& a) {
    Tensor s = sum(a.tensor(0));
    Tensor scaled = mul(a.tensor(0), s.item() > 0 ? 2.0 : 3.0);
    Tensor m = sum(scaled);
    return std::vector<Tensor>{m, scaled, a.tensor(1), m};
  };
  CompiledFunction f("f", fn, &h.runtime);
  for (int k = 0; k < 3; ++k) {
    CallArgs args = arguments(h, 1);  // the same values: the value read guards them
    EXPECT_EQ(h.call(f, args), eager(fn, args)) << "call " << k;
  }
  EXPECT_EQ(f.stats().traces, 1);
}

TEST(OnceReplayReuse, CountersAndTimersCountEveryCall) {
  Harness h;
  CompiledFunction f("f", two_outputs, &h.runtime);
  for (int k = 0; k < 3; ++k) ASSERT_TRUE(f(h.ctx, arguments(h, k)).is_ok());
  EXPECT_EQ(h.metrics.counter(counters::kGuardChecks), 2);
  EXPECT_EQ(h.metrics.timer(timers::kGuardCheck).count, 2);
  const int64_t runs = h.metrics.timer(timers::kRun).count;
  EXPECT_EQ(h.metrics.counter(counters::kExecutions), runs);
  // After the registry forgets everything, the same handles count into it again.
  h.metrics.reset();
  ASSERT_TRUE(f(h.ctx, arguments(h, 5)).is_ok());
  EXPECT_EQ(h.metrics.counter(counters::kGuardChecks), 1);
  EXPECT_EQ(h.metrics.timer(timers::kGuardCheck).count, 1);
  EXPECT_EQ(h.metrics.counter(counters::kExecutions), 1);
  EXPECT_EQ(h.metrics.timer(timers::kRun).count, 1);
  // A different shape fails the guard: counted as a failure, then traced.
  CallArgs other{{h.tensor(filled(DType::kF32, {4, 3}, 0)), h.tensor(filled(DType::kF32, {3, 2}, 0))}, {1.0}};
  ASSERT_TRUE(f(h.ctx, other).is_ok());
  EXPECT_EQ(h.metrics.counter(counters::kGuardFailures), 1);
}

}  // namespace
}  // namespace tracecache
