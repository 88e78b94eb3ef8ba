#include "replay/backends/sim/sim_backend.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <map>

#include "replay/backends/cpu/cpu_threads.h"
#include "replay/compile/compiler.h"
#include "replay/backends/sim/cost_model.h"

namespace tracecache {

// Device memory accounting, shared with every live device buffer. `backend` is null once the
// backend is gone (its buffers may outlive it; reading one then accounts nothing).
struct SimBackend::Memory {
  uint64_t capacity = 0;
  uint64_t used = 0;
  uint64_t peak = 0;
  SimBackend* backend = nullptr;

  uint64_t free() const { return capacity - used; }
  bool fits(uint64_t bytes) const { return bytes <= free(); }
  void take(uint64_t bytes) {
    used += bytes;
    peak = std::max(peak, used);
  }
};

// Bytes of device memory held until the last buffer using them drops (a donated output in
// place shares its parameter's allocation).
struct SimBackend::Allocation {
  std::shared_ptr<Memory> memory;
  uint64_t bytes = 0;
  ~Allocation() {
    memory->used -= bytes;
    if (memory->backend) memory->backend->note_memory();
  }
};

// A sim device buffer: reading it is a device-to-host copy, accounted at every read (a tensor
// keeps what it read: Tensor::buffer()).
class SimBackend::Buffer final : public DeviceBuffer {
 public:
  Buffer(BufferRef storage, uint64_t device, std::shared_ptr<Allocation> allocation)
      : DeviceBuffer(std::move(storage), device), allocation_(std::move(allocation)) {}
  Result<BufferRef> read() const override {
    if (SimBackend* backend = allocation_->memory->backend) backend->copy_to_host(static_cast<int64_t>(nbytes()));
    return storage();
  }
  const std::shared_ptr<Allocation>& allocation() const { return allocation_; }

