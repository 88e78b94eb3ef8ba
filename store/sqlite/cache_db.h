// CacheDb: the persistent graph cache, one SQLite database file.
//
// Holds canonical graphs (by GraphKey), executables (by ExecutableKey: graph key + backend +
// backend options digest + compiler version; docs/architecture.md invariant 2), an audit log of cache
// decisions and hit counts per executable key and tier (invariant 8: hits are counted, not logged
// one row each; gc trims the log). The database runs in WAL mode with a busy timeout, so several
// processes can share one file; every statement is prepared once; writes are transactions.
//
// It is the disk tier of the executable cache (through store/tiers/sqlite_tier.h), the AuditLog
// (store/core/audit_log.h) and the GuardEntryStore (store/core/guard_entry_store.h). The code is
// split by concern; store/sqlite/cache_db_impl.h lists the files.
//
// The database is untrusted input (invariant 5): every blob carries an XXH3-64 checksum that is
// verified on load. A mismatch is reported as Status kCorruption so the caller can record a
// `corrupt` event, remove the entry and recompile. Structural checks of an executable's contents
// (bounds of buffer offsets...) belong to the backend that parses it.
//
// Paths: a directory or any other non-regular file (a FIFO would block SQLite forever) at the
// path is refused before SQLite opens it, with kInvalidArgument saying what is there.
//
// Schema versions: the file records its schema version. Opening a file with a newer schema than
// this build's kSchemaVersion fails with kUnsupported and a message saying so (never a guess);
// a file that is not an SQLite database, or lacks the tables, fails with kCorruption ("not a
// tracecache database", saying whether it is damaged or another application's database); a file
// still locked by another process after the busy timeout fails with kIOError saying it is busy.
//
// Errors: every method returns Status/Result. SQLITE_BUSY after the timeout, a read-only file,
// or a full disk are kIOError with SQLite's message; the caller decides (the runtime keeps
// going without the cache: invariant 6).
// Thread-safety: a CacheDb is used by one thread at a time. Several CacheDb objects (in one or
// many processes) may open the same file concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "capture/ir/graph_sources.h"
#include "capture/ir/hash.h"
#include "capture/core/status.h"
#include "store/core/audit_log.h"
#include "store/core/events.h"
#include "store/core/executable_key.h"
#include "store/core/guard_entry_store.h"

namespace tracecache::store {

// 1: graphs, executables, events. 2: + functions (guard entries). 3: + hit_counts (hits counted
// per executable key and tier instead of one event row each), events.options_digest. 4: +
// graph_sources (per graph: program, function, node locations), events.program and
// events.function. Version 1 to 3 files are upgraded in place when opened with write access.
inline constexpr int kSchemaVersion = 4;

// `gc` keeps at most this many audit events unless told otherwise.
inline constexpr int64_t kDefaultMaxEvents = 100000;

struct StoredExecutable {
  std::string blob;      // verified against its checksum
  double compile_ms = 0;
};

struct EntryInfo {      // one executable row, for `tracecache ls` / gc
  ExecutableKey key;
  uint64_t bytes = 0;
  double created = 0;
  double last_used = 0;
  int64_t uses = 0;
  double compile_ms = 0;
  int64_t graph_nodes = 0;  // from the graphs table, 0 if the graph row is missing
};

// What `gc` trims besides executables.
struct GcOptions {
  uint64_t max_bytes = UINT64_MAX;        // executables beyond this are evicted, LRU first
  int64_t max_events = kDefaultMaxEvents; // keep at most this many (newest) event rows; < 0: all
  // If > 0: events and hit counts last updated before this Unix time are removed, and so are the
  // guard entries of a compiled function's version (user + toolkit version) whose newest entry is
  // older than it while a newer version of the same function exists.
  double older_than = 0;
};

struct GcReport {
  std::vector<EntryInfo> evicted;
  int64_t events_removed = 0;
  int64_t hit_counts_removed = 0;
  int64_t function_entries_removed = 0;
};

struct CacheStats {     // `tracecache stats`
  int64_t graphs = 0;
  int64_t executables = 0;
  uint64_t executable_bytes = 0;
  uint64_t graph_bytes = 0;
  uint64_t file_bytes = 0;    // page_count * page_size
  int64_t hits_memory = 0, hits_disk = 0, misses = 0, compiles = 0;
  int64_t hits_remote = 0;    // served by the remote tier (store/tiers/remote_tier.h)
  double hit_rate = 0;        // all hits / (hits + misses), 0 if no lookups
};

// What `tracecache audit` reports on: every field that is set must hold.
struct AuditFilter {
  std::string program{};   // events of this program (its name as recorded, or that name's file name)
  std::string function{};  // events of this compiled function
  std::string kind{};      // one event name ("miss", "compile", "hit_disk", ...)
  double since = 0;        // events (and hit counts) at or after this Unix time; 0: all
  std::optional<GraphKey> graph{};  // this graph only
};

struct GraphAudit {     // `tracecache audit`: one row per graph key seen in events
  GraphKey graph;
  std::string program;  // the program its sources or latest event name ("" unknown)
  int64_t hits_memory = 0, hits_disk = 0, misses = 0, compiles = 0, corrupt = 0;
  int64_t hits_remote = 0;    // served by the remote tier (a function's guard entries found there
                              // are `hit_remote` events with no graph, not counted here)
  double compile_ms_total = 0;
  double saved_ms = 0;        // hits (every tier's) * (compile_ms_total / compiles), 0 if never compiled
  double last_use = 0;
  // detail: what differed from the closest cached graph (Event::detail), "" if not explained.
  // detail_cut: the detail was longer than AuditPage::max_detail_bytes and is cut to it.
  struct Miss {
    double time;
    std::string reason;
    std::string backend;
    std::string detail;
    std::string program;
    bool detail_cut = false;
  };
  std::vector<Miss> recent_misses;  // newest first, at most 5
};

// Which of audit()'s graph rows to read, and how much of each miss's detail (a detail can be
// megabytes: what differed between two large graphs).
struct AuditPage {
  int64_t limit = -1;             // at most this many rows, the newest first; < 0: all
  int64_t max_detail_bytes = -1;  // details longer than this are cut to it (at a UTF-8 boundary); < 0: whole
};

struct HitSpan {        // `tracecache report`: one hit count (hit_counts row)
  GraphKey graph;
  std::string backend, options_digest;
  std::string tier;     // the tier that served them (kMemoryTier, kDiskTier)
  int64_t hits = 0;
  double first_time = 0, last_time = 0;  // of the first and the latest hit counted
};

struct VerifyProblem {  // `tracecache verify`
  std::string table;    // "executables" or "graphs"
  std::string key;      // hex graph key (+ backend/options/compiler for executables)
  std::string problem;  // e.g. "checksum mismatch"
};

struct FunctionAudit {  // `tracecache audit`: one row per compiled function
  FunctionKey key;
  struct Entry { int64_t entry; int64_t hits; int64_t bytes; };
  std::vector<Entry> entries;
  std::vector<std::string> recent_recompiles;  // reasons, newest first, at most 5
};

class CacheDb final : public AuditLog, public GuardEntryStore {
 public:
  struct Options {
    std::string path;            // created (with parent directories) if missing, unless read_only
    int busy_timeout_ms = 5000;
    bool read_only = false;
    // Name of a registered sqlite3_vfs to open the file through ("" = SQLite's default); tests
    // use store/sqlite/fault_vfs.h's fault-injecting one.
    std::string vfs{};
  };
  static Result<std::unique_ptr<CacheDb>> open(const Options& options);
  ~CacheDb() override;
  CacheDb(const CacheDb&) = delete;
  CacheDb& operator=(const CacheDb&) = delete;

