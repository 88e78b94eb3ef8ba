// The generic session (replay/engine/session.h) without a trace program, and its refusals:
//  - lazy and eager sessions made by backend name record ops on their context and give the
//    reference evaluator's bits (cpu, sim: same bits), lazy ones through the runtime's cache;
//  - the combinations the session refuses (unknown backend, once on reference, eager on sim)
//    and the error texts the CLI prints for them.
#include <gtest/gtest.h>

#include <cstring>

#include "capture/reference/reference.h"
#include "replay/engine/session.h"

namespace tracecache {
namespace {

// exp(x) + x on a fixed input, through `session`'s context; the result's bytes.
std::vector<float> exp_plus_x(Session& session) {
  HostBuffer data(DType::kF32, Shape{4});
  for (int i = 0; i < 4; ++i) data.data<float>()[i] = 0.25f * static_cast<float>(i) - 0.5f;
  LazyContext& ctx = session.context();
  Tensor x = ctx.from_buffer(std::move(data));
  Tensor y = add(exp(x), x);
  ctx.mark_step();
  const HostBuffer& out = *y.buffer();
  return std::vector<float>(out.data<float>(), out.data<float>() + out.numel());
}

Result<std::unique_ptr<Session>> make(SessionMode mode, std::string backend, Metrics* metrics) {
  SessionOptions options;
  options.mode = mode;
  options.backend = std::move(backend);
  options.metrics = metrics;
  return Session::create(std::move(options));
}

TEST(Session, LazyAndEagerOnEveryBackendGiveTheReferenceBits) {
  Metrics reference_metrics;
  std::unique_ptr<Session> reference =
      std::move(make(SessionMode::kLazy, "reference", &reference_metrics)).value_or_throw();
  EXPECT_EQ(reference->runtime(), nullptr);
  const std::vector<float> want = exp_plus_x(*reference);
  for (const char* spec : {"cpu", "sim", "sim:a100"}) {
    Metrics metrics;
    std::unique_ptr<Session> s = std::move(make(SessionMode::kLazy, spec, &metrics)).value_or_throw();
    ASSERT_NE(s->runtime(), nullptr) << spec;
    EXPECT_EQ(s->backend() && s->backend()->simulated_clock(), std::string_view(spec).starts_with("sim")) << spec;
    EXPECT_EQ(exp_plus_x(*s), want) << spec;
    EXPECT_EQ(metrics.counter(counters::kCompiles), 1) << spec;
    EXPECT_EQ(s->executed_keys().size(), 1u) << spec;
  }
  for (const char* spec : {"cpu", "reference"}) {
    Metrics metrics;
    std::unique_ptr<Session> s = std::move(make(SessionMode::kEager, spec, &metrics)).value_or_throw();
    EXPECT_EQ(s->runtime(), nullptr) << spec;
    EXPECT_EQ(exp_plus_x(*s), want) << spec;
    EXPECT_TRUE(s->executed_keys().empty()) << spec;
  }
}

TEST(Session, RefusesWhatCannotRun) {
  Metrics metrics;
  auto message = [&](SessionMode mode, const char* backend) {
    Result<std::unique_ptr<Session>> s = make(mode, backend, &metrics);
    EXPECT_FALSE(s.is_ok()) << backend;
    return s.is_ok() ? std::string() : s.status().message();
  };
  EXPECT_EQ(message(SessionMode::kLazy, "cpux"),
            "unknown backend 'cpux' (available: cpu, reference, sim:PRESET or sim:SPEC_FILE) "
            "(did you mean 'cpu'?)");
  EXPECT_EQ(message(SessionMode::kOnce, "reference"),
            "--mode once runs compiled executables: it needs --backend cpu or sim, not reference");
  EXPECT_EQ(message(SessionMode::kEager, "sim:h100"),
            "the sim backend runs compiled graphs: use --mode lazy or once (eager runs ops on the host)");
  EXPECT_EQ(message(SessionMode::kEager, "cpu:fast"), "backend 'cpu' takes no options (got 'cpu:fast')");
  EXPECT_NE(message(SessionMode::kLazy, "sim:no_such.spec").find("no_such.spec"), std::string::npos);
}

}  // namespace
}  // namespace tracecache
