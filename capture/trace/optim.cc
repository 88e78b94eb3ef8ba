#include "capture/trace/optim.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "capture/trace/autograd.h"

namespace tracecache {

namespace {

[[noreturn]] void fail(std::string_view where, const std::string& message) {
  throw Error(invalid_argument(fmt::format("{}: {}", where, message)));
}

void require(bool ok, std::string_view where, std::string_view what, double value) {
  if (!ok) fail(where, fmt::format("invalid {}: {}", what, value));
}

}  // namespace

Optimizer::Optimizer(LazyContext& ctx, std::vector<Tensor> params, double lr, std::string_view name)
    : ctx_(ctx), params_(std::move(params)), lr_(lr), name_(name) {
  require(std::isfinite(lr) && lr >= 0, name_, "learning rate", lr);
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    if (!p.defined()) fail(name_, fmt::format("parameter {} is an undefined tensor", i));
    if (&p.context() != &ctx_) fail(name_, fmt::format("parameter {} belongs to another LazyContext", i));
    if (p.dtype() != DType::kF32) {
      fail(name_, fmt::format("parameter {} is {}; parameters must be f32", i, type_to_string({p.dtype(), p.shape()})));
    }
  }
}

void Optimizer::set_lr(double lr) {
  require(std::isfinite(lr) && lr >= 0, name_, "learning rate", lr);
  lr_ = lr;
}

Tensor Optimizer::fed(double value) const {
  HostBuffer b(DType::kF32, Shape{});
  b.data<float>()[0] = static_cast<float>(value);
  return ctx_.from_buffer(std::move(b));
}

void Optimizer::check_grads(std::span<const Tensor> grads) const {
  if (grads.size() != params_.size()) {
    fail(name_, fmt::format("step() got {} gradients for {} parameters", grads.size(), params_.size()));
  }
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    const Tensor& p = params_[i];
    if (!g.defined() || &g.context() != &ctx_ || g.dtype() != p.dtype() || g.shape() != p.shape()) {
      fail(name_, fmt::format("gradient {} must be a tensor of this context of its parameter's type {}, got {}", i,
                              type_to_string({p.dtype(), p.shape()}),
                              g.defined() ? type_to_string({g.dtype(), g.shape()}) : "an undefined tensor"));
    }
  }
}

std::vector<Tensor> Optimizer::zeros_like_params() const {
  std::vector<Tensor> zeros;
  zeros.reserve(params_.size());
  for (const Tensor& p : params_) {
    HostBuffer b(DType::kF32, p.shape());
    std::fill_n(b.data<float>(), b.numel(), 0.0f);
    zeros.push_back(ctx_.from_buffer(std::move(b)));
  }
  return zeros;
}

// ---- SGD ---------------------------------------------------------------------------------------

SGD::SGD(LazyContext& ctx, std::vector<Tensor> params, SgdOptions options)
    : Optimizer(ctx, std::move(params), options.lr, "SGD"), options_(options) {
  require(options.momentum >= 0, name_, "momentum value", options.momentum);
  require(options.weight_decay >= 0, name_, "weight_decay value", options.weight_decay);
  require(std::isfinite(options.dampening), name_, "dampening value", options.dampening);
  if (options.nesterov && (options.momentum <= 0 || options.dampening != 0)) {
    fail(name_, "nesterov momentum requires a momentum and zero dampening");
  }
  if (options.momentum != 0) buffers_ = zeros_like_params();
}

void SGD::step(std::span<const Tensor> grads) {
  check_grads(grads);
  NoGradGuard no_tape(ctx_);
  const Tensor lr = fed(lr_);
  // PyTorch starts a buffer as a copy of the first gradient: 0 * momentum + 1 * grad on the zero
  // buffer, the same bits, with the factors fed so that the first step's graph is every step's.
  const bool first = steps_ == 0;
  Tensor buffer_decay, grad_weight;
  if (options_.momentum != 0) {
    buffer_decay = fed(first ? 0.0 : options_.momentum);
    grad_weight = fed(first ? 1.0 : 1.0 - options_.dampening);
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor g = grads[i];
    if (options_.weight_decay != 0) g = add(g, mul(p, scalar(ctx_, options_.weight_decay)));
    if (options_.momentum != 0) {
      Tensor& buf = buffers_[i];
      buf.assign(add(mul(buf, buffer_decay), mul(g, grad_weight)));
      g = options_.nesterov ? add(g, mul(buf, scalar(ctx_, options_.momentum))) : buf;
    }
    p.assign(sub(p, mul(g, lr)));
  }
  ++steps_;
}

