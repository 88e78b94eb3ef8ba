// `tracecache run` and `tracecache show`.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <variant>

#include <unistd.h>

#include "frontend/files/npy.h"
#include "frontend/program/program.h"
#include "frontend/program/program_runner.h"
#include "capture/reference/reference.h"
#include "capture/trace/recording_executor.h"
#include "cli/common.h"
#include "cli/graph_targets.h"
#include "cli/interrupt.h"
#include "cli/progress_line.h"
#include "cli/step_report.h"
#include "replay/audit/graph_dot.h"
#include "replay/audit/graph_text.h"
#include "replay/audit/json.h"
#include "replay/engine/program_session.h"
#include "replay/backends/trace_event_writer.h"
#include "replay/engine/run_counters.h"
#include "replay/engine/runtime.h"
#include "replay/engine/toolkit_version.h"
#include "store/codec/graph_codec.h"

namespace tracecache::cli {

namespace {

LazyOptions lazy_options(bool bake_scalars, Metrics* metrics) {
  LazyOptions o;
  o.canonicalize.bake_scalars = bake_scalars;
  o.metrics = metrics;
  return o;
}

// A classifier's row: its most probable classes, most probable first.
struct ClassScore {
  int64_t index = 0;
  double probability = 0;
};
using TopClasses = std::vector<ClassScore>;

// Rows of a classifier output whose top classes `run` keeps (and prints): the first ones.
constexpr int64_t kTopRows = 8;
constexpr int64_t kTopClasses = 5;

// What `run` keeps of a step once its outputs are reported and saved: the graph keys and, per
// output, its type, checksum and what a person reads of it (a scalar's value, a classifier's
// top classes for its first rows). The output buffers themselves are dropped after each step,
// so memory does not grow with the number of steps.
struct OutputSummary {
  std::string name;
  DType dtype;
  Shape shape;
  std::string checksum;
  std::optional<std::variant<double, int64_t, bool>> value;  // one-element outputs
  std::vector<TopClasses> top;  // classifier outputs (is_classifier): min(rows, kTopRows) rows
};
struct StepSummary {
  std::vector<GraphKey> graph_keys;
  std::vector<OutputSummary> outputs;
};

// A classifier's logits, as `run` reads them: a floating [N, C] output with C >= 2 whose name says
// logits ("logits", "cls_logits"). Other matrices (features, probabilities, weights) are not
// softmaxed into classes.
bool is_classifier(std::string_view name, const HostBuffer& buf) {
  if (!is_floating(buf.dtype()) || buf.shape().rank() != 2 || buf.shape()[1] < 2) return false;
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower.find("logits") != std::string::npos;
}

// Softmax of each of the first kTopRows rows of [N, C] logits; the kTopClasses most probable
// classes of each (ties: the lower index first). A row with a non-finite logit gives NaN
// probabilities, in index order.
std::vector<TopClasses> top_classes(const HostBuffer& logits) {
  const int64_t rows = std::min(logits.shape()[0], kTopRows);
  const int64_t classes = logits.shape()[1];
  std::vector<TopClasses> out;
  std::vector<double> p(static_cast<size_t>(classes));
  std::vector<int64_t> order(static_cast<size_t>(classes));
  for (int64_t r = 0; r < rows; ++r) {
    double most = -INFINITY;
    for (int64_t c = 0; c < classes; ++c) {
      p[static_cast<size_t>(c)] = logits.element_as_double(r * classes + c);
      most = std::max(most, p[static_cast<size_t>(c)]);
    }
    double sum = 0;
    for (double& v : p) sum += (v = std::exp(v - most));
    for (double& v : p) v /= sum;
    for (int64_t c = 0; c < classes; ++c) order[static_cast<size_t>(c)] = c;
    const auto k = static_cast<std::ptrdiff_t>(std::min(classes, kTopClasses));
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&p](int64_t a, int64_t b) {
      const double pa = p[static_cast<size_t>(a)], pb = p[static_cast<size_t>(b)];
      return pa > pb || (!(pb > pa) && a < b);
    });
    TopClasses top;
    for (std::ptrdiff_t i = 0; i < k; ++i) {
      const int64_t c = order[static_cast<size_t>(i)];
      top.push_back({c, p[static_cast<size_t>(c)]});
    }
    out.push_back(std::move(top));
  }
  return out;
}

// The one-element value of `buf` as its dtype reads.
std::variant<double, int64_t, bool> scalar_value(const HostBuffer& buf) {
  const double v = buf.element_as_double(0);
  if (is_floating(buf.dtype())) return v;
  if (buf.dtype() == DType::kBool) return v != 0;
  return static_cast<int64_t>(v);
}

