// `tracecache bench`: host overhead per step of eager, lazy and once mode on trace programs and
// zoo models (as the trace programs `tracecache zoo emit` writes).
//
// For each target and mode, a fresh session (replay/engine/program_session.h) runs `warmup` steps (which
// trace and compile whatever the steps need) and then `steps` timed steps. A timed step's
// arguments are made first, outside the clock; the clock covers recording or guard checking,
// execution and materializing the outputs. Kernel time is the Metrics timer "run" over the
// step (the runtime's executable runs in lazy and once mode, the op runner's kernels in eager
// mode), and host overhead is step time minus kernel time. Reported per target and mode: the
// median step time, the median of the steps' host overheads (each step's own step - kernel) and
// the kernel time that leaves of the median step (so step = kernel + overhead), and per target the ratios
// lazy / once of host overhead and of step time. On the sim backend each row also has the
// medians of the simulated timeline (cli: SimInterval): step, host, wait, device busy and idle
// time and bytes copied.
//
// After the rows, a summary with one line per target: the median step time of each mode, the
// host overhead of lazy and once, and the once-vs-lazy speedups, with their geometric mean over
// the targets that ran both. On the sim backend the wall-clock step is not the step of the
// simulated device (it includes the host computing the device's numbers), so the summary and the
// speedups use the simulated timeline: step = sim step_us, host overhead = sim host_us (the
// host's own work, waits excluded), and add each mode's device busy and idle time.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <sstream>

#include "frontend/program/program.h"
#include "cli/common.h"
#include "replay/audit/json.h"
#include "replay/backends/registry/registry.h"
#include "replay/engine/program_session.h"
#include "replay/engine/setup.h"

namespace tracecache::cli {

namespace {

struct BenchRow {
  std::string target;
  SessionMode mode = SessionMode::kLazy;
  int steps = 0;
  int warmup = 0;
  double step_us = 0;      // medians over the timed steps
  double kernel_us = 0;
  double overhead_us = 0;
  int64_t traces = 0;      // during the timed steps (once mode in steady state: 0)
  int64_t compiles = 0;
  std::optional<SimInterval> sim = std::nullopt;  // sim backend: medians per field over the timed steps
};

// Microseconds to a tenth of a nanosecond: more digits would be noise.
double rounded(double us) { return std::round(us * 10000.0) / 10000.0; }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

Result<std::vector<SessionMode>> parse_modes(const std::string& list) {
  std::vector<SessionMode> modes;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::optional<SessionMode> m = parse_mode(item);
    if (!m) {
      return invalid_argument(
          fmt::format("unknown mode '{}' in --modes (available: eager, lazy, once)", item));
    }
    if (std::find(modes.begin(), modes.end(), *m) == modes.end()) modes.push_back(*m);
  }
  if (modes.empty()) return invalid_argument("--modes names no mode");
  return modes;
}

// Tells stderr which step of which target and mode is running, at most once a second: long runs
// (full-size models) show where they are, short ones print nothing more than their start line.
class Progress {
 public:
  Progress(const std::string& target, SessionMode mode) : target_(target), mode_(mode) {}
  void step(std::string_view phase, int i, int n) {
    auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::seconds(1)) return;
    last_ = now;
    std::fputs(fmt::format("bench: {} {}: {} step {}/{}\n", target_, mode_name(mode_), phase, i + 1, n)
                   .c_str(),
               stderr);
  }

