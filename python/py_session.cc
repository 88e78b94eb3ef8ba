#include "python/py_session.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <utility>

namespace tracecache::python {

namespace py = pybind11;

namespace {

std::recursive_mutex& package_mutex() {
  static std::recursive_mutex m;
  return m;
}

std::shared_ptr<PySession>& current_slot() {
  static std::shared_ptr<PySession> s;
  return s;
}

std::vector<std::shared_ptr<TraceScope>>& trace_stack() {
  static std::vector<std::shared_ptr<TraceScope>> s;
  return s;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

PackageLock::PackageLock() : lock_(package_mutex(), std::try_to_lock) {
  if (!lock_.owns_lock()) {
    py::gil_scoped_release release;
    lock_.lock();
  }
}

PySession::~PySession() {
  // The session's context and runtime go first: they hold data and events the database takes.
  session.reset();
  db.reset();
}

Result<std::shared_ptr<PySession>> make_session(Settings settings) {
  static std::atomic<uint64_t> serials{0};
  std::optional<SessionMode> mode = parse_mode(settings.mode);
  if (!mode) {
    return invalid_argument(fmt::format("unknown mode '{}' (available: eager, lazy, once)", settings.mode));
  }
  if (settings.threads < 0) return invalid_argument(fmt::format("threads must be at least 1, not {}", settings.threads));
  if (settings.threads == 0) {
    if (const std::string t = env("TRACECACHE_THREADS"); !t.empty()) {
      char* end = nullptr;
      const long n = std::strtol(t.c_str(), &end, 10);
      if (*end != '\0' || n < 1 || n > 1 << 20) {
        return invalid_argument(
            fmt::format("TRACECACHE_THREADS '{}' is not a thread count (unset it or set it to a thread count)", t));
      }
      settings.threads = static_cast<int>(n);
    }
  }
  auto s = std::make_shared<PySession>();
  s->serial = ++serials;
  const bool wants_db = !settings.no_cache && settings.backend != kReferenceBackend && *mode != SessionMode::kEager;
  std::string path;
  if (wants_db) {
    path = store::resolve_cache_path(settings.db,
                                     {env("TRACECACHE_DB"), env("XDG_CACHE_HOME"), env("HOME")});
    Result<std::unique_ptr<store::CacheDb>> db = store::CacheDb::open({.path = path});
    if (db.is_ok()) {
      s->db = std::move(*db);
    } else if (db.status().code() == StatusCode::kUnsupported ||
               db.status().code() == StatusCode::kInvalidArgument) {
      return db.status();
    } else {
      s->cache_warning = fmt::format("running without the cache: {}", db.status().message());
      path.clear();
    }
  }
  settings.db = path;
  if (settings.remote_mode != "read-write" && settings.remote_mode != "read-only") {
    return invalid_argument(fmt::format("remote_mode must be 'read-write' or 'read-only', not '{}'", settings.remote_mode));
  }
  if (settings.remote.empty()) settings.remote = env("TRACECACHE_REMOTE");
  if (!settings.remote.empty() && settings.backend != kReferenceBackend && *mode != SessionMode::kEager) {
    store::RemoteOptions remote;
    remote.url = settings.remote;
    remote.read_only = settings.remote_mode == "read-only";
    Result<std::unique_ptr<store::RedisClient>> client = store::RedisClient::create(std::move(remote), &s->metrics);
    if (!client.is_ok()) return client.status();
    s->remote = std::move(*client);
  }
  s->settings = settings;
  Result<std::unique_ptr<Session>> session =
      Session::create({.mode = *mode, .backend = settings.backend,
                       .backend_options = {.threads = settings.threads}, .db = s->db.get(),
                       .remote = s->remote.get(), .metrics = &s->metrics});
  if (!session.is_ok()) return session.status();
  s->session = std::move(*session);
  return s;
}

void report_new_warnings(PySession& session) {
  Runtime* runtime = session.session ? session.session->runtime() : nullptr;
  if (!runtime) return;
  const std::vector<std::string>& warnings = runtime->warnings();
  while (session.warnings_reported < warnings.size()) {
    const std::string& w = warnings[session.warnings_reported++];
    if (PyErr_WarnEx(PyExc_RuntimeWarning, w.c_str(), 1) != 0) throw py::error_already_set();
  }
}

const std::shared_ptr<PySession>& current_session() {
  std::shared_ptr<PySession>& s = current_slot();
  if (!s) s = make_session(Settings{}).value_or_throw();
  return s;
}

void set_current_session(std::shared_ptr<PySession> session) { current_slot() = std::move(session); }

void reset_current_session() { current_slot().reset(); }

PyTensor::~PyTensor() {
  if (!tensor.defined()) return;
  PackageLock lock;
  tensor = Tensor();
}

void TraceScope::end() {
  for (const std::weak_ptr<PyTensor>& p : proxies) {
    if (std::shared_ptr<PyTensor> t = p.lock()) t->tensor = Tensor();
  }
  proxies.clear();
  ctx = nullptr;
}

LazyContext& current_context() {
  if (!trace_stack().empty()) return *trace_stack().back()->ctx;
  return current_session()->session->context();
}

const std::shared_ptr<TraceScope>& current_trace() {
  static const std::shared_ptr<TraceScope> none;
  return trace_stack().empty() ? none : trace_stack().back();
}

void push_trace(std::shared_ptr<TraceScope> scope) { trace_stack().push_back(std::move(scope)); }

void pop_trace() { trace_stack().pop_back(); }

std::shared_ptr<PyTensor> wrap(Tensor t, const PyTensor* like) {
  auto p = std::make_shared<PyTensor>();
  if (like) {
    p->session = like->session;
    p->trace = like->trace;
  } else if (current_trace()) {
    p->trace = current_trace();
  } else {
    p->session = current_session();
  }
  p->tensor = std::move(t);
  if (p->trace) p->trace->proxies.push_back(p);
  return p;
}

}  // namespace tracecache::python
