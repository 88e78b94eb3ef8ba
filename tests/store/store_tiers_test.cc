// The executable tiers (store/tiers): the memory tier keyed by the full ExecutableKey, the SQLite
// tier treating its bytes as untrusted, and the tiered store that looks them up in order,
// promotes hits into the faster tiers and says which tier served.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "store/sqlite/cache_db.h"
#include "store/tiers/memory_tier.h"
#include "store/tiers/sqlite_tier.h"
#include "store/tiers/tiered_store.h"
#include "tests/test_support.h"

namespace tracecache::store {
namespace {

using testing::TempDir;

// A stand-in for replay/compile/'s Executable: the key it was built for, a payload and a size.
struct FakeExe {
  ExecutableKey built_for;
  std::string payload;
  uint64_t bytes = 100;
  uint64_t footprint_bytes() const { return bytes; }
};

std::string describe(const ExecutableKey& k) {
  return fmt::format("{}|{}|{}|{}", k.graph.to_hex(), k.backend, k.options_digest, k.compiler_version);
}

// Bytes: "<key>\n<payload>"; decoding refuses bytes built for another key, as the runtime's
// codec does (backend load + graph key and compiler version check).
class FakeCodec final : public ExecutableCodec<FakeExe> {
 public:
  std::string encode(const FakeExe& exe) override { return describe(exe.built_for) + "\n" + exe.payload; }
  Result<FakeExe> decode(std::string_view bytes, const ExecutableKey& key) override {
    size_t nl = bytes.find('\n');
    if (nl == std::string_view::npos) return parse_error("no key line");
    if (bytes.substr(0, nl) != describe(key)) return parse_error("built for another key");
    return FakeExe{key, std::string(bytes.substr(nl + 1))};
  }
};

// A tier that cannot answer (think: a remote cache that is down).
class UnreachableTier final : public ExecutableStore<FakeExe> {
 public:
  std::string_view name() const override { return "remote"; }
  Result<std::shared_ptr<const FakeExe>> get(const ExecutableKey&) override { return io_error("unreachable"); }
  Result<std::vector<ExecutableKey>> put(const ExecutableKey&, std::shared_ptr<const FakeExe>,
                                         const PutContext&) override {
    return io_error("unreachable");
  }
  Status remove(const ExecutableKey&) override {
    ++removes;
    return io_error("unreachable");
  }
  int removes = 0;
};

ExecutableKey key(uint64_t graph, std::string backend = "cpu", std::string digest = "", uint32_t compiler = 1) {
  return {GraphKey{graph, 77}, std::move(backend), std::move(digest), compiler};
}

std::shared_ptr<const FakeExe> exe(const ExecutableKey& k, std::string payload, uint64_t bytes = 100) {
  return std::make_shared<const FakeExe>(FakeExe{k, std::move(payload), bytes});
}

struct Tiers {
  TempDir dir;
  std::unique_ptr<CacheDb> db = std::move(CacheDb::open({.path = dir.file("c.db")})).value_or_throw();
  FakeCodec codec;
  MemoryTier<FakeExe> memory{1000};
  SqliteTier<FakeExe> disk{db.get(), &codec};
  TieredStore<FakeExe> store{{&memory, &disk}};

