// `tracecache run` and `tracecache show`.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>

#include <unistd.h>

#include "frontend/files/npy.h"
#include "frontend/program/program.h"
#include "frontend/program/program_runner.h"
#include "capture/reference/reference.h"
#include "capture/trace/recording_executor.h"
#include "cli/common.h"
#include "cli/graph_dot.h"
#include "cli/graph_targets.h"
#include "cli/json.h"
#include "cli/step_report.h"
#include "runtime/program_session.h"
#include "backends/cpu/cpu_backend.h"
#include "runtime/runtime.h"
#include "backends/sim/sim_backend.h"
#include "runtime/toolkit_version.h"
#include "store/codec/graph_codec.h"

namespace tracecache::cli {

namespace {

LazyOptions lazy_options(bool bake_scalars, Metrics* metrics) {
  LazyOptions o;
  o.canonicalize.bake_scalars = bake_scalars;
  o.metrics = metrics;
  return o;
}

// What `run` keeps of a step once its outputs are reported and saved: the graph keys and, per
// output, its type and checksum. The output buffers themselves are dropped after each step, so
// memory does not grow with the number of steps.
struct OutputSummary {
  std::string name;
  DType dtype;
  Shape shape;
  std::string checksum;
  std::optional<double> value;  // RunOptions::show_values: a one-element floating output's value
};
struct StepSummary {
  std::vector<GraphKey> graph_keys;
  std::vector<OutputSummary> outputs;
};

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

// The cache for `run`: a database that cannot be opened costs caching, not results (invariant
// 6), except one from a newer schema, which is refused rather than guessed at.
Result<std::unique_ptr<store::CacheDb>> open_run_db(const RunOptions& o) {
  if (o.no_cache) return std::unique_ptr<store::CacheDb>();
  std::string path = o.db.path();
  Result<std::unique_ptr<store::CacheDb>> db = store::CacheDb::open({.path = path});
  if (db.is_ok()) return db;
  // A newer schema, or a path that can never be a database file (a directory, a FIFO), is refused.
  if (db.status().code() == StatusCode::kUnsupported || db.status().code() == StatusCode::kInvalidArgument) {
    return db.status();
  }
  warn(fmt::format("running without the cache: {}", db.status().message()));
  return std::unique_ptr<store::CacheDb>();
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

void write_outputs_json(JsonWriter& j, const std::vector<StepSummary>& steps) {
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
      if (o.value) j.key("value").value(*o.value);
      j.end_object();
    }
    j.end_array();
  }
  j.end_array();
}

void write_counters_json(JsonWriter& j, const Metrics& m) {
  // The documented counters always appear, even when zero.
  const std::string_view always[] = {counters::kTraces,       counters::kCompiles,
                                     counters::kHitsMemory,   counters::kHitsDisk,
                                     counters::kMisses,       counters::kExecutions,
                                     counters::kGuardChecks,  counters::kGuardFailures,
                                     counters::kRecompiles,   counters::kSpecializations};
  j.key("counters").begin_object();
  for (std::string_view name : always) j.key(name).value(m.counter(name));
  for (const auto& [name, value] : m.counters()) {
    if (std::find(std::begin(always), std::end(always), name) == std::end(always)) j.key(name).value(value);
  }
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

// The sim backend's timeline as a Chrome/Perfetto trace-event file: one process, a host thread
// (tid 1) and a device-stream thread (tid 2), complete ("X") events with ts/dur in microseconds.
Status write_timeline(const std::string& path, const SimBackend& sim) {
  std::vector<const TimelineEvent*> events;
  for (const TimelineEvent& e : sim.timeline().events()) events.push_back(&e);
  std::stable_sort(events.begin(), events.end(), [](const TimelineEvent* a, const TimelineEvent* b) {
    return std::pair(a->track, a->start_ps) < std::pair(b->track, b->start_ps);
  });
  JsonWriter j;
  j.begin_object();
  j.key("displayTimeUnit").value("ns");
  j.key("traceEvents").begin_array();
  auto metadata = [&j](std::string_view what, int tid, std::string_view name) {
    j.begin_object();
    j.key("name").value(what);
    j.key("ph").value("M");
    j.key("pid").value(1);
    j.key("tid").value(tid);
    j.key("args").begin_object().key("name").value(name).end_object();
    j.end_object();
  };
  metadata("process_name", 0, fmt::format("tracecache (sim {})", sim.spec().name));
  metadata("thread_name", 1, "host");
  metadata("thread_name", 2, fmt::format("device {} stream", sim.spec().name));
  for (const TimelineEvent* e : events) {
    j.begin_object();
    j.key("name").value(e->name);
    j.key("cat").value(e->category);
    j.key("ph").value("X");
    j.key("ts").value(static_cast<double>(e->start_ps) / 1e6);
    j.key("dur").value(static_cast<double>(e->duration_ps) / 1e6);
    j.key("pid").value(1);
    j.key("tid").value(e->track == TimelineEvent::Track::kHost ? 1 : 2);
    if (e->flops >= 0 || e->bytes >= 0) {
      j.key("args").begin_object();
      if (e->flops >= 0) j.key("flops").value(e->flops);
      if (e->bytes >= 0) j.key("bytes").value(e->bytes);
      j.end_object();
    }
    j.end_object();
  }
  j.end_array();
  j.end_object();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return io_error(fmt::format("cannot write the timeline '{}': {}", path, std::strerror(errno)));
  const std::string& text = j.str();
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size() && std::fputc('\n', f) != EOF;
  if (std::fclose(f) != 0 || !ok) return io_error(fmt::format("cannot write the timeline '{}'", path));
  return Status::ok();
}

void write_sim_json(JsonWriter& j, const SimBackend& sim, const std::vector<SimInterval>& steps) {
  j.key("sim").begin_object();
  j.key("device").value(sim.spec().name);
  j.key("options_digest").value(sim.options_digest());
  j.key("memory_capacity_bytes").value(sim.spec().memory_capacity);
  j.key("memory_peak_bytes").value(sim.memory_peak());
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

}  // namespace

int run_command(const RunOptions& options) {
  Result<Program> program = load_program(options.program);
  if (!program.is_ok()) return report_error(program.status());
  return run_loaded_program(*program, options);
}

int run_loaded_program(const Program& program, const RunOptions& options) {
  std::optional<SessionMode> mode = parse_mode(options.mode);
  if (!mode) {
    return report_error(invalid_argument(
        fmt::format("unknown mode '{}' (available: eager, lazy, once)", options.mode)));
  }

  Metrics metrics;
  std::unique_ptr<store::CacheDb> db;
  if (options.backend != "reference" && *mode != SessionMode::kEager) {
    Result<std::unique_ptr<store::CacheDb>> opened = open_run_db(options);
    if (!opened.is_ok()) return report_error(opened.status());
    db = std::move(*opened);
  }
  Result<std::unique_ptr<ProgramSession>> session = ProgramSession::create(
      program, {.session = {.mode = *mode, .backend = options.backend,
                            .backend_options = {.threads = options.threads}, .db = db.get(),
                            .bake_scalars = options.bake_scalars, .metrics = &metrics,
                            .record_outcomes = options.verbose || options.json},
                .automatic_dynamic = !options.no_auto_dynamic});
  if (!session.is_ok()) return report_error(session.status());
  ProgramSession& s = **session;
  if (!options.timeline.empty()) {
    if (!s.sim()) return report_error(invalid_argument("--timeline needs --backend sim:PRESET or sim:SPEC_FILE"));
    Status st = check_output_file("--timeline", options.timeline);
    if (!st.is_ok()) return report_error(st);
    s.sim()->timeline().set_record_events(true);
  }
  if (!options.save_outputs.empty()) {
    Status st = check_output_dir(options.save_outputs);
    if (!st.is_ok()) return report_error(st);
  }
  std::vector<SimInterval> sim_steps;

  std::vector<double> step_ms;  // each step's run (recording or guards, execution), not its inputs
  StepReport report(options.verbose, options.json);
  Result<std::vector<StepSummary>> steps = [&]() -> Result<std::vector<StepSummary>> {
    int64_t n = options.steps == -1 ? program.default_steps() : options.steps;
    std::vector<StepSummary> results;
    for (int step = 0; step < n; ++step) {
      size_t keys_before = s.executed_keys().size();
      Result<ProgramSession::PreparedStep> prepared = s.prepare(step);
      if (!prepared.is_ok()) return prepared.status();
      const SimSnapshot before = s.sim() ? s.sim()->snapshot() : SimSnapshot{};
      report.before_step(s);
      auto start = std::chrono::steady_clock::now();
      Result<std::vector<BufferRef>> values = s.run(*prepared);
      step_ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      if (!values.is_ok()) return values.status();
      report.after_step(step, s);
      if (s.sim()) sim_steps.push_back(sim_interval(before, s.sim()->snapshot()));
      std::vector<std::pair<std::string, BufferRef>> outputs;
      for (size_t k = 0; k < values->size(); ++k) {
        outputs.emplace_back(program.outputs[k].name, std::move((*values)[k]));
      }
      if (!options.save_outputs.empty()) {
        Status st = save_step_outputs(options.save_outputs, results.size(), outputs);
        if (!st.is_ok()) return st;
      }
      StepSummary r;
      for (const auto& [name, buf] : outputs) {
        r.outputs.push_back({name, buf->dtype(), buf->shape(), buf->checksum(), {}});
        if (options.show_values && buf->numel() == 1 && is_floating(buf->dtype())) {
          r.outputs.back().value = buf->element_as_double(0);
        }
      }
      const std::vector<GraphKey>& keys = s.executed_keys();
      r.graph_keys.assign(keys.begin() + static_cast<std::ptrdiff_t>(keys_before), keys.end());
      results.push_back(std::move(r));
    }
    return results;
  }();
  if (Runtime* runtime = s.runtime()) {
    runtime->flush();
    for (const std::string& w : runtime->warnings()) warn(w);
  }
  if (!steps.is_ok()) return report_error(steps.status());
  report.finish(*mode, steps->size());

  if (!options.timeline.empty()) {
    Status st = write_timeline(options.timeline, *s.sim());
    if (!st.is_ok()) return report_error(st);
  }
  static const std::vector<std::string> kNoReasons;
  const std::vector<std::string>& reasons =
      s.function() ? s.function()->stats().recompile_reasons : kNoReasons;
  if (options.json) {
    JsonWriter j;
    j.begin_object();
    j.key("program").value(options.program);
    j.key("version").value(kToolkitVersion);
    j.key("mode").value(mode_name(*mode));
    j.key("backend").value(options.backend);
    if (db) j.key("db").value(db->path());
    else j.key("db").null();
    j.key("steps").value(steps->size());
    j.key("step_ms").begin_array();
    for (double ms : step_ms) j.value(ms);
    j.end_array();
    write_outputs_json(j, *steps);
    write_counters_json(j, metrics);
    if (const CompiledFunction* f = s.function()) {
      j.key("function").begin_object();
      j.key("name").value(f->name());
      j.key("entries").value(f->num_entries());
      j.key("traces").value(f->stats().traces);
      j.key("fell_back_to_lazy").value(f->stats().fell_back_to_lazy);
      j.end_object();
    }
    j.key("recompile_reasons").begin_array();
    for (const std::string& r : reasons) j.value(r);
    j.end_array();
    report.write_json(j);
    if (s.sim()) write_sim_json(j, *s.sim(), sim_steps);
    j.end_object();
    out(j.str() + "\n");
    if (options.metrics) std::fputs(metrics.report().c_str(), stderr);
    return kExitOk;
  }

  for (size_t i = 0; i < steps->size(); ++i) {
    const StepSummary& r = (*steps)[i];
    std::string keys;
    for (const GraphKey& k : r.graph_keys) {
      if (!keys.empty()) keys += ',';
      keys += k.to_hex();
    }
    if (*mode == SessionMode::kLazy) {
      out(fmt::format("step {}  graph {}\n", i, keys));
    } else {
      out(fmt::format("step {}\n", i));
    }
    for (const OutputSummary& o : r.outputs) {
      std::string value = o.value ? fmt::format("{:.6f}  ", *o.value) : "";
      out(fmt::format("  {:<12} {:<16} {}checksum {}\n", o.name, type_to_string({o.dtype, o.shape}),
                      value, o.checksum));
    }
  }
  out(fmt::format("{} steps ({} mode), {} traces, {} compiles, {} memory hits, {} disk hits, {} misses\n",
                  steps->size(), mode_name(*mode), metrics.counter(counters::kTraces),
                  metrics.counter(counters::kCompiles), metrics.counter(counters::kHitsMemory),
                  metrics.counter(counters::kHitsDisk), metrics.counter(counters::kMisses)));
  out(step_time_summary(step_ms) + "\n");
  if (*mode == SessionMode::kOnce) {
    out(fmt::format("{} guard checks, {} guard failures, {} recompiles\n",
                    metrics.counter(counters::kGuardChecks), metrics.counter(counters::kGuardFailures),
                    metrics.counter(counters::kRecompiles)));
    if (int64_t n = metrics.counter(counters::kSpecializations)) {
      out(fmt::format("{} shape specializations (dynamic entries at new sizes, no trace)\n", n));
    }
    for (const std::string& r : reasons) out(fmt::format("recompile: {}\n", r));
  }
  if (SimBackend* sim = s.sim()) {
    SimInterval total;
    for (const SimInterval& i : sim_steps) {
      total.step_us += i.step_us;
      total.host_us += i.host_us;
      total.device_busy_us += i.device_busy_us;
      total.device_idle_us += i.device_idle_us;
      total.bytes_copied += i.bytes_copied;
    }
    out(fmt::format("sim {}: step time {:.1f} us (host {:.1f} us), device busy {:.1f} us, idle {:.1f} us, "
                    "{} bytes copied, peak memory {} bytes\n",
                    sim->spec().name, total.step_us, total.host_us, total.device_busy_us,
                    total.device_idle_us, total.bytes_copied, sim->memory_peak()));
  }
  if (options.metrics) out(metrics.report());
  return kExitOk;
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
    out(graph_to_dot(*graph, sources, key.to_hex()));
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
  out(graph_text_with_sources(*graph, sources));
  for (const store::EntryInfo& e : *entries) {
    if (e.key.graph != key) continue;
    out(fmt::format("executable: backend {} options {} compiler v{}  {} bytes, {} uses\n",
                    e.key.backend, e.key.options_digest, e.key.compiler_version, e.bytes, e.uses));
  }
  return kExitOk;
}

}  // namespace

int show_command(const ShowOptions& options) {
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
    for (const CanonicalGraph* cg : distinct) out(graph_to_dot(cg->graph, graph_sources(*cg), cg->key.to_hex()));
    return kExitOk;
  }
  if (options.source) out(print_program(*program) + "\n");
  for (const CanonicalGraph* cg : distinct) {
    out(fmt::format("graph {}  ({} nodes, {} params, {} outputs; steps {})\n", cg->key.to_hex(),
                    cg->graph.size(), cg->graph.params().size(), cg->graph.outputs().size(),
                    fmt::join(steps_of[cg->key], ",")));
    out(graph_text_with_sources(cg->graph, graph_sources(*cg)) + "\n");
  }
  out(fmt::format("hash {}\n", distinct.empty() ? std::string("none") : distinct.front()->key.to_hex()));
  return kExitOk;
}

}  // namespace tracecache::cli
