// `tracecache audit | ls | stats | gc | verify`: reading and maintaining the cache.
#include <charconv>
#include <chrono>
#include <optional>

#include "cli/common.h"
#include "cli/json.h"
#include "replay/compile/executable.h"

namespace tracecache::cli {

namespace {

std::string short_key(const GraphKey& k) { return k.to_hex().substr(0, 16); }

// A file that is not a tracecache database (or is damaged beyond opening) is a problem with what
// the user pointed us at: exit 2, like a missing file.
int report_open_error(const Status& status) {
  if (status.code() != StatusCode::kCorruption) return report_error(status);
  report_error(corruption(fmt::format("{} (if it is a damaged tracecache database: see what is bad with `tracecache "
                                      "verify`, or move the file aside; the next run starts a new one)",
                                      status.message())));
  return kExitBadInput;
}

}  // namespace

Result<double> parse_age(std::string_view text) {
  double unit = 1;
  std::string_view digits = text;
  if (!text.empty()) {
    switch (text.back()) {
      case 's': unit = 1; break;
      case 'm': unit = 60; break;
      case 'h': unit = 3600; break;
      case 'd': unit = 86400; break;
      default: unit = 0; break;
    }
    if (unit != 0) digits.remove_suffix(1);
    if (unit == 0) unit = 1;
  }
  uint64_t n = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size()) {
    return invalid_argument(fmt::format("'{}' is not an age (examples: 3600, 90m, 12h, 30d)", text));
  }
  return static_cast<double>(n) * unit;
}

// `audit --since`: "2026-11-23", "2026-11-23 10:00[:30]", "2026-11-23T10:00[:30][Z]" (UTC), or an
// age before now ("30s", "10m", "2h", "1d") -> Unix time.
Result<double> parse_since(std::string_view text) {
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (!text.empty() && text.back() != 'Z' && text.find('-') == std::string_view::npos) {
    Result<double> age = parse_age(text);
    if (age.is_ok()) return now - *age;
  }
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  std::string_view rest = text;
  if (rest.ends_with('Z')) rest.remove_suffix(1);
  auto number = [&rest](int digits, int* out) {
    if (rest.size() < static_cast<size_t>(digits)) return false;
    auto [end, ec] = std::from_chars(rest.data(), rest.data() + digits, *out);
    if (ec != std::errc() || end != rest.data() + digits) return false;
    rest.remove_prefix(static_cast<size_t>(digits));
    return true;
  };
  auto sep = [&rest](std::string_view chars) {
    if (rest.empty() || chars.find(rest.front()) == std::string_view::npos) return false;
    rest.remove_prefix(1);
    return true;
  };
  bool ok = number(4, &year) && sep("-") && number(2, &month) && sep("-") && number(2, &day);
  if (ok && !rest.empty()) ok = sep("T ") && number(2, &hour) && sep(":") && number(2, &minute);
  if (ok && !rest.empty()) ok = sep(":") && number(2, &second);
  ok = ok && rest.empty() && month >= 1 && month <= 12 && day >= 1 && day <= 31 && hour <= 23 && minute <= 59 &&
       second <= 60;
  if (!ok) {
    return invalid_argument(fmt::format("--since '{}' is not a time: give an ISO date or date and time in UTC "
                                        "(2026-11-23, 2026-11-23T10:00) or an age (30s, 10m, 2h, 1d)", text));
  }
  const std::chrono::year_month_day date(std::chrono::year(year), std::chrono::month(static_cast<unsigned>(month)),
                                         std::chrono::day(static_cast<unsigned>(day)));
  if (!date.ok()) return invalid_argument(fmt::format("--since '{}': no such date", text));
  const std::chrono::sys_days days(date);
  return static_cast<double>(days.time_since_epoch().count()) * 86400.0 + hour * 3600.0 + minute * 60.0 + second;
}

