#include "capture/trace/tensor.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <limits>

#include "capture/trace/autograd.h"

namespace tracecache {

namespace {
constexpr uint16_t kNoTensorSource = 0xffff;  // TensorImpl::source
}  // namespace

// A span of n scratch values: inline for the common small case, on the heap beyond it.
template <typename T, size_t N = 4>
class Scratch {
 public:
  explicit Scratch(size_t n) {
    if (n > N) heap_.resize(n);
    span_ = n > N ? std::span<T>(heap_) : std::span<T>(inline_.data(), n);
  }
  std::span<T> span() { return span_; }
  T& operator[](size_t i) { return span_[i]; }

 private:
  std::array<T, N> inline_{};
  std::vector<T> heap_;
  std::span<T> span_;
};

// ---- Tensor -------------------------------------------------------------------------------

Tensor::Tensor(TensorImpl* impl) : impl_(impl) {}

Tensor::Tensor(const Tensor& other) : impl_(other.impl_) {
  if (impl_) ++impl_->refs;
}

Tensor::~Tensor() {
  if (impl_ && --impl_->refs == 0) {
    if (impl_->pending()) impl_->ctx->forget_pending(impl_);
    if (impl_->has_grad_fn) impl_->ctx->drop_grad_fn(impl_);
    delete impl_;
  }
}

const Shape& Tensor::shape() const {
  if (impl_->ctx->options_.capture) impl_->ctx->observe(impl_);
  return impl_->type.shape;
}

const DataRef& Tensor::data() const {
  assert(defined());
  if (impl_->pending()) {
    TensorImpl* root = impl_;
    impl_->ctx->materialize(std::span<TensorImpl* const>(&root, 1));
  }
  return impl_->data;
}

BufferRef Tensor::buffer() const {
  const DataRef& d = data();
  if (ValueReadObserver* o = impl_->ctx->options_.value_reads) o->on_value_read(d);
  if (const BufferRef* host = d->host_buffer()) return *host;  // host memory: no copy, no wait
  if (!impl_->host) {
    Result<BufferRef> host = d->read();
    if (!host.is_ok()) throw Error(host.status());
    if (Metrics* m = impl_->ctx->options_.metrics; m && !d->in_host_memory()) {
      m->add(counters::kBytesToHost, static_cast<int64_t>(d->nbytes()));
    }
    impl_->host = std::move(host).value();
  }
  return impl_->host;
}


void Tensor::assign(const Tensor& value) { context().assign(*this, value); }

Tensor& Tensor::set_requires_grad(bool on) {
  if (on && !is_floating(impl_->type.dtype)) {
    throw Error(invalid_argument(fmt::format(
        "set_requires_grad: {} is not differentiable (only floating tensors have gradients)",
        type_to_string(impl_->type))));
  }
  if (impl_->has_grad_fn) {
    throw Error(invalid_argument(fmt::format(
        "set_requires_grad: this {} is the result of an op recorded for autodiff; only leaves "
        "(weights, inputs) are marked", type_to_string(impl_->type))));
  }
  impl_->requires_grad = on;
  return *this;
}

double Tensor::item() const {
  if (numel() != 1) {
    throw Error(invalid_argument(fmt::format(
        "item() needs a tensor with exactly one element, got {}", type_to_string(impl_->type))));
  }
  return buffer()->element_as_double(0);
}

// ---- LazyContext ----------------------------------------------------------------------------

LazyContext::LazyContext(GraphExecutor* executor, LazyOptions options)
    : executor_(executor), options_(options) {
  assert(executor_ != nullptr);
}

LazyContext::~LazyContext() {
  // Tensors must not outlive their context; detach any that still do so they do not call back.
  for (TensorImpl* t : pending_) {
    if (t) t->node = kNoNode;
  }
  // The same for the tape: a surviving tensor must not reach back into it.
  std::unordered_map<const TensorImpl*, std::unique_ptr<GradNode>> tape = std::move(tape_);
  tape_.clear();
  for (auto& [t, node] : tape) const_cast<TensorImpl*>(t)->has_grad_fn = false;
}

Tensor LazyContext::from_data(DataRef data) {
  auto* impl = new TensorImpl;
  impl->ctx = this;
  impl->type = {data->dtype(), data->shape()};
  impl->data = std::move(data);
  return Tensor(impl);
}

Tensor LazyContext::from_buffer(BufferRef data) { return from_data(host_data(std::move(data))); }

Tensor LazyContext::from_buffer(HostBuffer data) {
  return from_buffer(std::make_shared<const HostBuffer>(std::move(data)));
}

NodeId LazyContext::node_for(TensorImpl* t) {
  if (t->pending()) return t->node;
  // Device data enters the graph as a parameter; one parameter per distinct buffer.
  auto [it, inserted] = param_of_data_.try_emplace(t->data->identity(), 0);
  if (inserted) {
    it->second = trace_.add_parameter(t->type);
    // A named tensor has its own location; another takes that of the op that first reads it.
    if (sources_) trace_sources_.push_back(t->source != kNoTensorSource ? t->source : current_source_);
    trace_params_.push_back(t->data);
    if (TraceTemplate* c = capturing()) {
      c->graph.add_parameter(t->type);
      c->param_data.push_back(t->data);
    }
  }
  return it->second;
}

TraceTemplate* LazyContext::capturing() const {
  TraceTemplate* c = options_.capture;
  return c && c->barriers == 0 ? c : nullptr;
}

void LazyContext::observe(const TensorImpl* t) {
  TraceTemplate* c = options_.capture;
  if (!c) return;
  if (!t->pending()) {
    c->observed_data.emplace_back(t->data->identity(), t->type.shape);
  } else if (c->barriers == 0) {
    if (c->observed.empty() || c->observed.back().node != t->node) {
      c->observed.push_back({t->node, t->type.shape});
    }
  }
  // A pending tensor after the first barrier belongs to a second graph: the template is
  // unusable anyway (see materialize).
}

Tensor LazyContext::record(OpKind op, std::span<const Tensor> inputs,
                           std::span<const AttrValue> attrs) {
  return record(op, inputs, attrs, {});
}

Tensor LazyContext::record(OpKind op, std::span<const Tensor> inputs,
                           std::span<const AttrValue> attrs,
                           std::span<const AttrBinding> bindings) {
  Scratch<TensorType> types(inputs.size());
  bool taped = false;  // some input requires a gradient
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined()) {
      throw Error(invalid_argument(
          fmt::format("op '{}': input {} is an undefined tensor", op_info(op).name, i)));
    }
    if (t.impl_->ctx != this) {
      throw Error(invalid_argument(fmt::format(
          "op '{}': input {} belongs to another LazyContext", op_info(op).name, i)));
    }
    types[i] = t.impl_->type;
    taped |= t.impl_->requires_grad;
  }
  taped &= grad_enabled_;
  if (attrs.size() > kMaxOpAttrs) {
    throw Error(invalid_argument(fmt::format("op '{}': {} attributes given, at most {}",
                                             op_info(op).name, attrs.size(), kMaxOpAttrs)));
  }
  std::array<AttrValue, kMaxOpAttrs> attr_buf;
  std::copy(attrs.begin(), attrs.end(), attr_buf.begin());
  for (const AttrBinding& b : bindings) {
    const TensorImpl* src = b.source.impl_;
    bool ok = b.attr < attrs.size() && src && src->ctx == this && b.dim >= 0 &&
              b.dim < src->type.shape.rank();
    if (ok) {
      const AttrValue& a = attrs[b.attr];
      const int64_t size = src->type.shape[b.dim];
      if (a.kind == AttrKind::kInts) {
        ok = b.element >= 0 && b.element < a.ints.size() && a.ints[b.element] == size;
      } else if (a.kind == AttrKind::kInt) {
        ok = b.element == -1 && a.i == size;
      } else if (a.kind == AttrKind::kFloat) {
        ok = b.element == -1 && a.f == static_cast<double>(size);
      } else {
        ok = false;
      }
    }
    if (!ok) {
      throw Error(invalid_argument(fmt::format(
          "op '{}': attribute binding (attribute {}, element {}, dim {}) does not match the "
          "attribute or its source", op_info(op).name, b.attr, b.element, b.dim)));
    }
  }
  std::span<AttrValue> normalized(attr_buf.data(), attrs.size());
  TensorType type;
  if (InferError error = infer_op(op, types.span(), normalized, &type)) throw Error(std::move(*error));
  if (options_.eager) {
    Tensor out = run_eager(op, inputs, normalized, type);
    if (taped) keep_tape(out.impl_, op, inputs, normalized);
    return out;
  }
  if (options_.metrics && trace_.empty()) trace_started_ = std::chrono::steady_clock::now();

  Scratch<NodeId> ids(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) ids[i] = node_for(inputs[i].impl_);

  TraceTemplate* capture = capturing();
  // Bound sources become nodes before this op's node, so they precede it (rare: no cost when
  // not capturing, no allocation without bindings).
  std::vector<NodeId> sources;
  if (capture) {
    for (const AttrBinding& b : bindings) sources.push_back(node_for(b.source.impl_));
  }

  auto* impl = new TensorImpl;
  impl->ctx = this;
  impl->type = type;
  impl->node = trace_.add_node(op, ids.span(), normalized, type);
  if (sources_) trace_sources_.push_back(current_source_);
  if (capture) {
    capture->graph.add_node(op, ids.span(), attrs, type);
    for (size_t k = 0; k < bindings.size(); ++k) {
      const AttrBinding& b = bindings[k];
      capture->sym_attrs.push_back({impl->node, b.attr, b.element, sources[k], static_cast<uint32_t>(b.dim)});
    }
  }
  impl->pending_slot = static_cast<uint32_t>(pending_.size());
  pending_.push_back(impl);
  ++live_pending_;
  if (taped) keep_tape(impl, op, inputs, normalized);
  return Tensor(impl);
}

