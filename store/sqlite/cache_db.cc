#include "store/sqlite/cache_db.h"

#include <sqlite3.h>
#include <xxhash.h>

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <filesystem>
#include <iterator>
#include <system_error>
#include <utility>

#include <fmt/format.h>

namespace tracecache::store {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS graphs (
  key TEXT PRIMARY KEY,
  blob BLOB NOT NULL,
  checksum INTEGER NOT NULL,
  bytes INTEGER NOT NULL,
  nodes INTEGER NOT NULL,
  created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS executables (
  graph_key TEXT NOT NULL,
  backend TEXT NOT NULL,
  options_digest TEXT NOT NULL,
  compiler_version INTEGER NOT NULL,
  blob BLOB NOT NULL,
  checksum INTEGER NOT NULL,
  bytes INTEGER NOT NULL,
  compile_ms REAL NOT NULL,
  created REAL NOT NULL,
  last_used REAL NOT NULL,
  uses INTEGER NOT NULL,
  PRIMARY KEY (graph_key, backend, options_digest, compiler_version)
);
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  time REAL NOT NULL,
  pid INTEGER NOT NULL,
  kind TEXT NOT NULL,
  graph_key TEXT NOT NULL,
  backend TEXT NOT NULL,
  reason TEXT NOT NULL,
  duration_ms REAL NOT NULL,
  detail TEXT NOT NULL,
  options_digest TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS events_by_graph ON events (graph_key);
)sql";

// Added in schema version 2: the guard entries of compiled functions.
constexpr const char* kFunctionsTable = R"sql(
CREATE TABLE IF NOT EXISTS functions (
  name TEXT NOT NULL,
  user_version TEXT NOT NULL,
  toolkit_version TEXT NOT NULL,
  entry INTEGER NOT NULL,
  blob BLOB NOT NULL,
  checksum INTEGER NOT NULL,
  hits INTEGER NOT NULL,
  created REAL NOT NULL,
  PRIMARY KEY (name, user_version, toolkit_version, entry)
);
)sql";

// Added in schema version 3: hits counted per executable key and tier (invariant 8: the log stays
// bounded however many steps run).
constexpr const char* kHitCountsTable = R"sql(
CREATE TABLE IF NOT EXISTS hit_counts (
  graph_key TEXT NOT NULL,
  backend TEXT NOT NULL,
  options_digest TEXT NOT NULL,
  tier TEXT NOT NULL,
  hits INTEGER NOT NULL,
  first_time REAL NOT NULL,
  last_time REAL NOT NULL,
  PRIMARY KEY (graph_key, backend, options_digest, tier)
);
)sql";

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// XXH3-64 of a blob, stored as the int64 with the same bits (SQLite integers are signed).
int64_t checksum_of(std::string_view blob) {
  return std::bit_cast<int64_t>(static_cast<uint64_t>(XXH3_64bits(blob.data(), blob.size())));
}

bool is_corruption_code(int rc) {
  int primary = rc & 0xff;
  return primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB || primary == SQLITE_FORMAT;
}

// Failures that mean "this connection may not write (or read) here", as opposed to bad contents:
// the cue to retry with a read-only connection.
bool is_access_code(int rc) {
  int primary = rc & 0xff;
  return primary == SQLITE_READONLY || primary == SQLITE_CANTOPEN || primary == SQLITE_PERM ||
         primary == SQLITE_IOERR || primary == SQLITE_AUTH;
}

