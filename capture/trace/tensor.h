// Lazy tensors and the context that records them.
//
// A LazyContext is a tracer: every op on its tensors appends a node to its pending graph and
// returns at once; nothing is computed until a barrier. `mark_step()` is the barrier: all live
// pending tensors become the roots of one graph, which is canonicalized, hashed and handed to
// the GraphExecutor; the executor's results become the tensors' data: DeviceData handles
// (capture/core/device_data.h) that stay where the executor left them (a device), so a
// barrier copies nothing back and waits for nothing. A value read (`item()`, `to_vector()`,
// `buffer()`) materializes just that tensor the same way and then reads its host bytes.
//
// Tensors are handles: copies share one value. A tensor whose value is known (created from
// data, or materialized) enters later graphs as a parameter ("device data"), so a new step's
// graph never embeds the previous step's values. `assign()` updates a tensor in place at the
// next barrier (donation, capture/ir/graph.h): its old storage may hold the new value.
//
// Eager mode: with LazyOptions::eager set, the context traces nothing; each op runs at once on
// that OpRunner (capture/trace/eager.h) and returns a materialized tensor, and mark_step() is a no-op.
//
// Errors: ops on incompatible tensors throw Error at record time, naming the op and both
// operand types; an executor failure throws Error from the barrier (an op runner failure, from
// the op). The pending tensors stay pending and a later barrier tries again, except when the
// failed step was given donated data (assign()): that data is gone, and every later barrier
// that needs it throws Error (with the first failure's code and message) until the trace
// is reset (when no pending tensor is left).
// Thread-safety: a context and its tensors belong to one thread at a time (reference counts
// are not atomic). Different contexts are independent.
// Ownership: the context must outlive its tensors; the executor must outlive the context.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "capture/core/buffer.h"
#include "capture/core/device_data.h"
#include "capture/ir/canonical.h"
#include "capture/trace/eager.h"
#include "capture/ir/graph.h"
#include "capture/core/metrics.h"
#include "capture/core/status.h"
#include "capture/ir/trace_template.h"

namespace tracecache {

class LazyContext;
struct GradNode;

inline constexpr NodeId kNoNode = std::numeric_limits<NodeId>::max();

// The shared state behind Tensor handles (an implementation detail, in the header so that the
// accessors guard checks use inline). Pending: `node` names its node in the context's trace and
// `data` is null. Materialized: `data` holds the value and `node` is kNoNode.
struct TensorImpl {
  uint32_t refs = 1;
  // Autodiff (autograd.h), beside refs in its padding: whether d loss / d this value can be asked
  // for, and whether the context's tape holds the op that made it (LazyContext::tape_; kept out
  // of this struct so that tensors of programs that never train stay as small as before).
  bool requires_grad = false;
  bool has_grad_fn = false;
  // The location name_tensor() gave this value (an index into the context's source names), in
  // the same padding: kNoTensorSource when none.
  uint16_t source = 0xffff;
  LazyContext* ctx = nullptr;
  TensorType type;
  NodeId node = kNoNode;
  uint32_t pending_slot = 0;
  DataRef data;
  BufferRef host;  // data's host bytes once a value read copied them (device memory only)

  bool pending() const { return node != kNoNode; }
};

// Runs canonical graphs. capture/reference/ provides the reference evaluator; replay/engine/
// provides compiled, cached execution.
class GraphExecutor {
 public:
  virtual ~GraphExecutor() = default;
  // Returns one value per graph output, in order. `params` holds one value per parameter; the
  // executor owns these handles for the call, so a parameter the graph donates whose handle
  // nobody else holds may have its storage reused for the output (graph.h, Donation).
  virtual Result<std::vector<DataRef>> execute(const CanonicalGraph& graph,
                                               std::vector<DataRef> params) = 0;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(const Tensor& other);
  Tensor(Tensor&& other) noexcept : impl_(other.impl_) { other.impl_ = nullptr; }
  Tensor& operator=(Tensor other) noexcept {
    std::swap(impl_, other.impl_);
    return *this;
  }
  ~Tensor();

