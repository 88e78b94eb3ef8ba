#include "capture/core/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>

namespace tracecache {

uint64_t Metrics::next_epoch() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

void MetricsCounter::bind() {
  auto it = metrics_->counters_.find(name_);
  if (it == metrics_->counters_.end()) it = metrics_->counters_.emplace(std::string(name_), 0).first;
  slot_ = &it->second;
  epoch_ = metrics_->epoch_;
}

void MetricsTimer::bind() {
  auto it = metrics_->timers_.find(name_);
  if (it == metrics_->timers_.end()) it = metrics_->timers_.emplace(std::string(name_), Metrics::Timer{}).first;
  slot_ = &it->second;
  epoch_ = metrics_->epoch_;
}

void Metrics::add(std::string_view counter, int64_t n) {
  auto it = counters_.find(counter);
  if (it == counters_.end()) it = counters_.emplace(std::string(counter), 0).first;
  it->second += n;
}

void Metrics::Timer::add(double ms) {
  ++count;
  total_ms += ms;
  max_ms = count == 1 ? ms : std::max(max_ms, ms);
  if (samples.size() < kMaxTimerSamples) {
    samples.push_back(ms);
    return;
  }
  // Reservoir sampling (Vitter's algorithm R): the count-th sample replaces a random slot with
  // probability kMaxTimerSamples / count, so every sample is kept with equal probability.
  uint64_t z = (rng += 0x9e3779b97f4a7c15);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
  z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
  z ^= z >> 31;
  const uint64_t slot = z % static_cast<uint64_t>(count);
  if (slot < kMaxTimerSamples) samples[slot] = ms;
}

void Metrics::Timer::clear() {
  count = 0;
  total_ms = max_ms = 0;
  samples.clear();
  rng = Timer{}.rng;
}

void Metrics::record_ms(std::string_view timer, double ms) {
  auto it = timers_.find(timer);
  if (it == timers_.end()) it = timers_.emplace(std::string(timer), Timer{}).first;
  it->second.add(ms);
}

void Metrics::record_span(std::string_view timer, std::chrono::steady_clock::time_point start,
                          std::chrono::steady_clock::time_point end) {
  record_ms(timer, std::chrono::duration<double, std::milli>(end - start).count());
  if (observer_) observer_->on_span(timer, start, end);
}

int64_t Metrics::counter(std::string_view name) const {
  auto it = counters_.find(name);
  return it == counters_.end() ? 0 : it->second;
}

TimerStats Metrics::timer(std::string_view name) const {
  TimerStats s;
  auto it = timers_.find(name);
  if (it == timers_.end() || it->second.count == 0) return s;
  const Timer& t = it->second;
  std::vector<double> v = t.samples;
  std::sort(v.begin(), v.end());
  // Nearest-rank percentile.
  auto pct = [&v](double p) {
    size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
    return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
  };
  s.count = t.count;
  s.total_ms = t.total_ms;
  s.mean_ms = t.total_ms / static_cast<double>(t.count);
  s.p50_ms = pct(50);
  s.p90_ms = pct(90);
  s.p99_ms = pct(99);
  s.max_ms = t.max_ms;
  s.percentiles_exact = t.count <= static_cast<int64_t>(kMaxTimerSamples);
  return s;
}

std::vector<std::string> Metrics::timer_names() const {
  std::vector<std::string> names;
  for (const auto& [name, samples] : timers_) names.push_back(name);
  return names;
}

size_t Metrics::retained_samples(std::string_view timer) const {
  auto it = timers_.find(timer);
  return it == timers_.end() ? 0 : it->second.samples.size();
}

std::string Metrics::report() const {
  std::string out;
  for (const auto& [name, samples] : timers_) {
    TimerStats s = timer(name);
    out += fmt::format(
        "Metric: {}\n  TotalSamples: {}\n  Accumulator: {:.3f}ms\n  Mean: {:.3f}ms\n"
        "  Percentiles{}: 50%={:.3f}ms; 90%={:.3f}ms; 99%={:.3f}ms; max={:.3f}ms\n",
        name, s.count, s.total_ms, s.mean_ms, s.percentiles_exact ? "" : " (approximate)", s.p50_ms,
        s.p90_ms, s.p99_ms, s.max_ms);
  }
  for (const auto& [name, value] : counters_) {
    out += fmt::format("Counter: {}\n  Value: {}\n", name, value);
  }
  return out;
}

double ScopedTimer::stop() {
  if (!stopped_) {
    stopped_ = true;
    const auto end = std::chrono::steady_clock::now();
    elapsed_ms_ = std::chrono::duration<double, std::milli>(end - start_).count();
    if (handle_) {
      handle_->record_span(start_, end);
    } else if (metrics_) {
      metrics_->record_span(timer_, start_, end);
    }
  }
  return elapsed_ms_;
}

}  // namespace tracecache
