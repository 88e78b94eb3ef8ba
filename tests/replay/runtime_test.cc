// Lazy mode for real (issue 3): trace -> hash -> memory LRU -> SQLite -> compile on miss ->
// store -> run, with every cache decision audited and every storage failure survivable
// (docs/architecture.md invariants 2, 5, 6, 8).
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cmath>

#include "frontend/program/program.h"
#include "frontend/program/program_runner.h"
#include "capture/reference/reference.h"
#include "replay/backends/cpu/cpu_backend.h"
#include "replay/engine/runtime.h"
#include "tests/test_graphs.h"
#include "tests/test_support.h"

namespace tracecache {
namespace {

using store::EventKind;
using testing::TempDir;

std::unique_ptr<store::CacheDb> open_db(const std::string& path, bool read_only = false) {
  auto db = store::CacheDb::open({.path = path, .read_only = read_only});
  EXPECT_TRUE(db.is_ok()) << db.status().to_string();
  return db.is_ok() ? std::move(*db) : nullptr;
}

struct RunResult {
  std::vector<StepResult> steps;
  Metrics metrics;
  std::vector<store::Event> events;
  std::vector<std::string> warnings;
};

// Runs a fixture program in lazy mode on the cpu backend against `db` (may be null).
RunResult run_cpu(const std::string& program, store::CacheDb* db, int steps,
                  RuntimeOptions options = {}) {
  RunResult r;
  Result<Program> p = load_program(testing::fixture_path(program));
  EXPECT_TRUE(p.is_ok());
  CpuBackend cpu;
  Runtime runtime(&cpu, db, &r.metrics, options);
  LazyOptions lazy;
  lazy.metrics = &r.metrics;
  LazyContext ctx(&runtime, lazy);
  auto out = run_program(*p, ctx, steps);
  EXPECT_TRUE(out.is_ok()) << out.status().to_string();
  runtime.flush();
  if (out.is_ok()) r.steps = std::move(*out);
  r.events = runtime.events();
  r.warnings = runtime.warnings();
  return r;
}

std::vector<StepResult> run_reference(const std::string& program, int steps) {
  Result<Program> p = load_program(testing::fixture_path(program));
  ReferenceExecutor ref;
  LazyContext ctx(&ref);
  return std::move(run_program(*p, ctx, steps)).value_or_throw();
}

int count(const std::vector<store::Event>& events, EventKind kind, std::string_view reason = {}) {
  return static_cast<int>(std::count_if(events.begin(), events.end(), [&](const store::Event& e) {
    return e.kind == kind && (reason.empty() || e.reason == reason);
  }));
}

// Outputs agree with the reference evaluator: bitwise, or within the documented GEMM tolerance.
void expect_matches_reference(const std::vector<StepResult>& got, const std::vector<StepResult>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t s = 0; s < got.size(); ++s) {
    ASSERT_EQ(got[s].outputs.size(), want[s].outputs.size());
    for (size_t o = 0; o < got[s].outputs.size(); ++o) {
      const HostBuffer& a = *got[s].outputs[o].second;
      const HostBuffer& b = *want[s].outputs[o].second;
      ASSERT_EQ(a.dtype(), b.dtype());
      ASSERT_EQ(a.shape(), b.shape());
      for (int64_t i = 0; i < a.numel(); ++i) {
        double x = a.element_as_double(i), y = b.element_as_double(i);
        EXPECT_NEAR(x, y, 1e-4 * (1 + std::abs(y))) << "step " << s << " output " << o << " element " << i;
      }
    }
  }
}

bool same_checksums(const std::vector<StepResult>& a, const std::vector<StepResult>& b) {
  if (a.size() != b.size()) return false;
  for (size_t s = 0; s < a.size(); ++s) {
    for (size_t o = 0; o < a[s].outputs.size(); ++o) {
      if (a[s].outputs[o].second->checksum() != b[s].outputs[o].second->checksum()) return false;
    }
  }
  return true;
}

void exec_sql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(db);
}

TEST(Runtime, EveryFixtureMatchesTheReferenceEvaluator) {
  for (const std::string& name : testing::all_fixture_programs()) {
    SCOPED_TRACE(name);
    RunResult r = run_cpu(name, nullptr, 3);
    expect_matches_reference(r.steps, run_reference(name, 3));
  }
}

TEST(Runtime, CompilesOncePerGraphThenHitsMemory) {
  TempDir dir;
  auto db = open_db(dir.file("c.db"));
  RunResult r = run_cpu("mlp.trace", db.get(), 5);
  EXPECT_EQ(r.metrics.counter(counters::kTraces), 5);
  EXPECT_EQ(r.metrics.counter(counters::kCompiles), 1);
  EXPECT_EQ(r.metrics.counter(counters::kMisses), 1);
  EXPECT_EQ(r.metrics.counter(counters::kHitsMemory), 4);
  EXPECT_EQ(count(r.events, EventKind::kMiss, "new graph"), 1);
  EXPECT_EQ(count(r.events, EventKind::kStore), 1);
  EXPECT_TRUE(r.warnings.empty());
  Result<std::vector<store::Event>> stored = db->events();
  ASSERT_TRUE(stored.is_ok());
  // Decisions are rows; hits are counted (invariant 8).
  EXPECT_EQ(stored->size(), r.events.size() - 4) << "every decision event reached the audit log";
  auto audit = db->audit();
  ASSERT_TRUE(audit.is_ok());
  ASSERT_EQ(audit->size(), 1u);
  EXPECT_EQ((*audit)[0].hits_memory, 4);
}

