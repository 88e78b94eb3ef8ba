// Issue 10, the store side: hit counts, gc's trimming of the log, decision events in the same
// transaction as their executable, graph key prefixes, and schema 2 -> 3 upgrade.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "store/sqlite/cache_db.h"
#include "tests/test_support.h"

namespace tracecache::store {
namespace {

namespace fs = std::filesystem;

using testing::sqlite_int;

// A database file c.db in a temporary directory of its own.
class TempDb {
 public:
  std::string path() const { return dir_.db(); }
  std::unique_ptr<CacheDb> open() const {
    auto db = CacheDb::open({.path = path()});
    EXPECT_TRUE(db.is_ok()) << db.status().to_string();
    return db.is_ok() ? std::move(*db) : nullptr;
  }

 private:
  testing::TempDir dir_;
};

Event event(EventKind kind, uint64_t graph, double time) {
  Event e;
  e.time = time;
  e.pid = 1;
  e.kind = kind;
  e.graph = GraphKey{graph, 1};
  e.backend = "cpu";
  return e;
}

TEST(StoreEvents, HitsAreCountedInOneRowPerKeyAndTier) {
  TempDb t;
  auto db = t.open();
  ASSERT_TRUE(db);
  for (int i = 0; i < 50; ++i) {
    std::vector<HitCount> hits = {{GraphKey{1, 1}, "cpu", "", std::string(kMemoryTier), 3, 10.0 + i},
                                  {GraphKey{1, 1}, "cpu", "", std::string(kDiskTier), 1, 10.0 + i}};
    ASSERT_TRUE(db->add_hits(hits).is_ok());
  }
  EXPECT_EQ(sqlite_int(t.path(), "SELECT COUNT(*) FROM hit_counts"), 2);
  EXPECT_EQ(sqlite_int(t.path(), "SELECT COUNT(*) FROM events"), 0);
  auto audit = db->audit();
  ASSERT_TRUE(audit.is_ok());
  ASSERT_EQ(audit->size(), 1u);
  EXPECT_EQ((*audit)[0].hits_memory, 150);
  EXPECT_EQ((*audit)[0].hits_disk, 50);
  EXPECT_DOUBLE_EQ((*audit)[0].last_use, 59.0);
  auto stats = db->stats();
  ASSERT_TRUE(stats.is_ok());
  EXPECT_EQ(stats->hits_memory, 150);
}

// The remote tier's hits are counted like the local tiers' (audit, stats, the hit rate); its
// events about a function's guard entries (no graph) are no graph's row.
TEST(StoreEvents, RemoteHitsAreCountedWithTheOthers) {
  TempDb t;
  auto db = t.open();
  ASSERT_TRUE(db);
  std::vector<HitCount> hits = {{GraphKey{1, 1}, "cpu", "", std::string(kRemoteTier), 2, 10.0},
                                {GraphKey{1, 1}, "cpu", "", std::string(kMemoryTier), 6, 11.0}};
  ASSERT_TRUE(db->add_hits(hits).is_ok());
  Event guard_entries = event(EventKind::kHit, 0, 12.0);
  guard_entries.graph = GraphKey{};
  guard_entries.tier = std::string(kRemoteTier);
  guard_entries.function = "f";
  const std::vector<Event> events = {guard_entries, event(EventKind::kMiss, 1, 9.0)};
  ASSERT_TRUE(db->append_events(events).is_ok());
  auto audit = db->audit();
  ASSERT_TRUE(audit.is_ok());
  ASSERT_EQ(audit->size(), 1u);
  EXPECT_EQ((*audit)[0].hits_remote, 2);
  EXPECT_EQ((*audit)[0].hits_memory, 6);
  auto stats = db->stats();
  ASSERT_TRUE(stats.is_ok());
  EXPECT_EQ(stats->hits_remote, 2);
  EXPECT_EQ(stats->misses, 1);
  EXPECT_DOUBLE_EQ(stats->hit_rate, 8.0 / 9.0);
}

TEST(StoreEvents, AnExecutableAndItsEventsAreStoredTogether) {
  TempDb t;
  auto db = t.open();
  ASSERT_TRUE(db);
  ExecutableKey key{GraphKey{7, 7}, "cpu", "", 1};
  std::vector<Event> events = {event(EventKind::kMiss, 7, 1), event(EventKind::kCompile, 7, 2),
                               event(EventKind::kStore, 7, 3)};
  ASSERT_TRUE(db->put_executable(key, "blob", 1.0, events).is_ok());
  auto stored = db->events();
  ASSERT_TRUE(stored.is_ok());
  ASSERT_EQ(stored->size(), 3u);
  EXPECT_EQ((*stored)[2].kind, EventKind::kStore);

  // A failing event insert (a trigger stands in for the disk) stores neither.
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(t.path().c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "CREATE TRIGGER full BEFORE INSERT ON events BEGIN SELECT RAISE(FAIL, 'disk full'); END",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(raw);
  auto db2 = t.open();  // sees the trigger
  ASSERT_TRUE(db2);
  ExecutableKey other{GraphKey{8, 8}, "cpu", "", 1};
  EXPECT_FALSE(db2->put_executable(other, "blob", 1.0, events).is_ok());
  auto got = db2->get_executable(other);
  ASSERT_TRUE(got.is_ok());
  EXPECT_FALSE(got->has_value()) << "no executable without its events";
}

TEST(StoreEvents, GcTrimsTheLogToMaxEventsKeepingTheNewest) {
  TempDb t;
  auto db = t.open();
  ASSERT_TRUE(db);
  std::vector<Event> events;
  for (int i = 0; i < 100; ++i) events.push_back(event(EventKind::kMiss, static_cast<uint64_t>(i), i));
  ASSERT_TRUE(db->append_events(events).is_ok());
  auto report = db->gc(GcOptions{.max_events = 10});
  ASSERT_TRUE(report.is_ok()) << report.status().to_string();
  EXPECT_EQ(report->events_removed, 90);
  auto left = db->events();
  ASSERT_TRUE(left.is_ok());
  ASSERT_EQ(left->size(), 10u);
  EXPECT_DOUBLE_EQ(left->front().time, 90);

  report = db->gc(GcOptions{.max_events = -1, .older_than = 95});
  ASSERT_TRUE(report.is_ok());
  EXPECT_EQ(report->events_removed, 5);
}

TEST(StoreEvents, GcDropsSupersededFunctionVersionsOlderThanTheCutoff) {
  TempDb t;
  auto db = t.open();
  ASSERT_TRUE(db);
  FunctionKey v1{"step", "v1", "tc"}, v2{"step", "v2", "tc"}, other{"other", "v1", "tc"};
  ASSERT_TRUE(db->put_function_entry(v1, 0, "a").is_ok());
  ASSERT_TRUE(db->put_function_entry(other, 0, "c").is_ok());
  ASSERT_TRUE(db->put_function_entry(v2, 0, "b").is_ok());
  // Everything is older than a cutoff in the future; only v1 has a newer version.
  auto report = db->gc(GcOptions{.older_than = 4e10});
  ASSERT_TRUE(report.is_ok()) << report.status().to_string();
  EXPECT_EQ(report->function_entries_removed, 1);
  EXPECT_TRUE(db->function_entries(v1)->empty());
  EXPECT_EQ(db->function_entries(v2)->size(), 1u);
  EXPECT_EQ(db->function_entries(other)->size(), 1u) << "the only version of a function is kept";
}

TEST(StoreEvents, GraphKeyPrefixesResolveLikeGit) {
  TempDb t;
  auto db = t.open();
  ASSERT_TRUE(db);
  GraphKey a = *GraphKey::from_hex("abcd0000000000000000000000000001");
  GraphKey b = *GraphKey::from_hex("abcd0000000000000000000000000002");
  GraphKey c = *GraphKey::from_hex("1234000000000000000000000000000f");
  ASSERT_TRUE(db->put_graph(a, "g", 1).is_ok());
  ASSERT_TRUE(db->put_graph(b, "g", 1).is_ok());
  ASSERT_TRUE(db->put_executable({c, "cpu", "", 1}, "x", 1).is_ok());
  EXPECT_EQ(*resolve_graph_key(*db, "1234"), c);
  EXPECT_EQ(*resolve_graph_key(*db, "ABCD0000000000000000000000000002"), b);
  auto ambiguous = resolve_graph_key(*db, "abcd");
  ASSERT_FALSE(ambiguous.is_ok());
  EXPECT_EQ(ambiguous.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ambiguous.status().message().find(b.to_hex()), std::string::npos);
  EXPECT_EQ(resolve_graph_key(*db, "ffff").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(resolve_graph_key(*db, "abc").status().code(), StatusCode::kInvalidArgument) << "too short";
  EXPECT_EQ(resolve_graph_key(*db, "xyz1").status().code(), StatusCode::kInvalidArgument);
}

TEST(StoreEvents, DirectoriesAndFifosAreRefusedBeforeOpening) {
  TempDb t;
  fs::path dir = fs::path(t.path()).parent_path();
  auto d = CacheDb::open({.path = dir.string()});
  ASSERT_FALSE(d.is_ok());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("is a directory"), std::string::npos);
  std::string fifo = (dir / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto f = CacheDb::open({.path = fifo});  // would block forever if SQLite opened it
  ASSERT_FALSE(f.is_ok());
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
}

TEST(StoreEvents, SchemaTwoFilesAreUpgradedInPlace) {
  TempDb t;
  {
    auto db = t.open();
    ASSERT_TRUE(db);
    std::vector<Event> e = {event(EventKind::kStore, 1, 1)};
    ASSERT_TRUE(db->append_events(e).is_ok());
  }
  // Make it look like a version 2 file: no hit_counts, no events.options_digest.
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(t.path().c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "DROP TABLE hit_counts; ALTER TABLE events DROP COLUMN options_digest; "
                              "PRAGMA user_version = 2",
                         nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(raw);
  sqlite3_close(raw);
  auto db = t.open();
  ASSERT_TRUE(db);
  EXPECT_EQ(sqlite_int(t.path(), "PRAGMA user_version"), kSchemaVersion);
  auto events = db->events();
  ASSERT_TRUE(events.is_ok());
  EXPECT_EQ(events->size(), 1u);
  std::vector<HitCount> hits = {{GraphKey{1, 1}, "cpu", "", std::string(kMemoryTier), 2, 5}};
  EXPECT_TRUE(db->add_hits(hits).is_ok());
}

// A file another connection holds locked past the busy timeout is "busy" (kIOError), never
// "not a tracecache database": run then degrades to uncached with the right message.
TEST(StoreEvents, ALockedNewFileIsBusyNotForeign) {
  TempDb t;
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(t.path().c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "BEGIN EXCLUSIVE; CREATE TABLE half_made (x)", nullptr, nullptr, nullptr), SQLITE_OK);
  auto db = CacheDb::open({.path = t.path(), .busy_timeout_ms = 20});
  ASSERT_FALSE(db.is_ok());
  EXPECT_EQ(db.status().code(), StatusCode::kIOError) << db.status().to_string();
  EXPECT_NE(db.status().message().find("busy"), std::string::npos) << db.status().message();
  EXPECT_EQ(db.status().message().find("not a tracecache database"), std::string::npos) << db.status().message();
  ASSERT_EQ(sqlite3_exec(raw, "ROLLBACK", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  EXPECT_TRUE(CacheDb::open({.path = t.path()}).is_ok()) << "once released, the empty file becomes a cache";
}

}  // namespace
}  // namespace tracecache::store
