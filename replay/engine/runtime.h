// Runtime: lazy-mode execution of canonical graphs (the GraphExecutor behind mark_step).
//
// For each graph: the executable tiers (store/tiers/tier_stack.h: memory LRU, then SQLite, then
// the remote tier), all keyed by the full ExecutableKey -> on a miss, compile and store -> run on the backend. Every decision is an
// audit event (docs/architecture.md invariant 8): hit (with the tier that served it: hit_memory,
// hit_disk), miss with its reason, compile with its duration, store, evict (from the memory LRU),
// corrupt, store_failed, and fallback (the step ran on the reference evaluator, with why).
//
// Failure policy (invariants 5 and 6): an entry that fails its checksum, does not parse, fails
// validation, or was built for another graph or backend is a `corrupt` event, is removed, and
// the graph is recompiled: never a crash, never a wrong result. A store that is locked,
// read-only or full only costs caching: the step still returns correct outputs, the failure is
// a `store_failed` event and a warning. If compiling or running on the backend fails, the step
// falls back to the reference evaluator and says so in a warning; so does a graph with an op the
// backend declines (Backend::supports), which is never compiled. One exception to the fallback:
// a run that failed by throwing after the backend was given a donated parameter to overwrite in
// place is an error (kInternal), never a reference run over a value it may have half updated.
//
// Decision events (miss, compile, store, recompile, evict, corrupt, fallback, store_failed) are
// written at once; a compiled executable's miss, compile and store events are written in the same
// transaction as the executable, so a stored executable never lacks its events. Hits are counted
// per graph and tier (with this runtime's backend and options; no compiler version) and added to
// the audit log's hit counts every `event_batch` hits and at flush() (and on destruction): the
// log grows with decisions, not with steps.
//
// The remote tier (options.remote, a shared Redis server) comes after the disk: memory -> disk ->
// remote -> compile. A remote hit is copied into memory and disk (with the graph's sources, as
// after a compile, so the audit names its program); a compiled executable and its
// canonical graph are written to it (set-if-absent); compiled functions' guard entries are read
// from it when the local store has none (store/tiers/tiered_guard_entry_store.h). Its values are
// checked like the disk's (a bad one is a `corrupt` event and a recompile). Each remote lookup
// and write is an event naming the remote tier: hit_remote, miss_remote, store_remote,
// unavailable_remote (it failed: one warning per process, then the local tiers alone until the
// client's back-off passes), skip_remote (backing off, or read-only), store_failed_remote.
//
// Stores (store/core): decisions and hit counts go to a store::AuditLog, compiled functions' guard
// entries to a store::GuardEntryStore (guard_entries()), executables through the tiers. A
// store::CacheDb is all of these: the runtime over one has the SQLite disk tier, and its
// executables' decision events share the disk's transaction. The runtime over an audit log and a
// guard entry store alone (another implementation, e.g. a remote one) keeps executables in memory
// only and writes each decision to the log at once.
// Thread-safety: one thread at a time. Ownership: backend, db / audit log / guard entry store
// (nullable: not cached, not audited, not persisted) and metrics (nullable) are not owned and must
// outlive the runtime.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "capture/core/metrics.h"
#include "capture/ir/graph_diff.h"
#include "capture/trace/tensor.h"
#include "replay/backends/backend.h"
#include "replay/compile/compiler.h"
#include "replay/engine/closest_graph.h"
#include "store/core/audit_log.h"
#include "store/core/guard_entry_store.h"
#include "store/tiers/tier_stack.h"

