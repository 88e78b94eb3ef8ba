#include "replay/engine/run_counters.h"

#include <algorithm>
#include <iterator>
#include <string_view>

#include "replay/engine/compiled_function.h"

namespace tracecache {

std::vector<std::pair<std::string, int64_t>> run_counters(const Metrics& metrics) {
  const std::string_view always[] = {counters::kTraces,       counters::kCompiles,
                                     counters::kHitsMemory,   counters::kHitsDisk,
                                     counters::kMisses,       counters::kExecutions,
                                     counters::kGuardChecks,  counters::kGuardFailures,
                                     counters::kRecompiles,   counters::kSpecializations};
  std::vector<std::pair<std::string, int64_t>> out;
  for (std::string_view name : always) out.emplace_back(name, metrics.counter(name));
  for (const auto& [name, value] : metrics.counters()) {
    if (std::find(std::begin(always), std::end(always), name) == std::end(always)) out.emplace_back(name, value);
  }
  return out;
}

}  // namespace tracecache
