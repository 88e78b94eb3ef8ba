// The persistent cache (store/sqlite/cache_db.h) and the in-memory LRU in front of it (store/memory/lru.h):
// round trips, the database as untrusted input (checksums, schema versions, foreign and damaged
// files: docs/architecture.md invariant 5), read-only files, sharing one file, the audit log (invariant 8),
// miss classification, gc, and the LRU's byte budget and shared ownership.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "store/sqlite/cache_db.h"
#include "store/memory/lru.h"
#include "tests/test_support.h"

namespace tracecache::store {
namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;

using testing::sqlite_int;
using testing::TempDir;

GraphKey graph_key(uint64_t n) { return GraphKey{0x1234'5678'9abc'def0ULL ^ n, n * 0x9e37'79b9'7f4a'7c15ULL + 1}; }

ExecutableKey exe_key(uint64_t n, std::string backend = "cpu", std::string options = "", uint32_t compiler = 1) {
  return ExecutableKey{graph_key(n), std::move(backend), std::move(options), compiler};
}

std::unique_ptr<CacheDb> open_db(const std::string& path, bool read_only = false) {
  Result<std::unique_ptr<CacheDb>> db = CacheDb::open({.path = path, .read_only = read_only});
  EXPECT_TRUE(db.is_ok()) << db.status().to_string();
  return db.is_ok() ? std::move(*db) : nullptr;
}

// Runs `sql` on the file with a separate, raw SQLite connection.
void raw_exec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  EXPECT_EQ(rc, SQLITE_OK) << sql << ": " << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(db);
}

// Rewrites one blob column with a byte flipped, bypassing the checksum.
void flip_blob_byte(const std::string& path, const std::string& table, size_t offset) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  std::string sql = "UPDATE " + table + " SET blob = ?1";
  const std::string select = "SELECT blob FROM " + table + " LIMIT 1";
  ASSERT_EQ(sqlite3_prepare_v2(db, select.c_str(), -1, &s, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(s), SQLITE_ROW);
  std::string blob(static_cast<const char*>(sqlite3_column_blob(s, 0)),
                   static_cast<size_t>(sqlite3_column_bytes(s, 0)));
  sqlite3_finalize(s);
  ASSERT_LT(offset, blob.size());
  blob[offset] = static_cast<char>(blob[offset] ^ 0x01);
  ASSERT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr), SQLITE_OK);
  sqlite3_bind_blob(s, 1, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
  EXPECT_EQ(sqlite3_step(s), SQLITE_DONE);
  sqlite3_finalize(s);
  sqlite3_close(db);
}

Event make_event(EventKind kind, const GraphKey& graph, double time, std::string reason = "",
                 double duration_ms = 0, std::string backend = "cpu", std::string detail = "") {
  Event e;
  e.time = time;
  e.pid = 42;
  e.kind = kind;
  e.graph = graph;
  e.backend = std::move(backend);
  e.reason = std::move(reason);
  e.duration_ms = duration_ms;
  e.detail = std::move(detail);
  return e;
}

Event hit_event(std::string_view tier, const GraphKey& graph, double time) {
  Event e = make_event(EventKind::kHit, graph, time);
  e.tier = std::string(tier);
  return e;
}

std::string binary_blob(size_t n, uint8_t seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed) & 0xff);
  return s;
}

// ---------------------------------------------------------------- round trips

TEST(CacheDbStore, CreatesParentDirectoriesAndRecordsTheSchema) {
  TempDir dir;
  const std::string path = dir.file("a/b/c/cache.db");
  { auto db = open_db(path); ASSERT_TRUE(db); EXPECT_FALSE(db->read_only()); EXPECT_EQ(db->path(), path); }
  EXPECT_TRUE(fs::exists(path));
  EXPECT_EQ(sqlite_int(path, "PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(sqlite_int(path, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = 'events_by_graph'"), 1);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &s, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(s), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(s, 0)), "wal");
  sqlite3_finalize(s);
  sqlite3_close(db);
  // Reopening an existing database keeps it as it is.
  auto again = open_db(path);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->stats()->graphs, 0);
}

TEST(CacheDbStore, GraphsRoundTripAndPutRepairsDifferentBytes) {
  TempDir dir;
  auto db = open_db(dir.file("c.db"));
  ASSERT_TRUE(db);
  const std::string blob = binary_blob(1000, 3) + "\0\0tail"s;
  ASSERT_TRUE(db->put_graph(graph_key(1), blob, 17).is_ok());
  ASSERT_TRUE(db->put_graph(graph_key(2), "", 0).is_ok());

  auto got = db->get_graph(graph_key(1));
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(**got, blob);
  auto empty = db->get_graph(graph_key(2));
  ASSERT_TRUE(empty.is_ok()) << empty.status().to_string();
  ASSERT_TRUE(empty->has_value());
  EXPECT_EQ(**empty, "");
  auto absent = db->get_graph(graph_key(3));
  ASSERT_TRUE(absent.is_ok());
  EXPECT_FALSE(absent->has_value());

  // Idempotent for identical bytes; different bytes replace the row (a graph's encoding is
  // deterministic, so different bytes mean the stored ones were damaged).
  ASSERT_TRUE(db->put_graph(graph_key(1), blob, 17).is_ok());
  EXPECT_EQ(**db->get_graph(graph_key(1)), blob);
  ASSERT_TRUE(db->put_graph(graph_key(1), "other", 1).is_ok());
  EXPECT_EQ(**db->get_graph(graph_key(1)), "other");
  EXPECT_EQ(db->stats()->graphs, 2);
}

