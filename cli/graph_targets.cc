#include "cli/graph_targets.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "capture/trace/recording_executor.h"
#include "cli/common.h"
#include "frontend/program/program.h"
#include "frontend/program/program_runner.h"
#include "store/codec/graph_codec.h"

namespace tracecache::cli {

namespace {

Result<GraphTarget> cached_graph(const std::string& target, const DbOptions& db_options) {
  Result<std::unique_ptr<store::CacheDb>> db = open_existing_db(db_options);
  if (!db.is_ok()) return db.status();
  Result<GraphKey> key = store::resolve_graph_key(**db, target);
  if (!key.is_ok()) return key.status();
  Result<std::optional<std::string>> blob = (*db)->get_graph(*key);
  if (!blob.is_ok()) return blob.status();
  if (!blob->has_value()) {
    return not_found(fmt::format("graph {} is not in the cache '{}' (see `tracecache ls`)", key->to_hex(), (*db)->path()));
  }
  Result<Graph> graph = store::parse_graph(**blob);
  if (!graph.is_ok()) return graph.status();
  GraphTarget t{*key, std::move(*graph), {}, "cache"};
  Result<std::optional<GraphSources>> sources = (*db)->get_graph_sources(*key);
  if (!sources.is_ok()) {
    warn(sources.status().message());  // the graph itself is fine: shown without locations
  } else if (sources->has_value()) {
    t.sources = std::move(**sources);
  }
  return t;
}

Result<GraphTarget> program_graph(const std::string& path, int step, bool bake_scalars) {
  Result<Program> program = load_program(path);
  if (!program.is_ok()) return program.status();
  RecordingExecutor executor;
  LazyOptions lazy;
  lazy.canonicalize.bake_scalars = bake_scalars;
  LazyContext ctx(&executor, lazy);
  Result<std::vector<StepResult>> steps = run_program(*program, ctx, step + 1);
  if (!steps.is_ok()) return steps.status();
  if (steps->size() <= static_cast<size_t>(step) || (*steps)[static_cast<size_t>(step)].graph_keys.empty()) {
    return invalid_argument(fmt::format("{}: step {} executes no graph", path, step));
  }
  const GraphKey key = (*steps)[static_cast<size_t>(step)].graph_keys.front();
  for (const RecordedGraph& r : executor.graphs()) {
    if (r.graph.key != key) continue;
    GraphTarget t{key, r.graph.graph, graph_sources(r.graph), path};
    t.sources.program = program->file_name;
    return t;
  }
  return internal_error(fmt::format("{}: the graph of step {} was not recorded", path, step));
}

}  // namespace

Status check_not_short_key_prefix(const std::string& target) {
  std::error_code ec;
  const bool hex = !target.empty() && target.size() < store::kMinKeyPrefix &&
                   std::all_of(target.begin(), target.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
  if (!hex || std::filesystem::exists(target, ec)) return Status::ok();
  return invalid_argument(fmt::format("'{}' is too short for a graph hash prefix: give {} to 32 hex digits (`tracecache "
                                      "ls` lists the hashes), or the path of a trace program",
                                      target, store::kMinKeyPrefix));
}

Result<GraphTarget> load_graph_target(const std::string& target, const DbOptions& db, int step, bool bake_scalars) {
  if (Status st = check_not_short_key_prefix(target); !st.is_ok()) return st;
  std::error_code ec;
  if (store::looks_like_key_prefix(target) && !std::filesystem::exists(target, ec)) return cached_graph(target, db);
  return program_graph(target, step, bake_scalars);
}

}  // namespace tracecache::cli