TEST(Runtime, ASecondRuntimeOnTheSameDatabaseCompilesNothing) {
  TempDir dir;
  RunResult first, second;
  {
    auto db = open_db(dir.file("c.db"));
    first = run_cpu("matmul_varying_batch.trace", db.get(), 6);
  }
  auto db = open_db(dir.file("c.db"));
  second = run_cpu("matmul_varying_batch.trace", db.get(), 6);
  EXPECT_EQ(first.metrics.counter(counters::kCompiles), 3);
  EXPECT_EQ(second.metrics.counter(counters::kCompiles), 0);
  EXPECT_EQ(second.metrics.counter(counters::kHitsDisk), 3);
  EXPECT_EQ(second.metrics.counter(counters::kHitsMemory), 3);
  EXPECT_TRUE(same_checksums(first.steps, second.steps));
}

TEST(Runtime, HitsCarryTheTierThatServedThemAndKeepTheirStoredNames) {
  TempDir dir;
  { auto db = open_db(dir.file("c.db")); run_cpu("matmul_varying_batch.trace", db.get(), 6); }
  auto db = open_db(dir.file("c.db"));
  RunResult r = run_cpu("matmul_varying_batch.trace", db.get(), 6);
  // B = 8 8 16 16 32 8: each graph's first lookup comes from disk (then promoted), later ones
  // from memory.
  std::vector<std::string> tiers;
  for (const store::Event& e : r.events) {
    if (e.kind == EventKind::kHit) tiers.push_back(e.tier);
    else EXPECT_TRUE(e.tier.empty()) << store::event_name(e.kind) << " names no tier";
  }
  EXPECT_EQ(tiers, (std::vector<std::string>{"disk", "memory", "disk", "memory", "disk", "memory"}));
  db.reset();
  EXPECT_EQ(testing::sqlite_int(dir.file("c.db"), "SELECT SUM(hits) FROM hit_counts WHERE tier = 'hit_disk'"), 3);
  EXPECT_EQ(testing::sqlite_int(dir.file("c.db"), "SELECT SUM(hits) FROM hit_counts WHERE tier = 'hit_memory'"), 6)
      << "3 memory hits in each run";
  EXPECT_EQ(testing::sqlite_int(dir.file("c.db"), "SELECT COUNT(*) FROM hit_counts WHERE tier NOT IN "
                                                  "('hit_disk', 'hit_memory')"), 0);
}

TEST(Runtime, ACompilerVersionBumpNeverServesStaleExecutables) {
  TempDir dir;
  auto db = open_db(dir.file("c.db"));
  RunResult old_version = run_cpu("mlp.trace", db.get(), 2);
  RuntimeOptions bumped;
  bumped.compiler_version = kCompilerVersion + 1;
  RunResult new_version = run_cpu("mlp.trace", db.get(), 2, bumped);
  EXPECT_EQ(new_version.metrics.counter(counters::kCompiles), 1);
  EXPECT_EQ(new_version.metrics.counter(counters::kHitsDisk), 0);
  EXPECT_EQ(count(new_version.events, EventKind::kMiss, "stale compiler version"), 1);
  EXPECT_TRUE(same_checksums(old_version.steps, new_version.steps));
}

TEST(Runtime, CorruptBlobsAreMissesEventsAndRecompiles) {
  TempDir dir;
  const std::string path = dir.file("c.db");
  RunResult clean;
  {
    auto db = open_db(path);
    clean = run_cpu("attention.trace", db.get(), 2);
  }
  // Flip one byte in the middle of every stored executable.
  exec_sql(path, "UPDATE executables SET blob = substr(blob, 1, 20) || "
                 "CAST(char((unicode(substr(blob, 21, 1)) + 1) % 256) AS BLOB) || substr(blob, 22)");
  auto db = open_db(path);
  RunResult after = run_cpu("attention.trace", db.get(), 2);
  EXPECT_TRUE(same_checksums(clean.steps, after.steps));
  EXPECT_EQ(count(after.events, EventKind::kCorrupt), 1);
  EXPECT_EQ(count(after.events, EventKind::kMiss, "corrupt"), 1);
  EXPECT_EQ(after.metrics.counter(counters::kCompiles), 1);
  // The recompiled entry replaced the bad one.
  RunResult third = run_cpu("attention.trace", db.get(), 1);
  EXPECT_EQ(third.metrics.counter(counters::kHitsDisk), 1);
  EXPECT_EQ(count(third.events, EventKind::kCorrupt), 0);
}