TEST(CacheDbStore, ExecutablesRoundTripAndPutReplaces) {
  TempDir dir;
  auto db = open_db(dir.file("c.db"));
  ASSERT_TRUE(db);
  const std::string blob = binary_blob(4096, 9);
  const ExecutableKey key = exe_key(1, "sim", "d1gest", 3);
  ASSERT_TRUE(db->put_executable(key, blob, 12.5).is_ok());

  auto got = db->get_executable(key);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->blob, blob);
  EXPECT_DOUBLE_EQ((*got)->compile_ms, 12.5);

  // Every part of the key matters (invariant 2).
  for (const ExecutableKey& other : {exe_key(2, "sim", "d1gest", 3), exe_key(1, "cpu", "d1gest", 3),
                                     exe_key(1, "sim", "other", 3), exe_key(1, "sim", "d1gest", 4)}) {
    auto miss = db->get_executable(other);
    ASSERT_TRUE(miss.is_ok());
    EXPECT_FALSE(miss->has_value());
  }

  ASSERT_TRUE(db->put_executable(key, "replacement", 1.0).is_ok());
  got = db->get_executable(key);
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ((*got)->blob, "replacement");
  EXPECT_DOUBLE_EQ((*got)->compile_ms, 1.0);
  auto list = db->list_executables();
  ASSERT_TRUE(list.is_ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].key, key);
  EXPECT_EQ((*list)[0].bytes, 11u);

  ASSERT_TRUE(db->remove_executable(key).is_ok());
  EXPECT_FALSE(db->get_executable(key)->has_value());
  EXPECT_TRUE(db->remove_executable(key).is_ok()) << "removing an absent entry is not an error";
}

TEST(CacheDbStore, TouchAndListExecutables) {
  TempDir dir;
  const std::string path = dir.file("c.db");
  auto db = open_db(path);
  ASSERT_TRUE(db);
  ASSERT_TRUE(db->put_graph(graph_key(1), "g", 7).is_ok());
  ASSERT_TRUE(db->put_executable(exe_key(1), "one", 3).is_ok());
  ASSERT_TRUE(db->put_executable(exe_key(2), "two!", 4).is_ok());
  raw_exec(path, "UPDATE executables SET last_used = 100, created = 100");
  ASSERT_TRUE(db->touch_executable(exe_key(1)).is_ok());
  ASSERT_TRUE(db->touch_executable(exe_key(1)).is_ok());
  ASSERT_TRUE(db->touch_executable(exe_key(9)).is_ok()) << "touching an absent entry is harmless";

  auto list = db->list_executables();
  ASSERT_TRUE(list.is_ok()) << list.status().to_string();
  ASSERT_EQ(list->size(), 2u);
  const EntryInfo& first = (*list)[0];
  EXPECT_EQ(first.key, exe_key(1)) << "most recently used first";
  EXPECT_EQ(first.uses, 2);
  EXPECT_GT(first.last_used, 100);
  EXPECT_DOUBLE_EQ(first.created, 100);
  EXPECT_EQ(first.bytes, 3u);
  EXPECT_DOUBLE_EQ(first.compile_ms, 3);
  EXPECT_EQ(first.graph_nodes, 7);
  const EntryInfo& second = (*list)[1];
  EXPECT_EQ(second.key, exe_key(2));
  EXPECT_EQ(second.uses, 0);
  EXPECT_EQ(second.graph_nodes, 0) << "no graph row";
  // get_executable does not count as a use.
  ASSERT_TRUE(db->get_executable(exe_key(2)).is_ok());
  EXPECT_EQ((*db->list_executables())[1].uses, 0);
}

TEST(CacheDbStore, TwoObjectsOnOneFileSeeEachOthersWrites) {
  TempDir dir;
  const std::string path = dir.file("shared.db");
  auto a = open_db(path);
  auto b = open_db(path);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->put_executable(exe_key(1), "from a", 1).is_ok());
  auto got = b->get_executable(exe_key(1));
  ASSERT_TRUE(got.is_ok() && got->has_value());
  EXPECT_EQ((*got)->blob, "from a");

  std::vector<Event> events = {make_event(EventKind::kStore, graph_key(1), 1)};
  ASSERT_TRUE(b->append_events(events).is_ok());
  ASSERT_TRUE(b->put_graph(graph_key(5), "graph from b", 1).is_ok());
  auto seen = a->events();
  ASSERT_TRUE(seen.is_ok());
  ASSERT_EQ(seen->size(), 1u);
  EXPECT_EQ((*seen)[0].kind, EventKind::kStore);
  EXPECT_EQ(**a->get_graph(graph_key(5)), "graph from b");
}

TEST(CacheDbStore, ALockedDatabaseFailsWritesWithIOErrorAndRecovers) {
  TempDir dir;
  const std::string path = dir.file("c.db");
  auto db = CacheDb::open({.path = path, .busy_timeout_ms = 20});
  ASSERT_TRUE(db.is_ok());
  ASSERT_TRUE((*db)->put_executable(exe_key(1), "before", 1).is_ok());
  sqlite3* locker = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &locker), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(locker, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
  Status st = (*db)->put_executable(exe_key(2), "blocked", 1);
  EXPECT_EQ(st.code(), StatusCode::kIOError) << st.to_string();
  EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
  auto read = (*db)->get_executable(exe_key(1));
  EXPECT_TRUE(read.is_ok()) << "WAL readers are not blocked by a writer: " << read.status().to_string();
  sqlite3_exec(locker, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(locker);
  // No transaction was left open: the next write goes through.
  EXPECT_TRUE((*db)->put_executable(exe_key(2), "after", 1).is_ok());
  EXPECT_EQ((*(*db)->get_executable(exe_key(2)))->blob, "after");
}

// ---------------------------------------------------------------- untrusted input

TEST(CacheDbStore, AFlippedExecutableByteIsCorruptionAndVerifyFindsIt) {
  TempDir dir;
  const std::string path = dir.file("c.db");
  auto db = open_db(path);
  ASSERT_TRUE(db);
  ASSERT_TRUE(db->put_executable(exe_key(1, "cpu", "opts", 2), binary_blob(300, 1), 5).is_ok());
  ASSERT_TRUE(db->put_graph(graph_key(1), binary_blob(200, 2), 4).is_ok());
  auto clean = db->verify();
  ASSERT_TRUE(clean.is_ok());
  EXPECT_TRUE(clean->empty());

  flip_blob_byte(path, "executables", 150);
  auto got = db->get_executable(exe_key(1, "cpu", "opts", 2));
  ASSERT_FALSE(got.is_ok());
  EXPECT_EQ(got.status().code(), StatusCode::kCorruption);
  EXPECT_NE(got.status().message().find("checksum"), std::string::npos) << got.status().message();
  EXPECT_TRUE(db->get_graph(graph_key(1)).is_ok()) << "only the damaged row is affected";

  flip_blob_byte(path, "graphs", 0);
  auto graph = db->get_graph(graph_key(1));
  ASSERT_FALSE(graph.is_ok());
  EXPECT_EQ(graph.status().code(), StatusCode::kCorruption);

  auto problems = db->verify();
  ASSERT_TRUE(problems.is_ok()) << problems.status().to_string();
  ASSERT_EQ(problems->size(), 2u);
  EXPECT_EQ((*problems)[0].table, "graphs");
  EXPECT_EQ((*problems)[0].key, graph_key(1).to_hex());
  EXPECT_EQ((*problems)[0].problem, "checksum mismatch");
  EXPECT_EQ((*problems)[1].table, "executables");
  EXPECT_NE((*problems)[1].key.find(graph_key(1).to_hex()), std::string::npos);
  EXPECT_NE((*problems)[1].key.find("cpu"), std::string::npos);
  EXPECT_EQ((*problems)[1].problem, "checksum mismatch");

  // The caller's remedy works: remove, then the entry is simply absent.
  ASSERT_TRUE(db->remove_executable(exe_key(1, "cpu", "opts", 2)).is_ok());
  EXPECT_FALSE(db->get_executable(exe_key(1, "cpu", "opts", 2))->has_value());
}

TEST(CacheDbStore, ANewerSchemaIsUnsupportedWithAClearMessage) {
  TempDir dir;
  const std::string path = dir.file("future.db");
  { auto db = open_db(path); ASSERT_TRUE(db); }
  raw_exec(path, "PRAGMA user_version = 7");
  for (bool read_only : {false, true}) {
    auto db = CacheDb::open({.path = path, .read_only = read_only});
    ASSERT_FALSE(db.is_ok());
    EXPECT_EQ(db.status().code(), StatusCode::kUnsupported);
    const std::string& m = db.status().message();
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find("schema version 7"), std::string::npos) << m;
    EXPECT_NE(m.find(fmt::format("newer than this tracecache ({})", kSchemaVersion)), std::string::npos) << m;
  }
  EXPECT_EQ(sqlite_int(path, "PRAGMA user_version"), 7) << "the file is left alone";
}

