// The `tracecache` command. Subcommands live in cli/commands.h; this file wires CLI11, reads
// the environment (once, here: TRACECACHE_DB, XDG_CACHE_HOME, HOME, TRACECACHE_THREADS,
// TRACECACHE_REMOTE), and
// maps failures to exit codes: 0 success, 2 bad input (unreadable or malformed program, bad
// flags, shape errors, unknown cache schema), 1 anything else.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "capture/core/buffer.h"
#include "capture/core/suggest.h"
#include "cli/commands.h"
#include "cli/validators.h"
#include "replay/engine/setup.h"
#include "replay/engine/toolkit_version.h"

namespace {

// The cpu backend's thread team is libgomp's (docs/architecture.md, the cpu backend), whose idle members
// spin for a while by default: on a machine busy with other work the spinning members take the
// cores the working ones need (resnet18 once mode at 2 threads measured 3-4x slower under load
// 5 than with sleeping members). Unless the user chose a policy (OMP_WAIT_POLICY or
// GOMP_SPINCOUNT), idle members sleep at once. libgomp reads its environment while it loads,
// before main, so the program runs itself again with the variable set (about 10 ms); if that
// fails it goes on with libgomp's default (and the variable unset again, so that what it
// reports, bench --json's omp_wait_policy, stays true). Not under a tool that preloads itself
// (LD_PRELOAD set: valgrind, whose /proc/self/exe is its own binary, so the exec would leave the
// tool; sanitizer runtimes): there libgomp's default stays.
void default_omp_wait_policy(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  if (const char* preload = std::getenv("LD_PRELOAD"); preload != nullptr && *preload != '\0') return;
  if (setenv("OMP_WAIT_POLICY", "passive", 0) != 0) return;
  execv("/proc/self/exe", argv);
  unsetenv("OMP_WAIT_POLICY");
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// `tracecache WORD ...` (or `tracecache zoo WORD ...`) where WORD is no command of that level:
// names it and suggests the nearest command (CLI11 alone would say "A subcommand is required").
// `path` is the commands given before WORD ("" or "zoo "). Returns true if it reported an error.
bool report_unknown_command(CLI::App& app, std::span<char*> args, const std::string& path) {
  std::vector<CLI::App*> subcommands = app.get_subcommands([](CLI::App*) { return true; });
  if (subcommands.empty() || args.empty() || args[0][0] == '-') return false;
  const std::string_view word = args[0];
  std::vector<std::string> names;
  for (CLI::App* c : subcommands) {
    if (c->get_name() == word) return report_unknown_command(*c, args.subspan(1), path + c->get_name() + " ");
    names.push_back(c->get_name());
  }
  std::vector<std::string_view> views(names.begin(), names.end());
  const std::string_view nearest = tracecache::nearest_spelling(word, views);
  std::fputs(fmt::format("tracecache: unknown command '{}{}'{}; commands: {} (see tracecache {}--help)\n", path,
                         word, nearest.empty() ? std::string() : fmt::format(" (did you mean '{}{}'?)", path, nearest),
                         fmt::join(views, ", "), path)
                 .c_str(),
             stderr);
  return true;
}

// The deepest command given on the command line (`app` itself, `run`, `zoo train`) and its
// words ("", "run ", "zoo train ").
CLI::App* given_command(CLI::App& app, std::string* path) {
  CLI::App* command = &app;
  for (std::vector<CLI::App*> given = app.get_subcommands(); !given.empty(); given = command->get_subcommands()) {
    command = given.front();
    *path += command->get_name() + " ";
  }
  return command;
}

// The option names ("--steps", "-q") `command` and the commands above it accept.
std::vector<std::string> option_names(const CLI::App* command) {
  std::vector<std::string> names;
  for (; command != nullptr; command = command->get_parent()) {
    for (const CLI::Option* o : command->get_options()) {
      for (const std::string& n : o->get_lnames()) names.push_back("--" + n);
      for (const std::string& n : o->get_snames()) names.push_back("-" + n);
    }
  }
  return names;
}

// A parse error in the tool's own words: "tracecache: run: unknown option '--step' (did you mean
// '--steps'?); see tracecache run --help"; CLI11's other errors (a value out of range, a missing
// argument) as CLI11 words them, with the same prefix and pointer to the help. Returns the exit
// code, kExitBadInput.
int report_parse_error(CLI::App& app, const CLI::ParseError& error, std::span<char*> args) {
  using tracecache::cli::escape_control_bytes;
  std::string path;
  const CLI::App* command = given_command(app, &path);
  const std::string where = path.empty() ? std::string() : path.substr(0, path.size() - 1) + ": ";
  const std::string help = fmt::format("see tracecache {}--help", path);
  if (dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) {
    const std::vector<std::string> names = option_names(command);
    const std::vector<std::string_view> views(names.begin(), names.end());
    for (std::string_view arg : args) {
      // An option's word: "-x" or "--name[=value]", not "-" (stdin), "--" or a negative number.
      if (arg.size() < 2 || arg[0] != '-' || arg == "--" || std::isdigit(static_cast<unsigned char>(arg[1]))) continue;
      arg = arg.substr(0, arg.find('='));
      if (std::find(views.begin(), views.end(), arg) != views.end()) continue;
      std::fputs(fmt::format("tracecache: {}unknown option '{}'{}; {}\n", where, escape_control_bytes(arg),
                             tracecache::did_you_mean(arg, views), help)
                     .c_str(),
                 stderr);
      return tracecache::cli::kExitBadInput;
    }
  }
  std::fputs(fmt::format("tracecache: {}{}; {}\n", where, escape_control_bytes(error.what()), help).c_str(), stderr);
  return tracecache::cli::kExitBadInput;
}

// Every command's options and its CLI11 subcommand, bound by the add_* phases below (the
// options are bound by address: one Commands lives in main for the whole run).
struct Commands {
  tracecache::cli::RunOptions run;
  tracecache::cli::ImportCommandOptions import;
  tracecache::cli::BenchOptions bench;
  tracecache::cli::ZooOptions zoo;
  tracecache::cli::ShowOptions show;
  tracecache::cli::DiffOptions diff;
  tracecache::cli::CacheCommandOptions cache;  // audit, ls, stats, gc, verify
  tracecache::cli::ReportOptions report;
  std::string max_bytes;  // gc --max-bytes, parsed at dispatch
  int64_t audit_limit = tracecache::cli::kAuditRows;
  bool audit_all = false, full_details = false;
  CLI::App *run_cmd = nullptr, *import_cmd = nullptr, *bench_cmd = nullptr, *zoo_cmd = nullptr, *show_cmd = nullptr,
           *diff_cmd = nullptr, *audit_cmd = nullptr, *ls_cmd = nullptr, *stats_cmd = nullptr, *gc_cmd = nullptr,
           *verify_cmd = nullptr, *report_cmd = nullptr;
};

// What the environment gives every command: the cache's location and the remote tier (read
// here: cli/ and python/ are the only places that read environment variables).
struct CommandEnv {
  tracecache::store::CachePathEnv cache;
  std::string remote;
  std::string db_help, threads_help;
};

CommandEnv command_env() {
  CommandEnv e;
  e.cache = {env("TRACECACHE_DB"), env("XDG_CACHE_HOME"), env("HOME")};
  e.remote = env("TRACECACHE_REMOTE");
  e.db_help =
      "Cache database (default: $TRACECACHE_DB, else $XDG_CACHE_HOME/tracecache/cache.db, else "
      "~/.cache/tracecache/cache.db)";
  e.threads_help =
      "cpu: threads for OpenBLAS and the kernels' loops (default: $TRACECACHE_THREADS, else the CPUs "
      "this process may run on, OpenMP); results are bitwise reproducible at a given count and agree "
      "across counts within the documented matmul bound";
  return e;
}

// run: a program step by step.
void add_run_command(CLI::App& app, Commands& c, const CommandEnv& e) {
  using namespace tracecache::cli;
  const std::string& db_help = e.db_help;
  const std::string& threads_help = e.threads_help;
  c.run.db.env = e.cache;
  c.run.remote.env = e.remote;
  c.run_cmd = app.add_subcommand("run", "Run a trace program step by step through lazy capture and the graph cache.");
  c.run_cmd->add_option("program", c.run.program, "Trace program (.trace) or ONNX model (.onnx, imported in memory)")->required();
  c.run_cmd->add_option("--input", c.run.inputs,
                      "ONNX models: NAME=FILE.npy, the value of model input NAME (repeatable; other inputs are "
                      "generated)");
  c.run_cmd->add_option("--const-input", c.run.const_inputs,
                      "ONNX models: NAME=FILE.npy, model input NAME is this constant (folded at import; for "
                      "inputs that give shapes, axes or pads; repeatable)");
  c.run_cmd->add_option("--shape", c.run.shapes,
                      "ONNX models: NAME=DTYPE[d0, ...], the type of model input NAME (needed for symbolic dims "
                      "without an --input file; e.g. x=f32[1, 3, 224, 224])");
  c.run_cmd->add_option("--steps", c.run.steps, "Steps to run (default: the program's)")->check(whole_number_in(1));
  c.run_cmd->add_option("--mode", c.run.mode,
                      "eager (ops run at once, no cache), lazy (trace every step) or once (each step "
                      "is a compiled function: guards checked, traced only on a recompile)")
      ->check(CLI::IsMember({"eager", "lazy", "once"}))
      ->capture_default_str();
  c.run_cmd->add_option("--backend", c.run.backend,
                      "cpu (compiled, cached), reference (the uncached oracle), or sim:PRESET / "
                      "sim:SPEC_FILE (a simulated accelerator; presets h100, a100, tpu-v4)")
      ->capture_default_str();
  c.run_cmd->add_option("--timeline", c.run.timeline, kTimelineHelp);
  c.run_cmd->add_option("--db", c.run.db.flag, db_help);
  add_remote_options(c.run_cmd, c.run.remote);
  c.run_cmd->add_option("--threads", c.run.threads, threads_help)->check(whole_number_in(1));
  c.run_cmd->add_flag("--no-cache", c.run.no_cache, "Compile in memory only; do not open the cache database");
  c.run_cmd->add_flag("--json", c.run.json,
                    "Print one JSON object: steps, outputs, graph_hashes, counters, steps_detail (each "
                    "step's cache outcomes)");
  c.run_cmd->add_flag("-v,--verbose", c.run.verbose,
                    "One line per step and graph on stderr: hit (tier) or miss (reason, compile time, what "
                    "differs from the closest cached graph); once mode: the guard entry or the recompile "
                    "(also: TRACECACHE_VERBOSE=1)");
  c.run_cmd->add_option("--labels", c.run.labels, kLabelsHelp);
  c.run_cmd->add_flag("-q,--quiet", c.run.quiet, kQuietHelp);
  c.run_cmd->add_flag("--metrics", c.run.metrics, "Print the metrics report (counters, timers with percentiles)");
  c.run_cmd->add_option("--save-outputs", c.run.save_outputs,
                      "Write every output of every step to DIR/step<N>_<name>.npy");
  c.run_cmd->add_flag("--bake-scalars", c.run.bake_scalars,
                    "Keep scalar constants in the graph (and its key) instead of lifting them to inputs");
  c.run_cmd->add_flag("--no-auto-dynamic", c.run.no_auto_dynamic,
                    "once: a dim whose size changes recompiles for every new size instead of becoming "
                    "dynamic (shape-polymorphic)");

}

// import: an ONNX model as a trace program and its weights.
void add_import_command(CLI::App& app, Commands& c) {
  using namespace tracecache::cli;
  c.import_cmd = app.add_subcommand(
      "import", "Import an ONNX model as a trace program (MODEL.trace) and its weights (MODEL.safetensors) (docs/onnx.md).");
  c.import_cmd->add_option("model", c.import.model, "ONNX model (.onnx); opsets 13 to 17");
  c.import_cmd->add_option("-o,--output", c.import.output,
                         "The trace program to write; the weights go beside it with the extension .safetensors "
                         "(default: the model's name with .trace, in the working directory)");
  c.import_cmd->add_option("--shape", c.import.shapes,
                         "NAME=DTYPE[d0, ...]: the type of model input NAME (needed for symbolic dims; repeatable)");
  c.import_cmd->add_option("--input", c.import.inputs,
                         "NAME=FILE.npy: model input NAME reads this file (its type is the file's; repeatable)");
  c.import_cmd->add_option("--const-input", c.import.const_inputs,
                         "NAME=FILE.npy: model input NAME is this constant (folded at import; for inputs that give "
                         "shapes, axes or pads; repeatable)");
  c.import_cmd->add_flag("--json", c.import.json, "Print a JSON summary (program, weights, inputs, outputs, ops)");
  c.import_cmd->add_flag("--list-ops", c.import.list_ops, "Print the supported ONNX ops and what each becomes, and exit");

}

// bench: step times and host overhead per mode.
void add_bench_command(CLI::App& app, Commands& c, const CommandEnv& e) {
  using namespace tracecache::cli;
  const std::string& threads_help = e.threads_help;
  c.bench.remote.env = e.remote;
  c.bench_cmd = app.add_subcommand(
      "bench", "Median step time and host overhead per step of trace programs in eager, lazy and once mode.");
  c.bench_cmd->add_option("targets", c.bench.targets, "Trace programs (.trace) or zoo model names")->required();
  c.bench_cmd->add_option("--preset", c.bench.preset, "Preset of zoo models: default or small")
      ->capture_default_str();
  c.bench_cmd->add_option("--modes", c.bench.modes, "Comma-separated modes to run: eager, lazy, once")
      ->capture_default_str();
  c.bench_cmd->add_option("--backend", c.bench.backend, "cpu, reference (eager and lazy only) or sim:PRESET|SPEC_FILE (lazy and once)")
      ->capture_default_str();
  c.bench_cmd->add_option("--steps", c.bench.steps,
                        fmt::format("Timed steps per target and mode (default: {}; {} for zoo models "
                                    "at the default preset)", kBenchSteps, kBenchZooSteps))
      ->check(whole_number_in(1));
  c.bench_cmd->add_option("--warmup", c.bench.warmup,
                        fmt::format("Untimed steps first, where traces and compiles happen (default: "
                                    "{}; {} for zoo models at the default preset)", kBenchWarmup,
                                    kBenchZooWarmup))
      ->check(whole_number_in(0));
  c.bench_cmd->add_option("--threads", c.bench.threads, threads_help)->check(whole_number_in(1));
  c.bench_cmd->add_option("--db", c.bench.db, "Cache database to use (default: none, compile in memory)");
  add_remote_options(c.bench_cmd, c.bench.remote);
  c.bench_cmd->add_flag("--json", c.bench.json, "Print one JSON object: rows (per target and mode), speedups, summary (per target) and geomean");

}

// zoo (cli/zoo_command.cc), show and diff: models, graphs and their differences.
void add_model_and_graph_commands(CLI::App& app, Commands& c, const CommandEnv& e) {
  using namespace tracecache::cli;
  const std::string& db_help = e.db_help;
  const std::string& threads_help = e.threads_help;
  c.zoo.run.db.env = e.cache;
  c.zoo.run.remote.env = e.remote;
  c.zoo_cmd = add_zoo_command(app, c.zoo, db_help, threads_help);

  c.show.db.env = e.cache;
  c.show_cmd = app.add_subcommand("show", "Print a program's canonical graphs and hashes, or a cached graph by hash.");
  c.show_cmd->add_option("target", c.show.target, "Trace program (.trace), or a 32-digit graph hash in the cache")->required();
  c.show_cmd->add_option("--steps", c.show.steps, "Steps to trace (default: the program's)")->check(whole_number_in(1));
  c.show_cmd->add_option("--db", c.show.db.flag, db_help);
  c.show_cmd->add_flag("--json", c.show.json, "Print JSON instead of text");
  c.show_cmd->add_flag("--bake-scalars", c.show.bake_scalars, "As for run");
  c.show_cmd->add_flag("--source", c.show.source, "Also print the program in canonical trace syntax");
  c.show_cmd->add_flag("--dot", c.show.dot,
                     "Print Graphviz DOT instead (one digraph per graph; render with `dot -Tsvg`)")
      ->excludes("--json")->excludes("--source");

  c.diff.db.env = e.cache;
  c.diff_cmd = app.add_subcommand(
      "diff", "What differs, node by node, between two graphs, with the program lines they came from.");
  c.diff_cmd->add_option("a", c.diff.a, "A graph hash or unique prefix in the cache, or a trace program (.trace)")
      ->required();
  c.diff_cmd->add_option("b", c.diff.b, "The same, for the second graph")->required();
  c.diff_cmd->add_option("--step", c.diff.step, "For programs: the step whose (first) graph is compared (default 0)")
      ->check(whole_number_in(0));
  c.diff_cmd->add_option("--db", c.diff.db.flag, db_help);
  c.diff_cmd->add_flag("--json", c.diff.json, "Print JSON instead of text");
  c.diff_cmd->add_flag("--bake-scalars", c.diff.bake_scalars, "As for run (programs)");
}

// The cache's commands: audit, ls, stats, gc, verify, and report.
void add_cache_commands(CLI::App& app, Commands& c, const CommandEnv& e) {
  using namespace tracecache::cli;
  const std::string& db_help = e.db_help;
  c.cache.db.env = e.cache;
  auto cache_cmd = [&](const char* name, const char* help) {
    CLI::App* sub = app.add_subcommand(name, help);
    sub->add_option("--db", c.cache.db.flag, db_help);
    sub->add_flag("--json", c.cache.json, "Print JSON instead of text");
    return sub;
  };
  c.audit_cmd = cache_cmd(
      "audit", "Per graph: its program, hits (memory/disk), misses with reasons and what differed, compiles, time saved.");
  c.audit_cmd->add_option("--program", c.cache.program,
                        "Only this program's events (its path as run, or its file name with or without .trace)");
  c.audit_cmd->add_option("--function", c.cache.function, "Only this compiled function's events (once mode: FILE:step)");
  c.audit_cmd->add_option("--kind", c.cache.kind,
                        "Only events of this kind: hit_memory, hit_disk, hit_remote, miss, compile, store, evict, "
                        "corrupt, store_failed, or the remote tier's miss_remote, store_remote, unavailable_remote, "
                        "skip_remote, store_failed_remote");
  c.audit_cmd->add_option("--since", c.cache.since,
                        "Only events since this time: an ISO date or date and time in UTC (2026-11-23, "
                        "2026-11-23T10:00), or an age (30s, 10m, 2h, 1d)");
  c.audit_cmd->add_option("--graph", c.cache.graph, "Only this graph: a hash or a unique prefix");
  CLI::Option* limit_option =
      c.audit_cmd->add_option("--limit", c.audit_limit,
                            fmt::format("Graph rows to show, the most recently used first (default {}; the "
                                        "output says how many more there are)", kAuditRows))
          ->check(whole_number_in(1));
  c.audit_cmd->add_flag("--all", c.audit_all, "Show every graph row (no limit)")->excludes(limit_option);
  c.audit_cmd->add_flag("--full-details", c.full_details,
                      fmt::format("Each miss's detail whole (default: cut at {} bytes, text and --json)",
                                  kAuditDetailBytes));
  c.ls_cmd = cache_cmd("ls", "List cached executables, most recently used first.");
  c.stats_cmd = cache_cmd("stats", "Entries, bytes and hit rate of the cache (--remote URL: of the remote tier).");
  c.stats_cmd->add_option("--remote", c.cache.remote.flag, "The remote tier's server to report on instead: redis://HOST:PORT[/DB] or unix:///PATH.sock");
  c.gc_cmd = cache_cmd(
      "gc", "Evict least recently used executables down to a byte budget, trim the audit log and old hit counts "
            "(--remote URL: clean the remote tier).");
  c.gc_cmd->add_option("--max-bytes", c.max_bytes,
                     "Budget for executables: bytes, or with K/M/G (default: no budget, executables are kept)");
  c.gc_cmd->add_option("--remote", c.cache.remote.flag,
                     "Clean the remote tier instead: delete entries of other tracecache versions and entries "
                     "that fail verification");
  c.gc_cmd->add_option("--max-events", c.cache.max_events, "Audit events to keep, newest first (default 100000)")
      ->check(whole_number_in(0, INT64_MAX));
  c.gc_cmd->add_option("--older-than", c.cache.older_than,
                     "Also drop events, hit counts and superseded function versions older than this: "
                     "seconds, or with m/h/d (e.g. 30d)");
  c.verify_cmd = cache_cmd("verify", "Check every stored blob; exit 1 if any is bad.");

  c.report.db.env = e.cache;
  c.report_cmd = app.add_subcommand(
      "report", "Write the audit as one self-contained HTML page: per program and function a timeline of hits, "
                "misses and compiles, each compile's reason and diff, recompiles, the graphs drawn (Graphviz), "
                "time saved, cache size, corrupt and fallback events.");
  c.report_cmd->add_option("-o,--output", c.report.output, "The HTML file to write (e.g. report.html)")->required();
  c.report_cmd->add_option("--db", c.report.db.flag, db_help);
  c.report_cmd->add_option("--program", c.report.program, "Only this program (as audit --program)");
  c.report_cmd->add_option("--function", c.report.function, "Only this compiled function (as audit --function)");
  c.report_cmd->add_option("--since", c.report.since, "Only events since this time (as audit --since)");

}

// TRACECACHE_THREADS (the default of every --threads) and TRACECACHE_VERBOSE (-v) for the
// commands that run programs. Returns an exit code when the environment is bad.
std::optional<int> apply_environment(Commands& c) {
  using namespace tracecache::cli;
  // TRACECACHE_THREADS is the default of every --threads (commands that run programs).
  // Parsed as Python parses it (replay/engine/setup.h).
  if (*c.run_cmd || *c.bench_cmd || *c.zoo_cmd) {
    tracecache::Result<std::optional<int>> threads_env = tracecache::threads_from_environment(env("TRACECACHE_THREADS"));
    if (!threads_env.is_ok()) return report_error(threads_env.status());
    for (int* t : {&c.run.threads, &c.bench.threads, &c.zoo.run.threads}) {
      if (*t == 0 && *threads_env) *t = **threads_env;
    }
  }

  // TRACECACHE_VERBOSE=1 is -v for the commands that run programs.
  if (const std::string verbose_env = env("TRACECACHE_VERBOSE"); !verbose_env.empty() && verbose_env != "0") {
    c.run.verbose = true;
    c.zoo.run.verbose = true;
  }
  return std::nullopt;
}

// Runs the command the arguments named; its exit code.
int dispatch(Commands& c) {
  using namespace tracecache::cli;
  try {
    if (*c.run_cmd) return run_command(c.run);
    if (*c.import_cmd) return import_command(c.import);
    if (*c.show_cmd) return show_command(c.show);
    if (*c.diff_cmd) return diff_command(c.diff);
    if (*c.bench_cmd) return bench_command(c.bench);
    if (*c.zoo_cmd) return zoo_command(*c.zoo_cmd, c.zoo);
    if (*c.audit_cmd) {
      c.cache.limit = c.audit_all ? -1 : c.audit_limit;
      c.cache.max_detail_bytes = c.full_details ? -1 : kAuditDetailBytes;
      return audit_command(c.cache);
    }
    if (*c.ls_cmd) return ls_command(c.cache);
    if (*c.stats_cmd) return c.cache.remote.flag.empty() ? stats_command(c.cache) : remote_stats_command(c.cache);
    if (*c.verify_cmd) return verify_command(c.cache);
    if (*c.report_cmd) return report_command(c.report);
    if (*c.gc_cmd && !c.cache.remote.flag.empty()) return remote_gc_command(c.cache);
    if (*c.gc_cmd) {
      if (c.max_bytes.empty() && c.gc_cmd->count("--max-events") == 0 && c.cache.older_than.empty()) {
        return report_error(tracecache::invalid_argument(
            "gc needs what to remove: --max-bytes B (executables), --max-events N or --older-than AGE (the audit "
            "log and hit counts), or --remote URL"));
      }
      if (!c.max_bytes.empty()) {
        auto bytes = parse_byte_size(c.max_bytes);
        if (!bytes.is_ok()) return report_error(bytes.status());
        c.cache.max_bytes = *bytes;
      }
      return gc_command(c.cache);
    }
  } catch (const tracecache::Error& e) {
    return report_error(e.status());  // e.g. a tensor larger than memory: the program's sizes
  } catch (const std::exception& e) {
    std::fputs(fmt::format("tracecache: internal error: {}\n", e.what()).c_str(), stderr);
    return kExitFailure;
  }
  return kExitFailure;
}

}  // namespace

int main(int argc, char** argv) {
  default_omp_wait_policy(argv);
  using namespace tracecache::cli;
  CLI::App app{"tracecache: capture tensor programs lazily, hash and cache their graphs, replay them.",
               "tracecache"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(tracecache::kToolkitVersion));
  const CommandEnv environment = command_env();
  Commands c;
  add_run_command(app, c, environment);
  add_import_command(app, c);
  add_bench_command(app, c, environment);
  add_model_and_graph_commands(app, c, environment);
  add_cache_commands(app, c, environment);

  if (report_unknown_command(app, std::span<char*>(argv + 1, static_cast<size_t>(argc - 1)), "")) {
    return kExitBadInput;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return report_parse_error(app, e, std::span<char*>(argv + 1, static_cast<size_t>(argc - 1)));
  }

  if (std::optional<int> bad = apply_environment(c)) return *bad;
  return dispatch(c);
}