namespace {

// The audit filter the options ask for; bad input is kInvalidArgument (exit 2).
Result<store::AuditFilter> audit_filter(const CacheCommandOptions& options, store::CacheDb& db) {
  store::AuditFilter f{options.program, options.function, options.kind, 0, std::nullopt};
  if (!options.kind.empty()) {
    std::optional<store::ParsedEventName> kind = store::parse_event_name(options.kind);
    const bool graph_kind = kind && kind->kind != store::EventKind::kRecompile && kind->kind != store::EventKind::kFallback &&
                            kind->kind != store::EventKind::kGraphBreak;
    if (!graph_kind) {
      return invalid_argument(fmt::format("--kind '{}' is not a kind of graph event (kinds: hit_memory, hit_disk, "
                                          "hit_remote, miss, compile, store, evict, corrupt, store_failed; the "
                                          "remote tier's: miss_remote, store_remote, unavailable_remote, "
                                          "skip_remote, store_failed_remote)", options.kind));
    }
  }
  if (!options.since.empty()) {
    Result<double> since = parse_since(options.since);
    if (!since.is_ok()) return since.status();
    f.since = *since;
  }
  if (!options.graph.empty()) {
    Result<GraphKey> key = store::resolve_graph_key(db, options.graph);
    if (!key.is_ok()) return key.status();
    f.graph = *key;
  }
  return f;
}

// What `audit` reports for the options' filters: graph rows, and guard entries when only
// program/function filters apply (guard entries have no kind, time or graph).
struct AuditRows {
  std::vector<store::GraphAudit> graphs;
  std::vector<store::FunctionAudit> functions;
  int64_t malformed = 0;     // rows skipped (damaged graph keys)
  int64_t graphs_total = 0;  // graph rows the filters select, shown or not
};

Result<AuditRows> read_audit(store::CacheDb& db, const CacheCommandOptions& options) {
  Result<store::AuditFilter> filter = audit_filter(options, db);
  if (!filter.is_ok()) return filter.status();
  AuditRows rows;
  Result<std::vector<store::GraphAudit>> graphs =
      db.audit(&rows.malformed, *filter, {.limit = options.limit, .max_detail_bytes = options.max_detail_bytes},
               &rows.graphs_total);
  if (!graphs.is_ok()) return graphs.status();
  rows.graphs = std::move(*graphs);
  if (options.kind.empty() && options.since.empty() && options.graph.empty()) {
    Result<std::vector<store::FunctionAudit>> functions = db.function_audit(*filter);
    if (!functions.is_ok()) return functions.status();
    rows.functions = std::move(*functions);
  }
  return rows;
}

std::string audit_document(const std::string& db_path, const AuditRows& rows) {
  JsonWriter j;
  j.begin_object();
  j.key("db").value(db_path);
  j.key("graphs").begin_array();
  for (const store::GraphAudit& a : rows.graphs) {
    j.begin_object();
    j.key("hash").value(a.graph.to_hex());
    j.key("program").value(a.program);
    j.key("hits_memory").value(a.hits_memory);
    j.key("hits_disk").value(a.hits_disk);
    j.key("hits_remote").value(a.hits_remote);
    j.key("misses").value(a.misses);
    j.key("compiles").value(a.compiles);
    j.key("corrupt").value(a.corrupt);
    j.key("compile_ms_total").value(a.compile_ms_total);
    j.key("saved_ms").value(a.saved_ms);
    j.key("last_use").value(a.last_use);
    j.key("recent_misses").begin_array();
    for (const auto& m : a.recent_misses) {
      j.begin_object();
      j.key("time").value(m.time);
      j.key("reason").value(m.reason);
      j.key("backend").value(m.backend);
      j.key("program").value(m.program);
      j.key("detail").value(m.detail);
      if (m.detail_cut) j.key("detail_cut").value(true);
      j.end_object();
    }
    j.end_array();
    j.end_object();
  }
  j.end_array();
  j.key("graphs_total").value(rows.graphs_total);
  j.key("graphs_left_out").value(rows.graphs_total - static_cast<int64_t>(rows.graphs.size()));
  j.key("functions").begin_array();
  for (const store::FunctionAudit& f : rows.functions) {
    j.begin_object();
    j.key("name").value(f.key.name);
    j.key("user_version").value(f.key.user_version);
    j.key("toolkit_version").value(f.key.toolkit_version);
    j.key("entries").begin_array();
    for (const auto& e : f.entries) {
      j.begin_object();
      j.key("entry").value(e.entry);
      j.key("hits").value(e.hits);
      j.key("bytes").value(e.bytes);
      j.end_object();
    }
    j.end_array();
    j.key("recent_recompiles").begin_array();
    for (const std::string& r : f.recent_recompiles) j.value(r);
    j.end_array();
    j.end_object();
  }
  j.end_array();
  j.end_object();
  return j.str();
}

}  // namespace

