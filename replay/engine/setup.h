// Setup: the one path from settings to a running session, shared by the CLI (cli/) and the Python
// package (python/py_session.cc): the cache database (its path, opening it, and what a database
// that cannot be opened costs), the thread count (TRACECACHE_THREADS), the remote tier's client
// and its options, and the Session (or a trace program's ProgramSession) over them.
//
// Environment variables are read by the callers only (docs/architecture.md): they pass what they
// read in SetupEnvironment, and everything here decides from options alone.
//
// The cache database (lazy and once mode on a compiling backend, unless no_cache): the path given,
// else the environment's (store::resolve_cache_path). A database that cannot be opened costs
// caching, never results (invariant 6): the session runs without it and cache_warning says why,
//  - busy (locked past the busy timeout) or unwritable (a directory that cannot be created, no
//    permission): "running without the cache: <why>";
//  - damaged (not a tracecache database, or damaged beyond opening): the same, plus what to do
//    about it (move the file aside, or `tracecache verify` it), and cache_damaged is set: a caller
//    that keeps quiet about the other warnings (the CLI's -q) still shows this one, since the
//    cache stays off until someone acts;
// except two that are refused (errors): a database of a newer schema (kUnsupported: never
// guessed at) and a path that can never be a database file (kInvalidArgument: a directory, a
// FIFO).
//
// Errors (open_session): a bad TRACECACHE_THREADS, a bad remote URL (kInvalidArgument), the two
// refused databases above, and Session::create's (an unknown backend or mode).
// Thread-safety: open_session may run on any thread; what it returns belongs to one thread at a
// time. Ownership: OpenedSession owns the database, the remote client and the session; the
// metrics (SessionOptions::metrics) and the program are the caller's and must outlive it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "capture/core/metrics.h"
#include "capture/core/status.h"
#include "frontend/program/program.h"
#include "replay/engine/program_session.h"
#include "replay/engine/session.h"
#include "store/remote/redis_client.h"
#include "store/sqlite/cache_db.h"

namespace tracecache {

// What the caller read from the environment ("" for a variable that is unset).
struct SetupEnvironment {
  store::CachePathEnv cache{};  // TRACECACHE_DB, XDG_CACHE_HOME, HOME
  std::string threads{};        // TRACECACHE_THREADS
  std::string remote{};         // TRACECACHE_REMOTE
};

// The remote tier (docs/remote-cache.md): the CLI's --remote flags and Python's configure(remote=...)
// alike, with the same defaults.
struct RemoteSetup {
  std::string url{};  // redis://HOST:PORT[/DB] or unix:///PATH.sock; "": the environment's, else none
  bool read_only = false;
  int timeout_ms = store::RemoteOptions{}.command_timeout_ms;  // connect and command timeout
  int64_t ttl_s = store::RemoteOptions{}.ttl_s;                 // entries written expire; 0: never
  // The first wait after a failure; doubles with each failure in a row, up to 30 s or this.
  double backoff_s = store::BackoffOptions{}.initial_s;
};

struct SetupOptions {
  // Mode, backend, threads (backend_options.threads; 0: TRACECACHE_THREADS, else every CPU this
  // process may use), canonicalization, metrics (REQUIRED), scope, outcomes. Its db and remote
  // are set by open_session.
  SessionOptions session{};
  std::string db{};         // the cache database's path; "": the environment's
  bool no_cache = false;  // no database at all (memory only)
  RemoteSetup remote{};
  SetupEnvironment env{};
  // A trace program to run: the session is then its ProgramSession. Not owned.
  const Program* program = nullptr;
  bool automatic_dynamic = true;  // with a program: ProgramSessionOptions::automatic_dynamic
};

// What open_session made. Members are destroyed in reverse order: the session (which flushes its
// events to the database) before the remote client and the database.
struct OpenedSession {
  std::unique_ptr<store::CacheDb> db;          // null: no database (not wanted, or not opened)
  std::unique_ptr<store::RedisClient> remote;  // null: no remote tier
  std::unique_ptr<Session> session;            // without a program
  std::unique_ptr<ProgramSession> program_session;  // with a program (it owns its Session)
  std::string db_path;        // the database in use; "" without one
  std::string cache_warning;  // why the session runs without its database, if it does
  bool cache_damaged = false; // ... because the database is damaged (see the top of this file)
  int threads = 0;            // the thread count asked for (0: every CPU this process may use)

  Session& get() { return program_session ? program_session->session() : *session; }
};

Result<OpenedSession> open_session(SetupOptions options);

// TRACECACHE_THREADS's value as a thread count: nullopt when unset (""), else a whole number of
// at least 1, or kInvalidArgument saying what to do ("TRACECACHE_THREADS must be a whole number
// in [1, 2147483647], got '0' (unset it or set it to a thread count)").
Result<std::optional<int>> threads_from_environment(std::string_view value);

// The remote tier's client for `remote` (url: the environment's when empty), or null when there
// is no URL. Errors: a bad URL (kInvalidArgument). Opening never connects: an unreachable server
// is found at the first lookup and costs only caching.
Result<std::unique_ptr<store::RedisClient>> open_remote_client(const RemoteSetup& remote,
                                                               const SetupEnvironment& env, Metrics* metrics);

}  // namespace tracecache
