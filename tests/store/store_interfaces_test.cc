// The runtime over the store interfaces alone (store/core/audit_log.h, guard_entry_store.h): a
// compiled function persists its guard entries to any GuardEntryStore and the runtime audits to any
// AuditLog, with no SQLite database anywhere (the seam a remote tier plugs into).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "replay/backends/cpu/cpu_backend.h"
#include "replay/engine/compiled_function.h"

namespace tracecache {
namespace {

class FakeAuditLog final : public store::AuditLog {
 public:
  bool read_only() const override { return read_only_; }
  std::string_view location() const override { return "fake://audit"; }
  Status append_events(std::span<const store::Event> events) override {
    if (read_only_) return io_error("read-only");
    rows.insert(rows.end(), events.begin(), events.end());
    return Status::ok();
  }
  Result<std::vector<store::Event>> events(int64_t, int64_t, int64_t*) override { return rows; }
  Status add_hits(std::span<const store::HitCount> hits) override {
    if (read_only_) return io_error("read-only");
    for (const store::HitCount& h : hits) total_hits += h.hits;
    return Status::ok();
  }
  Result<store::MissReason> classify_miss(const store::ExecutableKey&) override {
    ++classified;
    return store::MissReason::kNewGraph;
  }

  size_t count(store::EventKind kind) const {
    return static_cast<size_t>(std::count_if(rows.begin(), rows.end(),
                                             [kind](const store::Event& e) { return e.kind == kind; }));
  }

  bool read_only_ = false;
  std::vector<store::Event> rows;
  int64_t total_hits = 0;
  int classified = 0;
};

class FakeGuardEntryStore final : public store::GuardEntryStore {
 public:
  bool read_only() const override { return read_only_; }
  Status put_function_entry(const store::FunctionKey& key, int64_t entry, std::string_view blob) override {
    if (read_only_) return io_error("read-only");
    if (Row* r = find(key, entry)) {
      r->stored = {entry, std::string(blob), 0, false};
    } else {
      rows.push_back({key, {entry, std::string(blob), 0, false}});
    }
    return Status::ok();
  }
  Result<std::vector<store::StoredFunctionEntry>> function_entries(const store::FunctionKey& key) override {
    std::vector<store::StoredFunctionEntry> out;
    for (const Row& r : rows) {
      if (r.key == key) out.push_back(r.stored);
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.entry < b.entry; });
    return out;
  }
  Status add_function_hits(const store::FunctionKey& key, int64_t entry, int64_t hits) override {
    if (read_only_) return io_error("read-only");
    if (Row* r = find(key, entry)) r->stored.hits += hits;
    return Status::ok();
  }
  Status remove_function_entry(const store::FunctionKey& key, int64_t entry) override {
    if (read_only_) return io_error("read-only");
    std::erase_if(rows, [&](const Row& r) { return r.key == key && r.stored.entry == entry; });
    return Status::ok();
  }

  struct Row {
    store::FunctionKey key;
    store::StoredFunctionEntry stored;
  };
  Row* find(const store::FunctionKey& key, int64_t entry) {
    auto it = std::find_if(rows.begin(), rows.end(),
                           [&](const Row& r) { return r.key == key && r.stored.entry == entry; });
    return it == rows.end() ? nullptr : &*it;
  }

  bool read_only_ = false;
  std::vector<Row> rows;
};

TracedFn step(int* calls) {
  return [calls](LazyContext&, const TraceArgs& a) {
    ++*calls;
    return std::vector<Tensor>{relu(add(matmul(a.tensor(0), a.tensor(1)), a.scalar(0)))};
  };
}

CompiledFunctionOptions v1() {
  CompiledFunctionOptions o;
  o.user_version = "v1";
  return o;
}

// Calls `f` on a [batch, 3] x [3, 2] input; returns the output's checksum.
std::string call(CompiledFunction& f, LazyContext& ctx, int batch) {
  HostBuffer x(DType::kF32, {batch, 3}), w(DType::kF32, {3, 2});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 5) - 1;
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = 0.5f * static_cast<float>(i);
  auto out = f(ctx, {{ctx.from_buffer(std::move(x)), ctx.from_buffer(std::move(w))}, {0.25}});
  EXPECT_TRUE(out.is_ok()) << out.status().to_string();
  return out.is_ok() && out->size() == 1 ? (*out)[0].buffer()->checksum() : std::string();
}