std::string format_value(const std::variant<double, int64_t, bool>& v) {
  if (const double* d = std::get_if<double>(&v)) return fmt::format("{:.6f}", *d);
  if (const int64_t* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  return std::get<bool>(v) ? "true" : "false";
}

// --labels FILE: one class label per line (class 0 first). Bad input (exit 2) when it cannot be
// read or is larger than any label list (kMaxLabelsBytes).
constexpr uintmax_t kMaxLabelsBytes = 64u << 20;
Result<std::vector<std::string>> read_labels(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) {
    return invalid_argument(fmt::format("--labels {}: cannot read: {} (pass a text file with one class label per line)",
                                        path, ec.message()));
  }
  if (size > kMaxLabelsBytes) {
    return invalid_argument(fmt::format("--labels {}: {} bytes is more than a label file holds (at most {} bytes)",
                                        path, size, kMaxLabelsBytes));
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return invalid_argument(fmt::format("--labels {}: cannot read: {} (pass a text file with one class label per line)",
                                        path, std::strerror(errno)));
  }
  std::vector<std::string> labels;
  for (std::string line; std::getline(file, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    labels.push_back(std::move(line));
  }
  return labels;
}

// "3 0.2312" or, with labels, "cat (3) 0.2312".
std::string format_class(const ClassScore& c, const std::vector<std::string>& labels) {
  if (labels.empty()) return fmt::format("{} {:.4f}", c.index, c.probability);
  return fmt::format("{} ({}) {:.4f}", labels[static_cast<size_t>(c.index)], c.index, c.probability);
}

// Checked before the first step, so that a path that cannot be written is bad input (exit 2)
// reported at once, not an error after a long run. The directory is created if missing.
Status check_output_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return invalid_argument(fmt::format("--save-outputs: cannot create directory '{}': {} (pass a "
                                        "directory you can write)", dir, ec.message()));
  }
  const std::filesystem::path probe = std::filesystem::path(dir) / fmt::format(".tracecache-probe-{}", ::getpid());
  std::FILE* f = std::fopen(probe.c_str(), "wb");
  if (!f) {
    return invalid_argument(fmt::format("--save-outputs: cannot write in directory '{}': {} (pass a "
                                        "directory you can write)", dir, std::strerror(errno)));
  }
  std::fclose(f);
  std::filesystem::remove(probe, ec);
  return Status::ok();
}

// `flag`'s output file can be created or overwritten; a file this check creates is removed.
Status check_output_file(std::string_view flag, const std::string& path) {
  std::error_code ec;
  const bool existed = std::filesystem::exists(path, ec);
  std::FILE* f = std::fopen(path.c_str(), "ab");
  if (!f) {
    return invalid_argument(fmt::format("{}: cannot write '{}': {} (pass a file in a directory you "
                                        "can write)", flag, path, std::strerror(errno)));
  }
  std::fclose(f);
  if (!existed) std::filesystem::remove(path, ec);
  return Status::ok();
}

// Writes one step's outputs to DIR/step<N>_<name>.npy.
Status save_step_outputs(const std::string& dir, size_t step,
                         const std::vector<std::pair<std::string, BufferRef>>& outputs) {
  for (const auto& [name, buf] : outputs) {
    std::string path = (std::filesystem::path(dir) / fmt::format("step{}_{}.npy", step, name)).string();
    Status st = write_npy(path, *buf);
    if (!st.is_ok()) return st;
  }
  return Status::ok();
}

// "time: first step 12.3 ms, later steps median 4.5 ms (total 21.3 ms)".
std::string step_time_summary(std::vector<double> ms) {
  if (ms.empty()) return "time: no steps";
  double total = 0;
  for (double m : ms) total += m;
  std::string out = fmt::format("time: first step {:.3f} ms", ms[0]);
  if (ms.size() > 1) {
    std::vector<double> later(ms.begin() + 1, ms.end());
    std::sort(later.begin(), later.end());
    size_t n = later.size();
    double median = n % 2 ? later[n / 2] : (later[n / 2 - 1] + later[n / 2]) / 2;
    out += fmt::format(", later steps median {:.3f} ms", median);
  }
  out += fmt::format(" (total {:.3f} ms)", total);
  return out;
}

