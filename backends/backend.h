// Backend: where executables run. A small, versioned interface (docs/architecture.md, "Backend interface"):
// a name and an options digest (both part of every executable key), the ops it compiles
// (supports) and its compiler version (also part of every key), compile, serialize/load, device
// buffers and host<->device copies, run, synchronize. Backends are made by name through
// backends/registry.h.
//
// Device buffers are DeviceBuffer handles. For `cpu` a device buffer is host memory and the
// copies share it; `sim` (backends/sim/sim_backend.h) keeps its own capacity-limited space and a
// simulated clock.
// Thread-safety: a Backend may be called from one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "capture/core/buffer.h"
#include "capture/ir/canonical.h"
#include "compile/compiler.h"
#include "compile/executable.h"

namespace tracecache {

// Bumped whenever the Backend interface changes meaning.
inline constexpr uint32_t kBackendInterfaceVersion = 1;

// A tensor living on a backend's device. Immutable once produced; shared by handle.
struct DeviceBuffer {
  DType dtype = DType::kF32;
  Shape shape;
  BufferRef storage;  // cpu: the data itself
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
  // (runtime/runtime.h). Default: every op.
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
  virtual bool shares_host_memory() const = 0;
  virtual Result<DeviceRef> to_device(BufferRef host) = 0;
  virtual Result<BufferRef> to_host(const DeviceRef& device) = 0;

  // Runs `exe` on `params` (one per graph parameter, matching types); returns one device
  // buffer per graph output. May return before the device finishes where the device is
  // asynchronous; synchronize() waits.
  virtual Result<std::vector<DeviceRef>> run(const Executable& exe,
                                             std::span<const DeviceRef> params) = 0;
  virtual void synchronize() = 0;
};

}  // namespace tracecache