TEST(Runtime, ABlobWithAValidChecksumButBadContentsIsCaughtToo) {
  TempDir dir;
  const std::string path = dir.file("c.db");
  RunResult clean;
  {
    auto db = open_db(path);
    clean = run_cpu("mlp.trace", db.get(), 1);
  }
  // Swap in the executable of another graph, with a checksum that matches its bytes.
  {
    auto db = open_db(path);
    auto entries = db->list_executables();
    ASSERT_TRUE(entries.is_ok());
    ASSERT_EQ(entries->size(), 1u);
    CanonicalGraph other = testing::fixture_graphs("attention.trace", 1).at(0);
    CpuBackend cpu;
    Executable foreign = *cpu.compile(other.graph, other.key, kCompilerVersion);
    ASSERT_TRUE(db->put_executable(entries->front().key, cpu.serialize(foreign), 1.0).is_ok());
  }
  auto db = open_db(path);
  RunResult after = run_cpu("mlp.trace", db.get(), 1);
  EXPECT_TRUE(same_checksums(clean.steps, after.steps));
  EXPECT_EQ(count(after.events, EventKind::kCorrupt), 1);
}

TEST(Runtime, AReadOnlyDatabaseStillGivesCorrectResults) {
  TempDir dir;
  const std::string path = dir.file("c.db");
  { auto db = open_db(path); }  // create it
  auto db = open_db(path, /*read_only=*/true);
  ASSERT_TRUE(db->read_only());
  RunResult r = run_cpu("mlp.trace", db.get(), 3);
  expect_matches_reference(r.steps, run_reference("mlp.trace", 3));
  ASSERT_FALSE(r.warnings.empty());
  EXPECT_NE(r.warnings[0].find("read-only"), std::string::npos) << r.warnings[0];
  EXPECT_EQ(count(r.events, EventKind::kStoreFailed), 1);
  EXPECT_EQ(r.metrics.counter(counters::kHitsMemory), 2) << "the memory cache still works";
}

TEST(Runtime, ALockedDatabaseCostsCachingNotResults) {
  TempDir dir;
  const std::string path = dir.file("c.db");
  auto db = store::CacheDb::open({.path = path, .busy_timeout_ms = 50});
  ASSERT_TRUE(db.is_ok());
  sqlite3* locker = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &locker), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(locker, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
  RunResult r = run_cpu("mlp.trace", db->get(), 2);
  sqlite3_exec(locker, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(locker);
  expect_matches_reference(r.steps, run_reference("mlp.trace", 2));
  EXPECT_FALSE(r.warnings.empty());
  EXPECT_GE(r.metrics.counter(counters::kStoreFailures), 1);
}

// A backend whose compiler always fails: the step must still return correct outputs.
class BrokenBackend final : public Backend {
 public:
  std::string_view name() const override { return "broken"; }
  std::string options_digest() const override { return ""; }
  Result<Executable> compile(const Graph&, const GraphKey&, uint32_t) override {
    return internal_error("compiler crashed");
  }
  std::string serialize(const Executable& e) override { return serialize_executable(e); }
  Result<Executable> load(std::string_view b) override { return parse_executable(b); }
  bool shares_host_memory() const override { return true; }
  Result<DeviceRef> to_device(const DataRef&) override { return internal_error("unused"); }
  Result<BufferRef> to_host(const DeviceRef&) override { return internal_error("unused"); }
  Result<std::vector<DeviceRef>> run(const Executable&, std::span<const DeviceRef>) override {
    return internal_error("unused");
  }
  void synchronize() override {}
};

TEST(Runtime, AFailedCompileFallsBackToTheReference) {
  Result<Program> p = load_program(testing::fixture_path("mlp.trace"));
  BrokenBackend broken;
  Runtime runtime(&broken, nullptr, nullptr);
  LazyContext ctx(&runtime);
  auto out = run_program(*p, ctx, 2);
  ASSERT_TRUE(out.is_ok());
  expect_matches_reference(*out, run_reference("mlp.trace", 2));
  ASSERT_FALSE(runtime.warnings().empty());
  EXPECT_NE(runtime.warnings()[0].find("compiler crashed"), std::string::npos);
  EXPECT_EQ(count(runtime.events(), EventKind::kFallback, "compile failed"), 2) << "one per step";
}

TEST(Runtime, MemoryLruEvictionsAreEvents) {
  RuntimeOptions tiny;
  tiny.memory_cache_bytes = 1;  // holds one executable at a time
  RunResult r = run_cpu("matmul_varying_batch.trace", nullptr, 6, tiny);
  // B = 8 8 16 16 32 8: the last step's graph was evicted by the 32 one and compiles again.
  EXPECT_EQ(r.metrics.counter(counters::kCompiles), 4);
  EXPECT_EQ(count(r.events, EventKind::kEvict), 3);
  expect_matches_reference(r.steps, run_reference("matmul_varying_batch.trace", 6));
}

}  // namespace
}  // namespace tracecache