void LazyContext::keep_tape(TensorImpl* out, OpKind op, std::span<const Tensor> inputs,
                            std::span<const AttrValue> attrs) {
  if (!is_floating(out->type.dtype)) return;  // integer and bool results carry no gradient
  auto node = std::make_unique<GradNode>();
  node->op = op;
  node->num_attrs = static_cast<uint8_t>(attrs.size());
  std::copy(attrs.begin(), attrs.end(), node->attrs.begin());
  node->inputs.assign(inputs.begin(), inputs.end());
  out->requires_grad = true;
  out->has_grad_fn = true;
  tape_[out] = std::move(node);
}

GradNode* LazyContext::grad_fn(const TensorImpl* t) const {
  if (!t->has_grad_fn) return nullptr;
  auto it = tape_.find(t);
  return it == tape_.end() ? nullptr : it->second.get();
}

void LazyContext::drop_grad_fn(TensorImpl* t) {
  if (!t->has_grad_fn) return;
  t->has_grad_fn = false;
  auto it = tape_.find(t);
  if (it == tape_.end()) return;
  std::unique_ptr<GradNode> node = std::move(it->second);
  tape_.erase(it);
  node.reset();  // after the erase: its inputs may drop their own entries
}

Tensor LazyContext::run_eager(OpKind op, std::span<const Tensor> inputs,
                              std::span<const AttrValue> attrs, const TensorType& type) {
  // Every tensor of an eager context is materialized: nothing is ever recorded.
  Scratch<BufferRef> data(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    assert(!inputs[i].impl_->pending());
    Result<BufferRef> host = inputs[i].impl_->data->read();
    if (!host.is_ok()) throw Error(host.status());
    data[i] = std::move(host).value();
  }
  Result<BufferRef> out = options_.eager->run_op(op, data.span(), attrs, type);
  if (!out.is_ok()) throw Error(out.status());
  if ((*out)->dtype() != type.dtype || (*out)->shape() != type.shape) {
    throw Error(internal_error(fmt::format("op '{}': the op runner returned {}, expected {}",
                                           op_info(op).name,
                                           type_to_string({(*out)->dtype(), (*out)->shape()}),
                                           type_to_string(type))));
  }
  return from_buffer(std::move(out).value());
}

