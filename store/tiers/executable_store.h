// ExecutableStore: one tier of the executable cache (memory, disk, remote), keyed by the
// full ExecutableKey (store/core/executable_key.h). TieredStore (tiered_store.h) looks tiers up in
// order and promotes hits into the faster ones.
//
// Exe is the parsed executable (replay/compile/'s Executable; the store layer sits below compile/, so
// the tiers are templates over it, and tests use a small stand-in). It states its size in memory
// (`footprint_bytes()`, the memory tier's budget). Entries are handed out as shared_ptr<const Exe>:
// evicting one while a caller runs it cannot free it.
//
// A tier that keeps bytes (disk, remote) treats them as untrusted (docs/architecture.md
// invariant 5): get() verifies their checksum, then decodes them through an ExecutableCodec, which
// parses, validates and checks that they were built for the key asked. An entry that fails any of
// that is never served: get() returns kCorruption and TieredStore removes it.
//
// Errors: get() returns nullptr when the tier has no entry, kCorruption for an entry that failed
// verification, and another code (kIOError: busy, unreadable) when the tier could not answer.
// put() and remove() return what failed; a failed put or remove costs caching, never results.
// Thread-safety: as each implementation says (every tier here: one thread at a time).
// Ownership: a tier owns its entries (shared with callers) and nothing else.
#pragma once

#include <concepts>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "capture/core/status.h"
#include "capture/ir/graph.h"
#include "store/core/events.h"
#include "store/core/executable_key.h"

namespace tracecache::store {

template <typename E>
concept CacheableExecutable = requires(const E& e) {
  { e.footprint_bytes() } -> std::convertible_to<uint64_t>;
};

// What a put says besides the entry itself. A tier keeps what it has a place for.
struct PutContext {
  double compile_ms = 0;         // how long compiling it took (0 when promoted from a slower tier)
  // The canonical graph it was compiled from: a persistent tier stores it too, so the graph can
  // be compiled again by key when the executable is gone. Null when promoting a hit.
  const Graph* graph = nullptr;
  // Decision events that describe this entry (its miss, compile and store): a tier that keeps the
  // audit log writes them in the same transaction as the entry, so neither is durable without the
  // other. Other tiers ignore them.
  std::span<const Event> events{};
};

template <CacheableExecutable Exe>
class ExecutableStore {
 public:
  virtual ~ExecutableStore() = default;

  // The tier's name, carried by the hits it serves (Event::tier): kMemoryTier, kDiskTier,
  // kRemoteTier.
  virtual std::string_view name() const = 0;
  // The entry for `key`; nullptr if the tier has none. See the errors above.
  virtual Result<std::shared_ptr<const Exe>> get(const ExecutableKey& key) = 0;
  // Inserts or replaces. Returns the keys it evicted to stay within the tier's capacity (least
  // recently used first; never `key`).
  virtual Result<std::vector<ExecutableKey>> put(const ExecutableKey& key, std::shared_ptr<const Exe> exe,
                                                 const PutContext& context) = 0;
  // Removes if present (no error if absent).
  virtual Status remove(const ExecutableKey& key) = 0;
};

// How a byte-keeping tier turns an executable into bytes and untrusted bytes back into one.
template <typename Exe>
class ExecutableCodec {
 public:
  virtual ~ExecutableCodec() = default;
  virtual std::string encode(const Exe& exe) = 0;
  // Parses and validates `bytes` and checks that they hold an executable built for `key`.
  // Any failure is an error (the tier reports it as kCorruption with this message).
  virtual Result<Exe> decode(std::string_view bytes, const ExecutableKey& key) = 0;
};

}  // namespace tracecache::store