  bool defined() const { return impl_ != nullptr; }
  // Equal for handles of the same tensor (null for an undefined one); an identity for
  // in-process comparisons while a handle holds the tensor, never persisted.
  const void* handle_id() const { return impl_; }
  // REQUIRES (all below): defined().
  DType dtype() const { return impl_->type.dtype; }
  // Reading the shape is an observation: while a context captures a trace template
  // (LazyOptions::capture), the traced code may depend on it, so it is noted there.
  const Shape& shape() const;
  // The shape without noting an observation, for code that only passes it on as an
  // attribute bound with AttrBinding (whose element then follows the size), never branches on
  // it. Misuse makes a shape-polymorphic trace unsound.
  const Shape& peek_shape() const { return impl_->type.shape; }
  int rank() const { return peek_shape().rank(); }  // ranks are guarded, not dynamic
  int64_t numel() const { return shape().numel(); }
  LazyContext& context() const { return *impl_->ctx; }
  // True once the value is known (no pending computation).
  bool is_materialized() const { return !impl_->pending(); }

  // Value reads: materialize (a barrier for this tensor) and return the data in host memory
  // (for device data: waits for the device and copies, once per tensor). Throws Error if the
  // device cannot be read.
  BufferRef buffer() const;
  // The data handle: materializes (a barrier for this tensor) but reads nothing.
  const DataRef& data() const;
  // The data of a materialized tensor without taking a reference (no atomic operations).
  // REQUIRES: is_materialized(). The pointer lives as long as this tensor's value.
  const DeviceData* data_ptr() const { return impl_->data.get(); }
  // In-place update at the next barrier: context().assign(*this, value) (see LazyContext).
  void assign(const Tensor& value);
  // Autodiff (capture/trace/autograd.h). Whether gradients with respect to this value can be
  // asked for: set on leaves (weights), and true of results of ops on such values.
  bool requires_grad() const { return impl_->requires_grad; }
  // Marks a leaf (a tensor no recorded op produced under the tape) as requiring a gradient, or
  // not. Throws Error (kInvalidArgument) for a non-floating tensor (integer and bool values are
  // not differentiable) and for a result of a taped op (only leaves are set).
  Tensor& set_requires_grad(bool on);
  // The single element converted to double. Throws Error unless numel() == 1.
  double item() const;
  // Elements converted to T, row-major.
  template <typename T>
  std::vector<T> to_vector() const {
    BufferRef b = buffer();
    std::vector<T> out(static_cast<size_t>(b->numel()));
    dispatch_dtype(b->dtype(), [&]<typename U>() {
      const U* p = b->data<U>();
      for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<T>(p[i]);
    });
    return out;
  }

 private:
  friend class LazyContext;
  friend struct AutogradAccess;
  explicit Tensor(TensorImpl* impl);  // takes one reference
  TensorImpl* impl_ = nullptr;
};

// Told of every value read of a context's tensors (Tensor::buffer(), and item() and to_vector()
// through it), after the value is materialized, with the data that was read. For a caller that
// must know which values the traced code looked at (a compiled function guards their contents).
class ValueReadObserver {
 public:
  virtual ~ValueReadObserver() = default;
  virtual void on_value_read(const DataRef& data) = 0;
};

struct LazyOptions {
  CanonicalizeOptions canonicalize;
  // Where barriers count traces and time canonicalize + hash; not owned, may be null.
  Metrics* metrics = nullptr;
  // Eager mode when set: ops run at once on this runner (not owned; must outlive the context)
  // and the executor is never called.
  OpRunner* eager = nullptr;
  // When set (not owned), the trace is also captured as a template (capture/ir/trace_template.h)
  // until its first barrier.
  TraceTemplate* capture = nullptr;
  // When set (not owned), told of every value read (see ValueReadObserver).
  ValueReadObserver* value_reads = nullptr;
};

// Declares attribute `attr` of a record() call (element `element` of an int list, -1 for an
// int or float attribute) equal to the size of dim `dim` of `source`: a captured template then
// follows that size instead of keeping the number. The attribute's value must equal the size.
struct AttrBinding {
  uint32_t attr = 0;
  int32_t element = -1;
  Tensor source;
  int dim = 0;
};

class LazyContext {
 public:
  // `executor` is not owned. REQUIRES: executor != nullptr.
  explicit LazyContext(GraphExecutor* executor, LazyOptions options = {});
  ~LazyContext();
  LazyContext(const LazyContext&) = delete;
  LazyContext& operator=(const LazyContext&) = delete;

