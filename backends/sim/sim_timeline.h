// SimTimeline: the combined host + device timeline of a `sim` backend (backends/sim/sim_backend.h).
//
// Two clocks, in picoseconds since the timeline was created:
//  - the host clock is real (steady_clock) time, with two corrections: time the process spends
//    computing a simulated kernel's numbers on the CPU is taken out (that work belongs to the
//    device, which is costed by the model instead), and when the host must wait for the device
//    (a value read) the host clock jumps forward to the device's finishing time;
//  - the device clock is the end of the last piece of work enqueued on the device's single
//    in-order stream. Work starts at max(host clock when enqueued, device clock).
// Host spans come from the Metrics timers (this class is a SpanObserver: trace, hash, lookup,
// compile, run, guard check) and from the backend itself (enqueue, copy calls, waits); device
// spans are kernels and copies. Events are kept only when recording is on (record_events).
// Thread-safety: one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "capture/core/metrics.h"

namespace tracecache {

struct TimelineEvent {
  enum class Track : uint8_t { kHost = 0, kDevice = 1 };
  Track track = Track::kHost;
  std::string name;
  std::string category;  // host: "timer", "sim"; device: "kernel", "copy"
  int64_t start_ps = 0;
  int64_t duration_ps = 0;
  int64_t flops = -1;  // device kernels
  int64_t bytes = -1;  // device kernels and copies
};

class SimTimeline final : public SpanObserver {
 public:
  using Clock = std::chrono::steady_clock;
  SimTimeline();

  // The host clock now, and at an earlier real time point.
  int64_t host_now_ps() const { return host_at(Clock::now()); }
  int64_t host_at(Clock::time_point t) const;
  int64_t device_ready_ps() const { return device_ready_ps_; }

  // Takes the real interval [from, to) off the host clock (the CPU computed device work).
  // REQUIRES: `to` is not in the future and not before the last exclude's or wait's time.
  void exclude(Clock::time_point from, Clock::time_point to);
  // Enqueues device work of `duration_ps` now; returns its start. Adds it to the busy time.
  int64_t enqueue(TimelineEvent event);
  // The host waits for everything enqueued so far; returns how long it waited (>= 0).
  int64_t wait_for_device();

  void record_host(std::string name, std::string category, int64_t start_ps, int64_t end_ps);
  void on_span(std::string_view timer, Clock::time_point start, Clock::time_point end) override;

  // Totals since creation.
  int64_t device_busy_ps() const { return device_busy_ps_; }
  int64_t host_wait_ps() const { return host_wait_ps_; }

  void set_record_events(bool on) { record_events_ = on; }
  const std::vector<TimelineEvent>& events() const { return events_; }

 private:
  int64_t real_ps(Clock::time_point t) const;
  void adjust(int64_t real_at_ps, int64_t delta_ps);

  Clock::time_point origin_;
  // (real ps, host clock minus real clock from then on), in real-time order.
  std::vector<std::pair<int64_t, int64_t>> offsets_;
  int64_t device_ready_ps_ = 0;
  int64_t device_busy_ps_ = 0;
  int64_t host_wait_ps_ = 0;
  bool record_events_ = false;
  std::vector<TimelineEvent> events_;
};

}  // namespace tracecache