 private:
  const std::string& target_;
  SessionMode mode_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

// Runs one target in one mode. Metrics are cleared before each timed step (outside the clock;
// keeping the names, so recording during the step allocates no map nodes), so the "run" timer
// and the counters hold exactly that step's numbers.
Result<BenchRow> bench_one(const Program& program, const std::string& target, SessionMode mode,
                           int steps, int warmup, const BenchOptions& options, const RemoteSetup& remote,
                           bool* db_failed) {
  Metrics metrics;
  // The set-up path run and Python share (replay/engine/setup.h). bench reads no environment:
  // without --db it caches in memory only, and only --remote names a remote tier.
  // Once the database could not be opened, later rows run without it: a busy one would otherwise
  // cost each row another busy timeout.
  Result<OpenedSession> opened = open_session({.session = {.mode = mode, .backend = options.backend,
                                                           .backend_options = {.threads = options.threads},
                                                           .metrics = &metrics},
                                               .db = options.db,
                                               .no_cache = options.db.empty() || *db_failed,
                                               .remote = remote,
                                               .program = &program});
  if (!opened.is_ok()) return opened.status();
  if (!opened->cache_warning.empty() && !*db_failed) {
    warn(opened->cache_warning);
    *db_failed = true;
  }
  ProgramSession& s = *opened->program_session;
  Progress progress(target, mode);
  for (int step = 0; step < warmup; ++step) {
    progress.step("warmup", step, warmup);
    Result<ProgramSession::PreparedStep> p = s.prepare(step);
    if (!p.is_ok()) return p.status();
    Result<std::vector<BufferRef>> outs = s.run(*p);
    if (!outs.is_ok()) return outs.status();
  }
  BenchRow row{.target = target, .mode = mode, .steps = steps, .warmup = warmup};
  std::vector<double> step_us, overhead_us;
  std::vector<SimInterval> sim_steps;
  for (int i = 0; i < steps; ++i) {
    int step = warmup + i;
    progress.step("timed", i, steps);
    Result<ProgramSession::PreparedStep> p = s.prepare(step);
    if (!p.is_ok()) return p.status();
    metrics.clear_values();
    const std::optional<SimSnapshot> sim_before = s.backend() ? s.backend()->simulated_clock() : std::nullopt;
    auto start = std::chrono::steady_clock::now();
    Result<std::vector<BufferRef>> outs = s.run(*p);
    auto stop = std::chrono::steady_clock::now();
    if (!outs.is_ok()) return outs.status();
    if (sim_before) sim_steps.push_back(sim_interval(*sim_before, *s.backend()->simulated_clock()));
    double total = std::chrono::duration<double, std::micro>(stop - start).count();
    double kernels = metrics.timer(timers::kRun).total_ms * 1000.0;
    step_us.push_back(total);
    overhead_us.push_back(std::max(0.0, total - kernels));
    row.traces += metrics.counter(counters::kTraces);
    row.compiles += metrics.counter(counters::kCompiles);
  }
  if (Runtime* runtime = s.runtime()) {
    runtime->flush();
    for (const std::string& w : runtime->warnings()) warn(w);
  }
  // Overhead is the median of each step's own (step - kernel), not a difference of two medians
  // taken from different steps; the kernel column is what is left of the median step, so a row
  // reads step = kernel + overhead.
  row.step_us = median(step_us);
  row.overhead_us = median(overhead_us);
  row.kernel_us = std::max(0.0, row.step_us - row.overhead_us);
  if (!sim_steps.empty()) {
    auto med = [&sim_steps](auto field) {
      std::vector<double> v;
      for (const SimInterval& i : sim_steps) v.push_back(static_cast<double>(i.*field));
      return median(v);
    };
    row.sim = SimInterval{.step_us = med(&SimInterval::step_us),
                          .host_us = med(&SimInterval::host_us),
                          .host_wait_us = med(&SimInterval::host_wait_us),
                          .device_busy_us = med(&SimInterval::device_busy_us),
                          .device_idle_us = med(&SimInterval::device_idle_us),
                          .bytes_copied = static_cast<int64_t>(med(&SimInterval::bytes_copied)),
                          .kernels = static_cast<int64_t>(med(&SimInterval::kernels))};
  }
  return row;
}

struct Speedup {
  std::string target;
  double overhead = 0;  // lazy overhead / once overhead
  double step = 0;      // lazy step time / once step time
};

// The step time and host overhead a comparison uses: wall clock on cpu and reference, the
// simulated timeline on sim (see the top of this file).
double step_of(const BenchRow& r) { return r.sim ? r.sim->step_us : r.step_us; }
double overhead_of(const BenchRow& r) { return r.sim ? r.sim->host_us : r.overhead_us; }

std::vector<Speedup> speedups(const std::vector<BenchRow>& rows) {
  std::vector<Speedup> out;
  for (const BenchRow& once : rows) {
    if (once.mode != SessionMode::kOnce) continue;
    for (const BenchRow& lazy : rows) {
      if (lazy.mode != SessionMode::kLazy || lazy.target != once.target) continue;
      out.push_back({once.target,
                     overhead_of(once) > 0 ? overhead_of(lazy) / overhead_of(once) : 0,
                     step_of(once) > 0 ? step_of(lazy) / step_of(once) : 0});
    }
  }
  return out;
}

// One target's line of the summary: its rows by mode.
struct SummaryLine {
  std::string target;
  const BenchRow* by_mode[3] = {nullptr, nullptr, nullptr};  // eager, lazy, once
  std::optional<Speedup> speedup;
};

int mode_index(SessionMode m) { return m == SessionMode::kEager ? 0 : m == SessionMode::kLazy ? 1 : 2; }

std::vector<SummaryLine> summary(const std::vector<BenchRow>& rows) {
  std::vector<SummaryLine> lines;
  for (const BenchRow& r : rows) {
    auto it = std::find_if(lines.begin(), lines.end(),
                           [&r](const SummaryLine& l) { return l.target == r.target; });
    if (it == lines.end()) it = lines.insert(lines.end(), SummaryLine{.target = r.target, .by_mode = {}, .speedup = std::nullopt});
    it->by_mode[mode_index(r.mode)] = &r;
  }
  for (const Speedup& s : speedups(rows)) {
    for (SummaryLine& l : lines) {
      if (l.target == s.target) l.speedup = s;
    }
  }
  return lines;
}

struct Geomean {
  int targets = 0;  // targets with both lazy and once (and ratios > 0)
  double step = 0;
  double overhead = 0;
};

Geomean geomean(const std::vector<Speedup>& ups) {
  Geomean g;
  double log_step = 0, log_overhead = 0;
  for (const Speedup& s : ups) {
    if (!(s.step > 0) || !(s.overhead > 0)) continue;
    ++g.targets;
    log_step += std::log(s.step);
    log_overhead += std::log(s.overhead);
  }
  if (g.targets > 0) {
    g.step = std::exp(log_step / g.targets);
    g.overhead = std::exp(log_overhead / g.targets);
  }
  return g;
}

// The steps and warmup every row ran, if they are the same for all rows.
std::optional<std::pair<int, int>> uniform_steps(const std::vector<BenchRow>& rows) {
  if (rows.empty()) return std::nullopt;
  for (const BenchRow& r : rows) {
    if (r.steps != rows[0].steps || r.warmup != rows[0].warmup) return std::nullopt;
  }
  return std::pair{rows[0].steps, rows[0].warmup};
}

// What the cpu kernels ran on: the thread count, the BLAS and libgomp's wait policy (unset: the
// library's default).
std::string omp_wait_policy() {
  const char* v = std::getenv("OMP_WAIT_POLICY");
  return v ? v : "";
}

void print_json(const BenchOptions& options, const std::vector<BenchRow>& rows) {
  JsonWriter j;
  j.begin_object();
  j.key("backend").value(options.backend);
  const ThreadSettings team = host_thread_settings();
  j.key("threads").value(team.threads);
  j.key("blas").value(team.blas);
  j.key("omp_wait_policy").value(omp_wait_policy());
  // Every row's steps and warmup; null when they differ (see the rows).
  std::optional<std::pair<int, int>> same = uniform_steps(rows);
  if (same) {
    j.key("steps").value(same->first);
    j.key("warmup").value(same->second);
  } else {
    j.key("steps").null();
    j.key("warmup").null();
  }
  j.key("rows").begin_array();
  for (const BenchRow& r : rows) {
    j.begin_object();
    j.key("target").value(r.target);
    j.key("mode").value(mode_name(r.mode));
    j.key("steps").value(r.steps);
    j.key("warmup").value(r.warmup);
    j.key("step_us").value(rounded(r.step_us));
    j.key("kernel_us").value(rounded(r.kernel_us));
    j.key("overhead_us").value(rounded(r.overhead_us));
    j.key("traces").value(r.traces);
    j.key("compiles").value(r.compiles);
    if (r.sim) {
      j.key("sim").begin_object();
      j.key("step_us").value(rounded(r.sim->step_us));
      j.key("host_us").value(rounded(r.sim->host_us));
      j.key("host_wait_us").value(rounded(r.sim->host_wait_us));
      j.key("device_busy_us").value(rounded(r.sim->device_busy_us));
      j.key("device_idle_us").value(rounded(r.sim->device_idle_us));
      j.key("bytes_copied").value(r.sim->bytes_copied);
      j.key("kernels").value(r.sim->kernels);
      j.end_object();
    }
    j.end_object();
  }
  j.end_array();
  j.key("speedups").begin_array();
  for (const Speedup& s : speedups(rows)) {
    j.begin_object();
    j.key("target").value(s.target);
    j.key("overhead_once_vs_lazy").value(rounded(s.overhead));
    j.key("step_once_vs_lazy").value(rounded(s.step));
    j.end_object();
  }
  j.end_array();
  const bool sim = std::any_of(rows.begin(), rows.end(), [](const BenchRow& r) { return r.sim; });
  j.key("summary_step_time").value(sim ? "simulated" : "wall");
  j.key("summary").begin_array();
  auto number_or_null = [&j](const BenchRow* r, auto field) {
    if (r) {
      j.value(rounded(field(*r)));
    } else {
      j.null();
    }
  };
  for (const SummaryLine& l : summary(rows)) {
    j.begin_object();
    j.key("target").value(l.target);
    for (SessionMode m : {SessionMode::kEager, SessionMode::kLazy, SessionMode::kOnce}) {
      const BenchRow* r = l.by_mode[mode_index(m)];
      j.key(fmt::format("{}_step_us", mode_name(m)));
      number_or_null(r, step_of);
    }
    for (SessionMode m : {SessionMode::kLazy, SessionMode::kOnce}) {
      j.key(fmt::format("{}_overhead_us", mode_name(m)));
      number_or_null(l.by_mode[mode_index(m)], overhead_of);
    }
    if (l.speedup) {
      j.key("step_once_vs_lazy").value(rounded(l.speedup->step));
      j.key("overhead_once_vs_lazy").value(rounded(l.speedup->overhead));
    } else {
      j.key("step_once_vs_lazy").null();
      j.key("overhead_once_vs_lazy").null();
    }
    if (sim) {
      for (SessionMode m : {SessionMode::kLazy, SessionMode::kOnce}) {
        const BenchRow* r = l.by_mode[mode_index(m)];
        if (r && !r->sim) r = nullptr;
        j.key(fmt::format("{}_host_wait_us", mode_name(m)));
        number_or_null(r, [](const BenchRow& x) { return x.sim->host_wait_us; });
        j.key(fmt::format("{}_device_busy_us", mode_name(m)));
        number_or_null(r, [](const BenchRow& x) { return x.sim->device_busy_us; });
        j.key(fmt::format("{}_device_idle_us", mode_name(m)));
        number_or_null(r, [](const BenchRow& x) { return x.sim->device_idle_us; });
      }
    }
    j.end_object();
  }
  j.end_array();
  Geomean g = geomean(speedups(rows));
  j.key("geomean").begin_object();
  j.key("targets").value(g.targets);
  if (g.targets > 0) {
    j.key("step_once_vs_lazy").value(rounded(g.step));
    j.key("overhead_once_vs_lazy").value(rounded(g.overhead));
  } else {
    j.key("step_once_vs_lazy").null();
    j.key("overhead_once_vs_lazy").null();
  }
  j.end_object();
  j.end_object();
  out(j.str() + "\n");
}

// The summary as a text table: only the columns of modes that ran.
void print_summary(const std::vector<BenchRow>& rows) {
  std::vector<SummaryLine> lines = summary(rows);
  const bool sim = std::any_of(rows.begin(), rows.end(), [](const BenchRow& r) { return r.sim; });
  auto ran = [&rows](SessionMode m) {
    return std::any_of(rows.begin(), rows.end(), [m](const BenchRow& r) { return r.mode == m; });
  };
  struct Column {
    std::string header;
    std::function<std::optional<double>(const SummaryLine&)> get;
    bool ratio = false;  // printed as 1.23x
  };
  std::vector<Column> cols;
  auto of_mode = [](SessionMode m, auto field) {
    return [m, field](const SummaryLine& l) -> std::optional<double> {
      const BenchRow* r = l.by_mode[mode_index(m)];
      if (!r) return std::nullopt;
      return field(*r);
    };
  };
  for (SessionMode m : {SessionMode::kEager, SessionMode::kLazy, SessionMode::kOnce}) {
    if (ran(m)) cols.push_back({fmt::format("{} step", mode_name(m)), of_mode(m, step_of)});
  }
  for (SessionMode m : {SessionMode::kLazy, SessionMode::kOnce}) {
    if (ran(m)) {
      cols.push_back({fmt::format("{} {}", mode_name(m), sim ? "host" : "overhead"),
                      of_mode(m, overhead_of)});
    }
  }
  if (sim) {
    for (SessionMode m : {SessionMode::kLazy, SessionMode::kOnce}) {
      if (!ran(m)) continue;
      auto field = [](double SimInterval::*f) {
        return [f](const BenchRow& r) { return r.sim ? (*r.sim).*f : 0.0; };
      };
      cols.push_back({fmt::format("{} busy", mode_name(m)), of_mode(m, field(&SimInterval::device_busy_us))});
      cols.push_back({fmt::format("{} idle", mode_name(m)), of_mode(m, field(&SimInterval::device_idle_us))});
    }
  }
  const bool both = ran(SessionMode::kLazy) && ran(SessionMode::kOnce);
  if (both) {
    cols.push_back({sim ? "host once/lazy" : "overhead once/lazy",
                    [](const SummaryLine& l) -> std::optional<double> {
                      if (!l.speedup) return std::nullopt;
                      return l.speedup->overhead;
                    },
                    true});
    cols.push_back({"step once/lazy",
                    [](const SummaryLine& l) -> std::optional<double> {
                      if (!l.speedup) return std::nullopt;
                      return l.speedup->step;
                    },
                    true});
  }
  Geomean g = geomean(speedups(rows));
  const std::string geo_label = fmt::format("geomean ({})", g.targets);
  size_t width = std::max<size_t>(6, geo_label.size());
  for (const SummaryLine& l : lines) width = std::max(width, l.target.size());
  out(fmt::format("\nsummary: medians per step in microseconds; {}; once/lazy = lazy / once\n",
                  sim ? "simulated timeline: step = host + wait, host = the host's own work, "
                        "busy/idle = the device's"
                      : "overhead = step time not in kernels"));
  std::string header = fmt::format("{:<{}}", "target", width);
  for (const Column& c : cols) header += fmt::format("  {:>{}}", c.header, std::max<size_t>(10, c.header.size()));
  out(header + "\n");
  for (const SummaryLine& l : lines) {
    std::string line = fmt::format("{:<{}}", l.target, width);
    for (const Column& c : cols) {
      size_t w = std::max<size_t>(10, c.header.size());
      std::optional<double> v = c.get(l);
      line += !v       ? fmt::format("  {:>{}}", "-", w)
              : c.ratio ? fmt::format("  {:>{}}", fmt::format("{:.2f}x", *v), w)
                        : fmt::format("  {:>{}.1f}", *v, w);
    }
    out(line + "\n");
  }
  if (both && g.targets > 0) {
    std::string line = fmt::format("{:<{}}", geo_label, width);
    for (size_t i = 0; i < cols.size(); ++i) {
      size_t w = std::max<size_t>(10, cols[i].header.size());
      std::string cell = i + 2 == cols.size()   ? fmt::format("{:.2f}x", g.overhead)
                         : i + 1 == cols.size() ? fmt::format("{:.2f}x", g.step)
                                                : "";
      line += fmt::format("  {:>{}}", cell, w);
    }
    out(line + "\n");
  }
}

void print_table(const BenchOptions& options, const std::vector<BenchRow>& rows) {
  size_t width = 6;
  for (const BenchRow& r : rows) width = std::max(width, r.target.size());
  if (std::optional<std::pair<int, int>> same = uniform_steps(rows)) {
    out(fmt::format("backend {}, {} timed steps after {} warmup; medians per step, microseconds\n",
                    options.backend, same->first, same->second));
  } else {
    out(fmt::format("backend {}, timed steps after warmup: {} after {} ({} after {} for full-size zoo "
                    "models); medians per step, microseconds\n",
                    options.backend, kBenchSteps, kBenchWarmup, kBenchZooSteps, kBenchZooWarmup));
  }
  const ThreadSettings team = host_thread_settings();
  out(fmt::format("{} threads, {}, OMP_WAIT_POLICY={}\n", team.threads, team.blas,
                  omp_wait_policy().empty() ? "(unset)" : omp_wait_policy()));
  out(fmt::format("{:<{}}  {:<5}  {:>10}  {:>10}  {:>12}  {:>6}\n", "target", width, "mode",
                  "step us", "kernel us", "overhead us", "traces"));
  for (const BenchRow& r : rows) {
    out(fmt::format("{:<{}}  {:<5}  {:>10.1f}  {:>10.1f}  {:>12.1f}  {:>6}\n", r.target, width,
                    mode_name(r.mode), r.step_us, r.kernel_us, r.overhead_us, r.traces));
    if (r.sim) {
      out(fmt::format("{:<{}}  {:<5}  sim: step {:.1f} us = host {:.1f} + wait {:.1f}; device busy {:.1f}, "
                      "idle {:.1f}; {} bytes copied\n", "", width, "", r.sim->step_us, r.sim->host_us,
                      r.sim->host_wait_us, r.sim->device_busy_us, r.sim->device_idle_us,
                      r.sim->bytes_copied));
    }
  }
  std::vector<Speedup> ups = speedups(rows);
  if (!ups.empty()) out("\n");
  for (const Speedup& s : ups) {
    out(fmt::format("{}: once/lazy speedup: host overhead {:.1f}x, step time {:.2f}x\n", s.target,
                    s.overhead, s.step));
  }
  print_summary(rows);
}

}  // namespace

