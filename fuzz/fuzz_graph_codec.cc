// Fuzz harness: graph decoding (store/codec/graph_codec.h parse_graph), bytes as read from the cache.
// Property: no crash; a graph that decodes re-encodes to bytes that decode and re-encode to
// the same bytes (encoding is deterministic).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "store/codec/graph_codec.h"

using namespace tracecache;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Result<Graph> graph = store::parse_graph(bytes);
  if (!graph.is_ok()) return 0;
  const std::string encoded = store::serialize_graph(graph.value());
  Result<Graph> again = store::parse_graph(encoded);
  if (!again.is_ok() || store::serialize_graph(again.value()) != encoded) std::abort();
  return 0;
}
