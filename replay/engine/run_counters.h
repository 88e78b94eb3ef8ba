// The counters a run reports: `tracecache run --json`'s "counters" object and the Python
// package's tracecache.counters() are both this list, so they have the same names. The
// documented counters come first, always (zero when nothing counted them): traces, compiles,
// cache hits by tier, misses, executions, and the compiled functions' guard checks, guard
// failures, recompiles and shape specializations; then every other counter `metrics` holds, by
// name. Pure function of `metrics`; thread-compatible; no errors.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "capture/core/metrics.h"

namespace tracecache {

std::vector<std::pair<std::string, int64_t>> run_counters(const Metrics& metrics);

}  // namespace tracecache
