// The cpu backend's kernels (replay/backends/cpu/cpu_kernels.h) against the reference kernels they must
// agree with: a fused chain of 4 elementwise ops on 1M f32, f32 GEMM 256x256x256, and a sum
// over the last axis. Each pair computes the same values (bitwise, except GEMM's summation
// order); see tests/replay/cpu_kernels_test.cc.
#include <benchmark/benchmark.h>

#include <vector>

#include "capture/ir/graph.h"
#include "capture/ops/ops.h"
#include "capture/ops/random.h"
#include "replay/backends/cpu/cpu_kernels.h"

namespace tracecache {
namespace {

HostBuffer uniform_buffer(DType dtype, const Shape& shape, uint64_t seed) {
  HostBuffer b(dtype, shape);
  fill_uniform(b, seed, -2.0, 2.0);
  return b;
}

NodeId add(Graph& g, OpKind op, std::vector<NodeId> inputs, std::vector<AttrValue> attrs = {}) {
  std::vector<TensorType> types;
  for (NodeId id : inputs) types.push_back(g.node(id).type());
  const TensorType t = infer_op(op, types, attrs).value_or_throw();
  return g.add_node(op, inputs, attrs, t);
}

// relu(x * y + bias) - x, with x, y: f32[1024, 1024] and bias: f32[1024] broadcast over rows.
struct Chain {
  Graph g;
  NodeId x, y, bias;
  std::vector<NodeId> members;
  HostBuffer vx, vy, vbias;

  Chain() {
    const Shape s{1024, 1024};
    x = g.add_parameter({DType::kF32, s});
    y = g.add_parameter({DType::kF32, s});
    bias = g.add_parameter({DType::kF32, {1024}});
    members.push_back(add(g, OpKind::kMul, {x, y}));
    members.push_back(add(g, OpKind::kAdd, {members.back(), bias}));
    members.push_back(add(g, OpKind::kRelu, {members.back()}));
    members.push_back(add(g, OpKind::kSub, {members.back(), x}));
    vx = uniform_buffer(DType::kF32, s, 1);
    vy = uniform_buffer(DType::kF32, s, 2);
    vbias = uniform_buffer(DType::kF32, {1024}, 3);
  }
  const HostBuffer* param(NodeId id) const { return id == x ? &vx : id == y ? &vy : &vbias; }

  // One preallocated buffer per member, so unfused runs time kernels, not page faults.
  std::vector<HostBuffer> intermediates() const {
    std::vector<HostBuffer> value(g.size());
    for (NodeId m : members) value[m] = HostBuffer(g.node(m).dtype, g.node(m).shape);
    return value;
  }
  std::vector<const HostBuffer*> inputs(NodeId m, const std::vector<HostBuffer>& value) const {
    std::vector<const HostBuffer*> in;
    for (NodeId i : g.inputs(g.node(m))) in.push_back(g.node(i).op == OpKind::kParameter ? param(i) : &value[i]);
    return in;
  }
};

void BM_Chain4_CpuFused(benchmark::State& state) {
  Chain c;
  HostBuffer out(DType::kF32, {1024, 1024});
  for (auto _ : state) {
    cpu::run_fused(c.g, c.members, [&](NodeId id) { return c.param(id); }, out);
    benchmark::DoNotOptimize(out.bytes());
  }
  state.SetItemsProcessed(state.iterations() * out.numel());
}
BENCHMARK(BM_Chain4_CpuFused)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The same chain as 4 separate cpu kernels with materialized intermediates (fusion off).
// Intermediates are allocated once, outside the timed loop, here and in the reference run.
void BM_Chain4_CpuOpByOp(benchmark::State& state) {
  Chain c;
  std::vector<HostBuffer> value = c.intermediates();
  for (auto _ : state) {
    for (NodeId m : c.members) cpu::run_op(c.g, m, c.inputs(m, value), value[m]);
    benchmark::DoNotOptimize(value[c.members.back()].bytes());
  }
  state.SetItemsProcessed(state.iterations() * 1024 * 1024);
}
BENCHMARK(BM_Chain4_CpuOpByOp)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Chain4_Reference(benchmark::State& state) {
  Chain c;
  std::vector<HostBuffer> value = c.intermediates();
  for (auto _ : state) {
    for (NodeId m : c.members) {
      const Node& n = c.g.node(m);
      op_info(n.op).reference(c.inputs(m, value), c.g.attrs(n), value[m]);
    }
    benchmark::DoNotOptimize(value[c.members.back()].bytes());
  }
  state.SetItemsProcessed(state.iterations() * 1024 * 1024);
}
BENCHMARK(BM_Chain4_Reference)->Unit(benchmark::kMicrosecond)->UseRealTime();

// One node with two f32 inputs of shapes `sa`, `sb`.
struct SingleOp {
  Graph g;
  NodeId node;
  std::vector<HostBuffer> values;
  std::vector<const HostBuffer*> in;
  HostBuffer out;

  SingleOp(OpKind op, std::vector<Shape> shapes, std::vector<AttrValue> attrs = {}) {
    std::vector<NodeId> ids;
    for (const Shape& s : shapes) {
      ids.push_back(g.add_parameter({DType::kF32, s}));
      values.push_back(uniform_buffer(DType::kF32, s, ids.size()));
    }
    for (const HostBuffer& v : values) in.push_back(&v);
    node = add(g, op, ids, std::move(attrs));
    out = HostBuffer(g.node(node).dtype, g.node(node).shape);
  }
};

void BM_Matmul256_CpuSgemm(benchmark::State& state) {
  SingleOp m(OpKind::kMatmul, {{256, 256}, {256, 256}});
  for (auto _ : state) {
    cpu::run_op(m.g, m.node, m.in, m.out);
    benchmark::DoNotOptimize(m.out.bytes());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * 256 * 256 * 256 * static_cast<double>(state.iterations()) / 1e9,
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Matmul256_CpuSgemm)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Matmul256_Reference(benchmark::State& state) {
  SingleOp m(OpKind::kMatmul, {{256, 256}, {256, 256}});
  for (auto _ : state) {
    op_info(OpKind::kMatmul).reference(m.in, m.g.attrs(m.g.node(m.node)), m.out);
    benchmark::DoNotOptimize(m.out.bytes());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * 256 * 256 * 256 * static_cast<double>(state.iterations()) / 1e9,
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Matmul256_Reference)->Unit(benchmark::kMicrosecond)->UseRealTime();

// sum(x, axes=[1]) over f32[1024, 1024].
void BM_SumLastAxis_Cpu(benchmark::State& state) {
  SingleOp s(OpKind::kSum, {{1024, 1024}}, {AttrValue::of_ints({1}), AttrValue::of_bool(false)});
  for (auto _ : state) {
    cpu::run_op(s.g, s.node, s.in, s.out);
    benchmark::DoNotOptimize(s.out.bytes());
  }
  state.SetItemsProcessed(state.iterations() * 1024 * 1024);
}
BENCHMARK(BM_SumLastAxis_Cpu)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_SumLastAxis_Reference(benchmark::State& state) {
  SingleOp s(OpKind::kSum, {{1024, 1024}}, {AttrValue::of_ints({1}), AttrValue::of_bool(false)});
  for (auto _ : state) {
    op_info(OpKind::kSum).reference(s.in, s.g.attrs(s.g.node(s.node)), s.out);
    benchmark::DoNotOptimize(s.out.bytes());
  }
  state.SetItemsProcessed(state.iterations() * 1024 * 1024);
}
BENCHMARK(BM_SumLastAxis_Reference)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace tracecache

BENCHMARK_MAIN();
