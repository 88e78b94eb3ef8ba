// Graph breaks (host ops) and value guards on what a traced function read
// (replay/engine/compiled_function.h): a host op runs between segments on replay without a trace, in
// this process and the next; its results' types guard the entry; only values the function read
// are guarded (an argument's value included), never values merely materialized.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "replay/backends/cpu/cpu_backend.h"
#include "replay/engine/compiled_function.h"
#include "replay/guards/guard_entry_codec.h"
#include "store/codec/proto/tracecache.pb.h"
#include "tests/test_support.h"

namespace tracecache {
namespace {

using testing::TempDir;

// The host framework of these tests: "cumsum" (running sum along the last dim of an f32 tensor)
// and "positive" (the elements > 0 of an f32 vector: a data-dependent result size). Counts runs.
struct HostFramework {
  int runs = 0;
  bool fail = false;
  HostOpRunner runner() {
    return [this](const std::string& payload, std::span<const BufferRef> in) -> Result<std::vector<BufferRef>> {
      ++runs;
      if (fail) return invalid_argument("the host framework failed");
      if (in.size() != 1 || in[0]->dtype() != DType::kF32) return invalid_argument("one f32 input expected");
      const HostBuffer& x = *in[0];
      if (payload == "cumsum") {
        auto out = std::make_shared<HostBuffer>(DType::kF32, x.shape());
        const int64_t n = x.shape().rank() ? x.shape()[x.shape().rank() - 1] : 1;
        for (int64_t i = 0; i < x.numel(); ++i) {
          out->data<float>()[i] = x.data<float>()[i] + (i % n ? out->data<float>()[i - 1] : 0.0f);
        }
        return std::vector<BufferRef>{out};
      }
      if (payload == "positive") {
        std::vector<float> kept;
        for (int64_t i = 0; i < x.numel(); ++i) {
          if (x.data<float>()[i] > 0) kept.push_back(x.data<float>()[i]);
        }
        auto out = std::make_shared<HostBuffer>(DType::kF32, Shape{static_cast<int64_t>(kept.size())});
        for (size_t i = 0; i < kept.size(); ++i) out->data<float>()[i] = kept[i];
        return std::vector<BufferRef>{out};
      }
      return corruption("unknown host op '" + payload + "'");
    };
  }
};

struct Process {
  Process(const std::string& db_path, TracedFn fn, HostFramework* host)
      : db(store::CacheDb::open({.path = db_path}).value_or_throw()),
        runtime(&cpu, db.get(), &metrics),
        ctx(&runtime, LazyOptions{.canonicalize = {}, .metrics = &metrics}),
        f("breaks", std::move(fn), &runtime, options(host)) {}

  static CompiledFunctionOptions options(HostFramework* host) {
    CompiledFunctionOptions o;
    o.user_version = "v1";
    o.input_names = {"x"};
    if (host) o.host_op = host->runner();
    return o;
  }

  Result<std::vector<Tensor>> call(std::vector<float> values, Shape shape) {
    HostBuffer x(DType::kF32, shape);
    for (size_t i = 0; i < values.size(); ++i) x.data<float>()[i] = values[i];
    return f(ctx, CallArgs{{ctx.from_buffer(std::move(x))}, {}});
  }
  std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

  int count(store::EventKind kind) const {
    int n = 0;
    for (const auto& e : runtime.events()) n += e.kind == kind;
    return n;
  }

