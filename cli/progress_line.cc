#include "cli/progress_line.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace tracecache::cli {

bool ProgressLine::should_show(bool quiet, bool verbose, bool json) {
  if (quiet || verbose || isatty(STDERR_FILENO) != 1) return false;
  return json || isatty(STDOUT_FILENO) != 1;
}

void ProgressLine::step_done(int64_t done, double last_ms) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && now - last_draw_ < kRedrawInterval && done != total_) return;
  last_draw_ = now;
  drawn_ = true;
  // \r and "erase to the end of the line" (ECMA-48 EL): the line is rewritten, never scrolled.
  std::fputs(fmt::format("\rstep {}/{}, {:.3f} ms per step; Ctrl-C stops after the current step\033[K", done,
                         total_, last_ms)
                 .c_str(),
             stderr);
  std::fflush(stderr);
}

void ProgressLine::clear() {
  if (!drawn_) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace tracecache::cli