TEST(CacheDbStore, AFileThatIsNotADatabaseIsCorruption) {
  TempDir dir;
  const std::string path = dir.file("notes.txt");
  {
    std::ofstream f(path, std::ios::binary);
    for (int i = 0; i < 200; ++i) f << "this is a text file, not a database\n";
  }
  for (bool read_only : {false, true}) {
    auto db = CacheDb::open({.path = path, .read_only = read_only});
    ASSERT_FALSE(db.is_ok());
    EXPECT_EQ(db.status().code(), StatusCode::kCorruption);
    EXPECT_NE(db.status().message().find("'" + path + "' is not a tracecache database"), std::string::npos)
        << db.status().message();
  }
}

TEST(CacheDbStore, AnotherApplicationsDatabaseIsCorruption) {
  TempDir dir;
  const std::string path = dir.file("other.db");
  raw_exec(path, "CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)");
  auto db = CacheDb::open({.path = path});
  ASSERT_FALSE(db.is_ok());
  EXPECT_EQ(db.status().code(), StatusCode::kCorruption);
  EXPECT_NE(db.status().message().find("not a tracecache database"), std::string::npos) << db.status().message();
  EXPECT_EQ(sqlite_int(path, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'graphs'"), 0) << "nothing was added";
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(raw, "PRAGMA journal_mode", -1, &s, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(s), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(s, 0)), "delete") << "nor switched to WAL";
  sqlite3_finalize(s);
  sqlite3_close(raw);

  // Right version, wrong tables.
  const std::string half = dir.file("half.db");
  raw_exec(half, "CREATE TABLE graphs (key TEXT); PRAGMA user_version = 1;");
  auto h = CacheDb::open({.path = half});
  ASSERT_FALSE(h.is_ok());
  EXPECT_EQ(h.status().code(), StatusCode::kCorruption) << h.status().to_string();
}

// Random bytes over the middle of the file: every call returns ok or an error Status, never
// crashes (run under the sanitizers too).
TEST(CacheDbStore, RandomBytesInTheFileNeverCrash) {
  TempDir dir;
  const std::string pristine = dir.file("pristine.db");
  {
    auto db = open_db(pristine);
    ASSERT_TRUE(db);
    std::vector<Event> events;
    for (uint64_t i = 0; i < 60; ++i) {
      ASSERT_TRUE(db->put_graph(graph_key(i), binary_blob(700, static_cast<uint8_t>(i)), 5).is_ok());
      ASSERT_TRUE(db->put_executable(exe_key(i), binary_blob(900, static_cast<uint8_t>(i + 1)), 2).is_ok());
      events.push_back(make_event(EventKind::kMiss, graph_key(i), static_cast<double>(i), "new graph"));
      events.push_back(make_event(EventKind::kCompile, graph_key(i), static_cast<double>(i), "", 3));
    }
    ASSERT_TRUE(db->append_events(events).is_ok());
  }
  const auto size = fs::file_size(pristine);
  ASSERT_GT(size, 8192u);
  std::mt19937_64 rng(1234);
  int failures_seen = 0;
  for (int round = 0; round < 24; ++round) {
    const std::string path = dir.file("damaged" + std::to_string(round) + ".db");
    fs::copy_file(pristine, path);
    {
      std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
      // Round 0 hits the header page; the rest land anywhere after it.
      const uint64_t at = round == 0 ? 16 : 100 + rng() % (size - 1200);
      f.seekp(static_cast<std::streamoff>(at));
      for (int i = 0; i < 1024; ++i) f.put(static_cast<char>(rng() & 0xff));
    }
    auto check = [&](const Status& st) {
      if (!st.is_ok()) {
        ++failures_seen;
        EXPECT_TRUE(st.code() == StatusCode::kCorruption || st.code() == StatusCode::kIOError) << st.to_string();
      }
    };
    auto db = CacheDb::open({.path = path});
    check(db.status());
    if (!db.is_ok()) continue;
    CacheDb& d = **db;
    for (uint64_t i = 0; i < 60; i += 7) {
      check(d.get_graph(graph_key(i)).status());
      check(d.get_executable(exe_key(i)).status());
      check(d.classify_miss(exe_key(i, "cpu", "", 9)).status());
      check(d.touch_executable(exe_key(i)));
    }
    check(d.events().status());
    check(d.list_executables().status());
    check(d.stats().status());
    check(d.audit().status());
    check(d.verify().status());
    check(d.put_executable(exe_key(1000), "new", 1));
    std::vector<Event> more = {hit_event(kDiskTier, graph_key(3), 99)};
    check(d.append_events(more));
    check(d.gc(10000).status());
  }
  EXPECT_GT(failures_seen, 0) << "the damage should have been noticed somewhere";
}

// ---------------------------------------------------------------- read-only

void expect_writes_fail(CacheDb& db) {
  std::vector<Event> events = {hit_event(kDiskTier, graph_key(1), 5)};
  const Status writes[] = {
      db.put_graph(graph_key(8), "g", 1),   db.put_executable(exe_key(8), "e", 1),
      db.remove_executable(exe_key(1)),     db.touch_executable(exe_key(1)),
      db.append_events(events),             db.gc(0).status(),
  };
  for (const Status& st : writes) {
    EXPECT_EQ(st.code(), StatusCode::kIOError) << st.to_string();
    EXPECT_NE(st.message().find("read-only"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(db.path()), std::string::npos) << st.message();
  }
}

void fill_for_read_only(const std::string& path) {
  auto db = open_db(path);
  ASSERT_TRUE(db);
  ASSERT_TRUE(db->put_graph(graph_key(1), "graph one", 3).is_ok());
  ASSERT_TRUE(db->put_executable(exe_key(1), "exe one", 2).is_ok());
  std::vector<Event> events = {make_event(EventKind::kStore, graph_key(1), 1)};
  ASSERT_TRUE(db->append_events(events).is_ok());
}

TEST(CacheDbReadOnly, TheReadOnlyOptionAllowsReadsAndRefusesWrites) {
  TempDir dir;
  const std::string path = dir.file("c.db");
  fill_for_read_only(path);
  auto db = open_db(path, /*read_only=*/true);
  ASSERT_TRUE(db);
  EXPECT_TRUE(db->read_only());
  EXPECT_EQ(**db->get_graph(graph_key(1)), "graph one");
  EXPECT_EQ((*db->get_executable(exe_key(1)))->blob, "exe one");
  EXPECT_EQ(db->events()->size(), 1u);
  EXPECT_EQ(db->list_executables()->size(), 1u);
  EXPECT_EQ(db->stats()->executables, 1);
  EXPECT_EQ(db->audit()->size(), 1u);
  EXPECT_TRUE(db->verify()->empty());
  EXPECT_EQ(*db->classify_miss(exe_key(1, "cpu", "", 2)), MissReason::kStaleCompiler);
  expect_writes_fail(*db);
  // Nothing changed, as a writable connection sees.
  auto rw = open_db(path);
  ASSERT_TRUE(rw);
  EXPECT_EQ(rw->events()->size(), 1u);
  EXPECT_EQ(rw->list_executables()->size(), 1u);
  EXPECT_FALSE(rw->get_graph(graph_key(8))->has_value());
  // A writer and a read-only reader on one file: the reader sees the new data.
  ASSERT_TRUE(rw->put_executable(exe_key(2), "exe two", 1).is_ok());
  EXPECT_EQ((*db->get_executable(exe_key(2)))->blob, "exe two");
}

TEST(CacheDbReadOnly, ReadOnlyDoesNotCreateAMissingFile) {
  TempDir dir;
  const std::string path = dir.file("sub/missing.db");
  auto db = CacheDb::open({.path = path, .read_only = true});
  ASSERT_FALSE(db.is_ok());
  EXPECT_NE(db.status().message().find(path), std::string::npos) << db.status().message();
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(dir.file("sub")));
}

TEST(CacheDbReadOnly, AnUncreatableDirectoryIsAnIOErrorNamingThePath) {
  TempDir dir;
  { std::ofstream(dir.file("plain-file")) << "x"; }
  const std::string path = dir.file("plain-file/sub/cache.db");
  auto db = CacheDb::open({.path = path});
  ASSERT_FALSE(db.is_ok());
  EXPECT_EQ(db.status().code(), StatusCode::kIOError);
  EXPECT_NE(db.status().message().find(path), std::string::npos) << db.status().message();
}

// Real file permissions. Root ignores them, so the checks run in a child process that drops to
// an unprivileged user when started as root; as any other user they run unchanged.
// Returns 0 when every check held, else the number of the first failed check.
int read_only_checks_in_child(const std::string& path, bool expect_open) {
  if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) return 100;
  auto db = CacheDb::open({.path = path});
  if (!expect_open) {
    if (db.is_ok()) return 1;
    if (db.status().code() != StatusCode::kIOError) return 2;
    if (db.status().message().find(path) == std::string::npos) return 3;
    return 0;
  }
  if (!db.is_ok()) return 10;
  CacheDb& d = **db;
  if (!d.read_only()) return 11;
  auto g = d.get_graph(graph_key(1));
  if (!g.is_ok() || !g->has_value() || **g != "graph one") return 12;
  auto e = d.get_executable(exe_key(1));
  if (!e.is_ok() || !e->has_value() || (*e)->blob != "exe one") return 13;
  auto ev = d.events();
  if (!ev.is_ok() || ev->size() != 1) return 14;
  if (!d.stats().is_ok() || !d.audit().is_ok() || !d.verify().is_ok()) return 15;
  std::vector<Event> events = {hit_event(kDiskTier, graph_key(1), 5)};
  for (const Status& st : {d.put_graph(graph_key(8), "g", 1), d.put_executable(exe_key(8), "e", 1),
                           d.touch_executable(exe_key(1)), d.append_events(events), d.gc(0).status()}) {
    if (st.code() != StatusCode::kIOError) return 16;
  }
  return 0;
}