TEST(StoreInterfaces, GuardEntriesAndEventsGoThroughTheInterfaces) {
  CpuBackend cpu;
  Metrics metrics;
  FakeAuditLog audit;
  FakeGuardEntryStore entries;
  std::string want8, want16;
  {
    Runtime runtime(&cpu, &audit, &entries, &metrics);
    ASSERT_EQ(runtime.guard_entries(), &entries);
    LazyContext ctx(&runtime, LazyOptions{.canonicalize = {}, .metrics = &metrics});
    int first_calls = 0;
    CompiledFunction first("step", step(&first_calls), &runtime, v1());
    want8 = call(first, ctx, 8);
    want16 = call(first, ctx, 16);  // a recompile: a second entry
    EXPECT_EQ(first_calls, 2);
    ASSERT_EQ(entries.rows.size(), 2u);
    EXPECT_FALSE(entries.rows[0].stored.blob.empty());
    EXPECT_EQ(entries.rows[0].key.name, "step");
    EXPECT_EQ(entries.rows[0].key.user_version, "v1");

    // A second function over the same store finds both entries: no trace, no compile (the
    // executables are in the runtime's memory tier).
    const int64_t compiles = metrics.counter(counters::kCompiles);
    int second_calls = 0;
    CompiledFunction second("step", step(&second_calls), &runtime, v1());
    EXPECT_EQ(second.num_entries(), 2u);
    EXPECT_EQ(call(second, ctx, 16), want16);
    EXPECT_EQ(call(second, ctx, 8), want8);
    EXPECT_EQ(second_calls, 0);
    EXPECT_EQ(second.stats().traces, 0);
    EXPECT_EQ(metrics.counter(counters::kCompiles), compiles);
    second.flush();
    EXPECT_EQ(entries.rows[0].stored.hits + entries.rows[1].stored.hits, 2);
    EXPECT_TRUE(runtime.warnings().empty());
  }  // the runtime flushes its hit counts on destruction

  // Each graph's miss (classified by the log) and compile, the function's recompile, and the
  // memory tier's hits all reached the fake log; no disk tier, so no store event.
  EXPECT_GE(audit.count(store::EventKind::kMiss), 2u);
  EXPECT_EQ(audit.count(store::EventKind::kMiss), static_cast<size_t>(audit.classified));
  EXPECT_EQ(audit.count(store::EventKind::kCompile), audit.count(store::EventKind::kMiss));
  EXPECT_EQ(audit.count(store::EventKind::kRecompile), 1u);
  EXPECT_EQ(audit.count(store::EventKind::kStore), 0u);
  EXPECT_GT(audit.total_hits, 0);
  EXPECT_EQ(audit.total_hits, metrics.counter(counters::kHitsMemory));
}

TEST(StoreInterfaces, ReadOnlyStoresAreReadButNeverWritten) {
  CpuBackend cpu;
  Metrics metrics;
  FakeAuditLog audit;
  FakeGuardEntryStore entries;
  audit.read_only_ = true;
  entries.read_only_ = true;
  Runtime runtime(&cpu, &audit, &entries, &metrics);
  LazyContext ctx(&runtime, LazyOptions{.canonicalize = {}, .metrics = &metrics});
  int calls = 0;
  CompiledFunction f("step", step(&calls), &runtime, v1());
  EXPECT_FALSE(call(f, ctx, 8).empty());
  EXPECT_FALSE(call(f, ctx, 8).empty());
  f.flush();
  runtime.flush();
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(entries.rows.empty());
  EXPECT_TRUE(audit.rows.empty());
  EXPECT_EQ(audit.total_hits, 0);
  EXPECT_EQ(metrics.counter(counters::kStoreFailures), 0);
  ASSERT_EQ(runtime.warnings().size(), 1u);
  EXPECT_NE(runtime.warnings()[0].find("'fake://audit' is read-only"), std::string::npos) << runtime.warnings()[0];
}

}  // namespace
}  // namespace tracecache
