#include "replay/backends/device_stats.h"

#include <algorithm>

namespace tracecache {

namespace {

double us(int64_t ps) { return static_cast<double>(ps) / 1e6; }

}  // namespace

SimInterval sim_interval(const SimSnapshot& before, const SimSnapshot& after) {
  SimInterval i;
  const int64_t step = after.host_ps - before.host_ps;
  const int64_t wait = after.host_wait_ps - before.host_wait_ps;
  const int64_t busy = after.device_busy_ps - before.device_busy_ps;
  i.step_us = us(step);
  i.host_wait_us = us(wait);
  i.host_us = us(step - wait);
  i.device_busy_us = us(busy);
  i.device_idle_us = us(std::max<int64_t>(0, step - busy));
  i.bytes_copied = (after.bytes_to_device - before.bytes_to_device) +
                   (after.bytes_to_host - before.bytes_to_host);
  i.kernels = after.kernels - before.kernels;
  return i;
}

}  // namespace tracecache
