// RemoteTier: the shared executable tier on a Redis server (store/remote/redis_client.h), after
// memory and disk: one value per ExecutableKey (store/remote/remote_keys.h), sealed with the
// checksum every tier uses (store/core/blob_checksum.h).
//
// get(): the value is untrusted exactly like the disk tier's blobs: its seal (magic, length,
// checksum) is checked, then the same ExecutableCodec parses, validates and checks it was built
// for the key; any failure is kCorruption (TieredStore then removes it, unless read-only). A
// server that is unreachable, times out, or is being skipped after a failure is kIOError
// (client().last_call() says which).
// put(): the canonical graph (when given) and the executable, each SET NX with the client's TTL:
// never overwriting what another process stored (last_put_written() says whether this put wrote
// the executable). get_graph(): a stored canonical graph's bytes (seal checked; the caller parses
// and re-hashes them, as it does the disk's).
// Read-only mode: put() and remove() fail with kIOError without reaching the server.
// Thread-safety: as RedisClient (one thread). Ownership: client and codec are not owned and must
// outlive the tier.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "store/codec/graph_codec.h"
#include "store/core/blob_checksum.h"
#include "store/remote/redis_client.h"
#include "store/remote/remote_keys.h"
#include "store/tiers/executable_store.h"

namespace tracecache::store {

template <CacheableExecutable Exe>
class RemoteTier final : public ExecutableStore<Exe> {
 public:
  RemoteTier(RedisClient* client, ExecutableCodec<Exe>* codec) : client_(client), codec_(codec) {}

  std::string_view name() const override { return kRemoteTier; }

  Result<std::shared_ptr<const Exe>> get(const ExecutableKey& key) override {
    Result<std::optional<std::string>> value = client_->get(remote_executable_key(key));
    if (!value.is_ok()) return value.status();
    if (!value->has_value()) return std::shared_ptr<const Exe>();
    Result<std::string_view> blob = unseal_blob(**value);
    if (!blob.is_ok()) return corruption(fmt::format("remote executable {}: {}", key.graph.to_hex(), blob.status().message()));
    Result<Exe> exe = codec_->decode(*blob, key);
    if (!exe.is_ok()) return corruption(fmt::format("remote executable {}: {}", key.graph.to_hex(), exe.status().message()));
    return std::shared_ptr<const Exe>(std::make_shared<const Exe>(std::move(*exe)));
  }

  Result<std::vector<ExecutableKey>> put(const ExecutableKey& key, std::shared_ptr<const Exe> exe,
                                         const PutContext& context) override {
    last_put_written_ = false;
    if (client_->read_only()) return read_only_error();
    if (context.graph) {
      Result<bool> g = client_->set_if_absent(remote_graph_key(key.graph), seal_blob(serialize_graph(*context.graph)));
      if (!g.is_ok()) return g.status();
    }
    Result<bool> written = client_->set_if_absent(remote_executable_key(key), seal_blob(codec_->encode(*exe)));
    if (!written.is_ok()) return written.status();
    last_put_written_ = *written;
    return std::vector<ExecutableKey>();
  }

  Status remove(const ExecutableKey& key) override {
    if (client_->read_only()) return read_only_error();
    return client_->del(remote_executable_key(key));
  }

  Result<std::optional<std::string>> get_graph(const GraphKey& key) {
    Result<std::optional<std::string>> value = client_->get(remote_graph_key(key));
    if (!value.is_ok() || !value->has_value()) return value;
    Result<std::string_view> blob = unseal_blob(**value);
    if (!blob.is_ok()) return corruption(fmt::format("remote graph {}: {}", key.to_hex(), blob.status().message()));
    return std::optional<std::string>(std::string(*blob));
  }

  bool last_put_written() const { return last_put_written_; }
  RedisClient& client() { return *client_; }

 private:
  Status read_only_error() const {
    return io_error(fmt::format("remote cache '{}' is read-only (--remote-mode read-only)", client_->endpoint().url));
  }

  RedisClient* client_;
  ExecutableCodec<Exe>* codec_;
  bool last_put_written_ = false;
};

}  // namespace tracecache::store