  // A materialized tensor holding `data` (device data).
  Tensor from_data(DataRef data);
  // The same for host data (HostData).
  Tensor from_buffer(BufferRef data);
  Tensor from_buffer(HostBuffer data);

  // In-place update: at the next barrier `target` takes the value of `value`, and the graph
  // donates `target`'s old storage to it (capture/ir/graph.h), as an optimizer's
  // `param.copy_(param - lr * grad)`: with donation the update needs no second buffer. Every
  // handle of `target` sees the new value; `value` stays a separate tensor. Throws Error
  // (kInvalidArgument) unless both belong to this context and have the same type. In eager
  // mode the target simply takes the value.
  void assign(Tensor& target, const Tensor& value);
  // How many assign() calls this context has had: the only way a materialized tensor's data
  // changes, so a caller that keeps facts about tensors' data between calls (the replay memo of
  // replay/engine/compiled_function.h) compares it.
  uint64_t assignments() const { return assignments_; }

  // Records `op` on `inputs` with `attrs` given positionally, one per declared attribute
  // (see op_info(op).attrs). Normalizes the attributes and infers the output type; throws
  // Error if the inputs or attributes do not fit the op, or belong to another context.
  Tensor record(OpKind op, std::span<const Tensor> inputs, std::span<const AttrValue> attrs);
  // The same, with some attribute elements bound to sizes (see AttrBinding); throws Error if a
  // binding does not fit.
  Tensor record(OpKind op, std::span<const Tensor> inputs, std::span<const AttrValue> attrs,
                std::span<const AttrBinding> bindings);
  Tensor record(OpKind op, std::initializer_list<Tensor> inputs,
                std::initializer_list<AttrValue> attrs = {}) {
    return record(op, std::span<const Tensor>(inputs.begin(), inputs.size()),
                  std::span<const AttrValue>(attrs.begin(), attrs.size()));
  }

