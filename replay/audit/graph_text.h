// A graph's text listing with each node's program location beside it, for `show`, `diff` and the
// graphs `tracecache report` shows as text (when Graphviz's `dot` is missing or a graph is too
// large to draw). Thread-safety: pure functions. Errors: none.
#pragma once

#include <string>

#include "capture/ir/graph.h"
#include "capture/ir/graph_sources.h"

namespace tracecache::audit {

// Graph::to_text() with "  # LOCATION" after every node line whose location is known.
std::string graph_text_with_sources(const Graph& graph, const GraphSources& sources);

}  // namespace tracecache::audit
