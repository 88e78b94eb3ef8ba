#include "capture/trace/losses.h"

#include <fmt/format.h>

#include "capture/trace/autograd.h"

namespace tracecache {

namespace {

[[noreturn]] void fail(std::string_view loss, const std::string& message) {
  throw Error(invalid_argument(fmt::format("{}: {}", loss, message)));
}

std::string describe(const Tensor& t) { return type_to_string({t.dtype(), t.shape()}); }

void check_defined(std::string_view loss, const Tensor& t, std::string_view role) {
  if (!t.defined()) fail(loss, fmt::format("the {} is an undefined tensor", role));
}

// REQUIRES (checked): x f32 [N, C], labels i32/i64 [N].
void check_classification(std::string_view loss, const Tensor& x, std::string_view role, const Tensor& labels) {
  check_defined(loss, x, role);
  check_defined(loss, labels, "labels");
  if (x.dtype() != DType::kF32 || x.rank() != 2) {
    fail(loss, fmt::format("the {} must be f32 [N, C], got {}", role, describe(x)));
  }
  if ((labels.dtype() != DType::kI32 && labels.dtype() != DType::kI64) || labels.rank() != 1 ||
      labels.shape()[0] != x.shape()[0]) {
    fail(loss, fmt::format("the labels must be i32 or i64 [{}] (one class index per row of the {} {}), got {}",
                           x.shape()[0], role, describe(x), describe(labels)));
  }
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target) {
  check_defined("mse_loss", input, "input");
  check_defined("mse_loss", target, "target");
  if (!is_floating(input.dtype()) || !is_floating(target.dtype()) || input.shape() != target.shape()) {
    fail("mse_loss", fmt::format("input and target must be floating tensors of one shape, got {} and {}",
                                 describe(input), describe(target)));
  }
  const Tensor d = sub(input, target);
  return mean(mul(d, d));
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& labels) {
  check_classification("nll_loss", log_probs, "log-probabilities", labels);
  LazyContext& ctx = log_probs.context();
  const int64_t n = log_probs.shape()[0], classes = log_probs.shape()[1];
  Tensor one_hot;
  {
    NoGradGuard no_tape(ctx);
    const Tensor rows = reshape(labels, {n, 1});
    one_hot = cast(eq(rows, arange(ctx, 0, static_cast<double>(classes), 1, labels.dtype())), DType::kF32);
  }
  return neg(mean(sum(mul(log_probs, one_hot), {1})));
}

Tensor log_softmax_differentiable(const Tensor& x) {
  check_defined("log_softmax_differentiable", x, "input");
  if (x.dtype() != DType::kF32 || x.rank() != 2) {
    fail("log_softmax_differentiable", fmt::format("the input must be f32 [N, C], got {}", describe(x)));
  }
  Tensor m;
  {
    NoGradGuard no_tape(x.context());
    m = max(x, {1}, true);
  }
  const Tensor shifted = sub(x, m);
  return sub(shifted, log(sum(exp(shifted), {1}, true)));
}

Tensor cross_entropy(const Tensor& logits, const Tensor& labels) {
  check_classification("cross_entropy", logits, "logits", labels);
  return nll_loss(log_softmax_differentiable(logits), labels);
}

}  // namespace tracecache
