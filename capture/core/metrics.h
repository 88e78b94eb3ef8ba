// Metrics: one registry of counters and timers, in the spirit of PyTorch/XLA's metrics report.
//
// Counters are named int64 totals. Timers (milliseconds) keep an exact count, total, mean and
// max, and at most kMaxTimerSamples samples for percentiles: every sample up to that many (the
// percentiles are exact), then a uniform reservoir sample of all of them (the percentiles are
// approximate), so memory stays bounded however many steps run. The reservoir's random choices
// come from a fixed-seed generator: the same samples give the same report. Names are fixed
// strings from the tables below, so reports and JSON are stable. Names iterate in sorted order:
// reports are deterministic. A hot path that updates the same counter or timer on every call
// holds a MetricsCounter / MetricsTimer (below): found once, then updated without a lookup.
// Thread-safety: not thread-safe; one owner (a context or runtime) updates it from one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace tracecache {

// Counter names used across tracecache.
namespace counters {
inline constexpr std::string_view kTraces = "traces";                // barriers that built a graph
inline constexpr std::string_view kNodesTraced = "nodes_traced";     // canonical nodes hashed
inline constexpr std::string_view kHitsMemory = "cache_hits_memory";
inline constexpr std::string_view kHitsDisk = "cache_hits_disk";
inline constexpr std::string_view kMisses = "cache_misses";
inline constexpr std::string_view kCompiles = "compiles";
inline constexpr std::string_view kExecutions = "executions";
inline constexpr std::string_view kBytesToDevice = "bytes_to_device";
inline constexpr std::string_view kBytesToHost = "bytes_to_host";
inline constexpr std::string_view kCorrupt = "cache_corrupt";
inline constexpr std::string_view kStoreFailures = "store_failures";
}  // namespace counters

// Timer names.
namespace timers {
inline constexpr std::string_view kTrace = "trace";  // first op recorded -> barrier
inline constexpr std::string_view kCanonicalizeHash = "canonicalize_hash";
inline constexpr std::string_view kLookup = "lookup";
inline constexpr std::string_view kCompile = "compile";
inline constexpr std::string_view kRun = "run";
// One guard entry's guards, timed on a sample of the checks (replay/engine/compiled_function.h,
// kTimedGuardChecks; every one while a SpanObserver watches): timing a check of about 0.1 µs
// costs about as much as the check. The counter "guard_checks" counts them all.
inline constexpr std::string_view kGuardCheck = "guard_check";
}  // namespace timers

// Sees the real start and end of every timer measurement that has them (ScopedTimer and
// record_span), e.g. to draw a timeline. Called on the thread that updates the Metrics.
class SpanObserver {
 public:
  virtual ~SpanObserver() = default;
  virtual void on_span(std::string_view timer, std::chrono::steady_clock::time_point start,
                       std::chrono::steady_clock::time_point end) = 0;
};

struct TimerStats {
  int64_t count = 0;  // exact, as are total, mean and max
  double total_ms = 0, mean_ms = 0, p50_ms = 0, p90_ms = 0, p99_ms = 0, max_ms = 0;
  bool percentiles_exact = true;  // false once count > kMaxTimerSamples
};

// The most samples one timer keeps (32 KB).
inline constexpr size_t kMaxTimerSamples = 4096;

class Metrics {
 public:
  Metrics() = default;
  // Copies the values; handles (MetricsCounter, MetricsTimer) of `this` find their names again.
  Metrics(const Metrics& other) : counters_(other.counters_), timers_(other.timers_), observer_(other.observer_) {}
  Metrics& operator=(const Metrics& other) {
    counters_ = other.counters_;
    timers_ = other.timers_;
    observer_ = other.observer_;
    epoch_ = next_epoch();
    return *this;
  }

  void add(std::string_view counter, int64_t n = 1);
  void record_ms(std::string_view timer, double ms);
  // record_ms of end - start, and tells the span observer.
  void record_span(std::string_view timer, std::chrono::steady_clock::time_point start,
                   std::chrono::steady_clock::time_point end);
  // Not owned; null (the default) for none. Kept by reset() and clear_values().
  void set_span_observer(SpanObserver* observer) { observer_ = observer; }
  // Forgets every counter and sample.
  void reset() {
    counters_.clear();
    timers_.clear();
    epoch_ = next_epoch();
  }
  // Zeroes every counter and drops every sample but keeps the names and the storage, so that
  // measuring a later interval (e.g. one benchmark step) allocates nothing for them.
  void clear_values() {
    for (auto& [name, value] : counters_) value = 0;
    for (auto& [name, timer] : timers_) timer.clear();
  }

