// Backend: where executables run. A small, versioned interface (docs/architecture.md, "Backend interface"):
// a name and an options digest (both part of every executable key), the ops it compiles
// (supports) and its compiler version (also part of every key), compile, serialize/load, device
// buffers and host<->device copies, run, synchronize. Backends are made by name through
// replay/backends/registry/registry.h.
//
// Device buffers are DeviceBuffer handles, a kind of DeviceData (capture/core/device_data.h):
// outputs stay where run() put them until someone reads a value, and feed the next run as they
// are. For `cpu` a device buffer is host memory and the copies share it; `sim`
// (replay/backends/sim/sim_backend.h) keeps its own capacity-limited space and a simulated clock.
//
// Capability queries, in the style of ggml-backend's device interface: what a caller may ask of
// any backend beyond running graphs (a timeline to record on, a simulated clock, device memory,
// a device name), each a virtual with a default that is the answer of a backend without the
// capability (null, nullopt, false, ""). Callers ask these instead of casting to a concrete
// backend; only replay/backends/registry/registry.cc knows the concrete ones. The host thread
// team is process-wide, not one backend's: registry.h's host_thread_settings() reports it.
// Thread-safety: a Backend may be called from one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "capture/core/buffer.h"
#include "capture/core/device_data.h"
#include "capture/ir/canonical.h"
#include "replay/compile/compiler.h"
#include "replay/backends/device_stats.h"
#include "replay/compile/executable.h"

namespace tracecache {

class Timeline;  // replay/backends/timeline.h

// Bumped whenever the Backend interface changes meaning.
inline constexpr uint32_t kBackendInterfaceVersion = 1;

// A tensor living on a backend's device: its bytes as the backend keeps them (`storage`; cpu:
// the data itself; sim: the simulated device memory's contents) and the device holding them
// (`device`, an identity token; 0 is host memory). Immutable once produced, except that a
// backend may write a donated output into it while it has no other owner (Slot::kDonated).
// read() returns storage; a device that is not host memory overrides it to wait and copy.
class DeviceBuffer : public DeviceData {
 public:
  // REQUIRES: storage != nullptr.
  DeviceBuffer(BufferRef storage, uint64_t device)
      : DeviceData(storage->dtype(), storage->shape(), storage.get()), storage_(std::move(storage)), device_(device) {
    if (device_ == 0) set_host_buffer(&storage_);
  }
  const BufferRef& storage() const { return storage_; }
  uint64_t device() const { return device_; }
  Result<BufferRef> read() const override { return storage_; }
  bool in_host_memory() const override { return device_ == 0; }
  // True if the caller holding `self` is its only owner and nobody else sees its bytes (no other
  // handle, no host reader, not a view of someone else's memory), so a run may overwrite them
  // (donation).
  static bool sole_owner(const std::shared_ptr<const DeviceBuffer>& self) {
    return self.use_count() == 1 && self->storage_.use_count() == 1 && self->storage_->owns_data();
  }

 private:
  BufferRef storage_;
  uint64_t device_;
};
using DeviceRef = std::shared_ptr<const DeviceBuffer>;

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;
  // Hex digest of every option that changes lowering or results ("" if none).
  virtual std::string options_digest() const = 0;
  // The backend and its options as a person names them ("cpu", "sim:h100"), for messages; not
  // part of any key. Defaults to name().
  virtual std::string display_name() const { return std::string(name()); }

  // Whether compile() lowers `node`'s op. A graph with a node its backend declines is never
  // compiled: the Runtime runs it on the reference evaluator with a `fallback` event
  // (replay/engine/runtime.h). Default: every op.
  virtual bool supports(const Node& node) const {
    (void)node;
    return true;
  }
  // The version of the code generation behind compile(), recorded in every executable and part
  // of its key: bumping it turns this backend's stored executables into "stale compiler
  // version" misses, never into stale hits. Default: the shared compiler's kCompilerVersion.
  virtual uint32_t compiler_version() const { return kCompilerVersion; }

  // Lowers a canonical graph. `compiler_version` is recorded in the executable.
  virtual Result<Executable> compile(const Graph& graph, const GraphKey& key,
                                     uint32_t compiler_version) = 0;
  // Bytes for the cache, and back. load() validates (parse_executable) and checks that the
  // executable was built for this backend and options; failures are kCorruption.
  virtual std::string serialize(const Executable& exe) = 0;
  virtual Result<Executable> load(std::string_view bytes) = 0;

  // Device memory and copies. A backend whose device memory is host memory (cpu) shares the
  // buffers instead of copying and says so here, so no bytes are counted as moved.
  // to_device() returns data already on this device as it is (same handle, nothing copied) and
  // copies anything else there (reading it first if it lives on another device).
  // to_host() is a value read: device->read().
  virtual bool shares_host_memory() const = 0;
  virtual Result<DeviceRef> to_device(const DataRef& data) = 0;
  virtual Result<BufferRef> to_host(const DeviceRef& device) = 0;

  // Runs `exe` on `params` (one per graph parameter, matching types); returns one device
  // buffer per graph output. May return before the device finishes where the device is
  // asynchronous; synchronize() waits. A donated output (Slot::Kind::kDonated) is written into
  // its parameter's storage when `params` holds that parameter's only handle
  // (DeviceBuffer::sole_owner), else into a new buffer: the values are the same either way.
  // Failures: run() returns a failed status only before its first donated write. It checks
  // its inputs and allocates every output (and its scratch) before its first kernel, and
  // returns no failure after that, so a caller may run the step again elsewhere (the reference
  // evaluator) on the same parameters. An exception (e.g. std::bad_alloc inside a kernel) may
  // come after a donated write: the Runtime then returns the error and does not fall back.
  virtual Result<std::vector<DeviceRef>> run(const Executable& exe,
                                             std::span<const DeviceRef> params) = 0;
  virtual void synchronize() = 0;

  // Capability queries (see the top of this file).
  // The timeline this backend keeps on a clock of its own (a simulated device's: its kernels and
  // copies are on it whether or not anyone asked), or null (default).
  virtual Timeline* own_timeline() { return nullptr; }
  // Records run()'s host work and kernels on `timeline` while it records (null: stop); not
  // owned, must outlive the runs that use it. Returns false, recording nothing, if this backend
  // cannot record on a caller's timeline (default; a backend with its own_timeline() records there).
  virtual bool set_timeline(Timeline* timeline) {
    (void)timeline;
    return false;
  }
  // The cumulative counts of a simulated device clock, or nullopt if the device is not simulated
  // (default): its times are then real time.
  virtual std::optional<SimSnapshot> simulated_clock() const { return std::nullopt; }
  // The device's own memory, or nullopt if its memory is host memory (default).
  virtual std::optional<DeviceMemoryStats> memory_stats() const { return std::nullopt; }
  // Starts a new peak (DeviceMemoryStats::peak) at the memory in use now, to measure one step's
  // peak; false if the device has no memory of its own (default).
  virtual bool reset_memory_peak() { return false; }
  // The device as reports and timeline tracks name it ("h100"); "" for the host (default).
  virtual std::string device_name() const { return {}; }
};

}  // namespace tracecache
