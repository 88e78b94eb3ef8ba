// Issue 14: the graph diff engine, source locations outside the hash, the closest-graph search
// that explains a miss, the scoped audit and the schema 3 -> 4 upgrade.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <functional>
#include <string>
#include <vector>

#include "replay/backends/cpu/cpu_backend.h"
#include "capture/ir/canonical.h"
#include "capture/ir/graph_diff.h"
#include "capture/ir/graph_sources.h"
#include "capture/trace/recording_executor.h"
#include "capture/trace/tensor.h"
#include "replay/engine/closest_graph.h"
#include "replay/engine/runtime.h"
#include "store/sqlite/cache_db.h"
#include "tests/once_harness.h"
#include "tests/test_support.h"

namespace tracecache {
namespace {

using testing::sqlite_int;
using testing::TempDir;
using Kind = NodeDifference::Kind;

// The canonical graph of one step: `build` records on a context whose inputs are x : f32[rows, 4]
// and w : f32[4, 4], with locations when `sources` is set.
CanonicalGraph graph_of(int64_t rows, const std::function<Tensor(LazyContext&, Tensor, Tensor)>& build,
                        bool sources = true, bool bake_scalars = false) {
  RecordingExecutor exec;
  LazyOptions options;
  options.canonicalize.bake_scalars = bake_scalars;
  LazyContext ctx(&exec, options);
  Tensor x = ctx.from_buffer(HostBuffer(DType::kF32, Shape{rows, 4}));
  Tensor w = ctx.from_buffer(HostBuffer(DType::kF32, Shape{4, 4}));
  if (sources) {
    ctx.name_tensor(x, ctx.source_id(&x, [] { return "p.trace:3 input x : f32[B, 4]"; }));
    ctx.set_source("p.trace:7 y");
  }
  {
    Tensor y = build(ctx, x, w);
    ctx.mark_step();
  }
  return exec.graphs().at(0).graph;
}

Tensor matmul_relu(LazyContext&, Tensor x, Tensor w) { return relu(matmul(x, w)); }

TEST(GraphDiff, IdenticalGraphsHaveNoDifferences) {
  CanonicalGraph a = graph_of(8, matmul_relu), b = graph_of(8, matmul_relu);
  GraphDiff d = diff_graphs(a.graph, b.graph);
  EXPECT_TRUE(d.identical());
  EXPECT_EQ(d.summary(), "identical");
}

TEST(GraphDiff, ABatchChangeIsOneInputDifferenceNamedWithItsDeclaration) {
  CanonicalGraph a = graph_of(8, matmul_relu), b = graph_of(16, matmul_relu);
  GraphSources sa = graph_sources(a), sb = graph_sources(b);
  GraphDiff d = diff_graphs(a.graph, b.graph, &sa, &sb);
  ASSERT_EQ(d.differences.size(), 1u) << d.summary(10);
  const NodeDifference& x = d.differences[0];
  EXPECT_EQ(x.kind, Kind::kInputType);
  EXPECT_EQ(x.what, "input 0 shape (dim 0)");
  EXPECT_EQ(x.in_a, "f32[8, 4]");
  EXPECT_EQ(x.in_b, "f32[16, 4]");
  EXPECT_EQ(x.source_b, "p.trace:3 input x : f32[B, 4]");
  EXPECT_EQ(d.derived, 2u) << "matmul and relu change type only because x does";
}

TEST(GraphDiff, AnAttributeIsNamedWithItsProgramLine) {
  auto reshaped = [](int64_t rows, int64_t cols) {
    return [rows, cols](LazyContext&, Tensor x, Tensor) { return reshape(x, {rows, cols}); };
  };
  CanonicalGraph a = graph_of(8, reshaped(4, 8));
  CanonicalGraph b = graph_of(8, reshaped(2, 16));
  GraphSources sa = graph_sources(a), sb = graph_sources(b);
  GraphDiff d = diff_graphs(a.graph, b.graph, &sa, &sb);
  ASSERT_EQ(d.differences.size(), 1u) << d.summary(10);
  EXPECT_EQ(d.differences[0].kind, Kind::kAttribute);
  EXPECT_EQ(d.differences[0].what, "attribute 'shape'");
  EXPECT_EQ(d.differences[0].in_a, "[4, 8]");
  EXPECT_EQ(d.differences[0].in_b, "[2, 16]");
  EXPECT_EQ(d.differences[0].source_b, "p.trace:7 y");
  EXPECT_NE(d.summary().find("reshape attribute 'shape': [4, 8] -> [2, 16]  (p.trace:7 y)"), std::string::npos)
      << d.summary();
}

TEST(GraphDiff, ABakedConstantAnOpAndAnExtraNodeAreNamed) {
  auto scaled = [](double k) { return [k](LazyContext&, Tensor x, Tensor) { return mul(x, k); }; };
  GraphDiff c = diff_graphs(graph_of(8, scaled(0.5), true, true).graph, graph_of(8, scaled(0.25), true, true).graph);
  ASSERT_EQ(c.differences.size(), 1u) << c.summary(10);
  EXPECT_EQ(c.differences[0].kind, Kind::kConstant);
  EXPECT_EQ(c.differences[0].op, "full");

  GraphDiff op = diff_graphs(graph_of(8, [](LazyContext&, Tensor x, Tensor w) { return add(x, matmul(x, w)); }).graph,
                             graph_of(8, [](LazyContext&, Tensor x, Tensor w) { return sub(x, matmul(x, w)); }).graph);
  ASSERT_EQ(op.differences.size(), 1u) << op.summary(10);
  EXPECT_EQ(op.differences[0].kind, Kind::kOp);
  EXPECT_EQ(op.differences[0].in_a, "add");
  EXPECT_EQ(op.differences[0].in_b, "sub");

  GraphDiff extra = diff_graphs(graph_of(8, matmul_relu).graph,
                                graph_of(8, [](LazyContext&, Tensor x, Tensor w) { return exp(relu(matmul(x, w))); }).graph);
  EXPECT_FALSE(extra.by_index) << "different sizes align by op sequence";
  ASSERT_EQ(extra.differences.size(), 2u) << extra.summary(10);
  EXPECT_EQ(extra.differences[0].kind, Kind::kOnlyInB);
  EXPECT_EQ(extra.differences[0].op, "exp");
  EXPECT_EQ(extra.differences[1].kind, Kind::kOutputs) << "the graph returns the new node";
}

TEST(SourceLocations, StayOutsideTheKeyAndFollowCanonicalNodes) {
  CanonicalGraph with = graph_of(8, matmul_relu, true), without = graph_of(8, matmul_relu, false);
  EXPECT_EQ(with.key, without.key) << "locations never enter the hash";
  EXPECT_TRUE(without.node_sources().empty());
  EXPECT_TRUE(graph_sources(without).nodes.empty());
  GraphSources s = graph_sources(with);
  ASSERT_EQ(s.nodes.size(), with.graph.size());
  EXPECT_EQ(s.node(with.graph.params()[0]), "p.trace:3 input x : f32[B, 4]");
  EXPECT_EQ(s.node(with.graph.params()[1]), "p.trace:7 y") << "an unnamed parameter takes its first reader's line";
  EXPECT_EQ(s.node(with.graph.outputs()[0]), "p.trace:7 y");
}

// A program's statements, step after step (set_source_at's one-comparison path), while the
// graphs of earlier steps are still held (the tracer then changes a copy of its record).
TEST(SourceLocations, FollowEveryStepWhileEarlierGraphsAreHeld) {
  RecordingExecutor exec;
  LazyContext ctx(&exec);
  Tensor x = ctx.from_buffer(HostBuffer(DType::kF32, Shape{8, 4}));
  Tensor w = ctx.from_buffer(HostBuffer(DType::kF32, Shape{4, 4}));
  const int input_site = 0, sites[3] = {};
  int made = 0;
  auto at = [&](const int* site, const char* text) {
    ctx.set_source_at(site, [&] { ++made; return std::string(text); });
  };
  for (int step = 0; step < 3; ++step) {
    ctx.name_tensor(x, ctx.source_id(&input_site, [&] { ++made; return "p.trace:3 input x : f32[B, 4]"; }));
    Tensor y;
    {
      at(&sites[0], "p.trace:7 h");
      Tensor h = matmul(x, w);
      if (step < 2) {
        at(&sites[1], "p.trace:8 y");
        y = relu(h);
      } else {  // another statement: a site out of the usual order
        at(&sites[2], "p.trace:9 z");
        y = exp(h);
      }
    }
    ctx.mark_step();  // y is the only root
  }
  EXPECT_EQ(made, 4) << "each site's text is made once";
  ASSERT_EQ(exec.graphs().size(), 3u);
  for (size_t step = 0; step < 3; ++step) {
    const CanonicalGraph& g = exec.graphs()[step].graph;
    GraphSources s = graph_sources(g);
    ASSERT_EQ(s.nodes.size(), g.graph.size()) << "step " << step;
    const NodeId out = g.graph.outputs()[0];
    const NodeId mm = g.graph.inputs(g.graph.node(out))[0];
    EXPECT_EQ(s.node(g.graph.params()[0]), "p.trace:3 input x : f32[B, 4]") << "step " << step;
    EXPECT_EQ(s.node(g.graph.params()[1]), "p.trace:7 h") << "step " << step;
    EXPECT_EQ(s.node(mm), "p.trace:7 h") << "step " << step;
    EXPECT_EQ(s.node(out), step < 2 ? "p.trace:8 y" : "p.trace:9 z") << "step " << step;
  }
}

TEST(SourceLocations, EncodeDecodeAndRefuseDamage) {
  GraphSources s{"p.trace", "p.trace:step", {"p.trace:3 input x", "", "p.trace:7 y\nz"}};
  Result<GraphSources> back = GraphSources::decode(s.encode(), 3);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->program, "p.trace");
  EXPECT_EQ(back->function, "p.trace:step");
  ASSERT_EQ(back->nodes.size(), 3u);
  EXPECT_EQ(back->nodes[2], "p.trace:7 y z") << "one line each";
  EXPECT_EQ(GraphSources::decode(s.encode(), 2).status().code(), StatusCode::kCorruption) << "more than the nodes";
  EXPECT_EQ(GraphSources::decode("garbage", 3).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(GraphSources::decode("tracecache-sources 1\np\n", 3).status().code(), StatusCode::kCorruption);
}

TEST(ClosestGraph, PrefersTheSameProgramThenTheFewestDifferences) {
  RecentGraphs recent(2);
  CanonicalGraph g8 = graph_of(8, matmul_relu), g16 = graph_of(16, matmul_relu);
  CanonicalGraph other = graph_of(16, [](LazyContext&, Tensor x, Tensor w) { return exp(matmul(x, w)); });
  GraphSources mine = graph_sources(g8), theirs = graph_sources(other);
  mine.program = "p.trace";
  theirs.program = "q.trace";
  recent.add(g8.key, g8.graph, mine);
  recent.add(other.key, other.graph, theirs);
  GraphSources s16 = graph_sources(g16);
  s16.program = "p.trace";
  std::optional<ClosestGraph> c = recent.closest(g16.key, g16.graph, s16, nullptr);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->key, g8.key) << "same program first, although q's graph has the same batch";
  EXPECT_EQ(c->diff.differences.size(), 1u);
  EXPECT_FALSE(recent.closest(g8.key, g8.graph, mine, nullptr)->key == g8.key) << "never itself";
  recent.add(g16.key, g16.graph, s16);
  EXPECT_EQ(recent.size(), 2u) << "bounded";
}

TEST(ClosestGraph, AMissInANewProcessIsExplainedByTheStoredGraphsOfItsProgram) {
  TempDir dir;
  auto db = store::CacheDb::open({.path = dir.db()});
  ASSERT_TRUE(db.is_ok());
  CpuBackend cpu;
  RuntimeOptions options;
  options.program = "p.trace";
  auto run_one = [&](int64_t rows) {
    Runtime runtime(&cpu, db->get(), nullptr, options);
    LazyContext ctx(&runtime);
    Tensor x = ctx.from_buffer(HostBuffer(DType::kF32, Shape{rows, 4}));
    Tensor w = ctx.from_buffer(HostBuffer(DType::kF32, Shape{4, 4}));
    ctx.name_tensor(x, ctx.source_id(&x, [] { return "p.trace:3 input x : f32[B, 4]"; }));
    ctx.set_source("p.trace:7 y");
    Tensor y = relu(matmul(x, w));
    ctx.mark_step();
    runtime.flush();
    return runtime.events();
  };
  run_one(8);
  std::vector<store::Event> events = run_one(16);  // another runtime: nothing in its memory
  auto miss = std::find_if(events.begin(), events.end(), [](const store::Event& e) { return e.kind == store::EventKind::kMiss; });
  ASSERT_NE(miss, events.end());
  EXPECT_EQ(miss->program, "p.trace");
  EXPECT_NE(miss->detail.find("input 0 shape (dim 0): f32[8, 4] -> f32[16, 4]  (p.trace:3 input x : f32[B, 4])"),
            std::string::npos)
      << miss->detail;
  Result<std::optional<GraphSources>> stored = (*db)->get_graph_sources(miss->graph);
  ASSERT_TRUE(stored.is_ok() && stored->has_value());
  EXPECT_EQ((*stored)->program, "p.trace");
}

store::Event scoped_event(store::EventKind kind, uint64_t graph, std::string program, double time) {
  store::Event e;
  e.time = time;
  e.pid = 1;
  e.kind = kind;
  e.graph = GraphKey{graph, 1};
  e.backend = "cpu";
  e.reason = kind == store::EventKind::kMiss ? "new graph" : "";
  e.program = std::move(program);
  return e;
}

TEST(ScopedAudit, FiltersByProgramKindTimeAndGraph) {
  TempDir dir;
  auto db = store::CacheDb::open({.path = dir.db()});
  ASSERT_TRUE(db.is_ok());
  std::vector<store::Event> e = {scoped_event(store::EventKind::kMiss, 1, "dir/a.trace", 100),
                                 scoped_event(store::EventKind::kCompile, 1, "dir/a.trace", 101),
                                 scoped_event(store::EventKind::kMiss, 2, "b.trace", 200)};
  ASSERT_TRUE((*db)->append_events(e).is_ok());
  auto rows = [&](store::AuditFilter f) {
    auto r = (*db)->audit(nullptr, f);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    std::vector<uint64_t> keys;
    for (const store::GraphAudit& a : *r) keys.push_back(a.graph.high);
    return keys;
  };
  EXPECT_EQ(rows({}), (std::vector<uint64_t>{2, 1}));
  for (const char* name : {"dir/a.trace", "a.trace", "a"}) {
    EXPECT_EQ(rows({.program = name}), (std::vector<uint64_t>{1})) << name;
  }
  EXPECT_TRUE(rows({.program = "ir/a.trace"}).empty()) << "a file name, not any suffix";
  EXPECT_EQ(rows({.kind = "compile"}), (std::vector<uint64_t>{1}));
  EXPECT_EQ(rows({.since = 150}), (std::vector<uint64_t>{2}));
  EXPECT_EQ(rows({.graph = GraphKey{1, 1}}), (std::vector<uint64_t>{1}));
  auto a = (*db)->audit(nullptr, {.program = "a"});
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ((*a)[0].program, "dir/a.trace");
  EXPECT_EQ((*a)[0].misses, 1);
}

TEST(ScopedAudit, ASchemaThreeFileIsUpgradedKeepingItsEvents) {
  TempDir dir;
  {
    auto db = store::CacheDb::open({.path = dir.db()});
    ASSERT_TRUE(db.is_ok());
    std::vector<store::Event> e = {scoped_event(store::EventKind::kMiss, 1, "", 100)};
    ASSERT_TRUE((*db)->append_events(e).is_ok());
  }
  // Make it a version 3 file: no graph_sources, no events.program or events.function.
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(dir.db().c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "DROP TABLE graph_sources; ALTER TABLE events DROP COLUMN program; "
                              "ALTER TABLE events DROP COLUMN function; PRAGMA user_version = 3",
                         nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(raw);
  sqlite3_close(raw);
  {
    auto ro = store::CacheDb::open({.path = dir.db(), .read_only = true});
    ASSERT_FALSE(ro.is_ok());
    EXPECT_EQ(ro.status().code(), StatusCode::kUnsupported) << "read-only: asks for write access to upgrade";
  }
  auto db = store::CacheDb::open({.path = dir.db()});
  ASSERT_TRUE(db.is_ok()) << db.status().to_string();
  EXPECT_EQ(sqlite_int(dir.db(), "PRAGMA user_version"), store::kSchemaVersion);
  auto events = (*db)->events();
  ASSERT_TRUE(events.is_ok());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].program, "") << "old rows name no program";
  std::vector<store::Event> e = {scoped_event(store::EventKind::kMiss, 2, "p.trace", 200)};
  ASSERT_TRUE((*db)->append_events(e).is_ok());
  EXPECT_EQ((*db)->audit(nullptr, {.program = "p"})->size(), 1u);
  EXPECT_TRUE((*db)->put_graph_sources(GraphKey{2, 1}, {"p.trace", "", {}}).is_ok());
}