void write_outputs_json(JsonWriter& j, const std::vector<StepSummary>& steps,
                        const std::vector<std::string>& labels) {
  j.key("graph_hashes").begin_array();
  for (const StepSummary& s : steps) {
    for (const GraphKey& k : s.graph_keys) j.value(k.to_hex());
  }
  j.end_array();
  j.key("outputs").begin_array();
  for (const StepSummary& s : steps) {
    j.begin_array();
    for (const OutputSummary& o : s.outputs) {
      j.begin_object();
      j.key("name").value(o.name);
      j.key("shape").begin_array();
      for (int64_t d : o.shape) j.value(d);
      j.end_array();
      j.key("dtype").value(dtype_name(o.dtype));
      j.key("checksum").value(o.checksum);
      if (o.value) std::visit([&j](auto v) { j.key("value").value(v); }, *o.value);
      if (!o.top.empty()) {
        j.key("top5").begin_array();
        for (const TopClasses& row : o.top) {
          j.begin_array();
          for (const ClassScore& c : row) {
            j.begin_object();
            j.key("class").value(c.index);
            if (!labels.empty()) j.key("label").value(labels[static_cast<size_t>(c.index)]);
            j.key("probability").value(c.probability);
            j.end_object();
          }
          j.end_array();
        }
        j.end_array();
      }
      j.end_object();
    }
    j.end_array();
  }
  j.end_array();
}

void write_counters_json(JsonWriter& j, const Metrics& m) {
  j.key("counters").begin_object();
  for (const auto& [name, value] : run_counters(m)) j.key(name).value(value);
  j.end_object();
  j.key("timers_ms").begin_object();
  for (const std::string& name : m.timer_names()) {
    TimerStats t = m.timer(name);
    j.key(name).begin_object();
    j.key("count").value(t.count);
    j.key("total").value(t.total_ms);
    j.key("p50").value(t.p50_ms);
    j.key("p90").value(t.p90_ms);
    j.key("max").value(t.max_ms);
    j.end_object();
  }
  j.end_object();
}

// --timeline: the timeline the backend records on (its own, a simulated clock's; for cpu
// `cpu_timeline`, which it is given), with the session's metrics spans on it. Bad input (exit 2) on the
// reference evaluator, which has no timeline.
Result<Timeline*> start_timeline(ProgramSession& s, Timeline& cpu_timeline, Metrics& metrics,
                                 const RunOptions& options) {
  Timeline* timeline = nullptr;
  Backend* backend = s.backend();
  if (Timeline* own = backend ? backend->own_timeline() : nullptr) {
    timeline = own;
  } else if (options.backend == "cpu") {
    // Eager mode has no backend: its ops' times come through the metrics' "run" spans.
    if (backend) (void)backend->set_timeline(&cpu_timeline);
    metrics.set_span_observer(&cpu_timeline);
    timeline = &cpu_timeline;
  } else {
    return invalid_argument(fmt::format("--timeline needs --backend cpu or sim (sim:PRESET, sim:SPEC_FILE), not {}",
                                        options.backend));
  }
  Status st = check_output_file("--timeline", options.timeline);
  if (!st.is_ok()) return st;
  timeline->set_record_events(true);
  return timeline;
}

Status write_timeline(const std::string& path, ProgramSession& s, const Timeline& timeline,
                      const RunOptions& options) {
  TraceEventNames names;
  const std::string program = std::filesystem::path(options.program).filename().string();
  if (const Backend* sim = s.backend(); sim && sim->simulated_clock()) {
    names.process = fmt::format("tracecache {} (sim {}, {})", program, sim->device_name(), mode_name(s.mode()));
    names.device_track = fmt::format("device {} stream", sim->device_name());
  } else {
    names.process = fmt::format("tracecache {} (cpu, {})", program, mode_name(s.mode()));
    names.device_track = "cpu kernels (on the host's threads)";
  }
  names.host_track = "host";
  return write_trace_event_file(path, timeline, names);
}

// `sim`: a backend with a simulated clock (and memory of its own).
void write_sim_json(JsonWriter& j, const Backend& sim, const std::vector<SimInterval>& steps) {
  const DeviceMemoryStats memory = sim.memory_stats().value_or(DeviceMemoryStats{});
  j.key("sim").begin_object();
  j.key("device").value(sim.device_name());
  j.key("options_digest").value(sim.options_digest());
  j.key("memory_capacity_bytes").value(memory.capacity);
  j.key("memory_peak_bytes").value(memory.peak);
  j.key("steps").begin_array();
  for (const SimInterval& i : steps) {
    j.begin_object();
    j.key("step_us").value(i.step_us);
    j.key("host_us").value(i.host_us);
    j.key("host_wait_us").value(i.host_wait_us);
    j.key("device_busy_us").value(i.device_busy_us);
    j.key("device_idle_us").value(i.device_idle_us);
    j.key("bytes_copied").value(i.bytes_copied);
    j.key("kernels").value(i.kernels);
    j.end_object();
  }
  j.end_array();
  j.end_object();
}

