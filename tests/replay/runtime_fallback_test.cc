// The Runtime's one fallback rule (replay/engine/runtime.cc, above run_or_fall_back): a run on the
// backend that fails with a status, whatever its code, runs on the reference evaluator with a
// `fallback` event and a warning, in lazy steps (Runtime::execute) and in compiled functions'
// runs (Runtime::run_or_fall_back) alike. (Exceptions around donation: donation_failures_test.cc.)
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "capture/trace/tensor.h"
#include "replay/backends/cpu/cpu_backend.h"
#include "replay/engine/runtime.h"

namespace tracecache {
namespace {

// The cpu backend, whose run() fails with `fail` (before anything is written) while it is set.
class FailingRunBackend final : public Backend {
 public:
  std::optional<StatusCode> fail;

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
    if (fail) return Status(*fail, "injected run failure");
    return cpu_.run(exe, params);
  }
  void synchronize() override {}

 private:
  CpuBackend cpu_;
};

// Compiled functions' executor: prepare, then run_or_fall_back.
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

int64_t fallbacks(const Runtime& runtime) {
  return std::count_if(runtime.events().begin(), runtime.events().end(), [](const store::Event& e) {
    return e.kind == store::EventKind::kFallback && e.reason == "run failed";
  });
}

struct Case {
  StatusCode code;
  bool through_run_or_fall_back;
};

class OneFallbackRule : public testing::TestWithParam<Case> {};

TEST_P(OneFallbackRule, AFailedRunOfAnyCodeRunsOnTheReferenceEvaluator) {
  FailingRunBackend backend;
  backend.fail = GetParam().code;
  Runtime runtime(&backend, nullptr, nullptr);
  RunOrFallBack fall_back(&runtime);
  LazyContext ctx(GetParam().through_run_or_fall_back ? static_cast<GraphExecutor*>(&fall_back) : &runtime);
  auto data = std::make_shared<HostBuffer>(DType::kF32, Shape{4});
  for (int i = 0; i < 4; ++i) data->data<float>()[i] = static_cast<float>(i + 1);
  Tensor x = ctx.from_buffer(data);
  Tensor y = add(mul(x, 2.0), 1.0);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{3, 5, 7, 9}));
  EXPECT_EQ(fallbacks(runtime), 1);
  ASSERT_EQ(runtime.warnings().size(), 1u);
  EXPECT_NE(runtime.warnings()[0].find("injected run failure"), std::string::npos) << runtime.warnings()[0];
  EXPECT_NE(runtime.warnings()[0].find("reference evaluator"), std::string::npos) << runtime.warnings()[0];

  // The backend recovers: the next step runs on it, with no new fallback.
  backend.fail.reset();
  Tensor z = add(mul(x, 2.0), 1.0);
  EXPECT_EQ(z.to_vector<float>(), (std::vector<float>{3, 5, 7, 9}));
  EXPECT_EQ(fallbacks(runtime), 1);
}

INSTANTIATE_TEST_SUITE_P(
    ExecuteAndRunOrFallBack, OneFallbackRule,
    testing::Values(Case{StatusCode::kResourceExhausted, false}, Case{StatusCode::kResourceExhausted, true},
                    Case{StatusCode::kInvalidArgument, false}, Case{StatusCode::kInvalidArgument, true},
                    Case{StatusCode::kInternal, false}, Case{StatusCode::kInternal, true}),
    [](const testing::TestParamInfo<Case>& param) {
      return std::string(param.param.through_run_or_fall_back ? "RunOrFallBack_" : "Execute_") +
             std::to_string(static_cast<int>(param.param.code));
    });

}  // namespace
}  // namespace tracecache
