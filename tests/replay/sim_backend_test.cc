// The `sim` backend (replay/backends/sim/sim_backend.h) and its parts:
//  - outputs BITWISE equal to the cpu backend's for every fixture program (every registry op:
//    tests/replay/backend_conformance_test.cc);
//  - the cost model (replay/backends/sim/cost_model.h) to the picosecond on hand-computed kernels and
//    transfers, on a custom spec whose rates make every term exact;
//  - device memory: an allocation that does not fit is an error naming the graph key, the
//    bytes requested and free; through the Runtime the step still returns correct results and
//    records a fallback event;
//  - device specs: presets, the file format and its errors, digests that keep executables of
//    different specs apart;
//  - the timeline: device work in order and never overlapping, the host waiting on reads.
#include <gtest/gtest.h>
#include <sstream>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "capture/ops/ops.h"
#include "frontend/program/program.h"
#include "frontend/program/program_runner.h"
#include "capture/reference/reference.h"
#include "replay/compile/compiler.h"
#include "replay/backends/sim/cost_model.h"
#include "replay/backends/cpu/cpu_backend.h"
#include "replay/backends/sim/device_spec.h"
#include "replay/engine/runtime.h"
#include "replay/backends/sim/sim_backend.h"
#include "tests/backend_compare.h"
#include "tests/test_graphs.h"