namespace tracecache {

struct RuntimeOptions {
  // Overrides the backend's compiler_version() in every key (tests of a version bump); unset: the
  // backend's.
  std::optional<uint32_t> compiler_version;
  uint64_t memory_cache_bytes = uint64_t{64} << 20;
  size_t event_batch = 256;  // add hit counts to the audit log after this many hits
  size_t max_events_in_memory = 10000;  // events() keeps the first this many; later ones are counted
  // The remote tier's connection (not owned; must outlive the runtime); null: no remote tier.
  store::RedisClient* remote = nullptr;
  // The scope of every event (store::Event::program, function): the program or model that runs,
  // and the compiled function (once mode). The program also names the stored graphs a miss is
  // compared with (replay/engine/closest_graph.h) and the graphs' stored sources.
  std::string program{};
  std::string function{};
  // On a miss, compare the graph with the closest recent graph (at most this many in memory and
  // as many stored of the same program) and record what differs as the miss event's detail;
  // 0: no explanations. Hits never pay for it.
  size_t explain_candidates = 8;
  // Keep one GraphOutcome per lookup for take_outcomes() (per-step reports: `run -v`).
  bool record_outcomes = false;
};

// What one graph's lookup came to (RuntimeOptions::record_outcomes).
struct GraphOutcome {
  GraphKey graph;
  std::string tier;         // a hit: the tier that served it ("memory", "disk"); "" for a miss
  std::string reason;       // a miss: store::miss_reason_name(...)
  double compile_ms = 0;    // a miss that compiled
  bool fell_back = false;   // the graph ran on the reference evaluator (declined, compile failed)
  std::optional<GraphKey> closest;  // a miss: the closest recent graph, when there was one
  GraphDiff diff;           // from `closest` to this graph
  bool hit() const { return !tier.empty(); }
};

class Runtime final : public GraphExecutor {
 public:
  // Over a SQLite cache: its disk tier, audit log and guard entry store (db may be null).
  Runtime(Backend* backend, store::CacheDb* db, Metrics* metrics, RuntimeOptions options = {});
  // Over an audit log and a guard entry store (each may be null), with no disk tier.
  Runtime(Backend* backend, store::AuditLog* audit, store::GuardEntryStore* guard_entries,
          Metrics* metrics, RuntimeOptions options = {});
  ~Runtime() override;
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Outputs are the backend's device buffers, left on the device: nothing is copied to the host
  // and nothing waits for the device (a value read does, DeviceData::read()).
  Result<std::vector<DataRef>> execute(const CanonicalGraph& graph,
                                       std::vector<DataRef> params) override;

  // The two halves of execute(), for callers that keep executables (compiled functions):
  // prepare() finds or compiles the executable for `graph` (with all cache events); run_prepared()
  // runs it. A failure of either is an error here; execute() instead falls back to the reference.
  Result<std::shared_ptr<const Executable>> prepare(const CanonicalGraph& graph);
  // prepare() for a graph known only by its key (a guard entry loaded from the cache): memory,
  // then disk, then the stored canonical graph is compiled. kNotFound if the cache has neither.
  Result<std::shared_ptr<const Executable>> prepare_by_key(const GraphKey& key);
  // Where compiled functions persist their guard entries; null: they are not persisted.
  store::GuardEntryStore* guard_entries() { return guard_entries_; }
  // Parameters on the backend's device are used as they are; host data is copied there once
  // and the copy kept with it (HostData's mirror) while it lives. A parameter the graph donates
  // whose only handle is in `params` is given up: its handle is dropped (left null) so the
  // backend may write the output in place. Unless the run succeeds it is put back, as its device
  // copy, on every way out (a failed status or an exception): after a failed status that is the
  // same value (a backend fails only before its first donated write, backend.h); after an
  // exception thrown by the backend it may be partly overwritten.
  Result<std::vector<DataRef>> run_prepared(const Executable& exe, std::vector<DataRef>& params);

  // run_prepared(), except that when running on the backend fails (a failed status of any code,
  // e.g. kResourceExhausted from the sim device's memory, or an exception) the graph runs on the
  // reference evaluator instead, with a `fallback` event and a warning (invariant 6: the results
  // are never lost). The one exception: an exception thrown after a donated parameter was given
  // up is returned (kInternal: the reference would read a value the backend may have begun to
  // overwrite). execute() runs every graph it prepared through this same rule.
  Result<std::vector<DataRef>> run_or_fall_back(const Executable& exe, std::vector<DataRef>& params);

  // Records an event about a compiled function (recompile, fallback) in the audit log; `tier`
  // names the one tier it is about (the remote tier's guard entries), if any.
  void function_event(store::EventKind kind, const std::string& function, std::string detail,
                      std::string_view tier = {});

