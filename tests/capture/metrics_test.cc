// Metrics timers: exact count, total, mean and max; exact percentiles up to kMaxTimerSamples
// samples, then a bounded reservoir (approximate percentiles) whatever the number of samples.
// Counter and timer handles update the same values as named updates, across reset().
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "capture/core/metrics.h"

namespace tracecache {
namespace {

TEST(MetricsTimer, FewSamplesGiveExactPercentiles) {
  Metrics m;
  for (int i = 100; i >= 1; --i) m.record_ms("t", i);
  const TimerStats s = m.timer("t");
  EXPECT_EQ(s.count, 100);
  EXPECT_DOUBLE_EQ(s.total_ms, 5050);
  EXPECT_DOUBLE_EQ(s.p50_ms, 50);
  EXPECT_DOUBLE_EQ(s.p90_ms, 90);
  EXPECT_DOUBLE_EQ(s.p99_ms, 99);
  EXPECT_DOUBLE_EQ(s.max_ms, 100);
  EXPECT_TRUE(s.percentiles_exact);
  EXPECT_EQ(m.report().find("approximate"), std::string::npos);
}

TEST(MetricsTimer, ManySamplesKeepBoundedMemoryAndExactTotals) {
  Metrics m;
  constexpr int kSamples = 200'000;
  for (int i = 1; i <= kSamples; ++i) m.record_ms("t", i);
  EXPECT_EQ(m.retained_samples("t"), kMaxTimerSamples);
  const TimerStats s = m.timer("t");
  EXPECT_EQ(s.count, kSamples);
  EXPECT_DOUBLE_EQ(s.total_ms, 200'000.0 * 200'001.0 / 2);
  EXPECT_DOUBLE_EQ(s.max_ms, kSamples);
  EXPECT_FALSE(s.percentiles_exact);
  // A uniform sample of 4096 values of 1..200000: its median is within 5% of the true one
  // (the standard error is under 1%), and the result is the same every run (fixed seed).
  EXPECT_NEAR(s.p50_ms, 100'000, 10'000);
  EXPECT_NEAR(s.p90_ms, 180'000, 10'000);
  EXPECT_NE(m.report().find("Percentiles (approximate)"), std::string::npos);
  m.clear_values();
  EXPECT_EQ(m.retained_samples("t"), 0u);
  EXPECT_EQ(m.timer("t").count, 0);
}

TEST(MetricsHandles, CountAsNamedUpdatesDoAndSurviveResetAndAssignment) {
  Metrics m;
  MetricsCounter c(&m, "calls");
  MetricsTimer t(&m, "step");
  EXPECT_TRUE(m.counters().empty());  // a name appears at its first update, as with add()
  c.add();
  c.add(4);
  m.add("calls");
  EXPECT_EQ(m.counter("calls"), 6);
  const auto start = std::chrono::steady_clock::now();
  t.record_span(start, start + std::chrono::milliseconds(3));
  EXPECT_EQ(m.timer("step").count, 1);
  EXPECT_DOUBLE_EQ(m.timer("step").total_ms, 3);
  m.clear_values();
  c.add();
  EXPECT_EQ(m.counter("calls"), 1);
  m.reset();
  EXPECT_TRUE(m.counters().empty());
  c.add(2);
  t.record_span(start, start + std::chrono::milliseconds(1));
  EXPECT_EQ(m.counter("calls"), 2);
  EXPECT_EQ(m.timer("step").count, 1);
  m = Metrics();
  c.add(7);
  EXPECT_EQ(m.counter("calls"), 7);
  MetricsCounter none(nullptr, "calls");
  none.add();  // no registry: nothing
  EXPECT_EQ(m.counter("calls"), 7);
}

TEST(MetricsHandles, AScopedTimerOnAHandleTellsTheSpanObserver) {
  struct Spans final : SpanObserver {
    std::vector<std::string> names;
    void on_span(std::string_view timer, std::chrono::steady_clock::time_point,
                 std::chrono::steady_clock::time_point) override {
      names.emplace_back(timer);
    }
  } spans;
  Metrics m;
  m.set_span_observer(&spans);
  MetricsTimer t(&m, "run");
  { ScopedTimer scoped(&t); }
  EXPECT_EQ(m.timer("run").count, 1);
  EXPECT_EQ(spans.names, std::vector<std::string>{"run"});
}

}  // namespace
}  // namespace tracecache
