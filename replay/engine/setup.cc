#include "replay/engine/setup.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <climits>

namespace tracecache {

namespace {

// The database for a session that caches, or why it runs without one (see the header).
Status open_cache(const SetupOptions& options, OpenedSession& s) {
  const std::string path = store::resolve_cache_path(options.db, options.env.cache);
  Result<std::unique_ptr<store::CacheDb>> db = store::CacheDb::open({.path = path});
  if (db.is_ok()) {
    s.db = std::move(*db);
    s.db_path = path;
    return Status::ok();
  }
  const StatusCode code = db.status().code();
  if (code == StatusCode::kUnsupported || code == StatusCode::kInvalidArgument) return db.status();
  s.cache_warning = fmt::format("running without the cache: {}", db.status().message());
  if (code == StatusCode::kCorruption) {
    s.cache_damaged = true;
    s.cache_warning += fmt::format(
        "; to cache again, move '{}' aside (a new database is made in its place) or use another one; "
        "`tracecache verify --db '{}'` says what is damaged",
        path, path);
  }
  return Status::ok();
}

}  // namespace

Result<std::optional<int>> threads_from_environment(std::string_view value) {
  if (value.empty()) return std::optional<int>();
  int64_t n = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec != std::errc() || end != value.data() + value.size() || n < 1 || n > INT_MAX) {
    return invalid_argument(fmt::format(
        "TRACECACHE_THREADS must be a whole number in [1, {}], got '{}' (unset it or set it to a thread count)",
        INT_MAX, value));
  }
  return std::optional<int>(static_cast<int>(n));
}

Result<std::unique_ptr<store::RedisClient>> open_remote_client(const RemoteSetup& remote,
                                                               const SetupEnvironment& env, Metrics* metrics) {
  const std::string& url = remote.url.empty() ? env.remote : remote.url;
  if (url.empty()) return std::unique_ptr<store::RedisClient>();
  store::RemoteOptions o;
  o.url = url;
  o.read_only = remote.read_only;
  o.connect_timeout_ms = remote.timeout_ms;
  o.command_timeout_ms = remote.timeout_ms;
  o.ttl_s = remote.ttl_s;
  o.backoff = {.initial_s = remote.backoff_s, .max_s = std::max(remote.backoff_s, o.backoff.max_s)};
  return store::RedisClient::create(std::move(o), metrics);
}

Result<OpenedSession> open_session(SetupOptions options) {
  OpenedSession s;
  int& threads = options.session.backend_options.threads;
  if (threads < 0) return invalid_argument(fmt::format("threads must be at least 1, not {}", threads));
  if (threads == 0) {
    Result<std::optional<int>> from_env = threads_from_environment(options.env.threads);
    if (!from_env.is_ok()) return from_env.status();
    threads = from_env->value_or(0);
  }
  s.threads = threads;
  // Only compiled graphs are cached: eager mode and the reference evaluator open nothing.
  const bool caches =
      options.session.backend != kReferenceBackend && options.session.mode != SessionMode::kEager;
  if (caches && !options.no_cache) {
    Status st = open_cache(options, s);
    if (!st.is_ok()) return st;
  }
  if (caches) {
    Result<std::unique_ptr<store::RedisClient>> remote =
        open_remote_client(options.remote, options.env, options.session.metrics);
    if (!remote.is_ok()) return remote.status();
    s.remote = std::move(*remote);
  }
  options.session.db = s.db.get();
  options.session.remote = s.remote.get();
  if (options.program) {
    Result<std::unique_ptr<ProgramSession>> session = ProgramSession::create(
        *options.program, {.session = options.session, .automatic_dynamic = options.automatic_dynamic});
    if (!session.is_ok()) return session.status();
    s.program_session = std::move(*session);
  } else {
    Result<std::unique_ptr<Session>> session = Session::create(options.session);
    if (!session.is_ok()) return session.status();
    s.session = std::move(*session);
  }
  return s;
}

}  // namespace tracecache