  // Exchanges the scope of events (RuntimeOptions::program and function) with the two strings:
  // a compiled function puts its own in while it runs, so the graphs it compiles and its events
  // name it, and swaps them back after (no allocation either way).
  void swap_scope(std::string& program, std::string& function) {
    options_.program.swap(program);
    options_.function.swap(function);
  }

  // The outcomes of the lookups since the last call, in order (RuntimeOptions::record_outcomes;
  // empty otherwise).
  std::vector<GraphOutcome> take_outcomes() { return std::exchange(outcomes_, {}); }

  Backend& backend() { return *backend_; }
  Metrics& metrics() { return *metrics_; }
  void add_warning(std::string message) { warn(std::move(message)); }

  // Adds the counted hits to the audit log and retries decision events a failed write left
  // unwritten. A failure becomes a warning (and a store failure in the metrics); events stay in
  // events().
  void flush();
  // Distinct warnings so far, in order (e.g. "cache database is read-only: ...").
  const std::vector<std::string>& warnings() const { return warnings_; }
  // The events this runtime produced, in order, at most options.max_events_in_memory of them;
  // dropped_events() counts the rest.
  const std::vector<store::Event>& events() const { return events_; }
  int64_t dropped_events() const { return dropped_events_; }

 private:
  using Tiers = store::TieredStore<Executable>;
  // The disk tier's codec: the backend's serialize and load (load validates), and the check that
  // the bytes were built for the key asked (another graph or compiler version is corruption).
  class BackendCodec final : public store::ExecutableCodec<Executable> {
   public:
    explicit BackendCodec(Backend* backend) : backend_(backend) {}
    std::string encode(const Executable& exe) override { return backend_->serialize(exe); }
    Result<Executable> decode(std::string_view bytes, const store::ExecutableKey& key) override;

   private:
    Backend* backend_;
  };

  // The key of `graph`'s executable for this runtime's backend: lookup_key_ with its graph set,
  // so a lookup builds no strings (the backend's name and options digest are fixed for its life).
  // Valid until the next call.
  const store::ExecutableKey& executable_key(const GraphKey& graph);
  // Records what a lookup met: corrupt entries (`corrupt` events; the store removed them),
  // unreadable tiers (warnings), the hit and what promoting it evicted. Returns the miss reason the
  // problems imply (corrupt, cache unreadable), if any.
  std::optional<store::MissReason> note_lookup(const store::ExecutableKey& key, const Tiers::Lookup& found);
  // Evictions are `evict` events; a tier other than the disk that could not take the entry is a
  // warning (the disk's failures are store_failed events: store_compiled).
  void note_puts(const std::vector<Tiers::Put>& puts);
  // Writes a compiled executable through every tier, the disk's copy with its graph and decision
  // events in one transaction.
  void store_compiled(const store::ExecutableKey& key, const std::shared_ptr<const Executable>& exe,
                      const Graph& graph, double compile_ms);
  store::Event make_event(store::EventKind kind, const GraphKey& graph, std::string reason = {},
                          double duration_ms = 0, std::string detail = {}) const;
  // Adds to events(), within options.max_events_in_memory.
  void keep(store::Event e);
  void event(store::EventKind kind, const GraphKey& graph, std::string reason = {},
             double duration_ms = 0, std::string detail = {});
  // Counts a hit served by tiers_.tier(tier).
  void hit(const GraphKey& graph, size_t tier);
  void warn(std::string message);
  // An event about the remote tier (tier = kRemoteTier), written at once; a failure (kUnavailable)
  // is also the process's one warning about the remote.
  void remote_event(store::EventKind kind, const GraphKey& graph, std::string detail);
  // The process's one warning that the remote failed (later failures are events only).
  void warn_remote_unavailable(const std::string& detail);
  // The event for a remote call that failed with `st` (unavailable, skip, or refused).
  void remote_failed(const GraphKey& graph, const Status& st, bool write);
  // Writes unwritten_ (decision events) unless holding them for an executable's transaction.
  void write_decisions();
  // The one fallback to the reference evaluator: a warning saying why, then the evaluation.
  Result<std::vector<DataRef>> run_reference(const Graph& graph, std::span<const DataRef> params,
                                             const std::string& why);
  // run_prepared(); `donated_run_began` is set once a donated parameter was given up to the
  // backend, after which an exception must not fall back to the reference (donated_run_failed).
  Result<std::vector<DataRef>> run_on_backend(const Executable& exe, std::vector<DataRef>& params,
                                              bool& donated_run_began);
  // The error of a step whose backend threw after it was given a donated parameter.
  Status donated_run_failed(const GraphKey& graph, const std::string& why);

