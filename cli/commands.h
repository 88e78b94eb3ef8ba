// The subcommands of `tracecache`. Each takes its parsed options, writes its report to stdout
// and diagnostics to stderr, and returns the process exit code.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "frontend/program/program.h"
#include "capture/core/status.h"
#include "cli/remote_options.h"
#include "replay/audit/times.h"
#include "store/sqlite/cache_db.h"

namespace CLI {
class App;
}

namespace tracecache::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;

// Where the cache lives: --db, else the environment (read once, in main).
struct DbOptions {
  std::string flag;
  store::CachePathEnv env;
  std::string path() const { return store::resolve_cache_path(flag, env); }
};
// A --db PATH the user typed must be in a directory that exists: a typo in it is reported
// (kInvalidArgument, exit 2), never a tree of directories silently created for it. The default
// path (from the environment) is exempt: its directory is created at first use.
Status check_db_flag_directory(std::string_view flag);

struct RunOptions {
  std::string program;
  std::string mode = "lazy";  // "eager", "lazy" or "once" (replay/engine/program_session.h)
  int steps = -1;  // -1: the program's default
  bool json = false;
  std::string save_outputs;  // empty: do not save
  bool bake_scalars = false;
  std::string backend = "cpu";  // "cpu", "reference" (uncached oracle) or "sim:PRESET|SPEC_FILE"
  bool no_cache = false;         // cpu without the disk cache
  bool metrics = false;
  bool no_auto_dynamic = false;  // once: every new size recompiles instead of becoming dynamic
  std::string timeline;  // cpu or sim: write a Chrome trace-event file here ("": none)
  int threads = 0;       // cpu: CpuBackendOptions::threads (0: the CPUs this process may use)
  DbOptions db;
  RemoteCliOptions remote;  // lazy and once: the shared tier after the disk
  // One class label per line for the top classes of classifier outputs ("": class numbers).
  std::string labels;
  bool quiet = false;  // print nothing but errors (and the JSON object with --json)
  // -v or TRACECACHE_VERBOSE: one line per step and graph on stderr (cli/step_report.h).
  bool verbose = false;
  // An ONNX model (MODEL.onnx, imported in memory: cli/import_command.cc): --input NAME=FILE.npy
  // and --shape NAME=DTYPE[dims] give its inputs' values and types.
  std::vector<std::string> inputs;
  std::vector<std::string> shapes;
  std::vector<std::string> const_inputs;  // NAME=FILE.npy: an input whose value is a constant
};
int run_command(const RunOptions& options);
// The help of the flags `run`, `zoo run` and `zoo train` share.
inline constexpr const char* kTimelineHelp =
    "cpu or sim: write the host and device timeline (steps, host work, kernels, flows from launch to "
    "kernel; on sim also device memory) to FILE.json, Chrome trace events for Perfetto or chrome://tracing";
inline constexpr const char* kLabelsHelp =
    "Class labels, one per line (class 0 first), to name the top-5 classes of classifier outputs "
    "(floating [N, C] outputs named *logits*)";
inline constexpr const char* kQuietHelp = "Print nothing but errors (and the JSON object with --json)";
// `run` on a program already in memory (options.program only labels it).
int run_loaded_program(const Program& program, const RunOptions& options);

// `import MODEL.onnx -o model.trace` (cli/import_command.cc): the model as a trace program plus
// its params (model.safetensors beside it); `import --list-ops`: the supported ONNX ops.
struct ImportCommandOptions {
  std::string model;
  std::string output;               // the .trace file; the params go to the same path with .safetensors
  std::vector<std::string> shapes;  // NAME=DTYPE[dims]
  std::vector<std::string> inputs;  // NAME=FILE.npy
  std::vector<std::string> const_inputs;  // NAME=FILE.npy, a constant (ImportOptions::constant_inputs)
  bool json = false;
  bool list_ops = false;
};
int import_command(const ImportCommandOptions& options);
// `run` on an ONNX model: imports it in memory (its params in a temporary directory, removed
// afterwards) and runs the program as run_loaded_program does.
int run_onnx_model(const RunOptions& options);
bool is_onnx_path(std::string_view path);

// `bench`: per target and mode, median step time and host overhead (step time minus kernel
// time) over timed steps that follow warmup steps; input generation is not timed.
struct BenchOptions {
  std::vector<std::string> targets;  // trace programs or zoo model names
  std::string preset = "default";    // for zoo models
  std::string modes = "eager,lazy,once";
  std::string backend = "cpu";
  // 0 / -1: per target, kBenchSteps / kBenchWarmup, or kBenchZooSteps / kBenchZooWarmup for
  // zoo models at the default (full-size) preset, whose steps take up to seconds on a CPU.
  int steps = 0;
  int warmup = -1;
  bool json = false;
  std::string db;  // empty: no disk cache (compiles stay in memory)
  RemoteCliOptions remote;
  int threads = 0;  // as RunOptions::threads
};
inline constexpr int kBenchSteps = 20, kBenchWarmup = 5;
inline constexpr int kBenchZooSteps = 10, kBenchZooWarmup = 2;
int bench_command(const BenchOptions& options);