// Phase 1 of `run`: everything set up before the first step. Members are declared in the order
// they must outlive each other: the session points to the metrics, the cpu timeline, the
// database and the remote client.
struct RunSetup {
  SessionMode mode = SessionMode::kLazy;
  Metrics metrics;
  Timeline cpu_timeline;  // --timeline on cpu: the backend records on it
  std::unique_ptr<store::CacheDb> db;
  std::unique_ptr<store::RedisClient> remote;
  std::unique_ptr<ProgramSession> session;
  Timeline* timeline = nullptr;  // --timeline: the one recorded on
  std::vector<std::string> labels;
  // Metrics outlive the session; a cpu timeline is theirs to observe only while it runs.
  ~RunSetup() { metrics.set_span_observer(nullptr); }
};

Status set_up_run(const Program& program, const RunOptions& options, RunSetup& r) {
  std::optional<SessionMode> mode = parse_mode(options.mode);
  if (!mode) return invalid_argument(fmt::format("unknown mode '{}' (available: eager, lazy, once)", options.mode));
  r.mode = *mode;
  // The set-up path Python shares (replay/engine/setup.h): the database (one that cannot be
  // opened costs caching; a damaged one is said even under -q), the remote tier, the session.
  if (Status st = check_db_flag_directory(options.db.flag); !st.is_ok()) return st;
  Result<RemoteSetup> remote = remote_setup(options.remote);
  if (!remote.is_ok()) return remote.status();
  Result<OpenedSession> opened = open_session(
      {.session = {.mode = r.mode, .backend = options.backend, .backend_options = {.threads = options.threads},
                   .bake_scalars = options.bake_scalars, .metrics = &r.metrics,
                   .record_outcomes = options.verbose || options.json},
       .db = options.db.flag,
       .no_cache = options.no_cache,
       .remote = *remote,
       .env = {.cache = options.db.env},
       .program = &program,
       .automatic_dynamic = !options.no_auto_dynamic});
  if (!opened.is_ok()) return opened.status();
  if (!opened->cache_warning.empty() && (!options.quiet || opened->cache_damaged)) warn(opened->cache_warning);
  r.db = std::move(opened->db);
  r.remote = std::move(opened->remote);
  r.session = std::move(opened->program_session);
  if (!options.timeline.empty()) {
    Result<Timeline*> started = start_timeline(*r.session, r.cpu_timeline, r.metrics, options);
    if (!started.is_ok()) return started.status();
    r.timeline = *started;
  }
  if (!options.labels.empty()) {
    Result<std::vector<std::string>> read = read_labels(options.labels);
    if (!read.is_ok()) return read.status();
    r.labels = std::move(*read);
  }
  if (!options.save_outputs.empty()) return check_output_dir(options.save_outputs);
  return Status::ok();
}

// What the steps gathered (phase 2), for the summary.
struct RunRecord {
  std::vector<StepSummary> steps;  // --json only: text mode prints each step as it ends
  size_t steps_run = 0;
  int64_t steps_planned = 0;
  bool any_classifier = false;
  std::vector<double> step_ms;  // each step's run (recording or guards, execution), not its inputs
  std::vector<SimInterval> sim_steps;
  int interrupted_by = 0;  // the signal that ended the run early (0: none)
};

// The step's slice on the --timeline: what it ran on the backend (none in eager mode or when it
// fell back).
void record_step_on_timeline(Timeline& timeline, int step, SessionMode mode, size_t graphs_before,
                             int64_t start_ps) {
  std::vector<std::string> graphs;
  for (size_t g = graphs_before; g < timeline.graphs_run().size(); ++g) {
    graphs.push_back(timeline.graphs_run()[g].to_hex());
  }
  timeline.record_host(fmt::format("step {}", step), "step", start_ps, timeline.host_now_ps(),
                       {{"step", int64_t{step}},
                        {"mode", std::string(mode_name(mode))},
                        {"graph", fmt::format("{}", fmt::join(graphs, ","))}});
}

// What `run` keeps of one step's outputs (their buffers are dropped after the step).
Result<StepSummary> summarize_step(const std::vector<std::pair<std::string, BufferRef>>& outputs,
                                   const std::vector<std::string>& labels, const RunOptions& options) {
  StepSummary r;
  for (const auto& [name, buf] : outputs) {
    OutputSummary o{name, buf->dtype(), buf->shape(), buf->checksum(), {}, {}};
    if (buf->numel() == 1) o.value = scalar_value(*buf);
    if (is_classifier(name, *buf)) {
      if (!labels.empty() && labels.size() < static_cast<size_t>(buf->shape()[1])) {
        return invalid_argument(fmt::format(
            "--labels {} has {} labels, output '{}' ({}) has {} classes (one label per line, class 0 first)",
            options.labels, labels.size(), name, type_to_string({buf->dtype(), buf->shape()}), buf->shape()[1]));
      }
      o.top = top_classes(*buf);
    }
    r.outputs.push_back(std::move(o));
  }
  return r;
}