 private:
  std::shared_ptr<Allocation> allocation_;
};

namespace {

std::atomic<uint64_t> next_device_token{1};

}  // namespace

SimBackend::SimBackend(DeviceSpec spec)
    : spec_(std::move(spec)), device_(next_device_token++), memory_(std::make_shared<Memory>()) {
  memory_->backend = this;
  std::string text = fmt::format("sim backend v{}; fuse=1; device {}", kBackendInterfaceVersion, spec_.digest());
  digest_ = hex64(XXH3_64bits(text.data(), text.size()));
  memory_->capacity = spec_.memory_capacity;
}

SimBackend::~SimBackend() { memory_->backend = nullptr; }

Result<Executable> SimBackend::compile(const Graph& graph, const GraphKey& key,
                                       uint32_t compiler_version) {
  CompileOptions co;
  co.onednn_conv = true;  // the cpu backend's lowering: sim computes with its kernels
  co.onednn_matmul = true;
  co.onednn_conv_grad = true;
  co.widen = true;
  co.compiler_version = compiler_version;
  return compile_graph(graph, key, std::string(name()), digest_, co);
}

std::string SimBackend::serialize(const Executable& exe) { return serialize_executable(exe); }

Result<Executable> SimBackend::load(std::string_view bytes) {
  Result<Executable> exe = parse_executable(bytes);
  if (!exe.is_ok()) return exe;
  Status st = check_executable_target(*exe, *this);
  if (!st.is_ok()) return st;
  return exe;
}

uint64_t SimBackend::memory_in_use() const { return memory_->used; }
uint64_t SimBackend::memory_peak() const { return memory_->peak; }
bool SimBackend::reset_memory_peak() {
  memory_->peak = memory_->used;
  return true;
}

void SimBackend::note_memory() {
  if (timeline_.recording()) {
    timeline_.record_counter(kMemoryCounter, timeline_.host_now_ps(), static_cast<int64_t>(memory_->used));
  }
}

std::shared_ptr<SimBackend::Allocation> SimBackend::allocate(uint64_t bytes) {
  memory_->take(bytes);
  note_memory();
  auto a = std::make_shared<Allocation>();
  a->memory = memory_;
  a->bytes = bytes;
  return a;
}

DeviceRef SimBackend::wrap(BufferRef storage, std::shared_ptr<Allocation> allocation) {
  return std::make_shared<const Buffer>(std::move(storage), device_, std::move(allocation));
}

Result<DeviceRef> SimBackend::to_device(const DataRef& data) {
  if (auto d = std::dynamic_pointer_cast<const DeviceBuffer>(data); d && d->device() == device_) return d;
  Result<BufferRef> read = data->read();
  if (!read.is_ok()) return read.status();
  const BufferRef& host = *read;
  const int64_t start = timeline_.host_now_ps();
  const uint64_t bytes = host->nbytes();
  if (!memory_->fits(bytes)) {
    return resource_exhausted(fmt::format(
        "sim device '{}' is out of memory: copying a {} parameter to the device needs {} bytes, "
        "{} bytes free of {}",
        spec_.name, type_to_string({host->dtype(), host->shape()}), bytes, memory_->free(),
        memory_->capacity));
  }
  std::shared_ptr<Allocation> allocation = allocate(bytes);
  // The device gets its own copy, as a real device would: the host data may be written into
  // its own storage by a later donation, and the device copy by this one's. The copy is device
  // work the CPU does: not host time.
  const SimTimeline::Clock::time_point copy_start = SimTimeline::Clock::now();
  BufferRef storage = std::make_shared<const HostBuffer>(host->clone());
  timeline_.exclude(copy_start, SimTimeline::Clock::now());
  bytes_to_device_ += static_cast<int64_t>(bytes);
  TimelineEvent copy;
  copy.name = "copy to device";
  copy.category = "copy";
  copy.duration_ps = transfer_time_ps(spec_, static_cast<int64_t>(bytes));
  copy.args = {{"bytes", static_cast<int64_t>(bytes)}};
  timeline_.enqueue(std::move(copy));
  DeviceRef d = wrap(std::move(storage), std::move(allocation));
  timeline_.record_host("to_device", "sim", start, timeline_.host_now_ps());
  return d;
}

void SimBackend::copy_to_host(int64_t bytes) {
  const int64_t start = timeline_.host_now_ps();
  bytes_to_host_ += bytes;
  TimelineEvent copy;
  copy.name = "copy to host";
  copy.category = "copy";
  copy.duration_ps = transfer_time_ps(spec_, bytes);
  copy.args = {{"bytes", bytes}};
  timeline_.enqueue(std::move(copy));
  timeline_.record_host("to_host", "sim", start, timeline_.host_now_ps());
  timeline_.wait_for_device();
}

Result<BufferRef> SimBackend::to_host(const DeviceRef& device) { return device->read(); }

void SimBackend::synchronize() { timeline_.wait_for_device(); }

Result<std::vector<DeviceRef>> SimBackend::run(const Executable& exe,
                                               std::span<const DeviceRef> params) {
  using Clock = SimTimeline::Clock;
  const int64_t enqueue_start = timeline_.host_now_ps();
  const KernelPlan* plan = exe.kernel_plan();
  if (!plan) return invalid_argument("the sim backend runs executables with a kernel plan only");
  cpu::bind_threads();
  const Graph& g = exe.run_graph();

  // Device memory for this run: the scratch arena (freed when the run's kernels are done) and
  // one buffer per distinct output slot (held by the returned device buffers).
  // A donated output whose parameter the caller gave up is written in place (the cpu kernels
  // decide the same way, DeviceBuffer::sole_owner) and needs no memory of its own.
  std::map<uint32_t, uint64_t> output_bytes;
  for (NodeId id : g.outputs()) {
    const Slot& s = plan->slots[id];
    const bool in_place = s.kind == Slot::Kind::kDonated &&
                          DeviceBuffer::sole_owner(params[static_cast<size_t>(g.donated_param(s.index))]);
    if (s.kind == Slot::Kind::kOutput || (s.kind == Slot::Kind::kDonated && !in_place)) {
      output_bytes[s.index] = s.nbytes;
    }
  }
  uint64_t needed = plan->arena_bytes;
  for (const auto& [index, bytes] : output_bytes) needed += bytes;
  if (!memory_->fits(needed)) {
    return resource_exhausted(fmt::format(
        "sim device '{}' is out of memory running graph {}: {} bytes requested ({} scratch, {} "
        "outputs), {} bytes free of {}",
        spec_.name, exe.graph_key.to_hex(), needed, plan->arena_bytes, needed - plan->arena_bytes,
        memory_->free(), memory_->capacity));
  }

  // The outputs' device memory is taken before the kernels write anything (Backend::run: a
  // failed run never wrote a donated parameter); nothing after them returns a failure.
  std::map<uint32_t, std::shared_ptr<Allocation>> allocations;
  for (const auto& [index, bytes] : output_bytes) allocations.emplace(index, allocate(bytes));
  std::vector<DeviceRef> result;
  result.reserve(g.outputs().size());
  std::map<uint32_t, DeviceRef> made;

  // The numbers: the cpu backend's kernels, now; their host time is device work, not host work.
  const Clock::time_point compute_start = Clock::now();
  Result<std::vector<DeviceRef>> computed = cpu_.run(exe, params);
  timeline_.exclude(compute_start, Clock::now());
  if (!computed.is_ok()) return computed.status();

  // The timing: every kernel on the stream.
  for (const Kernel& k : plan->kernels) {
    const KernelCost cost = kernel_cost(g, k);
    TimelineEvent e;
    e.name = kernel_name(g, k);
    e.category = "kernel";
    e.duration_ps = kernel_time_ps(spec_, cost);
    if (timeline_.recording()) e.args = {{"flops", cost.flops}, {"bytes", cost.bytes}};
    timeline_.enqueue(std::move(e));
    ++kernels_;
  }

  for (size_t o = 0; o < g.outputs().size(); ++o) {
    const Slot& s = plan->slots[g.outputs()[o]];
    if (s.kind == Slot::Kind::kParam) {
      result.push_back(params[s.index]);
      continue;
    }
    auto it = made.find(s.index);
    if (it == made.end()) {
      const BufferRef& storage = (*computed)[o]->storage();
      std::shared_ptr<Allocation> allocation;
      if (auto a = allocations.find(s.index); a != allocations.end()) {
        allocation = std::move(a->second);
      } else if (s.kind == Slot::Kind::kDonated) {  // written in place
        const DeviceRef& donor = params[static_cast<size_t>(g.donated_param(s.index))];
        auto* own = dynamic_cast<const Buffer*>(donor.get());
        if (own && donor->storage() == storage) allocation = own->allocation();
      }
      if (!allocation) allocation = allocate(storage == nullptr ? 0 : storage->nbytes());
      it = made.emplace(s.index, wrap(storage, std::move(allocation))).first;
    }
    result.push_back(it->second);
  }
  // The arena counts toward the peak while the run's kernels use it.
  memory_->take(plan->arena_bytes);
  note_memory();
  memory_->used -= plan->arena_bytes;
  note_memory();
  timeline_.record_run("enqueue", "sim", enqueue_start, timeline_.host_now_ps(), exe.graph_key);
  return result;
}

std::optional<DeviceMemoryStats> SimBackend::memory_stats() const {
  return DeviceMemoryStats{.capacity = spec_.memory_capacity, .in_use = memory_in_use(), .peak = memory_peak()};
}

SimSnapshot SimBackend::snapshot() const {
  SimSnapshot s;
  s.host_ps = timeline_.host_now_ps();
  s.host_wait_ps = timeline_.host_wait_ps();
  s.device_busy_ps = timeline_.device_busy_ps();
  s.bytes_to_device = bytes_to_device_;
  s.bytes_to_host = bytes_to_host_;
  s.kernels = kernels_;
  return s;
}

}  // namespace tracecache
