// Issue 10: storage faults injected through store/sqlite/fault_vfs.h (LevelDB's fault-injecting Env idea)
// at every write, sync and read index of a small lazy run: a full disk, a failed fsync, read
// errors and a crash. Each run's outputs equal an uncached run's (invariant 6), no stored
// executable lacks its miss/compile/store events (invariant 8), and after a crash the reopened
// cache verifies. Fault positions are counted operations, never times.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include "frontend/program/program.h"
#include "frontend/program/program_runner.h"
#include "replay/backends/cpu/cpu_backend.h"
#include "replay/engine/runtime.h"
#include "store/sqlite/fault_vfs.h"
#include "tests/test_graphs.h"
#include "tests/test_support.h"

namespace tracecache {
namespace {

using store::EventKind;
using testing::TempDir;

constexpr const char* kProgram = "matmul_varying_batch.trace";
constexpr int kSteps = 4;

store::FaultVfs* fault_vfs() {
  static store::FaultVfs* vfs = std::move(store::register_fault_vfs("tracecache-fault-test")).value_or_throw();
  return vfs;
}

// Lazy run on cpu against `db` (may be null); checksums of every output.
std::vector<std::string> run(store::CacheDb* db) {
  Result<Program> p = load_program(testing::fixture_path(kProgram));
  EXPECT_TRUE(p.is_ok());
  CpuBackend cpu;
  Metrics metrics;
  Runtime runtime(&cpu, db, &metrics);
  LazyOptions lazy;
  lazy.metrics = &metrics;
  LazyContext ctx(&runtime, lazy);
  auto out = run_program(*p, ctx, kSteps);
  EXPECT_TRUE(out.is_ok()) << out.status().to_string();
  runtime.flush();
  std::vector<std::string> sums;
  if (out.is_ok()) {
    for (const StepResult& s : *out) {
      for (const auto& [name, buf] : s.outputs) sums.push_back(buf->checksum());
    }
  }
  return sums;
}

std::unique_ptr<store::CacheDb> open_faulty(const std::string& path) {
  auto db = store::CacheDb::open({.path = path, .vfs = fault_vfs()->name()});
  EXPECT_TRUE(db.is_ok()) << db.status().to_string();
  return db.is_ok() ? std::move(*db) : nullptr;
}

// With the default VFS: the cache verifies, and every stored executable has its decision events.
void expect_consistent(const std::string& path, const std::string& what) {
  auto db = store::CacheDb::open({.path = path});
  ASSERT_TRUE(db.is_ok()) << what << ": " << db.status().to_string();
  auto problems = (*db)->verify();
  ASSERT_TRUE(problems.is_ok()) << what;
  EXPECT_TRUE(problems->empty()) << what << ": " << (problems->empty() ? "" : problems->front().problem);
  auto entries = (*db)->list_executables();
  ASSERT_TRUE(entries.is_ok()) << what;
  auto events = (*db)->events();
  ASSERT_TRUE(events.is_ok()) << what;
  for (const store::EntryInfo& e : *entries) {
    for (EventKind kind : {EventKind::kMiss, EventKind::kCompile, EventKind::kStore}) {
      bool found = std::any_of(events->begin(), events->end(),
                               [&](const store::Event& ev) { return ev.kind == kind && ev.graph == e.key.graph; });
      EXPECT_TRUE(found) << what << ": executable " << e.key.graph.to_hex() << " lacks its "
                         << store::event_name(kind) << " event";
    }
  }
}

// How many writes / syncs / reads a clean run makes (after opening).
struct Counts {
  int64_t writes, syncs, reads;
};
Counts clean_counts(const TempDir& dir) {
  std::string path = dir.file("clean.db");
  auto db = open_faulty(path);
  fault_vfs()->set_plan({});
  run(db.get());
  Counts c{fault_vfs()->writes(), fault_vfs()->syncs(), fault_vfs()->reads()};
  std::printf("clean run: %lld writes, %lld syncs, %lld reads\n", static_cast<long long>(c.writes),
              static_cast<long long>(c.syncs), static_cast<long long>(c.reads));
  return c;
}

// For n = 0..last: a run on a fresh database <name><n>.db with plan field `fault` set to n gives
// the uncached outputs `want` and leaves a consistent cache. `what` names the fault in messages.
void fault_at_each(const TempDir& dir, int64_t store::FaultPlan::*fault, int64_t last, const std::string& name,
                   const std::string& what, const std::vector<std::string>& want) {
  for (int64_t n = 0; n <= last; ++n) {
    std::string path = dir.file(name + std::to_string(n) + ".db");
    {
      auto db = open_faulty(path);
      ASSERT_TRUE(db);
      store::FaultPlan plan;
      plan.*fault = n;
      fault_vfs()->set_plan(plan);
      EXPECT_EQ(run(db.get()), want) << what << " " << n;
      fault_vfs()->set_plan({});
    }
    expect_consistent(path, what + " " + std::to_string(n));
  }
}

TEST(StoreFaults, DiskFullAtEveryWrite) {
  TempDir dir;
  const std::vector<std::string> want = run(nullptr);
  Counts c = clean_counts(dir);
  ASSERT_GT(c.writes, 0);
  fault_at_each(dir, &store::FaultPlan::full_at_write, c.writes, "full", "disk full at write", want);
}

TEST(StoreFaults, FailedFsyncAtEverySync) {
  TempDir dir;
  const std::vector<std::string> want = run(nullptr);
  Counts c = clean_counts(dir);
  fault_at_each(dir, &store::FaultPlan::fail_sync_at, c.syncs, "sync", "fsync failed at sync", want);
}

TEST(StoreFaults, ReadErrorsAtEveryRead) {
  TempDir dir;
  const std::vector<std::string> want = run(nullptr);
  // Reads matter on a warm cache: fill it first, then fail the second run's reads.
  std::string path = dir.file("warm.db");
  {
    auto db = open_faulty(path);
    ASSERT_TRUE(db);
    run(db.get());
  }
  int64_t reads = 0;
  {
    auto db = open_faulty(path);
    fault_vfs()->set_plan({});
    run(db.get());
    reads = fault_vfs()->reads();
  }
  std::printf("warm run: %lld reads\n", static_cast<long long>(reads));
  for (int64_t n = 0; n <= reads; ++n) {
    auto db = open_faulty(path);
    ASSERT_TRUE(db);
    fault_vfs()->set_plan({.fail_read_at = n});
    EXPECT_EQ(run(db.get()), want) << "read error at read " << n;
    fault_vfs()->set_plan({});
  }
  expect_consistent(path, "after read errors");
}

TEST(StoreFaults, CrashAtEveryWriteLeavesAConsistentCache) {
  TempDir dir;
  Counts c = clean_counts(dir);
  for (int64_t n = 0; n <= c.writes; ++n) {
    std::string path = dir.file("crash" + std::to_string(n) + ".db");
    {
      auto db = open_faulty(path);  // created before the fork: the crash is in the run
      ASSERT_TRUE(db);
    }
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto db = store::CacheDb::open({.path = path, .vfs = fault_vfs()->name()});
      if (!db.is_ok()) ::_exit(2);
      fault_vfs()->set_plan({.crash_at_write = n});
      run(db->get());
      ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "crash at write " << n;
    EXPECT_TRUE(WEXITSTATUS(status) == store::kFaultCrashExit || WEXITSTATUS(status) == 0)
        << "crash at write " << n << ": exit " << WEXITSTATUS(status);
    expect_consistent(path, "crash at write " + std::to_string(n));
    // And the crashed cache still serves a correct run.
    auto db = store::CacheDb::open({.path = path});
    ASSERT_TRUE(db.is_ok());
    EXPECT_EQ(run(db->get()), run(nullptr)) << "after a crash at write " << n;
  }
}

}  // namespace
}  // namespace tracecache

namespace tracecache {
namespace {

// The runtime's own event list is bounded too (invariant 8: the process stays bounded).
TEST(RuntimeEvents, TheInMemoryEventListIsCappedWithADroppedCount) {
  Result<Program> p = load_program(testing::fixture_path("mlp.trace"));
  ASSERT_TRUE(p.is_ok());
  CpuBackend cpu;
  Metrics metrics;
  RuntimeOptions options;
  options.max_events_in_memory = 5;
  Runtime runtime(&cpu, nullptr, &metrics, options);
  LazyOptions lazy;
  lazy.metrics = &metrics;
  LazyContext ctx(&runtime, lazy);
  auto out = run_program(*p, ctx, 20);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(runtime.events().size(), 5u);
  // 20 lookups (1 miss + 19 hits) and a compile: 21 events, 5 kept.
  EXPECT_EQ(runtime.dropped_events(), 16);
}

}  // namespace
}  // namespace tracecache