// Percent-encodes a path for an SQLite URI filename ("file:...?immutable=1").
std::string uri_path(const std::string& path) {
  std::string out;
  for (unsigned char c : path) {
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '/' || c == '-' || c == '_' || c == '.' || c == '~';
    if (plain) {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

// A statement prepared once at open; Impl's destructor finalizes it.
class Stmt {
 public:
  sqlite3_stmt* get() const { return stmt_; }
  sqlite3_stmt** out() { return &stmt_; }

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

// One use of a cached statement: binds, steps, and resets it (keeping it prepared) when done.
class Query {
 public:
  explicit Query(const Stmt& stmt) : s_(stmt.get()) {}
  ~Query() {
    if (!s_) return;
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;

  Query& text(int i, std::string_view v) {
    // An empty view may have a null data(), which SQLite would bind as NULL.
    sqlite3_bind_text64(s_, i, v.empty() ? "" : v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
    return *this;
  }
  Query& blob(int i, std::string_view v) {
    // A zero-length blob must still be a blob, not NULL: pass a non-null pointer.
    sqlite3_bind_blob64(s_, i, v.empty() ? "" : v.data(), v.size(), SQLITE_TRANSIENT);
    return *this;
  }
  Query& i64(int i, int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  Query& real(int i, double v) {
    sqlite3_bind_double(s_, i, v);
    return *this;
  }
  Query& key(int first, const ExecutableKey& k) {
    return text(first, k.graph.to_hex())
        .text(first + 1, k.backend)
        .text(first + 2, k.options_digest)
        .i64(first + 3, k.compiler_version);
  }

  // SQLITE_ROW, SQLITE_DONE or an error code.
  int step() { return sqlite3_step(s_); }

  std::string col_text(int i) const {
    const unsigned char* p = sqlite3_column_text(s_, i);
    return p ? std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(s_, i)))
             : std::string();
  }
  std::string col_blob(int i) const {
    const void* p = sqlite3_column_blob(s_, i);
    return p ? std::string(static_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(s_, i)))
             : std::string();
  }
  int64_t col_i64(int i) const { return sqlite3_column_int64(s_, i); }
  double col_real(int i) const { return sqlite3_column_double(s_, i); }

 private:
  sqlite3_stmt* s_;
};

enum class OpenMode { kReadWrite, kReadOnly, kImmutable };

}  // namespace

struct CacheDb::Impl {
  std::string path;
  bool read_only = false;
  sqlite3* db = nullptr;
  int last_rc = SQLITE_OK;  // SQLite's code for the last error() (tells access from contents)
  int busy_timeout_ms = 0;
  std::string vfs;  // "" = SQLite's default

  Stmt begin_write, begin_read, commit, rollback;
  Stmt put_graph, get_graph;
  Stmt get_exe, put_exe, remove_exe, touch_exe;
  Stmt other_compiler, last_lifecycle_event, other_options;
  Stmt append_event, events_after, add_hit;
  Stmt trim_events_count, trim_events_age, trim_hits_age, trim_function_versions, keys_with_prefix;
  Stmt list_exes, lru_exes, remove_exe_row;
  Stmt count_graphs, count_exes, count_events, page_count, page_size;
  Stmt audit_graphs, recent_misses;
  Stmt all_graph_blobs, all_exe_blobs;
  Stmt put_fn_entry, get_fn_entries, add_fn_hits, remove_fn_entry, list_fn_entries, recent_recompiles;

  ~Impl() {
    if (!db) return;
    while (sqlite3_stmt* s = sqlite3_next_stmt(db, nullptr)) sqlite3_finalize(s);
    sqlite3_close(db);
  }

  // A Status for SQLite error `rc` while doing `what`.
  Status error(int rc, std::string_view what) {
    last_rc = rc;
    std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    if (is_corruption_code(rc)) {
      return corruption(fmt::format("cache database '{}' is corrupt ({}): {}", path, what, msg));
    }
    int primary = rc & 0xff;
    if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) {
      return io_error(fmt::format("cache database '{}' is busy ({}): locked by another connection for longer "
                                  "than the busy timeout ({})", path, what, msg));
    }
    if (primary == SQLITE_MISUSE || primary == SQLITE_RANGE || primary == SQLITE_INTERNAL) {
      return internal_error(fmt::format("cache database '{}' ({}): {}", path, what, msg));
    }
    return io_error(fmt::format("cache database '{}' ({}): {}", path, what, msg));
  }

  // An error while first reading the file: says whether it is damaged / not a database, busy, or
  // unreadable, never a guess between them.
  Status open_error(int rc, const std::string& msg, std::string_view what) {
    last_rc = rc;
    int primary = rc & 0xff;
    if (primary == SQLITE_NOTADB) {
      return corruption(fmt::format("'{}' is not a tracecache database: it is not an SQLite database ({})", path, msg));
    }
    if (is_corruption_code(rc)) {
      return corruption(fmt::format("'{}' is not a tracecache database: it is damaged ({})", path, msg));
    }
    return error(rc, what);
  }

  Status read_only_error(std::string_view what) const {
    return io_error(fmt::format("cache database '{}' is open read-only; cannot {}", path, what));
  }

  Status exec(const char* sql, std::string_view what) {
    int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
    return rc == SQLITE_OK ? Status::ok() : error(rc, what);
  }

  Status run(const Stmt& stmt, std::string_view what) {
    Query q(stmt);
    int rc = q.step();
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? Status::ok() : error(rc, what);
  }

  // Runs `body` inside BEGIN IMMEDIATE ... COMMIT; rolls back if anything fails.
  template <typename F>
  Status write_transaction(std::string_view what, F&& body) {
    if (read_only) return read_only_error(what);
    Status st = run(begin_write, what);
    if (!st.is_ok()) return st;
    st = body();
    if (st.is_ok()) st = run(commit, what);
    if (!st.is_ok() && !sqlite3_get_autocommit(db)) (void)run(rollback, what);
    return st;
  }

  // Runs `body` inside one read transaction, so multi-query reads see one snapshot.
  template <typename F>
  auto read_transaction(std::string_view what, F&& body) -> decltype(body()) {
    Status st = run(begin_read, what);
    if (!st.is_ok()) return st;
    auto result = body();
    if (!sqlite3_get_autocommit(db)) (void)run(rollback, what);
    return result;
  }

  Status prepare(Stmt& stmt, const char* sql) {
    int rc = sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, stmt.out(), nullptr);
    if (rc == SQLITE_OK) return Status::ok();
    if ((rc & 0xff) == SQLITE_ERROR) {  // no such table / column: not our schema
      return corruption(fmt::format("'{}' is not a tracecache database: {}", path, sqlite3_errmsg(db)));
    }
    return error(rc, "preparing statements");
  }

  Status connect(OpenMode mode, int timeout_ms, bool create);
  Status prepare_all();
  Status check_schema();
  Status enable_wal();
  Status upgrade_schema();
  Result<GraphKey> parse_key(const std::string& hex, std::string_view table) const {
    std::optional<GraphKey> k = GraphKey::from_hex(hex);
    if (!k) return corruption(fmt::format("cache database '{}': {} has a malformed graph key '{}'", path, table, hex));
    return *k;
  }
  Result<EntryInfo> entry_from_row(const Query& q) const;

  // One row of the audit log, inside the caller's transaction.
  Status insert_event(const Event& e) {
    Query q(append_event);
    q.real(1, e.time)
        .i64(2, e.pid)
        .text(3, event_kind_name(e.kind))
        .text(4, e.graph.to_hex())
        .text(5, e.backend)
        .text(6, e.reason)
        .real(7, e.duration_ms)
        .text(8, e.detail)
        .text(9, e.options_digest);
    int rc = q.step();
    return rc == SQLITE_DONE ? Status::ok() : error(rc, "appending to the audit log");
  }
};

Status CacheDb::Impl::prepare_all() {
  constexpr const char* kExeKey = "graph_key = ?1 AND backend = ?2 AND options_digest = ?3 AND compiler_version = ?4";
  constexpr const char* kEntryColumns =
      "e.graph_key, e.backend, e.options_digest, e.compiler_version, e.bytes, e.created, e.last_used, "
      "e.uses, e.compile_ms, COALESCE(g.nodes, 0), e.rowid FROM executables e LEFT JOIN graphs g ON g.key = e.graph_key";
  const std::pair<Stmt*, std::string> statements[] = {
      {&begin_write, "BEGIN IMMEDIATE"},
      {&begin_read, "BEGIN DEFERRED"},
      {&commit, "COMMIT"},
      {&rollback, "ROLLBACK"},
      {&put_graph,
       "INSERT INTO graphs (key, blob, checksum, bytes, nodes, created) VALUES (?1, ?2, ?3, ?4, ?5, ?6) "
       "ON CONFLICT(key) DO UPDATE SET blob = excluded.blob, checksum = excluded.checksum, "
       "bytes = excluded.bytes, nodes = excluded.nodes "
       "WHERE graphs.checksum != excluded.checksum OR graphs.blob != excluded.blob"},
      {&get_graph, "SELECT blob, checksum FROM graphs WHERE key = ?1"},
      {&get_exe, fmt::format("SELECT blob, checksum, compile_ms FROM executables WHERE {}", kExeKey)},
      {&put_exe,
       "INSERT OR REPLACE INTO executables (graph_key, backend, options_digest, compiler_version, blob, "
       "checksum, bytes, compile_ms, created, last_used, uses) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, 0)"},
      {&remove_exe, fmt::format("DELETE FROM executables WHERE {}", kExeKey)},
      {&touch_exe, fmt::format("UPDATE executables SET last_used = ?5, uses = uses + 1 WHERE {}", kExeKey)},
      {&other_compiler,
       "SELECT 1 FROM executables WHERE graph_key = ?1 AND backend = ?2 AND options_digest = ?3 AND "
       "compiler_version <> ?4 LIMIT 1"},
      {&last_lifecycle_event,
       "SELECT kind FROM events WHERE graph_key = ?1 AND backend = ?2 AND options_digest = ?3 AND "
       "kind IN ('store', 'evict', 'corrupt') ORDER BY id DESC LIMIT 1"},
      {&other_options,
       "SELECT 1 FROM executables WHERE graph_key = ?1 AND backend = ?2 AND options_digest <> ?3 UNION ALL "
       "SELECT 1 FROM events WHERE graph_key = ?1 AND backend = ?2 AND options_digest <> ?3 AND "
       "kind IN ('store', 'evict', 'corrupt') LIMIT 1"},
      {&append_event,
       "INSERT INTO events (time, pid, kind, graph_key, backend, reason, duration_ms, detail, options_digest) "
       "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"},
      {&add_hit,
       "INSERT INTO hit_counts (graph_key, backend, options_digest, tier, hits, first_time, last_time) "
       "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6) ON CONFLICT(graph_key, backend, options_digest, tier) DO UPDATE SET "
       "hits = hits + excluded.hits, last_time = MAX(last_time, excluded.last_time)"},
      {&trim_events_count,
       "DELETE FROM events WHERE id <= (SELECT id FROM events ORDER BY id DESC LIMIT 1 OFFSET ?1)"},
      {&trim_events_age, "DELETE FROM events WHERE time < ?1"},
      {&trim_hits_age, "DELETE FROM hit_counts WHERE last_time < ?1"},
      {&trim_function_versions,
       "DELETE FROM functions WHERE rowid IN (SELECT f.rowid FROM functions f JOIN (SELECT name, user_version, "
       "toolkit_version, MAX(created) AS newest FROM functions GROUP BY name, user_version, toolkit_version) v "
       "ON v.name = f.name AND v.user_version = f.user_version AND v.toolkit_version = f.toolkit_version "
       "WHERE v.newest < ?1 AND EXISTS (SELECT 1 FROM functions g WHERE g.name = f.name AND "
       "g.created > v.newest))"},
      {&keys_with_prefix,
       "SELECT key FROM graphs WHERE substr(key, 1, ?2) = ?1 UNION "
       "SELECT graph_key FROM executables WHERE substr(graph_key, 1, ?2) = ?1 ORDER BY 1 LIMIT ?3"},
      {&events_after,
       "SELECT id, time, pid, kind, graph_key, backend, reason, duration_ms, detail FROM events "
       "WHERE id > ?1 ORDER BY id LIMIT ?2"},
      {&list_exes, fmt::format("SELECT {} ORDER BY e.last_used DESC, e.created DESC, e.rowid DESC", kEntryColumns)},
      {&lru_exes, fmt::format("SELECT {} ORDER BY e.last_used, e.created, e.rowid", kEntryColumns)},
      {&remove_exe_row, "DELETE FROM executables WHERE rowid = ?1"},
      {&count_graphs, "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM graphs"},
      {&count_exes, "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM executables"},
      {&count_events,
       "SELECT COALESCE(SUM(kind = 'hit_memory'), 0) + (SELECT COALESCE(SUM(hits), 0) FROM hit_counts WHERE "
       "tier = 'hit_memory'), COALESCE(SUM(kind = 'hit_disk'), 0) + (SELECT COALESCE(SUM(hits), 0) FROM "
       "hit_counts WHERE tier = 'hit_disk'), COALESCE(SUM(kind = 'miss'), 0), COALESCE(SUM(kind = 'compile'), 0) "
       "FROM events"},
      {&page_count, "PRAGMA page_count"},
      {&page_size, "PRAGMA page_size"},
      {&audit_graphs,
       "SELECT graph_key, SUM(hm), SUM(hd), SUM(ms), SUM(cp), SUM(cr), SUM(cms), MAX(t) FROM ("
       "SELECT graph_key, kind = 'hit_memory' AS hm, kind = 'hit_disk' AS hd, kind = 'miss' AS ms, "
       "kind = 'compile' AS cp, kind = 'corrupt' AS cr, CASE WHEN kind = 'compile' THEN duration_ms ELSE 0 END "
       "AS cms, time AS t FROM events WHERE kind IN ('hit_memory', 'hit_disk', 'miss', 'compile', 'corrupt', 'store', "
       "'evict', 'store_failed') UNION ALL "
       "SELECT graph_key, CASE WHEN tier = 'hit_memory' THEN hits ELSE 0 END, CASE WHEN tier = 'hit_disk' THEN "
       "hits ELSE 0 END, 0, 0, 0, 0, last_time FROM hit_counts) "
       "GROUP BY graph_key ORDER BY MAX(t) DESC, graph_key"},
      {&recent_misses,
       "SELECT time, reason, backend FROM events WHERE graph_key = ?1 AND kind = 'miss' "
       "ORDER BY time DESC, id DESC LIMIT 5"},
      {&all_graph_blobs, "SELECT key, blob, checksum, bytes FROM graphs ORDER BY key"},
      {&put_fn_entry,
       "INSERT OR REPLACE INTO functions (name, user_version, toolkit_version, entry, blob, checksum, hits, "
       "created) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, ?7)"},
      {&get_fn_entries,
       "SELECT entry, blob, checksum, hits FROM functions WHERE name = ?1 AND user_version = ?2 AND "
       "toolkit_version = ?3 ORDER BY entry"},
      {&add_fn_hits,
       "UPDATE functions SET hits = hits + ?5 WHERE name = ?1 AND user_version = ?2 AND toolkit_version = ?3 "
       "AND entry = ?4"},
      {&remove_fn_entry,
       "DELETE FROM functions WHERE name = ?1 AND user_version = ?2 AND toolkit_version = ?3 AND entry = ?4"},
      {&list_fn_entries,
       "SELECT name, user_version, toolkit_version, entry, hits, bytes_len FROM (SELECT *, length(blob) AS "
       "bytes_len FROM functions) ORDER BY name, user_version, toolkit_version, entry"},
      {&recent_recompiles,
       "SELECT detail FROM events WHERE kind = 'recompile' AND reason = ?1 ORDER BY id DESC LIMIT 5"},
      {&all_exe_blobs,
       "SELECT graph_key, backend, options_digest, compiler_version, blob, checksum, bytes FROM executables "
       "ORDER BY graph_key, backend, options_digest, compiler_version"},
  };
  for (const auto& [stmt, sql] : statements) {
    Status st = prepare(*stmt, sql.c_str());
    if (!st.is_ok()) return st;
  }
  return Status::ok();
}

// Reads the schema version; creates the schema in an empty, writable file; refuses files from a
// newer tracecache and files that are not tracecache databases.
//
// The schema version and the table list are read by ONE statement, so they come from one
// snapshot: another process creating the schema at the same moment is seen either not at all or
// completely (it creates tables and version in one transaction), never half. Creating or upgrading
// happens inside BEGIN IMMEDIATE (which waits for the busy timeout), deciding again from a fresh
// snapshot taken inside the lock.
Status CacheDb::Impl::check_schema() {
  struct Snapshot {
    int64_t version = 0, tables = 0, ours = 0;
  };
  auto read_snapshot = [&](Snapshot* s) -> Status {
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v2(
        db,
        "SELECT (SELECT user_version FROM pragma_user_version), COUNT(*), "
        "COALESCE(SUM(name IN ('graphs', 'executables', 'events')), 0) "
        "FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
        -1, &stmt, nullptr);
    if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW) {
      s->version = sqlite3_column_int64(stmt, 0);
      s->tables = sqlite3_column_int64(stmt, 1);
      s->ours = sqlite3_column_int64(stmt, 2);
    }
    std::string msg = sqlite3_errmsg(db);
    sqlite3_finalize(stmt);
    if (rc == SQLITE_ROW) return Status::ok();
    return open_error(rc, msg, "reading the schema");
  };
  // What a snapshot says about the file, before anything is changed in it.
  auto judge = [&](const Snapshot& s) -> Status {
    if (s.version > kSchemaVersion) {
      return unsupported(fmt::format(
          "cache database '{}' has schema version {}, newer than this tracecache ({}); use a newer tracecache "
          "or another --db",
          path, s.version, kSchemaVersion));
    }
    if (s.version == 0 && s.tables != 0) {
      return corruption(fmt::format("'{}' is not a tracecache database: it is an SQLite database with other "
                                    "tables and no tracecache schema version", path));
    }
    if (s.version == 0 && read_only) {
      return corruption(fmt::format("'{}' is not a tracecache database: it is empty (and open read-only, so "
                                    "the tables cannot be created)", path));
    }
    if (s.version != 0 && s.version < kSchemaVersion && read_only) {
      return unsupported(fmt::format("cache database '{}' has schema version {}, older than this tracecache ({}); "
                                     "open it once with write access to upgrade it",
                                     path, s.version, kSchemaVersion));
    }
    if (s.version != 0 && s.ours != 3) {
      return corruption(fmt::format("'{}' is not a tracecache database: the graphs, executables and events "
                                    "tables are not all present", path));
    }
    return Status::ok();
  };

  Snapshot snap;
  Status st = read_snapshot(&snap);
  if (st.is_ok()) st = judge(snap);
  if (!st.is_ok()) return st;
  if (snap.version != kSchemaVersion) {
    // Empty (version 0) or version 1, and writable: create or upgrade under the write lock.
    st = exec("BEGIN IMMEDIATE", "creating the schema");
    if (!st.is_ok()) return st;
    st = read_snapshot(&snap);
    if (st.is_ok()) st = judge(snap);
    if (st.is_ok() && snap.version == 0) {
      st = exec(kSchema, "creating the schema");
      if (st.is_ok()) st = exec(kFunctionsTable, "creating the schema");
      if (st.is_ok()) st = exec(kHitCountsTable, "creating the schema");
    } else if (st.is_ok() && snap.version < kSchemaVersion) {
      st = upgrade_schema();
    }
    if (st.is_ok() && snap.version != kSchemaVersion) {
      st = exec(fmt::format("PRAGMA user_version = {}", kSchemaVersion).c_str(), "creating the schema");
    }
    if (st.is_ok()) st = exec("COMMIT", "creating the schema");
    if (!st.is_ok()) {
      if (!sqlite3_get_autocommit(db)) (void)exec("ROLLBACK", "creating the schema");
      return st;
    }
  }
  if (!read_only) {
    // Only now that the file is known to be ours (journal_mode cannot change inside a transaction).
    st = enable_wal();
    if (st.is_ok()) st = exec("PRAGMA synchronous = NORMAL", "setting synchronous mode");
    if (!st.is_ok()) return st;
  }
  return Status::ok();
}