  CpuBackend cpu;
  Metrics metrics;
  std::unique_ptr<store::CacheDb> db;
  Runtime runtime;
  LazyContext ctx;
  CompiledFunction f;
};

// y = cumsum(relu(x)) * 2 + x: a graph, the host op, a graph using both sides of the break.
TracedFn cumsum_fn(int* traces) {
  return [traces](LazyContext&, const TraceArgs& a) {
    ++*traces;
    Tensor r = relu(a.tensor(0));
    Tensor c = a.host_op("cumsum", std::vector<Tensor>{r}, "cumsum at test.cc:1")[0];
    return std::vector<Tensor>{add(mul(c, 2.0), a.tensor(0))};
  };
}

std::vector<float> cumsum_expected(const std::vector<float>& x, int64_t n) {
  std::vector<float> out(x.size());
  float run = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (i % static_cast<size_t>(n) == 0) run = 0;
    run += x[i] > 0 ? x[i] : 0.0f;
    out[i] = run * 2 + x[i];
  }
  return out;
}

TEST(GraphBreak, AHostOpReplaysBetweenSegmentsWithoutATrace) {
  TempDir dir;
  HostFramework host;
  int traces = 0;
  Process p(dir.db(), cumsum_fn(&traces), &host);
  const std::vector<float> a = {1, -2, 3, 4, 5, -6}, b = {-1, 2, 2, -3, 1, 1};
  auto first = p.call(a, {2, 3});
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  EXPECT_EQ(p.values((*first)[0]), cumsum_expected(a, 3));
  auto second = p.call(b, {2, 3});
  ASSERT_TRUE(second.is_ok()) << second.status().to_string();
  EXPECT_EQ(p.values((*second)[0]), cumsum_expected(b, 3)) << "new values, no value guard on the break's inputs";
  EXPECT_EQ(traces, 1);
  EXPECT_EQ(host.runs, 2);
  EXPECT_EQ(p.f.stats().host_op_runs, 1);
  EXPECT_EQ(p.f.stats().hits_per_entry, std::vector<int64_t>({1}));
  EXPECT_EQ(p.count(store::EventKind::kGraphBreak), 1) << "one event per trace, none per replay";
  for (const auto& e : p.runtime.events()) {
    if (e.kind == store::EventKind::kGraphBreak) {
      EXPECT_NE(e.detail.find("cumsum at test.cc:1"), std::string::npos);
    }
  }
}

TEST(GraphBreak, ANewProcessReplaysTheBreakWithZeroTraces) {
  TempDir dir;
  HostFramework host;
  const std::vector<float> a = {3, -1, 2, 7}, b = {1, 1, 1, 1};
  {
    int traces = 0;
    Process p(dir.db(), cumsum_fn(&traces), &host);
    ASSERT_TRUE(p.call(a, {4}).is_ok());
  }
  int traces = 0;
  Process q(dir.db(), cumsum_fn(&traces), &host);
  ASSERT_EQ(q.f.num_entries(), 1u);
  auto out = q.call(b, {4});
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(q.values((*out)[0]), cumsum_expected(b, 4));
  EXPECT_EQ(traces, 0);
  EXPECT_EQ(q.metrics.counter(counters::kCompiles), 0);
}

TEST(GraphBreak, AResultOfAnotherTypeIsAnotherPathNotAnError) {
  TempDir dir;
  HostFramework host;
  int traces = 0;
  // sum(positive(x)) * 1: the break's result size depends on the data.
  Process p(dir.db(), [&traces](LazyContext&, const TraceArgs& a) {
    ++traces;
    Tensor kept = a.host_op("positive", std::vector<Tensor>{a.tensor(0)}, "positive")[0];
    return std::vector<Tensor>{sum(kept)};
  }, &host);
  auto s = [&](std::vector<float> v) {
    auto out = p.call(v, {4});
    EXPECT_TRUE(out.is_ok()) << out.status().to_string();
    return out.is_ok() ? p.values((*out)[0])[0] : -1.0f;
  };
  EXPECT_EQ(s({1, -1, 2, -2}), 3.0f);  // 2 kept: entry 0
  EXPECT_EQ(s({5, 6, -1, -1}), 11.0f); // 2 kept: entry 0 replays
  EXPECT_EQ(traces, 1);
  EXPECT_EQ(s({1, 1, 1, -1}), 3.0f);  // 3 kept: entry 0 does not serve; a second path
  EXPECT_EQ(traces, 2);
  EXPECT_EQ(s({2, 2, -5, -5}), 4.0f);  // back to entry 0, no trace
  EXPECT_EQ(traces, 2);
  EXPECT_EQ(p.f.num_entries(), 2u);
  ASSERT_EQ(p.f.stats().recompile_reasons.size(), 1u);
  EXPECT_NE(p.f.stats().recompile_reasons[0].find("graph break 0 (positive): result 0 is f32[3], traced f32[2]"),
            std::string::npos)
      << p.f.stats().recompile_reasons[0];
}

TEST(GraphBreak, WithoutARunnerTheTraceFailsClearly) {
  TempDir dir;
  int traces = 0;
  Process p(dir.db(), cumsum_fn(&traces), nullptr);
  auto out = p.call({1, 2}, {2});
  ASSERT_FALSE(out.is_ok());
  EXPECT_NE(out.status().message().find("needs a host op runner"), std::string::npos) << out.status().to_string();
}

TEST(GraphBreak, ARunnerThatFailsOnAReplayRetracesAndReportsItsError) {
  TempDir dir;
  HostFramework host;
  int traces = 0;
  Process p(dir.db(), cumsum_fn(&traces), &host);
  ASSERT_TRUE(p.call({1, 2}, {2}).is_ok());
  host.fail = true;
  auto out = p.call({3, 4}, {2});
  ASSERT_FALSE(out.is_ok());
  EXPECT_NE(out.status().message().find("the host framework failed"), std::string::npos) << out.status().to_string();
  EXPECT_EQ(traces, 2) << "the replay could not use the entry, so the call traced and the runner failed there";
  host.fail = false;
  auto again = p.call({3, 4}, {2});
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_EQ(p.values((*again)[0]), cumsum_expected({3, 4}, 2));
}

// ---- value guards: what the function read, and only that ----------------------------------

TEST(ValueGuards, AValueMaterializedButNotReadIsNotGuarded) {
  TempDir dir;
  int traces = 0;
  Process p(dir.db(), [&traces](LazyContext& ctx, const TraceArgs& a) {
    ++traces;
    Tensor r = relu(a.tensor(0));
    ctx.mark_step();  // a segment boundary; nothing read
    return std::vector<Tensor>{mul(r, 3.0)};
  }, nullptr);
  ASSERT_TRUE(p.call({1, -2}, {2}).is_ok());
  auto out = p.call({-4, 5}, {2});
  ASSERT_TRUE(out.is_ok());
  EXPECT_EQ(p.values((*out)[0]), (std::vector<float>{0, 15}));
  EXPECT_EQ(traces, 1);
}

TEST(ValueGuards, AReadOfAnArgumentIsGuarded) {
  TempDir dir;
  int traces = 0;
  Process p(dir.db(), [&traces](LazyContext&, const TraceArgs& a) {
    ++traces;
    const float first = a.tensor(0).to_vector<float>()[0];  // a branch on an argument's value
    return std::vector<Tensor>{first > 0 ? mul(a.tensor(0), 2.0) : neg(a.tensor(0))};
  }, nullptr);
  auto v = [&](std::vector<float> x) {
    auto out = p.call(x, {2});
    EXPECT_TRUE(out.is_ok()) << out.status().to_string();
    return out.is_ok() ? p.values((*out)[0]) : std::vector<float>{};
  };
  EXPECT_EQ(v({1, 2}), (std::vector<float>{2, 4}));
  EXPECT_EQ(v({-1, 2}), (std::vector<float>{1, -2})) << "the other branch, not the first entry's";
  EXPECT_EQ(v({1, 2}), (std::vector<float>{2, 4}));
  EXPECT_EQ(traces, 2);
  ASSERT_EQ(p.f.stats().recompile_reasons.size(), 1u);
  EXPECT_NE(p.f.stats().recompile_reasons[0].find("input 0 'x': expected [1, 2], actual [-1, 2]"), std::string::npos)
      << p.f.stats().recompile_reasons[0];
}

TEST(ValueGuards, AReadOfAHostOpResultIsGuarded) {
  TempDir dir;
  HostFramework host;
  int traces = 0;
  Process p(dir.db(), [&traces](LazyContext&, const TraceArgs& a) {
    ++traces;
    Tensor c = a.host_op("cumsum", std::vector<Tensor>{a.tensor(0)}, "cumsum")[0];
    const double last = c.to_vector<float>().back();
    return std::vector<Tensor>{last > 0 ? c : neg(c)};
  }, &host);
  auto v = [&](std::vector<float> x) {
    auto out = p.call(x, {2});
    EXPECT_TRUE(out.is_ok()) << out.status().to_string();
    return out.is_ok() ? p.values((*out)[0]) : std::vector<float>{};
  };
  EXPECT_EQ(v({1, 2}), (std::vector<float>{1, 3}));
  EXPECT_EQ(v({1, 2}), (std::vector<float>{1, 3}));
  EXPECT_EQ(traces, 1) << ::testing::PrintToString(p.f.stats().recompile_reasons);
  EXPECT_EQ(v({1, -5}), (std::vector<float>{-1, 4}));
  EXPECT_EQ(traces, 2);
}

// ---- the stored form ----------------------------------------------------------------------

GuardEntry entry_with_break() {
  HostBuffer x(DType::kF32, {4});
  GuardEntry e;
  e.guards = GuardSet::record(CallArgs{}, GuardEnvironment{}, {}, {});
  Segment s;
  s.key = GraphKey{1, 2};
  s.params.push_back({ValueSource::Kind::kHostOutput, 0, 0, nullptr});
  e.segments.push_back(s);
  HostOp op;
  op.payload = "cumsum";
  op.description = "cumsum at m.py:3";
  op.position = 0;
  op.output_types.push_back({DType::kF32, Shape{4}});
  op.value_guards.emplace_back(0, XXH128_hash_t{5, 6});
  e.host_ops.push_back(op);
  e.outputs.push_back({ValueSource::Kind::kHostOutput, 0, 0, nullptr});
  e.output_types.push_back({DType::kF32, Shape{4}});
  return e;
}

TEST(GraphBreakCodec, HostOpsRoundTrip) {
  GuardEntry e = entry_with_break();
  Result<GuardEntry> d = decode_guard_entry(encode_guard_entry(e));
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  ASSERT_EQ(d->host_ops.size(), 1u);
  EXPECT_EQ(d->host_ops[0].payload, "cumsum");
  EXPECT_EQ(d->host_ops[0].description, "cumsum at m.py:3");
  EXPECT_EQ(d->host_ops[0].output_types, e.host_ops[0].output_types);
  ASSERT_EQ(d->host_ops[0].value_guards.size(), 1u);
  EXPECT_TRUE(XXH128_isEqual(d->host_ops[0].value_guards[0].second, XXH128_hash_t{5, 6}));
  EXPECT_EQ(encode_guard_entry(*d), encode_guard_entry(e));
}

TEST(GraphBreakCodec, AForgedHostOpIsCorrupt) {
  auto forged = [](auto edit) {
    proto::GuardEntry pe;
    EXPECT_TRUE(pe.ParseFromString(encode_guard_entry(entry_with_break())));
    edit(pe);
    Result<GuardEntry> d = decode_guard_entry(pe.SerializeAsString());
    EXPECT_FALSE(d.is_ok());
    return d.is_ok() ? StatusCode::kOk : d.status().code();
  };
  EXPECT_EQ(forged([](proto::GuardEntry& pe) { pe.mutable_host_ops(0)->set_position(2); }), StatusCode::kCorruption);
  EXPECT_EQ(forged([](proto::GuardEntry& pe) {  // reads a host op that runs later (itself)
              auto* v = pe.mutable_host_ops(0)->add_inputs();
              v->set_kind(static_cast<uint32_t>(ValueSource::Kind::kHostOutput));
            }), StatusCode::kCorruption);
  EXPECT_EQ(forged([](proto::GuardEntry& pe) {  // reads a segment that runs later
              auto* v = pe.mutable_host_ops(0)->add_inputs();
              v->set_kind(static_cast<uint32_t>(ValueSource::Kind::kSegmentOutput));
            }), StatusCode::kCorruption);
  EXPECT_EQ(forged([](proto::GuardEntry& pe) { pe.mutable_segments(0)->mutable_params(0)->set_b(1); }),
            StatusCode::kCorruption);
  EXPECT_EQ(forged([](proto::GuardEntry& pe) { pe.mutable_output_types(0)->set_shape(0, 5); }), StatusCode::kCorruption);
  EXPECT_EQ(forged([](proto::GuardEntry& pe) { pe.mutable_host_ops(0)->mutable_output_types(0)->set_shape(0, -1); }),
            StatusCode::kCorruption);
  EXPECT_EQ(forged([](proto::GuardEntry& pe) {
              pe.mutable_host_ops(0)->set_payload(std::string(kMaxHostOpPayloadBytes + 1, 'x'));
            }), StatusCode::kCorruption);
  EXPECT_EQ(forged([](proto::GuardEntry& pe) { pe.mutable_host_ops(0)->mutable_value_guards(0)->set_output(1); }),
            StatusCode::kCorruption);
  EXPECT_EQ(forged([](proto::GuardEntry& pe) {  // an argument the entry does not have
              auto* g = pe.add_input_value_guards();
              g->mutable_source()->set_a(0);
            }), StatusCode::kCorruption);
}

}  // namespace
}  // namespace tracecache