Result<std::string> audit_json(const CacheCommandOptions& options, int64_t* malformed) {
  Result<std::unique_ptr<store::CacheDb>> db = open_existing_db(options.db);
  if (!db.is_ok()) return db.status();
  Result<AuditRows> rows = read_audit(**db, options);
  if (!rows.is_ok()) return rows.status();
  if (malformed) *malformed = rows->malformed;
  return audit_document((*db)->path(), *rows);
}

namespace {

// `audit --program NAME` that selects nothing: the programs the cache knows, so that a misspelt
// or mis-pathed name can be corrected (kNotFound, exit 2).
Status no_such_program(store::CacheDb& db, const std::string& program) {
  // Known, with no events the other filters select: not an error.
  Result<std::vector<store::GraphAudit>> any = db.audit(nullptr, {.program = program}, {.limit = 1});
  if (!any.is_ok()) return any.status();
  Result<std::vector<store::FunctionAudit>> functions = db.function_audit({.program = program});
  if (!functions.is_ok()) return functions.status();
  if (!any->empty() || !functions->empty()) return Status::ok();
  constexpr int64_t kShown = 20;
  Result<std::vector<std::string>> known = db.programs(kShown + 1);
  if (!known.is_ok()) return known.status();
  if (known->empty()) {
    return not_found(fmt::format("--program {}: no events of any program in '{}' yet (run one first)", program, db.path()));
  }
  const bool more = known->size() > static_cast<size_t>(kShown);
  if (more) known->resize(static_cast<size_t>(kShown));
  return not_found(fmt::format("--program {}: no events of that program in '{}'; programs it knows: {}{} (give one "
                               "of these, its file name, or its name without .trace)",
                               program, db.path(), fmt::join(*known, ", "), more ? ", ..." : ""));
}

// The text report's rows: functions, then one line per graph with its recent misses (details
// cut as the options say), then what the limit left out.
void print_audit(const CacheCommandOptions& options, const AuditRows& rows) {
  for (const store::FunctionAudit& f : rows.functions) {
    out(fmt::format("function {} (version '{}', {}): {} entries\n", f.key.name, f.key.user_version,
                    f.key.toolkit_version, f.entries.size()));
    for (const auto& e : f.entries) out(fmt::format("    entry {}: {} hits, {} bytes\n", e.entry, e.hits, e.bytes));
    for (const std::string& r : f.recent_recompiles) out(fmt::format("    recompile: {}\n", r));
  }
  out(fmt::format("{:<16}  {:>8} {:>9} {:>11} {:>7} {:>8} {:>7} {:>11} {:>10}  {:<19}  {}\n", "graph", "hits:mem",
                  "hits:disk", "hits:remote", "misses", "compiles", "corrupt", "compile ms", "saved ms",
                  "last use (UTC)", "program"));
  for (const store::GraphAudit& a : rows.graphs) {
    out(fmt::format("{:<16}  {:>8} {:>9} {:>11} {:>7} {:>8} {:>7} {:>11.2f} {:>10.2f}  {:<19}  {}\n",
                    short_key(a.graph), a.hits_memory, a.hits_disk, a.hits_remote, a.misses, a.compiles, a.corrupt,
                    a.compile_ms_total, a.saved_ms, format_time(a.last_use), a.program.empty() ? "-" : a.program));
    for (const auto& m : a.recent_misses) {
      out(fmt::format("    miss {}  {} ({})\n", format_time(m.time), m.reason, m.backend));
      if (m.detail.empty()) continue;
      out(fmt::format("      {}{}\n", m.detail,
                      m.detail_cut ? fmt::format(" ... (cut at {} bytes; all of it: --full-details)", options.max_detail_bytes)
                                   : std::string()));
    }
  }
  if (rows.graphs_total == 0) out("(no cache events yet)\n");
  const int64_t left_out = rows.graphs_total - static_cast<int64_t>(rows.graphs.size());
  if (left_out > 0) {
    out(fmt::format("({} of {} graphs shown, the most recently used; {} more with --limit {}, or --all)\n",
                    rows.graphs.size(), rows.graphs_total, left_out, rows.graphs_total));
  }
}

}  // namespace

