// Test helpers for the Runtime's failure paths (runtime_fallback_test.cc,
// donation_failures_test.cc): the cpu backend with failures injected around run(), and the
// executor compiled functions use (prepare, then Runtime::run_or_fall_back).
// Thread-safety: none (one test at a time). Ownership: the backend owns its CpuBackend; the
// executor borrows the Runtime, which must outlive it.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "capture/trace/tensor.h"
#include "replay/backends/cpu/cpu_backend.h"
#include "replay/engine/runtime.h"

namespace tracecache::testing_support {

// The cpu backend; run() first calls before_run (a failed status it returns fails the run before
// any kernel; it may also throw), then the kernels, then after_run (which may throw, after the
// kernels wrote, in place if donated).
class InjectedCpuBackend : public Backend {
 public:
  std::function<Status()> before_run;
  std::function<void()> after_run;

  std::string_view name() const override { return cpu_.name(); }
  std::string options_digest() const override { return cpu_.options_digest(); }
  Result<Executable> compile(const Graph& graph, const GraphKey& key, uint32_t version) override {
    return cpu_.compile(graph, key, version);
  }
  std::string serialize(const Executable& exe) override { return cpu_.serialize(exe); }
  Result<Executable> load(std::string_view bytes) override { return cpu_.load(bytes); }
  bool shares_host_memory() const override { return true; }
  Result<DeviceRef> to_device(const DataRef& data) override { return cpu_.to_device(data); }
  Result<BufferRef> to_host(const DeviceRef& device) override { return cpu_.to_host(device); }
  Result<std::vector<DeviceRef>> run(const Executable& exe, std::span<const DeviceRef> params) override {
    if (before_run) {
      if (Status s = before_run(); !s.is_ok()) return s;
    }
    Result<std::vector<DeviceRef>> outs = cpu_.run(exe, params);
    if (after_run) after_run();
    return outs;
  }
  void synchronize() override { cpu_.synchronize(); }

 private:
  CpuBackend cpu_;
};

// The executor compiled functions use: prepare, then Runtime::run_or_fall_back.
class RunOrFallBack final : public GraphExecutor {
 public:
  explicit RunOrFallBack(Runtime* runtime) : runtime_(runtime) {}
  Result<std::vector<DataRef>> execute(const CanonicalGraph& cg, std::vector<DataRef> params) override {
    Result<std::shared_ptr<const Executable>> exe = runtime_->prepare(cg);
    if (!exe.is_ok()) return exe.status();
    return runtime_->run_or_fall_back(**exe, params);
  }

 private:
  Runtime* runtime_;
};

}  // namespace tracecache::testing_support
