// Trace programs that train: grad statements, update statements, and the three modes of
// ProgramSession on train_mlp.trace (the CLI side is tests/cli/train_programs.sh).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "capture/core/metrics.h"
#include "capture/reference/reference.h"
#include "capture/trace/recording_executor.h"
#include "frontend/program/program.h"
#include "frontend/program/program_runner.h"
#include "replay/engine/program_session.h"

namespace tracecache {
namespace {

namespace fs = std::filesystem;

Program parse_ok(std::string_view text) {
  Result<Program> p = parse_program(text, "t.trace");
  EXPECT_TRUE(p.is_ok()) << p.status().to_string();
  return p.is_ok() ? std::move(p).value() : Program{};
}

std::vector<double> values(const BufferRef& b) {
  std::vector<double> out;
  for (int64_t i = 0; i < b->numel(); ++i) out.push_back(b->element_as_double(i));
  return out;
}

Result<std::vector<StepResult>> run_reference(const Program& p, int steps = -1) {
  ReferenceExecutor executor;
  LazyContext ctx(&executor);
  return run_program(p, ctx, steps);
}

TEST(ProgramTrain, GradStatementsParsePrintAndRoundTrip) {
  Program p = parse_ok(R"(tracecache 1
param w : f32[3] = full(1)
param m : f32[3] = full(0)
input x : f32[3] = normal(seed=1)
y = mul(w, x)
loss = sum(y)
gw,gy = grad( loss , w, y )
nm = add(m, gw)
update m = nm
nw = sub(w, nm)
update w = nw
output loss
)");
  ASSERT_EQ(p.ops.size(), 5u);
  const OpStmt& g = p.ops[2];
  EXPECT_TRUE(g.is_grad);
  EXPECT_EQ(g.result, "gw");
  ASSERT_EQ(g.more_results.size(), 1u);
  EXPECT_EQ(g.more_results[0].name, "gy");
  ASSERT_EQ(p.updates.size(), 2u);
  EXPECT_EQ(p.updates[0].param, "m");
  EXPECT_EQ(p.updates[1].value, "nw");
  const std::string text = print_program(p);
  EXPECT_NE(text.find("gw, gy = grad(loss, w, y)\n"), std::string::npos) << text;
  // Updates print after every op, in written order.
  EXPECT_NE(text.find("nw = sub(w, nm)\nupdate m = nm\nupdate w = nw\noutput loss\n"), std::string::npos)
      << text;
  Program again = parse_ok(text);
  EXPECT_TRUE(again == p);
  EXPECT_EQ(print_program(again), text);
  // A tensor may still be named `update` or `grad`.
  Program named = parse_ok("tracecache 1\ninput g : f32[2] = full(1)\nupdate = neg(g)\ngrad = exp(update)\noutput grad\n");
  EXPECT_EQ(named.ops.size(), 2u);
  EXPECT_TRUE(named.updates.empty());
}

TEST(ProgramTrain, UpdateRulesAreParseErrors) {
  auto error = [](std::string_view body) {
    std::string text = "tracecache 1\nparam w : f32[2] = full(1)\nparam v : f32[2] = full(2)\n";
    text += body;
    Result<Program> p = parse_program(text, "t.trace");
    EXPECT_FALSE(p.is_ok()) << text;
    return p.is_ok() ? std::string() : p.status().message();
  };
  EXPECT_EQ(error("a = neg(w)\nupdate w = a\nupdate v = w\noutput a\n"),
            "t.trace:6:12: the new value of 'v' is param 'w', which is itself updated at line 5; name the "
            "value through an op");
  EXPECT_EQ(error("a = neg(w)\nupdate w = a\nupdate v = a\noutput a\n"),
            "t.trace:6:12: 'a' is already the new value of 'w' (line 5); each update needs its own value");
  EXPECT_EQ(error("a = neg(w)\nupdate w = a\noutput w\n"),
            "t.trace:6:8: param 'w' is updated at line 5: output its new value 'a' instead");
  EXPECT_EQ(error("a = neg(w)\nupdate a = w\noutput a\n"),
            "t.trace:5:8: 'a' is not a param: only params can be updated");
  EXPECT_EQ(error("update w = nope\noutput w\n"), "t.trace:4:12: undefined name 'nope'");
  EXPECT_EQ(error("update w = neg(v)\noutput v\n"),
            "t.trace:4:12: update takes a tensor name; write 't = neg(...)' on its own line, then 'update w = t'");
  EXPECT_EQ(error("l = sum(w)\ng = grad(l)\noutput g\n"),
            "t.trace:5:5: grad takes the loss and at least one tensor to differentiate it by: grad(LOSS, X1, X2, ...)");
  EXPECT_EQ(error("l = sum(w)\ng = grad(l, w, keepdim=true)\noutput g\n"),
            "t.trace:5:16: grad takes no attributes: write grad(LOSS, X1, X2, ...)");
  EXPECT_EQ(error("l = sum(w)\ng = grad(l, 2)\noutput g\n"),
            "t.trace:5:13: expected a tensor name (grad(LOSS, X1, X2, ...) takes tensor names only), found '2'");
}

// d sum(w * x) / d w = x and / d (w * x) = 1: a param and an intermediate.
TEST(ProgramTrain, GradOfAParamAndAnIntermediate) {
  Program p = parse_ok(R"(tracecache 1
param w : f32[3] = full(2)
input x : f32[3] = uniform(seed=3, low=1, high=2)
y = mul(w, x)
loss = sum(y)
gw, gy = grad(loss, w, y)
output x, gw, gy
)");
  Result<std::vector<StepResult>> r = run_reference(p, 2);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  for (const StepResult& s : *r) {
    EXPECT_EQ(values(s.outputs[1].second), values(s.outputs[0].second));
    EXPECT_EQ(values(s.outputs[2].second), (std::vector<double>{1, 1, 1}));
  }
}

// Two grad statements on one loss: the first keeps the tape for the second.
TEST(ProgramTrain, TwoGradStatementsWalkOneTape) {
  Program p = parse_ok(R"(tracecache 1
param w : f32[2] = full(3)
y = mul(w, w)
loss = sum(y)
g1 = grad(loss, w)
g2 = grad(loss, w)
output g1, g2
)");
  Result<std::vector<StepResult>> r = run_reference(p, 1);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(values((*r)[0].outputs[0].second), (std::vector<double>{6, 6}));
  EXPECT_EQ(values((*r)[0].outputs[1].second), (std::vector<double>{6, 6}));
}

TEST(ProgramTrain, UpdatesTakeEffectFromTheNextStep) {
  Program p = parse_ok(R"(tracecache 1
param w : f32[2] = full(1)
param k : f32[] = full(10)
nw = add(w, k)
nk = mul(k, 0.5)
update w = nw
update k = nk
output nw
)");
  Result<std::vector<StepResult>> r = run_reference(p, 3);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(values((*r)[0].outputs[0].second), (std::vector<double>{11, 11}));
  EXPECT_EQ(values((*r)[1].outputs[0].second), (std::vector<double>{16, 16}));
  EXPECT_EQ(values((*r)[2].outputs[0].second), (std::vector<double>{18.5, 18.5}));
}

// An update's value that is also an output: the output a step returned keeps its value after
// later steps, in every mode (the donation of the param's storage in lazy mode never writes
// into a buffer the caller still holds).
TEST(ProgramTrain, AnOutputThatIsAnUpdateValueKeepsItsValue) {
  Program p = parse_ok(R"(tracecache 1
param w : f32[4] = full(1)
nw = add(w, 1)
update w = nw
output nw
)");
  for (SessionMode mode : {SessionMode::kEager, SessionMode::kLazy, SessionMode::kOnce}) {
    Metrics metrics;
    ProgramSessionOptions options;
    options.session.mode = mode;
    options.session.metrics = &metrics;
    Result<std::unique_ptr<ProgramSession>> s = ProgramSession::create(p, options);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    std::vector<BufferRef> kept;
    for (int step = 0; step < 4; ++step) {
      Result<ProgramSession::PreparedStep> prepared = (*s)->prepare(step);
      ASSERT_TRUE(prepared.is_ok()) << prepared.status().to_string();
      Result<std::vector<BufferRef>> outs = (*s)->run(*prepared);
      ASSERT_TRUE(outs.is_ok()) << outs.status().to_string();
      kept.push_back((*outs)[0]);
    }
    for (int step = 0; step < 4; ++step) {
      EXPECT_EQ(values(kept[static_cast<size_t>(step)]), std::vector<double>(4, 2.0 + step))
          << static_cast<int>(mode) << " step " << step;
    }
  }
}

// A hand-built program that breaks what the parser guarantees gets an error, not a crash.
TEST(ProgramTrain, HandBuiltGradStatementsAreCheckedByTheRunner) {
  Program p = parse_ok("tracecache 1\nparam w : f32[2] = full(1)\nl = sum(w)\ng = grad(l, w)\noutput g\n");
  p.ops[1].more_results.push_back(ResultRef{"h", {}});
  Result<std::vector<StepResult>> r = run_reference(p, 1);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("one result per tensor after the loss"), std::string::npos)
      << r.status().message();
  EXPECT_FALSE(check_program(p).is_ok());
}

// An op without a gradient rule on the way from the loss: grad()'s error, at the statement.
TEST(ProgramTrain, GradErrorsPointAtTheStatement) {
  Program p = parse_ok(R"(tracecache 1
param w : f32[1, 1, 2, 2] = full(1)
m = adaptive_avg_pool2d_grad(w, input_size=[4, 4])
loss = sum(m)
gw = grad(loss, w)
output gw
)");
  ASSERT_TRUE(check_program(p).is_ok());
  Result<std::vector<StepResult>> r = run_reference(p, 1);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message().rfind("t.trace:5:6: grad: op 'adaptive_avg_pool2d_grad' is not differentiable", 0), 0u)
      << r.status().message();
}

