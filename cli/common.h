// Helpers shared by the CLI's commands (not part of any command's interface).
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "cli/commands.h"
#include "store/sqlite/cache_db.h"

namespace tracecache::cli {

// Prints to stdout / stderr.
inline void out(const std::string& s) { std::fputs(s.c_str(), stdout); }
inline void warn(const std::string& s) {
  std::fputs(fmt::format("tracecache: warning: {}\n", escape_control_bytes(s)).c_str(), stderr);
}

// Opens the cache for a maintenance command (audit, ls, ...): the database must exist.
Result<std::unique_ptr<store::CacheDb>> open_existing_db(const DbOptions& db);

// `--since` of audit and report: "2026-11-23", "2026-11-23 10:00[:30]", "2026-11-23T10:00[:30][Z]"
// (UTC), or an age before now ("30s", "10m", "2h", "1d") -> Unix time; else kInvalidArgument.
Result<double> parse_since(std::string_view text);

// "2026-11-22 03:04:05" (UTC) for a Unix time.
std::string format_time(double unix_seconds);

}  // namespace tracecache::cli
