// ProgressLine: one line on stderr, rewritten in place, that says how far a long run is ("step
// 1200/20000, 3.1 ms per step, Ctrl-C stops after this step"). It is drawn only when stderr is a
// terminal and nothing else shows progress there: not with --quiet, not with -v (which prints a
// line per step on stderr), and not when stdout is that terminal without --json (each step's
// outputs are printed as the step ends). So a pipe, a file or `--json` on stdout never receives
// it, and stderr gets it only as a terminal. Redrawn at most every kRedrawInterval; erased by
// clear() and by the destructor, so that what follows starts on a clean line.
// Thread-safety: one thread. Errors: none (a failed write to stderr is ignored).
#pragma once

#include <chrono>
#include <cstdint>

namespace tracecache::cli {

class ProgressLine {
 public:
  // `total`: the steps the run will take. `enabled`: whether to draw at all (see should_show).
  ProgressLine(int64_t total, bool enabled) : total_(total), enabled_(enabled) {}
  ~ProgressLine() { clear(); }
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // Whether a run with these flags draws a progress line on this process's stderr (see above).
  static bool should_show(bool quiet, bool verbose, bool json);

  // `done` steps have finished, the last of them took `last_ms`; draws the line when it is the
  // first step or kRedrawInterval has passed since the last drawing.
  void step_done(int64_t done, double last_ms);
  // Erases the line (if drawn).
  void clear();

  static constexpr std::chrono::milliseconds kRedrawInterval{100};

 private:
  int64_t total_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace tracecache::cli
