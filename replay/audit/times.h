// Times in the audit and the CLI: ages ("90m"), `--since` of audit and report, and Unix times as
// text. Thread-safety: pure functions (parse_since reads the clock). Errors: kInvalidArgument,
// with a message that names the bad text and gives examples.
#pragma once

#include <string>
#include <string_view>

#include "capture/core/status.h"

namespace tracecache::audit {

// Parses an age: "3600" or "3600s", "90m", "12h", "30d" -> seconds.
Result<double> parse_age(std::string_view text);

// `--since` of audit and report: "2026-11-23", "2026-11-23 10:00[:30]", "2026-11-23T10:00[:30][Z]"
// (UTC), or an age before now ("30s", "10m", "2h", "1d") -> Unix time; else kInvalidArgument.
Result<double> parse_since(std::string_view text);

// "2026-11-22 03:04:05" (UTC) for a Unix time; "-" for one outside the years 1970..9999.
std::string format_time(double unix_seconds);

}  // namespace tracecache::audit
