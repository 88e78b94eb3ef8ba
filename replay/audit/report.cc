// `tracecache report -o FILE`'s page (replay/audit/report.h): the audit as one self-contained
// HTML page a person reads.
//
// The page has no network dependency: its CSS is inline, its charts are SVG drawn here, the
// graphs are SVG rendered by Graphviz's `dot` (run as a subprocess on `show --dot`'s text; when
// `dot` is not on PATH the page says so and shows the graphs' text). It has no script: each
// picture sits in a scrolling pane (pan by scrolling; the pane's height can be dragged) under three
// zoom buttons (fit, 100%, 200%) that are CSS radio buttons; a picture wider than the page opens
// at 100%, the others fit.
// Everything read from the database is untrusted: every text goes through html_escape
// (replay/audit/html.h), and the page is bounded: the kMaxGraphs most recently used graphs (their details
// cut to a cell), the newest kMaxEvents events and kMaxHitSpans hit
// counts are read, each scope shows its newest kRowsPerTable rows per table, kMaxLanes graphs in
// its chart, kMaxDiffs node-by-node diffs and kMaxPictures pictures of at most kMaxDrawnNodes
// nodes each in all; the page says what it left out.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "capture/ir/graph_diff.h"
#include "replay/audit/audit.h"
#include "replay/audit/graph_dot.h"
#include "replay/audit/graph_text.h"
#include "replay/audit/html.h"
#include "replay/audit/report.h"
#include "replay/audit/times.h"
#include "replay/engine/toolkit_version.h"
#include "store/codec/graph_codec.h"

extern char** environ;

namespace tracecache::audit {

namespace {

constexpr int64_t kMaxEvents = 5000;
constexpr int64_t kMaxHitSpans = 2000;
constexpr int64_t kMaxGraphs = 2000;
constexpr size_t kMaxScopes = 24;
constexpr size_t kRowsPerTable = 25;
constexpr size_t kMaxLanes = 14;
constexpr size_t kMaxDiffs = 12;
constexpr size_t kMaxDiffRows = 24;
constexpr size_t kMaxPictures = 8;
constexpr size_t kMaxDrawnNodes = 400;
constexpr double kPageWidthPx = 1200;  // main's width less its padding and the section's
constexpr size_t kMaxTextLines = 200;
constexpr int64_t kMaxCellBytes = 600;
constexpr int kDotTimeoutSeconds = 20;

using Clock = std::chrono::steady_clock;

std::string esc(std::string_view s) { return html_escape_cut(s, kMaxCellBytes); }
std::string short_hash(const GraphKey& k) { return k.to_hex().substr(0, 12); }
bool is_function_event(const store::Event& e) { return e.graph == GraphKey{}; }

std::string ms_text(double ms) {
  if (!std::isfinite(ms) || ms < 0) return "-";
  if (ms >= 60000) return fmt::format("{:.1f} min", ms / 60000);
  if (ms >= 1000) return fmt::format("{:.2f} s", ms / 1000);
  return fmt::format("{:.2f} ms", ms);
}

std::string bytes_text(uint64_t b) {
  if (b >= (uint64_t{1} << 30)) return fmt::format("{:.1f} GiB", static_cast<double>(b) / (1 << 30));
  if (b >= (uint64_t{1} << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1 << 20));
  if (b >= (uint64_t{1} << 10)) return fmt::format("{:.1f} KiB", static_cast<double>(b) / (1 << 10));
  return fmt::format("{} B", b);
}

// A program and a compiled function: the unit the page is organized by.
struct Scope {
  std::string program, function;
  auto operator<=>(const Scope&) const = default;
  std::string title() const {
    std::string t = program.empty() ? "(program unknown)" : program;
    if (!function.empty()) t += " \u00b7 function " + function;
    return t;
  }
};

struct ScopeData {
  std::vector<const store::Event*> events;        // newest first
  std::vector<const store::GraphAudit*> graphs;   // most recently used first
  std::vector<const store::HitSpan*> hits;
  std::vector<const store::FunctionAudit*> functions;  // once mode: the function's guard entries
  double newest = 0;
};

// "closest HEX: ..." (the runtime's miss detail) -> HEX's key.
std::optional<GraphKey> closest_of(std::string_view detail) {
  constexpr std::string_view kPrefix = "closest ";
  if (!detail.starts_with(kPrefix) || detail.size() < kPrefix.size() + 32) return std::nullopt;
  return GraphKey::from_hex(detail.substr(kPrefix.size(), 32));
}

// Runs `dot -Tsvg` on `dot_text`; nullopt with `why` when it cannot (not installed: *missing).
std::optional<std::string> render_svg(const std::string& dot_text, const std::filesystem::path& dir, size_t n,
                                      bool* missing, std::string* why) {
  const std::filesystem::path in = dir / fmt::format("g{}.dot", n), out = dir / fmt::format("g{}.svg", n);
  {
    std::ofstream f(in, std::ios::binary);
    f << dot_text;
    if (!f) {
      *why = "cannot write a temporary file";
      return std::nullopt;
    }
  }
  const std::string out_flag = "-o" + out.string();
  std::vector<std::string> args = {"dot", "-Tsvg", out_flag, in.string()};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, "dot", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    *missing = rc == ENOENT;
    *why = fmt::format("cannot run dot: {}", std::strerror(rc));
    return std::nullopt;
  }
  int status = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(kDotTimeoutSeconds);
  while (true) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) {
      *why = "lost the dot process";
      return std::nullopt;
    }
    if (Clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      *why = fmt::format("dot took longer than {} s", kDotTimeoutSeconds);
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    *why = "dot failed";
    return std::nullopt;
  }
  std::ifstream f(out, std::ios::binary);
  std::stringstream svg;
  svg << f.rdbuf();
  std::string text = svg.str();
  // Inline SVG starts at its element: dot's XML declaration and DOCTYPE do not belong in HTML.
  const size_t start = text.find("<svg");
  if (start == std::string::npos) {
    *why = "dot wrote no SVG";
    return std::nullopt;
  }
  return text.substr(start);
}

