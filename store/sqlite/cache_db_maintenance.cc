// CacheDb: queries and maintenance for the CLI (ls, stats, audit, gc, verify, graph-key
// prefixes, the database path).
#include "store/sqlite/cache_db.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <utility>

#include "store/sqlite/cache_db_impl.h"

namespace tracecache::store {

namespace fs = std::filesystem;
using db_internal::checksum_of;
using db_internal::is_corruption_code;
using db_internal::now_seconds;
using db_internal::Query;
using db_internal::Stmt;

Result<EntryInfo> CacheDb::Impl::entry_from_row(const Query& q) const {
  Result<GraphKey> key = parse_key(q.col_text(0), "executables");
  if (!key.is_ok()) return key.status();
  int64_t compiler = q.col_i64(3);
  if (compiler < 0 || compiler > static_cast<int64_t>(UINT32_MAX)) {
    return corruption(fmt::format("cache database '{}': executables has compiler version {} out of range", path,
                                  compiler));
  }
  EntryInfo e;
  e.key = {*key, q.col_text(1), q.col_text(2), static_cast<uint32_t>(compiler)};
  e.bytes = static_cast<uint64_t>(std::max<int64_t>(q.col_i64(4), 0));
  e.created = q.col_real(5);
  e.last_used = q.col_real(6);
  e.uses = q.col_i64(7);
  e.compile_ms = q.col_real(8);
  e.graph_nodes = q.col_i64(9);
  return e;
}

Result<std::vector<EntryInfo>> CacheDb::list_executables() {
  Query q(impl_->list_exes);
  std::vector<EntryInfo> out;
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) {
    // A malformed row (damaged key columns) can never be looked up: it is not listed here,
    // verify() reports it and gc() removes it.
    Result<EntryInfo> e = impl_->entry_from_row(q);
    if (e.is_ok()) out.push_back(std::move(*e));
  }
  if (rc != SQLITE_DONE) return impl_->error(rc, "listing executables");
  return out;
}

Result<CacheStats> CacheDb::stats() {
  return impl_->read_transaction("reading statistics", [&]() -> Result<CacheStats> {
    CacheStats s;
    auto one_row = [&](const Stmt& stmt, auto&& read) -> Status {
      Query q(stmt);
      int rc = q.step();
      if (rc != SQLITE_ROW) return impl_->error(rc == SQLITE_DONE ? SQLITE_CORRUPT : rc, "reading statistics");
      read(q);
      return Status::ok();
    };
    int64_t page_count = 0, page_size = 0;
    Status st = one_row(impl_->count_graphs, [&](const Query& q) {
      s.graphs = q.col_i64(0);
      s.graph_bytes = static_cast<uint64_t>(std::max<int64_t>(q.col_i64(1), 0));
    });
    if (st.is_ok()) {
      st = one_row(impl_->count_exes, [&](const Query& q) {
        s.executables = q.col_i64(0);
        s.executable_bytes = static_cast<uint64_t>(std::max<int64_t>(q.col_i64(1), 0));
      });
    }
    if (st.is_ok()) {
      st = one_row(impl_->count_events, [&](const Query& q) {
        s.hits_memory = q.col_i64(0);
        s.hits_disk = q.col_i64(1);
        s.misses = q.col_i64(2);
        s.compiles = q.col_i64(3);
        s.hits_remote = q.col_i64(4);
      });
    }
    if (st.is_ok()) st = one_row(impl_->page_count, [&](const Query& q) { page_count = q.col_i64(0); });
    if (st.is_ok()) st = one_row(impl_->page_size, [&](const Query& q) { page_size = q.col_i64(0); });
    if (!st.is_ok()) return st;
    s.file_bytes = static_cast<uint64_t>(std::max<int64_t>(page_count * page_size, 0));
    int64_t hits = s.hits_memory + s.hits_disk + s.hits_remote;
    int64_t lookups = hits + s.misses;
    s.hit_rate = lookups > 0 ? static_cast<double>(hits) / static_cast<double>(lookups) : 0;
    return s;
  });
}

