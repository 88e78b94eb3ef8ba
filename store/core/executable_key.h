// ExecutableKey: what identifies a compiled executable in every cache tier (memory, disk, later
// remote): the graph key, the backend, the digest of the backend's options and the compiler
// version (docs/architecture.md invariant 2). Two executables that differ in any part are two
// entries, so a tier shared by several backends or compiler versions never hands one an
// executable built for another.
//
// ExecutableKeyHasher is an identity hash for in-process maps (the memory tier); it is never
// persisted. Persistent tiers store the four parts as they are.
// Errors: none; plain values. Thread-safety: plain values (a const key may be read from any
// thread). Ownership: a key owns its strings; nothing refers elsewhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "capture/ir/hash.h"

namespace tracecache::store {

struct ExecutableKey {
  GraphKey graph;
  std::string backend;         // "cpu", "sim"
  std::string options_digest;  // hex digest of the backend's options ("" if none)
  uint32_t compiler_version = 0;
  friend bool operator==(const ExecutableKey&, const ExecutableKey&) = default;
};

// Hashes the graph key and compiler version only: the graph key already is a 128-bit digest, and
// the backend and options rarely differ within one process, so hashing their strings on every
// lookup would cost more than the rare shared bucket (equality still compares all four parts).
struct ExecutableKeyHasher {
  size_t operator()(const ExecutableKey& k) const {
    size_t h = GraphKeyHasher{}(k.graph);
    h ^= k.compiler_version + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h;
  }
};

}  // namespace tracecache::store
