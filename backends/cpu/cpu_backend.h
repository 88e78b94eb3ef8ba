// The `cpu` backend: runs executables on the host with the kernels of backends/cpu/cpu_kernels.h
// (fused elementwise chains, BLAS GEMM, reductions), and f32 conv2d, its gradients, matmul and
// linear with oneDNN (backends/cpu/onednn_conv.h, onednn_matmul.h): the compiler marks those
// kernels (CompileOptions::onednn_conv, onednn_conv_grad and onednn_matmul, always set here), so the choice is part of the executable and of the compiler version. Device buffers are host memory (device
// token 0), so the copies share buffers instead of copying, and a donated output whose
// parameter the caller gave up is written into that parameter's buffer (no second buffer). Results equal the reference evaluator bitwise except
// where cpu_kernels.h documents a tolerance (GEMM's summation order).
// While a timeline is set and recording (set_timeline), run() measures real times: each kernel
// is a device slice (the kernels run on the host's threads; the device track is where they are
// drawn) with a flow from the host, and the run a host slice "execute" naming its graph. With no
// timeline the kernel loop costs one pointer test more.
// Thread-safety: one thread at a time (run() allocates its own scratch arena per call).
#pragma once

#include "backends/backend.h"
#include "backends/cpu/onednn_conv.h"
#include "backends/cpu/onednn_matmul.h"
#include "backends/timeline.h"
#include "compile/compiler.h"

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
  // nothing is measured. Not owned; must outlive the runs that use it.
  void set_timeline(Timeline* timeline) { timeline_ = timeline; }

 private:
  CpuBackendOptions options_;
  std::string digest_;
  Timeline* timeline_ = nullptr;
  cpu::OneDnnConvs onednn_;  // the kOneDnn convolution kernels' primitives and kept weights
  cpu::OneDnnMatmuls onednn_matmuls_;  // the kOneDnn matmul and linear kernels' primitives
};

// Checks that `exe` was built for `backend` (name and options digest); kCorruption otherwise.
Status check_executable_target(const Executable& exe, const Backend& backend);

}  // namespace tracecache
