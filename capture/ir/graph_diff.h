// The graph diff engine: what differs, node by node, between two canonical graphs. One engine
// serves every explanation: a lazy-mode miss explained against the closest cached graph
// (replay/engine/runtime.h), `tracecache diff A B`, and `run -v`.
//
// Canonical graphs are numbered by a post-order walk from their outputs (capture/ir/canonical.h),
// so two graphs built by the same code line up node by node. diff_graphs() aligns them: by index
// when both have the same number of nodes, else by the longest common subsequence of their op
// names (bounded: past kMaxAlignmentCells cells of the n×m table it aligns by index), and then
// compares each aligned pair: a graph input's type (shape, dtype), an attribute (by its registry
// name), a baked constant (a `full` node's value), the op, an edge (an input that is another
// node), the node's own type when nothing else explains it; nodes only one graph has; outputs and
// donations. A type that differs only because an input's type does is not listed (it follows);
// GraphDiff::derived counts such nodes, so a batch-size change is reported once, at the input.
// Sources (graph_sources.h), when given, label each difference with its program line.
// Thread-safety: pure functions. Errors: none (any two valid graphs can be compared).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "capture/ir/graph.h"
#include "capture/ir/graph_sources.h"

namespace tracecache {

inline constexpr size_t kMaxAlignmentCells = size_t{4} << 20;
inline constexpr NodeId kNoDiffNode = 0xffffffffu;

struct NodeDifference {
  enum class Kind : uint8_t {
    kInputType,  // a graph input (parameter): shape or dtype
    kAttribute,  // an attribute of an aligned op node; `what` names it
    kConstant,   // the value of a baked constant (`full`)
    kOp,         // aligned nodes with different ops
    kEdge,       // an input of an aligned node is another node
    kType,       // the node's own type, not explained by its inputs
    kOnlyInA,    // a node graph B has no counterpart of
    kOnlyInB,    // a node graph A has no counterpart of
    kOutputs,    // the output lists differ
    kDonations,  // the donations differ
  };
  Kind kind = Kind::kType;
  NodeId a = kNoDiffNode;  // the node in graph A (kNoDiffNode: none)
  NodeId b = kNoDiffNode;  // the node in graph B
  std::string op;          // the node's op name (A's, else B's); "" for outputs and donations
  std::string what;        // "input 0 shape", "attribute 'shape'", "value", "op", "input 1", ...
  std::string in_a;        // the value in A ("" when absent)
  std::string in_b;        // the value in B
  std::string source_a;    // the program location of node a ("" unknown)
  std::string source_b;

  // "%3 reshape attribute 'shape': [4, 8] -> [2, 8]  (mlp.trace:7 h)".
  std::string to_string() const;
};

// "input type", "attribute", "constant", "op", "edge", "type", "only in A", "only in B",
// "outputs", "donations".
std::string_view difference_kind_name(NodeDifference::Kind kind);

struct GraphDiff {
  std::vector<NodeDifference> differences;  // in graph order (A's node ids, then B's only nodes)
  size_t nodes_a = 0, nodes_b = 0;
  size_t aligned = 0;  // node pairs aligned
  size_t derived = 0;  // aligned nodes whose type differs only because an input's does
  bool by_index = true;  // aligned by index (same size, or the table was too big)

  bool identical() const { return differences.empty() && derived == 0; }
  // The first `max` differences, "; "-joined, and "and N more" past them; "identical" if none.
  std::string summary(size_t max = 3) const;
};

// REQUIRES: both graphs are valid (canonical or decoded through the codec). `sa`, `sb` may be null.
GraphDiff diff_graphs(const Graph& a, const Graph& b, const GraphSources* sa = nullptr,
                      const GraphSources* sb = nullptr);

}  // namespace tracecache
