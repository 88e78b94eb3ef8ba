// RecentGraphs: the bounded set of graphs a lazy-mode miss is explained against (JAX's
// explain_cache_misses): on a miss the Runtime asks for the cached graph closest to the new one
// and records what differs, node by node (capture/ir/graph_diff.h), as the miss event's detail.
//
// Candidates: the last `capacity` graphs this process compiled or loaded (kept here, with their
// sources), then up to `capacity` graphs the cache database stores for the same program
// (CacheDb::recent_graphs_of, newest first). Never a scan of an unbounded table: a miss costs at
// most 2 × capacity diffs and capacity graph reads; hits never come here. The closest candidate
// is the one of the same program, then the same number of outputs, then the fewest differences
// (then the most recent).
// Errors: a stored candidate that cannot be read or decoded is skipped (the explanation is
// best-effort; the cache's own checks report damage when the graph is used).
// Thread-safety: one thread at a time. Ownership: keeps copies of the graphs added; `db` is not
// owned.
#pragma once

#include <cstddef>
#include <deque>
#include <optional>
#include <string>

#include "capture/ir/graph.h"
#include "capture/ir/graph_diff.h"
#include "capture/ir/graph_sources.h"
#include "capture/ir/hash.h"
#include "store/sqlite/cache_db.h"

namespace tracecache {

struct ClosestGraph {
  GraphKey key;
  std::string program;  // the candidate's program ("" unknown)
  GraphDiff diff;       // from the candidate (A) to the new graph (B)
};

class RecentGraphs {
 public:
  explicit RecentGraphs(size_t capacity = 8) : capacity_(capacity) {}

  // Remembers a graph (the oldest one is forgotten past capacity; a key already held moves to
  // the front).
  void add(const GraphKey& key, const Graph& graph, const GraphSources& sources);

  // The candidate closest to `graph` (key `key`, never itself), or nullopt if there is none.
  // `db` may be null (no stored candidates); stored ones are those of sources.program.
  std::optional<ClosestGraph> closest(const GraphKey& key, const Graph& graph, const GraphSources& sources,
                                      store::CacheDb* db) const;

  size_t size() const { return graphs_.size(); }

 private:
  struct Held {
    GraphKey key;
    Graph graph;
    GraphSources sources;
  };
  size_t capacity_;
  std::deque<Held> graphs_;  // newest first
};

}  // namespace tracecache