namespace {

// SQL true when column `col` names the program bound as ?1: the name as recorded, or a file
// name of it with or without ".trace" ("mlp" and "mlp.trace" select "fixtures/programs/mlp.trace").
std::string program_matches(std::string_view col) {
  return fmt::format("({0} IN (?1, ?1 || '.trace') OR substr({0}, -length(?1) - 1) = '/' || ?1 OR "
                     "substr({0}, -length(?1) - 7) = '/' || ?1 || '.trace')", col);
}

// The conditions `f` puts on events (the parameters: ?1 program, ?2 function, ?3 kind, ?4 since,
// ?5 graph key), as " AND ..." clauses.
std::string event_conditions(const AuditFilter& f) {
  std::string sql;
  if (!f.program.empty()) sql += " AND " + program_matches("program");
  if (!f.function.empty()) sql += " AND function = ?2";
  if (!f.kind.empty()) sql += " AND kind = ?3";
  if (f.since > 0) sql += " AND time >= ?4";
  if (f.graph) sql += " AND graph_key = ?5";
  return sql;
}

// The same for hit_counts, which know no program or function: those select through the graph's
// stored sources.
std::string hit_conditions(const AuditFilter& f) {
  std::string sql;
  if (!f.program.empty()) {
    sql += fmt::format(" AND graph_key IN (SELECT graph_key FROM graph_sources WHERE {})", program_matches("program"));
  }
  if (!f.function.empty()) sql += " AND graph_key IN (SELECT graph_key FROM graph_sources WHERE function = ?2)";
  if (!f.kind.empty()) sql += " AND tier = ?3";
  if (f.since > 0) sql += " AND last_time >= ?4";
  if (f.graph) sql += " AND graph_key = ?5";
  return sql;
}

// A statement made for one query (its text depends on the filter), finalized when done.
class AdHoc {
 public:
  ~AdHoc() { sqlite3_finalize(stmt_.get()); }
  Stmt& stmt() { return stmt_; }
  // Binds the filter's parameters (?1 to ?5; unused ones are harmless).
  static void bind(Query& q, const AuditFilter& f) {
    q.text(1, f.program).text(2, f.function).text(3, f.kind).real(4, f.since);
    q.text(5, f.graph ? f.graph->to_hex() : std::string());
  }

 private:
  Stmt stmt_;
};

// Cuts `text` to at most `max_bytes` bytes, back to the start of a UTF-8 sequence; true if it cut.
bool cut_utf8(std::string& text, int64_t max_bytes) {
  if (max_bytes < 0 || text.size() <= static_cast<size_t>(max_bytes)) return false;
  size_t n = static_cast<size_t>(max_bytes);
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  text.resize(n);
  return true;
}

// The detail column as read: whole, or (max_bytes >= 0) its first max_bytes + 1 characters, which
// are more than max_bytes bytes exactly when the whole detail is (cut_utf8 then cuts them).
std::string detail_column(int64_t max_bytes) {
  return max_bytes < 0 ? "detail" : fmt::format("substr(detail, 1, {})", max_bytes + 1);
}

}  // namespace