// Versions 1 and 2 to 3, inside the caller's write transaction. Each step checks what exists, so
// a file half-upgraded by hand (or by a test) is completed, not broken.
Status CacheDb::Impl::upgrade_schema() {
  Status st = exec(kFunctionsTable, "upgrading the schema");
  if (st.is_ok()) st = exec(kHitCountsTable, "upgrading the schema");
  if (!st.is_ok()) return st;
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM pragma_table_info('events') WHERE name = 'options_digest'",
                              -1, &stmt, nullptr);
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
  bool has_column = rc == SQLITE_ROW && sqlite3_column_int64(stmt, 0) > 0;
  sqlite3_finalize(stmt);
  if (rc != SQLITE_ROW) return error(rc, "upgrading the schema");
  if (has_column) return Status::ok();
  return exec("ALTER TABLE events ADD COLUMN options_digest TEXT NOT NULL DEFAULT ''", "upgrading the schema");
}

// Switching to WAL needs every other connection out of the file, and SQLite does not call the
// busy handler for it: when the file is not yet in WAL mode and another process holds it (several
// processes opening a new file), retry for up to the busy timeout. A file already in WAL mode
// (persistent) needs no switch.
Status CacheDb::Impl::enable_wal() {
  int waited_ms = 0;
  for (int backoff_ms = 1;; backoff_ms = std::min(backoff_ms * 2, 50)) {
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v2(db, "PRAGMA journal_mode = WAL", -1, &stmt, nullptr);
    if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
    sqlite3_finalize(stmt);
    if (rc == SQLITE_ROW || rc == SQLITE_DONE) return Status::ok();
    if ((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED) return error(rc, "enabling WAL mode");
    if (waited_ms >= busy_timeout_ms) return error(rc, "enabling WAL mode");
    sqlite3_sleep(backoff_ms);
    waited_ms += backoff_ms;
  }
}

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

// ---- names ----

std::string_view miss_reason_name(MissReason r) {
  switch (r) {
    case MissReason::kNewGraph: return "new graph";
    case MissReason::kEvicted: return "evicted";
    case MissReason::kCorrupt: return "corrupt";
    case MissReason::kStaleCompiler: return "stale compiler version";
    case MissReason::kUnreadable: return "cache unreadable";
    case MissReason::kNewOptions: return "new backend options";
  }
  return "unknown";
}

namespace {
constexpr std::pair<EventKind, std::string_view> kEventKindNames[] = {
    {EventKind::kHitMemory, "hit_memory"}, {EventKind::kHitDisk, "hit_disk"},
    {EventKind::kMiss, "miss"},            {EventKind::kCompile, "compile"},
    {EventKind::kStore, "store"},          {EventKind::kEvict, "evict"},
    {EventKind::kCorrupt, "corrupt"},      {EventKind::kStoreFailed, "store_failed"},
    {EventKind::kRecompile, "recompile"},  {EventKind::kFallback, "fallback"},
};
static_assert(std::size(kEventKindNames) == static_cast<size_t>(EventKind::kFallback) + 1,
              "every EventKind has a name");
}  // namespace

std::string_view event_kind_name(EventKind k) {
  for (const auto& [kind, name] : kEventKindNames) {
    if (kind == k) return name;
  }
  return "unknown";
}

std::optional<EventKind> parse_event_kind(std::string_view name) {
  for (const auto& [kind, kind_name] : kEventKindNames) {
    if (kind_name == name) return kind;
  }
  return std::nullopt;
}

// ---- opening ----

// Opens `path` in `mode`. On failure, last_rc tells access problems (retry read-only) from bad
// contents (give up).
Status CacheDb::Impl::connect(OpenMode mode, int timeout_ms, bool create) {
  int flags = SQLITE_OPEN_NOMUTEX;
  std::string name = path;
  switch (mode) {
    case OpenMode::kReadWrite:
      flags |= SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0);
      break;
    case OpenMode::kReadOnly:
      flags |= SQLITE_OPEN_READONLY;
      break;
    case OpenMode::kImmutable:
      // A WAL database in a directory where the -shm file cannot be created is readable only
      // as immutable; acceptable because no one can write there either.
      flags |= SQLITE_OPEN_READONLY | SQLITE_OPEN_URI;
      name = "file:" + uri_path(path) + "?immutable=1";
      break;
  }
  int rc = sqlite3_open_v2(name.c_str(), &db, flags, vfs.empty() ? nullptr : vfs.c_str());
  if (rc != SQLITE_OK) return error(rc, "opening");
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, timeout_ms);
  busy_timeout_ms = timeout_ms;
  // SQLite opens a write-protected file read-only even when asked for read-write.
  read_only = mode != OpenMode::kReadWrite || sqlite3_db_readonly(db, "main") == 1;
  Status st = check_schema();
  if (st.is_ok()) st = prepare_all();
  return st;
}