void LazyContext::assign(Tensor& target, const Tensor& value) {
  TensorImpl* t = target.impl_;
  const TensorImpl* v = value.impl_;
  if (!t || !v || t->ctx != this || v->ctx != this || t->type != v->type) {
    throw Error(invalid_argument(fmt::format(
        "assign: the target and the value must be tensors of this context with the same type, got {} and {}",
        t ? type_to_string(t->type) : "nothing", v ? type_to_string(v->type) : "nothing")));
  }
  if (t == v) return;
  ++assignments_;
  drop_grad_fn(t);  // the new value was not made by the old value's op
  if (!v->pending()) {  // a known value: nothing to compute, nothing to donate
    if (t->pending()) forget_pending(t);
    t->node = kNoNode;
    t->data = v->data;
    t->host = v->host;
    return;
  }
  if (TraceTemplate* c = capturing()) c->mark_unusable("the traced code assigned a tensor in place");
  if (t->pending()) {
    pending_[t->pending_slot] = nullptr;
    --live_pending_;
  } else {
    const NodeId param = node_for(t);
    donations_.push_back({v->node, static_cast<uint32_t>(trace_.attrs(trace_.node(param))[0].i)});
    t->data.reset();
    t->host.reset();
  }
  t->node = v->node;
  t->pending_slot = static_cast<uint32_t>(pending_.size());
  pending_.push_back(t);
  ++live_pending_;
}

