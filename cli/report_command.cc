// `tracecache report -o FILE`: writes the audit's HTML page (replay/audit/report.h builds it) and
// says where, or reports why it could not.
#include "cli/common.h"
#include "replay/audit/report.h"

namespace tracecache::cli {

int report_command(const ReportOptions& options) {
  Result<size_t> bytes = audit::write_report({.output = options.output,
                                              .program = options.program,
                                              .function = options.function,
                                              .since = options.since,
                                              .db_path = options.db.path()});
  if (!bytes.is_ok()) return report_error(bytes.status());
  out(fmt::format("wrote {} ({} bytes)\n", options.output, *bytes));
  return kExitOk;
}

}  // namespace tracecache::cli
