#include "replay/audit/audit.h"

#include <fmt/format.h>

#include <filesystem>
#include <optional>

#include "replay/audit/json.h"
#include "replay/audit/times.h"

namespace tracecache::audit {

Result<std::unique_ptr<store::CacheDb>> open_existing_db(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return not_found(fmt::format("no cache database at '{}' (run a program first, or pass --db PATH)", path));
  }
  return store::CacheDb::open({.path = path});
}

namespace {

// The audit filter the options ask for; bad input is kInvalidArgument (exit 2).
Result<store::AuditFilter> audit_filter(const AuditOptions& options, store::CacheDb& db) {
  store::AuditFilter f{options.program, options.function, options.kind, 0, std::nullopt};
  if (!options.kind.empty()) {
    std::optional<store::ParsedEventName> kind = store::parse_event_name(options.kind);
    const bool graph_kind = kind && kind->kind != store::EventKind::kRecompile && kind->kind != store::EventKind::kFallback &&
                            kind->kind != store::EventKind::kGraphBreak;
    if (!graph_kind) {
      return invalid_argument(fmt::format("--kind '{}' is not a kind of graph event (kinds: hit_memory, hit_disk, "
                                          "hit_remote, miss, compile, store, evict, corrupt, store_failed; the "
                                          "remote tier's: miss_remote, store_remote, unavailable_remote, "
                                          "skip_remote, store_failed_remote)", options.kind));
    }
  }
  if (!options.since.empty()) {
    Result<double> since = parse_since(options.since);
    if (!since.is_ok()) return since.status();
    f.since = *since;
  }
  if (!options.graph.empty()) {
    Result<GraphKey> key = store::resolve_graph_key(db, options.graph);
    if (!key.is_ok()) return key.status();
    f.graph = *key;
  }
  return f;
}

}  // namespace

Result<AuditRows> read_audit(store::CacheDb& db, const AuditOptions& options) {
  Result<store::AuditFilter> filter = audit_filter(options, db);
  if (!filter.is_ok()) return filter.status();
  AuditRows rows;
  Result<std::vector<store::GraphAudit>> graphs =
      db.audit(&rows.malformed, *filter, {.limit = options.limit, .max_detail_bytes = options.max_detail_bytes},
               &rows.graphs_total);
  if (!graphs.is_ok()) return graphs.status();
  rows.graphs = std::move(*graphs);
  if (options.kind.empty() && options.since.empty() && options.graph.empty()) {
    Result<std::vector<store::FunctionAudit>> functions = db.function_audit(*filter);
    if (!functions.is_ok()) return functions.status();
    rows.functions = std::move(*functions);
  }
  return rows;
}

std::string audit_document(const std::string& db_path, const AuditRows& rows) {
  JsonWriter j;
  j.begin_object();
  j.key("db").value(db_path);
  j.key("graphs").begin_array();
  for (const store::GraphAudit& a : rows.graphs) {
    j.begin_object();
    j.key("hash").value(a.graph.to_hex());
    j.key("program").value(a.program);
    j.key("hits_memory").value(a.hits_memory);
    j.key("hits_disk").value(a.hits_disk);
    j.key("hits_remote").value(a.hits_remote);
    j.key("misses").value(a.misses);
    j.key("compiles").value(a.compiles);
    j.key("corrupt").value(a.corrupt);
    j.key("compile_ms_total").value(a.compile_ms_total);
    j.key("saved_ms").value(a.saved_ms);
    j.key("last_use").value(a.last_use);
    j.key("recent_misses").begin_array();
    for (const auto& m : a.recent_misses) {
      j.begin_object();
      j.key("time").value(m.time);
      j.key("reason").value(m.reason);
      j.key("backend").value(m.backend);
      j.key("program").value(m.program);
      j.key("detail").value(m.detail);
      if (m.detail_cut) j.key("detail_cut").value(true);
      j.end_object();
    }
    j.end_array();
    j.end_object();
  }
  j.end_array();
  j.key("graphs_total").value(rows.graphs_total);
  j.key("graphs_left_out").value(rows.graphs_total - static_cast<int64_t>(rows.graphs.size()));
  j.key("functions").begin_array();
  for (const store::FunctionAudit& f : rows.functions) {
    j.begin_object();
    j.key("name").value(f.key.name);
    j.key("user_version").value(f.key.user_version);
    j.key("toolkit_version").value(f.key.toolkit_version);
    j.key("entries").begin_array();
    for (const auto& e : f.entries) {
      j.begin_object();
      j.key("entry").value(e.entry);
      j.key("hits").value(e.hits);
      j.key("bytes").value(e.bytes);
      j.end_object();
    }
    j.end_array();
    j.key("recent_recompiles").begin_array();
    for (const std::string& r : f.recent_recompiles) j.value(r);
    j.end_array();
    j.end_object();
  }
  j.end_array();
  j.end_object();
  return j.str();
}

Result<std::string> audit_json(const AuditOptions& options, int64_t* malformed) {
  Result<std::unique_ptr<store::CacheDb>> db = open_existing_db(options.db_path);
  if (!db.is_ok()) return db.status();
  Result<AuditRows> rows = read_audit(**db, options);
  if (!rows.is_ok()) return rows.status();
  if (malformed) *malformed = rows->malformed;
  return audit_document((*db)->path(), *rows);
}

}  // namespace tracecache::audit
