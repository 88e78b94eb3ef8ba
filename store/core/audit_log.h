// AuditLog: where cache decisions are recorded (docs/architecture.md invariant 8): decision
// events one row each, hits as counts per graph, backend, options digest and tier (HitCount: not
// the whole ExecutableKey, the compiler version is not part of it, so hits served by executables
// of two compiler versions for one graph add up), and the history a miss is classified by.
// Implemented by store::CacheDb (store/sqlite/cache_db.h).
//
// Errors: every method returns Status/Result; a log that is locked, read-only or full fails with
// kIOError and the caller decides (the runtime keeps going: invariant 6). Reading skips malformed
// rows (unknown kind, damaged key) and counts them, never failing because of one.
// Thread-safety: as the implementation says (CacheDb: one thread at a time).
// Ownership: arguments are read during the call and nothing of them is kept; results are
// returned by value. Users do not own the log: its maker (who opened the CacheDb) does, and it
// must outlive them.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "capture/core/status.h"
#include "store/core/events.h"
#include "store/core/executable_key.h"

namespace tracecache::store {

class AuditLog {
 public:
  virtual ~AuditLog() = default;

  // True when the log accepts no writes (a read-only file, a replica): every write then fails
  // with kIOError, so callers skip writing and say so once instead of failing on each decision.
  virtual bool read_only() const = 0;
  // Where the log lives, for messages only (a file path, a URL); never parsed.
  virtual std::string_view location() const = 0;

  // Appends in one transaction; ids and nothing else are assigned by the log.
  virtual Status append_events(std::span<const Event> events) = 0;
  // Events in id order, only those after `after_id`, at most `limit` (0 = all). Malformed rows
  // are skipped and counted in *malformed if given.
  virtual Result<std::vector<Event>> events(int64_t after_id, int64_t limit, int64_t* malformed) = 0;
  // Adds hit counts (one per key and tier), in one transaction.
  virtual Status add_hits(std::span<const HitCount> hits) = 0;
  // Why no executable is stored for `key` (call after a miss), from what the log and the store
  // remember about it: see MissReason.
  virtual Result<MissReason> classify_miss(const ExecutableKey& key) = 0;
};

}  // namespace tracecache::store