// In lazy mode a training step is one graph whose outputs are the program's outputs and the
// updated params, each update donating its param's storage; no forward intermediate leaks out.
TEST(ProgramTrain, LazyStepIsOneGraphOfOutputsAndDonatedUpdates) {
  Result<Program> p = load_program((fs::path(TRACECACHE_SOURCE_DIR) / "fixtures/programs/train_mlp.trace").string());
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  RecordingExecutor executor;
  LazyContext ctx(&executor);
  Result<std::vector<StepResult>> r = run_program(*p, ctx, 2);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(executor.graphs().size(), 2u);
  for (const RecordedGraph& g : executor.graphs()) {
    EXPECT_EQ(g.graph.graph.outputs().size(), p->outputs.size() + p->updates.size());
    EXPECT_EQ(g.graph.graph.donations().size(), p->updates.size());
  }
  EXPECT_EQ((*r)[0].graph_keys, (*r)[1].graph_keys);
}

// ProgramSession in eager, lazy and once mode on the training fixture: the same losses (the
// update path of each mode: assign, assign with donation, outputs fed back as arguments), the
// loss falls, once mode traces once.
TEST(ProgramTrain, SessionModesAgreeAndTheLossFalls) {
  Result<Program> p = load_program((fs::path(TRACECACHE_SOURCE_DIR) / "fixtures/programs/train_mlp.trace").string());
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  constexpr int kSteps = 12;
  std::vector<std::vector<double>> losses;
  for (SessionMode mode : {SessionMode::kEager, SessionMode::kLazy, SessionMode::kOnce}) {
    Metrics metrics;
    ProgramSessionOptions options;
    options.session.mode = mode;
    options.session.metrics = &metrics;
    Result<std::unique_ptr<ProgramSession>> s = ProgramSession::create(*p, options);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    std::vector<double> l;
    for (int step = 0; step < kSteps; ++step) {
      Result<ProgramSession::PreparedStep> prepared = (*s)->prepare(step);
      ASSERT_TRUE(prepared.is_ok()) << prepared.status().to_string();
      Result<std::vector<BufferRef>> outs = (*s)->run(*prepared);
      ASSERT_TRUE(outs.is_ok()) << outs.status().to_string();
      ASSERT_EQ(outs->size(), 1u);
      l.push_back((*outs)[0]->element_as_double(0));
    }
    if (mode == SessionMode::kOnce) {
      ASSERT_NE((*s)->function(), nullptr);
      EXPECT_EQ((*s)->function()->stats().traces, 1);
      EXPECT_EQ((*s)->function()->stats().calls, kSteps);
    }
    if (mode == SessionMode::kLazy) {
      const std::vector<GraphKey>& keys = (*s)->executed_keys();
      ASSERT_EQ(keys.size(), static_cast<size_t>(kSteps));
      for (const GraphKey& k : keys) EXPECT_EQ(k, keys[0]);
    }
    losses.push_back(std::move(l));
  }
  for (size_t m = 1; m < losses.size(); ++m) {
    for (int step = 0; step < kSteps; ++step) {
      EXPECT_NEAR(losses[m][step], losses[0][step], 1e-5 * std::fabs(losses[0][step])) << m << " " << step;
    }
  }
  const std::vector<double>& l = losses[0];
  EXPECT_LT((l[kSteps - 1] + l[kSteps - 2] + l[kSteps - 3]) / 3, 0.85 * (l[0] + l[1] + l[2]) / 3);
}