Result<std::vector<GraphAudit>> CacheDb::audit(int64_t* malformed, const AuditFilter& filter, const AuditPage& page,
                                               int64_t* rows_total) {
  if (malformed) *malformed = 0;
  if (rows_total) *rows_total = 0;
  const std::string sql = fmt::format(
      "SELECT graph_key, SUM(hm), SUM(hd), SUM(ms), SUM(cp), SUM(cr), SUM(cms), MAX(t), SUM(hr) FROM ("
      "SELECT graph_key, kind = 'hit_memory' AS hm, kind = 'hit_disk' AS hd, kind = 'miss' AS ms, "
      "kind = 'compile' AS cp, kind = 'corrupt' AS cr, CASE WHEN kind = 'compile' THEN duration_ms ELSE 0 END "
      "AS cms, time AS t, 0 AS hr FROM events WHERE kind IN ('hit_memory', 'hit_disk', 'miss', 'compile', "
      "'corrupt', 'store', 'evict', 'store_failed'){} UNION ALL "
      "SELECT graph_key, CASE WHEN tier = 'hit_memory' THEN hits ELSE 0 END, CASE WHEN tier = 'hit_disk' THEN "
      "hits ELSE 0 END, 0, 0, 0, 0, last_time, CASE WHEN tier = 'hit_remote' THEN hits ELSE 0 END FROM hit_counts "
      "WHERE 1{}) "
      "GROUP BY graph_key ORDER BY MAX(t) DESC, graph_key",
      event_conditions(filter), hit_conditions(filter));
  const std::string misses_sql = fmt::format(
      "SELECT time, reason, backend, {}, program FROM events WHERE graph_key = ?6 AND kind = 'miss'{} "
      "ORDER BY time DESC, id DESC LIMIT 5",
      detail_column(page.max_detail_bytes), event_conditions(filter));
  constexpr const char* kProgramSql =
      "SELECT program FROM (SELECT program, 1 AS o FROM graph_sources WHERE graph_key = ?1 AND program <> '' "
      "UNION ALL SELECT program, 2 FROM (SELECT program FROM events WHERE graph_key = ?1 AND program <> '' "
      "ORDER BY id DESC LIMIT 1)) ORDER BY o LIMIT 1";
  AdHoc rows_stmt, misses_stmt, program_stmt;
  for (auto [stmt, text] : {std::pair{&rows_stmt, sql.c_str()}, std::pair{&misses_stmt, misses_sql.c_str()},
                            std::pair{&program_stmt, kProgramSql}}) {
    Status st = impl_->prepare(stmt->stmt(), text);
    if (!st.is_ok()) return st;
  }
  return impl_->read_transaction("reading the audit log", [&]() -> Result<std::vector<GraphAudit>> {
    std::vector<GraphAudit> out;
    {
      Query q(rows_stmt.stmt());
      AdHoc::bind(q, filter);
      int rc;
      while ((rc = q.step()) == SQLITE_ROW) {
        std::optional<GraphKey> key = GraphKey::from_hex(q.col_text(0));
        if (!key) {  // rows with a damaged key: skipped and counted, never fatal
          if (malformed) {
            *malformed += q.col_i64(1) + q.col_i64(2) + q.col_i64(3) + q.col_i64(4) + q.col_i64(5) + q.col_i64(8);
          }
          continue;
        }
        if (rows_total) ++*rows_total;
        // Rows past the page are counted, not kept: 300k graphs must not become 300k objects.
        if (page.limit >= 0 && out.size() >= static_cast<size_t>(page.limit)) continue;
        GraphAudit a;
        a.graph = *key;
        a.hits_memory = q.col_i64(1);
        a.hits_disk = q.col_i64(2);
        a.misses = q.col_i64(3);
        a.compiles = q.col_i64(4);
        a.corrupt = q.col_i64(5);
        a.compile_ms_total = q.col_real(6);
        a.last_use = q.col_real(7);
        a.hits_remote = q.col_i64(8);
        if (a.compiles > 0) {
          a.saved_ms = static_cast<double>(a.hits_memory + a.hits_disk + a.hits_remote) * a.compile_ms_total /
                       static_cast<double>(a.compiles);
        }
        out.push_back(std::move(a));
      }
      if (rc != SQLITE_DONE) return impl_->error(rc, "reading the audit log");
    }
    for (GraphAudit& a : out) {
      {
        Query q(program_stmt.stmt());
        q.text(1, a.graph.to_hex());
        int rc = q.step();
        if (rc == SQLITE_ROW) a.program = q.col_text(0);
        else if (rc != SQLITE_DONE) return impl_->error(rc, "reading the audit log");
      }
      if (a.misses == 0) continue;
      Query q(misses_stmt.stmt());
      AdHoc::bind(q, filter);
      q.text(6, a.graph.to_hex());
      int rc;
      while ((rc = q.step()) == SQLITE_ROW) {
        GraphAudit::Miss m{q.col_real(0), q.col_text(1), q.col_text(2), q.col_text(3), q.col_text(4)};
        m.detail_cut = cut_utf8(m.detail, page.max_detail_bytes);
        a.recent_misses.push_back(std::move(m));
      }
      if (rc != SQLITE_DONE) return impl_->error(rc, "reading the audit log");
    }
    return out;
  });
}

Result<std::vector<Event>> CacheDb::audit_events(const AuditFilter& filter, int64_t limit, int64_t* malformed,
                                                 int64_t max_detail_bytes) {
  if (malformed) *malformed = 0;
  const std::string sql = fmt::format(
      "SELECT id, time, pid, kind, graph_key, backend, reason, duration_ms, {}, options_digest, program, "
      "function FROM events WHERE 1{} ORDER BY id DESC LIMIT ?6", detail_column(max_detail_bytes),
      event_conditions(filter));
  AdHoc stmt;
  Status st = impl_->prepare(stmt.stmt(), sql.c_str());
  if (!st.is_ok()) return st;
  Query q(stmt.stmt());
  AdHoc::bind(q, filter);
  q.i64(6, std::max<int64_t>(limit, 1));
  std::vector<Event> out;
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) {
    std::optional<Event> e = Impl::event_from_row(q);
    if (!e) {
      if (malformed) ++*malformed;
      continue;
    }
    cut_utf8(e->detail, max_detail_bytes);
    out.push_back(std::move(*e));
  }
  if (rc != SQLITE_DONE) return impl_->error(rc, "reading the audit log");
  return out;
}

