// TieredGuardEntryStore: compiled functions' guard entries in the local store (the SQLite
// database, nullable) backed by the remote tier's (RemoteGuardEntryStore), so that a new machine's
// first trace-once call finds the entries another machine traced.
//
// function_entries(): the local entries; only when there are none, the remote's, and those whose
// seal holds are copied into the local store (next time they are local). put_function_entry():
// the local store, then the remote (set-if-absent; skipped in read-only mode).
// remove_function_entry(): both (a bad entry is gone everywhere it could be served from).
// add_function_hits(): the local store only. Every remote read and write is reported to the
// event sink with what became of it: kHit (entries found), kMiss, kStore (written, or already
// there), kUnavailable (failed), kSkip (backing off, or read-only), kStoreFailed (refused or over
// the size limit), kCorrupt (the remote's hash could not be read: over the limit or malformed;
// it is deleted unless read-only).
//
// Errors: the local store's; the remote's failures are reported to the sink and never fail a
// call (a process goes on with its local tiers). read_only(): the local store's, or the remote's
// without one.
// Thread-safety: one thread (as both stores). Ownership: neither store is owned; both must outlive
// this one.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "store/core/events.h"
#include "store/core/guard_entry_store.h"
#include "store/remote/remote_guard_entry_store.h"

namespace tracecache::store {

// One remote decision about a function's guard entries: its kind, the function, and what happened.
using GuardEntryEventSink = std::function<void(EventKind kind, const FunctionKey& function, std::string detail)>;

class TieredGuardEntryStore final : public GuardEntryStore {
 public:
  // REQUIRES: remote and sink not null (local may be).
  TieredGuardEntryStore(GuardEntryStore* local, RemoteGuardEntryStore* remote, GuardEntryEventSink sink)
      : local_(local), remote_(remote), sink_(std::move(sink)) {}

  bool read_only() const override { return local_ ? local_->read_only() : remote_->read_only(); }
  Status put_function_entry(const FunctionKey& key, int64_t entry, std::string_view blob) override;
  Result<std::vector<StoredFunctionEntry>> function_entries(const FunctionKey& key) override;
  Status add_function_hits(const FunctionKey& key, int64_t entry, int64_t hits) override {
    return local_ ? local_->add_function_hits(key, entry, hits) : Status::ok();
  }
  Status remove_function_entry(const FunctionKey& key, int64_t entry) override;

 private:
  // The event for a remote call that failed with `st`.
  void remote_failed(const FunctionKey& key, const Status& st, bool write);

  GuardEntryStore* local_;
  RemoteGuardEntryStore* remote_;
  GuardEntryEventSink sink_;
};

}  // namespace tracecache::store