class ReportWriter {
 public:
  ReportWriter(store::CacheDb& db, const ReportOptions& options, const store::AuditFilter& filter)
      : db_(db), options_(options), filter_(filter) {}

  Result<std::string> write() {
    Status st = gather();
    if (!st.is_ok()) return st;
    // dot's input and output files, in a directory of our own (mkdtemp: no name another user
    // could have planted); without one, the graphs are shown as text.
    std::error_code ec;
    std::string pattern = (std::filesystem::temp_directory_path(ec) / "tracecache-report-XXXXXX").string();
    if (!ec && ::mkdtemp(pattern.data()) != nullptr) temp_dir_ = pattern;
    head();
    summary();
    size_t shown = 0;
    for (const auto& [scope, data] : ordered_scopes()) {
      if (shown++ == kMaxScopes) {
        cut(fmt::format("{} more programs/functions are not shown (use --program or --function)",
                        scopes_.size() - kMaxScopes));
        break;
      }
      scope_section(*scope, *data);
    }
    problems();
    cache_size();
    tail();
    if (!temp_dir_.empty()) std::filesystem::remove_all(temp_dir_, ec);
    return std::move(html_);
  }

 private:
  // ---- data ----

  Status gather() {
    // Only the rows the page can show are read, and no detail beyond what a cell shows.
    int64_t graphs_total = 0;
    Result<std::vector<store::GraphAudit>> graphs =
        db_.audit(&malformed_, filter_, {.limit = kMaxGraphs, .max_detail_bytes = kMaxCellBytes}, &graphs_total);
    if (!graphs.is_ok()) return graphs.status();
    graphs_ = std::move(*graphs);
    if (graphs_total > kMaxGraphs) {
      cuts_.push_back(fmt::format("only the {} most recently used of {} graphs were read", kMaxGraphs, graphs_total));
    }
    int64_t malformed_events = 0;
    Result<std::vector<store::Event>> events =
        db_.audit_events(filter_, kMaxEvents + 1, &malformed_events, kMaxCellBytes);
    if (!events.is_ok()) return events.status();
    events_ = std::move(*events);
    malformed_ += malformed_events;
    if (events_.size() > static_cast<size_t>(kMaxEvents)) {
      events_.resize(static_cast<size_t>(kMaxEvents));
      cuts_.push_back(fmt::format("only the newest {} events were read", kMaxEvents));
    }
    Result<std::vector<store::HitSpan>> hits = db_.hit_spans(filter_, kMaxHitSpans + 1);
    if (!hits.is_ok()) return hits.status();
    hits_ = std::move(*hits);
    if (hits_.size() > static_cast<size_t>(kMaxHitSpans)) {
      hits_.resize(static_cast<size_t>(kMaxHitSpans));
      cuts_.push_back(fmt::format("only the latest {} hit counts were read", kMaxHitSpans));
    }
    Result<store::CacheStats> stats = db_.stats();
    if (!stats.is_ok()) return stats.status();
    stats_ = *stats;
    Result<std::vector<store::EntryInfo>> entries = db_.list_executables();
    if (!entries.is_ok()) return entries.status();
    entries_ = std::move(*entries);

    // A graph belongs to the scope of its newest event, else to its program.
    std::map<GraphKey, Scope> scope_of;
    for (const store::Event& e : events_) {
      if (!is_function_event(e)) scope_of.try_emplace(e.graph, Scope{e.program, e.function});
    }
    for (const store::GraphAudit& a : graphs_) {
      auto [it, inserted] = scope_of.try_emplace(a.graph, Scope{a.program, {}});
      ScopeData& d = scopes_[it->second];
      d.graphs.push_back(&a);
      d.newest = std::max(d.newest, a.last_use);
    }
    for (const store::Event& e : events_) {
      Scope s = is_function_event(e) ? Scope{e.program, e.function} : scope_of[e.graph];
      ScopeData& d = scopes_[s];
      d.events.push_back(&e);
      d.newest = std::max(d.newest, e.time);
    }
    for (const store::HitSpan& h : hits_) {
      auto it = scope_of.find(h.graph);
      ScopeData& d = scopes_[it == scope_of.end() ? Scope{} : it->second];
      d.hits.push_back(&h);
      d.newest = std::max(d.newest, h.last_time);
    }
    // Guard entries have no time: with --since they are left out (as audit does).
    Result<std::vector<store::FunctionAudit>> functions =
        filter_.since > 0 ? Result<std::vector<store::FunctionAudit>>(std::vector<store::FunctionAudit>{})
                          : db_.function_audit(filter_);
    if (!functions.is_ok()) return functions.status();
    functions_ = std::move(*functions);
    for (const store::FunctionAudit& f : functions_) {
      auto it = std::find_if(scopes_.begin(), scopes_.end(), [&](const auto& s) { return s.first.function == f.key.name; });
      ScopeData& d = it != scopes_.end() ? it->second : scopes_[Scope{{}, f.key.name}];
      d.functions.push_back(&f);
    }
    return Status::ok();
  }

