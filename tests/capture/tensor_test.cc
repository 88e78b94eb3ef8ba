// The lazy tensor API: nothing runs before a barrier, barriers and value reads materialize the
// right tensors, and bad ops fail at record time with messages naming the op and the shapes.
#include <gtest/gtest.h>

#include "capture/reference/reference.h"
#include "capture/trace/tensor.h"

namespace tracecache {
namespace {

class CountingExecutor final : public GraphExecutor {
 public:
  Result<std::vector<DataRef>> execute(const CanonicalGraph& g, std::vector<DataRef> params) override {
    ++runs;
    outputs_per_run.push_back(g.graph.outputs().size());
    return evaluate_reference(g.graph, std::span<const DataRef>(params));
  }
  int runs = 0;
  std::vector<size_t> outputs_per_run;
};

HostBuffer iota(Shape shape, float start = 0) {
  HostBuffer b(DType::kF32, shape);
  for (int64_t i = 0; i < b.numel(); ++i) b.data<float>()[i] = start + static_cast<float>(i);
  return b;
}

TEST(LazyTensor, NothingRunsBeforeABarrier) {
  CountingExecutor exec;
  LazyContext ctx(&exec);
  Tensor x = ctx.from_buffer(iota({2, 2}));
  Tensor y = add(mul(x, x), 1.0);
  EXPECT_FALSE(y.is_materialized());
  EXPECT_EQ(exec.runs, 0);
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_EQ(y.dtype(), DType::kF32);
  ctx.mark_step();
  EXPECT_EQ(exec.runs, 1);
  EXPECT_TRUE(y.is_materialized());
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 2, 5, 10}));
  EXPECT_EQ(exec.runs, 1) << "reading a materialized tensor runs nothing";
}

TEST(LazyTensor, MarkStepMaterializesEveryLiveTensorInOneGraph) {
  CountingExecutor exec;
  LazyContext ctx(&exec);
  Tensor x = ctx.from_buffer(iota({3}));
  Tensor a = exp(x);
  Tensor b = neg(x);
  { Tensor dead = tanh(x); }
  ctx.mark_step();
  ASSERT_EQ(exec.runs, 1);
  EXPECT_EQ(exec.outputs_per_run[0], 2u);
  EXPECT_TRUE(a.is_materialized());
  EXPECT_TRUE(b.is_materialized());
  EXPECT_EQ(ctx.pending_nodes(), 0u);
  ctx.mark_step();
  EXPECT_EQ(exec.runs, 1) << "a barrier with nothing pending runs nothing";
}

TEST(LazyTensor, ValueReadMaterializesOnlyThatTensor) {
  CountingExecutor exec;
  LazyContext ctx(&exec);
  Tensor x = ctx.from_buffer(iota({4}));
  Tensor s = sum(x);
  Tensor other = mul(x, 2.0);
  EXPECT_DOUBLE_EQ(s.item(), 6.0);
  EXPECT_EQ(exec.runs, 1);
  EXPECT_EQ(exec.outputs_per_run[0], 1u);
  EXPECT_FALSE(other.is_materialized());
  EXPECT_EQ(other.to_vector<float>(), (std::vector<float>{0, 2, 4, 6}));
}

TEST(LazyTensor, MaterializedValuesFeedTheNextStepAsParameters) {
  CountingExecutor exec;
  LazyContext ctx(&exec);
  Tensor w = ctx.from_buffer(iota({2}, 1));  // 1 2
  std::vector<GraphKey> keys;
  for (int step = 0; step < 3; ++step) {
    w = add(w, w);
    ctx.mark_step();
  }
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{8, 16}));
  ASSERT_EQ(ctx.executed_keys().size(), 3u);
  EXPECT_EQ(ctx.executed_keys()[0], ctx.executed_keys()[2]) << "same graph every step";
}