Result<std::vector<std::string>> CacheDb::programs(int64_t limit) {
  AdHoc stmt;
  Status st = impl_->prepare(stmt.stmt(),
                             "SELECT program FROM events WHERE program <> '' UNION SELECT program FROM graph_sources "
                             "WHERE program <> '' ORDER BY 1 LIMIT ?1");
  if (!st.is_ok()) return st;
  Query q(stmt.stmt());
  q.i64(1, std::max<int64_t>(limit, 1));
  std::vector<std::string> out;
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) out.push_back(q.col_text(0));
  if (rc != SQLITE_DONE) return impl_->error(rc, "reading the audit log's programs");
  return out;
}

Result<std::vector<HitSpan>> CacheDb::hit_spans(const AuditFilter& filter, int64_t limit) {
  const std::string sql = fmt::format(
      "SELECT graph_key, backend, options_digest, tier, hits, first_time, last_time FROM hit_counts WHERE 1{} "
      "ORDER BY last_time DESC, graph_key LIMIT ?6", hit_conditions(filter));
  AdHoc stmt;
  Status st = impl_->prepare(stmt.stmt(), sql.c_str());
  if (!st.is_ok()) return st;
  Query q(stmt.stmt());
  AdHoc::bind(q, filter);
  q.i64(6, std::max<int64_t>(limit, 1));
  std::vector<HitSpan> out;
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) {
    std::optional<GraphKey> key = GraphKey::from_hex(q.col_text(0));
    std::optional<ParsedEventName> tier = parse_event_name(q.col_text(3));
    if (!key || !tier || tier->kind != EventKind::kHit) continue;  // damaged: audit() counts these
    out.push_back({*key, q.col_text(1), q.col_text(2), std::move(tier->tier), q.col_i64(4), q.col_real(5),
                   q.col_real(6)});
  }
  if (rc != SQLITE_DONE) return impl_->error(rc, "reading hit counts");
  return out;
}

Result<std::vector<EntryInfo>> CacheDb::gc(uint64_t max_bytes) {
  Result<GcReport> r = gc(GcOptions{.max_bytes = max_bytes, .max_events = -1});
  if (!r.is_ok()) return r.status();
  return std::move(r->evicted);
}

Result<GcReport> CacheDb::gc(const GcOptions& options) {
  const uint64_t max_bytes = options.max_bytes;
  GcReport report;
  std::vector<EntryInfo>& evicted = report.evicted;
  Status st = impl_->write_transaction("evict executables", [&]() -> Status {
    report = GcReport{};  // a retried transaction starts over
    // Trim first, so the evictions recorded below are kept.
    auto changes = [&](const Stmt& stmt, auto&& bind, int64_t* count, std::string_view what) -> Status {
      Query q(stmt);
      bind(q);
      int rc = q.step();
      if (rc != SQLITE_DONE) return impl_->error(rc, what);
      *count += sqlite3_changes(impl_->db);
      return Status::ok();
    };
    if (options.older_than > 0) {
      auto cutoff = [&](Query& q) { q.real(1, options.older_than); };
      Status s = changes(impl_->trim_events_age, cutoff, &report.events_removed, "trimming the audit log");
      if (s.is_ok()) s = changes(impl_->trim_hits_age, cutoff, &report.hit_counts_removed, "trimming hit counts");
      if (s.is_ok()) {
        s = changes(impl_->trim_function_versions, cutoff, &report.function_entries_removed,
                    "removing stale function versions");
      }
      if (!s.is_ok()) return s;
    }
    if (options.max_events >= 0) {
      Status s = changes(impl_->trim_events_count, [&](Query& q) { q.i64(1, options.max_events); },
                         &report.events_removed, "trimming the audit log");
      if (!s.is_ok()) return s;
    }
    std::vector<EntryInfo> all;
    std::vector<int64_t> malformed;  // rowids of rows whose key columns do not parse
    uint64_t total = 0;
    {
      Query q(impl_->lru_exes);
      int rc;
      while ((rc = q.step()) == SQLITE_ROW) {
        Result<EntryInfo> e = impl_->entry_from_row(q);
        if (!e.is_ok()) {
          malformed.push_back(q.col_i64(10));
          continue;
        }
        total += e->bytes;
        all.push_back(std::move(*e));
      }
      if (rc != SQLITE_DONE) return impl_->error(rc, "listing executables");
    }
    // Malformed rows can never be served: gc always removes them, so a damaged file can be
    // cleaned.
    for (int64_t rowid : malformed) {
      Query q(impl_->remove_exe_row);
      q.i64(1, rowid);
      int rc = q.step();
      if (rc != SQLITE_DONE) return impl_->error(rc, "removing a malformed executable row");
    }
    const double now = now_seconds();
    const int64_t pid = static_cast<int64_t>(::getpid());
    for (const EntryInfo& e : all) {
      if (total <= max_bytes) break;
      {
        Query q(impl_->remove_exe);
        q.key(1, e.key);
        int rc = q.step();
        if (rc != SQLITE_DONE) return impl_->error(rc, "evicting an executable");
      }
      {
        Event ev;
        ev.time = now;
        ev.pid = pid;
        ev.kind = EventKind::kEvict;
        ev.graph = e.key.graph;
        ev.backend = e.key.backend;
        ev.options_digest = e.key.options_digest;
        ev.detail = "gc";
        Status s = impl_->insert_event(ev);
        if (!s.is_ok()) return s;
      }
      total -= e.bytes;
      evicted.push_back(e);
    }
    return Status::ok();
  });
  if (!st.is_ok()) return st;
  return report;
}

