// Guard entries that survive restarts (issue 4, part 5): a new runtime on the same database
// runs the first call of a compiled function with zero traces and zero compiles.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include "runtime/compiled_function.h"
#include "backends/cpu/cpu_backend.h"
#include "store/codec/proto/tracecache.pb.h"
#include "tests/test_support.h"

namespace tracecache {
namespace {

using testing::TempDir;

// One "process": a backend, a database handle, a runtime, a context, and the function.
struct Process {
  explicit Process(const std::string& db_path, std::string user_version = "v1")
      : db(std::move(store::CacheDb::open({.path = db_path})).value_or_throw()),
        runtime(&cpu, db.get(), &metrics),
        ctx(&runtime, LazyOptions{.canonicalize = {}, .metrics = &metrics}),
        f("step", fn(&fn_calls), &runtime, options(std::move(user_version))) {}

  static TracedFn fn(int* calls) {
    return [calls](LazyContext&, const TraceArgs& a) {
      ++*calls;
      Tensor h = relu(add(matmul(a.tensor(0), a.tensor(1)), a.scalar(0)));
      Tensor s = sum(h);
      if (s.item() >= 0) return std::vector<Tensor>{h, mul(s, 2.0)};  // a value read: 2 segments
      return std::vector<Tensor>{h, s};
    };
  }
  static CompiledFunctionOptions options(std::string user_version) {
    CompiledFunctionOptions o;
    o.user_version = std::move(user_version);
    o.input_names = {"x", "w"};
    return o;
  }

  std::vector<std::string> call(int batch) {
    HostBuffer x(DType::kF32, {batch, 3}), w(DType::kF32, {3, 2});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 5) - 1;
    for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = 0.5f * static_cast<float>(i);
    auto out = f(ctx, {{ctx.from_buffer(std::move(x)), ctx.from_buffer(std::move(w))}, {0.25}});
    EXPECT_TRUE(out.is_ok()) << out.status().to_string();
    std::vector<std::string> sums;
    if (out.is_ok()) {
      for (const Tensor& t : *out) sums.push_back(t.buffer()->checksum());
    }
    return sums;
  }

  CpuBackend cpu;
  Metrics metrics;
  std::unique_ptr<store::CacheDb> db;
  Runtime runtime;
  LazyContext ctx;
  int fn_calls = 0;
  CompiledFunction f;
};

TEST(PersistentGuards, AWarmCacheMeansZeroTracesAndZeroCompiles) {
  TempDir dir;
  std::vector<std::string> first8, first16;
  {
    Process p(dir.db());
    first8 = p.call(8);
    first16 = p.call(16);
    p.call(8);
    EXPECT_EQ(p.fn_calls, 2);
    EXPECT_EQ(p.f.stats().recompiles, 1);
    EXPECT_GT(p.metrics.counter(counters::kCompiles), 0);
  }
  Process q(dir.db());
  EXPECT_EQ(q.f.num_entries(), 2u);
  EXPECT_EQ(q.call(16), first16);
  EXPECT_EQ(q.call(8), first8);
  EXPECT_EQ(q.fn_calls, 0);
  EXPECT_EQ(q.metrics.counter(counters::kTraces), 0);
  EXPECT_EQ(q.metrics.counter(counters::kCompiles), 0);
  EXPECT_GT(q.metrics.counter(counters::kHitsDisk), 0);
  q.f.flush();
  auto audit = q.db->function_audit();
  ASSERT_TRUE(audit.is_ok());
  ASSERT_EQ(audit->size(), 1u);
  EXPECT_EQ((*audit)[0].entries.size(), 2u);
  EXPECT_EQ((*audit)[0].entries[0].hits + (*audit)[0].entries[1].hits, 3) << "1 hit in the first process, 2 here";
}

TEST(PersistentGuards, AnotherUserVersionNeverUsesTheEntries) {
  TempDir dir;
  { Process p(dir.db(), "v1"); p.call(4); }
  Process q(dir.db(), "v2");
  EXPECT_EQ(q.f.num_entries(), 0u);
  q.call(4);
  EXPECT_EQ(q.fn_calls, 1);
}

TEST(PersistentGuards, ACorruptStoredEntryIsDroppedAndRetraced) {
  TempDir dir;
  std::vector<std::string> want;
  { Process p(dir.db()); want = p.call(4); }
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(dir.db().c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "UPDATE functions SET blob = randomblob(length(blob))", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  Process q(dir.db());
  EXPECT_EQ(q.f.num_entries(), 0u);
  EXPECT_EQ(q.call(4), want);
  EXPECT_EQ(q.fn_calls, 1);
  int corrupt = 0;
  for (const auto& e : q.runtime.events()) corrupt += e.kind == store::EventKind::kCorrupt;
  EXPECT_EQ(corrupt, 1);
}

TEST(PersistentGuards, AStoredEntryWithBadRoutingFallsBackSafely) {
  // A stored entry whose checksum matches but whose routing names a segment output that does
  // not exist: dropped at replay, never a crash.
  TempDir dir;
  std::vector<std::string> want;
  { Process p(dir.db()); want = p.call(4); }
  {
    auto db = std::move(store::CacheDb::open({.path = dir.db()})).value_or_throw();
    store::FunctionKey key{"step", "v1", std::string(kToolkitVersion)};
    auto rows = db->function_entries(key);
    ASSERT_TRUE(rows.is_ok());
    ASSERT_EQ(rows->size(), 1u);
    std::string blob = (*rows)[0].blob;
    // Find an output source routed to segment 0 (kind 2 = segment output) and point it at a
    // far output index: rewrite through the proto message.
    proto::GuardEntry pe;
    ASSERT_TRUE(pe.ParseFromString(blob));
    bool changed = false;
    for (auto& v : *pe.mutable_outputs()) {
      if (v.kind() == 2) {
        v.set_b(999);
        changed = true;
      }
    }
    ASSERT_TRUE(changed);
    ASSERT_TRUE(db->put_function_entry(key, 0, pe.SerializeAsString()).is_ok());
  }
  Process q(dir.db());
  EXPECT_EQ(q.call(4), want);
  EXPECT_EQ(q.fn_calls, 1) << "the bad entry was dropped and the call traced";
}

}  // namespace
}  // namespace tracecache