// Runs step `step`: inputs, the step itself (timed), the timeline's slice, the step report, the
// saved outputs.
Result<StepSummary> run_step(const Program& program, const RunOptions& options, int step, RunSetup& r,
                             StepReport& report, RunRecord& record) {
  ProgramSession& s = *r.session;
  const size_t keys_before = s.executed_keys().size();
  Result<ProgramSession::PreparedStep> prepared = s.prepare(step);
  if (!prepared.is_ok()) return prepared.status();
  const std::optional<SimSnapshot> before = s.backend() ? s.backend()->simulated_clock() : std::nullopt;
  const size_t graphs_before = r.timeline ? r.timeline->graphs_run().size() : 0;
  const int64_t timeline_start = r.timeline ? r.timeline->host_now_ps() : 0;
  report.before_step(s);
  auto start = std::chrono::steady_clock::now();
  Result<std::vector<BufferRef>> values = s.run(*prepared);
  record.step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  if (r.timeline) record_step_on_timeline(*r.timeline, step, r.mode, graphs_before, timeline_start);
  if (!values.is_ok()) return values.status();
  report.after_step(step, s);
  if (before) record.sim_steps.push_back(sim_interval(*before, *s.backend()->simulated_clock()));
  std::vector<std::pair<std::string, BufferRef>> outputs;
  for (size_t k = 0; k < values->size(); ++k) outputs.emplace_back(program.outputs[k].name, std::move((*values)[k]));
  if (!options.save_outputs.empty()) {
    Status st = save_step_outputs(options.save_outputs, static_cast<size_t>(step), outputs);
    if (!st.is_ok()) return st;
  }
  Result<StepSummary> summary = summarize_step(outputs, r.labels, options);
  if (!summary.is_ok()) return summary.status();
  const std::vector<GraphKey>& keys = s.executed_keys();
  summary->graph_keys.assign(keys.begin() + static_cast<std::ptrdiff_t>(keys_before), keys.end());
  return summary;
}

// One step's lines of the text output: its graphs (lazy mode) and each output's type, value or
// top classes, and checksum.
void print_step(size_t step, const StepSummary& r, SessionMode mode, const std::vector<std::string>& labels) {
  std::string keys;
  for (const GraphKey& k : r.graph_keys) {
    if (!keys.empty()) keys += ',';
    keys += k.to_hex();
  }
  std::string text = mode == SessionMode::kLazy ? fmt::format("step {}  graph {}\n", step, keys)
                                                : fmt::format("step {}\n", step);
  for (const OutputSummary& o : r.outputs) {
    std::string value = o.value ? format_value(*o.value) + "  " : "";
    text += fmt::format("  {:<12} {:<16} {}checksum {}\n", o.name, type_to_string({o.dtype, o.shape}), value,
                        o.checksum);
    for (size_t row = 0; row < o.top.size(); ++row) {
      std::vector<std::string> classes;
      for (const ClassScore& c : o.top[row]) classes.push_back(format_class(c, labels));
      text += fmt::format("    row {} top-{}: {}\n", row, o.top[row].size(), fmt::join(classes, ", "));
    }
    if (!o.top.empty() && static_cast<int64_t>(o.top.size()) < o.shape[0]) {
      text += fmt::format("    (the first {} of {} rows)\n", o.top.size(), o.shape[0]);
    }
  }
  out(text);
}

// Phase 2: the steps, each printed (text mode) as it ends, until the last one, an error, or
// Ctrl-C / SIGTERM (then after the step that was running).
Status run_steps(const Program& program, const RunOptions& options, RunSetup& r, StepReport& report,
                 RunRecord& record) {
  record.steps_planned = options.steps == -1 ? program.default_steps() : options.steps;
  const bool print_steps = !options.json && !options.quiet;
  ProgressLine progress(record.steps_planned, ProgressLine::should_show(options.quiet, options.verbose, options.json));
  Interrupt interrupt;
  for (int step = 0; step < record.steps_planned; ++step) {
    Result<StepSummary> summary = run_step(program, options, step, r, report, record);
    if (!summary.is_ok()) return summary.status();
    ++record.steps_run;
    record.any_classifier = record.any_classifier || std::any_of(summary->outputs.begin(), summary->outputs.end(),
                                                                 [](const OutputSummary& o) { return !o.top.empty(); });
    if (print_steps) {
      progress.clear();
      print_step(static_cast<size_t>(step), *summary, r.mode, r.labels);
      std::fflush(stdout);  // a pipe or a file sees each step as it ends, not all at exit
    }
    if (options.json) record.steps.push_back(std::move(*summary));
    progress.step_done(step + 1, record.step_ms.back());
    if (interrupt.requested()) {
      record.interrupted_by = interrupt.signal();
      break;
    }
  }
  return Status::ok();
}

