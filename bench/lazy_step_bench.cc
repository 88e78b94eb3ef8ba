// Per-step cost of lazy mode on every fixture program (issue 3): host overhead (trace the op
// stream + canonicalize and hash + cache lookup) and kernel time (the cpu backend running the
// cached executable), from the runtime's own timers. Steady state: the first step's compile is
// excluded by warming the cache before timing.
#include <benchmark/benchmark.h>

#include "frontend/program/program.h"
#include "frontend/program/program_runner.h"
#include "replay/backends/cpu/cpu_backend.h"
#include "replay/engine/runtime.h"

namespace tracecache {
namespace {

constexpr int kStepsPerIteration = 20;

void BM_LazyStep(benchmark::State& state, const std::string& file) {
  Result<Program> program = load_program(std::string(TRACECACHE_SOURCE_DIR) + "/fixtures/programs/" + file);
  if (!program.is_ok()) {
    state.SkipWithError(program.status().message().c_str());
    return;
  }
  CpuBackend cpu;
  Metrics metrics;
  Runtime runtime(&cpu, nullptr, &metrics);
  {
    LazyContext warm(&runtime);
    (void)run_program(*program, warm, kStepsPerIteration);  // compiles every graph once
  }
  metrics.reset();
  for (auto _ : state) {
    LazyOptions o;
    o.metrics = &metrics;
    LazyContext ctx(&runtime, o);
    auto steps = run_program(*program, ctx, kStepsPerIteration);
    benchmark::DoNotOptimize(steps);
  }
  auto us = [&](std::string_view t) { return metrics.timer(t).mean_ms * 1000.0; };
  state.counters["trace_us"] = us(timers::kTrace);
  state.counters["hash_us"] = us(timers::kCanonicalizeHash);
  state.counters["lookup_us"] = us(timers::kLookup);
  state.counters["overhead_us"] = us(timers::kTrace) + us(timers::kCanonicalizeHash) + us(timers::kLookup);
  state.counters["kernel_us"] = us(timers::kRun);
  state.counters["nodes"] = static_cast<double>(metrics.counter(counters::kNodesTraced)) /
                            static_cast<double>(std::max<int64_t>(1, metrics.counter(counters::kTraces)));
}

const bool registered = [] {
  for (const char* f : {"mlp.trace", "attention.trace", "lr_schedule.trace",
                        "matmul_varying_batch.trace", "ops_tour.trace", "embedding.trace"}) {
    benchmark::RegisterBenchmark(("LazyStep/" + std::string(f)).c_str(),
                                 [f](benchmark::State& s) { BM_LazyStep(s, f); })
        ->Unit(benchmark::kMillisecond);
  }
  return true;
}();

}  // namespace
}  // namespace tracecache

BENCHMARK_MAIN();
