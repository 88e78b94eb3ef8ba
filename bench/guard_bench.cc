// Guard checking (issue 4): the cost of deciding that a compiled function's entry holds, for 1
// to 16 tensor inputs (aim: <= 30 ns per tensor input, <= 1 us for 16 inputs), and the host
// overhead of a whole call in `once` mode versus tracing the same function in lazy mode.
#include <benchmark/benchmark.h>

#include "replay/engine/compiled_function.h"
#include "replay/backends/cpu/cpu_backend.h"

namespace tracecache {
namespace {

struct Setup {
  CpuBackend cpu;
  Runtime runtime{&cpu, nullptr, nullptr};
  LazyContext ctx{&runtime};
  CallArgs args;
  explicit Setup(int inputs) {
    for (int i = 0; i < inputs; ++i) args.tensors.push_back(ctx.from_buffer(HostBuffer(DType::kF32, {8, 16})));
  }
};

// Adds all inputs: one graph, `inputs` parameters.
TracedFn add_all() {
  return [](LazyContext&, const TraceArgs& a) {
    Tensor acc = mul(a.tensor(0), a.tensor(0));
    for (size_t i = 1; i < a.num_tensors(); ++i) acc = add(acc, a.tensor(i));
    return std::vector<Tensor>{acc};
  };
}

void BM_GuardCheck(benchmark::State& state) {
  const int inputs = static_cast<int>(state.range(0));
  Setup s(inputs);
  CompiledFunction f("guards", add_all(), &s.runtime);
  (void)f(s.ctx, s.args);  // trace once
  for (auto _ : state) benchmark::DoNotOptimize(f.find_entry(s.args));
  state.counters["ns_per_input"] = benchmark::Counter(
      1e-9 * inputs * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_GuardCheck)->Arg(1)->Arg(4)->Arg(16);

// A whole call: guard check + replay of the cached executable, versus lazy mode's trace + hash +
// lookup + run of the same function every call.
void BM_CallOnce(benchmark::State& state) {
  Setup s(static_cast<int>(state.range(0)));
  CompiledFunction f("once", add_all(), &s.runtime);
  (void)f(s.ctx, s.args);
  for (auto _ : state) benchmark::DoNotOptimize(f(s.ctx, s.args));
}
BENCHMARK(BM_CallOnce)->Arg(1)->Arg(16);

void BM_CallLazy(benchmark::State& state) {
  Setup s(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    Tensor acc = mul(s.args.tensors[0], s.args.tensors[0]);
    for (size_t i = 1; i < s.args.tensors.size(); ++i) acc = add(acc, s.args.tensors[i]);
    s.ctx.mark_step();
    benchmark::DoNotOptimize(acc.buffer());
  }
}
BENCHMARK(BM_CallLazy)->Arg(1)->Arg(16);

}  // namespace
}  // namespace tracecache

BENCHMARK_MAIN();
