#include "capture/ir/hash.h"

#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cstring>

namespace tracecache {

namespace {

// Appends fixed-width little-endian fields, independent of the host's byte order. Writes into
// space it grows itself (one bounds check per field, not one append per byte: this runs on
// every barrier); finish() trims the string to what was written.
class Encoder {
 public:
  // `expected`: the bytes likely to be written (more are allowed).
  Encoder(std::string& out, size_t expected) : out_(out), pos_(out.size()) {
    out_.resize(pos_ + expected);
  }
  void u8(uint8_t v) { *room(1) = static_cast<char>(v); }
  void u32(uint32_t v) { put_le(room(4), v); }
  void u64(uint64_t v) { put_le(room(8), v); }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    if (!s.empty()) std::memcpy(room(s.size()), s.data(), s.size());
  }
  void ints(const IntList& l) {
    u8(static_cast<uint8_t>(l.size()));
    for (int64_t v : l) i64(v);
  }
  void finish() { out_.resize(pos_); }

 private:
  // `n` bytes to write at the end of what was written.
  char* room(size_t n) {
    if (out_.size() - pos_ < n) out_.resize(std::max(2 * out_.size(), pos_ + n));
    char* p = out_.data() + pos_;
    pos_ += n;
    return p;
  }
  template <typename U>
  static void put_le(char* p, U v) {
    if constexpr (std::endian::native == std::endian::little) {
      std::memcpy(p, &v, sizeof v);
    } else {
      for (size_t i = 0; i < sizeof v; ++i) p[i] = static_cast<char>(v >> (8 * i));
    }
  }

  std::string& out_;
  size_t pos_;  // bytes written; out_ may be longer (room not yet used)
};

void encode_attr(Encoder& e, const AttrValue& a) {
  e.u8(static_cast<uint8_t>(a.kind));
  switch (a.kind) {
    case AttrKind::kInt: e.i64(a.i); break;
    case AttrKind::kBool: e.u8(a.i ? 1 : 0); break;
    case AttrKind::kFloat: e.u64(normalized_float_bits(a.f)); break;
    case AttrKind::kDType: e.u8(static_cast<uint8_t>(a.dtype)); break;
    case AttrKind::kInts: e.ints(a.ints); break;
  }
}

}  // namespace

std::string GraphKey::to_hex() const { return hex64(high) + hex64(low); }

std::optional<GraphKey> GraphKey::from_hex(std::string_view hex) {
  if (hex.size() != 32) return std::nullopt;
  uint64_t parts[2] = {0, 0};
  for (size_t i = 0; i < 32; ++i) {
    char c = hex[i];
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (v < 0) return std::nullopt;
    parts[i / 16] = (parts[i / 16] << 4) | static_cast<uint64_t>(v);
  }
  return GraphKey{parts[0], parts[1]};
}

std::string GraphKey::to_bytes() const {
  std::string b(16, '\0');
  for (int i = 0; i < 8; ++i) {
    b[static_cast<size_t>(i)] = static_cast<char>(high >> (56 - 8 * i));
    b[static_cast<size_t>(8 + i)] = static_cast<char>(low >> (56 - 8 * i));
  }
  return b;
}

std::optional<GraphKey> GraphKey::from_bytes(std::string_view bytes) {
  if (bytes.size() != 16) return std::nullopt;
  GraphKey k;
  for (size_t i = 0; i < 8; ++i) {
    k.high = (k.high << 8) | static_cast<uint8_t>(bytes[i]);
    k.low = (k.low << 8) | static_cast<uint8_t>(bytes[8 + i]);
  }
  return k;
}

std::string encode_graph(const Graph& graph) {
  std::string out;
  Encoder e(out, 64 + graph.size() * 48);
  e.str("tracecache-ir");
  e.u32(kIrFormatVersion);
  e.u32(static_cast<uint32_t>(graph.size()));
  e.u32(static_cast<uint32_t>(graph.params().size()));
  for (NodeId p : graph.params()) e.u32(p);
  for (NodeId id = 0; id < graph.size(); ++id) {
    const Node& n = graph.node(id);
    e.str(op_info(n.op).name);
    e.u8(static_cast<uint8_t>(n.dtype));
    e.ints(n.shape);
    e.u32(n.num_inputs);
    for (NodeId in : graph.inputs(n)) e.u32(in);
    for (const AttrValue& a : graph.attrs(n)) encode_attr(e, a);
  }
  e.u32(static_cast<uint32_t>(graph.outputs().size()));
  for (NodeId o : graph.outputs()) e.u32(o);
  // Written only when present, so a graph without donations keeps its bytes and key.
  if (!graph.donations().empty()) {
    e.str("donations");
    e.u32(static_cast<uint32_t>(graph.donations().size()));
    for (const Donation& d : graph.donations()) {
      e.u32(d.output);
      e.u32(d.param);
    }
  }
  e.finish();
  return out;
}

GraphKey hash_graph(const Graph& graph) {
  std::string bytes = encode_graph(graph);
  XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  return {h.high64, h.low64};
}

}  // namespace tracecache
