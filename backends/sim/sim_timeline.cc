#include "backends/sim/sim_timeline.h"

#include <algorithm>

namespace tracecache {

SimTimeline::SimTimeline() : origin_(Clock::now()) { offsets_.emplace_back(0, 0); }

int64_t SimTimeline::real_ps(Clock::time_point t) const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t - origin_).count() * 1000;
}

int64_t SimTimeline::host_at(Clock::time_point t) const {
  const int64_t real = real_ps(t);
  // The last offset that took effect at or before `real`.
  auto it = std::upper_bound(offsets_.begin(), offsets_.end(), real,
                             [](int64_t r, const std::pair<int64_t, int64_t>& o) { return r < o.first; });
  const int64_t offset = it == offsets_.begin() ? 0 : std::prev(it)->second;
  return real + offset;
}

void SimTimeline::adjust(int64_t real_at_ps, int64_t delta_ps) {
  const int64_t offset = offsets_.back().second + delta_ps;
  if (offsets_.back().first >= real_at_ps) {
    offsets_.back().second = offset;
  } else {
    offsets_.emplace_back(real_at_ps, offset);
  }
}

void SimTimeline::exclude(Clock::time_point from, Clock::time_point to) {
  if (to <= from) return;
  adjust(real_ps(to), -(real_ps(to) - real_ps(from)));
}

int64_t SimTimeline::enqueue(TimelineEvent event) {
  const int64_t start = std::max(host_now_ps(), device_ready_ps_);
  device_ready_ps_ = start + event.duration_ps;
  device_busy_ps_ += event.duration_ps;
  if (record_events_) {
    event.track = TimelineEvent::Track::kDevice;
    event.start_ps = start;
    events_.push_back(std::move(event));
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

void SimTimeline::record_host(std::string name, std::string category, int64_t start_ps, int64_t end_ps) {
  if (!record_events_) return;
  TimelineEvent e;
  e.track = TimelineEvent::Track::kHost;
  e.name = std::move(name);
  e.category = std::move(category);
  e.start_ps = start_ps;
  e.duration_ps = std::max<int64_t>(0, end_ps - start_ps);
  events_.push_back(std::move(e));
}

void SimTimeline::on_span(std::string_view timer, Clock::time_point start, Clock::time_point end) {
  if (!record_events_) return;
  record_host(std::string(timer), "timer", host_at(start), host_at(end));
}

}  // namespace tracecache
