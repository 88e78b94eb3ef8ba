// Integer and bool operands of differentiable ops (capture/ops/grad_elementwise.cc): the
// gradient flows to the f32 operands around them, and asking for theirs is an error that names
// the tensor's type. The rules' values against PyTorch: tests/grad (cli.grad_torch).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "capture/reference/reference.h"
#include "capture/trace/autograd.h"
#include "tests/test_buffers.h"

namespace tracecache {
namespace {

void expect_grad_error(const Tensor& loss, const Tensor& wrt, const std::string& type) {
  try {
    (void)grad(loss, {wrt}, {.retain_graph = true});
    ADD_FAILURE() << "grad() with respect to a " << type << " tensor did not throw";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(type), std::string::npos) << message;
    EXPECT_NE(message.find("integer and bool values are not differentiable"), std::string::npos) << message;
  }
}

TEST(GradElementwise, IntegerAndBoolOperandsGetNoGradientAndAskingIsAnError) {
  ReferenceExecutor reference;
  LazyContext ctx(&reference);
  Tensor w = ctx.from_buffer(test::f32({2}, {0.5f, -2})).set_requires_grad(true);
  Tensor i = ctx.from_buffer(test::i64({2}, {3, 5}));
  Tensor c = ctx.from_buffer(test::make<bool>(DType::kBool, {2}, {true, false}));
  // d/dw sum(where(c, w * i, w)) = c ? i : 1
  Tensor loss = sum(where(c, mul(w, i), w));
  expect_grad_error(loss, i, "i64[2]");
  expect_grad_error(loss, c, "bool[2]");
  std::vector<Tensor> g = grad(loss, {w});
  ctx.mark_step();
  EXPECT_EQ(g[0].to_vector<float>(), (std::vector<float>{3, 1}));
}

}  // namespace
}  // namespace tracecache
