// GraphKey and the graph hash: the 128-bit XXH3 content hash of a canonical graph.
//
// The hash reads a canonical, field-by-field, fixed-byte-order encoding of the graph (see
// docs/graph-hash.md): the IR format version, every parameter's dtype and shape, every node's op
// name, dtype, shape, input ids and attributes (floats with NaN normalized), and the
// output list. No pointers, no struct bytes, no unordered iteration: the same graph gives the
// same key in every process and on every machine. Golden keys are pinned in tests.
// Thread-safe: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "capture/ir/graph.h"

namespace tracecache {

// Bump whenever the meaning of the IR or of its encoding changes: it enters every key.
// 2: -0.0 no longer folded into 0.0 in float attributes.
inline constexpr uint32_t kIrFormatVersion = 2;

struct GraphKey {
  uint64_t high = 0;
  uint64_t low = 0;

  friend bool operator==(const GraphKey&, const GraphKey&) = default;
  friend auto operator<=>(const GraphKey&, const GraphKey&) = default;
  // 32 lowercase hex digits, high half first.
  std::string to_hex() const;
  // Inverse of to_hex(); nullopt unless `hex` is exactly 32 hex digits.
  static std::optional<GraphKey> from_hex(std::string_view hex);
  // 16 bytes, high half then low half, big-endian: the form stored in protobuf messages.
  std::string to_bytes() const;
  // Inverse of to_bytes(); nullopt unless `bytes` has exactly 16 bytes.
  static std::optional<GraphKey> from_bytes(std::string_view bytes);
};

// Identity hash for in-process maps keyed by GraphKey.
struct GraphKeyHasher {
  size_t operator()(const GraphKey& k) const { return static_cast<size_t>(k.low ^ (k.high * 31)); }
};

// The canonical encoding the key is computed over (exposed for tests and docs). Donations
// (graph.h) are appended only when the graph has some, so graphs without them keep their keys.
std::string encode_graph(const Graph& graph);
// XXH3-128 of encode_graph(graph). REQUIRES: `graph` is canonical for the key to be meaningful.
GraphKey hash_graph(const Graph& graph);

}  // namespace tracecache
