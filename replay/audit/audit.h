// The audit of a cache database as data and as `tracecache audit --json`'s document: one builder
// for the CLI (cli/cache_commands.cc prints it or its rows) and the Python package's
// tracecache.audit(). The database is untrusted: damaged rows are skipped and counted.
// Thread-safety: one thread per CacheDb. Errors: Status (no database at the path: kNotFound; a
// bad filter: kInvalidArgument; the database's own errors).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "capture/core/status.h"
#include "store/sqlite/cache_db.h"

namespace tracecache::audit {

// What to report on. program, function, kind, since and graph filter as store::AuditFilter
// does; since: an ISO date/time (UTC) or an age ("10m", "2h", "1d"); graph: a hash or unique
// prefix. limit: graph rows shown (the most recently used; < 0: all); max_detail_bytes: miss
// details cut to this many bytes (< 0: whole).
struct AuditOptions {
  std::string db_path;
  std::string program, function, kind, since, graph;
  int64_t limit = -1;
  int64_t max_detail_bytes = -1;
};

// Opens the cache database at `path` for reading its audit or maintaining it: it must exist
// (kNotFound naming the path otherwise; a new database is never created here).
Result<std::unique_ptr<store::CacheDb>> open_existing_db(const std::string& path);

// What `audit` reports for the options' filters: graph rows, and guard entries when only
// program/function filters apply (guard entries have no kind, time or graph).
struct AuditRows {
  std::vector<store::GraphAudit> graphs;
  std::vector<store::FunctionAudit> functions;
  int64_t malformed = 0;     // rows skipped (damaged graph keys)
  int64_t graphs_total = 0;  // graph rows the filters select, shown or not
};
// `db`'s rows for the options' filters (options.db_path is not read).
Result<AuditRows> read_audit(store::CacheDb& db, const AuditOptions& options);

// The rows as `audit --json`'s document (one JSON object; "db" is `db_path`).
std::string audit_document(const std::string& db_path, const AuditRows& rows);

// The document for the database at options.db_path; *malformed (if given): rows skipped as
// damaged.
Result<std::string> audit_json(const AuditOptions& options, int64_t* malformed);

}  // namespace tracecache::audit
