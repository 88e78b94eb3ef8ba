// `tracecache report -o FILE`'s page (replay/audit/report.cc), one builder for the CLI and the
// Python package's tracecache.report(): one self-contained HTML page of the audit (per program
// and function: a timeline of hits, misses, compiles and recompiles, each compile's reason and
// diff, the graphs drawn by Graphviz's `dot` when it is on PATH, time saved, cache size, corrupt
// and fallback events); program, function and since filter as audit's (replay/audit/audit.h).
// The database is untrusted: every text on the page is escaped and the page is bounded.
// Thread-safety: one thread (runs `dot` as a child process). Errors: Status, below.
#pragma once

#include <cstddef>
#include <string>

#include "capture/core/status.h"

namespace tracecache::audit {

struct ReportOptions {
  std::string output;  // the page's file
  std::string program, function, since;
  std::string db_path;
};

// Writes the page to options.output (through a temporary file, renamed) and returns its size.
// Errors: a bad filter or output path, or a damaged database (kInvalidArgument), no database
// (kNotFound), I/O.
Result<size_t> write_report(const ReportOptions& options);

}  // namespace tracecache::audit
