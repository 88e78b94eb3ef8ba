// Graphviz DOT text of a graph, for `show --dot` and the pictures of `tracecache report`: one node
// per graph node (its id, op, type and attributes, and its program location when known), one edge
// per input, parameters as inputs at the top and outputs marked; a location names its file
// without the directories. Attribute values and locations longer than
// kMaxDotAttrLength are cut ("..."), so a large baked constant does not make a huge picture.
// Every text is escaped for a DOT quoted string: the graph and its sources may come from the
// (untrusted) cache; `dot` turns the labels into SVG text itself.
// Thread-safety: pure functions. Errors: none.
#pragma once

#include <string>
#include <string_view>

#include "capture/ir/graph.h"
#include "capture/ir/graph_sources.h"

namespace tracecache::audit {

inline constexpr size_t kMaxDotAttrLength = 48;

// `name` labels the digraph (e.g. the graph's hash); `sources` may be empty.
std::string graph_to_dot(const Graph& graph, const GraphSources& sources, std::string_view name);

}  // namespace tracecache::audit
