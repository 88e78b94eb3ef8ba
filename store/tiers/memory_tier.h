// MemoryTier: the in-process executable tier, an LruCache (store/memory/lru.h) keyed by the full
// ExecutableKey, with a byte budget counted in footprint_bytes(). Holds parsed executables, so a
// hit costs one hash lookup.
//
// put() evicts least recently used entries until the tier is within its budget, never the entry
// it puts: an entry larger than the whole budget is kept, alone (every other entry is evicted),
// and the tier stays over budget until the next put of another entry evicts it.
// Errors: none; get(), put() and remove() always succeed (a miss is a null executable).
// Thread-safety: not thread-safe; one owner (the runtime) uses it from one thread.
// Ownership: the tier shares its executables (shared_ptr<const Exe>) with the callers of get(),
// so evicting one that is being run does not free it.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "store/memory/lru.h"
#include "store/tiers/executable_store.h"

namespace tracecache::store {

template <CacheableExecutable Exe>
class MemoryTier final : public ExecutableStore<Exe> {
 public:
  explicit MemoryTier(uint64_t capacity_bytes) : lru_(capacity_bytes) {}

  std::string_view name() const override { return kMemoryTier; }
  Result<std::shared_ptr<const Exe>> get(const ExecutableKey& key) override { return lru_.get(key); }
  Result<std::vector<ExecutableKey>> put(const ExecutableKey& key, std::shared_ptr<const Exe> exe,
                                         const PutContext&) override {
    const uint64_t bytes = exe->footprint_bytes();
    return lru_.put(key, std::move(exe), bytes);
  }
  Status remove(const ExecutableKey& key) override {
    lru_.erase(key);
    return Status::ok();
  }

  size_t size() const { return lru_.size(); }

 private:
  LruCache<ExecutableKey, Exe, ExecutableKeyHasher> lru_;
};

}  // namespace tracecache::store