void LazyContext::forget_pending(TensorImpl* t) {
  pending_[t->pending_slot] = nullptr;
  --live_pending_;
  reset_trace_if_idle();
}

void LazyContext::reset_trace_if_idle() {
  if (live_pending_ != 0) return;
  if (TraceTemplate* c = capturing(); c && !c->graph.empty()) {
    c->mark_unusable("the traced code abandoned an unmaterialized op stream");
  }
  trace_.clear();
  trace_params_.clear();
  trace_sources_.clear();
  lost_step_.reset();
  param_of_data_.clear();
  donations_.clear();
  pending_.clear();
}

void LazyContext::set_source(std::string_view location) {
  if (options_.eager) return;
  if (!sources_) own_sources();  // tracking starts, even with ""
  set_source(location.empty() ? kNoSource : intern_source(location));
}

void LazyContext::name_tensor(const Tensor& tensor, uint32_t id) {
  if (options_.eager || !tensor.defined() || id >= kNoTensorSource) return;
  if (!sources_) own_sources();  // tracking starts
  tensor.impl_->source = static_cast<uint16_t>(id);
}

TraceSources& LazyContext::own_sources() {
  if (!sources_) {
    sources_ = std::make_shared<TraceSources>();
    trace_sources_.assign(trace_.size(), kNoSource);  // nodes recorded before: unknown
  } else if (sources_.use_count() > 1) {
    sources_ = std::make_shared<TraceSources>(*sources_);
  }
  return *sources_;
}

uint32_t LazyContext::intern_source(std::string_view location) {
  if (location.empty()) return kNoSource;
  std::string line = one_line(location);
  auto it = source_ids_.find(line);
  if (it != source_ids_.end()) return it->second;
  std::vector<std::string>& names = own_sources().names;
  const uint32_t id = static_cast<uint32_t>(names.size());
  names.push_back(line);
  source_ids_.emplace(std::move(line), id);
  return id;
}

