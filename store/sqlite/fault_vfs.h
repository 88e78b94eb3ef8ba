// FaultVfs: a storage fault-injection seam for tests (LevelDB's fault-injecting Env, for SQLite).
//
// An sqlite3_vfs that forwards every call to the default VFS, counting the writes, syncs and reads
// of every file it opens (database, WAL, journal, shared memory excluded), and that can be told to
// fail them: SQLITE_FULL from the Nth write on (a full disk), SQLITE_IOERR_FSYNC from the Nth sync
// on (a failed fsync), SQLITE_IOERR_READ from the Nth read on, or a crash at the Nth write (the
// process _exit()s before the write reaches the file: run it in a forked child). Counts start at
// 0 when the plan is set. A CacheDb uses it when CacheDb::Options::vfs names it; nothing in
// store/ reads the environment to select it.
//
// Thread-safety: the plan and counters are atomics; set the plan while no connection is using
// the VFS. Ownership: register_fault_vfs() registers one process-wide instance per name; it lives
// until the process ends (SQLite keeps a pointer to it). Errors: registration failures are
// Status values; injected faults surface as the SQLite codes above in CacheDb's Status results.
#pragma once

#include <cstdint>
#include <string>

#include "capture/core/status.h"

namespace tracecache::store {

struct FaultPlan {
  int64_t full_at_write = -1;   // >= 0: that write and every later one fail with SQLITE_FULL
  int64_t fail_sync_at = -1;    // >= 0: that sync and every later one fail with SQLITE_IOERR_FSYNC
  int64_t fail_read_at = -1;    // >= 0: that read and every later one fail with SQLITE_IOERR_READ
  int64_t crash_at_write = -1;  // >= 0: at that write the process _exit(kFaultCrashExit)s
};
inline constexpr int kFaultCrashExit = 77;

class FaultVfs {
 public:
  // The plan for files opened through this VFS from now on (and already open ones); resets the
  // counters.
  virtual void set_plan(const FaultPlan& plan) = 0;
  virtual int64_t writes() const = 0;  // since the plan was set
  virtual int64_t syncs() const = 0;
  virtual int64_t reads() const = 0;
  virtual const std::string& name() const = 0;

 protected:
  ~FaultVfs() = default;
};

// Registers (once per name; later calls return the same instance) a FaultVfs under `name`,
// wrapping the default VFS. It is never made the default.
Result<FaultVfs*> register_fault_vfs(const std::string& name);

}  // namespace tracecache::store