  // Source locations (capture/ir/graph_sources.h), kept outside the graph hash. Once a location
  // is set, every node recorded carries the location last set ("mlp.trace:7 h", "resnet18
  // layer1.0.conv1", a C++ or Python "file:line"), and a barrier's CanonicalGraph carries them,
  // resolved per node only when asked (node_sources()). A context never given a location records
  // none and pays one test per op for it; in eager mode these are no-ops. Locations are one line
  // each (line breaks become spaces).
  //
  // The location of the ops recorded from now on ("" : none). Interns the text on each call.
  void set_source(std::string_view location);
  // The same by id (source_id()): no text is hashed, for per-op use on hot paths.
  void set_source(uint32_t id) {
    if (options_.eager) return;
    if (!sources_) own_sources();
    current_source_ = id;
  }
  // The id of the location of `site` (a program statement, a layer: any address that stands
  // for one location while this context lives); `make()` gives its text and is called only the
  // first time a site is seen. kNoSource in eager mode.
  // Sites asked in the same order as last time (a program's statements, step after step) cost
  // one comparison each; others one hash lookup.
  template <typename MakeLocation>
  uint32_t source_id(const void* site, MakeLocation&& make) {
    if (options_.eager) return kNoSource;
    if (next_site_ < site_order_.size() && site_order_[next_site_].first == site) {
      return site_order_[next_site_++].second;
    }
    auto it = site_index_.find(site);
    if (it == site_index_.end()) {
      it = site_index_.emplace(site, site_order_.size()).first;
      site_order_.emplace_back(site, intern_source(make()));
    }
    next_site_ = it->second + 1;
    return site_order_[it->second].second;
  }
  // set_source(source_id(site, make)) in one step: a site asked in the same order as last time
  // costs one comparison and a store (the per-statement call of a program's replay).
  template <typename MakeLocation>
  void set_source_at(const void* site, MakeLocation&& make) {
    // Never true in eager mode (no site is kept); the first visit of a site set sources_.
    if (next_site_ < site_order_.size() && site_order_[next_site_].first == site) {
      current_source_ = site_order_[next_site_++].second;
      return;
    }
    set_source(source_id(site, std::forward<MakeLocation>(make)));
  }
  // The location (an id from source_id()) of a materialized tensor when it enters a graph as a
  // parameter ("mlp.trace:3 input x : f32[B, 4]"); without one, or with an id past 65534, a
  // parameter takes the location of the op that first reads it. Kept with the tensor handle.
  void name_tensor(const Tensor& tensor, uint32_t id);

  // The barrier: materializes every live pending tensor as one graph. A no-op if none (always,
  // in eager mode).
  void mark_step();

  const LazyOptions& options() const { return options_; }
  // Keys of the graphs executed so far, in order (one per barrier or value read that ran).
  const std::vector<GraphKey>& executed_keys() const { return executed_keys_; }
  // Nodes in the pending graph (recorded since the last reset of the trace).
  size_t pending_nodes() const { return trace_.size(); }

  // Whether ops keep an autodiff tape (capture/trace/autograd.h; default true). Returns the
  // previous setting. NoGradGuard is the scoped form.
  bool grad_enabled() const { return grad_enabled_; }
  bool set_grad_enabled(bool on) {
    const bool previous = grad_enabled_;
    grad_enabled_ = on;
    return previous;
  }

 private:
  friend class Tensor;
  friend struct TensorImpl;
  friend struct AutogradAccess;
  NodeId node_for(TensorImpl* t);
  void observe(const TensorImpl* t);
  // The index of `location` in sources_->names (added if new).
  uint32_t intern_source(std::string_view location);
  // The locations, to change: created on first use (locations are tracked from then on),
  // copied first when a graph still holds them (CanonicalGraph::trace_sources).
  TraceSources& own_sources();
  TraceTemplate* capturing() const;  // the template, while it still mirrors the trace
  Tensor run_eager(OpKind op, std::span<const Tensor> inputs, std::span<const AttrValue> attrs,
                   const TensorType& type);
  void materialize(std::span<TensorImpl* const> roots);
  void forget_pending(TensorImpl* t);
  void reset_trace_if_idle();
  // Keeps the tape of `out` (see autograd.h): `op` on `inputs` with normalized `attrs`.
  void keep_tape(TensorImpl* out, OpKind op, std::span<const Tensor> inputs, std::span<const AttrValue> attrs);
  // The op that made `t`, while the tape holds it (t->has_grad_fn), else null.
  GradNode* grad_fn(const TensorImpl* t) const;
  // Frees `t`'s tape entry, if any (its inputs may free theirs in turn).
  void drop_grad_fn(TensorImpl* t);