// The convnet (conv2d, batch statistics, max pool, Adam) and transformer (layer_norm, attention,
// AdamW, clipping) training fixtures: they parse, round-trip, type-check, and their loss falls to
// under half its start over 20 steps on the reference evaluator (each fits one fixed batch).
TEST(ProgramTrain, ConvnetAndTransformerFixturesLearn) {
  for (const char* name : {"train_convnet.trace", "train_transformer.trace"}) {
    const fs::path f = fs::path(TRACECACHE_SOURCE_DIR) / "fixtures/programs" / name;
    SCOPED_TRACE(f.string());
    Result<Program> p = load_program(f.string());
    ASSERT_TRUE(p.is_ok()) << p.status().to_string();
    ASSERT_TRUE(check_program(*p).is_ok()) << check_program(*p).to_string();
    const std::string text = print_program(*p);
    Result<Program> again = parse_program(text, "printed.trace");
    ASSERT_TRUE(again.is_ok()) << again.status().to_string();
    EXPECT_TRUE(*again == *p);
    Result<std::vector<StepResult>> r = run_reference(*p);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    ASSERT_EQ(r->size(), 20u);
    auto loss = [&](size_t step) { return (*r)[step].outputs[0].second->element_as_double(0); };
    const double first = (loss(0) + loss(1) + loss(2)) / 3, last = (loss(17) + loss(18) + loss(19)) / 3;
    EXPECT_TRUE(std::isfinite(last));
    EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last;
  }
}

}  // namespace
}  // namespace tracecache