  const std::string& path() const;
  // True when the file could only be opened for reading (read-only file or directory); all
  // writes then fail with kIOError. The audit log's and the guard entry store's read_only().
  bool read_only() const override;
  // The audit log's location(): path().
  std::string_view location() const override { return path(); }

  // ---- graphs (cache_db_executables.cc) ----
  // Stores a canonical graph's serialized form. Idempotent: an existing identical row is kept
  // (its `created` time too); a row whose bytes differ is replaced, which repairs a corrupted
  // blob since a graph's encoding is deterministic.
  Status put_graph(const GraphKey& key, std::string_view blob, int64_t nodes);
  // nullopt if absent; kCorruption if its checksum fails.
  Result<std::optional<std::string>> get_graph(const GraphKey& key);
  // Where graph `key`'s nodes came from (capture/ir/graph_sources.h), kept beside the graph and
  // outside its blob and key. Replaces what was stored for the key (the latest program to build
  // a graph names it).
  Status put_graph_sources(const GraphKey& key, const GraphSources& sources);
  // nullopt if none stored; kCorruption if the stored text does not decode or has more node
  // locations than the stored graph has nodes.
  Result<std::optional<GraphSources>> get_graph_sources(const GraphKey& key);
  // The keys of the graphs (with a stored graph row) whose sources name `program`, newest first,
  // at most `limit`: the candidates a miss of that program is compared with.
  Result<std::vector<GraphKey>> recent_graphs_of(std::string_view program, int64_t limit);

  // ---- executables (cache_db_executables.cc) ----
  // nullopt if absent; kCorruption if the checksum fails. Does not update use statistics.
  Result<std::optional<StoredExecutable>> get_executable(const ExecutableKey& key);
  // Inserts or replaces. `events` (the decisions that describe this executable: its miss, compile
  // and store) are appended in the same transaction: both are durable or neither is.
  Status put_executable(const ExecutableKey& key, std::string_view blob, double compile_ms,
                        std::span<const Event> events = {});
  // Removes if present (no error if absent).
  Status remove_executable(const ExecutableKey& key);
  // Records a use: last_used = now, uses += 1.
  Status touch_executable(const ExecutableKey& key);

