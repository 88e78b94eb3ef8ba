// The Python package's process state (python/, docs/python.md): the configured session, the
// lock that serializes every use of tracecache's C++ objects, and the Python handle of a
// tensor.
//
// One session per process at a time (tracecache.configure replaces it). A PySession owns what
// a replay/engine/session.h Session needs (metrics, the cache database) and the Session itself; tensors
// made in it hold a shared_ptr to it, so a session replaced by configure() lives on until its
// last tensor dies, and mixing its tensors with the new session's is the context's usual error.
//
// Thread-safety: tracecache's contexts and tensors belong to one thread at a time, so every
// entry point of the package holds PackageLock, a process-wide recursive mutex. Long calls
// (execution, compiles, cache I/O) release the GIL while holding the lock; a thread blocked on
// the lock never holds the GIL (PackageLock waits with the GIL released), so the thread that
// holds the lock can always take the GIL back (a compiled function calling its Python `fn`).
// Errors: make_session returns the session's Status (a bad mode, backend or database).
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "capture/core/metrics.h"
#include "capture/trace/tensor.h"
#include "replay/engine/compiled_function.h"
#include "replay/engine/session.h"
#include "replay/engine/setup.h"
#include "store/remote/redis_client.h"
#include "store/sqlite/cache_db.h"

namespace tracecache::python {

// What tracecache.configure() takes; settings() reports these with the database resolved.
struct Settings {
  std::string mode = "lazy";
  std::string backend = "cpu";
  std::string db;          // "" : the CLI's default (TRACECACHE_DB, XDG_CACHE_HOME, HOME)
  bool no_cache = false;
  int threads = 0;         // 0: TRACECACHE_THREADS, else every CPU this process may use
  std::string remote;      // the remote tier's URL; "": TRACECACHE_REMOTE, else none (docs/remote-cache.md)
  std::string remote_mode = "read-write";  // or "read-only"
  // As the CLI's --remote-timeout-ms, --remote-ttl (seconds; 0: never) and --remote-backoff.
  int remote_timeout_ms = RemoteSetup{}.timeout_ms;
  int64_t remote_ttl_s = RemoteSetup{}.ttl_s;
  double remote_backoff_s = RemoteSetup{}.backoff_s;
};

struct PySession {
  Settings settings;       // as given, db resolved ("" when the session has no database)
  uint64_t serial = 0;     // 1, 2, ...: the sessions of this process in the order they were made
  Metrics metrics;
  std::unique_ptr<store::CacheDb> db;
  std::unique_ptr<store::RedisClient> remote;  // null without a remote tier
  std::unique_ptr<Session> session;
  std::string cache_warning;  // why the session runs without its database, if it does
  bool cache_warning_reported = false;  // raised as a RuntimeWarning (configure, or the first report)
  size_t warnings_reported = 0;  // of session->runtime()->warnings(), raised as RuntimeWarning
  ~PySession();
};

// Raises each warning of `session` not raised yet (a database it runs without, as for a session
// made on first use; a read-only cache, a fallback to the reference evaluator) as a Python
// RuntimeWarning, as the CLI prints them. Throws
// pybind11::error_already_set when a warnings filter turns one into an error. REQUIRES: the
// GIL and PackageLock held.
void report_new_warnings(PySession& session);

// Makes a session from `settings` through the set-up path `tracecache run` takes
// (replay/engine/setup.h: open_session), reading TRACECACHE_DB, XDG_CACHE_HOME, HOME,
// TRACECACHE_THREADS and TRACECACHE_REMOTE for what they leave unset: a database that cannot be
// opened costs caching (cache_warning says why, and for a damaged one what to do), except one of
// a newer schema or a path that can never be a database, which is an error.
Result<std::shared_ptr<PySession>> make_session(Settings settings);

// The current session, made with default settings on first use. REQUIRES: PackageLock held.
const std::shared_ptr<PySession>& current_session();
void set_current_session(std::shared_ptr<PySession> session);
// Drops the current session (at interpreter exit).
void reset_current_session();

// Holds the package's lock. REQUIRES: the GIL is held when constructed.
class PackageLock {
 public:
  PackageLock();
  PackageLock(const PackageLock&) = delete;
  PackageLock& operator=(const PackageLock&) = delete;

 private:
  std::unique_lock<std::recursive_mutex> lock_;
};

// The proxies a compiled function's `fn` sees while it is traced: Python may keep them past the
// trace, whose context then no longer exists, so ending the scope empties every one of them.
struct TraceScope;

// tracecache.Tensor: a handle on one tracecache Tensor. A tensor of a session keeps the session
// alive; a proxy of a trace is emptied when its trace ends (using it then is an Error).
struct PyTensor {
  std::shared_ptr<PySession> session;  // null for trace proxies
  std::shared_ptr<TraceScope> trace;   // set for trace proxies
  Tensor tensor;
  ~PyTensor();
};

struct TraceScope {
  LazyContext* ctx = nullptr;
  const TraceArgs* args = nullptr;  // the traced call's arguments (graph breaks: TraceArgs::host_op)
  std::vector<std::weak_ptr<PyTensor>> proxies;
  // Empties every proxy still alive. REQUIRES: PackageLock held.
  void end();
};

// The context new tensors (from data, creation ops) go to: the innermost trace's, else the
// current session's. REQUIRES: PackageLock held.
LazyContext& current_context();
// The innermost trace, or null.
const std::shared_ptr<TraceScope>& current_trace();
void push_trace(std::shared_ptr<TraceScope> scope);
void pop_trace();

// A PyTensor for `t`, owned like `like` (same session or trace); for a tensor of the current
// context when `like` is null. REQUIRES: PackageLock held.
std::shared_ptr<PyTensor> wrap(Tensor t, const PyTensor* like);

}  // namespace tracecache::python
