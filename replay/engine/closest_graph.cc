#include "replay/engine/closest_graph.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include "store/codec/graph_codec.h"

namespace tracecache {

void RecentGraphs::add(const GraphKey& key, const Graph& graph, const GraphSources& sources) {
  if (capacity_ == 0) return;
  std::erase_if(graphs_, [&](const Held& h) { return h.key == key; });
  graphs_.push_front({key, graph, sources});
  if (graphs_.size() > capacity_) graphs_.pop_back();
}

std::optional<ClosestGraph> RecentGraphs::closest(const GraphKey& key, const Graph& graph,
                                                  const GraphSources& sources, store::CacheDb* db) const {
  std::optional<ClosestGraph> best;
  // Smaller is closer: another program, another number of outputs, more differences.
  auto rank = [&](const ClosestGraph& c, size_t outputs) {
    return std::tuple(c.program != sources.program, outputs != graph.outputs().size(),
                      c.diff.differences.size() + c.diff.derived);
  };
  size_t best_outputs = 0;
  auto consider = [&](const GraphKey& k, const Graph& g, const GraphSources& s) {
    ClosestGraph c{k, s.program, diff_graphs(g, graph, &s, &sources)};
    if (!best || rank(c, g.outputs().size()) < rank(*best, best_outputs)) {
      best_outputs = g.outputs().size();
      best = std::move(c);
    }
  };
  std::vector<GraphKey> seen{key};
  for (const Held& h : graphs_) {
    if (h.key == key) continue;
    seen.push_back(h.key);
    consider(h.key, h.graph, h.sources);
  }
  if (!db || sources.program.empty()) return best;
  Result<std::vector<GraphKey>> stored = db->recent_graphs_of(sources.program, static_cast<int64_t>(capacity_));
  if (!stored.is_ok()) return best;
  for (const GraphKey& k : *stored) {
    if (std::find(seen.begin(), seen.end(), k) != seen.end()) continue;
    Result<std::optional<std::string>> blob = db->get_graph(k);
    if (!blob.is_ok() || !blob->has_value()) continue;
    Result<Graph> g = store::parse_graph(**blob);
    if (!g.is_ok()) continue;
    Result<std::optional<GraphSources>> s = db->get_graph_sources(k);
    GraphSources src = s.is_ok() && s->has_value() ? std::move(**s) : GraphSources{};
    consider(k, *g, src);
  }
  return best;
}

}  // namespace tracecache
