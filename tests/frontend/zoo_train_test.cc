// Zoo models in training mode (frontend/zoo/program.h, train_program): the programs they
// become, every small model training in lazy mode, the three modes agreeing, the loss falling.
// The comparison with PyTorch is tests/cli/zoo_train.sh.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "capture/core/metrics.h"
#include "frontend/program/program.h"
#include "frontend/program/program_runner.h"
#include "frontend/zoo/model.h"
#include "frontend/zoo/program.h"
#include "replay/engine/program_session.h"

namespace tracecache::zoo {
namespace {

ModelSpec small_model(std::string_view name, int64_t batch = 4) {
  ModelOptions o;
  o.preset = Preset::kSmall;
  o.batch = batch;
  return make_model(name, o).value_or_throw();
}

struct Trained {
  std::vector<double> losses;
  std::vector<GraphKey> keys;  // lazy
  int64_t traces = 0;          // once
};

Trained train(const Program& p, SessionMode mode, int steps) {
  Metrics metrics;
  ProgramSessionOptions options;
  options.session.mode = mode;
  options.session.metrics = &metrics;
  std::unique_ptr<ProgramSession> s = ProgramSession::create(p, options).value_or_throw();
  Trained t;
  for (int step = 0; step < steps; ++step) {
    ProgramSession::PreparedStep prepared = s->prepare(step).value_or_throw();
    std::vector<BufferRef> outs = s->run(prepared).value_or_throw();
    EXPECT_EQ(outs.size(), 1u);
    t.losses.push_back(outs[0]->element_as_double(0));
  }
  t.keys = s->executed_keys();
  if (s->function()) t.traces = s->function()->stats().traces;
  return t;
}

const OpStmt* grad_statement(const Program& p) {
  for (const OpStmt& op : p.ops) {
    if (op.is_grad) return &op;
  }
  return nullptr;
}

// The program differentiates the loss by every parameter the model has, updates each of them
// and each running statistic, and keeps the optimizer's state in zero-initialized params.
TEST(ZooTrain, TheProgramUpdatesEveryParameterAndRunningStatistic) {
  ModelSpec spec = small_model("resnet18");
  TrainOptions t;
  t.optimizer = Optimizer::kAdam;
  Program p = train_program(spec, t).value_or_throw();
  ASSERT_TRUE(check_program(p).is_ok()) << check_program(p).to_string();
  Result<Program> again = parse_program(print_program(p), "again.trace");
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_TRUE(*again == p);

  const OpStmt* g = grad_statement(p);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->operands[0].name, "loss");
  std::set<std::string> differentiated;
  for (size_t i = 1; i < g->operands.size(); ++i) differentiated.insert(g->operands[i].name);
  std::set<std::string> updated;
  for (const UpdateStmt& u : p.updates) updated.insert(u.param);
  int parameters = 0, running = 0;
  for (const TensorSpec& ts : spec.tensors) {
    const std::string name = program_name(ts.name);
    if (ts.role == TensorSpec::Role::kParameter) {
      ++parameters;
      EXPECT_TRUE(differentiated.count(name)) << name;
      EXPECT_TRUE(updated.count(name)) << name;
      for (const char* state : {"exp_avg_", "exp_avg_sq_"}) {
        const TensorDecl* d = p.find_tensor(state + name);
        ASSERT_NE(d, nullptr) << state << name;
        EXPECT_EQ(d->init.kind, Generator::Kind::kFull);
        EXPECT_EQ(d->init.value, 0);
      }
    } else if (ts.dtype == DType::kF32) {
      ++running;
      EXPECT_TRUE(updated.count(name)) << name;
    }
  }
  EXPECT_EQ(static_cast<int>(differentiated.size()), parameters);
  // Every parameter with its two moments, every running statistic, the two beta powers.
  EXPECT_EQ(static_cast<int>(p.updates.size()), 3 * parameters + running + 2);
  // One fixed batch: the image and the labels are params; lr is an input (a lifted scalar).
  EXPECT_EQ(p.find_tensor("image")->role, TensorDecl::Role::kParam);
  EXPECT_EQ(p.find_tensor("labels")->dtype, DType::kI64);
  EXPECT_EQ(p.find_tensor("lr")->role, TensorDecl::Role::kInput);
  EXPECT_EQ(program_output_names(p), (std::vector<std::string>{"loss"}));
}

// A model with dropout reads a fresh seed every step; one without has no seed input.
TEST(ZooTrain, DropoutDrawsItsMaskFromAPerStepSeed) {
  Program alexnet = train_program(small_model("alexnet"), {}).value_or_throw();
  const TensorDecl* seed = alexnet.find_tensor("dropout_seed");
  ASSERT_NE(seed, nullptr);
  EXPECT_EQ(seed->role, TensorDecl::Role::kInput);
  EXPECT_EQ(seed->init.kind, Generator::Kind::kUniform);
  int masks = 0;
  for (const OpStmt& op : alexnet.ops) masks += !op.is_grad && op.op == OpKind::kDropoutMask;
  EXPECT_EQ(masks, 2);
  Program resnet = train_program(small_model("resnet18"), {}).value_or_throw();
  EXPECT_EQ(resnet.find_tensor("dropout_seed"), nullptr);
}

// Every zoo model trains 3 steps at the small preset in lazy mode: finite losses, one graph.
TEST(ZooTrain, EverySmallModelTrainsInLazyMode) {
  for (const ModelInfo& info : zoo_models()) {
    SCOPED_TRACE(info.name);
    TrainOptions t;
    t.optimizer = Optimizer::kAdamW;
    t.lr = 1e-3;
    t.weight_decay = 0.01;
    Program p = train_program(small_model(info.name), t).value_or_throw();
    Trained r = train(p, SessionMode::kLazy, 3);
    ASSERT_EQ(r.losses.size(), 3u);
    for (double l : r.losses) EXPECT_TRUE(std::isfinite(l)) << l;
    ASSERT_EQ(r.keys.size(), 3u);
    EXPECT_EQ(r.keys[0], r.keys[2]);
  }
}

// Eager, lazy and once mode give the same losses (mobilenet_v2: batch norm and dropout), once
// mode traces once; resnet18 with SGD and momentum memorizes its batch.
TEST(ZooTrain, ModesAgreeAndTheLossFalls) {
  TrainOptions sgd;
  sgd.momentum = 0.9;
  sgd.nesterov = true;
  sgd.weight_decay = 1e-4;
  sgd.lr = 0.05;
  Program p = train_program(small_model("mobilenet_v2"), sgd).value_or_throw();
  Trained eager = train(p, SessionMode::kEager, 3);
  Trained lazy = train(p, SessionMode::kLazy, 3);
  Trained once = train(p, SessionMode::kOnce, 3);
  EXPECT_EQ(once.traces, 1);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(lazy.losses[i], eager.losses[i], 1e-5 * eager.losses[i]) << i;
    EXPECT_NEAR(once.losses[i], eager.losses[i], 1e-5 * eager.losses[i]) << i;
  }