TEST(LazyTensor, ShapeMismatchFailsAtRecordTimeNamingOpAndShapes) {
  CountingExecutor exec;
  LazyContext ctx(&exec);
  Tensor a = ctx.from_buffer(iota({8, 4}));
  Tensor b = ctx.from_buffer(iota({3}));
  try {
    (void)add(a, b);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("'add'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32[8, 4]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32[3]"), std::string::npos) << msg;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  }
  EXPECT_THROW((void)matmul(a, a), Error);
  EXPECT_THROW((void)reshape(a, {5, -1}), Error);
  EXPECT_THROW((void)sum(a, {2}), Error);
  EXPECT_THROW((void)permute(a, {0, 0}), Error);
  EXPECT_THROW((void)concat(std::vector<Tensor>{a, b}, 0), Error);
  EXPECT_THROW((void)where(a, a, a), Error) << "condition must be bool";
  EXPECT_EQ(exec.runs, 0);
}

TEST(LazyTensor, TensorsOfAnotherContextAreRejected) {
  CountingExecutor exec;
  LazyContext c1(&exec), c2(&exec);
  Tensor a = c1.from_buffer(iota({2}));
  Tensor b = c2.from_buffer(iota({2}));
  EXPECT_THROW((void)add(a, b), Error);
  EXPECT_THROW((void)add(a, Tensor()), Error);
}

TEST(LazyTensor, ItemNeedsOneElement) {
  CountingExecutor exec;
  LazyContext ctx(&exec);
  Tensor a = ctx.from_buffer(iota({2}));
  EXPECT_THROW((void)a.item(), Error);
}

TEST(LazyTensor, ScalarOperandsTakeTheTensorsDtype) {
  CountingExecutor exec;
  LazyContext ctx(&exec);
  HostBuffer ib(DType::kI32, {2});
  ib.data<int32_t>()[0] = 3;
  ib.data<int32_t>()[1] = 4;
  Tensor i = ctx.from_buffer(std::move(ib));
  EXPECT_EQ(add(i, 2.0).dtype(), DType::kI32);
  EXPECT_EQ(add(i, 0.5).dtype(), DType::kF32);
  EXPECT_EQ(mul(ctx.from_buffer(iota({2})), 3.0).dtype(), DType::kF32);
  EXPECT_EQ(add(i, 2.0).to_vector<int32_t>(), (std::vector<int32_t>{5, 6}));
}

TEST(LazyTensor, CopiesShareOneValue) {
  CountingExecutor exec;
  LazyContext ctx(&exec);
  Tensor x = ctx.from_buffer(iota({2}));
  Tensor y = exp(x);
  Tensor y2 = y;
  ctx.mark_step();
  EXPECT_TRUE(y2.is_materialized());
  EXPECT_EQ(y.buffer().get(), y2.buffer().get());
}

TEST(LazyTensor, DeepChainsDoNotOverflowTheStack) {
  CountingExecutor exec;
  LazyContext ctx(&exec);
  Tensor x = ctx.from_buffer(iota({1}));
  Tensor h = x;
  for (int i = 0; i < 100000; ++i) h = add(h, x);
  EXPECT_DOUBLE_EQ(h.item(), 0.0);
  Tensor one = ctx.from_buffer(iota({1}, 1));
  h = one;
  for (int i = 0; i < 1000; ++i) h = add(h, one);
  EXPECT_DOUBLE_EQ(h.item(), 1001.0);
}

TEST(OpRegistry, EveryOpHasOneRowAndAReferenceKernel) {
  ASSERT_EQ(all_ops().size(), static_cast<size_t>(kOpCount));
  for (int i = 0; i < kOpCount; ++i) {
    const OpInfo& info = op_info(static_cast<OpKind>(i));
    EXPECT_EQ(static_cast<int>(info.kind), i);
    EXPECT_EQ(find_op(info.name), &info);
    EXPECT_LE(info.attrs.size(), kMaxOpAttrs) << info.name;
    if (info.kind != OpKind::kParameter) {
      EXPECT_NE(info.reference, nullptr) << info.name;
    }
  }
  EXPECT_EQ(find_op("no_such_op"), nullptr);
}

}  // namespace
}  // namespace tracecache