  void corrupt_blob_of(const ExecutableKey& k, std::string_view blob) {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(dir.file("c.db").c_str(), &raw), SQLITE_OK);
    std::string sql = fmt::format("UPDATE executables SET blob = CAST('{}' AS BLOB) WHERE graph_key = '{}'", blob,
                                  k.graph.to_hex());
    EXPECT_EQ(sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(raw);
  }
};

TEST(TieredStore, ADiskHitIsPromotedIntoMemoryAndTheLookupSaysWhichTierServed) {
  Tiers t;
  const ExecutableKey k = key(1);
  ASSERT_TRUE(t.disk.put(k, exe(k, "compiled"), PutContext{}).is_ok());
  EXPECT_EQ(t.memory.size(), 0u);

  TieredStore<FakeExe>::Lookup first = t.store.get(k);
  ASSERT_TRUE(first.exe);
  EXPECT_EQ(first.exe->payload, "compiled");
  EXPECT_EQ(t.store.tier(first.tier).name(), kDiskTier);
  EXPECT_TRUE(first.problems.empty());
  ASSERT_EQ(first.promotions.size(), 1u) << "promoted into the one faster tier";
  EXPECT_EQ(first.promotions[0].tier, 0u);
  EXPECT_TRUE(first.promotions[0].status.is_ok());
  EXPECT_EQ(t.memory.size(), 1u);

  TieredStore<FakeExe>::Lookup second = t.store.get(k);
  ASSERT_TRUE(second.exe);
  EXPECT_EQ(t.store.tier(second.tier).name(), kMemoryTier);
  EXPECT_EQ(second.exe, first.exe) << "memory hands out the promoted executable itself";
  EXPECT_TRUE(second.promotions.empty());
}

TEST(TieredStore, AMissInEveryTierIsAMissWithNoProblems) {
  Tiers t;
  TieredStore<FakeExe>::Lookup r = t.store.get(key(9));
  EXPECT_FALSE(r.exe);
  EXPECT_TRUE(r.problems.empty());
  EXPECT_TRUE(r.promotions.empty());
}

TEST(TieredStore, PutWritesThroughWithTheGraphAndEventsInTheDisksTransaction) {
  Tiers t;
  const ExecutableKey k = key(2);
  Event stored;
  stored.kind = EventKind::kStore;
  stored.graph = k.graph;
  stored.backend = k.backend;
  std::vector<Event> events = {stored};
  std::vector<TieredStore<FakeExe>::Put> puts = t.store.put(k, exe(k, "fresh"), {2.5, nullptr, events});
  ASSERT_EQ(puts.size(), 2u);
  for (const auto& p : puts) EXPECT_TRUE(p.status.is_ok()) << p.status.to_string();
  EXPECT_EQ(t.memory.size(), 1u);
  auto row = t.db->get_executable(k);
  ASSERT_TRUE(row.is_ok() && row->has_value());
  EXPECT_DOUBLE_EQ((*row)->compile_ms, 2.5);
  auto log = t.db->events();
  ASSERT_TRUE(log.is_ok());
  ASSERT_EQ(log->size(), 1u);
  EXPECT_EQ((*log)[0].kind, EventKind::kStore);
}

TEST(TieredStore, ADiskEntryFailingItsChecksumIsAMissAndIsRemoved) {
  Tiers t;
  const ExecutableKey k = key(3);
  ASSERT_TRUE(t.disk.put(k, exe(k, "good"), PutContext{}).is_ok());
  t.corrupt_blob_of(k, "flipped bits");

  TieredStore<FakeExe>::Lookup r = t.store.get(k);
  EXPECT_FALSE(r.exe) << "never served";
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_EQ(t.store.tier(r.problems[0].tier).name(), kDiskTier);
  EXPECT_EQ(r.problems[0].status.code(), StatusCode::kCorruption);
  EXPECT_NE(r.problems[0].status.message().find("checksum"), std::string::npos) << r.problems[0].status.message();
  EXPECT_TRUE(r.problems[0].removal.is_ok());
  auto row = t.db->get_executable(k);
  ASSERT_TRUE(row.is_ok());
  EXPECT_FALSE(row->has_value()) << "the bad row is gone";
  EXPECT_EQ(t.memory.size(), 0u) << "nothing was promoted";
}

TEST(TieredStore, BytesWithAGoodChecksumBuiltForAnotherKeyAreCorruptToo) {
  Tiers t;
  const ExecutableKey mine = key(4), other = key(4, "sim");
  // The row under `mine` holds an executable built for `other`, with a matching checksum.
  ASSERT_TRUE(t.db->put_executable(mine, t.codec.encode(FakeExe{other, "foreign"}), 1).is_ok());
  TieredStore<FakeExe>::Lookup r = t.store.get(mine);
  EXPECT_FALSE(r.exe);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_EQ(r.problems[0].status.code(), StatusCode::kCorruption) << "a codec failure is corruption";
  EXPECT_EQ(r.problems[0].status.message(), "built for another key");
  auto row = t.db->get_executable(mine);
  ASSERT_TRUE(row.is_ok());
  EXPECT_FALSE(row->has_value());
}

TEST(TieredStore, ATierThatCannotAnswerIsSkippedAndKeepsItsEntries) {
  TempDir dir;
  auto db = std::move(CacheDb::open({.path = dir.file("c.db")})).value_or_throw();
  FakeCodec codec;
  MemoryTier<FakeExe> memory(1000);
  UnreachableTier remote;
  SqliteTier<FakeExe> disk(db.get(), &codec);
  TieredStore<FakeExe> store({&memory, &remote, &disk});
  const ExecutableKey k = key(5);
  ASSERT_TRUE(disk.put(k, exe(k, "on disk"), PutContext{}).is_ok());

  TieredStore<FakeExe>::Lookup r = store.get(k);
  ASSERT_TRUE(r.exe);
  EXPECT_EQ(r.tier, 2u);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_EQ(r.problems[0].tier, 1u);
  EXPECT_EQ(r.problems[0].status.code(), StatusCode::kIOError);
  EXPECT_EQ(remote.removes, 0) << "an unreadable tier may hold a good entry: nothing is removed";
  ASSERT_EQ(r.promotions.size(), 2u) << "promoted into memory and the remote tier, fastest first";
  EXPECT_EQ(r.promotions[0].tier, 0u);
  EXPECT_TRUE(r.promotions[0].status.is_ok());
  EXPECT_EQ(r.promotions[1].tier, 1u);
  EXPECT_EQ(r.promotions[1].status.code(), StatusCode::kIOError) << "a failed promotion is reported";
}

TEST(TieredStore, TheMemoryTierIsKeyedByTheWholeExecutableKey) {
  MemoryTier<FakeExe> memory(1000);
  const ExecutableKey k = key(6);
  ASSERT_TRUE(memory.put(k, exe(k, "cpu v1"), PutContext{}).is_ok());
  for (const ExecutableKey& other : {key(6, "sim"), key(6, "cpu", "digest"), key(6, "cpu", "", 2), key(7)}) {
    Result<std::shared_ptr<const FakeExe>> r = memory.get(other);
    ASSERT_TRUE(r.is_ok());
    EXPECT_FALSE(*r) << describe(other) << " must not share " << describe(k) << "'s entry";
  }
  ASSERT_TRUE(memory.put(key(6, "sim"), exe(key(6, "sim"), "sim v1"), PutContext{}).is_ok());
  ASSERT_TRUE(memory.put(key(6, "cpu", "", 2), exe(key(6, "cpu", "", 2), "cpu v2"), PutContext{}).is_ok());
  EXPECT_EQ(memory.size(), 3u) << "one graph, three executables";
  EXPECT_EQ((*memory.get(k))->payload, "cpu v1");
  EXPECT_EQ((*memory.get(key(6, "sim")))->payload, "sim v1");
  EXPECT_EQ((*memory.get(key(6, "cpu", "", 2)))->payload, "cpu v2");
}

TEST(TieredStore, TwoBackendsSharingTheTiersNeverServeEachOther) {
  Tiers t;
  const ExecutableKey cpu = key(8, "cpu"), sim = key(8, "sim", "h100");
  t.store.put(cpu, exe(cpu, "for cpu"), PutContext{});
  TieredStore<FakeExe>::Lookup r = t.store.get(sim);
  EXPECT_FALSE(r.exe);
  EXPECT_TRUE(r.problems.empty());
  t.store.put(sim, exe(sim, "for sim"), PutContext{});
  EXPECT_EQ(t.store.get(cpu).exe->payload, "for cpu");
  EXPECT_EQ(t.store.get(sim).exe->payload, "for sim");
}

TEST(TieredStore, EvictionsFromAFullTierAreReportedWithThePut) {
  TempDir dir;
  auto db = std::move(CacheDb::open({.path = dir.file("c.db")})).value_or_throw();
  FakeCodec codec;
  MemoryTier<FakeExe> memory(150);  // room for one 100-byte executable
  SqliteTier<FakeExe> disk(db.get(), &codec);
  TieredStore<FakeExe> store({&memory, &disk});
  const ExecutableKey a = key(10), b = key(11);
  ASSERT_TRUE(store.put(a, exe(a, "a"), PutContext{})[0].status.is_ok());
  std::vector<TieredStore<FakeExe>::Put> puts = store.put(b, exe(b, "b"), PutContext{});
  ASSERT_EQ(puts[0].evicted.size(), 1u);
  EXPECT_EQ(puts[0].evicted[0], a);
  EXPECT_TRUE(puts[1].evicted.empty()) << "the disk keeps both";
  // a comes back from disk; promoting it evicts b from memory.
  TieredStore<FakeExe>::Lookup r = store.get(a);
  ASSERT_TRUE(r.exe);
  EXPECT_EQ(r.tier, 1u);
  ASSERT_EQ(r.promotions.size(), 1u);
  ASSERT_EQ(r.promotions[0].evicted.size(), 1u);
  EXPECT_EQ(r.promotions[0].evicted[0], b);
}

TEST(TieredStore, AReadOnlyDiskServesButRefusesWritesSayingSo) {
  TempDir dir;
  const std::string path = dir.file("c.db");
  FakeCodec codec;
  const ExecutableKey k = key(12);
  {
    auto db = std::move(CacheDb::open({.path = path})).value_or_throw();
    SqliteTier<FakeExe> disk(db.get(), &codec);
    ASSERT_TRUE(disk.put(k, exe(k, "stored"), PutContext{}).is_ok());
  }
  auto db = std::move(CacheDb::open({.path = path, .read_only = true})).value_or_throw();
  SqliteTier<FakeExe> disk(db.get(), &codec);
  Result<std::shared_ptr<const FakeExe>> got = disk.get(k);
  ASSERT_TRUE(got.is_ok() && *got);
  EXPECT_EQ((*got)->payload, "stored");
  Result<std::vector<ExecutableKey>> put = disk.put(key(13), exe(key(13), "new"), PutContext{});
  ASSERT_FALSE(put.is_ok());
  EXPECT_EQ(put.status().code(), StatusCode::kIOError);
  EXPECT_EQ(put.status().message(), fmt::format("cache database '{}' is read-only", path));
}

}  // namespace
}  // namespace tracecache::store