  int64_t counter(std::string_view name) const;
  TimerStats timer(std::string_view name) const;
  const std::map<std::string, int64_t, std::less<>>& counters() const { return counters_; }
  std::vector<std::string> timer_names() const;
  // How many samples `timer` holds now (<= kMaxTimerSamples): memory is bounded.
  size_t retained_samples(std::string_view timer) const;

  // A human-readable report: every timer (count, total, percentiles) then every counter.
  std::string report() const;

 private:
  friend class MetricsCounter;
  friend class MetricsTimer;
  // Changes whenever map nodes a handle may point at are destroyed (reset, assignment); unique
  // across all registries, so a handle never mistakes one registry's nodes for another's.
  static uint64_t next_epoch();

  std::map<std::string, int64_t, std::less<>> counters_;
  struct Timer {
    int64_t count = 0;
    double total_ms = 0, max_ms = 0;
    std::vector<double> samples;  // all of them, then a reservoir of kMaxTimerSamples
    uint64_t rng = 0x9e3779b97f4a7c15;  // splitmix64 state for the reservoir
    void add(double ms);
    void clear();
  };
  std::map<std::string, Timer, std::less<>> timers_;
  SpanObserver* observer_ = nullptr;
  uint64_t epoch_ = next_epoch();
};

// One counter of a Metrics, for a hot path: add() is Metrics::add(name, n) without the name
// lookup (the counter's slot is found on the first add, and again after the registry's reset()
// or assignment). The name appears in the registry at the first add, as with Metrics::add.
// REQUIRES: `metrics` (nullable: then add() does nothing) and the characters of `name` outlive
// the handle. Thread-safety: as the Metrics.
class MetricsCounter {
 public:
  MetricsCounter(Metrics* metrics, std::string_view name) : metrics_(metrics), name_(name) {}
  void add(int64_t n = 1) {
    if (metrics_ == nullptr) return;
    if (slot_ == nullptr || epoch_ != metrics_->epoch_) bind();
    *slot_ += n;
  }

 private:
  void bind();
  Metrics* metrics_;
  std::string_view name_;
  int64_t* slot_ = nullptr;
  uint64_t epoch_ = 0;
};

// One timer of a Metrics, for a hot path: record_span() is Metrics::record_span(name, ...)
// without the name lookup, on the same terms as MetricsCounter.
class MetricsTimer {
 public:
  MetricsTimer(Metrics* metrics, std::string_view name) : metrics_(metrics), name_(name) {}
  void record_span(std::chrono::steady_clock::time_point start, std::chrono::steady_clock::time_point end) {
    if (metrics_ == nullptr) return;
    if (slot_ == nullptr || epoch_ != metrics_->epoch_) bind();
    slot_->add(std::chrono::duration<double, std::milli>(end - start).count());
    if (metrics_->observer_) metrics_->observer_->on_span(name_, start, end);
  }
  // Whether a SpanObserver watches the registry (every span is then drawn, so worth measuring).
  bool observed() const { return metrics_ != nullptr && metrics_->observer_ != nullptr; }

 private:
  void bind();
  Metrics* metrics_;
  std::string_view name_;
  Metrics::Timer* slot_ = nullptr;
  uint64_t epoch_ = 0;
};

// Measures the time from construction to stop() (or destruction) into a timer; a null
// registry makes it a no-op.
class ScopedTimer {
 public:
  ScopedTimer(Metrics* metrics, std::string_view timer)
      : metrics_(metrics), timer_(timer), start_(std::chrono::steady_clock::now()) {}
  // Into a timer handle (not null); it must outlive this.
  explicit ScopedTimer(MetricsTimer* timer) : handle_(timer), start_(std::chrono::steady_clock::now()) {}
  ~ScopedTimer() { stop(); }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;
  // Records once and returns the elapsed milliseconds.
  double stop();

 private:
  Metrics* metrics_ = nullptr;
  std::string_view timer_;
  MetricsTimer* handle_ = nullptr;
  std::chrono::steady_clock::time_point start_;
  bool stopped_ = false;
  double elapsed_ms_ = 0;
};

}  // namespace tracecache