  sgd.nesterov = false;
  sgd.weight_decay = 0;
  Program resnet = train_program(small_model("resnet18", 8), sgd).value_or_throw();
  Trained r = train(resnet, SessionMode::kLazy, 20);
  EXPECT_LT(r.losses.back(), r.losses.front() / 10) << fmt::format("{}", fmt::join(r.losses, " "));
  for (size_t i = 1; i < r.losses.size(); ++i) EXPECT_EQ(r.keys[i], r.keys[0]);
}

TEST(ZooTrain, BadHyperparametersAndShapesAreClearErrors) {
  ModelSpec spec = small_model("resnet18");
  TrainOptions t;
  t.nesterov = true;
  Result<Program> p = train_program(spec, t);
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("nesterov needs a momentum"), std::string::npos);
  t = {};
  t.optimizer = Optimizer::kAdam;
  t.beta1 = 1;
  EXPECT_EQ(train_program(spec, t).status().code(), StatusCode::kInvalidArgument);
  t = {};
  t.lr = std::nan("");
  EXPECT_EQ(train_program(spec, t).status().code(), StatusCode::kInvalidArgument);
  // Batch norm over one value per channel (layer4 is 1x1 at batch 1): PyTorch refuses it too.
  p = train_program(small_model("resnet18", 1), {});
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("more than 1 value per channel"), std::string::npos)
      << p.status().to_string();
  EXPECT_EQ(parse_optimizer("adamw"), Optimizer::kAdamW);
  EXPECT_FALSE(parse_optimizer("rmsprop").has_value());
}

}  // namespace
}  // namespace tracecache::zoo