void LazyContext::mark_step() {
  std::vector<TensorImpl*> roots;
  roots.reserve(live_pending_);
  for (TensorImpl* t : pending_) {
    if (t) roots.push_back(t);
  }
  if (roots.empty()) {
    reset_trace_if_idle();
    return;
  }
  materialize(roots);
}

void LazyContext::materialize(std::span<TensorImpl* const> roots) {
  std::vector<NodeId> root_nodes;
  root_nodes.reserve(roots.size());
  for (TensorImpl* t : roots) root_nodes.push_back(t->node);
  if (TraceTemplate* c = options_.capture) {
    if (++c->barriers == 1) {
      c->roots = root_nodes;
    } else {
      c->mark_unusable("the traced code read a value (more than one graph)");
    }
  }
  if (options_.metrics) {
    options_.metrics->record_span(timers::kTrace, trace_started_, std::chrono::steady_clock::now());
  }
  ScopedTimer timer(options_.metrics, timers::kCanonicalizeHash);
  if (sources_) {
    std::vector<uint32_t>& nodes = own_sources().nodes;
    nodes.assign(trace_sources_.begin(), trace_sources_.end());
  }
  CanonicalGraph cg = canonicalize(trace_, root_nodes, options_.canonicalize, donations_, sources_);
  timer.stop();
  if (options_.metrics) {
    options_.metrics->add(counters::kTraces);
    options_.metrics->add(counters::kNodesTraced, static_cast<int64_t>(cg.graph.size()));
  }

  // When this barrier ends the trace (every live pending tensor is a root), the trace gives up
  // the data of donated parameters, so the executor may hold their only handle.
  const bool ends_trace = roots.size() == live_pending_;
  bool gave_up = false;
  std::vector<DataRef> params;
  params.reserve(cg.sources.size());
  for (uint32_t p = 0; p < cg.sources.size(); ++p) {
    const ParamSource& s = cg.sources[p];
    if (s.kind != ParamSource::Kind::kTraceParam) {
      params.push_back(host_data(scalar_buffer(s)));
      continue;
    }
    if (!trace_params_[s.trace_param]) throw Error(*lost_step_);
    if (ends_trace && std::any_of(cg.graph.donations().begin(), cg.graph.donations().end(),
                                  [p](const Donation& d) { return d.param == p; })) {
      params.push_back(std::move(trace_params_[s.trace_param]));
      gave_up = true;
    } else {
      params.push_back(trace_params_[s.trace_param]);
    }
  }
  // A failed step that was given donated data lost it with the executor's copy of `params`:
  // the pending tensors cannot be computed again, and every later barrier over them says why.
  auto lose = [&](const Status& why) {
    if (!gave_up) return;
    lost_step_ = Status(why.code(), fmt::format(
        "a previous step failed after it was given a tensor's data to update in place, and the "
        "data is gone: the tensors that step computes cannot be computed again (it failed with: {})",
        why.message()));
  };
  if (gave_up) lose(internal_error("the step did not finish"));  // until it says more
  Result<std::vector<DataRef>> outputs = [&]() -> Result<std::vector<DataRef>> {
    try {
      return executor_->execute(cg, std::move(params));
    } catch (const Error& e) {
      lose(e.status());
      throw;
    } catch (const std::exception& e) {
      lose(internal_error(e.what()));
      throw;
    }
  }();
  if (!outputs.is_ok()) {
    lose(outputs.status());
    throw Error(outputs.status());
  }
  if (outputs->size() != roots.size()) {
    throw Error(internal_error(fmt::format("executor returned {} outputs for {} roots",
                                           outputs->size(), roots.size())));
  }
  executed_keys_.push_back(cg.key);
  for (size_t i = 0; i < roots.size(); ++i) {
    TensorImpl* t = roots[i];
    t->data = std::move((*outputs)[i]);
    t->host.reset();
    t->node = kNoNode;
    pending_[t->pending_slot] = nullptr;
    --live_pending_;
  }
  reset_trace_if_idle();
}

