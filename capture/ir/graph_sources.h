// GraphSources: where each node of a canonical graph came from (the program, the function, and
// per node a source location such as "mlp.trace:7 h"), kept OUTSIDE the graph hash: two programs
// that build the same graph share one key and one executable whatever their names and lines
// (docs/graph-hash.md). The tracer (LazyContext::set_source, name_tensor) records the locations
// of the nodes it traces (TraceSources), canonicalize() carries them to the canonical nodes
// (CanonicalGraph::node_sources()), and the store keeps one GraphSources per graph key beside
// the graph (store/sqlite: the graph_sources table), so `show`, `diff` and miss explanations can
// name the program's lines.
//
// Locations are free text written by a frontend: "FILE:LINE NAME" for trace programs, a model and
// layer name for the zoo, any "file:line" a C++ or Python caller gives. One line each (line breaks
// are replaced by spaces when set).
// Errors: decode() of untrusted bytes returns kCorruption naming what is wrong, never throws.
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "capture/core/status.h"
#include "capture/ir/graph.h"

namespace tracecache {

struct GraphSources {
  std::string program;   // the program or model the graph came from ("": unknown)
  std::string function;  // the compiled function that traced it ("": lazy mode, or unknown)
  // One per graph node, or empty when no node's location is known; "" for an unknown node.
  std::vector<std::string> nodes;

  // The location of node `id`, "" if unknown (also when `id` is past the list).
  std::string_view node(NodeId id) const;
  bool empty() const { return program.empty() && function.empty() && nodes.empty(); }

  // A text form for storage: a version line, the program, the function, then one line per node.
  std::string encode() const;
  // Inverse of encode(). kCorruption for an unknown version, a missing line, or more node lines
  // than `max_nodes` (the graph's node count: locations for nodes a graph lacks are refused).
  static Result<GraphSources> decode(std::string_view text, size_t max_nodes);
};

// The locations of a trace's nodes as the tracer records them (LazyContext): canonicalize()
// keeps a shared reference and graph_sources() resolves it for the canonical nodes only when
// asked (on a miss, for `show`), so a cache hit never pays for it.
struct TraceSources {
  std::vector<std::string> names;  // the locations, one line each (one_line())
  std::vector<uint32_t> nodes;     // per trace node an index into `names` (kNoSource: unknown)
};

// `text` as one line: CR and LF become spaces, and at most kMaxSourceLength bytes are kept.
inline constexpr size_t kMaxSourceLength = 512;
std::string one_line(std::string_view text);

}  // namespace tracecache