// The --json document: the steps, their outputs, counters, the function, the step report and
// the simulated device.
void print_run_json(const RunOptions& options, RunSetup& r, const RunRecord& record, const StepReport& report,
                    const std::vector<std::string>& reasons) {
  ProgramSession& s = *r.session;
  JsonWriter j;
  j.begin_object();
  j.key("program").value(options.program);
  j.key("version").value(kToolkitVersion);
  j.key("mode").value(mode_name(r.mode));
  j.key("backend").value(options.backend);
  if (r.db) j.key("db").value(r.db->path());
  else j.key("db").null();
  j.key("steps").value(record.steps.size());
  if (record.interrupted_by != 0) {
    j.key("interrupted").begin_object();
    j.key("signal").value(signal_name(record.interrupted_by));
    j.key("at_step").value(record.steps_run - 1);
    j.key("steps_planned").value(record.steps_planned);
    j.end_object();
  }
  j.key("step_ms").begin_array();
  for (double ms : record.step_ms) j.value(ms);
  j.end_array();
  write_outputs_json(j, record.steps, r.labels);
  write_counters_json(j, r.metrics);
  if (const CompiledFunction* f = s.function()) {
    j.key("function").begin_object();
    j.key("name").value(f->name());
    j.key("entries").value(f->num_entries());
    j.key("traces").value(f->stats().traces);
    j.key("fell_back_to_lazy").value(f->stats().fell_back_to_lazy);
    j.end_object();
  }
  j.key("recompile_reasons").begin_array();
  for (const std::string& reason : reasons) j.value(reason);
  j.end_array();
  report.write_json(j);
  if (s.backend() && s.backend()->simulated_clock()) write_sim_json(j, *s.backend(), record.sim_steps);
  j.end_object();
  out(j.str() + "\n");
  if (options.metrics) std::fputs(r.metrics.report().c_str(), stderr);
}

// The text summary after the steps: counters, step times, once mode's guards and recompiles, the
// simulated device's totals, the metrics.
void print_run_summary(const RunOptions& options, RunSetup& r, const RunRecord& record,
                       const std::vector<std::string>& reasons) {
  const Metrics& metrics = r.metrics;
  out(fmt::format("{} steps ({} mode), {} traces, {} compiles, {} memory hits, {} disk hits, {}{} misses\n",
                  record.steps_run, mode_name(r.mode), metrics.counter(counters::kTraces),
                  metrics.counter(counters::kCompiles), metrics.counter(counters::kHitsMemory),
                  metrics.counter(counters::kHitsDisk),
                  r.remote ? fmt::format("{} remote hits, ", metrics.counter("cache_hits_remote")) : std::string(),
                  metrics.counter(counters::kMisses)));
  out(step_time_summary(record.step_ms) + "\n");
  if (r.mode == SessionMode::kOnce) {
    out(fmt::format("{} guard checks, {} guard failures, {} recompiles\n", metrics.counter(counters::kGuardChecks),
                    metrics.counter(counters::kGuardFailures), metrics.counter(counters::kRecompiles)));
    if (int64_t n = metrics.counter(counters::kSpecializations)) {
      out(fmt::format("{} shape specializations (dynamic entries at new sizes, no trace)\n", n));
    }
    for (const std::string& reason : reasons) out(fmt::format("recompile: {}\n", reason));
  }
  if (const Backend* sim = r.session->backend(); sim && sim->simulated_clock()) {
    SimInterval total;
    for (const SimInterval& i : record.sim_steps) {
      total.step_us += i.step_us;
      total.host_us += i.host_us;
      total.device_busy_us += i.device_busy_us;
      total.device_idle_us += i.device_idle_us;
      total.bytes_copied += i.bytes_copied;
    }
    const double n = static_cast<double>(std::max<size_t>(record.sim_steps.size(), 1));
    out(fmt::format("sim {}: total over {} steps {:.1f} us (host {:.1f} us), device busy {:.1f} us, idle {:.1f} us, "
                    "{} bytes copied; per step {:.1f} us; peak memory {} bytes\n",
                    sim->device_name(), record.sim_steps.size(), total.step_us, total.host_us, total.device_busy_us,
                    total.device_idle_us, total.bytes_copied, total.step_us / n,
                    sim->memory_stats().value_or(DeviceMemoryStats{}).peak));
  }
  if (options.metrics) out(metrics.report());
}

}  // namespace

