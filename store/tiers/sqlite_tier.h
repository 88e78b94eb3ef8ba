// SqliteTier: the disk executable tier, over a CacheDb (store/sqlite/cache_db.h).
//
// get(): the blob's checksum is verified by the database, then the codec parses and validates it
// and checks it was built for the key; any failure is kCorruption (TieredStore then removes the
// row). A hit records a use (last_used, uses) unless the database is read-only. A database that
// cannot be read (busy, I/O error) is reported with its own code: the entry may still be good.
// put(): stores the canonical graph (when given), then the executable with the context's events
// in one transaction. A read-only database fails with kIOError "... is read-only".
// Thread-safety: as CacheDb (one thread at a time). Ownership: db and codec are not owned and
// must outlive the tier.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "store/codec/graph_codec.h"
#include "store/sqlite/cache_db.h"
#include "store/tiers/executable_store.h"

namespace tracecache::store {

template <CacheableExecutable Exe>
class SqliteTier final : public ExecutableStore<Exe> {
 public:
  SqliteTier(CacheDb* db, ExecutableCodec<Exe>* codec) : db_(db), codec_(codec) {}

  std::string_view name() const override { return kDiskTier; }

  Result<std::shared_ptr<const Exe>> get(const ExecutableKey& key) override {
    Result<std::optional<StoredExecutable>> stored = db_->get_executable(key);
    if (!stored.is_ok()) return stored.status();
    if (!stored->has_value()) return std::shared_ptr<const Exe>();
    Result<Exe> exe = codec_->decode((*stored)->blob, key);
    if (!exe.is_ok()) return corruption(exe.status().message());
    if (!db_->read_only()) (void)db_->touch_executable(key);  // statistics only
    return std::shared_ptr<const Exe>(std::make_shared<const Exe>(std::move(*exe)));
  }

  Result<std::vector<ExecutableKey>> put(const ExecutableKey& key, std::shared_ptr<const Exe> exe,
                                         const PutContext& context) override {
    if (db_->read_only()) return io_error(fmt::format("cache database '{}' is read-only", db_->path()));
    if (context.graph) {
      Status st = db_->put_graph(key.graph, serialize_graph(*context.graph),
                                 static_cast<int64_t>(context.graph->size()));
      if (!st.is_ok()) return st;
    }
    Status st = db_->put_executable(key, codec_->encode(*exe), context.compile_ms, context.events);
    if (!st.is_ok()) return st;
    return std::vector<ExecutableKey>();
  }

  Status remove(const ExecutableKey& key) override {
    if (db_->read_only()) return io_error(fmt::format("cache database '{}' is read-only", db_->path()));
    return db_->remove_executable(key);
  }

 private:
  CacheDb* db_;
  ExecutableCodec<Exe>* codec_;
};

}  // namespace tracecache::store
