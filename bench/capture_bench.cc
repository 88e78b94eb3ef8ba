// Capture overhead: ns per recorded op, and ns per node to canonicalize + hash.
//
// Graphs of 10 to 10,000 nodes are built as chains of elementwise ops over a few inputs with a
// matmul and a reduction mixed in, the shape of a typical model's op stream. Targets (issue 2):
// <= 100 ns per recorded op, <= 200 ns per node for canonicalize + hash.
#include <benchmark/benchmark.h>

#include "capture/ir/canonical.h"
#include "capture/reference/reference.h"
#include "capture/trace/tensor.h"

namespace tracecache {
namespace {

// Never called: the benchmarks measure recording and canonicalization only.
class NullExecutor final : public GraphExecutor {
 public:
  Result<std::vector<DataRef>> execute(const CanonicalGraph&, std::vector<DataRef>) override {
    return internal_error("not used");
  }
};

// A counter that reports CPU nanoseconds per item, for `items` items per iteration.
benchmark::Counter ns_per_item(const benchmark::State& state, int64_t items) {
  return benchmark::Counter(1e-9 * static_cast<double>(items) * static_cast<double>(state.iterations()),
                            benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// Records `n` ops on inputs x [64, 64] and w [64, 64]; returns the last tensor.
Tensor record_ops(LazyContext& ctx, const Tensor& x, const Tensor& w, int64_t n) {
  Tensor h = x;
  for (int64_t i = 0; i < n; ++i) {
    switch (i % 8) {
      case 0: h = add(h, x); break;
      case 1: h = mul(h, w); break;
      case 2: h = relu(h); break;
      case 3: h = matmul(h, w); break;
      case 4: h = tanh(h); break;
      case 5: h = sub(h, x); break;
      case 6: h = sum(h, {1}, true); break;
      case 7: h = broadcast_to(h, {64, 64}); break;
    }
  }
  (void)ctx;
  return h;
}

void BM_RecordOp(benchmark::State& state) {
  NullExecutor exec;
  LazyContext ctx(&exec);
  Tensor x = ctx.from_buffer(HostBuffer(DType::kF32, {64, 64}));
  Tensor w = ctx.from_buffer(HostBuffer(DType::kF32, {64, 64}));
  const int64_t n = state.range(0);
  for (auto _ : state) {
    Tensor out = record_ops(ctx, x, w, n);
    benchmark::DoNotOptimize(out);
    // Dropping `out` discards the trace (no live pending tensor), ready for the next round.
  }
  state.counters["ns_per_op"] = ns_per_item(state, n);
}
BENCHMARK(BM_RecordOp)->Arg(10)->Arg(100)->Arg(1000)->Arg(10000);

// The traced graph of record_ops, captured once so the benchmark times canonicalize + hash only.
class CapturingExecutor final : public GraphExecutor {
 public:
  Result<std::vector<DataRef>> execute(const CanonicalGraph& g, std::vector<DataRef>) override {
    last = g;
    std::vector<DataRef> outs;
    for (NodeId o : g.graph.outputs()) {
      outs.push_back(host_data(HostBuffer(g.graph.node(o).dtype, g.graph.node(o).shape)));
    }
    return outs;
  }
  CanonicalGraph last;
};

void BM_CanonicalizeAndHash(benchmark::State& state) {
  const int64_t n = state.range(0);
  // Build a trace Graph directly by recording; keep its nodes via a copy of the context's trace:
  // the canonical graph of a chain is the chain itself, so canonicalizing the captured canonical
  // graph again does the same work as the barrier would.
  CapturingExecutor exec;
  LazyContext ctx(&exec);
  Tensor x = ctx.from_buffer(HostBuffer(DType::kF32, {64, 64}));
  Tensor w = ctx.from_buffer(HostBuffer(DType::kF32, {64, 64}));
  {
    Tensor out = record_ops(ctx, x, w, n);
    ctx.mark_step();
  }
  const Graph& trace = exec.last.graph;
  std::vector<NodeId> roots(trace.outputs().begin(), trace.outputs().end());
  for (auto _ : state) {
    CanonicalGraph g = canonicalize(trace, roots);
    benchmark::DoNotOptimize(g.key);
  }
  state.counters["nodes"] = static_cast<double>(trace.size());
  state.counters["ns_per_node"] = ns_per_item(state, static_cast<int64_t>(trace.size()));
}
BENCHMARK(BM_CanonicalizeAndHash)->Arg(10)->Arg(100)->Arg(1000)->Arg(10000);

}  // namespace
}  // namespace tracecache

BENCHMARK_MAIN();