int run_command(const RunOptions& options) {
  if (is_onnx_path(options.program)) return run_onnx_model(options);
  if (!options.inputs.empty() || !options.shapes.empty() || !options.const_inputs.empty()) {
    return report_error(invalid_argument("--input, --const-input and --shape are for ONNX models (MODEL.onnx); a trace program "
                                         "names its inputs' files in the program (npy(\"FILE\"))"));
  }
  Result<Program> program = load_program(options.program);
  if (!program.is_ok()) return report_error(program.status());
  return run_loaded_program(*program, options);
}

int run_loaded_program(const Program& program, const RunOptions& options) {
  RunSetup setup;
  Status set_up = set_up_run(program, options, setup);
  if (!set_up.is_ok()) return report_error(set_up);

  StepReport report(options.verbose, options.json);
  RunRecord record;
  const Status ran = run_steps(program, options, setup, report, record);
  // The hit counts the runtime holds reach the database whether the steps ended, failed or were
  // interrupted.
  if (Runtime* runtime = setup.session->runtime()) {
    runtime->flush();
    if (!options.quiet) {
      for (const std::string& w : runtime->warnings()) warn(w);
    }
  }
  if (!ran.is_ok()) return report_error(ran);
  if (!setup.labels.empty() && !options.quiet && !record.any_classifier) {
    warn(fmt::format("--labels {}: no output is a classifier's logits (a floating [N, C] output named *logits*); "
                     "the labels name nothing", options.labels));
  }
  report.finish(setup.mode, record.steps_run);
  if (record.interrupted_by != 0) {
    std::fputs(fmt::format("tracecache: interrupted at step {} ({}): {} of {} steps ran; the summary so far "
                           "follows and the replay counts are in the cache\n",
                           record.steps_run - 1, signal_name(record.interrupted_by), record.steps_run,
                           record.steps_planned)
                   .c_str(),
               stderr);
  }
  if (setup.timeline) {
    Status st = write_timeline(options.timeline, *setup.session, *setup.timeline, options);
    if (!st.is_ok()) return report_error(st);
  }
  static const std::vector<std::string> kNoReasons;
  const std::vector<std::string>& reasons =
      setup.session->function() ? setup.session->function()->stats().recompile_reasons : kNoReasons;
  if (options.json) {
    print_run_json(options, setup, record, report, reasons);
  } else if (!options.quiet) {
    print_run_summary(options, setup, record, reasons);
  }
  return record.interrupted_by != 0 ? interrupted_exit_code(record.interrupted_by) : kExitOk;
}

namespace {

// `show HASH`: a graph from the cache.
int show_cached_graph(const ShowOptions& options, const GraphKey& key) {
  Result<std::unique_ptr<store::CacheDb>> db = open_existing_db(options.db);
  if (!db.is_ok()) return report_error(db.status());
  Result<std::optional<std::string>> blob = (*db)->get_graph(key);
  if (!blob.is_ok()) return report_error(blob.status());
  if (!blob->has_value()) {
    return report_error(not_found(fmt::format("graph {} is not in the cache '{}' (see `tracecache ls`)",
                                              key.to_hex(), (*db)->path())));
  }
  Result<Graph> graph = store::parse_graph(**blob);
  if (!graph.is_ok()) return report_error(graph.status());
  Result<std::vector<store::EntryInfo>> entries = (*db)->list_executables();
  if (!entries.is_ok()) return report_error(entries.status());
  Result<std::optional<GraphSources>> stored_sources = (*db)->get_graph_sources(key);
  if (!stored_sources.is_ok()) warn(stored_sources.status().message());
  const GraphSources sources =
      stored_sources.is_ok() && stored_sources->has_value() ? **stored_sources : GraphSources{};
  if (options.dot) {
    out(audit::graph_to_dot(*graph, sources, key.to_hex()));
    return kExitOk;
  }
  if (options.json) {
    JsonWriter j;
    j.begin_object();
    j.key("hash").value(key.to_hex());
    j.key("program").value(sources.program);
    j.key("function").value(sources.function);
    j.key("sources").begin_array();
    for (const std::string& n : sources.nodes) j.value(n);
    j.end_array();
    j.key("nodes").value(graph->size());
    j.key("params").value(graph->params().size());
    j.key("outputs").value(graph->outputs().size());
    j.key("graph").value(graph->to_text());
    j.key("executables").begin_array();
    for (const store::EntryInfo& e : *entries) {
      if (e.key.graph != key) continue;
      j.begin_object();
      j.key("backend").value(e.key.backend);
      j.key("options_digest").value(e.key.options_digest);
      j.key("compiler_version").value(static_cast<uint64_t>(e.key.compiler_version));
      j.key("bytes").value(e.bytes);
      j.key("uses").value(e.uses);
      j.end_object();
    }
    j.end_array();
    j.end_object();
    out(j.str() + "\n");
    return kExitOk;
  }
  out(fmt::format("graph {}  ({} nodes, {} params, {} outputs)\n", key.to_hex(), graph->size(),
                  graph->params().size(), graph->outputs().size()));
  if (!sources.program.empty()) {
    out(fmt::format("program {}{}\n", sources.program,
                    sources.function.empty() ? std::string() : fmt::format(", function {}", sources.function)));
  }
  out(audit::graph_text_with_sources(*graph, sources));
  for (const store::EntryInfo& e : *entries) {
    if (e.key.graph != key) continue;
    out(fmt::format("executable: backend {} options {} compiler v{}  {} bytes, {} uses\n",
                    e.key.backend, e.key.options_digest, e.key.compiler_version, e.bytes, e.uses));
  }
  return kExitOk;
}

}  // namespace