  // ---- audit log (store/core/audit_log.h; cache_db_audit_log.cc) ----
  Status append_events(std::span<const Event> events) override;
  Result<std::vector<Event>> events(int64_t after_id = 0, int64_t limit = 0,
                                    int64_t* malformed = nullptr) override;
  // One upsert per key and tier; the tier column holds event_name(kHit, tier).
  Status add_hits(std::span<const HitCount> hits) override;
  // Looks at the executables stored for other compiler versions or options and at the last
  // store/evict/corrupt event of this exact key.
  Result<MissReason> classify_miss(const ExecutableKey& key) override;

  // ---- compiled functions' guard entries (store/core/guard_entry_store.h;
  // cache_db_guard_entries.cc) ----
  Status put_function_entry(const FunctionKey& key, int64_t entry, std::string_view blob) override;
  Result<std::vector<StoredFunctionEntry>> function_entries(const FunctionKey& key) override;
  Status add_function_hits(const FunctionKey& key, int64_t entry, int64_t hits) override;
  Status remove_function_entry(const FunctionKey& key, int64_t entry) override;

  // ---- queries and maintenance for the CLI (cache_db_maintenance.cc) ----
  // One row per compiled function version with its entries' hits and sizes (`tracecache audit`),
  // those the filter's program and function fields select (its kind, since and graph do not
  // apply to guard entries).
  Result<std::vector<FunctionAudit>> function_audit(const AuditFilter& filter = {});
  // Most recently used first. Rows whose key columns are damaged are left out (verify() reports
  // them; gc() removes them).
  Result<std::vector<EntryInfo>> list_executables();
  Result<CacheStats> stats();
  // Most recently used first; hits are event rows plus hit counts. Rows with a damaged graph key
  // are skipped and counted in *malformed if given (never an error). Only the events and hit
  // counts `filter` selects count; a graph none of whose rows is selected is left out. Hit counts
  // carry no program: a program filter selects a graph's counts when its stored sources name
  // the program.
  // `page` bounds what is read: the first page.limit rows (each row's program and recent misses
  // are read for those rows only), their details cut to page.max_detail_bytes; *rows_total (if
  // given) is the number of rows the filter selects, shown or not.
  Result<std::vector<GraphAudit>> audit(int64_t* malformed = nullptr, const AuditFilter& filter = {},
                                        const AuditPage& page = {}, int64_t* rows_total = nullptr);
  // The events `filter` selects (hit rows of schema 1 and 2 included), newest first, at most
  // `limit` (> 0); rows with a damaged kind or key are skipped and counted in *malformed if given.
  // Each detail is cut to max_detail_bytes (at a UTF-8 boundary) when that is >= 0.
  Result<std::vector<Event>> audit_events(const AuditFilter& filter, int64_t limit, int64_t* malformed = nullptr,
                                          int64_t max_detail_bytes = -1);
  // The program names events and graph sources record (as `audit --program` matches them), in
  // name order, at most `limit` (> 0): what to suggest when a --program selects nothing.
  Result<std::vector<std::string>> programs(int64_t limit);
  // The hit counts `filter` selects (as audit() selects them), latest first, at most `limit` (> 0).
  Result<std::vector<HitSpan>> hit_spans(const AuditFilter& filter, int64_t limit);
  // Evicts executables, least recently used first, until they take at most max_bytes; records
  // an `evict` event for each. Returns the evicted entries. Also removes rows whose key columns
  // are damaged (they could never be served).
  Result<std::vector<EntryInfo>> gc(uint64_t max_bytes);
  // gc(max_bytes) plus trimming the audit log, hit counts and stale function versions (see
  // GcOptions), in one transaction.
  Result<GcReport> gc(const GcOptions& options);
  // Every graph key stored (graphs and executables) that starts with the hex prefix `prefix`
  // (case-insensitive), sorted, at most `limit`. An empty or non-hex prefix matches nothing.
  Result<std::vector<GraphKey>> keys_with_prefix(std::string_view prefix, int64_t limit = 16);
  // Checks every stored blob's checksum; returns the bad ones (does not remove them).
  Result<std::vector<VerifyProblem>> verify();

 private:
  struct Impl;
  explicit CacheDb(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Graph hashes as users type them (like git): the full 32 hex digits, or a unique prefix of at
// least kMinKeyPrefix digits (audit prints 16). One helper for every command that takes a hash.
inline constexpr size_t kMinKeyPrefix = 4;
// True if `text` could name a graph key: kMinKeyPrefix to 32 hex digits.
bool looks_like_key_prefix(std::string_view text);
// The graph key `text` names: a full hash is returned as is (whether stored or not); a prefix must
// match exactly one stored graph or executable key. kNotFound if none matches; kInvalidArgument if
// several do (the message lists them) or `text` is not a key prefix.
Result<GraphKey> resolve_graph_key(CacheDb& db, std::string_view text);

// The database path: `flag` if non-empty, else $TRACECACHE_DB, else
// $XDG_CACHE_HOME/tracecache/cache.db, else ~/.cache/tracecache/cache.db. The environment is
// passed in (cli/ reads it once) so this stays a pure function.
struct CachePathEnv {
  std::string tracecache_db, xdg_cache_home, home;
};
std::string resolve_cache_path(const std::string& flag, const CachePathEnv& env);

}  // namespace tracecache::store
