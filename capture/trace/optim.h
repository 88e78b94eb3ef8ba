// Optimizers: SGD, Adam, AdamW and clip_grad_norm_, with PyTorch 1.13's semantics (the
// single-tensor, non-foreach, non-capturable code path of torch.optim).
//
// An optimizer holds its parameters (handles of the caller's tensors) and its state tensors
// (SGD's momentum buffers, Adam's exp_avg and exp_avg_sq), all on the device. step(grads)
// records the update as ordinary ops without a tape (NoGradGuard) and writes every parameter
// and state tensor in place with LazyContext::assign: in lazy and once mode the update joins
// the step's one graph (forward, backward, update), whose outputs donate the old storage, so
// the weights are never held twice; in eager mode the ops run at once.
//
// Every value that changes from step to step is a lifted scalar: a rank-0 f32 tensor input made
// from host data each step (from_buffer), never a baked constant. That holds the learning rate
// (set_lr: a schedule), Adam's bias corrections (the step count is counted on the host, where
// PyTorch reads it too, and 1 - beta^t is computed in double as PyTorch does) and SGD's
// first-step buffer initialization (PyTorch's `buf = clone(grad)` is buf = 0 * momentum + 1 * grad
// on a zero buffer, with the two factors fed). So every step records the same graph, and a
// schedule that changes the learning rate every step compiles once.
//
// Errors: constructors throw Error (kInvalidArgument) for a parameter that is undefined, not f32
// or of another context, or a hyperparameter PyTorch rejects (negative lr, momentum, weight
// decay or eps, betas outside [0, 1), nesterov without momentum or with dampening); step()
// throws Error when the gradients do not match the parameters in number or type.
// Thread-safety: as Tensor (one thread per context). Ownership: the context must outlive the
// optimizer; the optimizer shares its parameters' values with the caller's handles.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "capture/trace/tensor.h"

namespace tracecache {

// Applies one update to parameters from their gradients. See the header comment.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Records the update of every parameter from `grads` (one per parameter, in order, each of its
  // parameter's type), in place.
  virtual void step(std::span<const Tensor> grads) = 0;
  // The learning rate of the next step() (changes no graph). Throws Error if negative or not finite.
  void set_lr(double lr);
  double lr() const { return lr_; }
  // Steps taken so far.
  int64_t steps() const { return steps_; }
  const std::vector<Tensor>& params() const { return params_; }

 protected:
  Optimizer(LazyContext& ctx, std::vector<Tensor> params, double lr, std::string_view name);
  // A rank-0 f32 input holding `value` (a lifted scalar fed this step).
  Tensor fed(double value) const;
  // Throws Error unless `grads` matches the parameters.
  void check_grads(std::span<const Tensor> grads) const;
  // A zero tensor shaped like each parameter (state buffers), materialized.
  std::vector<Tensor> zeros_like_params() const;

  LazyContext& ctx_;
  std::vector<Tensor> params_;
  double lr_;
  int64_t steps_ = 0;
  std::string_view name_;
};

struct SgdOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

// torch.optim.SGD: g += weight_decay * p; with momentum, buf = momentum * buf + (1 - dampening) * g
// (buf = g on the first step), g = nesterov ? g + momentum * buf : buf; p -= lr * g.
class SGD final : public Optimizer {
 public:
  SGD(LazyContext& ctx, std::vector<Tensor> params, SgdOptions options);
  void step(std::span<const Tensor> grads) override;

 private:
  SgdOptions options_;
  std::vector<Tensor> buffers_;
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
};
// AdamW's defaults differ from Adam's in the weight decay only.
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

// torch.optim.Adam (amsgrad=False): at step t, g += weight_decay * p (Adam) or
// p *= 1 - lr * weight_decay (AdamW); m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2;
// p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps).
class Adam : public Optimizer {
 public:
  Adam(LazyContext& ctx, std::vector<Tensor> params, AdamOptions options);
  void step(std::span<const Tensor> grads) override;
  const std::vector<Tensor>& exp_avg() const { return exp_avg_; }
  const std::vector<Tensor>& exp_avg_sq() const { return exp_avg_sq_; }

 protected:
  Adam(LazyContext& ctx, std::vector<Tensor> params, AdamOptions options, bool decoupled, std::string_view name);

 private:
  AdamOptions options_;
  bool decoupled_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;
};

// torch.optim.AdamW: Adam with the weight decay applied to the parameter, not the gradient.
class AdamW final : public Adam {
 public:
  AdamW(LazyContext& ctx, std::vector<Tensor> params, AdamWOptions options);
};

// torch.nn.utils.clip_grad_norm_ (norm_type 2): total = sqrt(sum of every gradient's squares);
// every gradient is scaled in place (assign) by min(max_norm / (total + 1e-6), 1). Both are
// computed on the device, nothing is read back; returns the total norm (a rank-0 f32 tensor).
// Throws Error for an empty list, a non-floating gradient, or a negative max_norm.
Tensor clip_grad_norm_(std::span<Tensor> grads, double max_norm);

}  // namespace tracecache
