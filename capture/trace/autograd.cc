#include "capture/trace/autograd.h"

#include <fmt/format.h>

#include <memory>
#include <unordered_map>
#include <unordered_set>

namespace tracecache {

// The tape's view of tensors (Tensor befriends it).
struct AutogradAccess {
  static TensorImpl* impl(const Tensor& t) { return t.impl_; }
  static const GradNode* node(const TensorImpl* t) { return t->ctx->grad_fn(t); }
  static void drop(TensorImpl* t) { t->ctx->drop_grad_fn(t); }
  static Tensor share(TensorImpl* impl) {
    ++impl->refs;
    return Tensor(impl);
  }
};

namespace {

using A = AutogradAccess;

// Records the rules' ops in the loss's context, without a tape.
class TapeBuilder final : public GradBuilder {
 public:
  explicit TapeBuilder(LazyContext& ctx) : ctx_(ctx) {}

  GradValue value(Tensor t) {
    values_.push_back(std::move(t));
    return static_cast<GradValue>(values_.size() - 1);
  }
  const Tensor& tensor(GradValue v) const { return values_.at(static_cast<size_t>(v)); }

  GradValue op(OpKind kind, std::span<const GradValue> inputs, std::span<const AttrValue> attrs) override {
    std::vector<Tensor> in;
    in.reserve(inputs.size());
    for (GradValue v : inputs) in.push_back(tensor(v));
    return value(ctx_.record(kind, in, attrs));
  }

  // Reads the shape as an observation (Tensor::shape): a rule's ops depend on it, so a trace
  // template must not treat it as free to vary.
  const TensorType& type(GradValue v) const override {
    const Tensor& t = tensor(v);
    (void)t.shape();
    return A::impl(t)->type;
  }

 private:
  LazyContext& ctx_;
  std::vector<Tensor> values_;
};

[[noreturn]] void fail(std::string message) { throw Error(invalid_argument("grad: " + std::move(message))); }

// The tensors the walk visits, inputs before the ops that use them (a post-order of the tape
// from `loss`), each held so that freeing the tape frees nothing while it is walked.
std::vector<Tensor> walk_order(const Tensor& loss) {
  std::vector<Tensor> order;
  std::unordered_set<TensorImpl*> seen;
  struct Frame {
    TensorImpl* impl;
    size_t next = 0;
  };
  std::vector<Frame> stack{{A::impl(loss)}};
  seen.insert(A::impl(loss));
  while (!stack.empty()) {
    Frame& f = stack.back();
    const GradNode* node = A::node(f.impl);
    if (node && f.next < node->inputs.size()) {
      TensorImpl* in = A::impl(node->inputs[f.next++]);
      if (in->requires_grad && seen.insert(in).second) {
        stack.push_back({in});
      }
      continue;
    }
    order.push_back(A::share(f.impl));
    stack.pop_back();
  }
  return order;
}

}  // namespace

std::vector<Tensor> grad(const Tensor& loss, std::span<const Tensor> wrt, const GradOptions& options) {
  if (!loss.defined()) fail("the loss is an undefined tensor");
  LazyContext& ctx = loss.context();
  TensorImpl* root = A::impl(loss);
  if (!is_floating(loss.dtype()) || root->type.shape.numel() != 1) {
    fail(fmt::format("the loss must be a floating tensor of one element, got {}", type_to_string(root->type)));
  }
  for (size_t i = 0; i < wrt.size(); ++i) {
    const Tensor& w = wrt[i];
    if (!w.defined()) fail(fmt::format("argument {} is an undefined tensor", i));
    if (&w.context() != &ctx) fail(fmt::format("argument {} belongs to another LazyContext than the loss", i));
    if (!is_floating(w.dtype())) {
      fail(fmt::format("argument {} is {}: integer and bool values are not differentiable", i,
                       type_to_string(A::impl(w)->type)));
    }
    if (!w.requires_grad()) {
      fail(fmt::format("argument {} ({}) does not require a gradient: call set_requires_grad(true) on "
                       "it before recording the ops that use it", i, type_to_string(A::impl(w)->type)));
    }
  }
  if (!root->requires_grad) fail("the loss does not depend on any tensor that requires a gradient");
  if (!A::node(root)) {
    bool is_wrt = false;
    for (const Tensor& w : wrt) is_wrt |= A::impl(w) == root;
    if (!is_wrt) fail("the loss's tape was freed by an earlier grad() (pass retain_graph to walk it twice)");
  }

  NoGradGuard no_tape(ctx);
  std::vector<Tensor> order = walk_order(loss);
  TapeBuilder b(ctx);
  std::unordered_map<TensorImpl*, GradValue> grads;
  grads[root] = b.value(ctx.record(OpKind::kFull, {}, {AttrValue::of_ints(root->type.shape),
                                                      AttrValue::of_float(1.0),
                                                      AttrValue::of_dtype(root->type.dtype)}));
  // Each tensor's gradient is complete once every op that used it is done: walk the post-order
  // backwards.
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    TensorImpl* t = A::impl(*it);
    const GradNode* node = A::node(t);
    if (!node) continue;  // a leaf
    auto g = grads.find(t);
    if (g == grads.end()) continue;  // no gradient reaches it
    const OpInfo& info = op_info(node->op);
    if (!info.grad) {
      fail(fmt::format("op '{}' is not differentiable (it has no gradient rule), but the loss depends on "
                       "its result through tensors that require a gradient", info.name));
    }
    const size_t n = node->inputs.size();
    std::vector<GradValue> in;
    in.reserve(n);
    auto wanted = std::make_unique<bool[]>(n);
    for (size_t i = 0; i < n; ++i) {
      in.push_back(b.value(node->inputs[i]));
      wanted[i] = A::impl(node->inputs[i])->requires_grad;
    }
    GradArgs args;
    args.inputs = in;
    args.output = b.value(*it);
    args.grad = g->second;
    args.attrs = node->attr_span();
    args.wanted = std::span<const bool>(wanted.get(), n);
    std::vector<GradValue> out(node->inputs.size(), kNoGrad);
    info.grad(b, args, out);
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i] == kNoGrad || !args.wanted[i]) continue;
      TensorImpl* x = A::impl(node->inputs[i]);
      if (b.type(out[i]) != x->type) {
        throw Error(internal_error(fmt::format("the gradient rule of op '{}' gave {} for input {} of type {}",
                                               info.name, type_to_string(b.type(out[i])), i,
                                               type_to_string(x->type))));
      }
      auto [acc, fresh] = grads.try_emplace(x, out[i]);
      if (!fresh) acc->second = b.add(acc->second, out[i]);
    }
  }

  std::vector<Tensor> result;
  result.reserve(wrt.size());
  for (const Tensor& w : wrt) {
    TensorImpl* impl = A::impl(w);
    auto g = grads.find(impl);
    if (g != grads.end()) {
      result.push_back(b.tensor(g->second));
    } else {
      result.push_back(ctx.record(OpKind::kFull, {}, {AttrValue::of_ints(impl->type.shape), AttrValue::of_float(0.0),
                                                     AttrValue::of_dtype(impl->type.dtype)}));
    }
  }
  if (!options.retain_graph) {
    for (Tensor& t : order) A::drop(A::impl(t));
  }
  return result;
}

}  // namespace tracecache
