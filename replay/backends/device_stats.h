// What a Backend's capability queries answer (replay/backends/backend.h): a simulated device
// clock's counts and their intervals, device memory statistics, and the host thread team's
// settings. Plain values, so callers (the CLI's run and bench, reports) read them without
// knowing which backend made them.
// Thread-safety: values. Errors: none.
#pragma once

#include <cstdint>
#include <string>

namespace tracecache {

// Cumulative counts of a simulated device's clock (Backend::simulated_clock); subtract two
// snapshots for an interval.
struct SimSnapshot {
  int64_t host_ps = 0;         // host clock (combined timeline)
  int64_t host_wait_ps = 0;    // time the host spent waiting for the device
  int64_t device_busy_ps = 0;  // kernels + copies
  int64_t bytes_to_device = 0;
  int64_t bytes_to_host = 0;
  int64_t kernels = 0;
};

// One interval (e.g. a step) on the combined timeline, in microseconds.
struct SimInterval {
  double step_us = 0;         // host clock elapsed, waits included
  double host_us = 0;         // step_us minus waits: the host's own work
  double host_wait_us = 0;
  double device_busy_us = 0;
  double device_idle_us = 0;  // step_us - device_busy_us, >= 0
  int64_t bytes_copied = 0;   // both directions
  int64_t kernels = 0;
};
SimInterval sim_interval(const SimSnapshot& before, const SimSnapshot& after);

// A device's own memory (Backend::memory_stats), in bytes.
struct DeviceMemoryStats {
  uint64_t capacity = 0;
  uint64_t in_use = 0;
  // The most in use at once since the backend was made (or its peak was last reset).
  uint64_t peak = 0;
};

// The host thread team the kernels run on (replay/backends/registry/registry.h,
// host_thread_settings): its size and the BLAS library on it ("OpenBLAS 0.3.21 (OpenMP)").
struct ThreadSettings {
  int threads = 1;
  std::string blas;
};

}  // namespace tracecache
