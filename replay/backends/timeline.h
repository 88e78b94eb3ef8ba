// Timeline: what a backend's host and device did over time, as events of the Chrome trace-event
// model (slices on a track, counters, flow arrows), for `--timeline` (replay/backends/
// trace_event_writer.h writes one to a file that Perfetto and chrome://tracing load).
//
// Two tracks: the host (the thread driving the backend: trace, hash, lookup, compile, guard
// checks, the backend's own calls, the driver's steps) and the device (kernels and copies).
// Times are picoseconds on the host clock: real (steady_clock) time since the timeline was
// created, minus intervals taken off it with exclude() and plus the jumps adjust() makes (the
// `sim` backend's SimTimeline uses both; on `cpu` the host clock is the real clock). A device's
// own clock, where it has one, is its owner's business (SimTimeline); device slices are recorded
// at whatever times the owner gives.
//
// Recording is off until set_record_events(true): every record_* call is then a no-op, so a
// backend that checks recording() before measuring anything costs a flag test when no timeline
// is asked for. The host clock and exclude() work either way.
// As a SpanObserver (capture/core/metrics.h) it records every Metrics timer span on the host
// track (category "timer").
// Thread-safety: one thread at a time. Ownership: events are values; the timeline owns them.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "capture/core/metrics.h"
#include "capture/ir/graph.h"
#include "capture/ir/hash.h"
#include "replay/compile/executable.h"

namespace tracecache {

// One named argument of a slice (trace-event "args"): an integer or a string.
struct TimelineArg {
  std::string key;
  std::variant<int64_t, std::string> value;
};

// A slice: something that took [start_ps, start_ps + duration_ps) on one track.
struct TimelineEvent {
  enum class Track : uint8_t { kHost = 0, kDevice = 1 };
  Track track = Track::kHost;
  std::string name;
  std::string category;  // host: "timer", "step", "sim", "cpu"; device: "kernel", "copy"
  int64_t start_ps = 0;
  int64_t duration_ps = 0;
  std::vector<TimelineArg> args;
};

// A sample of a counter track (e.g. the device memory in use, in bytes, from at_ps on).
struct TimelineCounter {
  std::string name;
  int64_t at_ps = 0;
  int64_t value = 0;
};

// An arrow from the host (the call that enqueued or launched work, at host_ps) to the device
// work it started (at device_ps). Ids are unique within a timeline.
struct TimelineFlow {
  uint64_t id = 0;
  int64_t host_ps = 0;
  int64_t device_ps = 0;
};

class Timeline : public SpanObserver {
 public:
  using Clock = std::chrono::steady_clock;
  Timeline();

  // The host clock now, and at an earlier real time point.
  int64_t host_now_ps() const { return host_at(Clock::now()); }
  int64_t host_at(Clock::time_point t) const;
  // Takes the real interval [from, to) off the host clock (work done for the device).
  // REQUIRES: `to` is not in the future and not before the last exclude's or adjust's time.
  void exclude(Clock::time_point from, Clock::time_point to);

  bool recording() const { return record_events_; }
  void set_record_events(bool on) { record_events_ = on; }

  // A host slice [start_ps, end_ps) (a negative length is recorded as 0).
  void record_host(std::string name, std::string category, int64_t start_ps, int64_t end_ps,
                   std::vector<TimelineArg> args = {});
  // A host slice for a backend running graph `graph` (args {graph: its hex key}); the key is
  // also appended to graphs_run().
  void record_run(std::string name, std::string category, int64_t start_ps, int64_t end_ps,
                  const GraphKey& graph);
  // A device slice (its track is set to kDevice).
  void record_device(TimelineEvent event);
  void record_flow(int64_t host_ps, int64_t device_ps);
  void record_counter(std::string_view name, int64_t at_ps, int64_t value);
  void on_span(std::string_view timer, Clock::time_point start, Clock::time_point end) override;

  // Slices of both tracks in the order they were recorded.
  const std::vector<TimelineEvent>& events() const { return events_; }
  const std::vector<TimelineCounter>& counters() const { return counters_; }
  const std::vector<TimelineFlow>& flows() const { return flows_; }
  // The graph of every record_run, in order (a driver takes the ones added during a step).
  const std::vector<GraphKey>& graphs_run() const { return graphs_run_; }

 protected:
  int64_t real_ps(Clock::time_point t) const;
  // From real time `real_at_ps` on, the host clock runs `delta_ps` ahead of where it was.
  void adjust(int64_t real_at_ps, int64_t delta_ps);

 private:
  Clock::time_point origin_;
  // (real ps, host clock minus real clock from then on), in real-time order.
  std::vector<std::pair<int64_t, int64_t>> offsets_;
  bool record_events_ = false;
  std::vector<TimelineEvent> events_;
  std::vector<TimelineCounter> counters_;
  std::vector<TimelineFlow> flows_;
  std::vector<GraphKey> graphs_run_;
};

// The name a timeline shows for a kernel: "matmul", or "fused(mul,add,exp)" listing a fused
// kernel's members in order.
std::string kernel_name(const Graph& g, const Kernel& kernel);

}  // namespace tracecache
