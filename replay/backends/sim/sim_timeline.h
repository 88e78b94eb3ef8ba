// SimTimeline: the combined host + device timeline of a `sim` backend (replay/backends/sim/sim_backend.h),
// a Timeline (replay/backends/timeline.h) with a simulated device clock.
//
// Two clocks, in picoseconds since the timeline was created:
//  - the host clock (Timeline's) is real (steady_clock) time, with two corrections: time the
//    process spends computing a simulated kernel's numbers on the CPU is taken out (exclude():
//    that work belongs to the device, which is costed by the model instead), and when the host
//    must wait for the device (a value read) the host clock jumps forward to the device's
//    finishing time;
//  - the device clock is the end of the last piece of work enqueued on the device's single
//    in-order stream. Work starts at max(host clock when enqueued, device clock).
// Host slices come from the Metrics timers (trace, hash, lookup, compile, run, guard check) and
// from the backend itself (enqueue, copy calls, waits); device slices are kernels and copies,
// each with a flow arrow from the host at its enqueue. Events are kept only while recording.
// Thread-safety: one thread at a time.
#pragma once

#include <cstdint>

#include "replay/backends/timeline.h"

namespace tracecache {

class SimTimeline final : public Timeline {
 public:
  int64_t device_ready_ps() const { return device_ready_ps_; }

  // Enqueues device work of `event.duration_ps` now; returns its start. Adds it to the busy
  // time; while recording, records it on the device track with a flow from the host.
  int64_t enqueue(TimelineEvent event);
  // The host waits for everything enqueued so far; returns how long it waited (>= 0).
  int64_t wait_for_device();

  // Totals since creation.
  int64_t device_busy_ps() const { return device_busy_ps_; }
  int64_t host_wait_ps() const { return host_wait_ps_; }

 private:
  int64_t device_ready_ps_ = 0;
  int64_t device_busy_ps_ = 0;
  int64_t host_wait_ps_ = 0;
};

}  // namespace tracecache