  GraphExecutor* executor_;
  LazyOptions options_;
  Graph trace_;
  // Data of trace_'s parameters, by parameter index. An entry is null once a barrier gave it up
  // to a step that failed (lost_step_ then says why); the trace keeps it until it is reset.
  std::vector<DataRef> trace_params_;
  std::optional<Status> lost_step_;
  std::unordered_map<const void*, NodeId> param_of_data_;  // DeviceData::identity(), this trace
  std::vector<TraceDonation> donations_;  // requested by assign(), this trace
  std::vector<TensorImpl*> pending_;  // pending tensors by creation; nullptr once gone
  size_t live_pending_ = 0;
  std::vector<GraphKey> executed_keys_;
  // When the first op of the current trace was recorded (for the `trace` timer).
  std::chrono::steady_clock::time_point trace_started_;
  bool grad_enabled_ = true;
  uint64_t assignments_ = 0;  // assignments()
  // The autodiff tape: the GradNode of every live tensor with has_grad_fn.
  std::unordered_map<const TensorImpl*, std::unique_ptr<GradNode>> tape_;
  // Source locations (set_source, name_tensor): null until the first location is given; the
  // names, and at each barrier a copy of trace_sources_ for the graph (TraceSources).
  std::shared_ptr<TraceSources> sources_;
  std::vector<uint32_t> trace_sources_;  // per trace_ node while sources_ is set, this trace
  uint32_t current_source_ = kNoSource;
  std::unordered_map<std::string, uint32_t> source_ids_;
  // source_id(): every site with its location, in the order first seen; where each is in it;
  // the position the next site is expected at.
  std::vector<std::pair<const void*, uint32_t>> site_order_;
  std::unordered_map<const void*, size_t> site_index_;
  size_t next_site_ = 0;
};

// ---- the op API -------------------------------------------------------------------------
// Each function records one op (see docs/ops.md for semantics). Binary ops take a Tensor and a
// double too; the scalar becomes a rank-0 constant of the tensor's dtype (f32 if the scalar is
// not integral and the tensor is).

Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor cast(const Tensor& x, DType dtype);
Tensor matmul(const Tensor& a, const Tensor& b);

// An empty `axes` reduces over every dim.
Tensor sum(const Tensor& x, IntList axes = {}, bool keepdim = false);
Tensor mean(const Tensor& x, IntList axes = {}, bool keepdim = false);
Tensor max(const Tensor& x, IntList axes = {}, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t axis, bool keepdim = false);

Tensor reshape(const Tensor& x, IntList shape);
Tensor permute(const Tensor& x, IntList perm);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor broadcast_to(const Tensor& x, IntList shape);
Tensor concat(std::span<const Tensor> xs, int64_t axis);
Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t end, int64_t step = 1);

Tensor full(LazyContext& ctx, const Shape& shape, double value, DType dtype = DType::kF32);
Tensor scalar(LazyContext& ctx, double value, DType dtype = DType::kF32);
Tensor arange(LazyContext& ctx, double start, double end, double step = 1,
              DType dtype = DType::kI64);
Tensor uniform(LazyContext& ctx, const Shape& shape, uint64_t seed, double low = 0,
               double high = 1, DType dtype = DType::kF32);
Tensor normal(LazyContext& ctx, const Shape& shape, uint64_t seed, double mean = 0,
              double stddev = 1, DType dtype = DType::kF32);
// Random numbers whose seed is a tensor: `seed` is i64[2] holding (seed, offset), fed each step
// as a graph input, so a new seed never changes the graph. f32 `shape`, uniform on [0, 1) or
// standard normal; `stream` (0 to 65535) gives one seed and offset independent draws. The
// numbers are tracecache's own (Philox4x32-10, docs/ops.md), not PyTorch's generator's.
Tensor rand_uniform(const Tensor& seed, const Shape& shape, int64_t stream = 0);
Tensor rand_normal(const Tensor& seed, const Shape& shape, int64_t stream = 0);

// A scalar operand adopts the tensor's dtype if that can hold it exactly, else f32.
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor pow(const Tensor& a, double b);
Tensor maximum(const Tensor& a, double b);
Tensor minimum(const Tensor& a, double b);
Tensor eq(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& a) { return neg(a); }
inline Tensor operator+(const Tensor& a, double b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, double b) { return div(a, b); }

}  // namespace tracecache