int show_command(const ShowOptions& options) {
  if (Status st = check_not_short_key_prefix(options.target); !st.is_ok()) return report_error(st);
  std::error_code ec;
  if (store::looks_like_key_prefix(options.target) && !std::filesystem::exists(options.target, ec)) {
    // A full hash or a unique prefix of one (as `audit` prints), like git.
    Result<std::unique_ptr<store::CacheDb>> db = open_existing_db(options.db);
    if (!db.is_ok()) return report_error(db.status());
    Result<GraphKey> key = store::resolve_graph_key(**db, options.target);
    if (!key.is_ok()) return report_error(key.status());
    return show_cached_graph(options, *key);
  }
  Result<Program> program = load_program(options.target);
  if (!program.is_ok()) return report_error(program.status());

  RecordingExecutor executor;
  LazyContext ctx(&executor, lazy_options(options.bake_scalars, nullptr));
  Result<std::vector<StepResult>> steps = run_program(*program, ctx, options.steps);
  if (!steps.is_ok()) return report_error(steps.status());

  // Distinct graphs in order of first appearance, with the steps that ran each.
  std::vector<const CanonicalGraph*> distinct;
  std::map<GraphKey, std::vector<size_t>> steps_of;
  for (size_t step = 0; step < steps->size(); ++step) {
    for (const GraphKey& k : (*steps)[step].graph_keys) {
      auto [it, inserted] = steps_of.try_emplace(k);
      if (inserted) {
        for (const RecordedGraph& r : executor.graphs()) {
          if (r.graph.key == k) {
            distinct.push_back(&r.graph);
            break;
          }
        }
      }
      it->second.push_back(step);
    }
  }

  if (options.json) {
    JsonWriter j;
    j.begin_object();
    j.key("program").value(options.target);
    j.key("steps").value(steps->size());
    j.key("graphs").begin_array();
    for (const CanonicalGraph* cg : distinct) {
      j.begin_object();
      j.key("hash").value(cg->key.to_hex());
      j.key("nodes").value(cg->graph.size());
      j.key("params").value(cg->graph.params().size());
      j.key("outputs").value(cg->graph.outputs().size());
      j.key("steps").begin_array();
      for (size_t s : steps_of[cg->key]) j.value(s);
      j.end_array();
      j.key("graph").value(cg->graph.to_text());
      j.key("sources").begin_array();
      for (const std::string& n : graph_sources(*cg).nodes) j.value(n);
      j.end_array();
      j.end_object();
    }
    j.end_array();
    if (options.source) j.key("source").value(print_program(*program));
    j.end_object();
    out(j.str() + "\n");
    return kExitOk;
  }

  if (options.dot) {
    for (const CanonicalGraph* cg : distinct) out(audit::graph_to_dot(cg->graph, graph_sources(*cg), cg->key.to_hex()));
    return kExitOk;
  }
  if (options.source) out(print_program(*program) + "\n");
  for (const CanonicalGraph* cg : distinct) {
    out(fmt::format("graph {}  ({} nodes, {} params, {} outputs; steps {})\n", cg->key.to_hex(),
                    cg->graph.size(), cg->graph.params().size(), cg->graph.outputs().size(),
                    fmt::join(steps_of[cg->key], ",")));
    out(audit::graph_text_with_sources(cg->graph, graph_sources(*cg)) + "\n");
  }
  out(fmt::format("hash {}\n", distinct.empty() ? std::string("none") : distinct.front()->key.to_hex()));
  return kExitOk;
}

}  // namespace tracecache::cli
