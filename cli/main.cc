// The `tracecache` command. Subcommands live in cli/commands.h; this file wires CLI11 and maps
// failures to exit codes: 0 success, 2 bad input (unreadable or malformed program, bad flags,
// shape errors), 1 anything else.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <exception>

#include "cli/commands.h"

int main(int argc, char** argv) {
  using namespace tracecache::cli;
  CLI::App app{"tracecache: capture tensor programs lazily, hash and cache their graphs, replay them.",
               "tracecache"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(kVersion));

  RunOptions run;
  CLI::App* run_cmd = app.add_subcommand("run", "Run a trace program step by step through lazy capture.");
  run_cmd->add_option("program", run.program, "Trace program (.trace)")->required();
  run_cmd->add_option("--steps", run.steps, "Steps to run (default: the program's)")->check(CLI::PositiveNumber);
  run_cmd->add_flag("--json", run.json, "Print one JSON object: steps, outputs, graph_hashes");
  run_cmd->add_option("--save-outputs", run.save_outputs,
                      "Write every output of every step to DIR/step<N>_<name>.npy");
  run_cmd->add_flag("--bake-scalars", run.bake_scalars,
                    "Keep scalar constants in the graph (and its key) instead of lifting them to inputs");

  ShowOptions show;
  CLI::App* show_cmd = app.add_subcommand("show", "Print a trace program's canonical graphs and their hashes.");
  show_cmd->add_option("program", show.program, "Trace program (.trace)")->required();
  show_cmd->add_option("--steps", show.steps, "Steps to trace (default: the program's)")->check(CLI::PositiveNumber);
  show_cmd->add_flag("--json", show.json, "Print JSON instead of text");
  show_cmd->add_flag("--bake-scalars", show.bake_scalars, "As for run");
  show_cmd->add_flag("--source", show.source, "Also print the program in canonical trace syntax");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitBadInput;
  }

  try {
    if (*run_cmd) return run_command(run);
    if (*show_cmd) return show_command(show);
  } catch (const std::exception& e) {
    std::fputs(fmt::format("tracecache: internal error: {}\n", e.what()).c_str(), stderr);
    return kExitFailure;
  }
  return kExitFailure;
}