namespace tracecache {
namespace {

// Every term of the cost model is an integer number of picoseconds on this device:
// 1 flop/ps on the matrix unit, 0.5 flop/ps otherwise, 0.1 byte/ps memory, 0.01 byte/ps link.
DeviceSpec exact_spec(uint64_t capacity = uint64_t{1} << 20) {
  DeviceSpec s;
  s.name = "exact";
  s.matmul_tflops = 1;
  s.vector_tflops = 0.5;
  s.memory_gbps = 100;
  s.memory_capacity = capacity;
  s.link_gbps = 10;
  s.link_latency_ns = 500;
  s.launch_overhead_ns = 1000;
  return s;
}

using testing::filled;
using testing::run_on;
using testing::same_bits;

// ---- fixture programs: sim == cpu through the runtime -----------------------------------------

// Runs a fixture program in lazy mode on `backend` (no disk cache); `events` gets the
// runtime's events.
std::vector<StepResult> run_lazy(Backend& backend, const std::string& program,
                                 std::vector<store::Event>* events = nullptr) {
  Result<Program> p = load_program(testing::fixture_path(program));
  EXPECT_TRUE(p.is_ok());
  Runtime runtime(&backend, nullptr, nullptr);
  LazyContext ctx(&runtime);
  std::vector<StepResult> steps = std::move(run_program(*p, ctx, -1)).value_or_throw();
  if (events) *events = runtime.events();
  return steps;
}

TEST(SimBackend, FixtureProgramsBitwiseEqualToCpu) {
  for (const std::string& program : testing::all_fixture_programs()) {
    CpuBackend cpu;
    SimBackend sim(*find_device_preset("a100"));
    std::vector<store::Event> events;
    std::vector<StepResult> want = run_lazy(cpu, program);
    std::vector<StepResult> got = run_lazy(sim, program, &events);
    ASSERT_EQ(got.size(), want.size()) << program;
    for (size_t s = 0; s < got.size(); ++s) {
      ASSERT_EQ(got[s].outputs.size(), want[s].outputs.size());
      for (size_t o = 0; o < got[s].outputs.size(); ++o) {
        EXPECT_TRUE(same_bits(*got[s].outputs[o].second, *want[s].outputs[o].second))
            << program << " step " << s << " output " << got[s].outputs[o].first;
      }
    }
    for (const store::Event& e : events) {
      EXPECT_NE(e.kind, store::EventKind::kFallback) << program << ": " << e.detail;
    }
    EXPECT_GT(sim.snapshot().kernels, 0) << program;
    EXPECT_EQ(sim.memory_in_use(), 0u) << program;
  }
}

// ---- the cost model, exactly -------------------------------------------------------------------

Graph matmul_graph(DType dtype, int64_t m, int64_t k, int64_t n) {
  Graph g;
  NodeId a = g.add_parameter({dtype, {m, k}});
  NodeId b = g.add_parameter({dtype, {k, n}});
  std::vector<AttrValue> none;
  const NodeId ids[] = {a, b};
  const std::vector<TensorType> in = {{dtype, {m, k}}, {dtype, {k, n}}};
  TensorType t = infer_op(OpKind::kMatmul, in, none).value_or_throw();
  g.add_output(g.add_node(OpKind::kMatmul, ids, none, t));
  return g;
}

TEST(CostModel, MatmulIsExact) {
  const Graph g = matmul_graph(DType::kF32, 64, 64, 64);
  Executable exe = compile_graph(g, hash_graph(g), "sim", "x");
  ASSERT_EQ(exe.kernel_plan()->kernels.size(), 1u);
  const KernelCost cost = kernel_cost(g, exe.kernel_plan()->kernels[0]);
  EXPECT_EQ(cost.flops, 2 * 64 * 64 * 64);   // 524288
  EXPECT_EQ(cost.bytes, 3 * 64 * 64 * 4);    // 49152: a and b read, c written
  EXPECT_TRUE(cost.matrix_unit);
  // max(524288 flops / 1 flop/ps, 49152 B / 0.1 B/ps = 491520 ps) + 1 us launch.
  EXPECT_EQ(kernel_time_ps(exact_spec(), cost), 524288 + 1000000);

  // A memory-bound shape: [256, 1] x [1, 256]: 131072 flops, (256 + 256 + 65536) * 4 bytes.
  const Graph outer = matmul_graph(DType::kF32, 256, 1, 256);
  Executable exe2 = compile_graph(outer, hash_graph(outer), "sim", "x");
  const KernelCost c2 = kernel_cost(outer, exe2.kernel_plan()->kernels[0]);
  EXPECT_EQ(c2.flops, 131072);
  EXPECT_EQ(c2.bytes, 264192);
  EXPECT_EQ(kernel_time_ps(exact_spec(), c2), 2641920 + 1000000);

  // Integer matmul runs on the vector units: 2*4*4*4 = 128 flops at 0.5 flop/ps = 256 ps,
  // under the 3 * 64 B / 0.1 = 1920 ps of memory.
  const Graph ints = matmul_graph(DType::kI32, 4, 4, 4);
  Executable exe3 = compile_graph(ints, hash_graph(ints), "sim", "x");
  const KernelCost c3 = kernel_cost(ints, exe3.kernel_plan()->kernels[0]);
  EXPECT_FALSE(c3.matrix_unit);
  EXPECT_EQ(c3.flops, 128);
  EXPECT_EQ(kernel_time_ps(exact_spec(), c3), 1920 + 1000000);
}

// A bf16 or f16 matmul, which the cpu and sim backends compute widened (a cast of each operand
// to f32, the f32 matmul, a cast back), is costed at the device's bf16 or f16 matrix rate.
TEST(CostModel, HalfMatmulIsCostedAtItsOwnRate) {
  DeviceSpec spec = exact_spec();
  spec.matmul_bf16_tflops = 4;  // 4 flop/ps
  spec.matmul_f16_tflops = 2;
  for (auto [dtype, rate] : {std::pair{DType::kBF16, 4}, std::pair{DType::kF16, 2}}) {
    const Graph g = matmul_graph(dtype, 64, 64, 64);
    Executable exe = compile_graph(g, hash_graph(g), "sim", "x", CompileOptions{.widen = true});
    ASSERT_TRUE(exe.kernel_plan()->widened());
    const Graph& run = exe.run_graph();
    int matrix_kernels = 0;
    for (const Kernel& k : exe.kernel_plan()->kernels) {
      const KernelCost cost = kernel_cost(run, k);
      if (!cost.matrix_unit) continue;
      ++matrix_kernels;
      EXPECT_EQ(cost.matrix_dtype, dtype);
      EXPECT_EQ(cost.flops, 2 * 64 * 64 * 64);
      // 524288 flops at `rate` flop/ps against 3 * 64 * 64 * 4 B of f32 at 0.1 B/ps = 491520 ps.
      EXPECT_EQ(kernel_time_ps(spec, cost), std::max<int64_t>(524288 / rate, 491520) + 1000000);
    }
    EXPECT_EQ(matrix_kernels, 1) << dtype_name(dtype);
  }
  // A file that leaves the half rates out gets the f32 one; the presets have their own.
  Result<DeviceSpec> s = parse_device_spec(
      "name = x\nmatmul_tflops = 3\nvector_tflops = 1\nmemory_gbps = 1\nmemory_capacity = 1G\nlink_gbps = 1\n"
      "link_latency_ns = 0\nlaunch_overhead_ns = 0\n", "s");
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->matmul_peak(DType::kBF16), 3);
  EXPECT_EQ(s->matmul_peak(DType::kF16), 3);
  EXPECT_EQ(find_device_preset("a100")->matmul_peak(DType::kBF16), 312);
  EXPECT_EQ(find_device_preset("h100")->matmul_peak(DType::kF16), 989.5);
  EXPECT_EQ(find_device_preset("h100")->matmul_peak(DType::kF32), 67);
}

TEST(CostModel, FusedKernelCountsMembersFlopsAndOnlyLeafAndRootBytes) {
  // out = exp(a) * b + a, all f32[1000]: one fused kernel exp -> mul -> add.
  Graph g;
  const TensorType t{DType::kF32, {1000}};
  NodeId a = g.add_parameter(t), b = g.add_parameter(t);
  std::vector<AttrValue> none;
  const NodeId e = g.add_node(OpKind::kExp, std::vector<NodeId>{a}, none, t);
  const NodeId m = g.add_node(OpKind::kMul, std::vector<NodeId>{e, b}, none, t);
  const NodeId s = g.add_node(OpKind::kAdd, std::vector<NodeId>{m, a}, none, t);
  g.add_output(s);
  Executable exe = compile_graph(g, hash_graph(g), "sim", "x");
  ASSERT_EQ(exe.kernel_plan()->kernels.size(), 1u);
  ASSERT_EQ(exe.kernel_plan()->kernels[0].kind, Kernel::Kind::kFused);
  const KernelCost cost = kernel_cost(g, exe.kernel_plan()->kernels[0]);
  EXPECT_EQ(cost.flops, kTranscendentalFlops * 1000 + 1000 + 1000);
  EXPECT_EQ(cost.bytes, 3 * 4000);  // a (read once, used twice), b, the root
  EXPECT_FALSE(cost.matrix_unit);
  // flops 6000 / 0.5 = 12000 ps < bytes 12000 / 0.1 = 120000 ps.
  EXPECT_EQ(kernel_time_ps(exact_spec(), cost), 120000 + 1000000);
  EXPECT_EQ(kernel_name(g, exe.kernel_plan()->kernels[0]), "fused(exp,mul,add)");
}

TEST(CostModel, ReductionAndLayout) {
  Graph g;
  const TensorType in{DType::kF32, {100, 10}};
  NodeId x = g.add_parameter(in);
  std::vector<AttrValue> sum_attrs = {AttrValue::of_ints({1}), AttrValue::of_bool(false)};
  const std::vector<TensorType> ins = {in};
  TensorType st = infer_op(OpKind::kSum, ins, sum_attrs).value_or_throw();
  NodeId s = g.add_node(OpKind::kSum, std::vector<NodeId>{x}, sum_attrs, st);
  std::vector<AttrValue> perm = {AttrValue::of_ints({1, 0})};
  TensorType pt = infer_op(OpKind::kPermute, ins, perm).value_or_throw();
  NodeId p = g.add_node(OpKind::kPermute, std::vector<NodeId>{x}, perm, pt);
  EXPECT_EQ(op_flops(g, s), 1000);  // one per input element
  EXPECT_EQ(op_flops(g, p), 0);     // layout: memory only
  EXPECT_EQ(kernel_cost(g, Kernel{Kernel::Kind::kOp, s, {}}).bytes, 4000 + 400);
}

TEST(CostModel, TransfersAndTheStreamAreExact) {
  const DeviceSpec spec = exact_spec();
  // 16384 B / 0.01 B/ps + 500 ns.
  EXPECT_EQ(transfer_time_ps(spec, 16384), 1638400 + 500000);

  // A link latency of one hour: the device is behind the host when the output is read, however
  // slow the host (a sanitizer build, a loaded machine), so the read must wait.
  DeviceSpec slow = spec;
  slow.link_latency_ns = 3'600'000'000'000;
  SimBackend sim(slow);
  const Graph g = matmul_graph(DType::kF32, 64, 64, 64);
  std::vector<BufferRef> params = {filled(DType::kF32, {64, 64}, 1), filled(DType::kF32, {64, 64}, 2)};
  const SimSnapshot before = sim.snapshot();
  std::vector<BufferRef> out = run_on(sim, g, params);
  const SimSnapshot after = sim.snapshot();
  // Two copies in, the kernel, one copy out.
  EXPECT_EQ(after.device_busy_ps - before.device_busy_ps, 3 * (1638400 + 3'600'000'000'000'000) + 1524288);
  EXPECT_EQ(after.bytes_to_device - before.bytes_to_device, 2 * 16384);
  EXPECT_EQ(after.bytes_to_host - before.bytes_to_host, 16384);
  EXPECT_EQ(after.kernels - before.kernels, 1);
  // The read waited for the device: the host is not behind it.
  EXPECT_GE(after.host_ps, sim.timeline().device_ready_ps());
  EXPECT_GT(after.host_wait_ps, 0);
}

// ---- device memory ---------------------------------------------------------------------------

TEST(SimBackend, WeightsStayOnTheDeviceBetweenSteps) {
  // The runtime copies a host buffer to the device once while it lives (device data): later
  // steps copy only their new inputs.
  SimBackend sim(*find_device_preset("h100"));
  Metrics metrics;
  Runtime runtime(&sim, nullptr, &metrics);
  LazyContext ctx(&runtime);
  Tensor w = ctx.from_buffer(filled(DType::kF32, {64, 64}, 1));
  std::string first;
  for (uint64_t step = 0; step < 3; ++step) {
    Tensor x = ctx.from_buffer(filled(DType::kF32, {4, 64}, 10 + step));
    Tensor y = matmul(x, w);
    ctx.mark_step();
    if (step == 0) first = y.buffer()->checksum();
  }
  EXPECT_EQ(metrics.counter(counters::kBytesToDevice), 64 * 64 * 4 + 3 * 4 * 64 * 4);
  // A new weight buffer (even at a reused address) is copied again.
  w = ctx.from_buffer(filled(DType::kF32, {64, 64}, 2));
  Tensor x = ctx.from_buffer(filled(DType::kF32, {4, 64}, 10));
  Tensor y = matmul(x, w);
  ctx.mark_step();
  EXPECT_EQ(metrics.counter(counters::kBytesToDevice), 2 * 64 * 64 * 4 + 4 * 4 * 64 * 4);
  EXPECT_NE(y.buffer()->checksum(), first);
}

TEST(SimBackend, OutOfMemoryIsAnErrorNamingKeyAndBytes) {
  // Parameters (2 * 16 KiB) fit in 40000 bytes; the 16 KiB output does not.
  SimBackend sim(exact_spec(40000));
  const Graph g = matmul_graph(DType::kF32, 64, 64, 64);
  const GraphKey key = hash_graph(g);
  Executable exe = std::move(sim.compile(g, key, kCompilerVersion)).value_or_throw();
  std::vector<DeviceRef> dev;
  for (uint64_t seed : {1, 2}) dev.push_back(std::move(sim.to_device(host_data(filled(DType::kF32, {64, 64}, seed)))).value_or_throw());
  EXPECT_EQ(sim.memory_in_use(), 32768u);
  Result<std::vector<DeviceRef>> r = sim.run(exe, dev);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  const std::string& msg = r.status().message();
  EXPECT_NE(msg.find("out of memory"), std::string::npos) << msg;
  EXPECT_NE(msg.find(key.to_hex()), std::string::npos) << msg;
  EXPECT_NE(msg.find("16384 bytes requested"), std::string::npos) << msg;
  EXPECT_NE(msg.find("7232 bytes free of 40000"), std::string::npos) << msg;
  // A parameter that does not fit: named by type.
  Result<DeviceRef> big = sim.to_device(host_data(filled(DType::kF32, {64, 64}, 3)));
  ASSERT_FALSE(big.is_ok());
  EXPECT_NE(big.status().message().find("f32[64, 64]"), std::string::npos) << big.status().message();
  dev.clear();
  EXPECT_EQ(sim.memory_in_use(), 0u);
  EXPECT_EQ(sim.memory_peak(), 32768u);
}

TEST(SimBackend, OutOfMemoryFallsBackThroughTheRuntimeWithCorrectResults) {
  // mlp.trace's weights alone need ~0.9 MB; this device has 64 KiB.
  SimBackend sim(exact_spec(64 << 10));
  std::vector<store::Event> events;
  std::vector<StepResult> got = run_lazy(sim, "mlp.trace", &events);
  Result<Program> p = load_program(testing::fixture_path("mlp.trace"));
  ReferenceExecutor ref;
  LazyContext ctx(&ref);
  std::vector<StepResult> want = std::move(run_program(*p, ctx, -1)).value_or_throw();
  ASSERT_EQ(got.size(), want.size());
  for (size_t s = 0; s < got.size(); ++s) {
    for (size_t o = 0; o < got[s].outputs.size(); ++o) {
      EXPECT_TRUE(same_bits(*got[s].outputs[o].second, *want[s].outputs[o].second))
          << "the fallback is the reference evaluator: step " << s;
    }
  }
  int fallbacks = 0;
  for (const store::Event& e : events) {
    if (e.kind != store::EventKind::kFallback) continue;
    ++fallbacks;
    EXPECT_EQ(e.reason, "run failed");
    EXPECT_NE(e.detail.find("out of memory"), std::string::npos) << e.detail;
    EXPECT_NE(e.detail.find(e.graph.to_hex()), std::string::npos) << e.detail;
  }
  EXPECT_EQ(fallbacks, static_cast<int>(got.size()));
  EXPECT_EQ(sim.memory_in_use(), 0u);
}

// ---- device specs ---------------------------------------------------------------------------

TEST(DeviceSpec, PresetsRoundTripThroughTheFileFormat) {
  ASSERT_EQ(device_presets().size(), 3u);
  for (const char* name : {"h100", "a100", "tpu-v4"}) {
    const DeviceSpec* preset = find_device_preset(name);
    ASSERT_NE(preset, nullptr) << name;
    Result<DeviceSpec> back = parse_device_spec(preset->to_text(), "preset");
    ASSERT_TRUE(back.is_ok()) << back.status().to_string();
    EXPECT_EQ(back->to_text(), preset->to_text());
    EXPECT_EQ(back->digest(), preset->digest());
  }
  EXPECT_EQ(find_device_preset("h100")->memory_gbps, 3350);
  EXPECT_EQ(find_device_preset("a100")->vector_tflops, 19.5);
  EXPECT_EQ(find_device_preset("tpu-v4")->memory_capacity, uint64_t{32} << 30);
  EXPECT_EQ(find_device_preset("v100"), nullptr);
}

TEST(DeviceSpec, ParsesCommentsBlanksAndSuffixes) {
  Result<DeviceSpec> s = parse_device_spec(
      "# my device\n\nname = tiny-1\nmatmul_tflops = 1\nvector_tflops=0.5\n  memory_gbps = 100  \n"
      "memory_capacity = 64K\nlink_gbps = 10\nlink_latency_ns = 0\nlaunch_overhead_ns = 1000\n",
      "t.spec");
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->name, "tiny-1");
  EXPECT_EQ(s->memory_capacity, 65536u);
  EXPECT_EQ(s->vector_tflops, 0.5);
  EXPECT_EQ(s->link_latency_ns, 0);
}

TEST(DeviceSpec, TheExampleInDocsSimMdParses) {
  // The spec-file example of docs/sim.md, comments at the ends of lines included.
  std::ifstream doc(std::string(TRACECACHE_SOURCE_DIR) + "/docs/sim.md");
  ASSERT_TRUE(doc) << "docs/sim.md";
  std::stringstream all;
  all << doc.rdbuf();
  const std::string text = all.str();
  const size_t start = text.find("```\n# my device");
  ASSERT_NE(start, std::string::npos);
  const size_t body = start + 4, end = text.find("```", body);
  Result<DeviceSpec> s = parse_device_spec(text.substr(body, end - body), "sim.md");
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->name, "small");
  EXPECT_EQ(s->memory_capacity, uint64_t{64} << 20);
  EXPECT_EQ(s->launch_overhead_ns, 1000);
}

TEST(DeviceSpec, ErrorsNameFileAndLine) {
  const std::string good = exact_spec().to_text();
  auto error_of = [](const std::string& text) {
    Result<DeviceSpec> s = parse_device_spec(text, "dev.spec");
    EXPECT_FALSE(s.is_ok()) << text;
    if (!s.is_ok()) {
      EXPECT_EQ(s.status().code(), StatusCode::kParseError);
    }
    return s.is_ok() ? std::string() : s.status().message();
  };
  EXPECT_EQ(error_of("name = x\nmatmul_tflop = 3\n").substr(0, 42), "dev.spec:2: unknown key 'matmul_tflop' (ex");
  EXPECT_EQ(error_of(good + "name = again\n"), "dev.spec:9: 'name' is set twice (first on line 1)");
  EXPECT_EQ(error_of("name = x\nmatmul_tflops\n"), "dev.spec:2: expected 'key = value', got 'matmul_tflops'");
  EXPECT_EQ(error_of("matmul_tflops = fast\n"), "dev.spec:1: matmul_tflops 'fast' must be a finite number > 0");
  EXPECT_EQ(error_of("memory_gbps = 0\n"), "dev.spec:1: memory_gbps '0' must be a finite number > 0");
  EXPECT_EQ(error_of("matmul_bf16_tflops = 0\n"), "dev.spec:1: matmul_bf16_tflops '0' must be a finite number > 0");
  EXPECT_EQ(error_of("link_latency_ns = -1\n"), "dev.spec:1: link_latency_ns '-1' must be a finite number >= 0");
  EXPECT_EQ(error_of("vector_tflops = 1e999\n"), "dev.spec:1: vector_tflops '1e999' must be a finite number > 0");
  EXPECT_NE(error_of("memory_capacity = 12Q\n").find("dev.spec:1: memory_capacity '12Q'"), std::string::npos);
  EXPECT_NE(error_of("memory_capacity = 99999999999T\n").find("dev.spec:1:"), std::string::npos);
  EXPECT_EQ(error_of("name = my gpu\n"), "dev.spec:1: name 'my gpu' must be letters, digits, '-', '_' or '.'");
  EXPECT_EQ(error_of("name = x\n"), "dev.spec: missing key 'matmul_tflops'");
  EXPECT_EQ(error_of(""), "dev.spec: missing key 'name'");

  Result<DeviceSpec> missing = resolve_device_spec("/nonexistent/dev.spec");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("h100, a100, tpu-v4"), std::string::npos);
}