int run_in_child(const std::string& path, bool expect_open) {
  fflush(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(read_only_checks_in_child(path, expect_open));
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

TEST(CacheDbReadOnly, AWriteProtectedFileOpensReadOnly) {
  TempDir dir;
  const std::string path = dir.file("c.db");
  fill_for_read_only(path);
  fs::permissions(dir.path(), fs::perms::all);  // the directory stays writable
  fs::permissions(path, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  EXPECT_EQ(run_in_child(path, true), 0);
}

TEST(CacheDbReadOnly, ADatabaseInAReadOnlyDirectoryOpensReadOnly) {
  TempDir dir;
  const std::string path = dir.file("c.db");
  fill_for_read_only(path);
  ASSERT_FALSE(fs::exists(path + "-wal")) << "the last connection removes the WAL";
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                            fs::perms::others_read);
  fs::permissions(dir.path(), fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                                  fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  EXPECT_EQ(run_in_child(path, true), 0);
}

TEST(CacheDbReadOnly, AnUnreadableFileIsAnIOErrorNamingThePath) {
  TempDir dir;
  const std::string path = dir.file("c.db");
  fill_for_read_only(path);
  fs::permissions(dir.path(), fs::perms::all);
  fs::permissions(path, fs::perms::none);
  EXPECT_EQ(run_in_child(path, false), 0);
}

// ---------------------------------------------------------------- audit log

TEST(CacheDbStore, EventsKeepOrderAndEveryField) {
  TempDir dir;
  auto db = open_db(dir.file("c.db"));
  ASSERT_TRUE(db);
  EXPECT_TRUE(db->append_events({}).is_ok());
  std::vector<Event> first = {
      make_event(EventKind::kMiss, graph_key(1), 10.25, "new graph", 0, "cpu", ""),
      make_event(EventKind::kCompile, graph_key(1), 10.5, "", 12.75, "cpu", "fused 3 kernels"),
  };
  first[0].id = 999;  // ignored
  first[1].pid = -7;
  std::vector<Event> second;
  for (EventKind k : {EventKind::kStore, EventKind::kHit, EventKind::kHit, EventKind::kEvict, EventKind::kCorrupt,
                      EventKind::kStoreFailed}) {
    second.push_back(make_event(k, graph_key(2), 20, "", 0, "sim", event_name(k)));
  }
  second[1].tier = kMemoryTier;
  second[2].tier = kDiskTier;
  ASSERT_TRUE(db->append_events(first).is_ok());
  ASSERT_TRUE(db->append_events(second).is_ok());

  auto all = db->events();
  ASSERT_TRUE(all.is_ok()) << all.status().to_string();
  ASSERT_EQ(all->size(), 8u);
  for (size_t i = 1; i < all->size(); ++i) EXPECT_LT((*all)[i - 1].id, (*all)[i].id);
  const Event& c = (*all)[1];
  EXPECT_EQ(c.kind, EventKind::kCompile);
  EXPECT_DOUBLE_EQ(c.time, 10.5);
  EXPECT_EQ(c.pid, -7);
  EXPECT_EQ(c.graph, graph_key(1));
  EXPECT_EQ(c.backend, "cpu");
  EXPECT_DOUBLE_EQ(c.duration_ms, 12.75);
  EXPECT_EQ(c.detail, "fused 3 kernels");
  EXPECT_EQ((*all)[0].reason, "new graph");
  EXPECT_NE((*all)[0].id, 999);
  for (size_t i = 0; i < second.size(); ++i) {
    EXPECT_EQ((*all)[i + 2].kind, second[i].kind);
    EXPECT_EQ((*all)[i + 2].tier, second[i].tier) << "a hit comes back with its tier";
  }
  EXPECT_EQ(sqlite_int(dir.file("c.db"), "SELECT group_concat(kind, ' ') = 'store hit_memory hit_disk evict corrupt "
                                          "store_failed' FROM (SELECT kind FROM events WHERE graph_key = '" +
                                              graph_key(2).to_hex() + "' ORDER BY id)"),
            1)
      << "the stored kind names are the ones the events table has always held";

  auto after = db->events((*all)[3].id);
  ASSERT_TRUE(after.is_ok());
  ASSERT_EQ(after->size(), 4u);
  EXPECT_EQ((*after)[0].id, (*all)[4].id);
  auto limited = db->events((*all)[0].id, 2);
  ASSERT_TRUE(limited.is_ok());
  ASSERT_EQ(limited->size(), 2u);
  EXPECT_EQ((*limited)[0].id, (*all)[1].id);
  EXPECT_EQ((*limited)[1].id, (*all)[2].id);
  EXPECT_TRUE(db->events((*all)[7].id)->empty());
}

TEST(CacheDbStore, AnUnknownEventKindInTheFileIsSkippedAndCounted) {
  TempDir dir;
  const std::string path = dir.file("c.db");
  auto db = open_db(path);
  ASSERT_TRUE(db);
  raw_exec(path, "INSERT INTO events (time, pid, kind, graph_key, backend, reason, duration_ms, detail) "
                 "VALUES (1, 1, 'teleport', '" + graph_key(1).to_hex() + "', 'cpu', '', 0, '')");
  raw_exec(path, "INSERT INTO events (time, pid, kind, graph_key, backend, reason, duration_ms, detail) "
                 "VALUES (2, 1, 'miss', 'not-a-key', 'cpu', 'new graph', 0, '')");
  std::vector<Event> good = {make_event(EventKind::kMiss, graph_key(2), 3)};
  ASSERT_TRUE(db->append_events(good).is_ok());
  int64_t malformed = -1;
  auto events = db->events(0, 0, &malformed);
  ASSERT_TRUE(events.is_ok()) << events.status().to_string();
  EXPECT_EQ(malformed, 2);
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].graph, graph_key(2));
  auto audit = db->audit(&malformed);
  ASSERT_TRUE(audit.is_ok()) << audit.status().to_string() << ": one bad row must not fail audit";
  EXPECT_EQ(malformed, 1) << "the miss with a damaged key";
  ASSERT_EQ(audit->size(), 1u) << "the unknown kind counts nowhere, the damaged key is skipped";
  EXPECT_EQ((*audit)[0].misses, 1);
}

TEST(CacheDbStore, ClassifyMissInAllFourCases) {
  TempDir dir;
  auto db = open_db(dir.file("c.db"));
  ASSERT_TRUE(db);
  auto classify = [&](const ExecutableKey& k) {
    Result<MissReason> r = db->classify_miss(k);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return r.is_ok() ? *r : MissReason::kNewGraph;
  };
  auto log = [&](EventKind kind, uint64_t graph, std::string backend = "cpu") {
    std::vector<Event> e = {make_event(kind, graph_key(graph), 1, "", 0, std::move(backend))};
    ASSERT_TRUE(db->append_events(e).is_ok());
  };

  EXPECT_EQ(classify(exe_key(1)), MissReason::kNewGraph);
  log(EventKind::kMiss, 1);
  log(EventKind::kCompile, 1);
  EXPECT_EQ(classify(exe_key(1)), MissReason::kNewGraph) << "misses and compiles are not stores";

  log(EventKind::kStore, 1);
  EXPECT_EQ(classify(exe_key(1)), MissReason::kEvicted) << "stored once, now gone";
  EXPECT_EQ(classify(exe_key(1, "sim")), MissReason::kNewGraph) << "other backends are separate";

  log(EventKind::kCorrupt, 1);
  EXPECT_EQ(classify(exe_key(1)), MissReason::kCorrupt);
  ASSERT_TRUE(db->append_events(std::vector<Event>{hit_event(kMemoryTier, graph_key(1), 1)}).is_ok());
  EXPECT_EQ(classify(exe_key(1)), MissReason::kCorrupt) << "a hit after the corruption changes nothing";
  log(EventKind::kStore, 1);
  EXPECT_EQ(classify(exe_key(1)), MissReason::kEvicted) << "stored again after the corruption";

  log(EventKind::kEvict, 2);
  EXPECT_EQ(classify(exe_key(2)), MissReason::kEvicted);

  ASSERT_TRUE(db->put_executable(exe_key(3, "cpu", "", 1), "old compiler", 1).is_ok());
  EXPECT_EQ(classify(exe_key(3, "cpu", "", 2)), MissReason::kStaleCompiler);
  EXPECT_EQ(classify(exe_key(3, "cpu", "other options", 2)), MissReason::kNewOptions)
      << "other options are not a stale compiler";
  log(EventKind::kCorrupt, 3);
  EXPECT_EQ(classify(exe_key(3, "cpu", "", 2)), MissReason::kStaleCompiler);
}

TEST(CacheDbStore, GcEvictsLeastRecentlyUsedFirstAndRecordsEvents) {
  TempDir dir;
  const std::string path = dir.file("c.db");
  auto db = open_db(path);
  ASSERT_TRUE(db);
  ASSERT_TRUE(db->put_executable(exe_key(1), std::string(100, 'a'), 1).is_ok());
  ASSERT_TRUE(db->put_executable(exe_key(2, "sim"), std::string(100, 'b'), 1).is_ok());
  ASSERT_TRUE(db->put_executable(exe_key(3), std::string(100, 'c'), 1).is_ok());
  ASSERT_TRUE(db->put_executable(exe_key(4), std::string(100, 'd'), 1).is_ok());
  // Last used: 3 oldest, then 2 and 4 (tie: 2 created earlier), then 1.
  raw_exec(path, "UPDATE executables SET created = 10, last_used = 50");
  raw_exec(path, "UPDATE executables SET last_used = 40 WHERE blob = CAST('" + std::string(100, 'c') + "' AS BLOB)");
  raw_exec(path, "UPDATE executables SET created = 5 WHERE backend = 'sim'");
  raw_exec(path, "UPDATE executables SET last_used = 60 WHERE blob = CAST('" + std::string(100, 'a') + "' AS BLOB)");

  auto none = db->gc(400);
  ASSERT_TRUE(none.is_ok());
  EXPECT_TRUE(none->empty());

  auto first = db->gc(250);
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  ASSERT_EQ(first->size(), 2u);
  EXPECT_EQ((*first)[0].key, exe_key(3));
  EXPECT_EQ((*first)[1].key, exe_key(2, "sim"));
  EXPECT_EQ((*first)[0].bytes, 100u);
  EXPECT_EQ(db->stats()->executable_bytes, 200u);

  auto rest = db->gc(0);
  ASSERT_TRUE(rest.is_ok());
  ASSERT_EQ(rest->size(), 2u);
  EXPECT_EQ((*rest)[0].key, exe_key(4));
  EXPECT_EQ((*rest)[1].key, exe_key(1));
  EXPECT_TRUE(db->list_executables()->empty());

  auto events = db->events();
  ASSERT_TRUE(events.is_ok());
  ASSERT_EQ(events->size(), 4u);
  const uint64_t order[] = {3, 2, 4, 1};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ((*events)[i].kind, EventKind::kEvict);
    EXPECT_EQ((*events)[i].graph, graph_key(order[i]));
    EXPECT_EQ((*events)[i].detail, "gc");
    EXPECT_GT((*events)[i].time, 0);
  }
  EXPECT_EQ((*events)[1].backend, "sim");
  EXPECT_EQ(*db->classify_miss(exe_key(3)), MissReason::kEvicted);
}

