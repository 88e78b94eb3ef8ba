#include "replay/backends/sim/sim_timeline.h"

#include <algorithm>

namespace tracecache {

int64_t SimTimeline::enqueue(TimelineEvent event) {
  const int64_t now = host_now_ps();
  const int64_t start = std::max(now, device_ready_ps_);
  device_ready_ps_ = start + event.duration_ps;
  device_busy_ps_ += event.duration_ps;
  if (recording()) {
    event.start_ps = start;
    record_device(std::move(event));
    record_flow(now, start);
  }
  return start;
}

int64_t SimTimeline::wait_for_device() {
  const Clock::time_point now = Clock::now();
  const int64_t host = host_at(now);
  if (host >= device_ready_ps_) return 0;
  const int64_t waited = device_ready_ps_ - host;
  adjust(real_ps(now), waited);
  host_wait_ps_ += waited;
  record_host("wait for device", "sim", host, device_ready_ps_);
  return waited;
}

}  // namespace tracecache