// ---- the op API -------------------------------------------------------------------------

namespace {

Tensor unary(OpKind op, const Tensor& x) { return x.context().record(op, {x}); }
Tensor binary(OpKind op, const Tensor& a, const Tensor& b) { return a.context().record(op, {a, b}); }

Tensor reduce(OpKind op, const Tensor& x, IntList axes, bool keepdim) {
  return x.context().record(op, {x}, {AttrValue::of_ints(axes), AttrValue::of_bool(keepdim)});
}

// The dtype a scalar operand takes next to tensor `t` (see tensor.h).
DType scalar_dtype_for(const Tensor& t, double v) {
  bool integral = std::nearbyint(v) == v && std::abs(v) < 9.0e15;
  if (is_floating(t.dtype())) return t.dtype();
  if (!integral) return DType::kF32;
  if (t.dtype() == DType::kI32 && std::abs(v) <= 2147483647.0) return DType::kI32;
  return DType::kI64;
}

Tensor scalar_like(const Tensor& t, double v) {
  return scalar(t.context(), v, scalar_dtype_for(t, v));
}

}  // namespace

Tensor neg(const Tensor& x) { return unary(OpKind::kNeg, x); }
Tensor abs(const Tensor& x) { return unary(OpKind::kAbs, x); }
Tensor exp(const Tensor& x) { return unary(OpKind::kExp, x); }
Tensor log(const Tensor& x) { return unary(OpKind::kLog, x); }
Tensor sqrt(const Tensor& x) { return unary(OpKind::kSqrt, x); }
Tensor rsqrt(const Tensor& x) { return unary(OpKind::kRsqrt, x); }
Tensor tanh(const Tensor& x) { return unary(OpKind::kTanh, x); }
Tensor sigmoid(const Tensor& x) { return unary(OpKind::kSigmoid, x); }
Tensor relu(const Tensor& x) { return unary(OpKind::kRelu, x); }

