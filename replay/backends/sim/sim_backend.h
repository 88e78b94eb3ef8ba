// The `sim` backend: a simulated accelerator behind the Backend interface (docs/architecture.md, "Backend
// interface"). What is simulated:
//  - its own memory space with a capacity (DeviceSpec::memory_capacity): every device buffer
//    (parameters copied in, outputs, a run's scratch arena) is accounted against it while it
//    lives. An allocation that does not fit fails with a Status naming the graph key (in run)
//    or the parameter (in to_device), the bytes requested and the bytes free; the Runtime then
//    falls back (replay/engine/runtime.h) and the step's results stay correct;
//  - explicit host<->device copies (shares_host_memory() is false, so the Runtime counts the
//    bytes) costed at bytes / link bandwidth + latency. Outputs stay on the device: run() takes
//    this device's buffers as they are, so a value one run produced feeds the next with no copy;
//  - one asynchronous in-order stream: to_device() and run() enqueue work and return; the device
//    clock advances per kernel by the roofline of replay/backends/sim/cost_model.h; reading a device
//    buffer (DeviceData::read(), to_host()) enqueues the copy and waits for it (the host clock
//    jumps to the device clock if it is behind); synchronize() waits for
//    everything. The clocks are in replay/backends/sim/sim_timeline.h;
//  - donation: a donated output written in place (Slot::Kind::kDonated) takes over its
//    parameter's device memory instead of allocating its own.
// What is not: the numbers. They are computed at once on the host by the `cpu` backend's
// kernels (CpuBackend::run on the same Executable), so sim outputs are BITWISE EQUAL to cpu
// outputs (invariant 4); the bytes are not duplicated either (device buffers share the
// immutable host buffers), only accounted.
// The options digest is the device spec's digest: executables are never shared between specs.
// Thread-safety: one thread at a time. Device buffers may outlive the backend (their memory
// accounting is shared).
#pragma once

#include <cstdint>
#include <memory>

#include "replay/backends/cpu/cpu_dtypes.h"
#include "replay/backends/backend.h"
#include "replay/backends/cpu/cpu_backend.h"
#include "replay/backends/sim/device_spec.h"
#include "replay/backends/sim/sim_timeline.h"

namespace tracecache {

class SimBackend final : public Backend {
 public:
  explicit SimBackend(DeviceSpec spec);
  ~SimBackend() override;

  std::string_view name() const override { return "sim"; }
  // As the cpu backend's kernels compute: bool, i32, i64, f32 (replay/backends/cpu/cpu_dtypes.h).
  bool supports(const Node& node) const override { return cpu::holds(node.dtype); }
  std::string options_digest() const override { return digest_; }
  std::string display_name() const override { return "sim:" + spec_.name; }
  Result<Executable> compile(const Graph& graph, const GraphKey& key,
                             uint32_t compiler_version) override;
  std::string serialize(const Executable& exe) override;
  Result<Executable> load(std::string_view bytes) override;
  bool shares_host_memory() const override { return false; }
  Result<DeviceRef> to_device(const DataRef& data) override;
  Result<BufferRef> to_host(const DeviceRef& device) override;
  Result<std::vector<DeviceRef>> run(const Executable& exe, std::span<const DeviceRef> params) override;
  void synchronize() override;

  // Capability queries (backend.h): the simulated clock's own timeline, its counts, the device
  // memory (capacity from the spec), the spec's name.
  Timeline* own_timeline() override { return &timeline_; }
  std::optional<SimSnapshot> simulated_clock() const override { return snapshot(); }
  std::optional<DeviceMemoryStats> memory_stats() const override;
  std::string device_name() const override { return spec_.name; }

  const DeviceSpec& spec() const { return spec_; }
  SimSnapshot snapshot() const;
  SimTimeline& timeline() { return timeline_; }
  const SimTimeline& timeline() const { return timeline_; }
  // The timeline's counter track of the device memory in use (bytes), sampled at every
  // allocation and release while the timeline records; its largest sample is memory_peak()
  // when recording began before the first allocation and the peak was never reset.
  static constexpr std::string_view kMemoryCounter = "device memory";
  uint64_t memory_in_use() const;
  uint64_t memory_peak() const;
  // Starts a new peak at the memory in use now (to measure one step's peak). True.
  bool reset_memory_peak() override;

 private:
  struct Memory;
  struct Allocation;
  class Buffer;
  DeviceRef wrap(BufferRef storage, std::shared_ptr<Allocation> allocation);
  std::shared_ptr<Allocation> allocate(uint64_t bytes);
  // Accounts a device-to-host copy of `bytes` and waits for it (a value read).
  void copy_to_host(int64_t bytes);
  // While the timeline records: a sample of the memory in use on its kMemoryCounter track.
  void note_memory();

  DeviceSpec spec_;
  std::string digest_;
  uint64_t device_;  // this device's token (DeviceBuffer::device)
  CpuBackend cpu_;
  std::shared_ptr<Memory> memory_;
  SimTimeline timeline_;
  int64_t bytes_to_device_ = 0;
  int64_t bytes_to_host_ = 0;
  int64_t kernels_ = 0;
};

}  // namespace tracecache
