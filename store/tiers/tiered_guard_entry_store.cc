#include "store/tiers/tiered_guard_entry_store.h"

#include <utility>

#include <fmt/format.h>

namespace tracecache::store {

void TieredGuardEntryStore::remote_failed(const FunctionKey& key, const Status& st, bool write) {
  switch (remote_->client().last_call()) {
    case RemoteCall::kSkipped: sink_(EventKind::kSkip, key, st.message()); return;
    case RemoteCall::kRefused: sink_(write ? EventKind::kStoreFailed : EventKind::kUnavailable, key, st.message()); return;
    default: sink_(EventKind::kUnavailable, key, st.message()); return;
  }
}

Status TieredGuardEntryStore::put_function_entry(const FunctionKey& key, int64_t entry, std::string_view blob) {
  Status local = local_ ? local_->put_function_entry(key, entry, blob) : Status::ok();
  if (remote_->read_only()) {
    sink_(EventKind::kSkip, key, fmt::format("guard entry {} not written: read-only mode", entry));
    return local;
  }
  Status st = remote_->put_function_entry(key, entry, blob);
  if (!st.is_ok()) {
    remote_failed(key, st, /*write=*/true);
  } else {
    sink_(EventKind::kStore, key,
          fmt::format("guard entry {}{}", entry, remote_->last_put_written() ? "" : ": already stored, kept"));
  }
  return local;
}

Result<std::vector<StoredFunctionEntry>> TieredGuardEntryStore::function_entries(const FunctionKey& key) {
  if (local_) {
    Result<std::vector<StoredFunctionEntry>> rows = local_->function_entries(key);
    if (!rows.is_ok() || !rows->empty()) return rows;
  }
  Result<std::vector<StoredFunctionEntry>> rows = remote_->function_entries(key);
  if (!rows.is_ok() && rows.status().code() == StatusCode::kCorruption) {
    // The whole hash is unreadable: it goes (unless read-only), and the function traces anew.
    std::string detail = fmt::format("remote guard entries: {}", rows.status().message());
    if (!remote_->read_only()) {
      if (Status removed = remote_->remove_function(key); !removed.is_ok()) {
        detail += fmt::format(" (not removed: {})", removed.message());
      }
    }
    sink_(EventKind::kCorrupt, key, std::move(detail));
    return std::vector<StoredFunctionEntry>();
  }
  if (!rows.is_ok()) {
    remote_failed(key, rows.status(), /*write=*/false);
    return std::vector<StoredFunctionEntry>();
  }
  if (rows->empty()) {
    sink_(EventKind::kMiss, key, "no guard entries");
    return rows;
  }
  size_t copied = 0;
  for (const StoredFunctionEntry& e : *rows) {
    if (e.corrupt || !local_ || local_->read_only()) continue;
    if (local_->put_function_entry(key, e.entry, e.blob).is_ok()) ++copied;
  }
  sink_(EventKind::kHit, key, fmt::format("{} guard entries, {} copied to the local cache", rows->size(), copied));
  return rows;
}

Status TieredGuardEntryStore::remove_function_entry(const FunctionKey& key, int64_t entry) {
  Status local = local_ ? local_->remove_function_entry(key, entry) : Status::ok();
  if (!remote_->read_only()) {
    if (Status st = remote_->remove_function_entry(key, entry); !st.is_ok()) remote_failed(key, st, /*write=*/true);
  }
  return local;
}

}  // namespace tracecache::store
