// The timeline behind `--timeline` (replay/backends/timeline.h) and its trace-event file
// (replay/backends/trace_event_writer.h):
//  - the writer: exact microseconds from picoseconds, escaped names, metadata naming the tracks,
//    slices per track in start order (an enclosing slice first), counters, flows as s/f pairs;
//  - nothing is recorded until recording is on;
//  - the cpu backend with a recording timeline: a device slice per kernel inside an "execute"
//    slice that names the graph, a flow from the host to each kernel; without one, nothing;
//  - the sim backend's device-memory counter: never negative, its largest sample the peak, its
//    last the memory still in use.
// Whole files are parsed by tests/cli/timeline.sh (Python's json).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "replay/backends/cpu/cpu_backend.h"
#include "replay/backends/sim/sim_backend.h"
#include "replay/backends/timeline.h"
#include "replay/backends/trace_event_writer.h"
#include "capture/ops/ops.h"
#include "tests/backend_compare.h"

namespace tracecache {
namespace {

using testing::filled;
using testing::run_on;

// [m, k] x [k, n] -> matmul -> exp: two kernels.
Graph matmul_exp_graph(int64_t m, int64_t k, int64_t n) {
  Graph g;
  const NodeId a = g.add_parameter({DType::kF32, {m, k}});
  const NodeId b = g.add_parameter({DType::kF32, {k, n}});
  std::vector<AttrValue> none;
  const NodeId mm_in[] = {a, b};
  const std::vector<TensorType> in = {{DType::kF32, {m, k}}, {DType::kF32, {k, n}}};
  const TensorType t = infer_op(OpKind::kMatmul, in, none).value_or_throw();
  const NodeId mm = g.add_node(OpKind::kMatmul, mm_in, none, t);
  const NodeId exp_in[] = {mm};
  g.add_output(g.add_node(OpKind::kExp, exp_in, none, t));
  return g;
}

TEST(TraceEventWriter, ExactTimesEscapedNamesAndTracks) {
  Timeline t;
  t.set_record_events(true);
  t.record_host("say \"hi\"\\\n\x01", "step", 1'234'567, 2'000'000, {{"step", int64_t{3}}, {"graph", "ab"}});
  t.record_host("inner", "timer", 1'234'567, 1'500'000);
  TimelineEvent k;
  k.name = "matmul";
  k.category = "kernel";
  k.start_ps = 5;
  k.duration_ps = 1'000'000'000'000'000;  // 1000 s
  t.record_device(k);
  const std::string json = trace_event_json(t, {"proc \"x\"", "host", "device"});
  EXPECT_NE(json.find(R"({"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"proc \"x\""}})"),
            std::string::npos) << json;
  EXPECT_NE(json.find(R"({"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{"name":"host"}})"), std::string::npos);
  EXPECT_NE(json.find(R"({"name":"thread_name","ph":"M","pid":1,"tid":2,"args":{"name":"device"}})"), std::string::npos);
  const std::string outer =
      R"({"name":"say \"hi\"\\\n\u0001","ph":"X","pid":1,"tid":1,"cat":"step","ts":1.234567,"dur":0.765433,"args":{"step":3,"graph":"ab"}})";
  const std::string inner = R"({"name":"inner","ph":"X","pid":1,"tid":1,"cat":"timer","ts":1.234567,"dur":0.265433})";
  const std::string device = R"({"name":"matmul","ph":"X","pid":1,"tid":2,"cat":"kernel","ts":0.000005,"dur":1000000000.000000})";
  ASSERT_NE(json.find(outer), std::string::npos) << json;
  ASSERT_NE(json.find(inner), std::string::npos) << json;
  ASSERT_NE(json.find(device), std::string::npos) << json;
  EXPECT_LT(json.find(outer), json.find(inner)) << "the enclosing slice comes first";
  EXPECT_LT(json.find(inner), json.find(device)) << "host track, then device track";
  EXPECT_EQ(json.substr(0, 39), R"({"displayTimeUnit":"ns","traceEvents":[)");
  EXPECT_EQ(json.substr(json.size() - 3), "\n]}");
}

TEST(TraceEventWriter, CountersAndFlowPairs) {
  Timeline t;
  t.set_record_events(true);
  t.record_counter("device memory", 3'000'000, 512);
  t.record_counter("device memory", 1'000'000, 256);
  t.record_flow(2'000'000, 7'000'000);
  t.record_flow(1'000'000, 1'000'000);
  const std::string json = trace_event_json(t, {"p", "host", "device"});
  const std::string c1 = R"({"name":"device memory","ph":"C","pid":1,"tid":2,"cat":"memory","ts":1.000000,"args":{"bytes":256}})";
  const std::string c2 = R"({"name":"device memory","ph":"C","pid":1,"tid":2,"cat":"memory","ts":3.000000,"args":{"bytes":512}})";
  ASSERT_NE(json.find(c1), std::string::npos) << json;
  ASSERT_NE(json.find(c2), std::string::npos) << json;
  EXPECT_LT(json.find(c1), json.find(c2)) << "counter samples in time order";
  const std::string s1 = R"({"name":"launch","ph":"s","pid":1,"tid":1,"cat":"flow","id":1,"ts":2.000000})";
  const std::string f1 = R"({"name":"launch","ph":"f","pid":1,"tid":2,"cat":"flow","id":1,"bp":"e","ts":7.000000})";
  const std::string s2 = R"({"name":"launch","ph":"s","pid":1,"tid":1,"cat":"flow","id":2,"ts":1.000000})";
  EXPECT_NE(json.find(s1), std::string::npos) << json;
  EXPECT_NE(json.find(f1), std::string::npos) << json;
  EXPECT_NE(json.find(s2), std::string::npos) << json;
  EXPECT_LT(json.find(s2), json.find(s1)) << "flows in host time order";
}