TEST(DeviceSpec, DigestSeparatesSpecsAndTheirExecutables) {
  const DeviceSpec h100 = *find_device_preset("h100");
  DeviceSpec renamed = h100;
  renamed.name = "my-h100";
  EXPECT_EQ(renamed.digest(), h100.digest()) << "the name is a label";
  std::set<std::string> digests;
  for (const DeviceSpec& p : device_presets()) digests.insert(p.digest());
  DeviceSpec slower = h100;
  slower.launch_overhead_ns += 1;
  digests.insert(slower.digest());
  DeviceSpec smaller = h100;
  smaller.memory_capacity -= 1;
  digests.insert(smaller.digest());
  EXPECT_EQ(digests.size(), 5u);

  SimBackend a(h100), b(slower);
  CpuBackend cpu;
  EXPECT_NE(a.options_digest(), b.options_digest());
  EXPECT_NE(a.options_digest(), cpu.options_digest());
  const Graph g = matmul_graph(DType::kF32, 2, 3, 4);
  Executable exe = std::move(a.compile(g, hash_graph(g), kCompilerVersion)).value_or_throw();
  EXPECT_TRUE(a.load(a.serialize(exe)).is_ok());
  Result<Executable> other = b.load(a.serialize(exe));
  ASSERT_FALSE(other.is_ok());
  EXPECT_EQ(other.status().code(), StatusCode::kCorruption);
  EXPECT_FALSE(cpu.load(a.serialize(exe)).is_ok());
}

