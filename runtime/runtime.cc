#include "runtime/runtime.h"

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

}  // namespace

Runtime::Runtime(Backend* backend, store::CacheDb* db, Metrics* metrics, RuntimeOptions options)
    : backend_(backend),
      db_(db),
      metrics_(metrics ? metrics : &own_metrics_),
      options_(options),
      memory_(options.memory_cache_bytes),
      pid_(static_cast<int64_t>(::getpid())),
      mirror_token_(next_mirror_token++) {
  if (db_ && db_->read_only()) {
    warn(fmt::format("cache database '{}' is read-only: results are correct, but nothing new is "
                     "cached or audited", db_->path()));
  }
}

Runtime::~Runtime() { flush(); }

void Runtime::warn(std::string message) {
  if (std::find(warnings_.begin(), warnings_.end(), message) == warnings_.end()) {
    warnings_.push_back(std::move(message));
  }
}

void Runtime::event(store::EventKind kind, const GraphKey& graph, std::string reason,
                    double duration_ms, std::string detail) {
  store::Event e;
  e.time = now_seconds();
  e.pid = pid_;
  e.kind = kind;
  e.graph = graph;
  e.backend = std::string(backend_->name());
  e.options_digest = backend_->options_digest();
  e.reason = std::move(reason);
  e.duration_ms = duration_ms;
  e.detail = std::move(detail);
  if (events_.size() < options_.max_events_in_memory) {
    events_.push_back(e);
  } else {
    ++dropped_events_;
  }
  if (kind == store::EventKind::kHitMemory || kind == store::EventKind::kHitDisk) {
    auto it = std::find_if(hits_.begin(), hits_.end(),
                           [&](const store::HitCount& h) { return h.graph == graph && h.tier == kind; });
    if (it == hits_.end()) {
      hits_.push_back({graph, e.backend, e.options_digest, kind, 0, 0});
      it = hits_.end() - 1;
    }
    ++it->hits;
    it->time = e.time;
    if (++pending_hits_ >= options_.event_batch) flush();
    return;
  }
  unwritten_.push_back(std::move(e));
  write_decisions();
}

void Runtime::write_decisions() {
  if (hold_decisions_ || unwritten_.empty()) return;
  if (!db_ || db_->read_only()) {
    unwritten_.clear();
    return;
  }
  Status st = db_->append_events(unwritten_);
  if (st.is_ok()) {
    unwritten_.clear();
    return;
  }
  metrics_->add(counters::kStoreFailures);
  warn(fmt::format("could not write the audit log to '{}': {}", db_->path(), st.message()));
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
  if (!db_ || db_->read_only()) {
    hits_.clear();
    return;
  }
  Status st = db_->add_hits(hits_);
  if (!st.is_ok()) {  // kept (one row per key and tier) for the next flush, within the bound
    metrics_->add(counters::kStoreFailures);
    warn(fmt::format("could not write the audit log to '{}': {}", db_->path(), st.message()));
    if (hits_.size() <= options_.max_events_in_memory) return;
    dropped_events_ += static_cast<int64_t>(hits_.size());
  }
  hits_.clear();
}

void Runtime::note_corrupt(const store::ExecutableKey& key, const std::string& why) {
  metrics_->add(counters::kCorrupt);
  event(store::EventKind::kCorrupt, key.graph, {}, 0, why);
  if (db_ && !db_->read_only()) {
    Status st = db_->remove_executable(key);
    if (!st.is_ok()) warn(fmt::format("could not remove a corrupt cache entry: {}", st.message()));
  }
}

std::shared_ptr<const Executable> Runtime::load_from_disk(const store::ExecutableKey& key,
                                                          std::optional<store::MissReason>* reason) {
  Result<std::optional<store::StoredExecutable>> stored = db_->get_executable(key);
  if (!stored.is_ok()) {
    if (stored.status().code() == StatusCode::kCorruption) {
      note_corrupt(key, stored.status().message());
      *reason = store::MissReason::kCorrupt;
    } else {
      warn(fmt::format("could not read the cache: {}", stored.status().message()));
      *reason = store::MissReason::kUnreadable;
    }
    return nullptr;
  }
  if (!stored->has_value()) return nullptr;
  Result<Executable> exe = backend_->load((*stored)->blob);
  Status problem = exe.is_ok() ? Status::ok() : exe.status();
  if (problem.is_ok() && (exe->graph_key != key.graph || exe->compiler_version != key.compiler_version)) {
    problem = corruption("executable is stored under another graph key or compiler version");
  }
  if (!problem.is_ok()) {
    note_corrupt(key, problem.message());
    *reason = store::MissReason::kCorrupt;
    return nullptr;
  }
  if (!db_->read_only()) (void)db_->touch_executable(key);
  return std::make_shared<const Executable>(std::move(*exe));
}