  std::vector<std::pair<const Scope*, const ScopeData*>> ordered_scopes() const {
    std::vector<std::pair<const Scope*, const ScopeData*>> v;
    for (const auto& [s, d] : scopes_) v.emplace_back(&s, &d);
    std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second->newest > b.second->newest; });
    return v;
  }

  // ---- page ----

  void head() {
    html_ += R"(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>tracecache report</title>
<style>
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:0;color:#1f2933;background:#f5f7fa}
header{background:#243b53;color:#fff;padding:18px 32px}
header h1{margin:0 0 4px;font-size:22px}
header p{margin:0;color:#bcccdc;font-size:13px}
main{padding:16px 32px 40px;max-width:1280px}
section{background:#fff;border:1px solid #d9e2ec;border-radius:8px;padding:14px 20px;margin:16px 0}
h2{font-size:18px;margin:4px 0 10px;color:#102a43}
h3{font-size:15px;margin:16px 0 6px;color:#243b53}
.cards{display:flex;flex-wrap:wrap;gap:10px}
.card{border:1px solid #d9e2ec;border-radius:6px;padding:8px 14px;min-width:120px;background:#f8fafc}
.card b{display:block;font-size:20px;color:#102a43}
.card span{font-size:12px;color:#627d98}
.card.good b{color:#2e7d32}.card.bad b{color:#c62828}
table{border-collapse:collapse;width:100%;font-size:13px;margin:4px 0 8px}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #e4e7eb;vertical-align:top}
th{background:#f0f4f8;color:#334e68;font-weight:600}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
code,pre{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,monospace;font-size:12px}
pre{background:#f0f4f8;padding:8px;border-radius:4px;overflow:auto;max-height:420px}
.reason{color:#c62828;font-weight:600}
.diff{color:#334e68}
.note{color:#627d98;font-size:12px}
.cut{color:#8d2b0b;background:#fff4e5;border-left:3px solid #f0b429;padding:4px 8px;margin:6px 0;font-size:13px}
.pic{overflow:auto;border:1px solid #e4e7eb;border-radius:4px;margin:6px 0;background:#fff;height:auto;max-height:640px;resize:vertical}
.zoom>input{margin:0 2px 0 10px;vertical-align:middle}
.zoom>label{font-size:12px;color:#334e68;cursor:pointer}
.zoom .pic svg{max-width:none;width:var(--w);height:var(--h)}
.zoom .zf:checked~.pic svg{max-width:100%;height:auto}
.zoom .z2:checked~.pic svg{width:calc(2*var(--w));height:calc(2*var(--h))}
svg.chart text{font:11px system-ui,Helvetica,Arial,sans-serif;fill:#334e68}
details summary{cursor:pointer;color:#334e68}
</style></head><body>
)";
    html_ += fmt::format("<header><h1>tracecache report</h1><p>cache <code>{}</code> \u00b7 {} \u00b7 generated {} UTC",
                         esc(db_.path()), esc(std::string(kToolkitVersion)),
                         esc(format_time(std::chrono::duration<double>(
                             std::chrono::system_clock::now().time_since_epoch()).count())));
    std::vector<std::string> f;
    if (!options_.program.empty()) f.push_back("program " + options_.program);
    if (!options_.function.empty()) f.push_back("function " + options_.function);
    if (!options_.since.empty()) f.push_back("since " + options_.since);
    if (!f.empty()) html_ += fmt::format(" \u00b7 only {}", esc(fmt::format("{}", fmt::join(f, ", "))));
    html_ += "</p></header>\n<main>\n";
  }

  void card(std::string_view value, std::string_view label, std::string_view cls = {}) {
    html_ += fmt::format("<div class=\"card {}\"><b>{}</b><span>{}</span></div>", cls, esc(value), esc(label));
  }

  void summary() {
    int64_t hm = 0, hd = 0, hr = 0, misses = 0, compiles = 0, corrupt = 0;
    double compile_ms = 0, saved_ms = 0;
    for (const store::GraphAudit& a : graphs_) {
      hm += a.hits_memory;
      hd += a.hits_disk;
      hr += a.hits_remote;
      misses += a.misses;
      compiles += a.compiles;
      corrupt += a.corrupt;
      compile_ms += a.compile_ms_total;
      saved_ms += a.saved_ms;
    }
    int64_t recompiles = 0, fallbacks = 0, graph_breaks = 0;
    for (const store::Event& e : events_) {
      recompiles += e.kind == store::EventKind::kRecompile;
      graph_breaks += e.kind == store::EventKind::kGraphBreak;
      fallbacks += e.kind == store::EventKind::kFallback;
      corrupt += e.kind == store::EventKind::kCorrupt && is_function_event(e);
    }
    // Once mode: a call whose guards hold replays its entry's executables without looking the
    // graph up; each replay is a hit of the whole call.
    int64_t replays = 0;
    for (const store::FunctionAudit& f : functions_) {
      for (const auto& e : f.entries) replays += e.hits;
    }
    const int64_t lookups = hm + hd + hr + misses + replays;
    html_ += "<section id=\"summary\"><h2>Summary</h2><div class=\"cards\">";
    card(lookups ? fmt::format("{:.1f}%", 100.0 * static_cast<double>(hm + hd + hr + replays) / static_cast<double>(lookups))
                 : "-",
         "hit rate (graph lookups and once-mode replays)", "good");
    if (replays > 0) card(fmt::format("{}", replays), "once-mode replays (guard entry hits)");
    card(fmt::format("{}", lookups - replays), "graph lookups");
    if (hr > 0) {
      card(fmt::format("{} / {} / {}", hm, hd, hr), "hits: memory / disk / remote");
    } else {
      card(fmt::format("{} / {}", hm, hd), "hits: memory / disk");
    }
    card(fmt::format("{}", misses), "misses", misses ? "bad" : "");
    card(fmt::format("{}", compiles), "compiles");
    card(fmt::format("{}", recompiles), "recompiles (once mode)", recompiles ? "bad" : "");
    card(fmt::format("{}", fallbacks), "fallbacks", fallbacks ? "bad" : "");
    if (graph_breaks > 0) card(fmt::format("{}", graph_breaks), "graph breaks traced (host ops)");
    card(fmt::format("{}", corrupt), "corrupt entries", corrupt ? "bad" : "");
    card(ms_text(compile_ms), "spent compiling");
    card(ms_text(saved_ms), "saved by the cache", "good");
    html_ += "</div>\n<p class=\"note\">Time saved: each graph's hits times its mean compile time. Hits are counted "
             "per graph and tier (not logged one by one), so the charts show each graph's hits as a bar from its "
             "first to its latest hit.</p>\n";
    if (malformed_ > 0) cut(fmt::format("{} damaged audit rows were skipped", malformed_));
    for (const std::string& c : cuts_) cut(c);
    if (scopes_.empty()) html_ += "<p>No cache events yet: run a program with this cache first.</p>\n";
    else {
      html_ += "<h3>Programs and functions</h3><table><tr><th>program \u00b7 function</th><th class=n>graphs</th>"
               "<th class=n>events</th><th>latest (UTC)</th></tr>\n";
      size_t i = 0;
      for (const auto& [scope, data] : ordered_scopes()) {
        if (i == kMaxScopes) break;
        html_ += fmt::format("<tr><td><a href=\"#scope{}\">{}</a></td><td class=n>{}</td><td class=n>{}</td><td>{}</td></tr>\n",
                             i++, esc(scope->title()), data->graphs.size(), data->events.size(),
                             esc(format_time(data->newest)));
      }
      html_ += "</table>\n";
    }
    html_ += "</section>\n";
  }

  void cut(std::string_view what) { html_ += fmt::format("<div class=\"cut\">Left out: {}.</div>\n", esc(what)); }

  // The timeline: one lane per graph (hit bars, miss and compile marks) and one for the function's
  // own events (recompiles, fallbacks, corrupt entries), over the scope's time span.
  void chart(const ScopeData& d) {
    std::vector<const store::GraphAudit*> lanes(d.graphs.begin(),
                                                d.graphs.begin() + static_cast<long>(std::min(d.graphs.size(), kMaxLanes)));
    std::set<GraphKey> drawn;
    for (const store::GraphAudit* a : lanes) drawn.insert(a->graph);
    bool function_lane = false;
    double t0 = INFINITY, t1 = -INFINITY;
    auto see = [&](double t) {
      if (t > 0 && std::isfinite(t)) t0 = std::min(t0, t), t1 = std::max(t1, t);
    };
    for (const store::Event* e : d.events) {
      if (is_function_event(*e)) function_lane = true, see(e->time);
      else if (drawn.count(e->graph)) see(e->time);
    }
    for (const store::HitSpan* h : d.hits) {
      if (drawn.count(h->graph)) see(h->first_time), see(h->last_time);
    }
    if (!(t0 <= t1)) return;
    const double span = std::max(t1 - t0, 1e-3);
    constexpr int kLeft = 150, kRight = 190, kWidth = 1100, kLane = 26, kTop = 10;
    const int plot = kWidth - kLeft - kRight;
    const size_t n_lanes = lanes.size() + (function_lane ? 1 : 0);
    const int height = kTop + static_cast<int>(n_lanes) * kLane + 58;
    auto x = [&](double t) { return kLeft + (t - t0) / span * plot; };
    html_ += fmt::format("<svg class=\"chart\" width=\"{0}\" height=\"{1}\" "
                         "viewBox=\"0 0 {0} {1}\" role=\"img\" aria-label=\"hits, misses and compiles over time\">\n",
                         kWidth, height);
    const int axis_y = kTop + static_cast<int>(n_lanes) * kLane;
    for (int i = 0; i <= 5; ++i) {
      const double gx = kLeft + plot * i / 5.0;
      html_ += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#e4e7eb\"/>"
                           "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">+{4}</text>\n",
                           gx, kTop, axis_y, axis_y + 14, esc(ms_text(span * 1000 * i / 5.0)));
    }
    html_ += fmt::format("<text x=\"{}\" y=\"{}\">time from {} UTC</text>\n", kLeft, axis_y + 30, esc(format_time(t0)));
    auto mark = [&](const store::Event& e, double y) {
      const double ex = x(e.time);
      const std::string tip = esc(fmt::format("{} {} {}{}{}", format_time(e.time), store::event_name(e.kind, e.tier),
                                              e.reason, e.detail.empty() ? "" : ": ", e.detail));
      switch (e.kind) {
        case store::EventKind::kMiss:
          html_ += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"5\" fill=\"#d64545\"><title>{}</title></circle>\n",
                               ex, y - 4, tip);
          break;
        case store::EventKind::kCompile:
          html_ += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"8\" height=\"8\" fill=\"#f0b429\" stroke=\"#8d6708\">"
                               "<title>{} ({})</title></rect>\n", ex - 4, y, tip, esc(ms_text(e.duration_ms)));
          break;
        case store::EventKind::kRecompile:
          html_ += fmt::format("<path d=\"M{0:.1f} {1:.1f} l6 10 h-12 z\" fill=\"#7c5dc7\"><title>{2}</title></path>\n",
                               ex, y - 6, tip);
          break;
        case store::EventKind::kFallback:
        case store::EventKind::kGraphBreak:
        case store::EventKind::kCorrupt:
        case store::EventKind::kStoreFailed:
          html_ += fmt::format("<path d=\"M{0:.1f} {1:.1f} l8 8 m0 -8 l-8 8\" stroke=\"#102a43\" stroke-width=\"2.5\">"
                               "<title>{2}</title></path>\n", ex - 4, y - 5, tip);
          break;
        default: break;
      }
    };
    size_t lane = 0;
    auto lane_y = [&](size_t i) { return kTop + static_cast<int>(i) * kLane; };
    if (function_lane) {
      const int y = lane_y(lane++);
      html_ += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#f6f0ff\"/><text x=\"4\" y=\"{}\">"
                           "function events</text>\n", kLeft, y + 2, plot, kLane - 4, y + 17);
      int64_t n = 0;
      for (const store::Event* e : d.events) {
        if (is_function_event(*e)) mark(*e, y + 12), ++n;
      }
      html_ += fmt::format("<text x=\"{}\" y=\"{}\">{} events</text>\n", kWidth - kRight + 8, y + 17, n);
    }
    for (const store::GraphAudit* a : lanes) {
      const int y = lane_y(lane++);
      html_ += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>"
                           "<text x=\"4\" y=\"{}\"><title>{}</title>graph {}</text>\n",
                           kLeft, y + 2, plot, kLane - 4, lane % 2 ? "#f8fafc" : "#ffffff", y + 17,
                           a->graph.to_hex(), short_hash(a->graph));
      for (const store::HitSpan* h : d.hits) {
        if (h->graph != a->graph) continue;
        const double hx = x(h->first_time), hw = std::max(x(h->last_time) - hx, 3.0);
        const bool memory = h->tier == store::kMemoryTier;
        html_ += fmt::format("<rect x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"6\" rx=\"2\" fill=\"{}\" "
                             "opacity=\"0.85\"><title>{} hits ({} tier) from {} to {} UTC</title></rect>\n",
                             hx, y + (memory ? 5 : 13), hw, memory ? "#3ebd93" : "#2186eb", h->hits, esc(h->tier),
                             esc(format_time(h->first_time)), esc(format_time(h->last_time)));
      }
      for (const store::Event* e : d.events) {
        if (e->graph == a->graph) mark(*e, y + (e->kind == store::EventKind::kCompile ? 12 : 10));
      }
      html_ += fmt::format("<text x=\"{}\" y=\"{}\">hits {}+{} \u00b7 misses {} \u00b7 compiles {}</text>\n",
                           kWidth - kRight + 8, y + 17, a->hits_memory, a->hits_disk, a->misses, a->compiles);
    }
    // The legend.
    const int ly = axis_y + 46;
    html_ += fmt::format(
        "<rect x=\"{0}\" y=\"{1}\" width=\"18\" height=\"6\" fill=\"#3ebd93\"/><text x=\"{2}\" y=\"{3}\">hits (memory)</text>"
        "<rect x=\"{4}\" y=\"{1}\" width=\"18\" height=\"6\" fill=\"#2186eb\"/><text x=\"{5}\" y=\"{3}\">hits (disk)</text>"
        "<circle cx=\"{6}\" cy=\"{7}\" r=\"5\" fill=\"#d64545\"/><text x=\"{8}\" y=\"{3}\">miss</text>"
        "<rect x=\"{9}\" y=\"{10}\" width=\"8\" height=\"8\" fill=\"#f0b429\"/><text x=\"{11}\" y=\"{3}\">compile</text>"
        "<path d=\"M{12} {10} l6 10 h-12 z\" fill=\"#7c5dc7\"/><text x=\"{13}\" y=\"{3}\">recompile</text>"
        "<path d=\"M{14} {10} l8 8 m0 -8 l-8 8\" stroke=\"#102a43\" stroke-width=\"2.5\"/>"
        "<text x=\"{15}\" y=\"{3}\">fallback / corrupt / store failed</text>\n",
        kLeft, ly - 5, kLeft + 22, ly + 2, kLeft + 120, kLeft + 142, kLeft + 236, ly - 2, kLeft + 246, kLeft + 290,
        ly - 6, kLeft + 302, kLeft + 370, kLeft + 380, kLeft + 460, kLeft + 474);
    html_ += "</svg>\n";
    if (d.graphs.size() > lanes.size()) {
      cut(fmt::format("the chart shows the {} most recently used of {} graphs", lanes.size(), d.graphs.size()));
    }
  }

  void scope_section(const Scope& scope, const ScopeData& d) {
    html_ += fmt::format("<section id=\"scope{}\"><h2>{}</h2>\n", scope_index_++, esc(scope.title()));
    chart(d);

    // Compiles, newest first, each with the miss that caused it and what differed.
    std::vector<const store::Event*> compiles, recompiles;
    for (const store::Event* e : d.events) {
      if (e->kind == store::EventKind::kCompile) compiles.push_back(e);
      else if (e->kind == store::EventKind::kRecompile) recompiles.push_back(e);
    }
    if (!compiles.empty()) {
      html_ += "<h3>Compiles and why</h3><table><tr><th>time (UTC)</th><th>graph</th><th class=n>compile</th>"
               "<th>reason</th><th>what differs from the closest cached graph</th></tr>\n";
      for (size_t i = 0; i < compiles.size() && i < kRowsPerTable; ++i) {
        const store::Event& c = *compiles[i];
        const store::Event* miss = miss_before(d, c);
        std::string diff_cell = miss && !miss->detail.empty() ? esc(miss->detail) : "<span class=note>no earlier graph of "
                                                                                     "this program to compare with</span>";
        if (miss) {
          if (std::optional<GraphKey> closest = closest_of(miss->detail)) diff_cell += node_diff(*closest, c.graph);
        }
        html_ += fmt::format("<tr><td>{}</td><td><code title=\"{}\">{}</code></td><td class=n>{}</td>"
                             "<td class=reason>{}</td><td class=diff>{}</td></tr>\n",
                             esc(format_time(c.time)), c.graph.to_hex(), short_hash(c.graph), esc(ms_text(c.duration_ms)),
                             miss ? esc(miss->reason) : "-", diff_cell);
      }
      html_ += "</table>\n";
      if (compiles.size() > kRowsPerTable) cut(fmt::format("{} older compiles", compiles.size() - kRowsPerTable));
    }
    if (!recompiles.empty()) {
      html_ += "<h3>Recompiles (the guards that failed)</h3><table><tr><th>time (UTC)</th><th>function</th>"
               "<th>step: entry: failing guards</th></tr>\n";
      for (size_t i = 0; i < recompiles.size() && i < kRowsPerTable; ++i) {
        const store::Event& r = *recompiles[i];
        html_ += fmt::format("<tr><td>{}</td><td>{}</td><td class=reason>{}</td></tr>\n", esc(format_time(r.time)),
                             esc(r.function.empty() ? r.reason : r.function), esc(r.detail));
      }
      html_ += "</table>\n";
      if (recompiles.size() > kRowsPerTable) cut(fmt::format("{} older recompiles", recompiles.size() - kRowsPerTable));
    }
    if (!d.functions.empty()) {
      html_ += "<h3>Guard entries (once mode: a call whose guards hold replays its entry)</h3><table><tr><th>function "
               "version</th><th class=n>entry</th><th class=n>replays</th><th class=n>bytes</th></tr>\n";
      for (const store::FunctionAudit* f : d.functions) {
        for (size_t i = 0; i < f->entries.size() && i < kRowsPerTable; ++i) {
          const auto& e = f->entries[i];
          html_ += fmt::format("<tr><td>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td></tr>\n",
                               esc(fmt::format("{} '{}' ({})", f->key.name, f->key.user_version, f->key.toolkit_version)),
                               e.entry, e.hits, e.bytes);
        }
        if (f->entries.size() > kRowsPerTable) cut(fmt::format("{} more guard entries", f->entries.size() - kRowsPerTable));
      }
      html_ += "</table>\n";
    }
    if (!d.graphs.empty()) {
      html_ += "<h3>Graphs</h3><table><tr><th>graph</th><th class=n>hits memory</th><th class=n>hits disk</th>"
               "<th class=n>misses</th><th class=n>compiles</th><th class=n>corrupt</th><th class=n>compiling</th>"
               "<th class=n>saved</th><th>last use (UTC)</th></tr>\n";
      for (size_t i = 0; i < d.graphs.size() && i < kRowsPerTable; ++i) {
        const store::GraphAudit& a = *d.graphs[i];
        html_ += fmt::format("<tr><td><code title=\"{}\">{}</code></td><td class=n>{}</td><td class=n>{}</td>"
                             "<td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td>"
                             "<td class=n>{}</td><td>{}</td></tr>\n",
                             a.graph.to_hex(), short_hash(a.graph), a.hits_memory, a.hits_disk, a.misses, a.compiles,
                             a.corrupt, esc(ms_text(a.compile_ms_total)), esc(ms_text(a.saved_ms)),
                             esc(format_time(a.last_use)));
      }
      html_ += "</table>\n";
      if (d.graphs.size() > kRowsPerTable) cut(fmt::format("{} less recently used graphs", d.graphs.size() - kRowsPerTable));
      pictures(d);
    }
    html_ += "</section>\n";
  }

  // The miss that the compile `c` followed: the newest miss of the same graph and process
  // before it.
  static const store::Event* miss_before(const ScopeData& d, const store::Event& c) {
    for (const store::Event* e : d.events) {  // newest first
      if (e->id < c.id && e->kind == store::EventKind::kMiss && e->graph == c.graph && e->pid == c.pid) return e;
    }
    return nullptr;
  }

  std::optional<std::pair<Graph, GraphSources>> load(const GraphKey& key) {
    Result<std::optional<std::string>> blob = db_.get_graph(key);
    if (!blob.is_ok() || !blob->has_value()) return std::nullopt;
    Result<Graph> graph = store::parse_graph(**blob);
    if (!graph.is_ok()) return std::nullopt;
    GraphSources sources;
    Result<std::optional<GraphSources>> s = db_.get_graph_sources(key);
    if (s.is_ok() && s->has_value()) sources = std::move(**s);
    return std::pair{std::move(*graph), std::move(sources)};
  }

  // The node-by-node diff of `a` (the closest graph) and `b`, recomputed from the stored graphs
  // with the diff engine, as a collapsed table (the first kMaxDiffs compiles of the page).
  std::string node_diff(const GraphKey& a, const GraphKey& b) {
    if (diffs_shown_ >= kMaxDiffs) {
      ++diffs_cut_;
      return {};
    }
    std::optional<std::pair<Graph, GraphSources>> ga = load(a), gb = load(b);
    if (!ga || !gb) return "<div class=note>(a graph is no longer stored: no node-by-node diff)</div>";
    ++diffs_shown_;
    const GraphDiff diff = diff_graphs(ga->first, gb->first, &ga->second, &gb->second);
    std::string out = fmt::format("<details><summary>node by node: {} difference{} ({} nodes aligned{})</summary>"
                                  "<table><tr><th>kind</th><th>node</th><th>what</th><th>closest</th><th>this graph</th>"
                                  "<th>program line</th></tr>",
                                  diff.differences.size(), diff.differences.size() == 1 ? "" : "s", diff.aligned,
                                  diff.derived ? fmt::format(", {} types follow from an input's", diff.derived) : "");
    for (size_t i = 0; i < diff.differences.size() && i < kMaxDiffRows; ++i) {
      const NodeDifference& x = diff.differences[i];
      const NodeId node = x.b != kNoDiffNode ? x.b : x.a;
      out += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td><code>{}</code></td>"
                         "<td>{}</td></tr>",
                         esc(difference_kind_name(x.kind)),
                         node == kNoDiffNode ? std::string("-") : esc(fmt::format("%{} {}", node, x.op)), esc(x.what),
                         esc(x.in_a), esc(x.in_b), esc(x.source_b.empty() ? x.source_a : x.source_b));
    }
    out += "</table>";
    if (diff.differences.size() > kMaxDiffRows) {
      out += fmt::format("<div class=note>and {} more differences (tracecache diff {} {})</div>",
                         diff.differences.size() - kMaxDiffRows, short_hash(a), short_hash(b));
    }
    return out + "</details>";
  }

  void pictures(const ScopeData& d) {
    std::string body;
    size_t skipped = 0;
    for (const store::GraphAudit* a : d.graphs) {
      if (pictures_shown_ >= kMaxPictures) {
        ++skipped;
        continue;
      }
      std::optional<std::pair<Graph, GraphSources>> g = load(a->graph);
      if (!g) continue;
      ++pictures_shown_;
      body += fmt::format("<h4><code>{}</code> \u00b7 {} nodes</h4>\n", a->graph.to_hex(), g->first.size());
      std::string why;
      if (g->first.size() > kMaxDrawnNodes) {
        why = fmt::format("{} nodes: more than {} are not drawn", g->first.size(), kMaxDrawnNodes);
      } else if (temp_dir_.empty()) {
        why = "no temporary directory for dot's files: the graph is shown as text";
      } else if (!dot_missing_) {
        std::optional<std::string> svg =
            render_svg(graph_to_dot(g->first, g->second, a->graph.to_hex()), temp_dir_, pictures_shown_, &dot_missing_, &why);
        if (svg) {
          body += zoomable(*svg, pictures_shown_);
          continue;
        }
      }
      if (dot_missing_) why = "Graphviz's dot is not installed (apt-get install graphviz), so graphs are shown as text";
      body += fmt::format("<p class=note>{}</p>\n<pre>{}</pre>\n", esc(why), text_form(g->first, g->second));
    }
    if (body.empty() && skipped == 0) return;
    html_ += "<h3>The graphs</h3>\n" + body;
    if (skipped > 0) {
      cut(fmt::format("{} graphs not drawn (the page draws at most {}; see tracecache show HASH --dot)", skipped,
                      kMaxPictures));
    }
  }

  // A picture in its pane under three zoom radio buttons (group n): the CSS above sizes the SVG
  // from --w/--h, its natural size as dot wrote it.
  static std::string zoomable(const std::string& svg, size_t n) {
    const std::string w = svg_length(svg, "width"), h = svg_length(svg, "height");
    if (w.empty() || h.empty()) return "<div class=\"pic\">" + svg + "</div>\n";
    const bool wide = std::strtod(w.c_str(), nullptr) * (w.ends_with("pt") ? 4.0 / 3.0 : 1.0) > kPageWidthPx;
    std::string out = "<div class=\"zoom\"><span class=note>zoom</span>";
    const std::pair<const char*, const char*> levels[] = {{"zf", "fit"}, {"z1", "100%"}, {"z2", "200%"}};
    for (const auto& [cls, label] : levels) {
      const bool checked = std::string_view(cls) == (wide ? "z1" : "zf");
      out += fmt::format("<input type=\"radio\" class=\"{0}\" name=\"zoom{1}\" id=\"zoom{1}-{0}\"{2}>"
                         "<label for=\"zoom{1}-{0}\">{3}</label>",
                         cls, n, checked ? " checked" : "", label);
    }
    out += " <span class=note>\u00b7 scroll to pan, drag the corner to resize</span>";
    return out + fmt::format("<div class=\"pic\" style=\"--w:{};--h:{}\">{}</div></div>\n", w, h, svg);
  }

  // The value of the root <svg> element's attribute `name` when it is a plain length ("123pt",
  // "40.5px", "80"); empty otherwise, so nothing from the file reaches a style attribute unchecked.
  static std::string svg_length(const std::string& svg, std::string_view name) {
    const size_t end = svg.find('>');
    const std::string_view tag = std::string_view(svg).substr(0, end);
    const std::string key = fmt::format(" {}=\"", name);
    const size_t at = tag.find(key);
    if (at == std::string_view::npos) return {};
    const size_t from = at + key.size(), to = tag.find('"', from);
    if (to == std::string_view::npos || to == from || to - from > 16) return {};
    std::string v(tag.substr(from, to - from));
    size_t digits = 0;
    while (digits < v.size() && (std::isdigit(static_cast<unsigned char>(v[digits])) || v[digits] == '.')) ++digits;
    const std::string_view unit = std::string_view(v).substr(digits);
    if (digits == 0 || !(unit.empty() || unit == "pt" || unit == "px")) return {};
    return unit.empty() ? v + "px" : v;
  }

  static std::string text_form(const Graph& g, const GraphSources& s) {
    const std::string text = graph_text_with_sources(g, s);
    size_t pos = 0, lines = 0;
    while (pos < text.size() && lines < kMaxTextLines) {
      pos = text.find('\n', pos);
      if (pos == std::string::npos) pos = text.size();
      else ++pos;
      ++lines;
    }
    std::string out = html_escape(std::string_view(text).substr(0, pos));
    if (pos < text.size()) out += fmt::format("... ({} lines shown)", kMaxTextLines);
    return out;
  }

  void problems() {
    std::vector<const store::Event*> rows;
    for (const store::Event& e : events_) {
      if (e.kind == store::EventKind::kCorrupt || e.kind == store::EventKind::kFallback ||
          e.kind == store::EventKind::kStoreFailed) {
        rows.push_back(&e);
      }
    }
    html_ += "<section id=\"problems\"><h2>Corrupt entries, fallbacks and failed writes</h2>\n";
    if (rows.empty()) {
      html_ += "<p>None: no entry failed verification, every step ran compiled, every write succeeded.</p>\n";
    } else {
      html_ += "<table><tr><th>time (UTC)</th><th>event</th><th>program \u00b7 function</th><th>graph</th>"
               "<th>reason</th><th>detail</th></tr>\n";
      for (size_t i = 0; i < rows.size() && i < kRowsPerTable * 2; ++i) {
        const store::Event& e = *rows[i];
        html_ += fmt::format("<tr><td>{}</td><td class=reason>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td>"
                             "<td>{}</td></tr>\n",
                             esc(format_time(e.time)), esc(store::event_name(e.kind, e.tier)),
                             esc(Scope{e.program, e.function}.title()),
                             is_function_event(e) ? std::string("-") : short_hash(e.graph), esc(e.reason), esc(e.detail));
      }
      html_ += "</table>\n";
      if (rows.size() > kRowsPerTable * 2) cut(fmt::format("{} older such events", rows.size() - kRowsPerTable * 2));
    }
    html_ += "</section>\n";
  }

  void cache_size() {
    html_ += "<section id=\"size\"><h2>Cache size by tier</h2>\n<table><tr><th>tier</th><th>holds</th>"
             "<th class=n>entries</th><th class=n>bytes</th></tr>\n";
    html_ += fmt::format("<tr><td>disk (this database)</td><td>executables</td><td class=n>{}</td><td class=n>{}</td></tr>\n"
                         "<tr><td></td><td>graphs (canonical, for diffs and show)</td><td class=n>{}</td><td class=n>{}</td></tr>\n"
                         "<tr><td></td><td>the whole file</td><td class=n></td><td class=n>{}</td></tr>\n",
                         stats_.executables, esc(bytes_text(stats_.executable_bytes)), stats_.graphs,
                         esc(bytes_text(stats_.graph_bytes)), esc(bytes_text(stats_.file_bytes)));
    html_ += "<tr><td>memory</td><td>each process's LRU of executables (not stored: it ends with the process)</td>"
             "<td class=n>-</td><td class=n>-</td></tr>\n</table>\n";
    std::map<std::string, std::pair<int64_t, uint64_t>> by_backend;
    for (const store::EntryInfo& e : entries_) {
      auto& [n, b] = by_backend[e.key.backend];
      ++n;
      b += e.bytes;
    }
    if (!by_backend.empty()) {
      uint64_t most = 1;
      for (const auto& [name, nb] : by_backend) most = std::max(most, nb.second);
      html_ += "<h3>Executables by backend</h3><table><tr><th>backend</th><th class=n>executables</th>"
               "<th class=n>bytes</th><th></th></tr>\n";
      for (const auto& [name, nb] : by_backend) {
        html_ += fmt::format("<tr><td>{}</td><td class=n>{}</td><td class=n>{}</td><td><svg width=\"300\" height=\"12\">"
                             "<rect width=\"{:.1f}\" height=\"12\" fill=\"#2186eb\"/></svg></td></tr>\n",
                             esc(name), nb.first, esc(bytes_text(nb.second)),
                             300.0 * static_cast<double>(nb.second) / static_cast<double>(most));
      }
      html_ += "</table>\n";
    }
    html_ += "</section>\n";
  }

  void tail() {
    if (diffs_cut_ > 0) {
      html_ += fmt::format("<div class=\"cut\">Left out: node-by-node diffs of {} more compiles (the page recomputes at "
                           "most {}; see tracecache diff A B).</div>\n", diffs_cut_, kMaxDiffs);
    }
    html_ += "<p class=note>Made by <code>tracecache report</code>. The page is self-contained: no scripts, no network.</p>\n"
             "</main></body></html>\n";
  }

  store::CacheDb& db_;
  const ReportOptions& options_;
  store::AuditFilter filter_;
  std::vector<store::GraphAudit> graphs_;
  std::vector<store::Event> events_;
  std::vector<store::HitSpan> hits_;
  std::vector<store::FunctionAudit> functions_;
  store::CacheStats stats_;
  std::vector<store::EntryInfo> entries_;
  std::map<Scope, ScopeData> scopes_;
  std::vector<std::string> cuts_;
  int64_t malformed_ = 0;
  size_t scope_index_ = 0, diffs_shown_ = 0, diffs_cut_ = 0, pictures_shown_ = 0;
  bool dot_missing_ = false;
  std::filesystem::path temp_dir_;
  std::string html_;
};

}  // namespace

Result<size_t> write_report(const ReportOptions& options) {
  store::AuditFilter filter{options.program, options.function, {}, 0, std::nullopt};
  if (!options.since.empty()) {
    Result<double> since = parse_since(options.since);
    if (!since.is_ok()) return since.status();
    filter.since = *since;
  }
  // The output must be writable before the work starts (bad input: exit 2).
  const std::filesystem::path output(options.output);
  std::error_code ec;
  if (options.output.empty() || std::filesystem::is_directory(output, ec)) {
    return invalid_argument(fmt::format("-o '{}' is not a file to write the report to (example: -o report.html)",
                                        options.output));
  }
  const std::filesystem::path temp = output.string() + fmt::format(".tmp{}", ::getpid());
  std::ofstream file(temp, std::ios::binary | std::ios::trunc);
  if (!file) {
    return invalid_argument(fmt::format("-o: cannot write '{}': {} (pass a file in a directory you can write)",
                                        options.output, std::strerror(errno)));
  }
  Result<std::unique_ptr<store::CacheDb>> db = open_existing_db(options.db_path);
  if (!db.is_ok()) {
    file.close();
    std::filesystem::remove(temp, ec);
    // A damaged database is bad input here (exit 2), as the user named it.
    if (db.status().code() == StatusCode::kCorruption) return invalid_argument(db.status().message());
    return db.status();
  }
  ReportWriter writer(**db, options, filter);
  Result<std::string> page = writer.write();
  if (page.is_ok()) file << *page;
  file.close();
  if (!page.is_ok() || !file) {
    std::filesystem::remove(temp, ec);
    return page.is_ok() ? io_error(fmt::format("writing '{}' failed", options.output)) : page.status();
  }
  std::filesystem::rename(temp, output, ec);
  if (ec) {
    std::filesystem::remove(temp, ec);
    return io_error(fmt::format("cannot move the report to '{}': {}", options.output, ec.message()));
  }
  return page->size();
}

}  // namespace tracecache::audit
