#include "replay/backends/cpu/cpu_backend.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <new>

#include <sys/mman.h>
#include <typeinfo>

#include "replay/backends/cpu/cpu_kernels.h"
#include "replay/backends/cpu/cpu_threads.h"

namespace tracecache {

CpuBackend::CpuBackend(CpuBackendOptions options) : options_(options) {
  cpu::set_threads(options_.threads > 0 ? options_.threads : cpu::available_cpus());
  std::string spec = fmt::format("cpu backend v{}; fuse={}", kBackendInterfaceVersion, options_.fuse ? 1 : 0);
  digest_ = hex64(XXH3_64bits(spec.data(), spec.size()));
}

Result<Executable> CpuBackend::compile(const Graph& graph, const GraphKey& key,
                                       uint32_t compiler_version) {
  CompileOptions co;
  co.fuse = options_.fuse;
  co.onednn_conv = true;
  co.onednn_matmul = true;
  co.onednn_conv_grad = true;
  co.widen = true;
  co.compiler_version = compiler_version;
  return compile_graph(graph, key, std::string(name()), digest_, co);
}

std::string CpuBackend::serialize(const Executable& exe) { return serialize_executable(exe); }

Status check_executable_target(const Executable& exe, const Backend& backend) {
  if (exe.backend != backend.name() || exe.options_digest != backend.options_digest()) {
    return corruption(fmt::format("executable was built for backend '{}' options {}, not '{}' options {}",
                                  exe.backend, exe.options_digest, backend.name(),
                                  backend.options_digest()));
  }
  return Status::ok();
}

Result<Executable> CpuBackend::load(std::string_view bytes) {
  Result<Executable> exe = parse_executable(bytes);
  if (!exe.is_ok()) return exe;
  Status st = check_executable_target(*exe, *this);
  if (!st.is_ok()) return st;
  return exe;
}

CpuBackend::Arena::~Arena() { release(); }

void CpuBackend::Arena::release() {
  if (base_ != nullptr) munmap(base_, size_);
  base_ = nullptr;
  size_ = 0;
}

std::byte* CpuBackend::Arena::reserve(uint64_t bytes) {
  // Kept while it is large enough and not more than four times what is needed.
  if (base_ != nullptr && bytes <= size_ && bytes >= size_ / 4) return static_cast<std::byte*>(base_);
  release();  // before mapping the new one, so the two never coexist
  // The size comes from an executable (untrusted when loaded): bounded like any buffer.
  if (bytes > physical_memory_bytes()) throw std::bad_alloc();
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  base_ = p;
  size_ = bytes;
  return static_cast<std::byte*>(base_);
}

namespace {

// The device token under which to_device() keeps its handle for a HostData (HostData::mirror).
// A cpu device buffer is the host bytes themselves, so one handle serves every CpuBackend; the
// runtime's tokens count up from 1 and never reach this one.
constexpr uint64_t kCpuHandleToken = ~uint64_t{0};

}  // namespace

Result<DeviceRef> CpuBackend::to_device(const DataRef& data) {
  // The two handles a run is fed are recognized by their exact type (both final in effect: HostData
  // is final, and a plain DeviceBuffer is what run() returns), which is cheaper than a dynamic cast
  // on every parameter of every step. Host data gets its handle once and keeps it as its mirror,
  // so data fed every step (weights, inputs) is not wrapped again per run; the handle shares the
  // host bytes and dies with the host data.
  const DeviceData& value = *data;
  const std::type_info& type = typeid(value);
  if (type == typeid(HostData)) {
    const auto& host = static_cast<const HostData&>(*data);
    if (const DataRef& kept = host.mirror(kCpuHandleToken)) return std::static_pointer_cast<const DeviceBuffer>(kept);
    auto d = std::make_shared<const DeviceBuffer>(host.buffer(), 0);
    host.set_mirror(kCpuHandleToken, d);
    return DeviceRef(std::move(d));
  }
  if (type == typeid(DeviceBuffer)) {
    if (data->in_host_memory()) return std::static_pointer_cast<const DeviceBuffer>(data);
  } else if (auto d = std::dynamic_pointer_cast<const DeviceBuffer>(data); d && d->in_host_memory()) {
    return d;
  }
  Result<BufferRef> host = data->read();
  if (!host.is_ok()) return host.status();
  return std::make_shared<const DeviceBuffer>(std::move(host).value(), 0);
}

Result<BufferRef> CpuBackend::to_host(const DeviceRef& device) { return device->read(); }

Result<std::vector<DeviceRef>> CpuBackend::run(const Executable& exe,
                                               std::span<const DeviceRef> params) {
  const KernelPlan* plan = exe.kernel_plan();
  if (!plan) return invalid_argument("the cpu backend runs executables with a kernel plan only");
  cpu::bind_threads();
  const Graph& g = exe.run_graph();
  if (params.size() != g.params().size()) {
    return invalid_argument(fmt::format("executable takes {} parameters, {} given",
                                        g.params().size(), params.size()));
  }
  for (size_t p = 0; p < params.size(); ++p) {
    const Node& n = g.node(g.params()[p]);
    if (params[p]->dtype() != n.dtype || !(params[p]->shape() == n.shape)) {
      return invalid_argument(fmt::format("parameter {} must be {}, got {}", p,
                                          type_to_string(n.type()),
                                          type_to_string({params[p]->dtype(), params[p]->shape()})));
    }
  }

  // Every materialized node gets a HostBuffer: the caller's parameter, a view into the arena,
  // a fresh output buffer, or a donated parameter's own storage (written in place).
  // All of it is allocated before the first kernel, and running out of memory on the way is a
  // failed status: a failed run never wrote a donated parameter (Backend::run).
  HostBuffer small_arena;  // this run's arena when it is not the kept one
  std::byte* arena = nullptr;
  std::vector<HostBuffer> views;
  std::vector<const HostBuffer*> value;
  std::vector<BufferRef> outputs;
  std::vector<DeviceRef> result;
  std::vector<const HostBuffer*> ins;
  std::vector<const HostBuffer*> written_in_place;  // donated parameters' storage, told after the run
  try {
    // A small arena is allocated per run (faulting it in costs little); a large one is kept.
    if (plan->arena_bytes < kKeptArenaBytes) {
      small_arena = HostBuffer(DType::kBool, Shape{static_cast<int64_t>(plan->arena_bytes)});
      arena = small_arena.bytes();
    } else {
      arena = arena_.reserve(plan->arena_bytes);
    }
    views.resize(g.size());
    value.assign(g.size(), nullptr);
    outputs.resize(g.outputs().size());
    for (NodeId id = 0; id < g.size(); ++id) {
      const Node& n = g.node(id);
      const Slot& s = plan->slots[id];
      switch (s.kind) {
        case Slot::Kind::kParam: value[id] = params[s.index]->storage().get(); break;
        case Slot::Kind::kArena:
          views[id] = HostBuffer::view(n.dtype, n.shape, arena + s.offset);
          value[id] = &views[id];
          break;
        case Slot::Kind::kDonated: {
          const DeviceRef& donor = params[static_cast<size_t>(g.donated_param(s.index))];
          if (DeviceBuffer::sole_owner(donor)) {
            written_in_place.push_back(donor->storage().get());
            outputs[s.index] = donor->storage();
            value[id] = outputs[s.index].get();
            break;
          }
          [[fallthrough]];
        }
        case Slot::Kind::kOutput: {
          auto fresh = std::make_shared<const HostBuffer>(n.dtype, n.shape);
          value[id] = fresh.get();
          outputs[s.index] = std::move(fresh);
          break;
        }
        case Slot::Kind::kFused: break;
      }
    }

    result.reserve(g.outputs().size());
    for (size_t o = 0; o < g.outputs().size(); ++o) {
      NodeId id = g.outputs()[o];
      const Slot& s = plan->slots[id];
      if (s.kind == Slot::Kind::kParam) {
        result.push_back(params[s.index]);
      } else if (o == s.index) {
        result.push_back(std::make_shared<const DeviceBuffer>(std::move(outputs[s.index]), 0));
      } else {
        result.push_back(result[s.index]);  // the same node returned twice: one handle
      }
    }
    size_t most_inputs = 0;
    for (const Kernel& k : plan->kernels) most_inputs = std::max(most_inputs, g.inputs(g.node(k.root)).size());
    ins.reserve(most_inputs);
  } catch (const std::bad_alloc&) {
    return resource_exhausted(fmt::format("the cpu backend is out of memory allocating the outputs of graph {}",
                                          exe.graph_key.to_hex()));
  }

  // The kernels run last; nothing below returns a failure.
  auto run_kernel = [&](const Kernel& k) {
    auto* out = const_cast<HostBuffer*>(value[k.root]);
    // A parameter weight of a oneDNN conv2d or conv2d_input_grad (input 1) keeps its reordered
    // copy across runs, tied to its owner.
    auto weight_of = [&](NodeId conv) {
      const Slot& w = plan->slots[g.inputs(g.node(conv))[1]];
      return w.kind == Slot::Kind::kParam ? &params[w.index]->storage() : nullptr;
    };
    if (k.kind == Kernel::Kind::kFused) {
      auto leaf = [&](NodeId id) { return value[id]; };
      if (k.library == Kernel::Library::kOneDnn) {
        onednn_.run_fused(exe.graph_key, g, k.members, leaf, weight_of(k.members[0]), *out);
      } else {
        cpu::run_fused(g, k.members, leaf, *out);
      }
      return;
    }
    ins.clear();
    for (NodeId in : g.inputs(g.node(k.root))) ins.push_back(value[in]);
    if (k.library == Kernel::Library::kOneDnn) {
      const OpKind op = g.node(k.root).op;
      const bool done = op == OpKind::kMatmul || op == OpKind::kLinear
                            ? onednn_matmuls_.run(exe.graph_key, g, k.root, ins, *out)
                            : onednn_.run(exe.graph_key, g, k.root, ins,
                                          op == OpKind::kConv2dWeightGrad ? nullptr : weight_of(k.root), *out);
      if (done) return;
    }
    cpu::run_op(g, k.root, ins, *out);
  };
  // Copies reordered from a parameter written in place are stale from now on (the kernels
  // that read it in this run read it before the write).
  auto note_writes = [&] {
    for (const HostBuffer* b : written_in_place) cpu::note_written_in_place(b);
  };
  if (timeline_ == nullptr || !timeline_->recording()) {
    for (const Kernel& k : plan->kernels) run_kernel(k);
    note_writes();
    return result;
  }
  const int64_t run_start = timeline_->host_now_ps();
  for (const Kernel& k : plan->kernels) {
    const int64_t start = timeline_->host_now_ps();
    run_kernel(k);
    TimelineEvent kernel;
    kernel.name = kernel_name(g, k);
    kernel.category = "kernel";
    kernel.start_ps = start;
    kernel.duration_ps = timeline_->host_now_ps() - start;
    timeline_->record_device(std::move(kernel));
    timeline_->record_flow(start, start);
  }
  timeline_->record_run("execute", "cpu", run_start, timeline_->host_now_ps(), exe.graph_key);
  note_writes();
  return result;
}

}  // namespace tracecache