void Runtime::store_compiled(const store::ExecutableKey& key, const Executable& exe,
                             const Graph& graph, double compile_ms) {
  if (!db_) return;
  Status st = db_->read_only()
                  ? io_error(fmt::format("cache database '{}' is read-only", db_->path()))
                  : db_->put_graph(key.graph, store::serialize_graph(graph),
                                   static_cast<int64_t>(graph.size()));
  if (st.is_ok()) {
    // The executable and the decisions that describe it (miss, compile, store) in one transaction.
    event(store::EventKind::kStore, key.graph);
    st = db_->put_executable(key, backend_->serialize(exe), compile_ms, unwritten_);
    if (st.is_ok()) unwritten_.clear();
  }
  hold_decisions_ = false;
  if (!st.is_ok()) {
    if (!unwritten_.empty() && unwritten_.back().kind == store::EventKind::kStore) unwritten_.pop_back();
    metrics_->add(counters::kStoreFailures);
    event(store::EventKind::kStoreFailed, key.graph, {}, 0, st.message());
    if (!db_->read_only()) warn(fmt::format("could not store a compiled graph: {}", st.message()));
  }
  write_decisions();
}

Result<std::shared_ptr<const Executable>> Runtime::prepare(const CanonicalGraph& cg) {
  store::ExecutableKey key{cg.key, std::string(backend_->name()), backend_->options_digest(),
                           options_.compiler_version};
  ScopedTimer lookup(metrics_, timers::kLookup);
  if (std::shared_ptr<const Executable> hit = memory_.get(cg.key)) {
    metrics_->add(counters::kHitsMemory);
    event(store::EventKind::kHitMemory, cg.key);
    return hit;
  }
  std::optional<store::MissReason> reason;
  if (db_) {
    if (std::shared_ptr<const Executable> hit = load_from_disk(key, &reason)) {
      metrics_->add(counters::kHitsDisk);
      event(store::EventKind::kHitDisk, cg.key);
      remember(cg.key, hit);
      return hit;
    }
    if (!reason) {
      Result<store::MissReason> r = db_->classify_miss(key);
      reason = r.is_ok() ? *r : store::MissReason::kUnreadable;
    }
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
  hold_decisions_ = db_ != nullptr;
  event(store::EventKind::kMiss, cg.key,
        std::string(store::miss_reason_name(reason.value_or(store::MissReason::kNewGraph))));

  ScopedTimer compile_timer(metrics_, timers::kCompile);
  Result<Executable> exe = backend_->compile(cg.graph, cg.key, options_.compiler_version);
  double compile_ms = compile_timer.stop();
  if (!exe.is_ok()) {
    event(store::EventKind::kFallback, cg.key, "compile failed", compile_ms, exe.status().message());
    return exe.status();
  }
  metrics_->add(counters::kCompiles);
  event(store::EventKind::kCompile, cg.key, {}, compile_ms);
  store_compiled(key, *exe, cg.graph, compile_ms);
  auto shared = std::make_shared<const Executable>(std::move(*exe));
  remember(cg.key, shared);
  return shared;
}

Result<std::shared_ptr<const Executable>> Runtime::prepare_by_key(const GraphKey& key) {
  if (std::shared_ptr<const Executable> hit = memory_.get(key)) {
    metrics_->add(counters::kHitsMemory);
    event(store::EventKind::kHitMemory, key);
    return hit;
  }
  if (!db_) return not_found(fmt::format("graph {} is not cached (no cache database)", key.to_hex()));
  // The executable carries its (validated) graph: it serves even when the graph row is gone.
  store::ExecutableKey exe_key{key, std::string(backend_->name()), backend_->options_digest(),
                               options_.compiler_version};
  std::optional<store::MissReason> reason;
  if (std::shared_ptr<const Executable> hit = load_from_disk(exe_key, &reason)) {
    metrics_->add(counters::kHitsDisk);
    event(store::EventKind::kHitDisk, key);
    remember(key, hit);
    return hit;
  }
  Result<std::optional<std::string>> blob = db_->get_graph(key);
  if (!blob.is_ok()) return blob.status();
  if (!blob->has_value()) return not_found(fmt::format("graph {} is not in the cache", key.to_hex()));
  Result<Graph> graph = store::parse_graph(**blob);
  if (!graph.is_ok()) return graph.status();
  CanonicalGraph cg;
  cg.graph = std::move(*graph);
  cg.key = hash_graph(cg.graph);
  if (cg.key != key) return corruption(fmt::format("stored graph {} hashes to {}", key.to_hex(), cg.key.to_hex()));
  return prepare(cg);
}

Result<std::vector<DataRef>> Runtime::run_reference(const CanonicalGraph& cg,
                                                    std::span<const DataRef> params,
                                                    const std::string& why) {
  warn(fmt::format("backend '{}' failed ({}); this step ran on the reference evaluator",
                   backend_->name(), why));
  return evaluate_reference(cg.graph, params);
}

Result<std::vector<DataRef>> Runtime::run_prepared(const Executable& exe, std::vector<DataRef>& params) {
  ScopedTimer run_timer(metrics_, timers::kRun);
  // A donated parameter is given up when `params` holds its only handle: then it keeps no
  // device mirror and its handle is dropped before the run, so the backend may write in place.
  const std::span<const Donation> donations = exe.graph.donations();
  auto donated = [&](size_t i) {
    return std::any_of(donations.begin(), donations.end(), [i](const Donation& d) { return d.param == i; });
  };
  std::vector<DeviceRef> device_params;
  device_params.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const bool give_up = params[i].use_count() == 1 && donated(i);
    Result<DeviceRef> d = device_copy(params[i], /*keep_mirror=*/!give_up);
    if (!d.is_ok() && d.status().code() == StatusCode::kResourceExhausted && !mirrored_.empty()) {
      drop_mirrors();  // free the copies kept for later steps, and try once more
      d = device_copy(params[i], !give_up);
    }
    if (!d.is_ok()) {
      return Status(d.status().code(),
                    fmt::format("graph {}: {}", exe.graph_key.to_hex(), d.status().message()));
    }
    device_params.push_back(std::move(*d));
  }
  std::vector<size_t> given_up;
  for (const Donation& d : donations) {
    const size_t i = d.param;
    const bool alone = params[i].get() == device_params[i].get() ? params[i].use_count() == 2
                                                                 : params[i].use_count() == 1;
    if (alone) {
      params[i].reset();
      given_up.push_back(i);
    }
  }
  Result<std::vector<DeviceRef>> outs = backend_->run(exe, device_params);
  if (!outs.is_ok()) {
    for (size_t i : given_up) params[i] = device_params[i];  // the same value, on the device
    return outs.status();
  }
  metrics_->add(counters::kExecutions);
  return std::vector<DataRef>(outs->begin(), outs->end());
}