TEST(OnceReasons, AValueReadNamesWhatWasReadAndExpected) {
  TracedFn fn = [](LazyContext&, const TraceArgs& a) {
    Tensor s = sum(a.tensor(0));
    if (s.item() > 0) return std::vector<Tensor>{mul(a.tensor(0), 2.0)};
    return std::vector<Tensor>{neg(a.tensor(0))};
  };
  Harness h;
  CompiledFunctionOptions options;
  options.call_name = "step";
  CompiledFunction f("branch", fn, &h.runtime, options);
  h.call(f, {{h.tensor(filled(DType::kF32, {3}, 1))}, {}});
  h.call(f, {{h.tensor(filled(DType::kF32, {3}, 2))}, {}});
  ASSERT_EQ(f.stats().recompile_reasons.size(), 1u);
  EXPECT_EQ(f.stats().recompile_reasons[0],
            "entry 0: a value read inside the function changed (segment 0 output 0: expected 6, actual 9)");
  auto recompile = std::find_if(h.runtime.events().begin(), h.runtime.events().end(),
                                [](const store::Event& e) { return e.kind == store::EventKind::kRecompile; });
  ASSERT_NE(recompile, h.runtime.events().end());
  EXPECT_EQ(recompile->detail.rfind("step 1: entry 0: a value read", 0), 0u) << recompile->detail;
  EXPECT_EQ(recompile->function, "branch");
}

TEST(OnceReasons, AScalarIsNamedAsTheCallerNamesIt) {
  TracedFn fn = [](LazyContext&, const TraceArgs& a) {
    return std::vector<Tensor>{mul(a.tensor(0), a.scalar(0))};
  };
  Harness h;
  CompiledFunctionOptions options;
  options.scalar_names = {"LR"};
  CompiledFunction f("scale", fn, &h.runtime, options);
  h.call(f, {{h.tensor(filled(DType::kF32, {3}, 1))}, {2}});
  h.call(f, {{h.tensor(filled(DType::kF32, {3}, 1))}, {3}});
  ASSERT_EQ(f.stats().recompile_reasons.size(), 1u);
  EXPECT_EQ(f.stats().recompile_reasons[0], "entry 0: scalar 0 'LR': value expected 2, actual 3");
}

}  // namespace
}  // namespace tracecache