CacheDb::CacheDb(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CacheDb::~CacheDb() = default;

Result<std::unique_ptr<CacheDb>> CacheDb::open(const Options& options) {
  const std::string& path = options.path;
  if (path.empty()) return invalid_argument("no cache database path given");
  std::error_code ec;
  // Before SQLite sees it: a directory gives SQLite's "disk I/O error", a FIFO blocks the open.
  fs::file_status status = fs::status(path, ec);
  if (!ec && fs::is_directory(status)) {
    return invalid_argument(fmt::format("cache database path '{}' is a directory; pass a file path (e.g. {}/cache.db)",
                                        path, path));
  }
  if (!ec && fs::exists(status) && !fs::is_regular_file(status)) {
    return invalid_argument(fmt::format("cache database path '{}' is not a regular file (a FIFO, socket or device); "
                                        "refusing to open it", path));
  }
  // A path that cannot even be examined is treated as existing: opening it reports why.
  bool exists = fs::exists(path, ec) || ec;
  if (!exists && options.read_only) {
    return not_found(fmt::format("no cache database at '{}' (it is not created in read-only mode)", path));
  }
  if (!exists) {
    fs::path parent = fs::path(path).parent_path();
    if (!parent.empty() && !fs::create_directories(parent, ec) && ec) {
      return io_error(fmt::format("cannot create the directory '{}' for cache database '{}': {}", parent.string(),
                                  path, ec.message()));
    }
  }

  std::vector<OpenMode> modes;
  if (!options.read_only) modes.push_back(OpenMode::kReadWrite);
  if (exists) {
    modes.push_back(OpenMode::kReadOnly);
    modes.push_back(OpenMode::kImmutable);
  }
  Status last;
  for (OpenMode mode : modes) {
    auto impl = std::make_unique<Impl>();
    impl->path = path;
    impl->vfs = options.vfs;
    Status st = impl->connect(mode, options.busy_timeout_ms, /*create=*/!exists);
    if (st.is_ok()) return std::unique_ptr<CacheDb>(new CacheDb(std::move(impl)));
    // Bad contents or a newer schema will not improve with a read-only connection.
    if (st.code() == StatusCode::kCorruption || st.code() == StatusCode::kUnsupported) return st;
    last = st;
    if (!is_access_code(impl->last_rc)) break;
  }
  return last;
}

const std::string& CacheDb::path() const { return impl_->path; }
bool CacheDb::read_only() const { return impl_->read_only; }

// ---- graphs ----

Status CacheDb::put_graph(const GraphKey& key, std::string_view blob, int64_t nodes) {
  return impl_->write_transaction("store a graph", [&] {
    Query q(impl_->put_graph);
    q.text(1, key.to_hex())
        .blob(2, blob)
        .i64(3, checksum_of(blob))
        .i64(4, static_cast<int64_t>(blob.size()))
        .i64(5, nodes)
        .real(6, now_seconds());
    int rc = q.step();
    return rc == SQLITE_DONE ? Status::ok() : impl_->error(rc, "storing a graph");
  });
}

Result<std::optional<std::string>> CacheDb::get_graph(const GraphKey& key) {
  Query q(impl_->get_graph);
  q.text(1, key.to_hex());
  int rc = q.step();
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  if (rc != SQLITE_ROW) return impl_->error(rc, "loading a graph");
  std::string blob = q.col_blob(0);
  if (checksum_of(blob) != q.col_i64(1)) {
    return corruption(fmt::format("cache database '{}': graph {} failed its checksum", impl_->path, key.to_hex()));
  }
  return std::optional<std::string>(std::move(blob));
}

// ---- executables ----

Result<std::optional<StoredExecutable>> CacheDb::get_executable(const ExecutableKey& key) {
  Query q(impl_->get_exe);
  q.key(1, key);
  int rc = q.step();
  if (rc == SQLITE_DONE) return std::optional<StoredExecutable>();
  if (rc != SQLITE_ROW) return impl_->error(rc, "loading an executable");
  StoredExecutable out{q.col_blob(0), q.col_real(2)};
  if (checksum_of(out.blob) != q.col_i64(1)) {
    return corruption(fmt::format("cache database '{}': executable {} ({}) failed its checksum", impl_->path,
                                  key.graph.to_hex(), key.backend));
  }
  return std::optional<StoredExecutable>(std::move(out));
}

Status CacheDb::put_executable(const ExecutableKey& key, std::string_view blob, double compile_ms,
                               std::span<const Event> events) {
  return impl_->write_transaction("store an executable", [&] {
    for (const Event& e : events) {
      Status st = impl_->insert_event(e);
      if (!st.is_ok()) return st;
    }
    Query q(impl_->put_exe);
    q.key(1, key)
        .blob(5, blob)
        .i64(6, checksum_of(blob))
        .i64(7, static_cast<int64_t>(blob.size()))
        .real(8, compile_ms)
        .real(9, now_seconds());
    int rc = q.step();
    return rc == SQLITE_DONE ? Status::ok() : impl_->error(rc, "storing an executable");
  });
}

Status CacheDb::remove_executable(const ExecutableKey& key) {
  return impl_->write_transaction("remove an executable", [&] {
    Query q(impl_->remove_exe);
    q.key(1, key);
    int rc = q.step();
    return rc == SQLITE_DONE ? Status::ok() : impl_->error(rc, "removing an executable");
  });
}

Status CacheDb::touch_executable(const ExecutableKey& key) {
  return impl_->write_transaction("record an executable's use", [&] {
    Query q(impl_->touch_exe);
    q.key(1, key).real(5, now_seconds());
    int rc = q.step();
    return rc == SQLITE_DONE ? Status::ok() : impl_->error(rc, "recording an executable's use");
  });
}

Result<MissReason> CacheDb::classify_miss(const ExecutableKey& key) {
  return impl_->read_transaction("classifying a miss", [&]() -> Result<MissReason> {
    {
      Query q(impl_->other_compiler);
      q.key(1, key);
      int rc = q.step();
      if (rc == SQLITE_ROW) return MissReason::kStaleCompiler;
      if (rc != SQLITE_DONE) return impl_->error(rc, "classifying a miss");
    }
    {
      // Only this exact backend configuration's history counts: a graph stored for another sim
      // device spec was not evicted for this one.
      Query q(impl_->last_lifecycle_event);
      q.text(1, key.graph.to_hex()).text(2, key.backend).text(3, key.options_digest);
      int rc = q.step();
      if (rc == SQLITE_ROW) return q.col_text(0) == "corrupt" ? MissReason::kCorrupt : MissReason::kEvicted;
      if (rc != SQLITE_DONE) return impl_->error(rc, "classifying a miss");
    }
    Query q(impl_->other_options);
    q.text(1, key.graph.to_hex()).text(2, key.backend).text(3, key.options_digest);
    int rc = q.step();
    if (rc == SQLITE_ROW) return MissReason::kNewOptions;
    if (rc != SQLITE_DONE) return impl_->error(rc, "classifying a miss");
    return MissReason::kNewGraph;
  });
}

// ---- audit log ----

Status CacheDb::append_events(std::span<const Event> events) {
  if (events.empty()) return Status::ok();
  return impl_->write_transaction("append to the audit log", [&] {
    for (const Event& e : events) {
      Status st = impl_->insert_event(e);
      if (!st.is_ok()) return st;
    }
    return Status::ok();
  });
}

Status CacheDb::add_hits(std::span<const HitCount> hits) {
  if (hits.empty()) return Status::ok();
  return impl_->write_transaction("count cache hits", [&] {
    for (const HitCount& h : hits) {
      Query q(impl_->add_hit);
      q.text(1, h.graph.to_hex())
          .text(2, h.backend)
          .text(3, h.options_digest)
          .text(4, event_kind_name(h.tier))
          .i64(5, h.hits)
          .real(6, h.time);
      int rc = q.step();
      if (rc != SQLITE_DONE) return impl_->error(rc, "counting cache hits");
    }
    return Status::ok();
  });
}

Result<std::vector<Event>> CacheDb::events(int64_t after_id, int64_t limit, int64_t* malformed) {
  if (malformed) *malformed = 0;
  Query q(impl_->events_after);
  q.i64(1, after_id).i64(2, limit > 0 ? limit : -1);
  std::vector<Event> out;
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) {
    Event e;
    e.id = q.col_i64(0);
    e.time = q.col_real(1);
    e.pid = q.col_i64(2);
    std::string kind = q.col_text(3);
    std::optional<EventKind> k = parse_event_kind(kind);
    std::optional<GraphKey> key = GraphKey::from_hex(q.col_text(4));
    if (!k || !key) {  // a damaged row costs its own information, not the whole log
      if (malformed) ++*malformed;
      continue;
    }
    e.kind = *k;
    e.graph = *key;
    e.backend = q.col_text(5);
    e.reason = q.col_text(6);
    e.duration_ms = q.col_real(7);
    e.detail = q.col_text(8);
    out.push_back(std::move(e));
  }
  if (rc != SQLITE_DONE) return impl_->error(rc, "reading the audit log");
  return out;
}

