#include "store/remote/remote_guard_entry_store.h"

#include <algorithm>
#include <charconv>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "store/core/blob_checksum.h"
#include "store/remote/remote_keys.h"

namespace tracecache::store {

namespace {
Status read_only_error(const RedisClient& client) {
  return io_error(fmt::format("remote cache '{}' is read-only (--remote-mode read-only)", client.endpoint().url));
}
}  // namespace

Status RemoteGuardEntryStore::put_function_entry(const FunctionKey& key, int64_t entry, std::string_view blob) {
  last_put_written_ = false;
  if (read_only()) return read_only_error(*client_);
  Result<bool> written = client_->hash_set_if_absent(remote_function_key(key), std::to_string(entry), seal_blob(blob));
  if (!written.is_ok()) return written.status();
  last_put_written_ = *written;
  return Status::ok();
}

Result<std::vector<StoredFunctionEntry>> RemoteGuardEntryStore::function_entries(const FunctionKey& key) {
  Result<std::vector<std::pair<std::string, std::string>>> fields = client_->hash_get_all(remote_function_key(key));
  if (!fields.is_ok()) return fields.status();
  std::vector<StoredFunctionEntry> out;
  for (auto& [field, value] : *fields) {
    int64_t entry = -1;
    auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), entry);
    if (ec != std::errc() || end != field.data() + field.size() || entry < 0) {
      ++malformed_fields_;
      continue;
    }
    StoredFunctionEntry e;
    e.entry = entry;
    Result<std::string_view> blob = unseal_blob(value);
    if (blob.is_ok()) {
      e.blob = std::string(*blob);
    } else {
      e.corrupt = true;
    }
    out.push_back(std::move(e));
  }
  std::sort(out.begin(), out.end(), [](const StoredFunctionEntry& a, const StoredFunctionEntry& b) { return a.entry < b.entry; });
  return out;
}

Status RemoteGuardEntryStore::remove_function(const FunctionKey& key) {
  if (read_only()) return read_only_error(*client_);
  return client_->del(remote_function_key(key));
}

Status RemoteGuardEntryStore::remove_function_entry(const FunctionKey& key, int64_t entry) {
  if (read_only()) return read_only_error(*client_);
  return client_->hash_del(remote_function_key(key), std::to_string(entry));
}

}  // namespace tracecache::store
