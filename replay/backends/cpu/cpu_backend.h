// The `cpu` backend: runs executables on the host with the kernels of replay/backends/cpu/cpu_kernels.h
// (fused elementwise chains, BLAS GEMM, reductions), and f32 conv2d, its gradients, matmul and
// linear with oneDNN (replay/backends/cpu/onednn_conv.h, onednn_matmul.h): the compiler marks those
// kernels (CompileOptions::onednn_conv, onednn_conv_grad and onednn_matmul, always set here), so the choice is part of the executable and of the compiler version. Device buffers are host memory (device
// token 0), so the copies share buffers instead of copying, and a donated output whose
// parameter the caller gave up is written into that parameter's buffer (no second buffer). Results equal the reference evaluator bitwise except
// where cpu_kernels.h documents a tolerance (GEMM's summation order).
// While a timeline is set and recording (set_timeline), run() measures real times: each kernel
// is a device slice (the kernels run on the host's threads; the device track is where they are
// drawn) with a flow from the host, and the run a host slice "execute" naming its graph. With no
// timeline the kernel loop costs one pointer test more.
// Memory: a run's scratch arena (the executable's arena_bytes) of kKeptArenaBytes or more is a
// private anonymous mapping the backend keeps for the next run, which reuses it while it is large
// enough and at most four times what it needs, and otherwise unmaps it before mapping one of the
// needed size. So a steady-state step of a large model writes pages it already has instead of
// faulting in and zeroing fresh ones; between runs the backend holds one arena, at most four
// times the latest large one. It is mapped outside malloc's heap. A smaller arena is allocated
// per run from the heap as before: keeping even a small one changed how glibc reused the heap
// under cli.run_memory (2,000 steps of a 256 KB output: peak RSS grew by 170 MB, from the
// dynamic mmap threshold letting those outputs into the heap between long-lived allocations),
// a fragility of the heap this change does not fix. No kernel reads an arena range before
// writing it, so a kept arena's previous contents never reach a result.
// Thread-safety: one thread at a time (runs share the kept arena).
#pragma once

#include "replay/backends/cpu/cpu_dtypes.h"
#include "replay/backends/backend.h"
#include "replay/backends/cpu/onednn_conv.h"
#include "replay/backends/cpu/onednn_matmul.h"
#include "replay/backends/timeline.h"
#include "replay/compile/compiler.h"

namespace tracecache {

struct CpuBackendOptions {
  bool fuse = true;  // part of the options digest
  // Threads of the backend's one team (cpu_threads.h: the kernels' own loops, OpenBLAS and
  // oneDNN); 0: the CPUs this process may run on (cpu::available_cpus()). Not in the digest: an
  // executable is the same code at every thread count; only sgemm's and oneDNN's bits depend on it
  // (cpu_kernels.h says how much). Process-wide: the latest backend's wins.
  int threads = 0;
};

class CpuBackend final : public Backend {
 public:
  // Applies options.threads (see CpuBackendOptions) with cpu::set_threads.
  explicit CpuBackend(CpuBackendOptions options = {});

  std::string_view name() const override { return "cpu"; }
  // bool, i32, i64 and f32 (cpu_dtypes.h); a node of another dtype runs on the reference evaluator.
  bool supports(const Node& node) const override { return cpu::holds(node.dtype); }
  std::string options_digest() const override { return digest_; }
  Result<Executable> compile(const Graph& graph, const GraphKey& key,
                             uint32_t compiler_version) override;
  std::string serialize(const Executable& exe) override;
  Result<Executable> load(std::string_view bytes) override;
  bool shares_host_memory() const override { return true; }
  Result<DeviceRef> to_device(const DataRef& data) override;
  Result<BufferRef> to_host(const DeviceRef& device) override;
  Result<std::vector<DeviceRef>> run(const Executable& exe, std::span<const DeviceRef> params) override;
  void synchronize() override {}

  // Records run()'s host and kernel times on `timeline` while it records; null (the default):
  // nothing is measured. Not owned; must outlive the runs that use it. Always true.
  bool set_timeline(Timeline* timeline) override {
    timeline_ = timeline;
    return true;
  }

 private:
  CpuBackendOptions options_;
  std::string digest_;
  Timeline* timeline_ = nullptr;
  static constexpr uint64_t kKeptArenaBytes = uint64_t{4} << 20;
  // The kept scratch arena (see the contract): an anonymous mapping, unmapped when replaced.
  class Arena {
   public:
    Arena() = default;
    Arena(const Arena&) = delete;
    Arena& operator=(const Arena&) = delete;
    ~Arena();
    // Bytes [0, bytes) of the arena (bytes > 0), mapped now unless the kept one serves.
    // Throws std::bad_alloc when the mapping fails or exceeds physical memory.
    std::byte* reserve(uint64_t bytes);

   private:
    void release();
    void* base_ = nullptr;
    uint64_t size_ = 0;
  };
  Arena arena_;
  cpu::OneDnnConvs onednn_;  // the kOneDnn convolution kernels' primitives and kept weights
  cpu::OneDnnMatmuls onednn_matmuls_;  // the kOneDnn matmul and linear kernels' primitives
};

// Checks that `exe` was built for `backend` (name and options digest); kCorruption otherwise.
Status check_executable_target(const Executable& exe, const Backend& backend);

}  // namespace tracecache
