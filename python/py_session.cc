#include "python/py_session.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <optional>
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
  if (settings.remote_mode != "read-write" && settings.remote_mode != "read-only") {
    return invalid_argument(fmt::format("remote_mode must be 'read-write' or 'read-only', not '{}'", settings.remote_mode));
  }
  // The CLI's bounds for --remote-timeout-ms, --remote-ttl and --remote-backoff.
  if (settings.remote_timeout_ms < 1 || settings.remote_timeout_ms > 60000) {
    return invalid_argument(fmt::format("remote_timeout_ms must be in [1, 60000], not {}", settings.remote_timeout_ms));
  }
  if (settings.remote_ttl_s < 0) return invalid_argument(fmt::format("remote_ttl must be at least 0, not {}", settings.remote_ttl_s));
  if (!(settings.remote_backoff_s >= 0.001 && settings.remote_backoff_s <= 86400.0)) {
    return invalid_argument(fmt::format("remote_backoff must be in [0.001, 86400] seconds, not {}", settings.remote_backoff_s));
  }
  auto s = std::make_shared<PySession>();
  s->serial = ++serials;
  // The set-up path the CLI shares (replay/engine/setup.h): the environment is read here only.
  Result<OpenedSession> opened = open_session(
      {.session = {.mode = *mode, .backend = settings.backend, .backend_options = {.threads = settings.threads},
                   .metrics = &s->metrics},
       .db = settings.db,
       .no_cache = settings.no_cache,
       .remote = {.url = settings.remote,
                  .read_only = settings.remote_mode == "read-only",
                  .timeout_ms = settings.remote_timeout_ms,
                  .ttl_s = settings.remote_ttl_s,
                  .backoff_s = settings.remote_backoff_s},
       .env = {.cache = {env("TRACECACHE_DB"), env("XDG_CACHE_HOME"), env("HOME")},
               .threads = env("TRACECACHE_THREADS"),
               .remote = env("TRACECACHE_REMOTE")}});
  if (!opened.is_ok()) return opened.status();
  settings.db = opened->db_path;
  settings.threads = opened->threads;
  if (settings.remote.empty()) settings.remote = env("TRACECACHE_REMOTE");
  s->settings = settings;
  s->db = std::move(opened->db);
  s->remote = std::move(opened->remote);
  s->session = std::move(opened->session);
  s->cache_warning = std::move(opened->cache_warning);
  return s;
}

void report_new_warnings(PySession& session) {
  if (!session.cache_warning.empty() && !session.cache_warning_reported) {
    session.cache_warning_reported = true;
    if (PyErr_WarnEx(PyExc_RuntimeWarning, session.cache_warning.c_str(), 1) != 0) throw py::error_already_set();
  }
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
