// BackendRegistry: makes a Backend from the name a person writes ("cpu", "sim", "sim:a100",
// "sim:my_device.spec"). A spec is NAME or NAME:OPTIONS; the registered entry for NAME parses
// OPTIONS (cpu takes none; sim takes a device preset or a spec file, default h100).
//
// Registration: default_backend_registry() registers the built-in backends (cpu, sim) with
// register_builtin_backends() the first time it is called, an explicit call rather than static
// initializers, which a static library drops unless something references them. Other backends
// (tests, plug-ins) are added with add().
//
// Options every backend understands (threads) are passed in BackendOptions; options of one
// backend are in its spec string, so they reach the backend's options digest.
// Thread-safety: default_backend_registry() is safe to call from any thread; add() must not run
// concurrently with anything else on the same registry. Ownership: create() hands the caller
// the backend.
// Errors: create() returns kInvalidArgument for an unknown name (listing the registered ones,
// with the nearest spelling) or options the backend does not take, and the backend's own
// errors (a sim spec file that cannot be read: kNotFound / kIOError / kParseError).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "replay/backends/backend.h"
#include "capture/core/metrics.h"
#include "capture/trace/eager.h"

namespace tracecache {

// Options of every backend.
struct BackendOptions {
  // cpu: host threads for the kernels' parallel loops and OpenBLAS (CpuBackendOptions::threads);
  // 0: the CPUs this process may run on. Never part of a key; sim does not apply it.
  int threads = 0;
};

struct BackendEntry {
  std::string name;   // "cpu"
  std::string usage;  // how a spec names it, for messages: "cpu", "sim:PRESET or sim:SPEC_FILE"
  // Makes the backend. `options` is what followed "NAME:" in the spec, nullopt without a colon.
  std::function<Result<std::unique_ptr<Backend>>(std::optional<std::string_view> options,
                                                 const BackendOptions& common)>
      make;
  // One spec per distinct configuration ("sim:h100", "sim:a100", ...): what
  // tests/replay/backend_conformance_test.cc runs against the reference evaluator. Never empty.
  std::vector<std::string> conformance_specs;
  // Eager mode's op runner on this backend's kernels (capture/trace/eager.h), or null if the
  // backend only runs compiled graphs (eager mode is then refused). `options` as for make;
  // `metrics` is nullable.
  std::function<Result<std::unique_ptr<OpRunner>>(std::optional<std::string_view> options,
                                                  const BackendOptions& common, Metrics* metrics)>
      make_op_runner;
};

// A spec split at its first ':'.
struct BackendSpec {
  std::string name;
  std::optional<std::string> options;
};
BackendSpec parse_backend_spec(std::string_view spec);

class BackendRegistry {
 public:
  // kInvalidArgument if an entry with that name exists or the entry has no name, factory or
  // conformance spec.
  Status add(BackendEntry entry);
  // nullptr if no backend has that name.
  const BackendEntry* find(std::string_view name) const;
  // Registered entries, sorted by name.
  std::span<const BackendEntry> entries() const { return entries_; }
  // Makes the backend `spec` names; see the header comment for the errors.
  Result<std::unique_ptr<Backend>> create(std::string_view spec, const BackendOptions& common = {}) const;
  // The error for a name no entry has: "unknown backend 'X' (available: A, B or C)" with a
  // did-you-mean; `also` adds usages the caller accepts besides the registry's (the session's
  // "reference").
  Status unknown_backend(std::string_view name, std::span<const std::string> also = {}) const;

 private:
  std::vector<BackendEntry> entries_;
};

// Adds cpu and sim to `registry` (a name already registered keeps its entry).
void register_builtin_backends(BackendRegistry& registry);

// The process's registry, holding the built-in backends.
BackendRegistry& default_backend_registry();

// The host thread team every built-in backend's kernels run on (cpu's, and sim's, which computes
// with cpu's kernels): its size now and the BLAS on it. Process-wide, as the team is (the latest
// backend made sets its size; 1 before any did), so it is a question for the registry, which
// knows the backends, rather than for one of them.
ThreadSettings host_thread_settings();

}  // namespace tracecache