TEST(CacheDbStore, AuditCountsHitsMissesAndSavedTime) {
  TempDir dir;
  auto db = open_db(dir.file("c.db"));
  ASSERT_TRUE(db);
  const GraphKey g1 = graph_key(1), g2 = graph_key(2), g3 = graph_key(3);
  std::vector<Event> events = {
      make_event(EventKind::kMiss, g1, 1, "new graph"),
      make_event(EventKind::kCompile, g1, 2, "", 10),
      make_event(EventKind::kStore, g1, 3),
      hit_event(kMemoryTier, g1, 4),
      hit_event(kMemoryTier, g1, 5),
      hit_event(kDiskTier, g1, 6),
      make_event(EventKind::kMiss, g1, 7, "evicted", 0, "sim"),
      make_event(EventKind::kCompile, g1, 8, "", 20),
      make_event(EventKind::kMiss, g2, 10, "new graph"),
      make_event(EventKind::kCorrupt, g2, 11, "", 0, "cpu", "checksum mismatch"),
  };
  for (int i = 0; i < 7; ++i) events.push_back(make_event(EventKind::kMiss, g3, 3 + i, "miss " + std::to_string(i)));
  ASSERT_TRUE(db->append_events(events).is_ok());

  auto rows = db->audit();
  ASSERT_TRUE(rows.is_ok()) << rows.status().to_string();
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_EQ((*rows)[0].graph, g2) << "most recently used first";
  EXPECT_EQ((*rows)[1].graph, g3);
  EXPECT_EQ((*rows)[2].graph, g1);

  const GraphAudit& a = (*rows)[2];
  EXPECT_EQ(a.hits_memory, 2);
  EXPECT_EQ(a.hits_disk, 1);
  EXPECT_EQ(a.misses, 2);
  EXPECT_EQ(a.compiles, 2);
  EXPECT_EQ(a.corrupt, 0);
  EXPECT_DOUBLE_EQ(a.compile_ms_total, 30);
  EXPECT_DOUBLE_EQ(a.saved_ms, 3 * 15.0);
  EXPECT_DOUBLE_EQ(a.last_use, 8);
  ASSERT_EQ(a.recent_misses.size(), 2u);
  EXPECT_DOUBLE_EQ(a.recent_misses[0].time, 7);
  EXPECT_EQ(a.recent_misses[0].reason, "evicted");
  EXPECT_EQ(a.recent_misses[0].backend, "sim");
  EXPECT_EQ(a.recent_misses[1].reason, "new graph");

  const GraphAudit& b = (*rows)[0];
  EXPECT_EQ(b.misses, 1);
  EXPECT_EQ(b.corrupt, 1);
  EXPECT_EQ(b.compiles, 0);
  EXPECT_DOUBLE_EQ(b.saved_ms, 0) << "never compiled";
  EXPECT_DOUBLE_EQ(b.last_use, 11);

  const GraphAudit& c = (*rows)[1];
  EXPECT_EQ(c.misses, 7);
  ASSERT_EQ(c.recent_misses.size(), 5u) << "at most five";
  EXPECT_EQ(c.recent_misses[0].reason, "miss 6");
  EXPECT_EQ(c.recent_misses[4].reason, "miss 2");
}