TEST(DeviceSpec, LoadsAFile) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("tracecache-spec-" + std::to_string(std::random_device{}()))).string();
  {
    std::ofstream f(path);
    f << exact_spec().to_text();
  }
  Result<DeviceSpec> s = resolve_device_spec(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->digest(), exact_spec().digest());
}

// ---- the timeline ---------------------------------------------------------------------------

TEST(SimTimeline, DeviceWorkIsOrderedAndHostWaitsOnReads) {
  DeviceSpec slow = *find_device_preset("tpu-v4");
  slow.link_latency_ns = 3'600'000'000'000;  // an hour: the host waits on reads however slow it runs
  SimBackend sim(slow);
  sim.timeline().set_record_events(true);
  const Graph g = matmul_graph(DType::kF32, 32, 32, 32);
  for (uint64_t step = 0; step < 3; ++step) {
    std::vector<BufferRef> params = {filled(DType::kF32, {32, 32}, step), filled(DType::kF32, {32, 32}, step + 9)};
    run_on(sim, g, params);
  }
  int64_t device_end = 0, kernels = 0, copies = 0, busy = 0;
  bool host_waited = false, enqueued = false;
  for (const TimelineEvent& e : sim.timeline().events()) {
    EXPECT_GE(e.duration_ps, 0);
    if (e.track == TimelineEvent::Track::kHost) {
      host_waited |= e.name == "wait for device";
      enqueued |= e.name == "enqueue";
      continue;
    }
    EXPECT_GE(e.start_ps, device_end) << e.name << ": device work overlaps or is out of order";
    device_end = e.start_ps + e.duration_ps;
    busy += e.duration_ps;
    kernels += e.category == "kernel";
    copies += e.category == "copy";
  }
  EXPECT_EQ(kernels, 3);
  EXPECT_EQ(copies, 9);
  EXPECT_TRUE(host_waited);
  EXPECT_TRUE(enqueued);
  EXPECT_EQ(busy, sim.timeline().device_busy_ps());
  EXPECT_EQ(device_end, sim.timeline().device_ready_ps());
  EXPECT_GE(sim.timeline().host_now_ps(), device_end);
}

TEST(SimTimeline, ExcludedHostTimeAndWaitsMoveTheHostClock) {
  SimTimeline t;
  const auto now = SimTimeline::Clock::now();
  const int64_t before = t.host_at(now);
  t.exclude(now - std::chrono::milliseconds(5), now);
  EXPECT_EQ(t.host_at(now), before - 5'000'000'000) << "5 ms of CPU work for the device is not host time";
  EXPECT_EQ(t.host_at(now - std::chrono::milliseconds(6)), before - 6'000'000'000) << "earlier times keep theirs";
  TimelineEvent work;
  work.duration_ps = int64_t{1} << 50;  // far beyond now
  t.enqueue(work);
  const int64_t waited = t.wait_for_device();
  EXPECT_GT(waited, 0);
  EXPECT_EQ(t.host_wait_ps(), waited);
  EXPECT_GE(t.host_now_ps(), t.device_ready_ps());
  EXPECT_EQ(t.wait_for_device(), 0) << "nothing left to wait for";
}

}  // namespace
}  // namespace tracecache