Tensor add(const Tensor& a, const Tensor& b) { return binary(OpKind::kAdd, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(OpKind::kSub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(OpKind::kMul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(OpKind::kDiv, a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary(OpKind::kPow, a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary(OpKind::kMaximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary(OpKind::kMinimum, a, b); }
Tensor eq(const Tensor& a, const Tensor& b) { return binary(OpKind::kEq, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary(OpKind::kLt, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary(OpKind::kGt, a, b); }

Tensor add(const Tensor& a, double b) { return add(a, scalar_like(a, b)); }
Tensor sub(const Tensor& a, double b) { return sub(a, scalar_like(a, b)); }
Tensor mul(const Tensor& a, double b) { return mul(a, scalar_like(a, b)); }
Tensor div(const Tensor& a, double b) { return div(a, scalar_like(a, b)); }
Tensor pow(const Tensor& a, double b) { return pow(a, scalar_like(a, b)); }
Tensor maximum(const Tensor& a, double b) { return maximum(a, scalar_like(a, b)); }
Tensor minimum(const Tensor& a, double b) { return minimum(a, scalar_like(a, b)); }
Tensor eq(const Tensor& a, double b) { return eq(a, scalar_like(a, b)); }
Tensor lt(const Tensor& a, double b) { return lt(a, scalar_like(a, b)); }
Tensor gt(const Tensor& a, double b) { return gt(a, scalar_like(a, b)); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  return cond.context().record(OpKind::kWhere, {cond, a, b});
}

Tensor cast(const Tensor& x, DType dtype) {
  return x.context().record(OpKind::kCast, {x}, {AttrValue::of_dtype(dtype)});
}

Tensor matmul(const Tensor& a, const Tensor& b) { return binary(OpKind::kMatmul, a, b); }

Tensor sum(const Tensor& x, IntList axes, bool keepdim) { return reduce(OpKind::kSum, x, axes, keepdim); }
Tensor mean(const Tensor& x, IntList axes, bool keepdim) { return reduce(OpKind::kMean, x, axes, keepdim); }
Tensor max(const Tensor& x, IntList axes, bool keepdim) { return reduce(OpKind::kMax, x, axes, keepdim); }
Tensor argmax(const Tensor& x, int64_t axis, bool keepdim) {
  return x.context().record(OpKind::kArgmax, {x}, {AttrValue::of_int(axis), AttrValue::of_bool(keepdim)});
}

Tensor reshape(const Tensor& x, IntList shape) {
  return x.context().record(OpKind::kReshape, {x}, {AttrValue::of_ints(shape)});
}
Tensor permute(const Tensor& x, IntList perm) {
  return x.context().record(OpKind::kPermute, {x}, {AttrValue::of_ints(perm)});
}
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  return x.context().record(OpKind::kTranspose, {x}, {AttrValue::of_int(dim0), AttrValue::of_int(dim1)});
}
Tensor broadcast_to(const Tensor& x, IntList shape) {
  return x.context().record(OpKind::kBroadcastTo, {x}, {AttrValue::of_ints(shape)});
}
Tensor concat(std::span<const Tensor> xs, int64_t axis) {
  if (xs.empty()) throw Error(invalid_argument("op 'concat': takes at least 1 tensor input, got 0"));
  AttrValue a = AttrValue::of_int(axis);
  return xs[0].context().record(OpKind::kConcat, xs, std::span<const AttrValue>(&a, 1));
}
Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t end, int64_t step) {
  return x.context().record(OpKind::kSlice, {x},
                            {AttrValue::of_int(axis), AttrValue::of_int(start),
                             AttrValue::of_int(end), AttrValue::of_int(step)});
}

Tensor full(LazyContext& ctx, const Shape& shape, double value, DType dtype) {
  return ctx.record(OpKind::kFull, {},
                    {AttrValue::of_ints(shape), AttrValue::of_float(value), AttrValue::of_dtype(dtype)});
}
Tensor scalar(LazyContext& ctx, double value, DType dtype) { return full(ctx, Shape{}, value, dtype); }
Tensor arange(LazyContext& ctx, double start, double end, double step, DType dtype) {
  return ctx.record(OpKind::kArange, {},
                    {AttrValue::of_float(start), AttrValue::of_float(end), AttrValue::of_float(step),
                     AttrValue::of_dtype(dtype)});
}
Tensor uniform(LazyContext& ctx, const Shape& shape, uint64_t seed, double low, double high, DType dtype) {
  return ctx.record(OpKind::kUniform, {},
                    {AttrValue::of_ints(shape), AttrValue::of_float(low), AttrValue::of_float(high),
                     AttrValue::of_int(static_cast<int64_t>(seed)), AttrValue::of_dtype(dtype)});
}
Tensor normal(LazyContext& ctx, const Shape& shape, uint64_t seed, double mean, double stddev, DType dtype) {
  return ctx.record(OpKind::kNormal, {},
                    {AttrValue::of_ints(shape), AttrValue::of_float(mean), AttrValue::of_float(stddev),
                     AttrValue::of_int(static_cast<int64_t>(seed)), AttrValue::of_dtype(dtype)});
}
Tensor rand_uniform(const Tensor& seed, const Shape& shape, int64_t stream) {
  if (!seed.defined()) throw Error(invalid_argument("op 'rand_uniform': the seed is an undefined tensor"));
  return seed.context().record(OpKind::kRandUniform, {seed},
                               {AttrValue::of_ints(shape), AttrValue::of_int(stream)});
}
Tensor rand_normal(const Tensor& seed, const Shape& shape, int64_t stream) {
  if (!seed.defined()) throw Error(invalid_argument("op 'rand_normal': the seed is an undefined tensor"));
  return seed.context().record(OpKind::kRandNormal, {seed},
                               {AttrValue::of_ints(shape), AttrValue::of_int(stream)});
}

}  // namespace tracecache