int bench_command(const BenchOptions& options) {
  Result<std::vector<SessionMode>> modes = parse_modes(options.modes);
  if (!modes.is_ok()) return report_error(modes.status());
  if (options.steps < 0 || options.warmup < -1) {
    return report_error(invalid_argument("--steps must be >= 1 and --warmup >= 0"));
  }
  // A target is a trace program, or else the name of a zoo model.
  std::vector<Program> programs;
  std::vector<std::string> labels;
  std::vector<bool> full_size;  // zoo models at the default preset
  for (const std::string& t : options.targets) {
    std::error_code ec;
    bool zoo_model = !std::filesystem::exists(t, ec) && is_zoo_model(t);
    Result<Program> p = zoo_model ? zoo_program(t, options.preset) : load_program(t);
    if (!p.is_ok()) {
      if (p.status().code() == StatusCode::kNotFound && !zoo_model) {
        return report_error(not_found(fmt::format(
            "{} (a bench target is a trace program or a zoo model: see `tracecache zoo list`)",
            p.status().message())));
      }
      return report_error(p.status());
    }
    programs.push_back(std::move(p).value());
    full_size.push_back(zoo_model && options.preset == "default");
    labels.push_back(!zoo_model ? std::filesystem::path(t).filename().string()
                     : options.preset == "default" ? t
                                                   : fmt::format("{}:{}", t, options.preset));
  }
  if (Status st = check_db_flag_directory(options.db); !st.is_ok()) return report_error(st);
  Result<RemoteSetup> remote = remote_setup(options.remote);
  if (!remote.is_ok()) return report_error(remote.status());
  bool db_failed = false;  // the database could not be opened: said once, not tried again

  std::vector<BenchRow> rows;
  for (size_t t = 0; t < programs.size(); ++t) {
    const std::string& target = labels[t];
    const int steps = options.steps > 0 ? options.steps : full_size[t] ? kBenchZooSteps : kBenchSteps;
    const int warmup = options.warmup >= 0 ? options.warmup
                       : full_size[t]      ? kBenchZooWarmup
                                           : kBenchWarmup;
    for (SessionMode mode : *modes) {
      std::fputs(fmt::format("bench: {} {}: {} warmup + {} timed steps\n", target,
                             mode_name(mode), warmup, steps)
                     .c_str(),
                 stderr);
      Result<BenchRow> row = bench_one(programs[t], target, mode, steps, warmup, options, *remote, &db_failed);
      if (!row.is_ok()) return report_error(row.status());
      rows.push_back(std::move(row).value());
    }
  }
  if (options.json) {
    print_json(options, rows);
  } else {
    print_table(options, rows);
  }
  return kExitOk;
}

}  // namespace tracecache::cli
