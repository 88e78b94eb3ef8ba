// The store queries `tracecache report` reads the audit through (issue 14 part 5):
// CacheDb::audit_events (the events an AuditFilter selects, newest first, bounded) and
// CacheDb::hit_spans (hit counts with their first and latest time, selected the same way).
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <string>
#include <vector>

#include "store/sqlite/cache_db.h"
#include "tests/test_support.h"

namespace tracecache::store {
namespace {

Event scoped(EventKind kind, uint64_t graph, double time, std::string program, std::string function = {}) {
  Event e;
  e.time = time;
  e.pid = 1;
  e.kind = kind;
  e.graph = GraphKey{graph, 1};
  e.backend = "cpu";
  e.program = std::move(program);
  e.function = std::move(function);
  return e;
}

TEST(ReportQueries, AuditEventsSelectByTheFilterNewestFirstAndBounded) {
  testing::TempDir dir;
  auto db = CacheDb::open({.path = dir.db()});
  ASSERT_TRUE(db.is_ok()) << db.status().to_string();
  std::vector<Event> events = {
      scoped(EventKind::kMiss, 1, 100, "fixtures/programs/mlp.trace"),
      scoped(EventKind::kCompile, 1, 101, "fixtures/programs/mlp.trace"),
      scoped(EventKind::kMiss, 2, 102, "other.trace"),
      scoped(EventKind::kRecompile, 0, 103, "mlp.trace", "mlp.trace:step"),
  };
  ASSERT_TRUE((*db)->append_events(events).is_ok());

  auto all = (*db)->audit_events({}, 10);
  ASSERT_TRUE(all.is_ok()) << all.status().to_string();
  ASSERT_EQ(all->size(), 4u);
  EXPECT_EQ((*all)[0].kind, EventKind::kRecompile) << "newest first";
  EXPECT_EQ((*all)[0].function, "mlp.trace:step");

  auto mlp = (*db)->audit_events({.program = "mlp"}, 10);
  ASSERT_TRUE(mlp.is_ok());
  ASSERT_EQ(mlp->size(), 3u) << "mlp names fixtures/programs/mlp.trace and mlp.trace, not other.trace";
  for (const Event& e : *mlp) EXPECT_NE(e.program, "other.trace");

  auto fn = (*db)->audit_events({.function = "mlp.trace:step"}, 10);
  ASSERT_TRUE(fn.is_ok());
  ASSERT_EQ(fn->size(), 1u);

  auto since = (*db)->audit_events({.since = 101.5}, 10);
  ASSERT_TRUE(since.is_ok());
  EXPECT_EQ(since->size(), 2u);

  auto two = (*db)->audit_events({}, 2);
  ASSERT_TRUE(two.is_ok());
  ASSERT_EQ(two->size(), 2u) << "at most limit";
  EXPECT_EQ((*two)[1].kind, EventKind::kMiss);
  EXPECT_EQ((*two)[1].program, "other.trace");

  // A damaged row is skipped and counted.
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(dir.db().c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "UPDATE events SET kind = 'nonsense' WHERE time = 100", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  int64_t malformed = 0;
  auto rest = (*db)->audit_events({}, 10, &malformed);
  ASSERT_TRUE(rest.is_ok());
  EXPECT_EQ(rest->size(), 3u);
  EXPECT_EQ(malformed, 1);
}

TEST(ReportQueries, HitSpansCarryTheirFirstAndLatestTimeAndFollowTheGraphsProgram) {
  testing::TempDir dir;
  auto db = CacheDb::open({.path = dir.db()});
  ASSERT_TRUE(db.is_ok()) << db.status().to_string();
  const GraphKey a{7, 1}, b{8, 1};
  ASSERT_TRUE((*db)->put_graph(a, "graph a", 1).is_ok());
  ASSERT_TRUE((*db)->put_graph(b, "graph b", 1).is_ok());
  ASSERT_TRUE((*db)->put_graph_sources(a, GraphSources{"mlp.trace", "", {}}).is_ok());
  ASSERT_TRUE((*db)->put_graph_sources(b, GraphSources{"other.trace", "", {}}).is_ok());
  std::vector<HitCount> first = {{a, "cpu", "", std::string(kMemoryTier), 3, 10},
                                 {b, "cpu", "", std::string(kDiskTier), 1, 12}};
  std::vector<HitCount> later = {{a, "cpu", "", std::string(kMemoryTier), 2, 20}};
  ASSERT_TRUE((*db)->add_hits(first).is_ok());
  ASSERT_TRUE((*db)->add_hits(later).is_ok());

  auto spans = (*db)->hit_spans({}, 10);
  ASSERT_TRUE(spans.is_ok()) << spans.status().to_string();
  ASSERT_EQ(spans->size(), 2u);
  const HitSpan& s = (*spans)[0];  // latest first
  EXPECT_EQ(s.graph, a);
  EXPECT_EQ(s.tier, kMemoryTier);
  EXPECT_EQ(s.hits, 5);
  EXPECT_EQ(s.first_time, 10);
  EXPECT_EQ(s.last_time, 20);
  EXPECT_EQ((*spans)[1].tier, kDiskTier);

  auto mlp = (*db)->hit_spans({.program = "mlp"}, 10);
  ASSERT_TRUE(mlp.is_ok());
  ASSERT_EQ(mlp->size(), 1u) << "hit counts follow their graph's stored program";
  EXPECT_EQ((*mlp)[0].graph, a);
  auto one = (*db)->hit_spans({}, 1);
  ASSERT_TRUE(one.is_ok());
  EXPECT_EQ(one->size(), 1u);
}

// `audit --limit` and the report read a page of graph rows: the newest first, the rest counted
// (not read); details are cut at a UTF-8 boundary and say so (issue 36).
TEST(ReportQueries, AuditReadsAPageOfRowsAndCutsLongDetails) {
  testing::TempDir dir;
  auto db = CacheDb::open({.path = dir.db()});
  ASSERT_TRUE(db.is_ok()) << db.status().to_string();
  std::vector<Event> events;
  for (uint64_t g = 1; g <= 7; ++g) events.push_back(scoped(EventKind::kMiss, g, 100.0 + static_cast<double>(g), "mlp.trace"));
  // The newest graph's miss: 'x' then 300 two-byte characters (U+00E9).
  std::string detail = "x";
  for (int i = 0; i < 300; ++i) detail += "\xc3\xa9";
  events.back().detail = detail;
  ASSERT_TRUE((*db)->append_events(events).is_ok());

  int64_t total = -1;
  auto page = (*db)->audit(nullptr, {}, {.limit = 3, .max_detail_bytes = 10}, &total);
  ASSERT_TRUE(page.is_ok()) << page.status().to_string();
  EXPECT_EQ(total, 7);
  ASSERT_EQ(page->size(), 3u);
  EXPECT_EQ((*page)[0].graph, (GraphKey{7, 1}));
  EXPECT_EQ((*page)[2].graph, (GraphKey{5, 1}));
  ASSERT_EQ((*page)[0].recent_misses.size(), 1u);
  const GraphAudit::Miss& cut = (*page)[0].recent_misses[0];
  EXPECT_TRUE(cut.detail_cut);
  EXPECT_EQ(cut.detail, detail.substr(0, 9));  // 10 bytes would split a character: 9
  EXPECT_FALSE((*page)[1].recent_misses.empty() || (*page)[1].recent_misses[0].detail_cut);

  auto whole = (*db)->audit(nullptr, {}, {}, &total);
  ASSERT_TRUE(whole.is_ok());
  EXPECT_EQ(whole->size(), 7u);
  EXPECT_EQ(total, 7);
  EXPECT_EQ((*whole)[0].recent_misses[0].detail, detail);
  EXPECT_FALSE((*whole)[0].recent_misses[0].detail_cut);

  auto cut_events = (*db)->audit_events({}, 1, nullptr, 4);
  ASSERT_TRUE(cut_events.is_ok());
  ASSERT_EQ(cut_events->size(), 1u);
  EXPECT_EQ(cut_events->front().detail, detail.substr(0, 3));

  auto programs = (*db)->programs(10);
  ASSERT_TRUE(programs.is_ok());
  EXPECT_EQ(*programs, std::vector<std::string>{"mlp.trace"});
}

}  // namespace
}  // namespace tracecache::store