int audit_command(const CacheCommandOptions& options) {
  Result<std::unique_ptr<store::CacheDb>> db = open_existing_db(options.db);
  if (!db.is_ok()) return report_open_error(db.status());
  Result<AuditRows> rows = read_audit(**db, options);
  if (!rows.is_ok()) return report_error(rows.status());
  if (rows->malformed > 0) warn(fmt::format("{} malformed audit rows skipped (damaged graph keys)", rows->malformed));
  if (!options.program.empty() && rows->graphs_total == 0 && rows->functions.empty()) {
    if (Status st = no_such_program(**db, options.program); !st.is_ok()) return report_error(st);
  }
  if (options.json) {
    out(audit_document((*db)->path(), *rows) + "\n");
  } else {
    print_audit(options, *rows);
  }
  return kExitOk;
}

int ls_command(const CacheCommandOptions& options) {
  Result<std::unique_ptr<store::CacheDb>> db = open_existing_db(options.db);
  if (!db.is_ok()) return report_open_error(db.status());
  Result<std::vector<store::EntryInfo>> entries = (*db)->list_executables();
  if (!entries.is_ok()) return report_error(entries.status());
  if (options.json) {
    JsonWriter j;
    j.begin_array();
    for (const store::EntryInfo& e : *entries) {
      j.begin_object();
      j.key("hash").value(e.key.graph.to_hex());
      j.key("backend").value(e.key.backend);
      j.key("options_digest").value(e.key.options_digest);
      j.key("compiler_version").value(static_cast<uint64_t>(e.key.compiler_version));
      j.key("bytes").value(e.bytes);
      j.key("nodes").value(e.graph_nodes);
      j.key("uses").value(e.uses);
      j.key("compile_ms").value(e.compile_ms);
      j.key("created").value(e.created);
      j.key("last_used").value(e.last_used);
      j.end_object();
    }
    j.end_array();
    out(j.str() + "\n");
    return kExitOk;
  }
  // The options digest (e.g. which sim device spec) is part of the key: shown, shortened.
  out(fmt::format("{:<32}  {:<7} {:<16} {:>8} {:>6} {:>9} {:>6}  {}\n", "graph", "backend", "options",
                  "compiler", "nodes", "bytes", "uses", "last used (UTC)"));
  for (const store::EntryInfo& e : *entries) {
    std::string options_digest = e.key.options_digest.empty() ? "-" : e.key.options_digest.substr(0, 16);
    out(fmt::format("{:<32}  {:<7} {:<16} {:>8} {:>6} {:>9} {:>6}  {}\n", e.key.graph.to_hex(), e.key.backend,
                    options_digest, e.key.compiler_version, e.graph_nodes, e.bytes, e.uses,
                    format_time(e.last_used)));
  }
  if (entries->empty()) out("(no executables cached)\n");
  return kExitOk;
}

int stats_command(const CacheCommandOptions& options) {
  Result<std::unique_ptr<store::CacheDb>> db = open_existing_db(options.db);
  if (!db.is_ok()) return report_open_error(db.status());
  Result<store::CacheStats> s = (*db)->stats();
  if (!s.is_ok()) return report_error(s.status());
  if (options.json) {
    JsonWriter j;
    j.begin_object();
    j.key("db").value((*db)->path());
    j.key("graphs").value(s->graphs);
    j.key("executables").value(s->executables);
    j.key("executable_bytes").value(s->executable_bytes);
    j.key("graph_bytes").value(s->graph_bytes);
    j.key("file_bytes").value(s->file_bytes);
    j.key("hits_memory").value(s->hits_memory);
    j.key("hits_disk").value(s->hits_disk);
    j.key("hits_remote").value(s->hits_remote);
    j.key("misses").value(s->misses);
    j.key("compiles").value(s->compiles);
    j.key("hit_rate").value(s->hit_rate);
    j.end_object();
    out(j.str() + "\n");
    return kExitOk;
  }
  out(fmt::format(
      "cache {}\n  graphs {}, executables {} ({} bytes), graph blobs {} bytes, file {} bytes\n"
      "  lookups: {} memory hits, {} disk hits, {} remote hits, {} misses; hit rate {:.1f}%; {} compiles\n",
      (*db)->path(), s->graphs, s->executables, s->executable_bytes, s->graph_bytes, s->file_bytes,
      s->hits_memory, s->hits_disk, s->hits_remote, s->misses, 100.0 * s->hit_rate, s->compiles));
  return kExitOk;
}