Result<std::vector<GraphKey>> CacheDb::keys_with_prefix(std::string_view prefix, int64_t limit) {
  std::string lower;
  for (char c : prefix) {
    char l = static_cast<char>(c >= 'A' && c <= 'F' ? c - 'A' + 'a' : c);
    if (!((l >= '0' && l <= '9') || (l >= 'a' && l <= 'f'))) return std::vector<GraphKey>();
    lower.push_back(l);
  }
  if (lower.empty()) return std::vector<GraphKey>();
  Query q(impl_->keys_with_prefix);
  q.text(1, lower).i64(2, static_cast<int64_t>(lower.size())).i64(3, limit > 0 ? limit : -1);
  std::vector<GraphKey> out;
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) {
    if (std::optional<GraphKey> k = GraphKey::from_hex(q.col_text(0))) out.push_back(*k);
  }
  if (rc != SQLITE_DONE) return impl_->error(rc, "looking up a graph key prefix");
  return out;
}

Result<std::vector<VerifyProblem>> CacheDb::verify() {
  return impl_->read_transaction("verifying", [&]() -> Result<std::vector<VerifyProblem>> {
    std::vector<VerifyProblem> problems;
    auto check = [&](const std::string& table, const std::string& key, const std::string& blob, int64_t stored_sum,
                     int64_t stored_bytes) {
      if (checksum_of(blob) != stored_sum) {
        problems.push_back({table, key, "checksum mismatch"});
      } else if (static_cast<int64_t>(blob.size()) != stored_bytes) {
        problems.push_back({table, key, fmt::format("size mismatch: {} bytes recorded, {} stored", stored_bytes,
                                                    blob.size())});
      }
    };
    // A table SQLite itself finds damaged is one problem; the scan goes on with the next table.
    auto finish = [&](const std::string& table, int rc) -> Status {
      if (rc == SQLITE_DONE) return Status::ok();
      if (is_corruption_code(rc)) {
        problems.push_back({table, "", fmt::format("table damaged: {}", sqlite3_errmsg(impl_->db))});
        return Status::ok();
      }
      return impl_->error(rc, "verifying " + table);
    };
    {
      Query q(impl_->all_graph_blobs);
      int rc;
      while ((rc = q.step()) == SQLITE_ROW) check("graphs", q.col_text(0), q.col_blob(1), q.col_i64(2), q.col_i64(3));
      Status st = finish("graphs", rc);
      if (!st.is_ok()) return st;
    }
    Query q(impl_->all_exe_blobs);
    int rc;
    while ((rc = q.step()) == SQLITE_ROW) {
      std::string key = fmt::format("{} backend={} options={} compiler={}", q.col_text(0), q.col_text(1),
                                    q.col_text(2), q.col_i64(3));
      if (!GraphKey::from_hex(q.col_text(0)) || q.col_i64(3) < 0 || q.col_i64(3) > static_cast<int64_t>(UINT32_MAX)) {
        problems.push_back({"executables", key, "malformed key columns (gc removes the row)"});
        continue;
      }
      check("executables", key, q.col_blob(4), q.col_i64(5), q.col_i64(6));
    }
    Status st = finish("executables", rc);
    if (!st.is_ok()) return st;
    return problems;
  });
}

