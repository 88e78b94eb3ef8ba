// GuardEntryStore: the persisted guard entries of compiled functions (once mode), each an opaque
// blob the runtime encodes and validates (replay/engine/compiled_function.h), numbered per function,
// with hits counted per entry. Implemented by store::CacheDb (store/sqlite/cache_db.h).
//
// A blob is untrusted when read back: every entry carries a checksum, and one that fails it comes
// back marked corrupt (blob empty) instead of failing the whole read.
// Errors: Status/Result; a store that is locked, read-only or full fails with kIOError.
// Thread-safety: as the implementation says (CacheDb: one thread at a time).
// Ownership: keys and blobs are copied into the store during the call, entries come back by value
// (the caller owns their blobs). Users do not own the store: its maker (who opened the CacheDb)
// does, and it must outlive them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "capture/core/status.h"

namespace tracecache::store {

// A compiled function's identity in the cache: its name, the caller's version string for it,
// and the toolkit version (guard entries from another tracecache are never used).
struct FunctionKey {
  std::string name, user_version, toolkit_version;
  friend bool operator==(const FunctionKey&, const FunctionKey&) = default;
};

struct StoredFunctionEntry {
  int64_t entry = 0;     // position in the function's entry list
  std::string blob;      // empty if corrupt
  int64_t hits = 0;
  bool corrupt = false;  // checksum mismatch
};

class GuardEntryStore {
 public:
  virtual ~GuardEntryStore() = default;

  // True when the store accepts no writes (a read-only file, a replica): entries can still be
  // read, every write fails with kIOError, so callers skip writing.
  virtual bool read_only() const = 0;

  // Inserts or replaces entry number `entry` of the function.
  virtual Status put_function_entry(const FunctionKey& key, int64_t entry, std::string_view blob) = 0;
  // In entry order; a row whose checksum fails comes back with corrupt = true.
  virtual Result<std::vector<StoredFunctionEntry>> function_entries(const FunctionKey& key) = 0;
  virtual Status add_function_hits(const FunctionKey& key, int64_t entry, int64_t hits) = 0;
  // Removes if present (no error if absent).
  virtual Status remove_function_entry(const FunctionKey& key, int64_t entry) = 0;
};

}  // namespace tracecache::store
