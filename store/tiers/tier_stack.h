// TierStack: the cache tiers one runtime looks executables up in, and the stores of its compiled
// functions' guard entries, assembled from what it was given. The one place that knows the order
// of the tiers: memory (always), then the SQLite database (when there is one), then the remote
// tier (when there is a Redis client): fastest first, so TieredStore promotes a hit into the
// faster ones. Guard entries: the local store as given, or, with a remote tier, the local store
// backed by the remote's (TieredGuardEntryStore: the remote's decisions go to the given sink).
// A new tier is a new member here, at its place in that order, and nothing else has to know it.
//
// Exe and the codec as for the tiers (executable_store.h): the stack shares the caller's codec
// with every byte-keeping tier.
// Errors: none here (each tier's calls return their own).
// Thread-safety: one thread (as the tiers). Ownership: the stack owns its tiers and the remote
// guard-entry store; the codec, the database, the Redis client and the local guard-entry store
// are the caller's and must outlive it. Not movable: the tier list points into it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "store/core/guard_entry_store.h"
#include "store/remote/redis_client.h"
#include "store/remote/remote_guard_entry_store.h"
#include "store/sqlite/cache_db.h"
#include "store/tiers/executable_store.h"
#include "store/tiers/memory_tier.h"
#include "store/tiers/remote_tier.h"
#include "store/tiers/sqlite_tier.h"
#include "store/tiers/tiered_guard_entry_store.h"
#include "store/tiers/tiered_store.h"

namespace tracecache::store {

struct TierStackOptions {
  uint64_t memory_bytes = uint64_t{64} << 20;  // the memory tier's budget
  CacheDb* disk = nullptr;                     // the SQLite tier's database; null: no disk tier
  RedisClient* remote = nullptr;               // the remote tier's client; null: no remote tier
  GuardEntryStore* guard_entries = nullptr;    // the local guard entries (nullable)
  // Where the remote guard-entry store's decisions go (TieredGuardEntryStore); required with a
  // remote tier.
  GuardEntryEventSink guard_events{};
};

template <CacheableExecutable Exe>
class TierStack {
 public:
  // The memory tier's position: first.
  static constexpr size_t kMemoryIndex = 0;

  TierStack(ExecutableCodec<Exe>* codec, TierStackOptions options)
      : memory_(options.memory_bytes), tiers_(std::vector<ExecutableStore<Exe>*>{&memory_}),
        guard_entries_(options.guard_entries) {
    std::vector<ExecutableStore<Exe>*> order{&memory_};
    if (options.disk) {
      disk_.emplace(options.disk, codec);
      disk_db_ = options.disk;
      order.push_back(&*disk_);
    }
    if (options.remote) {
      remote_.emplace(options.remote, codec);
      order.push_back(&*remote_);
      remote_guards_.emplace(options.remote);
      tiered_guards_.emplace(guard_entries_, &*remote_guards_, std::move(options.guard_events));
      guard_entries_ = &*tiered_guards_;
    }
    tiers_ = TieredStore<Exe>(std::move(order));
  }
  TierStack(const TierStack&) = delete;
  TierStack& operator=(const TierStack&) = delete;

  TieredStore<Exe>& tiers() { return tiers_; }
  // The disk tier's position and database (nullopt / null without one).
  std::optional<size_t> disk_index() const { return disk_ ? std::optional<size_t>(1) : std::nullopt; }
  CacheDb* disk_db() const { return disk_db_; }
  // The remote tier and its position (null / nullopt without one).
  RemoteTier<Exe>* remote() { return remote_ ? &*remote_ : nullptr; }
  std::optional<size_t> remote_index() const {
    return remote_ ? std::optional<size_t>(disk_ ? 2 : 1) : std::nullopt;
  }
  // Whether `tier` (a position in tiers()) is the disk's or the remote's.
  bool is_disk(size_t tier) const { return disk_index() == tier; }
  bool is_remote(size_t tier) const { return remote_index() == tier; }
  // Where compiled functions' guard entries go: the local store, backed by the remote with a
  // remote tier (null: not persisted).
  GuardEntryStore* guard_entries() const { return guard_entries_; }

 private:
  MemoryTier<Exe> memory_;
  std::optional<SqliteTier<Exe>> disk_;
  std::optional<RemoteTier<Exe>> remote_;
  CacheDb* disk_db_ = nullptr;
  TieredStore<Exe> tiers_;  // memory_, then disk_, then remote_
  std::optional<RemoteGuardEntryStore> remote_guards_;
  std::optional<TieredGuardEntryStore> tiered_guards_;
  GuardEntryStore* guard_entries_;
};

}  // namespace tracecache::store
