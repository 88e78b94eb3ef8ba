// `tracecache audit | ls | stats | gc | verify`: reading and maintaining the cache.
#include <chrono>
#include <optional>

#include "cli/common.h"
#include "replay/audit/audit.h"
#include "replay/audit/json.h"
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

// The audit's options (replay/audit/audit.h) from the command's.
audit::AuditOptions audit_options(const CacheCommandOptions& options) {
  return {.db_path = options.db.path(),
          .program = options.program,
          .function = options.function,
          .kind = options.kind,
          .since = options.since,
          .graph = options.graph,
          .limit = options.limit,
          .max_detail_bytes = options.max_detail_bytes};
}

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
void print_audit(const CacheCommandOptions& options, const audit::AuditRows& rows) {
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
  Result<audit::AuditRows> rows = audit::read_audit(**db, audit_options(options));
  if (!rows.is_ok()) return report_error(rows.status());
  if (rows->malformed > 0) warn(fmt::format("{} malformed audit rows skipped (damaged graph keys)", rows->malformed));
  if (!options.program.empty() && rows->graphs_total == 0 && rows->functions.empty()) {
    if (Status st = no_such_program(**db, options.program); !st.is_ok()) return report_error(st);
  }
  if (options.json) {
    out(audit::audit_document((*db)->path(), *rows) + "\n");
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
  // The audit log is always trimmed (to --max-events' default, 100000), executables only with --max-bytes.
  if (options.max_bytes != UINT64_MAX) {
    out(fmt::format("{} executables evicted, {} bytes freed\n", evicted->size(), freed));
  }
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
