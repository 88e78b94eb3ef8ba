// The Runtime's one fallback rule (replay/engine/runtime.cc, above run_or_fall_back): a run on the
// backend that fails with a status, whatever its code, runs on the reference evaluator with a
// `fallback` event and a warning, in lazy steps (Runtime::execute) and in compiled functions'
// runs (Runtime::run_or_fall_back) alike. (Exceptions around donation: donation_failures_test.cc.)
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <ostream>

#include "capture/trace/tensor.h"
#include "replay/engine/runtime.h"
#include "tests/replay/injected_backend.h"

namespace tracecache {
namespace {

// The cpu backend, whose run() fails with `fail` (before anything is written) while it is set.
class FailingRunBackend final : public testing_support::InjectedCpuBackend {
 public:
  std::optional<StatusCode> fail;

  FailingRunBackend() {
    before_run = [this] { return fail ? Status(*fail, "injected run failure") : Status::ok(); };
  }
};

using testing_support::RunOrFallBack;

int64_t fallbacks(const Runtime& runtime) {
  return std::count_if(runtime.events().begin(), runtime.events().end(), [](const store::Event& e) {
    return e.kind == store::EventKind::kFallback && e.reason == "run failed";
  });
}

struct Case {
  StatusCode code;
  bool through_run_or_fall_back;
  // GoogleTest prints a parameter without a printer as raw bytes, padding included.
  friend void PrintTo(const Case& c, std::ostream* os) {
    *os << "code " << static_cast<int>(c.code) << (c.through_run_or_fall_back ? ", run_or_fall_back" : ", execute");
  }
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