// ---- Adam, AdamW -------------------------------------------------------------------------------

Adam::Adam(LazyContext& ctx, std::vector<Tensor> params, AdamOptions options)
    : Adam(ctx, std::move(params), options, false, "Adam") {}

Adam::Adam(LazyContext& ctx, std::vector<Tensor> params, AdamOptions options, bool decoupled, std::string_view name)
    : Optimizer(ctx, std::move(params), options.lr, name), options_(options), decoupled_(decoupled) {
  require(options.eps >= 0, name_, "epsilon value", options.eps);
  require(options.beta1 >= 0 && options.beta1 < 1, name_, "beta parameter at index 0", options.beta1);
  require(options.beta2 >= 0 && options.beta2 < 1, name_, "beta parameter at index 1", options.beta2);
  require(options.weight_decay >= 0, name_, "weight_decay value", options.weight_decay);
  exp_avg_ = zeros_like_params();
  exp_avg_sq_ = zeros_like_params();
}

AdamW::AdamW(LazyContext& ctx, std::vector<Tensor> params, AdamWOptions o)
    : Adam(ctx, std::move(params), {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay}, true, "AdamW") {}

void Adam::step(std::span<const Tensor> grads) {
  check_grads(grads);
  NoGradGuard no_tape(ctx_);
  const double t = static_cast<double>(steps_ + 1);
  // As PyTorch: in double on the host, from the step count.
  const double bias_correction1 = 1 - std::pow(options_.beta1, t);
  const double bias_correction2 = 1 - std::pow(options_.beta2, t);
  const Tensor step_size = fed(lr_ / bias_correction1);
  const Tensor bias_correction2_sqrt = fed(std::sqrt(bias_correction2));
  Tensor param_decay;
  if (decoupled_) param_decay = fed(1 - lr_ * options_.weight_decay);
  const Tensor beta1 = scalar(ctx_, options_.beta1), beta2 = scalar(ctx_, options_.beta2);
  const Tensor one_minus_beta1 = scalar(ctx_, 1 - options_.beta1), one_minus_beta2 = scalar(ctx_, 1 - options_.beta2);
  const Tensor eps = scalar(ctx_, options_.eps);
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor g = grads[i];
    Tensor base = p;
    if (decoupled_) {
      base = mul(p, param_decay);
    } else if (options_.weight_decay != 0) {
      g = add(g, mul(p, scalar(ctx_, options_.weight_decay)));
    }
    Tensor& m = exp_avg_[i];
    Tensor& v = exp_avg_sq_[i];
    m.assign(add(mul(m, beta1), mul(g, one_minus_beta1)));
    v.assign(add(mul(v, beta2), mul(mul(g, g), one_minus_beta2)));
    const Tensor denom = add(div(sqrt(v), bias_correction2_sqrt), eps);
    p.assign(sub(base, mul(div(m, denom), step_size)));
  }
  ++steps_;
}

// ---- clip_grad_norm_ ---------------------------------------------------------------------------

Tensor clip_grad_norm_(std::span<Tensor> grads, double max_norm) {
  if (grads.empty()) fail("clip_grad_norm_", "no gradients");
  require(max_norm >= 0, "clip_grad_norm_", "max_norm", max_norm);
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    if (!g.defined() || &g.context() != &grads[0].context() || g.dtype() != DType::kF32) {
      fail("clip_grad_norm_", fmt::format("gradient {} must be an f32 tensor of the first one's context", i));
    }
  }
  LazyContext& ctx = grads[0].context();
  NoGradGuard no_tape(ctx);
  Tensor squares;
  for (const Tensor& g : grads) {
    const Tensor s = sum(mul(g, g));
    squares = squares.defined() ? add(squares, s) : s;
  }
  const Tensor total = sqrt(squares);
  const Tensor coef = minimum(div(scalar(ctx, max_norm), add(total, 1e-6)), 1.0);
  for (Tensor& g : grads) g.assign(mul(g, coef));
  return total;
}

}  // namespace tracecache
