// Graphs named on the command line, for `show` and `diff`: a graph hash in the cache (the full 32
// hex digits or a unique prefix, store::resolve_graph_key: like git), or a trace program (its
// canonical graph at a step, traced with source locations on). The graph listing with each
// node's program location beside it is replay/audit/graph_text.h.
// Errors: an unknown or ambiguous prefix, a missing file, a program that does not parse, a step
// the program does not reach: Status (kInvalidArgument / kNotFound / kParseError: exit 2).
// Thread-safety: one thread.
#pragma once

#include <string>

#include "capture/ir/graph.h"
#include "capture/ir/graph_sources.h"
#include "capture/ir/hash.h"
#include "cli/commands.h"

namespace tracecache::cli {

struct GraphTarget {
  GraphKey key;
  Graph graph;
  GraphSources sources;  // empty when none are known (a graph cached before schema 4)
  std::string label;     // "cache" or the program's path
};

// `target`: a hash or prefix (when it is no existing file) looked up in `db`, else a trace
// program traced for `step` + 1 steps, whose step `step`'s first graph is taken.
Result<GraphTarget> load_graph_target(const std::string& target, const DbOptions& db, int step,
                                      bool bake_scalars);

// A target of 1 to kMinKeyPrefix - 1 hex digits that is no file: too short to be a hash prefix
// (kInvalidArgument saying so), rather than "cannot read" a file nobody meant. Ok otherwise.
Status check_not_short_key_prefix(const std::string& target);

}  // namespace tracecache::cli
