// The subcommands of `tracecache`. Each takes its parsed options, writes its report to stdout
// and diagnostics to stderr, and returns the process exit code.
#pragma once

#include <string>
#include <string_view>

#include "capture/status.h"

namespace tracecache::cli {

inline constexpr std::string_view kVersion = "0.1.0";
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;

struct RunOptions {
  std::string program;
  int steps = -1;  // -1: the program's default
  bool json = false;
  std::string save_outputs;  // empty: do not save
  bool bake_scalars = false;
};
int run_command(const RunOptions& options);

struct ShowOptions {
  std::string program;
  int steps = -1;
  bool json = false;
  bool bake_scalars = false;
  bool source = false;
};
int show_command(const ShowOptions& options);

// Prints "tracecache: <message>" to stderr and returns the exit code for `status`:
// kExitBadInput for errors in what the user gave us, kExitFailure otherwise.
int report_error(const Status& status);

}  // namespace tracecache::cli