// ---- path ----

std::string resolve_cache_path(const std::string& flag, const CachePathEnv& env) {
  if (!flag.empty()) return flag;
  if (!env.tracecache_db.empty()) return env.tracecache_db;
  // The XDG spec says a relative $XDG_CACHE_HOME is invalid and must be ignored.
  if (!env.xdg_cache_home.empty() && fs::path(env.xdg_cache_home).is_absolute()) {
    return (fs::path(env.xdg_cache_home) / "tracecache" / "cache.db").string();
  }
  return (fs::path(env.home) / ".cache" / "tracecache" / "cache.db").string();
}

// ---- graph key prefixes ----

bool looks_like_key_prefix(std::string_view text) {
  if (text.size() < kMinKeyPrefix || text.size() > 32) return false;
  return std::all_of(text.begin(), text.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  });
}

Result<GraphKey> resolve_graph_key(CacheDb& db, std::string_view text) {
  const bool hex = std::all_of(text.begin(), text.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
  if (hex && !text.empty() && text.size() < kMinKeyPrefix) {
    return invalid_argument(fmt::format("'{}' is too short for a graph hash prefix: give {} to 32 hex digits "
                                        "(`tracecache ls` lists the hashes)", text, kMinKeyPrefix));
  }
  if (!looks_like_key_prefix(text)) {
    return invalid_argument(fmt::format("'{}' is not a graph hash (give {} to 32 hex digits)", text, kMinKeyPrefix));
  }
  if (text.size() == 32) {
    if (std::optional<GraphKey> k = GraphKey::from_hex(std::string(text))) return *k;
  }
  constexpr int64_t kShown = 10;
  Result<std::vector<GraphKey>> keys = db.keys_with_prefix(text, kShown + 1);
  if (!keys.is_ok()) return keys.status();
  if (keys->empty()) {
    return not_found(fmt::format("no cached graph hash starts with '{}' in '{}' (see `tracecache ls`)", text,
                                 db.path()));
  }
  if (keys->size() == 1) return keys->front();
  std::string list;
  for (size_t i = 0; i < keys->size() && i < static_cast<size_t>(kShown); ++i) list += "\n  " + (*keys)[i].to_hex();
  if (keys->size() > static_cast<size_t>(kShown)) list += "\n  ...";
  return invalid_argument(fmt::format("graph hash prefix '{}' is ambiguous; candidates:{}", text, list));
}

namespace {

// Whether compiled function `name` ("mlp.trace:step": a program's file name, then what it runs)
// belongs to `program` as AuditFilter::program names one.
bool function_of_program(std::string_view name, std::string_view program) {
  const size_t colon = name.rfind(':');
  std::string_view file = colon == std::string_view::npos ? name : name.substr(0, colon);
  std::string_view base = program.substr(program.rfind('/') == std::string_view::npos ? 0 : program.rfind('/') + 1);
  return file == base || file == fmt::format("{}.trace", base);
}

}  // namespace

Result<std::vector<FunctionAudit>> CacheDb::function_audit(const AuditFilter& filter) {
  return impl_->read_transaction("auditing functions", [&]() -> Result<std::vector<FunctionAudit>> {
    std::vector<FunctionAudit> out;
    {
      Query q(impl_->list_fn_entries);
      int rc;
      while ((rc = q.step()) == SQLITE_ROW) {
        FunctionKey k{q.col_text(0), q.col_text(1), q.col_text(2)};
        if (out.empty() || !(out.back().key == k)) out.push_back(FunctionAudit{k, {}, {}});
        out.back().entries.push_back({q.col_i64(3), q.col_i64(4), q.col_i64(5)});
      }
      if (rc != SQLITE_DONE) return impl_->error(rc, "auditing functions");
    }
    std::erase_if(out, [&](const FunctionAudit& f) {
      return (!filter.function.empty() && f.key.name != filter.function) ||
             (!filter.program.empty() && !function_of_program(f.key.name, filter.program));
    });
    for (FunctionAudit& f : out) {
      Query q(impl_->recent_recompiles);
      q.text(1, f.key.name);
      int rc;
      while ((rc = q.step()) == SQLITE_ROW) f.recent_recompiles.push_back(q.col_text(0));
      if (rc != SQLITE_DONE) return impl_->error(rc, "auditing functions");
    }
    return out;
  });
}

}  // namespace tracecache::store