  Runtime(Backend* backend, store::CacheDb* disk, store::AuditLog* audit,
          store::GuardEntryStore* guard_entries, Metrics* metrics, RuntimeOptions options);

  Backend* backend_;
  // The disk tier's database: its executables and the canonical graphs they were compiled from
  // (prepare_by_key); null without a disk tier.
  store::CacheDb* disk_db_;
  store::AuditLog* audit_;
  store::GuardEntryStore* guard_entries_;
  Metrics* metrics_;
  Metrics own_metrics_;  // used when metrics_ is null
  // What every run updates, found once (no name lookup per run).
  MetricsTimer run_timer_;
  MetricsCounter executions_;
  // The backend's shares_host_memory(), a fixed property of it, asked for every parameter.
  bool shares_host_memory_;
  // run_on_backend()'s device parameters: the capacity is reused, the handles are dropped when
  // each run ends (a run's parameters do not outlive it).
  std::vector<DeviceRef> device_params_;
  RuntimeOptions options_;
  uint32_t compiler_version_;  // options_.compiler_version, else the backend's
  // The backend's name, options digest and compiler_version_, with the graph set per lookup
  // (executable_key()); events take their backend and digest from here too.
  store::ExecutableKey lookup_key_;
  BackendCodec codec_;
  // The tiers (store/tiers/tier_stack.h: memory, then disk when disk_db_, then remote when
  // options.remote) and, with a remote tier, the guard entries backed by the remote's
  // (guard_entries_ then points at them).
  store::TierStack<Executable> stack_;
  Tiers& tiers_;
  store::RemoteTier<Executable>* remote_;  // stack_'s remote tier, or null
  bool remote_warned_ = false;
  // The counter each tier's hits add to ("cache_hits_" + the tier's name), by tier position,
  // made at the tier's first hit.
  std::vector<std::string> hit_counters_;
  std::vector<store::Event> events_;
  int64_t dropped_events_ = 0;
  std::vector<store::Event> unwritten_;  // decision events not yet in the audit log
  bool hold_decisions_ = false;          // between a miss and its executable's store
  std::vector<store::HitCount> hits_;    // hit counts not yet added to the audit log
  size_t pending_hits_ = 0;
  std::vector<std::string> warnings_;
  int64_t pid_;
  RecentGraphs recent_graphs_;           // what misses are explained against
  std::vector<GraphOutcome> outcomes_;   // options_.record_outcomes
  // On a miss: the closest recent graph and what differs (nullopt: none, or not explaining), and
  // the new graph's sources with this runtime's program and function.
  std::optional<ClosestGraph> explain_miss(const CanonicalGraph& graph, const GraphSources& sources);
  // After a compile: the graph is a candidate for later misses, and its sources are stored.
  void remember_graph(const CanonicalGraph& graph, const GraphSources& sources);
  // After a hit in the remote tier: the graph is now in the local database, so its sources go
  // there too with this runtime's program and function, as after a compile (the audit names
  // its program; later misses compare with it).
  void remember_remote_graph(const CanonicalGraph& graph);

  // Host data copied to a backend with its own memory (sim) keeps its device copy as its mirror
  // (HostData::mirror, under this runtime's token): weights are copied to the device once, not
  // every step, and the copy dies with the host data (docs/architecture.md: tensors on a device
  // are device data). `mirrored_` lists the host data holding a mirror (pruned as it grows) so
  // that all mirrors can be freed when the device runs out of memory.
  uint64_t mirror_token_;
  std::vector<std::weak_ptr<const DeviceData>> mirrored_;
  size_t mirrored_pruned_size_ = 0;
  // `data` on the backend's device; host data keeps the copy as its mirror if `keep_mirror`.
  Result<DeviceRef> device_copy(const DataRef& data, bool keep_mirror);
  void drop_mirrors();
};

}  // namespace tracecache