Result<DeviceRef> Runtime::device_copy(const DataRef& data, bool keep_mirror) {
  const HostData* host = backend_->shares_host_memory() ? nullptr : as_host_data(*data);
  if (host) {
    if (const DataRef& mirror = host->mirror(mirror_token_)) {
      DeviceRef d = std::static_pointer_cast<const DeviceBuffer>(mirror);
      if (!keep_mirror) host->drop_mirror();
      return d;
    }
  }
  Result<DeviceRef> d = backend_->to_device(data);
  if (!d.is_ok() || d->get() == data.get()) return d;
  if (!backend_->shares_host_memory()) {
    metrics_->add(counters::kBytesToDevice, static_cast<int64_t>(data->nbytes()));
  }
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

Result<std::vector<DataRef>> Runtime::run_or_fall_back(const Executable& exe, std::vector<DataRef>& params) {
  Result<std::vector<DataRef>> outs = run_prepared(exe, params);
  if (outs.is_ok() || outs.status().code() != StatusCode::kResourceExhausted) return outs;
  event(store::EventKind::kFallback, exe.graph_key, "run failed", 0, outs.status().message());
  warn(fmt::format("backend '{}' failed ({}); this step ran on the reference evaluator",
                   backend_->name(), outs.status().message()));
  return evaluate_reference(exe.graph, std::span<const DataRef>(params));
}

void Runtime::remember(const GraphKey& key, const std::shared_ptr<const Executable>& exe) {
  for (const GraphKey& evicted : memory_.put(key, exe, exe->footprint_bytes())) {
    event(store::EventKind::kEvict, evicted, {}, 0, "memory LRU");
  }
}

Result<std::vector<DataRef>> Runtime::execute(const CanonicalGraph& cg, std::vector<DataRef> params) {
  // Anything a backend throws (e.g. bad_alloc) costs this step its speed, not its result.
  try {
    Result<std::shared_ptr<const Executable>> exe = prepare(cg);
    if (!exe.is_ok()) return run_reference(cg, params, exe.status().message());
    Result<std::vector<DataRef>> outs = run_prepared(**exe, params);
    if (!outs.is_ok()) {
      event(store::EventKind::kFallback, cg.key, "run failed", 0, outs.status().message());
      return run_reference(cg, params, outs.status().message());
    }
    return outs;
  } catch (const std::exception& e) {
    event(store::EventKind::kFallback, cg.key, "exception", 0, e.what());
    return run_reference(cg, params, e.what());
  }
}

void Runtime::function_event(store::EventKind kind, const std::string& function, std::string detail) {
  event(kind, GraphKey{}, function, 0, std::move(detail));
}

}  // namespace tracecache