int gc_command(const CacheCommandOptions& options) {
  Result<std::unique_ptr<store::CacheDb>> db = open_existing_db(options.db);
  if (!db.is_ok()) return report_open_error(db.status());
  if ((*db)->read_only()) {
    return report_error(invalid_argument(fmt::format(
        "gc: the cache database '{}' is read-only here (no permission to write it or its directory): gc removes "
        "rows, so run it as the database's owner or make the file and its directory writable", (*db)->path())));
  }
  store::GcOptions gc_options{.max_bytes = options.max_bytes, .max_events = options.max_events};
  if (!options.older_than.empty()) {
    Result<double> age = parse_age(options.older_than);
    if (!age.is_ok()) return report_error(age.status());
    gc_options.older_than =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() - *age;
  }
  Result<store::GcReport> report = (*db)->gc(gc_options);
  if (!report.is_ok() && report.status().code() == StatusCode::kCorruption) {
    // As `run` says of a damaged database: what to do about it, and bad input (exit 2).
    report_error(corruption(fmt::format(
        "{} (the database is damaged: see what is bad with `tracecache verify --db {}`, or move the file aside; the "
        "next run starts a new one)", report.status().message(), (*db)->path())));
    return kExitBadInput;
  }
  if (!report.is_ok()) return report_error(report.status());
  const std::vector<store::EntryInfo>* evicted = &report->evicted;
  uint64_t freed = 0;
  for (const store::EntryInfo& e : *evicted) freed += e.bytes;
  if (options.json) {
    JsonWriter j;
    j.begin_object();
    j.key("evicted").begin_array();
    for (const store::EntryInfo& e : *evicted) j.value(e.key.graph.to_hex());
    j.end_array();
    j.key("freed_bytes").value(freed);
    j.key("events_removed").value(report->events_removed);
    j.key("hit_counts_removed").value(report->hit_counts_removed);
    j.key("function_entries_removed").value(report->function_entries_removed);
    j.end_object();
    out(j.str() + "\n");
    return kExitOk;
  }
  for (const store::EntryInfo& e : *evicted) {
    out(fmt::format("evicted {} ({} bytes, last used {})\n", e.key.graph.to_hex(), e.bytes,
                    format_time(e.last_used)));
  }
  out(fmt::format("{} executables evicted, {} bytes freed\n", evicted->size(), freed));
  out(fmt::format("{} audit events, {} hit counts and {} stale guard entries removed\n", report->events_removed,
                  report->hit_counts_removed, report->function_entries_removed));
  return kExitOk;
}

int verify_command(const CacheCommandOptions& options) {
  Result<std::unique_ptr<store::CacheDb>> db = open_existing_db(options.db);
  if (!db.is_ok()) return report_open_error(db.status());
  Result<std::vector<store::VerifyProblem>> problems = (*db)->verify();
  if (!problems.is_ok()) return report_error(problems.status());
  // Beyond checksums: every executable whose bytes are intact must also pass the structural
  // validation a load would apply.
  Result<std::vector<store::EntryInfo>> entries = (*db)->list_executables();
  if (!entries.is_ok()) return report_error(entries.status());
  for (const store::EntryInfo& e : *entries) {
    Result<std::optional<store::StoredExecutable>> stored = (*db)->get_executable(e.key);
    if (!stored.is_ok() || !stored->has_value()) continue;  // reported by the checksum pass
    Result<Executable> exe = parse_executable((*stored)->blob);
    std::string problem = !exe.is_ok() ? exe.status().message()
                          : exe->graph_key != e.key.graph ? "stored under another graph's key"
                                                          : std::string();
    if (!problem.empty()) {
      problems->push_back({"executables", fmt::format("{} {} {} v{}", e.key.graph.to_hex(), e.key.backend,
                                                      e.key.options_digest, e.key.compiler_version),
                           problem});
    }
  }
  if (options.json) {
    JsonWriter j;
    j.begin_object();
    j.key("ok").value(problems->empty());
    j.key("problems").begin_array();
    for (const store::VerifyProblem& p : *problems) {
      j.begin_object();
      j.key("table").value(p.table);
      j.key("key").value(p.key);
      j.key("problem").value(p.problem);
      j.end_object();
    }
    j.end_array();
    j.end_object();
    out(j.str() + "\n");
  } else {
    for (const store::VerifyProblem& p : *problems) out(fmt::format("BAD {} {}: {}\n", p.table, p.key, p.problem));
    out(problems->empty() ? "all blobs verified\n" : fmt::format("{} bad blobs\n", problems->size()));
  }
  return problems->empty() ? kExitOk : kExitFailure;
}

}  // namespace tracecache::cli
