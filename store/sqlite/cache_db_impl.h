// The private half of CacheDb, shared by the files it is split into (one per concern):
//   cache_db.cc                 connection, schema creation and migrations, opening
//   cache_db_executables.cc     graphs and executables
//   cache_db_audit_log.cc       the audit log and hit counts (AuditLog)
//   cache_db_guard_entries.cc   compiled functions' guard entries (GuardEntryStore)
//   cache_db_maintenance.cc     ls / stats / audit / gc / verify and graph-key prefixes (the CLI)
// Not part of the store's interface: include it only from those files.
//
// Every statement is prepared once at open (Impl::prepare_all) and reused through Query, which
// binds, steps and resets it. Impl::error turns an SQLite code into the Status the header
// promises (kCorruption, kIOError saying "busy", kInternal for misuse).
// Thread-safety: as CacheDb (one thread at a time).
#pragma once

#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "store/core/blob_checksum.h"
#include "store/sqlite/cache_db.h"

namespace tracecache::store {
namespace db_internal {

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// XXH3-64 of a blob, stored as the int64 with the same bits (SQLite integers are signed): the
// one checksum of every tier (store/core/blob_checksum.h).
inline int64_t checksum_of(std::string_view blob) { return blob_checksum(blob); }

inline bool is_corruption_code(int rc) {
  int primary = rc & 0xff;
  return primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB || primary == SQLITE_FORMAT;
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

}  // namespace db_internal

struct CacheDb::Impl {
  using Stmt = db_internal::Stmt;
  using Query = db_internal::Query;
  using OpenMode = db_internal::OpenMode;

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
  Stmt put_sources, get_sources, recent_program_graphs;
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
    if (db_internal::is_corruption_code(rc)) {
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
    if (db_internal::is_corruption_code(rc)) {
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
  // An events row in events_after's column order; nullopt if its kind or graph key is damaged.
  static std::optional<Event> event_from_row(const Query& q);

  // One row of the audit log, inside the caller's transaction.
  Status insert_event(const Event& e) {
    Query q(append_event);
    q.real(1, e.time)
        .i64(2, e.pid)
        .text(3, event_name(e.kind, e.tier))
        .text(4, e.graph.to_hex())
        .text(5, e.backend)
        .text(6, e.reason)
        .real(7, e.duration_ms)
        .text(8, e.detail)
        .text(9, e.options_digest)
        .text(10, e.program)
        .text(11, e.function);
    int rc = q.step();
    return rc == SQLITE_DONE ? Status::ok() : error(rc, "appending to the audit log");
  }
};

}  // namespace tracecache::store
