// Graph codec: canonical graphs to and from their protobuf form (store/codec/proto/tracecache.proto).
//
// Decoding treats the bytes as untrusted (docs/architecture.md invariant 5) and rebuilds the graph through
// the same checks recording uses: every op must exist, have a valid input count and the declared
// attributes with the right kinds, inputs must precede their node, parameters must be numbered
// in order, attributes must already be in normal form, and every node's stored dtype and shape
// must equal what its inference rule computes. Any failure is kCorruption naming the node.
// Encoding is deterministic: equal graphs give equal bytes.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "capture/ir/graph.h"
#include "capture/core/status.h"

namespace google::protobuf {
class MessageLite;
}
namespace tracecache::proto {
class Graph;
}

namespace tracecache::store {

void graph_to_proto(const Graph& graph, proto::Graph* out);
// Attributes of a canonical graph are in normal form; a trace template's (capture/
// trace_template.h) are kept as the code passed them and are only checked to infer.
enum class AttrForm : uint8_t { kNormalized, kRaw };
Result<Graph> graph_from_proto(const proto::Graph& in, AttrForm form = AttrForm::kNormalized);

std::string serialize_graph(const Graph& graph);
Result<Graph> parse_graph(std::string_view bytes);

// Deterministic serialization of any message (stable field order, no map-order surprises).
std::string serialize_deterministic(const google::protobuf::MessageLite& message);

}  // namespace tracecache::store
