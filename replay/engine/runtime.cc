#include "replay/engine/runtime.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>

#include "capture/reference/reference.h"
#include "store/codec/graph_codec.h"

namespace tracecache {

namespace {

std::atomic<uint64_t> next_mirror_token{1};

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The counter a tier's hits add to: "cache_hits_" and the tier's name (counters::kHitsMemory,
// counters::kHitsDisk for today's tiers).
std::string hit_counter(std::string_view tier) { return fmt::format("cache_hits_{}", tier); }

// Puts back the donated parameters run_on_backend() gave up, unless the run succeeded: on a
// failed status (the backend wrote nothing: backend.h) and on an exception alike.
struct RestoreGivenUp {
  std::vector<DataRef>& params;
  const std::vector<DeviceRef>& device_params;
  const std::vector<size_t>& given_up;
  bool succeeded = false;
  ~RestoreGivenUp() {
    if (succeeded) return;
    for (size_t i : given_up) params[i] = device_params[i];  // the same value, on the device
  }
};

}  // namespace

Runtime::Runtime(Backend* backend, store::CacheDb* db, Metrics* metrics, RuntimeOptions options)
    : Runtime(backend, db, db, db, metrics, options) {}

Runtime::Runtime(Backend* backend, store::AuditLog* audit, store::GuardEntryStore* guard_entries,
                 Metrics* metrics, RuntimeOptions options)
    : Runtime(backend, nullptr, audit, guard_entries, metrics, options) {}

Runtime::Runtime(Backend* backend, store::CacheDb* disk, store::AuditLog* audit,
                 store::GuardEntryStore* guard_entries, Metrics* metrics, RuntimeOptions options)
    : backend_(backend),
      disk_db_(disk),
      audit_(audit),
      guard_entries_(guard_entries),
      metrics_(metrics ? metrics : &own_metrics_),
      run_timer_(metrics_, timers::kRun),
      executions_(metrics_, counters::kExecutions),
      shares_host_memory_(backend->shares_host_memory()),
      options_(options),
      compiler_version_(options.compiler_version.value_or(backend->compiler_version())),
      lookup_key_{GraphKey{}, std::string(backend->name()), backend->options_digest(), compiler_version_},
      codec_(backend),
      stack_(&codec_,
             {.memory_bytes = options.memory_cache_bytes,
              .disk = disk,
              .remote = options.remote,
              .guard_entries = guard_entries,
              .guard_events = [this](store::EventKind kind, const store::FunctionKey& function, std::string detail) {
                if (kind == store::EventKind::kUnavailable) warn_remote_unavailable(detail);
                // A corrupt value is a `corrupt` event wherever it was (its detail names the
                // remote); the other kinds name the tier.
                if (kind == store::EventKind::kCorrupt) metrics_->add(counters::kCorrupt);
                function_event(kind, function.name, std::move(detail),
                               kind == store::EventKind::kCorrupt ? std::string_view() : store::kRemoteTier);
              }}),
      tiers_(stack_.tiers()),
      remote_(stack_.remote()),
      pid_(static_cast<int64_t>(::getpid())),
      recent_graphs_(options.explain_candidates),
      mirror_token_(next_mirror_token++) {
  guard_entries_ = stack_.guard_entries();
  if (audit_ && audit_->read_only()) {
    warn(fmt::format("cache database '{}' is read-only: results are correct, but nothing new is "
                     "cached or audited", audit_->location()));
  }
}

Runtime::~Runtime() { flush(); }

void Runtime::warn(std::string message) {
  if (std::find(warnings_.begin(), warnings_.end(), message) == warnings_.end()) {
    warnings_.push_back(std::move(message));
  }
}

store::Event Runtime::make_event(store::EventKind kind, const GraphKey& graph, std::string reason,
                                 double duration_ms, std::string detail) const {
  store::Event e;
  e.time = now_seconds();
  e.pid = pid_;
  e.kind = kind;
  e.graph = graph;
  e.backend = lookup_key_.backend;
  e.options_digest = lookup_key_.options_digest;
  e.reason = std::move(reason);
  e.duration_ms = duration_ms;
  e.detail = std::move(detail);
  // Decision events carry their scope; hits (counted, not logged one row each) do not need it.
  if (kind != store::EventKind::kHit) {
    e.program = options_.program;
    e.function = options_.function;
  }
  return e;
}

void Runtime::keep(store::Event e) {
  if (events_.size() < options_.max_events_in_memory) {
    events_.push_back(std::move(e));
  } else {
    ++dropped_events_;
  }
}

void Runtime::event(store::EventKind kind, const GraphKey& graph, std::string reason,
                    double duration_ms, std::string detail) {
  store::Event e = make_event(kind, graph, std::move(reason), duration_ms, std::move(detail));
  keep(e);
  unwritten_.push_back(std::move(e));
  write_decisions();
}

void Runtime::hit(const GraphKey& graph, size_t tier) {
  const std::string_view tier_name = tiers_.tier(tier).name();
  if (tier >= hit_counters_.size()) hit_counters_.resize(tier + 1);
  if (hit_counters_[tier].empty()) hit_counters_[tier] = hit_counter(tier_name);
  metrics_->add(hit_counters_[tier]);
  store::Event e = make_event(store::EventKind::kHit, graph);
  e.tier = std::string(tier_name);
  auto it = std::find_if(hits_.begin(), hits_.end(),
                         [&](const store::HitCount& h) { return h.graph == graph && h.tier == tier_name; });
  if (it == hits_.end()) {
    hits_.push_back({graph, e.backend, e.options_digest, e.tier, 0, 0});
    it = hits_.end() - 1;
  }
  ++it->hits;
  it->time = e.time;
  if (options_.record_outcomes) outcomes_.push_back({graph, e.tier, {}, 0, false, {}, {}});
  keep(std::move(e));
  if (++pending_hits_ >= options_.event_batch) flush();
}

void Runtime::write_decisions() {
  if (hold_decisions_ || unwritten_.empty()) return;
  if (!audit_ || audit_->read_only()) {
    unwritten_.clear();
    return;
  }
  Status st = audit_->append_events(unwritten_);
  if (st.is_ok()) {
    unwritten_.clear();
    return;
  }
  metrics_->add(counters::kStoreFailures);
  warn(fmt::format("could not write the audit log to '{}': {}", audit_->location(), st.message()));
  // Kept for the next write (the disk may recover), within the in-memory bound.
  if (unwritten_.size() > options_.max_events_in_memory) {
    size_t extra = unwritten_.size() - options_.max_events_in_memory;
    unwritten_.erase(unwritten_.begin(), unwritten_.begin() + static_cast<std::ptrdiff_t>(extra));
    dropped_events_ += static_cast<int64_t>(extra);
  }
}

void Runtime::flush() {
  write_decisions();
  pending_hits_ = 0;
  if (hits_.empty()) return;
  if (!audit_ || audit_->read_only()) {
    hits_.clear();
    return;
  }
  Status st = audit_->add_hits(hits_);
  if (!st.is_ok()) {  // kept (one row per key and tier) for the next flush, within the bound
    metrics_->add(counters::kStoreFailures);
    warn(fmt::format("could not write the audit log to '{}': {}", audit_->location(), st.message()));
    if (hits_.size() <= options_.max_events_in_memory) return;
    dropped_events_ += static_cast<int64_t>(hits_.size());
  }
  hits_.clear();
}

Result<Executable> Runtime::BackendCodec::decode(std::string_view bytes, const store::ExecutableKey& key) {
  Result<Executable> exe = backend_->load(bytes);
  if (!exe.is_ok()) return exe.status();
  if (exe->graph_key != key.graph || exe->compiler_version != key.compiler_version) {
    return corruption("executable is stored under another graph key or compiler version");
  }
  return exe;
}

const store::ExecutableKey& Runtime::executable_key(const GraphKey& graph) {
  lookup_key_.graph = graph;
  return lookup_key_;
}

std::optional<store::MissReason> Runtime::note_lookup(const store::ExecutableKey& key,
                                                      const Tiers::Lookup& found) {
  std::optional<store::MissReason> reason;
  bool remote_answered = remote_ && (!found.exe || stack_.is_remote(found.tier));
  for (const Tiers::Problem& p : found.problems) {
    const bool remote = stack_.is_remote(p.tier);
    if (p.status.code() == StatusCode::kCorruption) {
      metrics_->add(counters::kCorrupt);
      event(store::EventKind::kCorrupt, key.graph, {}, 0, p.status.message());
      // A read-only database or remote keeps its bad entry; it fails verification again next time.
      const bool read_only = remote ? remote_->client().read_only() : disk_db_ && disk_db_->read_only();
      if (!p.removal.is_ok() && !read_only) {
        warn(fmt::format("could not remove a corrupt cache entry: {}", p.removal.message()));
      }
      reason = store::MissReason::kCorrupt;
      remote_answered = remote_answered && !remote;
    } else if (remote) {  // the local tiers' view of the miss stands; the remote's failure is its own event
      remote_failed(key.graph, p.status, /*write=*/false);
      remote_answered = false;
    } else {
      warn(fmt::format("could not read the cache: {}", p.status.message()));
      reason = store::MissReason::kUnreadable;
    }
  }
  if (remote_answered && !found.exe) remote_event(store::EventKind::kMiss, key.graph, {});
  if (found.exe) {
    hit(key.graph, found.tier);
    note_puts(found.promotions);
  }
  return reason;
}

void Runtime::note_puts(const std::vector<Tiers::Put>& puts) {
  for (const Tiers::Put& put : puts) {
    std::string_view tier = tiers_.tier(put.tier).name();
    if (!put.status.is_ok() && !stack_.is_disk(put.tier) && !stack_.is_remote(put.tier)) {
      warn(fmt::format("could not keep an executable in the {} cache: {}", tier, put.status.message()));
    }
    for (const store::ExecutableKey& evicted : put.evicted) {
      event(store::EventKind::kEvict, evicted.graph, {}, 0, fmt::format("{} LRU", tier));
    }
  }
}

void Runtime::store_compiled(const store::ExecutableKey& key, const std::shared_ptr<const Executable>& exe,
                             const Graph& graph, double compile_ms) {
  // The executable and the decisions that describe it (miss, compile, store) in one transaction.
  store::Event stored = make_event(store::EventKind::kStore, key.graph);
  const std::optional<size_t> disk = stack_.disk_index();
  if (disk) unwritten_.push_back(stored);
  std::vector<Tiers::Put> puts = tiers_.put(key, exe, {compile_ms, &graph, unwritten_});
  hold_decisions_ = false;
  if (disk) {
    const Status& st = puts.at(*disk).status;
    if (st.is_ok()) {
      keep(stored);
      unwritten_.clear();
    } else {
      unwritten_.pop_back();
      metrics_->add(counters::kStoreFailures);
      event(store::EventKind::kStoreFailed, key.graph, {}, 0, st.message());
      if (!disk_db_->read_only()) warn(fmt::format("could not store a compiled graph: {}", st.message()));
    }
  }
  write_decisions();
  if (remote_) {
    const Status& st = puts.at(*stack_.remote_index()).status;
    if (remote_->client().read_only()) {
      remote_event(store::EventKind::kSkip, key.graph, "not written: read-only mode");
    } else if (!st.is_ok()) {
      remote_failed(key.graph, st, /*write=*/true);
    } else {
      remote_event(store::EventKind::kStore, key.graph, remote_->last_put_written() ? "" : "already stored, kept");
    }
  }
  note_puts(puts);
}

Result<std::shared_ptr<const Executable>> Runtime::prepare(const CanonicalGraph& cg) {
  const store::ExecutableKey& key = executable_key(cg.key);
  ScopedTimer lookup(metrics_, timers::kLookup);
  Tiers::Lookup found = tiers_.get(key);
  std::optional<store::MissReason> reason = note_lookup(key, found);
  if (found.exe) {
    if (stack_.is_remote(found.tier)) remember_remote_graph(cg);
    return std::move(found.exe);
  }
  if (audit_ && !reason) {
    Result<store::MissReason> r = audit_->classify_miss(key);
    reason = r.is_ok() ? *r : store::MissReason::kUnreadable;
  }
  lookup.stop();
  metrics_->add(counters::kMisses);
  // The miss and compile events wait for the executable's transaction (store_compiled); on any
  // other way out of here (compile failed, an exception) they are written when this ends.
  struct WriteDecisionsOnExit {
    Runtime* runtime;
    ~WriteDecisionsOnExit() {
      runtime->hold_decisions_ = false;
      runtime->write_decisions();
    }
  } write_on_exit{this};
  hold_decisions_ = stack_.disk_index().has_value();
  GraphSources sources = graph_sources(cg);
  sources.program = options_.program;
  sources.function = options_.function;
  std::optional<ClosestGraph> closest = explain_miss(cg, sources);
  const std::string reason_name(store::miss_reason_name(reason.value_or(store::MissReason::kNewGraph)));
  event(store::EventKind::kMiss, cg.key, reason_name, 0,
        closest ? fmt::format("closest {}: {}", closest->key.to_hex(), closest->diff.summary(8)) : std::string());
  GraphOutcome* outcome = nullptr;
  if (options_.record_outcomes) {
    outcomes_.push_back({cg.key, {}, reason_name, 0, false, {}, {}});
    outcome = &outcomes_.back();
    if (closest) {
      outcome->closest = closest->key;
      outcome->diff = std::move(closest->diff);
    }
  }

  for (NodeId id = 0; id < cg.graph.size(); ++id) {
    const Node& n = cg.graph.node(id);
    if (!backend_->supports(n)) {
      Status declined = unsupported(fmt::format("backend '{}' does not support op '{}' on {}",
                                                backend_->name(), op_info(n.op).name, dtype_name(n.dtype)));
      event(store::EventKind::kFallback, cg.key, "unsupported op", 0, declined.message());
      if (outcome) outcome->fell_back = true;
      return declined;
    }
  }
  ScopedTimer compile_timer(metrics_, timers::kCompile);
  Result<Executable> exe = backend_->compile(cg.graph, cg.key, compiler_version_);
  double compile_ms = compile_timer.stop();
  if (outcome) outcome->compile_ms = compile_ms;
  if (!exe.is_ok()) {
    event(store::EventKind::kFallback, cg.key, "compile failed", compile_ms, exe.status().message());
    if (outcome) outcome->fell_back = true;
    return exe.status();
  }
  metrics_->add(counters::kCompiles);
  event(store::EventKind::kCompile, cg.key, {}, compile_ms);
  auto shared = std::make_shared<const Executable>(std::move(*exe));
  store_compiled(key, shared, cg.graph, compile_ms);
  remember_graph(cg, sources);
  return shared;
}

std::optional<ClosestGraph> Runtime::explain_miss(const CanonicalGraph& cg, const GraphSources& sources) {
  if (options_.explain_candidates == 0) return std::nullopt;
  return recent_graphs_.closest(cg.key, cg.graph, sources, disk_db_);
}

void Runtime::remember_graph(const CanonicalGraph& cg, const GraphSources& sources) {
  if (options_.explain_candidates == 0) return;
  recent_graphs_.add(cg.key, cg.graph, sources);
  // Best-effort, like the explanations it serves: a database that cannot take the sources
  // already reported its state through the executable's own store (store_failed, a warning).
  // A graph compiled without locations (one loaded by key, a template's specialization) never
  // replaces the locations stored for it.
  if (!disk_db_ || disk_db_->read_only() || sources.empty()) return;
  if (sources.nodes.empty()) {
    Result<std::optional<GraphSources>> stored = disk_db_->get_graph_sources(cg.key);
    if (!stored.is_ok() || stored->has_value()) return;
  }
  (void)disk_db_->put_graph_sources(cg.key, sources);
}

void Runtime::remember_remote_graph(const CanonicalGraph& cg) {
  GraphSources sources = graph_sources(cg);
  sources.program = options_.program;
  sources.function = options_.function;
  remember_graph(cg, sources);
}

Result<std::shared_ptr<const Executable>> Runtime::prepare_by_key(const GraphKey& key) {
  // The executable carries its (validated) graph: it serves even when the graph row is gone.
  const store::ExecutableKey& exe_key = executable_key(key);
  Tiers::Lookup found = tiers_.get(exe_key);
  (void)note_lookup(exe_key, found);
  if (found.exe) {
    if (stack_.is_remote(found.tier)) {  // a guard entry's graph, met through the remote
      CanonicalGraph cg;
      cg.graph = found.exe->graph;
      cg.key = key;
      remember_remote_graph(cg);
    }
    return std::move(found.exe);
  }
  if (!disk_db_ && !remote_) return not_found(fmt::format("graph {} is not cached (no cache database)", key.to_hex()));
  std::optional<std::string> blob;
  if (disk_db_) {
    Result<std::optional<std::string>> local = disk_db_->get_graph(key);
    if (!local.is_ok()) return local.status();
    blob = std::move(*local);
  }
  if (!blob && remote_) {
    Result<std::optional<std::string>> shared = remote_->get_graph(key);
    if (shared.is_ok()) {
      blob = std::move(*shared);
    } else if (shared.status().code() == StatusCode::kCorruption) {
      metrics_->add(counters::kCorrupt);
      event(store::EventKind::kCorrupt, key, {}, 0, shared.status().message());
      return shared.status();
    } else {
      remote_failed(key, shared.status(), /*write=*/false);
    }
  }
  if (!blob) return not_found(fmt::format("graph {} is not in the cache", key.to_hex()));
  Result<Graph> graph = store::parse_graph(*blob);
  if (!graph.is_ok()) return graph.status();
  CanonicalGraph cg;
  cg.graph = std::move(*graph);
  cg.key = hash_graph(cg.graph);
  if (cg.key != key) return corruption(fmt::format("stored graph {} hashes to {}", key.to_hex(), cg.key.to_hex()));
  return prepare(cg);
}

Result<std::vector<DataRef>> Runtime::run_reference(const Graph& graph, std::span<const DataRef> params,
                                                    const std::string& why) {
  warn(fmt::format("backend '{}' failed ({}); this step ran on the reference evaluator",
                   backend_->name(), why));
  return evaluate_reference(graph, params);
}

Result<std::vector<DataRef>> Runtime::run_prepared(const Executable& exe, std::vector<DataRef>& params) {
  bool began = false;
  return run_on_backend(exe, params, began);
}

Result<std::vector<DataRef>> Runtime::run_on_backend(const Executable& exe, std::vector<DataRef>& params,
                                                     bool& donated_run_began) {
  ScopedTimer run_timer(&run_timer_);
  // A donated parameter is given up when `params` holds its only handle: then it keeps no
  // device mirror and its handle is dropped before the run, so the backend may write in place.
  const std::span<const Donation> donations = exe.graph.donations();
  auto donated = [&](size_t i) {
    return std::any_of(donations.begin(), donations.end(), [i](const Donation& d) { return d.param == i; });
  };
  struct DeviceParams {  // the scratch, taken for this run (and so safe from a nested one)
    std::vector<DeviceRef>& scratch;
    std::vector<DeviceRef> params = std::move(scratch);
    ~DeviceParams() {
      params.clear();
      scratch = std::move(params);
    }
  } taken{device_params_};
  std::vector<DeviceRef>& device_params = taken.params;
  device_params.reserve(params.size());
  // Whether parameter i keeps its device mirror: unless it is given up (a backend sharing host
  // memory keeps no mirrors).
  auto keep_mirror = [&](size_t i) { return !(params[i].use_count() == 1 && donated(i)); };
  for (size_t i = 0; i < params.size(); ++i) {
    Result<DeviceRef> d =
        shares_host_memory_ ? backend_->to_device(params[i]) : device_copy(params[i], keep_mirror(i));
    if (!d.is_ok() && d.status().code() == StatusCode::kResourceExhausted && !mirrored_.empty()) {
      drop_mirrors();  // free the copies kept for later steps, and try once more
      d = device_copy(params[i], keep_mirror(i));
    }
    if (!d.is_ok()) {
      return Status(d.status().code(),
                    fmt::format("graph {}: {}", exe.graph_key.to_hex(), d.status().message()));
    }
    device_params.push_back(std::move(*d));
  }
  // Everything that could fail is done before a parameter is given up; from there on, every way
  // out but success puts the given-up parameters back.
  std::vector<size_t> given_up;
  given_up.reserve(donations.size());
  std::vector<DataRef> result;
  result.reserve(exe.graph.outputs().size());
  RestoreGivenUp restore{params, device_params, given_up};
  for (const Donation& d : donations) {
    const size_t i = d.param;
    const bool alone = params[i].get() == device_params[i].get() ? params[i].use_count() == 2
                                                                 : params[i].use_count() == 1;
    if (alone) {
      params[i].reset();
      given_up.push_back(i);
    }
  }
  donated_run_began = !given_up.empty();
  Result<std::vector<DeviceRef>> outs = backend_->run(exe, device_params);
  if (!outs.is_ok()) return outs.status();
  result.assign(std::make_move_iterator(outs->begin()), std::make_move_iterator(outs->end()));
  executions_.add();
  restore.succeeded = true;
  return result;
}

Result<DeviceRef> Runtime::device_copy(const DataRef& data, bool keep_mirror) {
  // Host memory is the device's: nothing to mirror, nothing counted (returned as it is: no move
  // of the Result on every parameter of every run).
  if (shares_host_memory_) return backend_->to_device(data);
  const HostData* host = as_host_data(*data);
  if (host) {
    if (const DataRef& mirror = host->mirror(mirror_token_)) {
      DeviceRef d = std::static_pointer_cast<const DeviceBuffer>(mirror);
      if (!keep_mirror) host->drop_mirror();
      return d;
    }
  }
  Result<DeviceRef> d = backend_->to_device(data);
  if (!d.is_ok() || d->get() == data.get()) return d;
  metrics_->add(counters::kBytesToDevice, static_cast<int64_t>(data->nbytes()));
  if (host && keep_mirror) {
    host->set_mirror(mirror_token_, *d);
    mirrored_.push_back(data);
    if (mirrored_.size() > 2 * mirrored_pruned_size_ + 64) {
      std::erase_if(mirrored_, [](const std::weak_ptr<const DeviceData>& w) { return w.expired(); });
      mirrored_pruned_size_ = mirrored_.size();
    }
  }
  return d;
}

void Runtime::drop_mirrors() {
  for (const std::weak_ptr<const DeviceData>& w : mirrored_) {
    if (DataRef data = w.lock()) static_cast<const HostData&>(*data).drop_mirror();
  }
  mirrored_.clear();
  mirrored_pruned_size_ = 0;
}

Status Runtime::donated_run_failed(const GraphKey& graph, const std::string& why) {
  return internal_error(fmt::format(
      "graph {}: backend '{}' failed ({}) after it was given a donated parameter to overwrite in "
      "place; the step is not run again on the reference evaluator (it could read a partly "
      "updated value)",
      graph.to_hex(), backend_->name(), why));
}

// The one fallback rule (invariant 6), for lazy steps (execute) and compiled functions
// (run_or_fall_back) alike: when running on the backend fails, by a failed status of any code (the
// backend wrote nothing: backend.h) or by an exception before a donated parameter was given up,
// the graph runs on the reference evaluator, with a `fallback` event and a warning. The one
// exception is an exception after a donated parameter was given up: an error (kInternal), never a
// reference run over a value the backend may have begun to overwrite.
Result<std::vector<DataRef>> Runtime::run_or_fall_back(const Executable& exe, std::vector<DataRef>& params) {
  bool began = false;
  try {
    Result<std::vector<DataRef>> outs = run_on_backend(exe, params, began);
    if (outs.is_ok()) return outs;
    event(store::EventKind::kFallback, exe.graph_key, "run failed", 0, outs.status().message());
    return run_reference(exe.graph, params, outs.status().message());
  } catch (const std::exception& e) {
    if (began) return donated_run_failed(exe.graph_key, e.what());
    event(store::EventKind::kFallback, exe.graph_key, "exception", 0, e.what());
    return run_reference(exe.graph, params, e.what());
  }
}

Result<std::vector<DataRef>> Runtime::execute(const CanonicalGraph& cg, std::vector<DataRef> params) {
  // A graph that cannot be compiled (or throws while it is: e.g. bad_alloc) costs this step its
  // speed, not its result; running it follows the one fallback rule above.
  std::shared_ptr<const Executable> exe;
  try {
    Result<std::shared_ptr<const Executable>> prepared = prepare(cg);
    if (!prepared.is_ok()) return run_reference(cg.graph, params, prepared.status().message());
    exe = std::move(*prepared);
  } catch (const std::exception& e) {
    event(store::EventKind::kFallback, cg.key, "exception", 0, e.what());
    return run_reference(cg.graph, params, e.what());
  }
  return run_or_fall_back(*exe, params);
}

void Runtime::function_event(store::EventKind kind, const std::string& function, std::string detail,
                             std::string_view tier) {
  store::Event e = make_event(kind, GraphKey{}, function, 0, std::move(detail));
  e.function = function;
  e.tier = std::string(tier);
  keep(e);
  unwritten_.push_back(std::move(e));
  write_decisions();
}

void Runtime::warn_remote_unavailable(const std::string& detail) {
  if (remote_warned_) return;
  remote_warned_ = true;
  warn(fmt::format("{}: continuing with the local cache; the remote is tried again after a back-off", detail));
}

void Runtime::remote_event(store::EventKind kind, const GraphKey& graph, std::string detail) {
  if (kind == store::EventKind::kUnavailable) warn_remote_unavailable(detail);
  store::Event e = make_event(kind, graph, {}, 0, std::move(detail));
  e.tier = std::string(store::kRemoteTier);
  keep(e);
  unwritten_.push_back(std::move(e));
  write_decisions();
}

void Runtime::remote_failed(const GraphKey& graph, const Status& st, bool write) {
  switch (remote_->client().last_call()) {
    case store::RemoteCall::kSkipped: remote_event(store::EventKind::kSkip, graph, st.message()); return;
    case store::RemoteCall::kRefused:
      remote_event(write ? store::EventKind::kStoreFailed : store::EventKind::kUnavailable, graph, st.message());
      return;
    default: remote_event(store::EventKind::kUnavailable, graph, st.message()); return;
  }
}

}  // namespace tracecache