// `zoo list | emit | run` (cli/zoo_command.cc).
struct ZooOptions {
  std::string model;
  std::string preset = "default";
  int64_t batch = 0;  // 0: the preset's
  int64_t resolution = 0;
  int64_t seq_len = 0;
  std::string weights;  // a .safetensors file; empty: deterministic initializers
  std::vector<std::string> inputs;  // NAME=FILE.npy: that input's value instead of its generator
  std::string output;   // emit: the program file; empty: stdout
  std::string save_weights;  // emit: also write the initial weights here (.safetensors)
  bool json = false;    // list
  RunOptions run;       // run, train: mode, backend, steps, cache, output format
  // train: the optimizer (zoo::TrainOptions); weight_decay < 0: the optimizer's default (adamw
  // 0.01, else 0).
  std::string optimizer = "sgd";
  double lr = 0.01;
  double momentum = 0;
  bool nesterov = false;
  double weight_decay = -1;
  int64_t train_steps = 10;
  std::string emit;             // train: write the training program here instead of running it
  bool output_params = false;   // train: output every new weight after the loss
};
// Adds the `zoo` command and its subcommands to `app`, parsing into `options`.
CLI::App* add_zoo_command(CLI::App& app, ZooOptions& options, const std::string& db_help,
                          const std::string& threads_help);
// Runs whichever subcommand of `zoo` (the App add_zoo_command returned) was given.
int zoo_command(const CLI::App& zoo, const ZooOptions& options);
// The trace program of zoo model `model` at `preset` (bench targets).
Result<Program> zoo_program(const std::string& model, const std::string& preset);
bool is_zoo_model(std::string_view name);

struct ShowOptions {
  std::string target;  // a .trace program, or a graph hash in the cache
  int steps = -1;
  bool json = false;
  bool bake_scalars = false;
  bool source = false;
  bool dot = false;  // Graphviz DOT text instead (replay/audit/graph_dot.h): one digraph per graph
  DbOptions db;
};
int show_command(const ShowOptions& options);

// `diff A B` (cli/diff_command.cc): A and B are graph hashes (or unique prefixes) in the cache,
// or trace programs (their graph at `step`).
struct DiffOptions {
  std::string a, b;
  int step = 0;
  bool json = false;
  bool bake_scalars = false;
  DbOptions db;
};
int diff_command(const DiffOptions& options);

struct CacheCommandOptions {
  bool json = false;
  DbOptions db;
  RemoteCliOptions remote;  // stats, gc: the remote tier's instead of the database's (--remote)
  uint64_t max_bytes = UINT64_MAX;  // gc: executables beyond this are evicted (UINT64_MAX: none)
  int64_t max_events = store::kDefaultMaxEvents;  // gc: audit events kept (newest first)
  std::string older_than;  // gc: drop events, hit counts and stale function versions older than this
  // audit: what to report on (store::AuditFilter); since: an ISO date/time (UTC) or an age
  // ("10m", "2h", "1d"); graph: a hash or unique prefix.
  std::string program, function, kind, since, graph;
  // audit: graph rows shown (the most recently used; < 0: all) and miss details cut to this many
  // bytes (< 0: whole). The command line's defaults are kAuditRows and kAuditDetailBytes.
  int64_t limit = -1;
  int64_t max_detail_bytes = -1;
};
inline constexpr int64_t kAuditRows = 50;
inline constexpr int64_t kAuditDetailBytes = 400;
// `audit`: the rows, or with --json the document (replay/audit/audit.h, the builder the Python
// package's tracecache.audit() shares).
int audit_command(const CacheCommandOptions& options);
int ls_command(const CacheCommandOptions& options);
int stats_command(const CacheCommandOptions& options);
int gc_command(const CacheCommandOptions& options);
int verify_command(const CacheCommandOptions& options);
// `stats --remote URL` and `gc --remote URL` (cli/remote_commands.cc): the remote tier's keys by
// kind and the server's memory settings; deleting keys of other versions and values that fail
// their seal.
int remote_stats_command(const CacheCommandOptions& options);
int remote_gc_command(const CacheCommandOptions& options);

// `report -o FILE` (cli/report_command.cc): writes the audit's HTML page (replay/audit/report.h,
// the builder the Python package's tracecache.report() shares) and says where; program, function
// and since filter as audit's.
struct ReportOptions {
  std::string output;
  std::string program, function, since;
  DbOptions db;
};
int report_command(const ReportOptions& options);

// Prints "tracecache: <message>" to stderr (control bytes escaped) and returns the exit code for
// `status`: kExitBadInput for errors in what the user gave us, kExitFailure otherwise.
int report_error(const Status& status);

// `text` with each control byte but newline and tab as \xNN: messages quote untrusted input (a
// program's tokens, file names), which must not drive the user's terminal.
std::string escape_control_bytes(std::string_view text);

// Parses an age: "3600" or "3600s", "90m", "12h", "30d" -> seconds (replay/audit/times.h).
using audit::parse_age;

// Parses "1048576", "64K", "10M", "2G" (powers of 1024).
Result<uint64_t> parse_byte_size(std::string_view text);

}  // namespace tracecache::cli