TEST(TraceEventWriter, UnwritablePathIsAnIoErrorNamingIt) {
  Timeline t;
  const std::string path = (std::filesystem::temp_directory_path() / "no-such-dir-tl" / "t.json").string();
  Status st = write_trace_event_file(path, t, {"p", "h", "d"});
  EXPECT_EQ(st.code(), StatusCode::kIOError);
  EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
}

TEST(Timeline, RecordsNothingUntilRecording) {
  Timeline t;
  t.record_host("a", "timer", 0, 1);
  t.record_run("b", "cpu", 0, 1, GraphKey{});
  t.record_device(TimelineEvent{});
  t.record_counter("c", 0, 1);
  t.record_flow(0, 1);
  t.on_span("trace", Timeline::Clock::now(), Timeline::Clock::now());
  EXPECT_TRUE(t.events().empty());
  EXPECT_TRUE(t.counters().empty());
  EXPECT_TRUE(t.flows().empty());
  EXPECT_TRUE(t.graphs_run().empty());
  t.set_record_events(true);
  t.record_run("b", "cpu", 0, 1, GraphKey{});
  ASSERT_EQ(t.events().size(), 1u);
  ASSERT_EQ(t.graphs_run().size(), 1u);
  ASSERT_EQ(t.events()[0].args.size(), 1u);
  EXPECT_EQ(t.events()[0].args[0].key, "graph");
  EXPECT_EQ(std::get<std::string>(t.events()[0].args[0].value), GraphKey{}.to_hex());
}

TEST(CpuBackendTimeline, KernelsInsideTheRunWithAFlowEach) {
  const Graph g = matmul_exp_graph(8, 16, 4);
  std::vector<BufferRef> params = {filled(DType::kF32, {8, 16}, 1), filled(DType::kF32, {16, 4}, 2)};
  CpuBackend cpu(CpuBackendOptions{.fuse = true, .threads = 1});
  Timeline t;
  cpu.set_timeline(&t);
  run_on(cpu, g, params);
  EXPECT_TRUE(t.events().empty()) << "not recording: nothing measured";
  t.set_record_events(true);
  const std::vector<BufferRef> timed = run_on(cpu, g, params);
  cpu.set_timeline(nullptr);
  EXPECT_TRUE(testing::same_bits(*timed[0], *run_on(cpu, g, params)[0])) << "timing changes no result";

  std::vector<const TimelineEvent*> kernels, runs;
  for (const TimelineEvent& e : t.events()) {
    EXPECT_GE(e.duration_ps, 0);
    (e.track == TimelineEvent::Track::kDevice ? kernels : runs).push_back(&e);
  }
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_EQ(kernels[0]->name, "matmul");
  EXPECT_EQ(kernels[1]->category, "kernel");
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0]->name, "execute");
  ASSERT_EQ(t.graphs_run().size(), 1u);
  EXPECT_EQ(t.graphs_run()[0], hash_graph(g));
  const int64_t run_end = runs[0]->start_ps + runs[0]->duration_ps;
  ASSERT_EQ(t.flows().size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_GE(kernels[i]->start_ps, runs[0]->start_ps);
    EXPECT_LE(kernels[i]->start_ps + kernels[i]->duration_ps, run_end);
    EXPECT_EQ(t.flows()[i].device_ps, kernels[i]->start_ps);
    EXPECT_EQ(t.flows()[i].id, i + 1);
  }
  EXPECT_LE(kernels[0]->start_ps + kernels[0]->duration_ps, kernels[1]->start_ps) << "one after the other";
}

TEST(SimBackendTimeline, MemoryCounterPeaksAtThePeak) {
  SimBackend sim(*find_device_preset("h100"));
  sim.timeline().set_record_events(true);
  const Graph g = matmul_exp_graph(32, 64, 16);
  for (uint64_t step = 0; step < 2; ++step) {
    std::vector<BufferRef> params = {filled(DType::kF32, {32, 64}, step), filled(DType::kF32, {64, 16}, step + 5)};
    run_on(sim, g, params);
  }
  const std::vector<TimelineCounter>& samples = sim.timeline().counters();
  ASSERT_FALSE(samples.empty());
  int64_t peak = 0;
  for (const TimelineCounter& c : samples) {
    EXPECT_EQ(c.name, SimBackend::kMemoryCounter);
    EXPECT_GE(c.value, 0);
    peak = std::max(peak, c.value);
  }
  EXPECT_EQ(peak, static_cast<int64_t>(sim.memory_peak()));
  EXPECT_EQ(samples.back().value, static_cast<int64_t>(sim.memory_in_use()));
  EXPECT_EQ(sim.memory_in_use(), 0u) << "every buffer of the runs is gone";
  // Every kernel and copy has its flow from the host, starting where it starts.
  size_t device = 0;
  for (const TimelineEvent& e : sim.timeline().events()) device += e.track == TimelineEvent::Track::kDevice;
  EXPECT_EQ(sim.timeline().flows().size(), device);
  EXPECT_EQ(sim.timeline().graphs_run().size(), 2u);
}

}  // namespace
}  // namespace tracecache
