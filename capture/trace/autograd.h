// Reverse-mode autodiff over recorded ops: the tape and grad().
//
// A floating tensor may require a gradient (Tensor::set_requires_grad). Every op recorded
// while gradients are enabled (the default; see NoGradGuard) on at least one such input keeps a
// GradNode on its result: the op, its normalized attributes and its input tensors. The result
// requires a gradient too when it is floating. That chain of nodes is the tape.
//
// grad(loss, wrt) walks the tape back from `loss` and runs each op's gradient rule (the
// registry's `grad` column, capture/ops/grad.h). The rules record ordinary ops in loss's
// context:
//  - lazy and once mode: the backward pass joins the forward pass in the same trace, so one
//    barrier makes one graph (one key, one executable) of forward, backward and whatever
//    the caller does with the gradients (an optimizer's update);
//  - eager mode: they run at once, as every op does there.
// Ops recorded by grad() themselves keep no tape (no higher-order gradients).
//
// After grad() the walked part of the tape is freed (PyTorch's retain_graph=False): the
// forward intermediates it held are released, so they do not become extra outputs of the
// step's graph. A tape that is never walked holds its tensors until its result dies, and in
// lazy mode every live pending tensor is an output of the next barrier: compute gradients
// before the barrier, or record inference under a NoGradGuard.
//
// Errors: grad() throws Error (kInvalidArgument) when the loss is not a floating tensor of one
// element, when a `wrt` tensor is not floating or does not require a gradient, when a
// tensor belongs to another context, when the walk meets an op with no gradient rule (naming
// the op), and when the walked tape was already freed by an earlier grad() call.
// Thread-safety: as Tensor (one thread per context). Ownership: a GradNode is owned by its
// context's tape, keyed by the tensor it produced, freed with that tensor; it holds its inputs.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "capture/ops/ops.h"
#include "capture/trace/tensor.h"

namespace tracecache {

// How a tensor that requires a gradient was made (see above).
struct GradNode {
  OpKind op;
  uint8_t num_attrs = 0;
  std::array<AttrValue, kMaxOpAttrs> attrs;  // normalized; the first num_attrs are set
  std::vector<Tensor> inputs;
  std::span<const AttrValue> attr_span() const { return {attrs.data(), num_attrs}; }
};

struct GradOptions {
  // Keep the walked tape, so that grad() may walk it again.
  bool retain_graph = false;
};

// d loss / d w for each w in `wrt`, each of w's type. A `wrt` tensor the loss does not depend on
// gets zeros. See the header comment for errors.
std::vector<Tensor> grad(const Tensor& loss, std::span<const Tensor> wrt, const GradOptions& options = {});
inline std::vector<Tensor> grad(const Tensor& loss, std::initializer_list<Tensor> wrt,
                                const GradOptions& options = {}) {
  return grad(loss, std::span<const Tensor>(wrt.begin(), wrt.size()), options);
}

// Records without a tape while it lives (an optimizer's update, inference): ops on tensors that
// require gradients make results that do not. Restores the previous setting when it ends.
class NoGradGuard {
 public:
  explicit NoGradGuard(LazyContext& ctx) : ctx_(ctx), previous_(ctx.set_grad_enabled(false)) {}
  ~NoGradGuard() { ctx_.set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  LazyContext& ctx_;
  bool previous_;
};

}  // namespace tracecache