TEST(CacheDbStore, StatsCountTablesEventsAndFileSize) {
  TempDir dir;
  auto db = open_db(dir.file("c.db"));
  ASSERT_TRUE(db);
  auto empty = db->stats();
  ASSERT_TRUE(empty.is_ok()) << empty.status().to_string();
  EXPECT_EQ(empty->graphs, 0);
  EXPECT_EQ(empty->executables, 0);
  EXPECT_DOUBLE_EQ(empty->hit_rate, 0) << "no lookups";
  EXPECT_GT(empty->file_bytes, 0u);

  ASSERT_TRUE(db->put_graph(graph_key(1), std::string(10, 'g'), 1).is_ok());
  ASSERT_TRUE(db->put_graph(graph_key(2), std::string(30, 'g'), 1).is_ok());
  ASSERT_TRUE(db->put_executable(exe_key(1), std::string(5000, 'e'), 1).is_ok());
  std::vector<Event> events = {
      make_event(EventKind::kMiss, graph_key(1), 1), make_event(EventKind::kCompile, graph_key(1), 2, "", 4),
      hit_event(kMemoryTier, graph_key(1), 3), hit_event(kMemoryTier, graph_key(1), 4),
      hit_event(kDiskTier, graph_key(1), 5), make_event(EventKind::kStore, graph_key(1), 6),
  };
  ASSERT_TRUE(db->append_events(events).is_ok());
  auto s = db->stats();
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->graphs, 2);
  EXPECT_EQ(s->graph_bytes, 40u);
  EXPECT_EQ(s->executables, 1);
  EXPECT_EQ(s->executable_bytes, 5000u);
  EXPECT_EQ(s->hits_memory, 2);
  EXPECT_EQ(s->hits_disk, 1);
  EXPECT_EQ(s->misses, 1);
  EXPECT_EQ(s->compiles, 1);
  EXPECT_DOUBLE_EQ(s->hit_rate, 0.75);
  EXPECT_GE(s->file_bytes, 5000u);
  const int64_t page_size = sqlite_int(db->path(), "PRAGMA page_size");
  ASSERT_GT(page_size, 0);
  EXPECT_EQ(s->file_bytes % static_cast<uint64_t>(page_size), 0u);
}

