// Canonicalization: reduce a traced op stream to the canonical graph that is hashed and cached.
//
// Given the tracer's graph and the nodes a barrier must produce (its roots), canonicalize():
//   1. walks post-order from the roots (inputs visited in operand order), so node order depends
//      only on the graph's structure and the order of the roots, never on recording order;
//   2. drops every node the roots do not reach;
//   3. lifts scalar constants (`full` nodes) to graph inputs unless `bake_scalars` is set, so a
//      changing learning rate or epsilon does not change the key (PyTorch/XLA's recompile trap);
//   4. merges common subexpressions (same op, attributes, type and inputs);
//   5. numbers parameters by first use. Two roots that read the same tensor data share one
//      parameter, so the aliasing pattern is part of the key;
//   6. keeps the requested donations (TraceDonation) whose node is a root and whose parameter
//      the graph reads, as Graph donations: like aliasing, part of the key;
// and hashes the result (hash.h). Attributes arrive normalized by each op's inference rule.
// Thread-safe: pure function of its arguments.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "capture/ir/graph.h"
#include "capture/ir/graph_sources.h"
#include "capture/ir/hash.h"

namespace tracecache {

struct CanonicalizeOptions {
  // Keep scalar constants as `full` nodes with their value in the key instead of lifting them.
  bool bake_scalars = false;
};

// Where a canonical parameter's value comes from at run time.
struct ParamSource {
  enum class Kind : uint8_t {
    kTraceParam,  // parameter `trace_param` of the traced graph (tensor data)
    kScalar,      // a lifted constant: a rank-0 tensor of `dtype` holding `value`
  };
  Kind kind = Kind::kTraceParam;
  uint32_t trace_param = 0;
  DType dtype = DType::kF32;
  double value = 0;
};

// A node whose source location is unknown (CanonicalGraph::node_sources).
inline constexpr uint32_t kNoSource = 0xffffffffu;

struct CanonicalGraph {
  Graph graph;                       // outputs() correspond to the roots, in order
  std::vector<ParamSource> sources;  // one per graph.params(), in order
  GraphKey key;
  // Where the nodes came from (graph_sources.h), outside the key, resolved only when asked (a
  // hit never is): the tracer's record, shared with the tracer (which changes only a copy of it
  // while a graph holds it), and per traced node the canonical node it became (past the graph:
  // not part of it). Both empty when the tracer recorded no locations.
  std::shared_ptr<const TraceSources> trace_sources;
  std::vector<NodeId> canonical_of_trace;

  // Per node an index into trace_sources->names (kNoSource: unknown): the location of the first
  // traced node it stands for. Empty when the tracer recorded no locations.
  std::vector<uint32_t> node_sources() const;
};

// The graph's per-node locations as strings (GraphSources::nodes; program and function empty).
GraphSources graph_sources(const CanonicalGraph& graph);

// A donation requested in a trace (LazyContext::assign): the value of trace node `node` may be
// written into the storage of the traced graph's parameter `trace_param`.
struct TraceDonation {
  NodeId node = 0;
  uint32_t trace_param = 0;
};

// REQUIRES: every root < trace.size(). A donation that does not apply (its node is not a root or
// is a parameter, its parameter is not read, the types differ, or the output or parameter is
// already donated) is dropped: the graph then copies, with the same values.
// `trace_sources`, when given, are the locations of the trace's nodes; the result keeps them
// for node_sources() (the key does not change).
CanonicalGraph canonicalize(const Graph& trace, std::span<const NodeId> roots,
                            const CanonicalizeOptions& options = {},
                            std::span<const TraceDonation> donations = {},
                            std::shared_ptr<const TraceSources> trace_sources = nullptr);

// The rank-0 host value a kScalar source stands for.
HostBuffer scalar_buffer(const ParamSource& source);

}  // namespace tracecache
