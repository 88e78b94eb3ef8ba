// Helpers shared by the CLI's commands (not part of any command's interface).
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "cli/commands.h"
#include "replay/audit/json.h"
#include "replay/audit/times.h"
#include "store/sqlite/cache_db.h"

namespace tracecache::cli {

// Prints to stdout / stderr.
inline void out(const std::string& s) { std::fputs(s.c_str(), stdout); }
inline void warn(const std::string& s) {
  std::fputs(fmt::format("tracecache: warning: {}\n", escape_control_bytes(s)).c_str(), stderr);
}

// Opens the cache for a maintenance command (audit, ls, ...): the database must exist
// (audit::open_existing_db at db.path()).
Result<std::unique_ptr<store::CacheDb>> open_existing_db(const DbOptions& db);

// The writer of --json output, `--since` and times as text (replay/audit/json.h, times.h).
using audit::format_time;
using audit::JsonWriter;
using audit::parse_since;

}  // namespace tracecache::cli
