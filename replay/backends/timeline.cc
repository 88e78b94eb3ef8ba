#include "replay/backends/timeline.h"

#include <fmt/format.h>

#include <algorithm>

#include "capture/ops/ops.h"

namespace tracecache {

Timeline::Timeline() : origin_(Clock::now()) { offsets_.emplace_back(0, 0); }

int64_t Timeline::real_ps(Clock::time_point t) const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t - origin_).count() * 1000;
}

int64_t Timeline::host_at(Clock::time_point t) const {
  const int64_t real = real_ps(t);
  // The last offset that took effect at or before `real`.
  auto it = std::upper_bound(offsets_.begin(), offsets_.end(), real,
                             [](int64_t r, const std::pair<int64_t, int64_t>& o) { return r < o.first; });
  const int64_t offset = it == offsets_.begin() ? 0 : std::prev(it)->second;
  return real + offset;
}

void Timeline::adjust(int64_t real_at_ps, int64_t delta_ps) {
  const int64_t offset = offsets_.back().second + delta_ps;
  if (offsets_.back().first >= real_at_ps) {
    offsets_.back().second = offset;
  } else {
    offsets_.emplace_back(real_at_ps, offset);
  }
}

void Timeline::exclude(Clock::time_point from, Clock::time_point to) {
  if (to <= from) return;
  adjust(real_ps(to), -(real_ps(to) - real_ps(from)));
}

void Timeline::record_host(std::string name, std::string category, int64_t start_ps, int64_t end_ps,
                           std::vector<TimelineArg> args) {
  if (!record_events_) return;
  TimelineEvent e;
  e.track = TimelineEvent::Track::kHost;
  e.name = std::move(name);
  e.category = std::move(category);
  e.start_ps = start_ps;
  e.duration_ps = std::max<int64_t>(0, end_ps - start_ps);
  e.args = std::move(args);
  events_.push_back(std::move(e));
}

void Timeline::record_run(std::string name, std::string category, int64_t start_ps, int64_t end_ps,
                          const GraphKey& graph) {
  if (!record_events_) return;
  record_host(std::move(name), std::move(category), start_ps, end_ps, {{"graph", graph.to_hex()}});
  graphs_run_.push_back(graph);
}

void Timeline::record_device(TimelineEvent event) {
  if (!record_events_) return;
  event.track = TimelineEvent::Track::kDevice;
  events_.push_back(std::move(event));
}

void Timeline::record_flow(int64_t host_ps, int64_t device_ps) {
  if (!record_events_) return;
  flows_.push_back({flows_.size() + 1, host_ps, device_ps});
}

void Timeline::record_counter(std::string_view name, int64_t at_ps, int64_t value) {
  if (!record_events_) return;
  counters_.push_back({std::string(name), at_ps, value});
}

void Timeline::on_span(std::string_view timer, Clock::time_point start, Clock::time_point end) {
  if (!record_events_) return;
  record_host(std::string(timer), "timer", host_at(start), host_at(end));
}

std::string kernel_name(const Graph& g, const Kernel& kernel) {
  if (kernel.kind == Kernel::Kind::kOp) return std::string(op_info(g.node(kernel.root).op).name);
  std::vector<std::string_view> names;
  for (NodeId m : kernel.members) names.push_back(op_info(g.node(m).op).name);
  return fmt::format("fused({})", fmt::join(names, ","));
}

}  // namespace tracecache