// ---------------------------------------------------------------- names and paths

TEST(CacheDbStore, NamesOfReasonsAndKinds) {
  EXPECT_EQ(miss_reason_name(MissReason::kNewGraph), "new graph");
  EXPECT_EQ(miss_reason_name(MissReason::kEvicted), "evicted");
  EXPECT_EQ(miss_reason_name(MissReason::kCorrupt), "corrupt");
  EXPECT_EQ(miss_reason_name(MissReason::kStaleCompiler), "stale compiler version");
  EXPECT_EQ(miss_reason_name(MissReason::kUnreadable), "cache unreadable");
  struct Named {
    EventKind kind;
    std::string_view tier;
    const char* name;
  };
  const Named kinds[] = {
      {EventKind::kHit, kMemoryTier, "hit_memory"}, {EventKind::kHit, kDiskTier, "hit_disk"},
      {EventKind::kHit, "remote", "hit_remote"},    {EventKind::kMiss, "", "miss"},
      {EventKind::kCompile, "", "compile"},         {EventKind::kStore, "", "store"},
      {EventKind::kEvict, "", "evict"},             {EventKind::kCorrupt, "", "corrupt"},
      {EventKind::kStoreFailed, "", "store_failed"}, {EventKind::kRecompile, "", "recompile"},
      {EventKind::kFallback, "", "fallback"},       {EventKind::kGraphBreak, "", "graph_break"},
  };
  for (const auto& [kind, tier, name] : kinds) {
    EXPECT_EQ(event_name(kind, tier), name);
    EXPECT_EQ(parse_event_name(name), (ParsedEventName{kind, std::string(tier)})) << name;
  }
  for (const char* bad : {"hit", "hit_", "hit_Memory", "hit_disk2", "", "MISS"}) {
    EXPECT_FALSE(parse_event_name(bad).has_value()) << bad;
  }
}

TEST(CachePath, FlagThenEnvironmentThenXdgThenHome) {
  const CachePathEnv all{.tracecache_db = "/env/db.sqlite", .xdg_cache_home = "/xdg", .home = "/home/u"};
  EXPECT_EQ(resolve_cache_path("/flag.db", all), "/flag.db");
  EXPECT_EQ(resolve_cache_path("", all), "/env/db.sqlite");
  const CachePathEnv xdg{.tracecache_db = "", .xdg_cache_home = "/xdg", .home = "/home/u"};
  EXPECT_EQ(resolve_cache_path("", xdg), "/xdg/tracecache/cache.db");
  const CachePathEnv home{.tracecache_db = "", .xdg_cache_home = "", .home = "/home/u"};
  EXPECT_EQ(resolve_cache_path("", home), "/home/u/.cache/tracecache/cache.db");
  const CachePathEnv relative_xdg{.tracecache_db = "", .xdg_cache_home = "relative", .home = "/home/u"};
  EXPECT_EQ(resolve_cache_path("", relative_xdg), "/home/u/.cache/tracecache/cache.db")
      << "the XDG spec says to ignore a relative path";
  EXPECT_EQ(resolve_cache_path("rel.db", CachePathEnv{}), "rel.db");
}

