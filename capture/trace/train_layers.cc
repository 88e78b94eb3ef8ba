#include "capture/trace/train_layers.h"

#include <fmt/format.h>

#include "capture/ops/ops.h"
#include "capture/trace/autograd.h"

namespace tracecache {

namespace {

[[noreturn]] void fail(std::string_view function, const std::string& message) {
  throw Error(invalid_argument(fmt::format("{}: {}", function, message)));
}

}  // namespace

Tensor dropout_mask(const Tensor& seed, const Shape& shape, double p, int64_t salt) {
  if (!seed.defined()) fail("dropout_mask", "the seed is an undefined tensor");
  return seed.context().record(OpKind::kDropoutMask, {seed},
                               {AttrValue::of_ints(IntList(shape)), AttrValue::of_float(p), AttrValue::of_int(salt)});
}

Tensor dropout_train(const Tensor& x, double p, const Tensor& seed, int64_t salt) {
  if (!x.defined()) fail("dropout_train", "the input is an undefined tensor");
  return mul(x, dropout_mask(seed, x.shape(), p, salt));
}

Tensor batch_norm_train(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                        Tensor& running_var, double momentum, double eps) {
  constexpr std::string_view kName = "batch_norm_train";
  if (!x.defined()) fail(kName, "the input is an undefined tensor");
  const Shape& s = x.shape();
  if (s.rank() < 2 || x.dtype() != DType::kF32) {
    fail(kName, fmt::format("the input must be f32 [N, C, ...], got {}", type_to_string({x.dtype(), s})));
  }
  const int64_t channels = s[1];
  const Tensor* per_channel[] = {&weight, &bias, &running_mean, &running_var};
  const char* names[] = {"weight", "bias", "running_mean", "running_var"};
  for (int k = 0; k < 4; ++k) {
    const Tensor& t = *per_channel[k];
    if (t.defined() && (t.dtype() != DType::kF32 || t.shape() != Shape{channels})) {
      fail(kName, fmt::format("{} must be f32 [{}] like the input's channels, got {}", names[k], channels,
                              type_to_string({t.dtype(), t.shape()})));
    }
  }
  if (running_mean.defined() != running_var.defined()) {
    fail(kName, "running_mean and running_var must both be given or both be undefined");
  }
  IntList axes{0};
  Shape stat_shape{1, channels};
  int64_t n = s[0];
  for (int d = 2; d < s.rank(); ++d) {
    axes.push_back(d);
    stat_shape.push_back(1);
    n *= s[d];
  }
  if (n < 2) {
    fail(kName, fmt::format("expected more than 1 value per channel when training, got input {}",
                            type_to_string({x.dtype(), s})));
  }
  LazyContext& ctx = x.context();
  const Tensor mu = mean(x, axes, true);
  const Tensor centered = sub(x, mu);
  const Tensor var = mean(mul(centered, centered), axes, true);
  // 1 / sqrt(var + eps) through exp and log, whose gradient rules exist.
  const Tensor inv_std = exp(mul(log(add(var, scalar(ctx, eps))), scalar(ctx, -0.5)));
  Tensor y = mul(centered, inv_std);
  IntList stat_dims(stat_shape);
  if (weight.defined()) y = mul(y, reshape(weight, stat_dims));
  if (bias.defined()) y = add(y, reshape(bias, stat_dims));
  if (running_mean.defined()) {
    NoGradGuard no_tape(ctx);
    const IntList flat{channels};
    const Tensor keep = scalar(ctx, 1 - momentum);
    const Tensor batch_mean = mul(reshape(mu, flat), scalar(ctx, momentum));
    const Tensor batch_var = mul(reshape(var, flat),
                                 scalar(ctx, momentum * static_cast<double>(n) / static_cast<double>(n - 1)));
    running_mean.assign(add(mul(running_mean, keep), batch_mean));
    running_var.assign(add(mul(running_var, keep), batch_var));
  }
  return y;
}

}  // namespace tracecache
