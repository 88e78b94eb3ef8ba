// CacheDb: connection, schema creation and migrations, opening (see cache_db_impl.h for the
// other files).
#include "store/sqlite/cache_db.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "store/sqlite/cache_db_impl.h"

namespace tracecache::store {

namespace fs = std::filesystem;
using db_internal::OpenMode;

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
  options_digest TEXT NOT NULL DEFAULT '',
  program TEXT NOT NULL DEFAULT '',
  function TEXT NOT NULL DEFAULT ''
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

// Added in schema version 3: hits counted per graph, backend, options digest and tier (not per
// compiler version; invariant 8: the log stays bounded however many steps run).
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

// Added in schema version 4: where each graph's nodes came from (capture/ir/graph_sources.h),
// kept beside the graph (outside its blob and its key), and the program recent graphs of which
// a miss is compared with.
constexpr const char* kGraphSourcesTable = R"sql(
CREATE TABLE IF NOT EXISTS graph_sources (
  graph_key TEXT PRIMARY KEY,
  program TEXT NOT NULL,
  function TEXT NOT NULL,
  sources TEXT NOT NULL,
  created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS graph_sources_by_program ON graph_sources (program, created);
)sql";

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
}  // namespace

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
       "INSERT INTO events (time, pid, kind, graph_key, backend, reason, duration_ms, detail, options_digest, "
       "program, function) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"},
      {&put_sources,
       "INSERT INTO graph_sources (graph_key, program, function, sources, created) VALUES (?1, ?2, ?3, ?4, ?5) "
       "ON CONFLICT(graph_key) DO UPDATE SET program = excluded.program, function = excluded.function, "
       "sources = excluded.sources, created = excluded.created"},
      {&get_sources,
       "SELECT s.sources, COALESCE(g.nodes, -1) FROM graph_sources s LEFT JOIN graphs g ON g.key = s.graph_key "
       "WHERE s.graph_key = ?1"},
      {&recent_program_graphs,
       "SELECT s.graph_key FROM graph_sources s JOIN graphs g ON g.key = s.graph_key WHERE s.program = ?1 "
       "ORDER BY s.created DESC LIMIT ?2"},
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
       "SELECT id, time, pid, kind, graph_key, backend, reason, duration_ms, detail, options_digest, program, "
       "function FROM events WHERE id > ?1 ORDER BY id LIMIT ?2"},
      {&list_exes, fmt::format("SELECT {} ORDER BY e.last_used DESC, e.created DESC, e.rowid DESC", kEntryColumns)},
      {&lru_exes, fmt::format("SELECT {} ORDER BY e.last_used, e.created, e.rowid", kEntryColumns)},
      {&remove_exe_row, "DELETE FROM executables WHERE rowid = ?1"},
      {&count_graphs, "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM graphs"},
      {&count_exes, "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM executables"},
      {&count_events,
       "SELECT COALESCE(SUM(kind = 'hit_memory'), 0) + (SELECT COALESCE(SUM(hits), 0) FROM hit_counts WHERE "
       "tier = 'hit_memory'), COALESCE(SUM(kind = 'hit_disk'), 0) + (SELECT COALESCE(SUM(hits), 0) FROM "
       "hit_counts WHERE tier = 'hit_disk'), COALESCE(SUM(kind = 'miss'), 0), COALESCE(SUM(kind = 'compile'), 0), "
       "(SELECT COALESCE(SUM(hits), 0) FROM hit_counts WHERE tier = 'hit_remote') FROM events"},
      {&page_count, "PRAGMA page_count"},
      {&page_size, "PRAGMA page_size"},
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
      if (st.is_ok()) st = exec(kGraphSourcesTable, "creating the schema");
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

// Versions 1, 2 and 3 to 4, inside the caller's write transaction. Each step checks what exists,
// so a file half-upgraded by hand (or by a test) is completed, not broken. Existing rows keep
// their values; the new event columns read '' for them (no program known).
Status CacheDb::Impl::upgrade_schema() {
  Status st = exec(kFunctionsTable, "upgrading the schema");
  if (st.is_ok()) st = exec(kHitCountsTable, "upgrading the schema");
  if (st.is_ok()) st = exec(kGraphSourcesTable, "upgrading the schema");
  if (!st.is_ok()) return st;
  for (const char* column : {"options_digest", "program", "function"}) {
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM pragma_table_info('events') WHERE name = ?1", -1, &stmt,
                                nullptr);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(stmt, 1, column, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
    const bool has_column = rc == SQLITE_ROW && sqlite3_column_int64(stmt, 0) > 0;
    sqlite3_finalize(stmt);
    if (rc != SQLITE_ROW) return error(rc, "upgrading the schema");
    if (has_column) continue;
    st = exec(fmt::format("ALTER TABLE events ADD COLUMN {} TEXT NOT NULL DEFAULT ''", column).c_str(),
              "upgrading the schema");
    if (!st.is_ok()) return st;
  }
  return Status::ok();
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

}  // namespace tracecache::store