// ---- queries and maintenance ----

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
      });
    }
    if (st.is_ok()) st = one_row(impl_->page_count, [&](const Query& q) { page_count = q.col_i64(0); });
    if (st.is_ok()) st = one_row(impl_->page_size, [&](const Query& q) { page_size = q.col_i64(0); });
    if (!st.is_ok()) return st;
    s.file_bytes = static_cast<uint64_t>(std::max<int64_t>(page_count * page_size, 0));
    int64_t hits = s.hits_memory + s.hits_disk;
    int64_t lookups = hits + s.misses;
    s.hit_rate = lookups > 0 ? static_cast<double>(hits) / static_cast<double>(lookups) : 0;
    return s;
  });
}

Result<std::vector<GraphAudit>> CacheDb::audit(int64_t* malformed) {
  if (malformed) *malformed = 0;
  return impl_->read_transaction("reading the audit log", [&]() -> Result<std::vector<GraphAudit>> {
    std::vector<GraphAudit> out;
    {
      Query q(impl_->audit_graphs);
      int rc;
      while ((rc = q.step()) == SQLITE_ROW) {
        std::optional<GraphKey> key = GraphKey::from_hex(q.col_text(0));
        if (!key) {  // rows with a damaged key: skipped and counted, never fatal
          if (malformed) *malformed += q.col_i64(1) + q.col_i64(2) + q.col_i64(3) + q.col_i64(4) + q.col_i64(5);
          continue;
        }
        GraphAudit a;
        a.graph = *key;
        a.hits_memory = q.col_i64(1);
        a.hits_disk = q.col_i64(2);
        a.misses = q.col_i64(3);
        a.compiles = q.col_i64(4);
        a.corrupt = q.col_i64(5);
        a.compile_ms_total = q.col_real(6);
        a.last_use = q.col_real(7);
        if (a.compiles > 0) {
          a.saved_ms = static_cast<double>(a.hits_memory + a.hits_disk) * a.compile_ms_total /
                       static_cast<double>(a.compiles);
        }
        out.push_back(std::move(a));
      }
      if (rc != SQLITE_DONE) return impl_->error(rc, "reading the audit log");
    }
    for (GraphAudit& a : out) {
      if (a.misses == 0) continue;
      Query q(impl_->recent_misses);
      q.text(1, a.graph.to_hex());
      int rc;
      while ((rc = q.step()) == SQLITE_ROW) {
        a.recent_misses.push_back({q.col_real(0), q.col_text(1), q.col_text(2)});
      }
      if (rc != SQLITE_DONE) return impl_->error(rc, "reading the audit log");
    }
    return out;
  });
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

// ---- compiled functions --------------------------------------------------------------------

namespace {
void bind_function(Query& q, const FunctionKey& k) {
  q.text(1, k.name).text(2, k.user_version).text(3, k.toolkit_version);
}
}  // namespace

Status CacheDb::put_function_entry(const FunctionKey& key, int64_t entry, std::string_view blob) {
  return impl_->write_transaction("store a guard entry", [&] {
    Query q(impl_->put_fn_entry);
    bind_function(q, key);
    q.i64(4, entry).blob(5, blob).i64(6, checksum_of(blob)).real(7, now_seconds());
    int rc = q.step();
    return rc == SQLITE_DONE ? Status::ok() : impl_->error(rc, "storing a guard entry");
  });
}

Result<std::vector<StoredFunctionEntry>> CacheDb::function_entries(const FunctionKey& key) {
  return impl_->read_transaction("reading guard entries", [&]() -> Result<std::vector<StoredFunctionEntry>> {
    std::vector<StoredFunctionEntry> out;
    Query q(impl_->get_fn_entries);
    bind_function(q, key);
    int rc;
    while ((rc = q.step()) == SQLITE_ROW) {
      StoredFunctionEntry e;
      e.entry = q.col_i64(0);
      e.blob = q.col_blob(1);
      e.hits = q.col_i64(3);
      e.corrupt = checksum_of(e.blob) != q.col_i64(2);
      if (e.corrupt) e.blob.clear();
      out.push_back(std::move(e));
    }
    if (rc != SQLITE_DONE) return impl_->error(rc, "reading guard entries");
    return out;
  });
}

Status CacheDb::add_function_hits(const FunctionKey& key, int64_t entry, int64_t hits) {
  return impl_->write_transaction("count guard entry hits", [&] {
    Query q(impl_->add_fn_hits);
    bind_function(q, key);
    q.i64(4, entry).i64(5, hits);
    int rc = q.step();
    return rc == SQLITE_DONE ? Status::ok() : impl_->error(rc, "counting guard entry hits");
  });
}

Status CacheDb::remove_function_entry(const FunctionKey& key, int64_t entry) {
  return impl_->write_transaction("remove a guard entry", [&] {
    Query q(impl_->remove_fn_entry);
    bind_function(q, key);
    q.i64(4, entry);
    int rc = q.step();
    return rc == SQLITE_DONE ? Status::ok() : impl_->error(rc, "removing a guard entry");
  });
}

Result<std::vector<FunctionAudit>> CacheDb::function_audit() {
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