// ---------------------------------------------------------------- LruCache

TEST(LruCache, GetPutAndMissingKeys) {
  LruCache<int, std::string> lru(100);
  EXPECT_EQ(lru.get(1), nullptr);
  EXPECT_TRUE(lru.put(1, std::make_shared<const std::string>("one"), 10).empty());
  ASSERT_NE(lru.get(1), nullptr);
  EXPECT_EQ(*lru.get(1), "one");
  EXPECT_EQ(lru.size(), 1u);
  EXPECT_EQ(lru.bytes(), 10u);
  EXPECT_EQ(lru.capacity(), 100u);
}

TEST(LruCache, EvictsLeastRecentlyUsedFirst) {
  LruCache<int, int> lru(30);
  for (int k = 1; k <= 3; ++k) EXPECT_TRUE(lru.put(k, std::make_shared<const int>(k), 10).empty());
  ASSERT_NE(lru.get(1), nullptr);  // 2 is now the least recently used
  EXPECT_EQ(lru.put(4, std::make_shared<const int>(4), 10), std::vector<int>{2});
  EXPECT_EQ(lru.get(2), nullptr);
  EXPECT_NE(lru.get(1), nullptr);
  // A big entry pushes out several, oldest first: order is now 3 (oldest), 4, 1.
  ASSERT_NE(lru.get(4), nullptr);
  ASSERT_NE(lru.get(1), nullptr);
  EXPECT_EQ(lru.put(5, std::make_shared<const int>(5), 20), (std::vector<int>{3, 4}));
  EXPECT_EQ(lru.bytes(), 30u);
  EXPECT_EQ(lru.size(), 2u);
}

TEST(LruCache, KeepsToItsByteBudgetButNeverEvictsTheNewEntry) {
  LruCache<int, int> lru(50);
  EXPECT_TRUE(lru.put(1, std::make_shared<const int>(1), 20).empty());
  EXPECT_TRUE(lru.put(2, std::make_shared<const int>(2), 20).empty());
  EXPECT_EQ(lru.put(3, std::make_shared<const int>(3), 80), (std::vector<int>{1, 2}));
  EXPECT_EQ(lru.size(), 1u);
  EXPECT_NE(lru.get(3), nullptr) << "an entry larger than the budget is still kept, alone";
  EXPECT_EQ(lru.bytes(), 80u);
  EXPECT_EQ(lru.put(4, std::make_shared<const int>(4), 1), std::vector<int>{3});
  EXPECT_EQ(lru.bytes(), 1u);
}

TEST(LruCache, ReplacingAndErasingKeepTheByteCount) {
  LruCache<std::string, int> lru(100);
  EXPECT_TRUE(lru.put("a", std::make_shared<const int>(1), 40).empty());
  EXPECT_TRUE(lru.put("a", std::make_shared<const int>(2), 60).empty());
  EXPECT_EQ(lru.size(), 1u);
  EXPECT_EQ(lru.bytes(), 60u);
  EXPECT_EQ(*lru.get("a"), 2);
  EXPECT_TRUE(lru.put("b", std::make_shared<const int>(3), 40).empty());
  EXPECT_TRUE(lru.erase("a"));
  EXPECT_FALSE(lru.erase("a"));
  EXPECT_EQ(lru.bytes(), 40u);
  EXPECT_EQ(lru.get("a"), nullptr);
}

TEST(LruCache, AValueInUseSurvivesEviction) {
  LruCache<GraphKey, std::string, GraphKeyHasher> lru(10);
  lru.put(graph_key(1), std::make_shared<const std::string>("running"), 10);
  std::shared_ptr<const std::string> held = lru.get(graph_key(1));
  std::weak_ptr<const std::string> watch = held;
  EXPECT_EQ(lru.put(graph_key(2), std::make_shared<const std::string>("new"), 10),
            std::vector<GraphKey>{graph_key(1)});
  EXPECT_EQ(lru.get(graph_key(1)), nullptr);
  ASSERT_FALSE(watch.expired()) << "the caller still owns it";
  EXPECT_EQ(*held, "running");
  held.reset();
  EXPECT_TRUE(watch.expired()) << "and it is freed once the caller lets go";
}

TEST(CacheDbStore, AVersion1DatabaseIsUpgradedInPlace) {
  TempDir dir;
  const std::string path = dir.file("v1.db");
  {
    auto db = open_db(path);
    ASSERT_TRUE(db);
    ASSERT_TRUE(db->put_graph(graph_key(1), "g", 1).is_ok());
  }
  // Make it look like a version-1 file: no functions table.
  raw_exec(path, "DROP TABLE functions; PRAGMA user_version = 1");
  auto ro = CacheDb::open({.path = path, .read_only = true});
  ASSERT_FALSE(ro.is_ok());
  EXPECT_EQ(ro.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(ro.status().message().find("with write access to upgrade"), std::string::npos);
  auto db = open_db(path);
  ASSERT_TRUE(db);
  EXPECT_EQ(sqlite_int(path, "PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(**db->get_graph(graph_key(1)), "g") << "existing data survives the upgrade";
  FunctionKey fk{"f", "v1", "tc"};
  ASSERT_TRUE(db->put_function_entry(fk, 0, "entry").is_ok());
  ASSERT_TRUE(db->add_function_hits(fk, 0, 3).is_ok());
  auto entries = db->function_entries(fk);
  ASSERT_TRUE(entries.is_ok());
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].blob, "entry");
  EXPECT_EQ((*entries)[0].hits, 3);
  EXPECT_FALSE((*entries)[0].corrupt);
  raw_exec(path, "UPDATE functions SET blob = X'00'");
  entries = db->function_entries(fk);
  ASSERT_TRUE(entries.is_ok());
  EXPECT_TRUE((*entries)[0].corrupt);
  auto audit = db->function_audit();
  ASSERT_TRUE(audit.is_ok());
  ASSERT_EQ(audit->size(), 1u);
  EXPECT_EQ((*audit)[0].key, fk);
  EXPECT_EQ((*audit)[0].entries[0].hits, 3);
}

}  // namespace
}  // namespace tracecache::store
