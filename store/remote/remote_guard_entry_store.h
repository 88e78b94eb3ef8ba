// RemoteGuardEntryStore: compiled functions' guard entries on the remote tier's Redis server
// (trace once across machines), one hash per function version (store/remote/remote_keys.h), one
// field per entry number, each value sealed with its checksum (store/core/blob_checksum.h).
//
// Writes never overwrite: put_function_entry() is HSETNX (an entry another process stored first
// under the same number stays; last_put_written() says which happened). Hits are not shared
// (add_function_hits() does nothing: they are counted in the local database). A value that fails
// its seal comes back with corrupt = true, like the SQLite store's rows; a field that is not an
// entry number is skipped and counted (malformed_fields()). A hash the client will not read (over
// its size limit, or not a hash of strings) is kCorruption from function_entries();
// remove_function() deletes it.
// Errors: the client's (kIOError: unreachable, timed out, skipped, refused); in read-only mode
// every write fails with kIOError without reaching the server.
// Thread-safety: as RedisClient (one thread). Ownership: the client is not owned and must outlive
// the store.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "store/core/guard_entry_store.h"
#include "store/remote/redis_client.h"

namespace tracecache::store {

class RemoteGuardEntryStore final : public GuardEntryStore {
 public:
  explicit RemoteGuardEntryStore(RedisClient* client) : client_(client) {}

  bool read_only() const override { return client_->read_only(); }
  Status put_function_entry(const FunctionKey& key, int64_t entry, std::string_view blob) override;
  Result<std::vector<StoredFunctionEntry>> function_entries(const FunctionKey& key) override;
  Status add_function_hits(const FunctionKey&, int64_t, int64_t) override { return Status::ok(); }
  Status remove_function_entry(const FunctionKey& key, int64_t entry) override;
  // Deletes every entry of `key` (a hash that failed to read). kIOError in read-only mode.
  Status remove_function(const FunctionKey& key);

  bool last_put_written() const { return last_put_written_; }
  int64_t malformed_fields() const { return malformed_fields_; }
  RedisClient& client() { return *client_; }

 private:
  RedisClient* client_;
  bool last_put_written_ = false;
  int64_t malformed_fields_ = 0;
};

}  // namespace tracecache::store
